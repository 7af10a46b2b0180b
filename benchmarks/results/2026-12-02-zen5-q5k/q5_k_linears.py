"""Q5_K plain, Q5_K_X8 and Q4_K_X8 on the path chosen here: 50 random 8960 x 1536 matrices read in turn (from
memory), 2 threads, min of 5 passes. Usage: PYTHONPATH=src python q5_k_linears.py"""
import time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
plain = [g.random_blocks(13, N, K, gen) for _ in range(50)]
x8 = [g.repack_q5_k_x8(b) for b in plain]
q4 = [g.repack_q4_k_x8(g.random_blocks(12, N, K, gen)) for _ in range(50)]
print("path", g.isa(), "(50 random 8960 x 1536 matrices in turn, min of 5 passes, us per matrix)")
for M in (1, 2, 4, 8, 16, 64):
    x = torch.randn(M, K)
    best = {}
    for rep in range(5):
        for name, mats, t in (("Q5_K plain", plain, 13), ("Q5_K_X8", x8, g.Q5_K_X8), ("Q4_K_X8", q4, g.Q4_K_X8)):
            t0 = time.perf_counter()
            for w in mats: g.linear_q8(x, w, t, K)
            best[name] = min(best.get(name, 1e9), (time.perf_counter() - t0) / len(mats))
    print(f"rows {M:3d}: " + ", ".join(f"{k} {v*1e6:6.0f}" for k, v in best.items()))
