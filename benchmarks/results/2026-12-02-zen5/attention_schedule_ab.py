"""The default attention schedule (one job per thread, cut by the rows' visible keys) against the old jobs (a
(KV head, row) per job, parts = threads / (KV heads x rows)), alternating in one process, warm and after a 64 MB
write. Usage: python attention_schedule_ab.py H KVH D S LAYERS T"""
import time, torch, statistics, sys
import multidraft
from multidraft.models import gguf_kernels as g
g.load(); ops = torch.ops.multidraft_gguf; ops.set_attention_wide(True)
torch.set_num_threads(2)
H, KVH, D, S, L, T = [int(x) for x in sys.argv[1:7]]
old_parts = (2 + KVH * T - 1) // (KVH * T)
qs = [torch.randn(H, T, D) for _ in range(L)]
ks = [torch.randn(KVH, S, D) for _ in range(L)]
vs = [torch.randn(KVH, S, D) for _ in range(L)]
vis = torch.ones(T, S, dtype=torch.bool).tril(S - T)
junk = torch.randn(64 * 2**20 // 4)
res = {}
for rep in range(30):
    for cold in (False, True):
        for new in (False, True):
            if cold: junk.add_(1.0)
            t = time.perf_counter()
            for l in range(L): ops.attention_with(qs[l], ks[l], vs[l], vis, 0.125, 0, 0 if new else old_parts)
            res.setdefault((cold, new), []).append((time.perf_counter() - t) / L * 1e6)
for k, v in sorted(res.items()):
    print("HxKVHxD %dx%dx%d S %d T %d" % (H, KVH, D, S, T), "cold" if k[0] else "warm", "balanced" if k[1] else "old-jobs", "min %.1f median %.1f us/layer" % (min(v), statistics.median(v)))
