"""The attention's two-heads-at-once loops against one head at a time, in one process on one model: a forward of 1
and 8 rows after PREFIX cached tokens, alternating. Usage: python attention_ab.py MODEL PREFIX REPS"""
import time, torch, sys, statistics
import multidraft
from multidraft.models import gguf_kernels as g
torch.set_num_threads(2)
lm = multidraft.load_model(sys.argv[1], runner="auto")
prefix = int(sys.argv[2])
cache = lm.new_cache()
lm.forward(cache, [(1000 + i) % 40000 for i in range(prefix)], logits_rows=slice(-1, None))
res = {}
for rows in (1, 8):
    for rep in range(int(sys.argv[3])):
        for wide in (False, True):
            g.set_attention_wide(wide)
            t = time.perf_counter(); lm.forward(cache, list(range(2000, 2000 + rows))); d = time.perf_counter() - t
            cache.crop(prefix)
            res.setdefault((rows, wide), []).append(d * 1000)
for k, v in res.items():
    print(sys.argv[1], "prefix", prefix, "rows %d wide %s: min %.2f median %.2f ms" % (k[0], k[1], min(v), statistics.median(v)))
