"""One packed 8960 x 1536 matrix (random blocks) on one path, hot, us per call (min of 20) at 1 / 4 / 8 / 16 rows.

    PYTHONPATH=TREE/src python avx2_rows.py PATH FORMAT [THREADS]    # run from the repository's root
"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_kernels as g

sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks  # noqa: E402

assert g.load(progress=False)
path, fmt = sys.argv[1], sys.argv[2]
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
torch.set_num_threads(threads)
N, K = 8960, 1536
rng = np.random.default_rng(0)
plain = {"Q4_K_X8": "Q4_K", "Q5_K_X8": "Q5_K", "Q6_K_X8": "Q6_K", "Q3_K_X8": "Q3_K", "Q2_K_X8": "Q2_K",
         "IQ4_XS_X8": "IQ4_XS"}[fmt]
blocks = torch.from_numpy(random_blocks(plain, N, K, rng, scale=0.05))
if fmt == "Q3_K_X8":
    from multidraft.models import gguf_convert
    m = g.repack_q6_k_q3_k_x8(torch.from_numpy(gguf_convert.q3_k_as_q6_k(blocks.numpy())))
else:
    m = g.repack(blocks, getattr(g, fmt))
t_id = getattr(g, fmt)
x = torch.randn(16, K)
out = []
for rows in (1, 4, 8, 16):
    best = 1e9
    for _ in range(20):
        start = time.perf_counter()
        g.linear_q8_on(x[:rows], m, t_id, K, path)
        best = min(best, time.perf_counter() - start)
    out.append(f"{rows}:{best*1e6:.0f}")
print(fmt, path, f"{threads}t us", " ".join(out), flush=True)
