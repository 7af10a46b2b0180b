"""A/B in one process: the native forward with each decoder layer as one kernel op (fused) and step by step,
alternated. Usage: PYTHONPATH=src python fused_ab.py MODEL ROWS REPS (300 tokens of context, min / median ms)."""
import sys, time, torch
from multidraft.models import load_model
from multidraft.eval.forward_cost import tokens
lm = load_model(sys.argv[1]); rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
nat = lm.runner_object.native
cache = lm.new_cache()
lm.forward(cache, tokens(lm, 1000, 300), logits_rows=slice(-1, None))
def one():
    lm.forward(cache, tokens(lm, 2000, rows), parents=list(range(-1, rows - 1))); cache.crop(300)
res = {True: [], False: []}
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 30):
    for f in (True, False):
        nat.fuse = f
        t = time.perf_counter(); one(); res[f].append(time.perf_counter() - t)
for f in (True, False):
    ts = sorted(res[f]); print(sys.argv[1], "rows", rows, "fused" if f else "steps", f"min {ts[0]*1e3:.2f} med {ts[len(ts)//2]*1e3:.2f} ms")
