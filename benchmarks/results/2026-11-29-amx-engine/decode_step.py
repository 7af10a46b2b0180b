"""Decode-step forwards on the 1.5B, min of 6 interleaved: 8 chain rows on a GrowingKVCache with all layers in one op
(stack), one op per layer (layer), step by step (python), and 8 requests of one row each in one packed forward over
an arena (the engine's decode step). Usage: PYTHONPATH=src python benchmarks/results/2026-11-29-amx-engine/decode_step.py"""
import time, torch, multidraft
from multidraft.models.kv_cache import GrowingKVCache
from multidraft.models.packed import KVArena, Segment, packed_forward
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", dtype="float32")
nf = lm.runner_object.native
rows = 8
cache = GrowingKVCache()
nf.run(cache, torch.randint(0, 1000, (150,)), None, torch.arange(150), torch.ones(150,150,dtype=torch.bool).tril(), prefill=True); cache.advance(150)
pos = torch.arange(150, 150 + rows)
vis = torch.ones(rows, 150 + rows, dtype=torch.bool); vis[:, 150:] = torch.ones(rows, rows, dtype=torch.bool).tril()
arena = KVArena(8192); regions = []
for r in range(8):
    c = arena.allocate(150 + 64 + 128)
    packed_forward(lm, arena, [Segment(c, torch.randint(0, 1000, (150,)).tolist(), None, False, None)], dense=True)
    regions.append(c)
def packed8():
    packed_forward(lm, arena, [Segment(c, [5], None, True, None) for c in regions])
    for c in regions: c.length -= 1
def growing(fuse, stack):
    def f():
        nf.fuse, nf.fuse_stack = fuse, stack
        nf.run(cache, torch.full((rows,), 5), None, pos, vis)
    return f
modes = {"stack": growing(True, True), "layer": growing(True, False), "python": growing(False, False), "packed8x1": packed8}
best = {k: 1e9 for k in modes}
for rep in range(6):
    for k, f in modes.items():
        t = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t)
print("  ".join(f"{k} {1e3*v:.1f}" for k, v in best.items()))
