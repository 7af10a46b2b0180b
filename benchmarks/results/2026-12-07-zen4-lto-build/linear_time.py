"""The 1.5B's two block formats (Q4_K, Q6_K; 8960 x 1536 of random blocks) on each instruction-set path: us a call,
hot on 1 thread at 1 / 8 / 16 rows (min of 30). Run once per kernel library (MULTIDRAFT_HOME picks the build).

    MULTIDRAFT_HOME=HOME PYTHONPATH=TREE/src python benchmarks/results/2026-12-07-zen4-lto-build/linear_time.py
"""
import os, sys, time
import numpy as np, torch
from multidraft.models import gguf_kernels as g
sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks
assert g.load(progress=False)
N, K = 8960, 1536
torch.set_num_threads(1)


def best_us(packed, type_id, rows, rounds=30):
    x = torch.randn(rows, K, generator=torch.Generator().manual_seed(rows))
    g.linear_q8(x, packed, type_id, K)
    best = 1e9
    for _ in range(rounds):
        start = time.perf_counter()
        g.linear_q8(x, packed, type_id, K)
        best = min(best, time.perf_counter() - start)
    return f"{rows}: {best * 1e6:5.0f}"


print(os.environ.get("MULTIDRAFT_HOME"))
for isa, formats in (("avx512-vnni", (("Q4_K", g.Q4_K_X8, g.repack_q4_k_x8), ("Q6_K", g.Q6_K_X16, g.repack_q6_k_x16))),
                     ("avx2", (("Q4_K", g.Q4_K_X8, g.repack_q4_k_x8), ("Q6_K", g.Q6_K_X8, g.repack_q6_k_x8)))):
    g.use_isa(isa)
    for name, type_id, repack in formats:
        blocks = torch.from_numpy(random_blocks(name, N, K, np.random.default_rng(0), scale=0.05))
        packed = repack(blocks)
        print(f"{isa:12s} {name}", " ".join(best_us(packed, type_id, rows) for rows in (1, 8, 16)))
