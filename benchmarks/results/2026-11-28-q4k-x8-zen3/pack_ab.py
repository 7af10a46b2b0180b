"""A/B in one process: the native forward with Q4_K packed in eights (Q4_K_X8) and on the GGUF's blocks, alternated.
Usage: PYTHONPATH=src python pack_ab.py MODEL ROWS REPS (300 tokens of context; min / median ms)."""
import sys, time, torch
from multidraft.models import load_model, native
from multidraft.eval.forward_cost import tokens
lm = load_model(sys.argv[1]); rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
runner = lm.runner_object
matrices = [m.gguf_matrix for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
saved = [m.packed for m in matrices]
print(sum(p is not None for p in saved), "of", len(matrices), "matrices packed")
forwards = {True: runner.native}
for m in matrices: m.packed = None
forwards[False] = native.NativeForward(lm.model)
def use(packed):
    for m, p in zip(matrices, saved): m.packed = p if packed else None
    runner.native = forwards[packed]
cache = lm.new_cache()
lm.forward(cache, tokens(lm, 1000, 300), logits_rows=slice(-1, None))
def one():
    lm.forward(cache, tokens(lm, 2000, rows), parents=list(range(-1, rows - 1))); cache.crop(300)
res = {True: [], False: []}
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 30):
    for f in (True, False):
        use(f)
        t = time.perf_counter(); one(); res[f].append(time.perf_counter() - t)
for f in (True, False):
    ts = sorted(res[f]); print(sys.argv[1], "rows", rows, "packed" if f else "gguf  ", f"min {ts[0]*1e3:.2f} med {ts[len(ts)//2]*1e3:.2f} ms")
