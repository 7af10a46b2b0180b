# usage: PYTHONPATH=src python attention_engine.py
"""The attention op as the engine's packed forward calls it: R requests' new rows, each over its own region of one
arena (no key shared between requests), the 1.5B's shape (12 heads, 2 KV heads, D 128), 28 layers' arenas in turn,
2 threads, us a layer, min of 12."""
import time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
H, KVH, D = 12, 2, 128
out = []
for S in (256, 1024):
    for R in (4, 8):
        slots = R * (S + 8)
        ks = [torch.randn(KVH, slots, D, generator=gen) for _ in range(28)]
        vs = [torch.randn(KVH, slots, D, generator=gen) for _ in range(28)]
        q = torch.randn(H, R, D, generator=gen)
        vis = torch.zeros(R, slots, dtype=torch.bool)
        for r in range(R): vis[r, r * (S + 8):r * (S + 8) + S + 1] = True
        best = 1e9
        for rep in range(12):
            t0 = time.perf_counter()
            for k, v in zip(ks, vs): g.attention(q, k, v, vis, 0.088)
            best = min(best, (time.perf_counter() - t0) / 28)
        out.append(f"S{S}/R{R} {best*1e6:.0f}")
print(" ".join(out), flush=True)
