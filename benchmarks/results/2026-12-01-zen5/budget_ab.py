"""The draft budget's pricing of unseen row counts, A/B in one process: 8 code-edit requests x 64 tokens in one
Engine (max_num_seqs 8), greedy and pld, the old and the new ForwardCosts.cost alternating, each run with a fresh cost
table. Usage: python budget_ab.py REPS"""
import sys, time, statistics
import torch, multidraft
from multidraft.engine import Engine
from multidraft.request import Request
from multidraft.decoders import draft_length
from multidraft.eval.presets.serve_load import code_edit_prompts
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", runner="auto")
prompts = [lm.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in code_edit_prompts(16)]
new_cost = draft_length.ForwardCosts.cost


def old_cost(self, num_new):            # the rule before 23f7813: an unseen size costs the dearest smaller one
    with self._lock:
        if not self.seconds:
            return 1.0
        below = [seconds for n, seconds in self.seconds.items() if n <= num_new]
        return max(below) if below else min(self.seconds.values())
def run(method, clients, offset):
    engine = Engine(lm, max_num_seqs=8)
    reqs = [Request.build(prompts[(offset + i) % len(prompts)], method, max_new_tokens=64) for i in range(clients)]
    t = time.perf_counter()
    ids = [engine.submit(r) for r in reqs]
    engine.run()
    out = [engine.take(i) for i in ids]
    return sum(len(o.token_ids) for o in out) / (time.perf_counter() - t), [o.token_ids for o in out]
res = {}
for rep in range(int(sys.argv[1])):
    for variant in ("old", "new"):
        draft_length.ForwardCosts.cost = old_cost if variant == "old" else new_cost
        draft_length._costs.clear()                     # each run learns its own table
        for method in ("greedy", "pld"):
            tps, toks = run(method, 8, rep * 8)
            res.setdefault((method, variant), []).append(tps)
            res.setdefault(("tokens", method, variant, rep), toks)
for k, v in res.items():
    if k[0] != "tokens": print(k, ["%.1f" % x for x in v], "median %.1f" % statistics.median(v))
same = all(res[("tokens", m, "old", r)] == res[("tokens", m, "new", r)] for m in ("greedy", "pld") for r in range(int(sys.argv[1])))
print("identical tokens old/new:", same)
