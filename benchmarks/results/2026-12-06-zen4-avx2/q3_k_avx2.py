"""Q3_K packed (Q3_K_X8, from the Q6_K blocks it converts to at load) on one path (default avx2), 8960 x 1536, 2
threads, 4 random matrices read in turn, min of 10 passes per row count; bits checked against the scalar reference.
usage: PYTHONPATH=<tree>/src python q3_k_avx2.py [PATH] [ROUNDS]   (run from the tree's root)"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_convert, gguf_kernels as g

sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks  # noqa: E402

assert g.load(progress=False)
torch.set_num_threads(2)
path = sys.argv[1] if len(sys.argv) > 1 else "avx2"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
N, K = 8960, 1536
rng = np.random.default_rng(0)
q6 = [torch.from_numpy(gguf_convert.q3_k_as_q6_k(random_blocks("Q3_K", N, K, rng, scale=0.05))) for _ in range(4)]
mats = [g.repack_q6_k_q3_k_x8(m) for m in q6]
x = torch.randn(16, K)
for rows in (1, 3, 8):
    assert torch.equal(g.linear_q8_on(x[:rows], mats[0], g.Q3_K_X8, K, path).view(torch.int32),
                       g.linear_q8_on(x[:rows], q6[0], 14, K, "scalar").view(torch.int32))
for r in range(rounds):
    line = []
    for rows in (1, 2, 4, 8, 16):
        best = 1e9
        for _ in range(10):
            for m in mats:
                start = time.perf_counter()
                g.linear_q8_on(x[:rows], m, g.Q3_K_X8, K, path)
                best = min(best, time.perf_counter() - start)
        line.append(f"{rows}: {best * 1e6:.0f}")
    print(path, r, "Q3_K_X8 us per call", " ".join(line), flush=True)
