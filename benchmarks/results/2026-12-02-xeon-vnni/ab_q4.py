"""Q4_K_X8 8960x1536 hot: A/B of env knobs alternated in one process, 1 thread, min over rounds.
Usage: python ab_q4.py PATH ROWS VAR=VAL_A VAR=VAL_B"""
import os, sys, time, torch
from multidraft.models import gguf_kernels as g
g.load()
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
w = g.repack_q4_k_x8(g.random_blocks(12, N, K, gen))
path = sys.argv[1]; rows = [int(r) for r in sys.argv[2].split(",")]
variants = [a.split("=") for a in sys.argv[3:]]
torch.set_num_threads(1)
for M in rows:
    x = torch.randn(M, K, generator=gen)
    best = {v: 1e9 for v, _ in enumerate(variants)}
    for rnd in range(40):
        for v, (var, val) in enumerate(variants):
            if val: os.environ[var] = val
            else: os.environ.pop(var, None)
            t0 = time.perf_counter(); g.linear_q8_on(x, w, g.Q4_K_X8, K, path); best[v] = min(best[v], time.perf_counter() - t0)
    print(path, M, "  ".join(f"{'='.join(variants[v])}: {best[v]*1e6:6.0f} us {M*N*K/best[v]/1e9:5.0f} GMAC/s" for v in best), flush=True)
