"""Q4_K_X8 8960x1536 / Q6_K_X16 1536x8960 on the avx512-vnni path: hot (one matrix) vs from memory (24 copies,
cycled), rows 1/8/16, 2 threads: us per matrix and GMAC/s."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
gen = torch.Generator().manual_seed(0)
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
for name, plain, packed, (N, K) in (("q4", 12, g.Q4_K_X8, (8960, 1536)), ("q6", 14, g.Q6_K_X16, (1536, 8960))):
    ws = [g.repack(g.random_blocks(plain, N, K, gen), packed) for _ in range(24)]
    mb = ws[0].numel() * ws[0].element_size() / 1e6
    for M in (1, 8, 16):
        x = torch.randn(M, K, generator=gen)
        for mode in ("hot", "cold"):
            best = 1e9
            for rep in range(6):
                t0 = time.perf_counter()
                for i in range(24):
                    g.linear_q8_on(x, ws[0] if mode == "hot" else ws[i], packed, K, "avx512-vnni")
                best = min(best, (time.perf_counter() - t0) / 24)
            print(f"{name} {mb:.1f}MB M{M:2d} {mode}: {best*1e6:7.0f} us  {M*N*K/best/1e9:6.1f} GMAC/s  {mb/1e3/best:5.1f} GB/s", flush=True)
