"""The share of a forward outside the GGUF linears, timed by the kernels' own clock (gguf_kernels.linear_time).
Usage: PYTHONPATH=src python outside_share.py MODEL ROWS REPS (300 tokens of context)."""
import sys, time, torch
from multidraft.models import load_model, gguf_kernels
from multidraft.eval.forward_cost import tokens
lm = load_model(sys.argv[1]); rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
cache = lm.new_cache()
lm.forward(cache, tokens(lm, 1000, 300), logits_rows=slice(-1, None))
def one():
    lm.forward(cache, tokens(lm, 2000, rows), parents=list(range(-1, rows - 1))); cache.crop(300)
for _ in range(5): one()
res = []
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 30):
    gguf_kernels.linear_time(True)
    t = time.perf_counter(); one(); total = time.perf_counter() - t
    lin = gguf_kernels.linear_time(False) / 1e9
    res.append((total, lin))
res.sort()
t, l = res[0]; tm, lm_ = res[len(res)//2]
print(f"{sys.argv[1]} rows {rows}: min total {t*1e3:.2f} ms linears {l*1e3:.2f} outside {(t-l)*1e3:.2f} ({(t-l)/t*100:.0f}%); median total {tm*1e3:.2f} outside {(tm-lm_)/tm*100:.0f}%")
