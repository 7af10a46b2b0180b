"""Q6_K and Q4_K in GGUF's layout (8960 x 1536, hot in cache) on the avx-vnni, avx2 and vnni-emulated paths at given
row counts, 1 and 2 threads. Usage: PYTHONPATH=src python plain_k_rows.py 1,4,8"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load()
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
w6 = g.random_blocks(14, N, K, gen); w4 = g.random_blocks(12, N, K, gen)
rows = [int(r) for r in sys.argv[1].split(",")]
for th in (1, 2):
    torch.set_num_threads(th)
    for M in rows:
        x = torch.randn(M, K)
        for name, ww, t, path in (("q6 plain avx-vnni", w6, 14, "avx-vnni"), ("q6 plain avx2", w6, 14, "avx2"), ("q6 plain vnni-emul", w6, 14, "vnni-emulated"), ("q4 plain avx-vnni", w4, 12, "avx-vnni"), ("q4 plain avx2", w4, 12, "avx2")):
            best = 1e9
            for rep in range(15):
                t0 = time.perf_counter(); g.linear_q8_on(x, ww, t, K, path); best = min(best, time.perf_counter() - t0)
            print(f"{name:18s} threads {th} rows {M:3d}: {best*1e6:7.0f} us  {M*N*K/best/1e9/th:6.0f} GMAC/s/core")
