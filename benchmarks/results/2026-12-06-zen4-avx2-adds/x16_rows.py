"""The 32-value formats packed in sixteens (X16_32) on one path: one 8960 x 1536 matrix of random blocks, hot, us per
call (min of 20) at 1 / 4 / 8 / 16 rows, after checking its bits against the scalar path's on GGUF's layout.

    PYTHONPATH=TREE/src python x16_rows.py PATH [THREADS]    # run from the repository's root
"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_kernels as g

sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks  # noqa: E402

assert g.load(progress=False)
path = sys.argv[1]
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
N, K = 8960, 1536
rng = np.random.default_rng(0)
x = torch.randn(16, K)
for name, type_id in (("Q4_0", 2), ("Q4_1", 3), ("Q5_0", 6), ("Q5_1", 7), ("Q8_0", 8)):
    blocks = torch.from_numpy(random_blocks(name, N, K, rng, scale=0.05))
    packed = g.repack(blocks, g.X16_32[type_id])
    for rows in (1, 3, 8, 13):
        assert torch.equal(g.linear_q8_on(x[:rows], packed, g.X16_32[type_id], K, path).view(torch.int32),
                           g.linear_q8_on(x[:rows], blocks, type_id, K, "scalar").view(torch.int32)), name
    out = []
    for rows in (1, 4, 8, 16):
        best = 1e9
        for _ in range(20):
            start = time.perf_counter()
            g.linear_q8_on(x[:rows], packed, g.X16_32[type_id], K, path)
            best = min(best, time.perf_counter() - start)
        out.append(f"{rows}:{best * 1e6:.0f}")
    print(name, path, " ".join(out), flush=True)
