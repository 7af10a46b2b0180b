"""Q3_K_X8 (Q3_K as Q6_K blocks, packed) 8960 x 1536 of random blocks on avx512-vnni: us a call, hot on 1 thread at
1 / 2 / 4 / 8 / 16 rows (min of 15), then 8 copies in turn (from memory) on 2 threads at 1 / 4 / 8 / 16 rows (min of
5 rounds).

    PYTHONPATH=TREE/src python benchmarks/results/2026-12-07-zen4/q3time.py
"""
import sys, time
import numpy as np, torch
from multidraft.models import gguf_kernels as g, gguf_convert
sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks
assert g.load(progress=False)
g.use_isa("avx512-vnni")
N, K = 8960, 1536
blocks = torch.from_numpy(gguf_convert.q3_k_as_q6_k(random_blocks("Q3_K", N, K, np.random.default_rng(0), scale=0.05)))


def best_us(copies, rows, rounds):
    x = torch.randn(rows, K)
    g.linear_q8(x, copies[0], g.Q3_K_X8, K)
    best = 1e9
    for _ in range(rounds):
        start = time.perf_counter()
        for c in copies:
            g.linear_q8(x, c, g.Q3_K_X8, K)
        best = min(best, (time.perf_counter() - start) / len(copies))
    return f"{rows}: {best * 1e6:5.0f}"


torch.set_num_threads(1)
hot = [g.repack_q6_k_q3_k_x8(blocks)]
print("Q3_K_X8 avx512-vnni", " ".join(best_us(hot, rows, 15) for rows in (1, 2, 4, 8, 16)))
torch.set_num_threads(2)
copies = [g.repack_q6_k_q3_k_x8(blocks) for _ in range(8)]
print("Q3_K_X8 from memory, 2 threads", " ".join(best_us(copies, rows, 5) for rows in (1, 4, 8, 16)))
