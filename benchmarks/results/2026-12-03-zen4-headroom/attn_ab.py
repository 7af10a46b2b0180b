"""The attention op alone (the 1.5B's shape: 12 query heads, 2 KV heads, 128 wide; 2 threads): query rows over cached
keys, min of 40 calls, us per layer, one line per process. Run trees alternately:
PYTHONPATH=<tree>/src python attn_ab.py [KEYS [ROWS]]      (defaults 300,700,3000 and 1,8)"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
H, KVH, D = 12, 2, 128
keys = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "300,700,3000").split(",")]
rows = [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "1,8").split(",")]
out = []
for S in keys:
    k = torch.randn(1, KVH, S + 64, D, generator=gen); v = torch.randn(1, KVH, S + 64, D, generator=gen)
    for T in rows:
        q = torch.randn(H, T, D, generator=gen)
        vis = torch.zeros(T, S + T, dtype=torch.bool); vis[:, :S] = True
        for t in range(T): vis[t, S:S + t + 1] = True
        best = 1e9
        for rep in range(40):
            t0 = time.perf_counter(); g.attention(q, k, v, vis, D ** -0.5); best = min(best, time.perf_counter() - t0)
        out.append(f"S{S}T{T}:{best*1e6:.0f}")
print(" ".join(out))
