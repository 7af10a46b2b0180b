"""Q4_K_X8 and Q6_K_X16 on one path at given row counts: two random N x 1536 matrices (N = 1024: in L2) in turn, ten
calls a sample, min of PASSES (100) samples, THREADS threads (2). Run it on two checkouts in alternating processes.
Usage: THREADS=1 PYTHONPATH=src python warm_kernels.py amx 1 4 8"""
import sys, time, torch, os
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(int(os.environ.get("THREADS", 2)))
gen = torch.Generator().manual_seed(0)
K, N = 1536, int(os.environ.get("N", 1024))
x8 = [g.repack_q4_k_x8(g.random_blocks(12, N, K, gen)) for _ in range(2)]
x16 = [g.repack_q6_k_x16(g.random_blocks(14, N, K, gen)) for _ in range(2)]
path = sys.argv[1]; rows = [int(a) for a in sys.argv[2:]]
xs = {M: torch.randn(M, K) for M in rows}
best = {}
for rep in range(int(os.environ.get("PASSES", 100))):
    for M in rows:
        for name, mats, t in (("q4x8", x8, g.Q4_K_X8), ("q6x16", x16, g.Q6_K_X16)):
            t0 = time.perf_counter()
            for _ in range(10):
                for w in mats: g.linear_q8_on(xs[M], w, t, K, path)
            best[(name, M)] = min(best.get((name, M), 1e9), (time.perf_counter() - t0) / 20)
for name in ("q4x8", "q6x16"):
    one = best[(name, rows[0])]
    print(name, "  ".join(f"{M}: {best[(name, M)]*1e6:.1f}" for M in rows))
