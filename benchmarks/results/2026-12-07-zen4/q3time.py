"""Q3_K_X8 (Q3_K as Q6_K blocks, packed) 8960 x 1536 of random blocks on avx512-vnni, hot, 1 thread: us at
1 / 2 / 4 / 8 / 16 rows (min of 15)."""
import sys, time
import numpy as np, torch
from multidraft.models import gguf_kernels as g, gguf_convert
sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks
assert g.load(progress=False)
torch.set_num_threads(1)
g.use_isa("avx512-vnni")
N, K = 8960, 1536
blocks = torch.from_numpy(gguf_convert.q3_k_as_q6_k(random_blocks("Q3_K", N, K, np.random.default_rng(0), scale=0.05)))
packed = g.repack_q6_k_q3_k_x8(blocks)
out = []
for rows in (1, 2, 4, 8, 16):
    x = torch.randn(rows, K)
    g.linear_q8(x, packed, g.Q3_K_X8, K)
    best = 1e9
    for _ in range(15):
        s = time.perf_counter(); g.linear_q8(x, packed, g.Q3_K_X8, K); best = min(best, time.perf_counter() - s)
    out.append(f"{rows}: {best * 1e6:5.0f}")
print("Q3_K_X8 avx512-vnni", " ".join(out))
