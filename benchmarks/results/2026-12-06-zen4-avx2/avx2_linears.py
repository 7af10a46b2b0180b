"""The K formats' 8960 x 1536 linears on one path (default avx2), 2 threads: Q4_K packed in eights (Q4_K_X8), Q5_K
and Q6_K in GGUF's layout and packed in eights (Q5_K_X8, Q6_K_X8); 4 random matrices each read in turn (more than
the L3 holds), min of 10 passes per row count, ROUNDS rounds; every layout's bits checked against the scalar
reference first. Pass `no-q5-x8` on a tree where that path read Q5_K_X8 through the scalar reference (before
2026-12-06; ~14 ms a row).
usage: PYTHONPATH=<tree>/src python avx2_linears.py [PATH] [ROUNDS] [no-q5-x8]   (run from the tree's root)"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_kernels as g

sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks  # noqa: E402

assert g.load(progress=False)
torch.set_num_threads(2)
path = sys.argv[1] if len(sys.argv) > 1 else "avx2"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
N, K = 8960, 1536
rng = np.random.default_rng(0)
x = torch.randn(16, K)


def plain(name):
    return [torch.from_numpy(random_blocks(name, N, K, rng, scale=0.05)) for _ in range(4)]


q4, q5, q6 = plain("Q4_K"), plain("Q5_K"), plain("Q6_K")
cases = [("Q4_K_X8", [g.repack_q4_k_x8(m) for m in q4], g.Q4_K_X8, q4[0], 12), ("Q5_K", q5, 13, q5[0], 13)]
if "no-q5-x8" not in sys.argv:
    cases.append(("Q5_K_X8", [g.repack_q5_k_x8(m) for m in q5], g.Q5_K_X8, q5[0], 13))
cases += [("Q6_K", q6, 14, q6[0], 14), ("Q6_K_X8", [g.repack_q6_k_x8(m) for m in q6], g.Q6_K_X8, q6[0], 14)]
for name, mats, type_id, reference, plain_type in cases:
    for rows in (1, 3, 8):
        assert torch.equal(g.linear_q8_on(x[:rows], mats[0], type_id, K, path).view(torch.int32),
                           g.linear_q8_on(x[:rows], reference, plain_type, K, "scalar").view(torch.int32)), name
print("path", path, "us per call")
for r in range(rounds):
    for name, mats, type_id, _, _ in cases:
        line = []
        for rows in (1, 2, 4, 8, 16):
            best = 1e9
            for _ in range(10):
                for m in mats:
                    start = time.perf_counter()
                    g.linear_q8_on(x[:rows], m, type_id, K, path)
                    best = min(best, time.perf_counter() - start)
            line.append(f"{rows}: {best * 1e6:.0f}")
        print(r, name, " ".join(line), flush=True)
