"""ROWS-row forwards of the 1.5B on the native runner (300 tokens cached), 40 of them: each one's wall time and its
kernels' stage clocks (linears, attention, layer steps), every fourth of them sorted, then the steps' median / min /
max.

    PYTHONPATH=src python benchmarks/results/2026-12-06-zen4-odd-rows/steps_per_forward.py ROWS
"""
import sys, time, torch, multidraft, statistics
from multidraft.eval.forward_cost import stage_timer
torch.set_num_threads(2)
view = multidraft.load_model("qwen2.5-coder-1.5b")
cache = view.new_cache()
view.forward(cache, list(range(1000, 1300)), logits_rows=slice(-1, None))
rows = int(sys.argv[1])
toks = list(range(2000, 2000 + rows)); res = []
for _ in range(40):
    with stage_timer() as spent:
        s = time.perf_counter(); view.forward(cache, toks); t = time.perf_counter() - s
    cache.crop(300)
    res.append((t * 1e3, spent["layer steps"] * 1e3, spent["attention"] * 1e3, spent["linears"] * 1e3))
for r in sorted(res)[::4]: print("total %.1f steps %.2f attn %.2f lin %.1f" % r)
steps = [r[1] for r in res]
print("steps median %.2f min %.2f max %.2f" % (statistics.median(steps), min(steps), max(steps)))
