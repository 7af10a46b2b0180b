"""Q4_K_X8, Q5_K_X8, Q6_K_X16 and Q5_0 (packed in sixteens) 8960 x 1536 matrices on the avx512-vnni path: hot (one
matrix) vs from memory (24 copies, cycled), 1 / 8 rows: us per matrix and GB/s (after
../2026-12-03-zen4-argmax/cold_rows.py, with Q5_K and Q5_0).

    PYTHONPATH=src python benchmarks/results/2026-12-06-zen4-e2e/cold_rows.py [THREADS] [q4,q5,q6,q5_0]
"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
gen = torch.Generator().manual_seed(0)
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
which = sys.argv[2].split(",") if len(sys.argv) > 2 else ["q4", "q5", "q6"]
table = {"q4": (12, g.Q4_K_X8, (8960, 1536)), "q5": (13, g.Q5_K_X8, (8960, 1536)), "q6": (14, g.Q6_K_X16, (8960, 1536)),
         "q5_0": (6, g.X16_32[6], (8960, 1536))}
for name in which:
    plain, packed, (N, K) = table[name]
    ws = [g.repack(g.random_blocks(plain, N, K, gen), packed) for _ in range(24)]
    mb = ws[0].numel() * ws[0].element_size() / 1e6
    for M in (1, 8):
        x = torch.randn(M, K, generator=gen)
        for mode in ("hot", "cold"):
            best = 1e9
            for rep in range(6):
                t0 = time.perf_counter()
                for i in range(24):
                    g.linear_q8_on(x, ws[0] if mode == "hot" else ws[i], packed, K, "avx512-vnni")
                best = min(best, (time.perf_counter() - t0) / 24)
            print(f"{name} {mb:.1f}MB M{M:2d} {mode}: {best*1e6:7.0f} us  {mb/1e3/best:5.1f} GB/s", flush=True)
