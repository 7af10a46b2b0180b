"""Q6_K_X16 and Q4_K_X8 on the amx path at given row counts, 1 and 2 threads, two random 1024 x 1536 matrices in
turn, min of 40: run on a build with VNNI_MAX_ROWS 16 and one with 8 to find where the tiles win.
Usage: PYTHONPATH=src python amx_crossover.py 8 9 10 12 16"""
import sys, time, torch, os
from multidraft.models import gguf_kernels as g
g.load()
gen = torch.Generator().manual_seed(0)
K, N = 1536, 1024
x16 = [g.repack_q6_k_x16(g.random_blocks(14, N, K, gen)) for _ in range(2)]
x8 = [g.repack_q4_k_x8(g.random_blocks(12, N, K, gen)) for _ in range(2)]
rows = [int(a) for a in sys.argv[1:]]
xs = {M: torch.randn(M, K) for M in rows}
for threads in (1, 2):
    torch.set_num_threads(threads)
    best = {}
    for rep in range(40):
        for M in rows:
            for name, mats, t in (("q6", x16, g.Q6_K_X16), ("q4", x8, g.Q4_K_X8)):
                t0 = time.perf_counter()
                for _ in range(10):
                    for w in mats: g.linear_q8_on(xs[M], w, t, K, "amx")
                best[(name, M)] = min(best.get((name, M), 1e9), (time.perf_counter() - t0) / 20)
    for name in ("q6", "q4"):
        print(threads, name, "  ".join(f"{M}: {best[(name, M)]*1e6:.1f}" for M in rows))
