"""Time the batching engine's steps: 8 code-edit chat prompts, greedy (or argv[1]), 64 tokens, twice; per step
wall time, the packed forward's time and rows. From the repository root: PYTHONPATH=src python THIS [METHOD]"""
import sys, time, statistics
import multidraft
from multidraft.engine import Engine
from multidraft.engine import plan as plan_mod
from multidraft.eval.presets.serve_load import code_edit_prompts

method = sys.argv[1] if len(sys.argv) > 1 else "greedy"
import torch; torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
prompts = code_edit_prompts()[:8]
records = []
real_forward = plan_mod.packed_forward
def timed_forward(lm_, arena, segments, dense=False):
    t = time.perf_counter()
    out = real_forward(lm_, arena, segments, dense=dense)
    records.append((dense, sum(len(s.token_ids) for s in segments), len(segments), time.perf_counter() - t))
    return out
plan_mod.packed_forward = timed_forward
for rep in range(2):
    engine = Engine(lm, max_num_seqs=8)
    ids = [engine.submit(multidraft.Request.build(p, method, max_new_tokens=64)) for p in prompts]
    records.clear()
    steps = []
    t0 = time.perf_counter()
    while engine.has_work():
        n = len(records)
        t = time.perf_counter()
        engine.step()
        steps.append((time.perf_counter() - t, records[n:]))
    total = time.perf_counter() - t0
    gens = [engine.take(i) for i in ids]
    ntok = sum(len(g.token_ids) for g in gens)
    pre = sum(r[3] for r in records if r[0]); dec = [r for r in records if not r[0]]
    print(f"rep {rep}: {total:.2f} s, {ntok} tokens, {ntok/total:.1f} tok/s; prefill forwards {pre:.2f} s "
          f"({sum(r[1] for r in records if r[0])} rows); decode forwards {sum(r[3] for r in dec):.2f} s in {len(dec)}; "
          f"steps {len(steps)}; outside forwards {total - sum(r[3] for r in records):.2f} s")
    full = [(s, recs) for s, recs in steps if len(recs) == 1 and not recs[0][0] and recs[0][2] == 8]
    if full:
        print("  8-request decode-only steps:", len(full), "step ms median", round(1000*statistics.median(s for s, _ in full), 1),
              "forward ms median", round(1000*statistics.median(r[0][3] for _, r in full), 1),
              "rows median", statistics.median(r[0][1] for _, r in full))
