"""Q4_K_X8 (8960 x 1536 and 1536 x 1536) or Q6_K_X16 (1536 x 8960 and 1536 x 1536) on the avx512-vnni path, the
1.5B's shapes, rows 1..16, hot (in L3): min of 40 calls per row count, one line per process. Usage:
PYTHONPATH=<tree>/src python kernel_rows.py q4|q6 THREADS; run two trees alternately and compare with ab_stat.py (a
file of lines "TREE tTHREADS <this script's line>")."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
gen = torch.Generator().manual_seed(0)
plain, packed, shapes = {"q4": (12, g.Q4_K_X8, ((8960, 1536), (1536, 1536))),
                         "q6": (14, g.Q6_K_X16, ((1536, 8960), (1536, 1536)))}[sys.argv[1]]
th = int(sys.argv[2]); torch.set_num_threads(th)
out = []
for (N, K) in shapes:
    w = g.repack(g.random_blocks(plain, N, K, gen), packed)
    for M in (1, 2, 4, 8, 16):
        x = torch.randn(M, K, generator=gen)
        best = 1e9
        for rep in range(40):
            t0 = time.perf_counter()
            g.linear_q8_on(x, w, packed, K, "avx512-vnni")
            best = min(best, time.perf_counter() - t0)
        out.append(f"{N}x{K} M{M}:{best*1e6:.0f}")
print(" ".join(out))
