"""Q6_K in GGUF's layout against Q6_K_X8 (1536 x 8960, the 1.5B's ffn_down shape), per path and row count, both
layouts timed alternately in one process (min of REPS). Usage: PYTHONPATH=<tree>/src python q6_x8_rows.py
1,2,4,8,16 avx-vnni,avx2 [threads]"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load()
gen = torch.Generator().manual_seed(0)
N, K = 1536, 8960
plain = g.random_blocks(14, N, K, gen)
x8 = g.repack_q6_k_x8(plain)
rows = [int(r) for r in sys.argv[1].split(",")]
paths = sys.argv[2].split(",")
threads = [int(t) for t in (sys.argv[3] if len(sys.argv) > 3 else "1,2").split(",")]
for th in threads:
    torch.set_num_threads(th)
    for path in paths:
        for M in rows:
            x = torch.randn(M, K, generator=gen)
            assert torch.equal(g.linear_q8_on(x, plain, 14, K, path).view(torch.int32),
                               g.linear_q8_on(x, x8, g.Q6_K_X8, K, path).view(torch.int32))
            best = {"gguf": 1e9, "x8": 1e9}
            for rep in range(20):
                for name, w, t in (("gguf", plain, 14), ("x8", x8, g.Q6_K_X8)):
                    t0 = time.perf_counter(); g.linear_q8_on(x, w, t, K, path); best[name] = min(best[name], time.perf_counter() - t0)
            print(f"threads {th} {path:12s} rows {M:3d}: gguf {best['gguf']*1e6:7.0f} us  x8 {best['x8']*1e6:7.0f} us"
                  f"  ({best['gguf']/best['x8']:.2f}x)  x8 {M*N*K/best['x8']/1e9/th:5.0f} GMAC/s/core", flush=True)
