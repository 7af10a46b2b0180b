"""Q6_K in GGUF's layout on the avx512-vnni path (what a VNNI CPU without VBMI-packed Q6_K ran): cost per row count,
two random 1024 x 1536 matrices in turn, min of 30. Usage: PYTHONPATH=src python q6_gguf_rows.py 1 4 8 16 32"""
import sys, time, torch, os
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(int(os.environ.get("THREADS", 2)))
gen = torch.Generator().manual_seed(0)
K, N = 1536, 1024
q6 = [g.random_blocks(14, N, K, gen) for _ in range(2)]
rows = [int(a) for a in sys.argv[1:]]
xs = {M: torch.randn(M, K) for M in rows}
best = {}
for rep in range(30):
    for M in rows:
        t0 = time.perf_counter()
        for _ in range(10):
            for w in q6: g.linear_q8_on(xs[M], w, 14, K, "avx512-vnni")
        best[M] = min(best.get(M, 1e9), (time.perf_counter() - t0) / 20)
print("q6k gguf avx512-vnni", "  ".join(f"{M}: {best[M]*1e6:.1f} ({best[M]/best[rows[0]]:.2f}x)" for M in rows))
