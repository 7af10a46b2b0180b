"""Q4_K_X8 (8960 x 1536, hot in cache) on one path at given row counts, 1 and 2 threads: us per call and GMAC/s per
core. Usage: PYTHONPATH=src python q4_k_x8_rows.py 1,2,4,8,16,64 avx-vnni"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load()
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
w = g.repack_q4_k_x8(g.random_blocks(12, N, K, gen))
path = sys.argv[2] if len(sys.argv) > 2 else "avx512-vnni"
rows = [int(r) for r in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1,2,4,8,16,64]
for th in (1, 2):
    torch.set_num_threads(th)
    for M in rows:
        x = torch.randn(M, K)
        best = 1e9
        for rep in range(30):
            t0 = time.perf_counter(); g.linear_q8_on(x, w, g.Q4_K_X8, K, path); best = min(best, time.perf_counter() - t0)
        print(f"q4 threads {th} rows {M:3d}: {best*1e6:7.0f} us  {M*N*K/best/1e9/th:6.0f} GMAC/s/core")
