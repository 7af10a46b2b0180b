"""Q6_K_X16 on the avx512-vnni path, 1536 x 8960 and 1536 x 1536 (the 1.5B's shapes), rows 1..16, hot (in L3): min of
40 calls per row count, one line per process. Usage: PYTHONPATH=<tree>/src python q6_rows.py THREADS; run two trees
alternately and compare with ab_stat.py (a file of lines "TREE tTHREADS <this script's line>")."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
gen = torch.Generator().manual_seed(0)
th = int(sys.argv[1]); torch.set_num_threads(th)
out = []
for (N, K) in ((1536, 8960), (1536, 1536)):
    w = g.repack(g.random_blocks(14, N, K, gen), g.Q6_K_X16)
    for M in (1, 2, 4, 8, 16):
        x = torch.randn(M, K, generator=gen)
        best = 1e9
        for rep in range(40):
            t0 = time.perf_counter()
            g.linear_q8_on(x, w, g.Q6_K_X16, K, "avx512-vnni")
            best = min(best, time.perf_counter() - t0)
        out.append(f"{N}x{K} M{M}:{best*1e6:.0f}")
print(" ".join(out))
