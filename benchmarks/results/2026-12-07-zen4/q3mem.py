"""Q3_K_X8 8960 x 1536, 8 copies in turn (from memory), 2 threads, avx512-vnni: us per call at 1/4/8/16 rows, min of 5 rounds."""
import sys, time
import numpy as np, torch
from multidraft.models import gguf_kernels as g, gguf_convert
sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks
assert g.load(progress=False)
torch.set_num_threads(2)
g.use_isa("avx512-vnni")
N, K = 8960, 1536
blocks = torch.from_numpy(gguf_convert.q3_k_as_q6_k(random_blocks("Q3_K", N, K, np.random.default_rng(0), scale=0.05)))
copies = [g.repack_q6_k_q3_k_x8(blocks) for _ in range(8)]
out = []
for rows in (1, 4, 8, 16):
    x = torch.randn(rows, K)
    best = 1e9
    for _ in range(5):
        s = time.perf_counter()
        for c in copies: g.linear_q8(x, c, g.Q3_K_X8, K)
        best = min(best, (time.perf_counter() - s) / len(copies))
    out.append(f"{rows}: {best * 1e6:5.0f}")
print("Q3_K_X8 from memory, 2 threads", " ".join(out))
