"""us per 8960 x 1536 linear (random blocks, hot), 2 threads, min of 30: IQ4_XS against Q4_K plain and Q4_K_X8.
usage: PYTHONPATH=src python iq4_linears.py [PATH [x [q2]]]  (x: also IQ4_XS_X8; q2: also Q2_K and Q2_K_X8)"""
import time, torch, numpy as np, sys
from multidraft.models import gguf_kernels as g
g.load()
path = sys.argv[1] if len(sys.argv) > 1 else g.isa()
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
N, K = 8960, 1536
mats = {"Q4_K": (g.random_blocks(12, N, K, gen), 12), "IQ4_XS": (g.random_blocks(23, N, K, gen), 23)}
mats["Q4_K_X8"] = (g.repack(mats["Q4_K"][0], g.Q4_K_X8), g.Q4_K_X8)
for rows in (1, 4, 8, 16):
    x = torch.randn(rows, K, generator=gen)
    line = []
    for name, (blocks, t) in mats.items():
        best = 1e9
        for _ in range(30):
            s = time.perf_counter(); g.linear_q8_on(x, blocks, t, K, path); best = min(best, time.perf_counter() - s)
        line.append(f"{name} {best * 1e6:.0f}")
    print(path, rows, "rows:", ", ".join(line))
if len(sys.argv) > 2:
    for rows in (1, 4, 8, 16):
        x = torch.randn(rows, K, generator=gen)
        b = g.repack(mats["IQ4_XS"][0], g.IQ4_XS_X8)
        best = 1e9
        for _ in range(30):
            s = time.perf_counter(); g.linear_q8_on(x, b, g.IQ4_XS_X8, K, path); best = min(best, time.perf_counter() - s)
        print(path, rows, "rows: IQ4_XS_X8", f"{best * 1e6:.0f}")
if len(sys.argv) > 3:
    q2 = g.random_blocks(10, N, K, gen)
    q2x = g.repack(q2, g.Q2_K_X8)
    for rows in (1, 4, 8, 16):
        x = torch.randn(rows, K, generator=gen)
        line = []
        for name, (b, t) in (("Q2_K", (q2, 10)), ("Q2_K_X8", (q2x, g.Q2_K_X8))):
            best = 1e9
            for _ in range(30):
                s = time.perf_counter(); g.linear_q8_on(x, b, t, K, path); best = min(best, time.perf_counter() - s)
            line.append(f"{name} {best * 1e6:.0f}")
        print(path, rows, "rows:", ", ".join(line))
