"""Linears vs the rest of a prefill (a forward of 16-256 rows on an empty cache, every row's logits) on the native
runner, from the kernels' own clock. Usage: PYTHONPATH=src python benchmarks/results/2026-11-29-amx-engine/prefill_split.py"""
import time, torch, multidraft
from multidraft.models import gguf_kernels as g
from multidraft.models.kv_cache import GrowingKVCache
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", dtype="float32")
nf = lm.runner_object.native
for rows in (16, 64, 128, 256):
    best = None
    for rep in range(3):
        cache = GrowingKVCache()
        ids = torch.randint(0, 1000, (rows,))
        g.linear_time(True)
        t = time.perf_counter()
        nf.run(cache, ids, None, torch.arange(rows), torch.ones(rows, rows, dtype=torch.bool).tril(), prefill=True)
        total = time.perf_counter() - t
        lin = g.linear_time(False) / 1e9
        if best is None or total < best[0]: best = (total, lin)
    print(f"{rows} rows: {1e3*best[0]:.0f} ms, linears {1e3*best[1]:.0f} ms ({best[1]/best[0]:.0%}), {1e3*best[0]/rows:.2f} ms/row")
