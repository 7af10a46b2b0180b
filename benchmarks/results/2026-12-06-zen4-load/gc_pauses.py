"""Full collections while 8 requests decode together: the serve load test's 8 code-edit chat prompts x 64 tokens
through generate_batch for greedy, pld and suffix, after load_model, with the loaded heap frozen (`freeze`, as
`serve` and each Ray replica now do) or not (`none`).

    PYTHONPATH=src python gc_pauses.py none|freeze
"""
import gc
import sys
import time

import torch

import multidraft
from multidraft.eval.presets.serve_load import code_edit_prompts

stats, started = {"n": 0, "s": 0.0, "longest": 0.0}, {}


def on_collection(phase, info):
    if info["generation"] != 2:
        return
    if phase == "start":
        started["t"] = time.perf_counter()
    else:
        took = time.perf_counter() - started["t"]
        stats.update(n=stats["n"] + 1, s=stats["s"] + took, longest=max(stats["longest"], took))


gc.callbacks.append(on_collection)
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
if sys.argv[1] == "freeze":
    gc.freeze()
prompts = code_edit_prompts(8)
start, tokens = time.perf_counter(), 0
for method in ("greedy", "pld", "suffix"):
    outputs = multidraft.generate_batch(lm, [multidraft.Request.build(p, method, max_new_tokens=64) for p in prompts])
    tokens += sum(len(output.token_ids) for output in outputs)
wall = time.perf_counter() - start
print(f"{sys.argv[1]}: {tokens / wall:.1f} tok/s over {wall:.1f} s; full collections {stats['n']}, "
      f"{stats['s']:.3f} s, longest {stats['longest'] * 1000:.0f} ms")
