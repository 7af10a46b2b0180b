"""The attention op: 8 / 16 / 32 rows over 700 and 3000 cached keys (us per layer and per row), 2 threads."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
H, KVH, D = 12, 2, 128
for S in (700, 3000):
    k = torch.randn(1, KVH, S + 64, D, generator=gen); v = torch.randn(1, KVH, S + 64, D, generator=gen)
    res = []
    for T in (8, 16, 32):
        q = torch.randn(H, T, D, generator=gen)
        vis = torch.zeros(T, S + T, dtype=torch.bool); vis[:, :S] = True
        for t in range(T): vis[t, S:S + t + 1] = True
        best = 1e9
        for rep in range(30):
            t0 = time.perf_counter(); g.attention(q, k, v, vis, D ** -0.5); best = min(best, time.perf_counter() - t0)
        res.append(f"T{T}:{best*1e6:.0f}us({best*1e6/T:.0f}/row)")
    print(S, " ".join(res))
