"""The 32-value formats' packed kernel (X16_32) alone: 8 random 8960 x 1536 matrices (gate-sized, 13 MB of Q8_0 each,
read from memory in turn) per format, linear_q8 at 1 / 4 / 8 / 16 rows, 2 threads, min of 20 passes; the bits of each
packed matrix against the scalar reference first. usage: PYTHONPATH=src python x16_32_linears.py [FORMAT ...]"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_kernels as g

sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks  # noqa: E402

assert g.load(progress=False)
torch.set_num_threads(2)
names = sys.argv[1:] or ["Q4_0", "Q8_0", "IQ4_NL", "Q4_1"]
types = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q8_0": 8, "IQ4_NL": 20}
N, K = 8960, 1536
rng = np.random.default_rng(0)
print("path", g.isa())
for name in names:
    plain = types[name]
    mats = [g.repack_x16_32(torch.from_numpy(random_blocks(name, N, K, rng, scale=0.05)), plain) for _ in range(8)]
    x = torch.randn(16, K)
    check = torch.from_numpy(random_blocks(name, 32, K, rng, scale=0.05))
    assert torch.equal(g.linear_q8(x, g.repack_x16_32(check, plain), g.X16_32[plain], K).view(torch.int32),
                       g.linear_q8_on(x, check, plain, K, "scalar").view(torch.int32))
    line = []
    for rows in (1, 4, 8, 16):
        best = 1e9
        for _ in range(20):
            for m in mats:
                start = time.perf_counter()
                g.linear_q8(x[:rows], m, g.X16_32[plain], K)
                best = min(best, time.perf_counter() - start)
        line.append(f"{rows}: {best * 1e6:.0f} us")
    print(name, " ".join(line), flush=True)
