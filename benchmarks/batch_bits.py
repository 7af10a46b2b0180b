"""Eager fp32 smollm2: logit differences and token identity, alone vs in batches of 4 and 16 (counts only, no timings):
    PYTHONPATH=src python benchmarks/batch_bits.py"""
import torch, multidraft
from multidraft import Request, generate_batch
from multidraft.models.packed import KVArena, Segment, packed_forward
from multidraft.models.kv_cache import KVCache
from multidraft.eval.tasks import load_task
lm = multidraft.load_model("smollm2-135m", dtype=torch.float32, runner="eager")
prompts = [t.prompt or t.messages for t in load_task("humaneval", limit=8)] + \
          [t.messages for t in load_task("code_edit", limit=8)]
# logit-level: a 1-row decode step alone vs packed with 15 other requests' rows
arena = KVArena(16384); caches = []
ids = [lm.encode(p) for p in prompts]
for i in ids:
    c = arena.allocate(len(i) + 64); packed_forward(lm, arena, [Segment(c, i[:-1], None, False)]); caches.append(c)
alone = [lm.forward(KVCache(), i).logits[-1] for i in ids]
out = packed_forward(lm, arena, [Segment(c, [i[-1]] + [i[-1]] * 3) for c, i in zip(caches, ids)])
diffs = [float((o.logits[0] - a).abs().max()) for o, a in zip(out, alone)]
print("max |logit diff| alone vs packed(16 req x 4 rows):", max(diffs), "identical rows:", sum(d == 0 for d in diffs))
for method in ("greedy", "pld"):
    reqs = [Request.build(p, method, max_new_tokens=48) for p in prompts]
    one = [multidraft.generate_request(lm, r).token_ids for r in reqs]
    for n in (4, 16):
        got = [g.token_ids for g in generate_batch(lm, reqs, max_num_seqs=n)]
        print(method, "batch", n, "identical:", sum(a == b for a, b in zip(one, got)), "/", len(reqs))
