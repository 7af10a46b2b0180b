"""1-, 4-, 8- and 16-row forwards of the 1.5B on a GrowingKVCache of 150 tokens (all layers in one op), min of REPS (15),
interleaved. Usage: PYTHONPATH=src python forward_rows.py"""
import time, torch, multidraft, os
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", dtype="float32")
nf = lm.runner_object.native
from multidraft.models.kv_cache import GrowingKVCache
cache = GrowingKVCache(); P = 150
nf.run(cache, torch.randint(0, 1000, (P,)), None, torch.arange(P), torch.ones(P, P, dtype=torch.bool).tril(), prefill=True); cache.advance(P)
def mk(rows):
    pos = torch.arange(P, P + rows); vis = torch.ones(rows, P + rows, dtype=torch.bool); vis[:, P:] = torch.ones(rows, rows, dtype=torch.bool).tril()
    ids = torch.full((rows,), 5)
    return lambda: nf.run(cache, ids, None, pos, vis)
modes = {r: mk(r) for r in (1, 4, 8, 16)}
best = {k: 1e9 for k in modes}
for rep in range(int(os.environ.get("REPS", 15))):
    for k, f in modes.items():
        t = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t)
print("  ".join(f"{k}: {1e3*v:.1f}" for k, v in best.items()), " 8/1 %.2f 16/1 %.2f" % (best[8]/best[1], best[16]/best[1]))
