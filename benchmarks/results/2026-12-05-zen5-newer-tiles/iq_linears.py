"""us per 8960 x 1536 linear (random blocks, hot), 2 threads, min of 30, at 1 / 4 / 8 / 16 rows: IQ2_XXS and IQ3_XXS
on their kernels against IQ4_XS and Q4_K in GGUF's layout and packed (IQ4_XS_X8, Q4_K_X8).
usage: PYTHONPATH=src python iq_linears.py [PATH]"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_kernels as g
from tests.tiny_gguf import random_blocks

g.load(progress=False)
path = sys.argv[1] if len(sys.argv) > 1 else g.isa()
torch.set_num_threads(2)
rng = np.random.default_rng(0)
N, K = 8960, 1536
mats = {name: (torch.from_numpy(random_blocks(name, N, K, rng, scale=0.05)), t)
        for name, t in (("IQ2_XXS", 16), ("IQ3_XXS", 18), ("IQ4_XS", 23), ("Q4_K", 12))}
mats["IQ4_XS_X8"] = (g.repack(mats["IQ4_XS"][0], g.IQ4_XS_X8), g.IQ4_XS_X8)
mats["Q4_K_X8"] = (g.repack(mats["Q4_K"][0], g.Q4_K_X8), g.Q4_K_X8)
for rows in (1, 4, 8, 16):
    x = torch.randn(rows, K)
    line = []
    for name, (blocks, t) in mats.items():
        g.linear_q8_on(x, blocks, t, K, path)
        best = 1e9
        for _ in range(30):
            start = time.perf_counter()
            g.linear_q8_on(x, blocks, t, K, path)
            best = min(best, time.perf_counter() - start)
        line.append(f"{name} {best * 1e6:.0f}")
    print(path, rows, "rows:", ", ".join(line), flush=True)
