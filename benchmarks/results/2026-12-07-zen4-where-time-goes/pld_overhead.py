"""Where a lossless method's time goes on code edits: wall time against the time inside lm.forward, per method.
From the repository root: PYTHONPATH=src python THIS [N_EDITS] [METHODS]"""
import sys, time
import torch
import multidraft
from multidraft.eval.tasks import load_task
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
items = load_task("code_edit", limit=int(sys.argv[1]) if len(sys.argv) > 1 else 4)
methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["greedy", "pld", "suffix"]
spent = {"forward": 0.0, "calls": 0, "rows": 0}
cls = type(lm)
real = cls.forward
def timed(self, cache, token_ids=None, *a, **k):
    t = time.perf_counter()
    out = real(self, cache, token_ids, *a, **k)
    spent["forward"] += time.perf_counter() - t
    spent["calls"] += 1
    spent["rows"] += len(token_ids) if token_ids is not None else 0
    return out
cls.forward = timed
multidraft.generate(lm, items[0].messages, method="greedy", max_new_tokens=8)     # warm-up
for method in methods:
    for key in spent: spent[key] = 0
    total, tokens, reference = 0.0, 0, []
    for item in items:
        t = time.perf_counter()
        g = multidraft.generate(lm, item.messages, method=method, max_new_tokens=128)
        total += time.perf_counter() - t
        tokens += len(g.token_ids)
    print(f"{method:8s} {tokens/total:6.2f} tok/s; {total:6.2f} s, forwards {spent['forward']:6.2f} s in "
          f"{spent['calls']} calls ({spent['rows']} rows), outside {total - spent['forward']:5.2f} s "
          f"({(total - spent['forward']) / total * 100:4.1f}%), {1000 * (total - spent['forward']) / max(1, spent['calls']):.2f} ms a call", flush=True)
