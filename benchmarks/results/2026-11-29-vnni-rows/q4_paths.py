"""Q4_K_X8 on the amx path (tiles beyond VNNI_MAX_ROWS_Q4_K) against the avx512-vnni path (x8_vnni_rows in eights)
at given row counts, two random 1024 x 1536 matrices in turn, min of PASSES (40), one process.
Usage: THREADS=1 PYTHONPATH=src python q4_paths.py 8 9 12 16 24 32"""
import sys, time, torch, os
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(int(os.environ.get("THREADS", 2)))
gen = torch.Generator().manual_seed(0)
K, N = 1536, int(os.environ.get("N", 1024))
x8 = [g.repack_q4_k_x8(g.random_blocks(12, N, K, gen)) for _ in range(2)]
rows = [int(a) for a in sys.argv[1:]]
xs = {M: torch.randn(M, K) for M in rows}
best = {}
for rep in range(int(os.environ.get("PASSES", 40))):
    for M in rows:
        for path in ("amx", "avx512-vnni"):
            t0 = time.perf_counter()
            for _ in range(10):
                for w in x8: g.linear_q8_on(xs[M], w, g.Q4_K_X8, K, path)
            best[(path, M)] = min(best.get((path, M), 1e9), (time.perf_counter() - t0) / 20)
for path in ("amx", "avx512-vnni"):
    print(path, "  ".join(f"{M}: {best[(path, M)]*1e6:.1f}" for M in rows))
