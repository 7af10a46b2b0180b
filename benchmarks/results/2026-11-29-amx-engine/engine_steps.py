"""8 code-edit chat requests (the server load test's prompts) x 64 tokens in one Engine, in process: tokens/s and the
packed forwards by rows (dense: a prompt chunk read alone). Usage: PYTHONPATH=src python .../engine_steps.py [greedy|pld] [8]"""
import sys, time, collections, torch
import multidraft
from multidraft.models import packed
from multidraft.eval.presets.serve_load import code_edit_prompts
method = sys.argv[1] if len(sys.argv) > 1 else "greedy"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", dtype="float32")
prompts = code_edit_prompts(n)
fw = collections.defaultdict(list)
orig = packed.packed_forward
def timed(lm_, arena, segments, dense=False):
    t = time.perf_counter(); out = orig(lm_, arena, segments, dense=dense)
    fw[(dense, sum(len(s.token_ids) for s in segments), len(segments))].append(time.perf_counter() - t); return out
import multidraft.engine.plan as plan_mod
plan_mod.packed_forward = timed
# warm
multidraft.generate_batch(lm, [multidraft.Request.build(prompts[0], method, max_new_tokens=4)])
fw.clear()
engine = multidraft.Engine(lm, max_num_seqs=8)
ids = [engine.submit(multidraft.Request.build(p, method, max_new_tokens=64)) for p in prompts]
t0 = time.perf_counter(); steps = []
while engine.has_work():
    t = time.perf_counter(); engine.step(); steps.append(time.perf_counter() - t)
wall = time.perf_counter() - t0
res = [engine.take(i) for i in ids]
toks = sum(len(r.token_ids) for r in res)
print(f"{method}: {toks} tokens in {wall:.2f}s = {toks/wall:.1f} tok/s; steps {len(steps)}")
tot = 0
for k, v in sorted(fw.items()):
    tot += sum(v)
    print(f"dense={k[0]} rows={k[1]:4d} segs={k[2]}: n={len(v):3d} mean {1e3*sum(v)/len(v):7.1f} ms sum {sum(v):6.2f}s")
print(f"forwards {tot:.2f}s of {wall:.2f}s; step sum {sum(steps):.2f}")
