"""Q5_K_X8, Q4_K_X8 and plain Q5_K, one 8960 x 1536 matrix each (hot in cache), 1 thread, min of 40. Usage: PYTHONPATH=src python q5_k_hot.py"""
import time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(1)
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
p5 = g.random_blocks(13, N, K, gen); x5 = g.repack_q5_k_x8(p5); x4 = g.repack_q4_k_x8(g.random_blocks(12, N, K, gen))
for M in (1, 2, 8):
    x = torch.randn(M, K)
    for name, w, t in (("Q5_K_X8", x5, g.Q5_K_X8), ("Q4_K_X8", x4, g.Q4_K_X8), ("Q5_K plain", p5, 13)):
        best = 1e9
        for rep in range(40):
            t0 = time.perf_counter(); g.linear_q8(x, w, t, K); best = min(best, time.perf_counter() - t0)
        print(f"{name:10s} rows {M}: {best*1e6:6.0f} us hot, 1 thread")
