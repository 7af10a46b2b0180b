"""Where an 8-request batch's time goes: the serve load test's 8 code-edit chat prompts x 64 greedy tokens in one
Engine(max_num_seqs=8), every packed forward timed and sorted by kind (a prompt chunk alone, or a step of k decode
rows), and the time outside the forwards.

    PYTHONPATH=src python engine_trace.py alone|packed
"""
import collections
import sys
import time

import torch

import multidraft
import multidraft.engine.plan as plan
from multidraft.eval.presets.serve_load import code_edit_prompts

torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
prompts = code_edit_prompts(8)
print("prompt tokens", [len(lm.encode(p)) for p in prompts])
multidraft.generate_batch(lm, [multidraft.Request.build(prompts[0], "greedy", max_new_tokens=4)])   # warm-up
log, real_forward = [], plan.packed_forward


def timed_forward(lm, arena, segments, *args, **kwargs):
    start = time.perf_counter()
    outputs = real_forward(lm, arena, segments, *args, **kwargs)
    log.append((time.perf_counter() - start, [len(segment.token_ids) for segment in segments]))
    return outputs


plan.packed_forward = timed_forward
engine = multidraft.Engine(lm, max_num_seqs=8, prefill_alone=sys.argv[1] == "alone")
for prompt in prompts:
    engine.submit(multidraft.Request.build(prompt, "greedy", max_new_tokens=64))
start, steps = time.perf_counter(), 0
while engine.has_work():
    engine.step()
    steps += 1
wall, in_forwards = time.perf_counter() - start, sum(seconds for seconds, _ in log)
print(f"wall {wall:.2f} s, steps {steps}, forwards {len(log)} {in_forwards:.2f} s, outside them "
      f"{wall - in_forwards:.2f} s")
kinds = collections.defaultdict(lambda: [0, 0.0, 0])
for seconds, rows in log:
    kind = f"decode x{len(rows)}" if max(rows) == 1 else "prompt chunk" if len(rows) == 1 else "mixed"
    kinds[kind][0] += 1
    kinds[kind][1] += seconds
    kinds[kind][2] += sum(rows)
for kind, (count, seconds, rows) in sorted(kinds.items()):
    print(f"  {kind:13s} {count:3d} forwards {seconds:6.2f} s {rows:5d} rows {1000 * seconds / count:6.1f} ms each")
