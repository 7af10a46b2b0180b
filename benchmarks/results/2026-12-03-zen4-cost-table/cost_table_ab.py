"""In-process A/B of two cost tables for the adaptive draft length, on the agent episodes' steps.

For every step of the 3 agent episodes (prompts from the greedy answers, as `bench agentic run` builds them), runs
`method` once with each table in turn (order flipped every step); each table only ever sees its own steps. With
SPIKE = P > 0, each recorded step's seconds are doubled with probability P (seeded per table): a VM's slowed steps.
Usage: git show 29489bc:src/multidraft/decoders/draft_length.py > /tmp/old_draft_length.py
       PYTHONPATH=src python cost_table_ab.py /tmp/old_draft_length.py METHOD SPIKE [TASKS]
"""
import importlib.util, random, sys, time
import multidraft
from multidraft.decoders import draft_length as new
from multidraft.eval.presets.agentic import episodes, step_prompts

spec = importlib.util.spec_from_file_location("old_dl", sys.argv[1])
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
method, spike = sys.argv[2], float(sys.argv[3])
tasks = (sys.argv[4] if len(sys.argv) > 4 else "agent_edit,agent_fix,agent_chat").split(",")

def noisy(cls, seed):
    class Noisy(cls):
        rng = random.Random(seed)
        def record(self, n, s):
            super().record(n, s * 2.0 if self.rng.random() < spike else s)
    return Noisy()

lm = multidraft.load_model("qwen2.5-coder-1.5b", threads=2)
tables = {"old": noisy(old.ForwardCosts, 1), "new": noisy(new.ForwardCosts, 1)}
caches = {k: multidraft.PrefixCache(512) for k in tables}   # each table its own, as --prefix-cache gives each row
totals = {k: [0, 0.0, 0] for k in tables}
flip = 0
for task, item in episodes(tasks, 1, "test"):
    multidraft.generate(lm, lm.encode(item.input)[:32], method=method, max_new_tokens=4)
    def answer(step, ids):
        global flip
        ref = multidraft.generate(lm, ids, method="suffix", max_new_tokens=256)
        order = ["old", "new"] if flip % 2 == 0 else ["new", "old"]
        flip += 1
        line = []
        for name in order:
            new._costs[lm] = {lm.runner: tables[name]}
            g = multidraft.generate(lm, ids, method=method, max_new_tokens=256, prefix_cache=caches[name])
            assert g.token_ids == ref.token_ids
            s = g.stats
            totals[name][0] += len(g.token_ids); totals[name][1] += s.total_time; totals[name][2] += s.verification_calls
            line.append(f"{name} {s.total_time:5.2f}s {s.verification_calls:3d} calls")
        print(f"{item.id} step {step} {len(ids)} prompt {len(ref.token_ids)} new | " + " | ".join(line), flush=True)
        return ref.text
    step_prompts(lm, item, answer)
for name, (n, sec, calls) in totals.items():
    print(f"{name}: {n} tokens {sec:.2f} s {n / sec:.2f} tok/s, {calls} calls, acceptance {n / calls:.2f}")
    tab = tables[name]
    print("   relative cost at 1..16:", " ".join(f"{tab.relative(k):.2f}" for k in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)))
print("new table's recent samples (ms):", {n: [round(x * 1e3) for x in d] for n, d in sorted(tables["new"]._recent.items())})
print("old table (ms):", {n: round(x * 1e3) for n, x in sorted(tables["old"].seconds.items())})
