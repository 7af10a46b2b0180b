"""The 32-value formats on a 256-bit path (default avx2): GGUF's layout against the X16 layout (q32_x16_256.inc), one
process, 6 random 8960 x 1536 matrices per format read in turn, min of 10 passes per layout, rounds alternating, 2
threads; Q4_K packed in eights beside them. usage: PYTHONPATH=src python x16_32_256_linears.py [PATH] [ROUNDS]"""
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
cases = []
for name, plain in (("Q4_0", 2), ("Q8_0", 8), ("IQ4_NL", 20), ("Q4_1", 3), ("Q5_0", 6)):
    mats = [torch.from_numpy(random_blocks(name, N, K, rng, scale=0.05)) for _ in range(6)]
    cases.append((name, "GGUF", mats, plain))
    cases.append((name, "X16", [g.repack_x16_32(m, plain) for m in mats], g.X16_32[plain]))
    assert torch.equal(g.linear_q8_on(x, cases[-1][2][0], g.X16_32[plain], K, path).view(torch.int32),
                       g.linear_q8_on(x, mats[0], plain, K, "scalar").view(torch.int32))
q4k = [g.repack_q4_k_x8(torch.from_numpy(random_blocks("Q4_K", N, K, rng, scale=0.05))) for _ in range(6)]
cases.append(("Q4_K", "X8", q4k, g.Q4_K_X8))
print("path", path)
for r in range(rounds):
    for name, layout, mats, type_id in cases:
        line = []
        for rows in (1, 4, 8, 16):
            best = 1e9
            for _ in range(10):
                for m in mats:
                    start = time.perf_counter()
                    g.linear_q8_on(x[:rows], m, type_id, K, path)
                    best = min(best, time.perf_counter() - start)
            line.append(f"{rows}: {best * 1e6:.0f} us")
        print(r, name, layout, " ".join(line), flush=True)
