"""Weights prefetched non-temporally or into L2, alternating in one process (gguf_kernels.set_nontemporal_weights,
the same bits either way): ten forwards of ROWS rows per mode per round after 300 cached tokens, min and median.
Usage: PYTHONPATH=src python nontemporal_ab.py ROUNDS ROWS [rev [MODEL]] (rev: into L2 first in each round)."""
import statistics, sys, time, torch
import multidraft
from multidraft.models import gguf_kernels
torch.set_num_threads(2)
rows = int(sys.argv[2])
lm = multidraft.load_model(sys.argv[4] if len(sys.argv) > 4 else "qwen2.5-coder-1.5b", runner="auto")
cache = lm.new_cache()
lm.forward(cache, [(1000 + i) % 40000 for i in range(300)], logits_rows=slice(-1, None))
res = {True: [], False: []}
for rnd in range(int(sys.argv[1])):
    for nta in ((False, True) if len(sys.argv) > 3 else (True, False)):
        gguf_kernels.set_nontemporal_weights(nta)
        for i in range(10):
            start = time.perf_counter()
            lm.forward(cache, [(2000 + i + j) % 40000 for j in range(rows)])
            res[nta].append(time.perf_counter() - start)
            cache.crop(300)
for nta, v in res.items():
    print(f"{'non-temporal' if nta else 'into L2':13s} rows {rows}: min {min(v)*1e3:.1f} median {statistics.median(v)*1e3:.1f} ms")
