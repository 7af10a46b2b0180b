"""Packed Q4_K (X8) and Q6_K (X16) on one path, given row counts: 150 / 100 random 8960 x 1536 matrices read in turn
(1.2 GB each), the row counts and formats
interleaved, min over PASSES (default 5) passes. Usage: PYTHONPATH=src python packed_kernels.py PATH ROWS..."""
import sys, time, torch, os
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
x8 = [g.repack_q4_k_x8(g.random_blocks(12, N, K, gen)) for _ in range(150)]
x16 = [g.repack_q6_k_x16(g.random_blocks(14, N, K, gen)) for _ in range(100)]
path = sys.argv[1]
rows = [int(a) for a in sys.argv[2:]]
xs = {M: torch.randn(M, K) for M in rows}
best = {}
for rep in range(int(os.environ.get("PASSES", 5))):
    for M in rows:
        for name, mats, t in (("q4x8", x8, g.Q4_K_X8), ("q6x16", x16, g.Q6_K_X16)):
            t0 = time.perf_counter()
            for w in mats:
                g.linear_q8_on(xs[M], w, t, K, path)
            dt = (time.perf_counter() - t0) / len(mats)
            best[(name, M)] = min(best.get((name, M), 1e9), dt)
for name in ("q4x8", "q6x16"):
    one = best[(name, rows[0])]
    print(name, "  ".join(f"{M}: {best[(name, M)]*1e6:.0f} us ({best[(name, M)]/one:.2f}x)" for M in rows))
