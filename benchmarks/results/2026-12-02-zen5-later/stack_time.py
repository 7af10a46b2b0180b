"""Where a 1-row forward's time goes around the decoder stack, by the kernels' own stage clocks: the Python before the
stack op, the op (its linears, attention, elementwise steps, and the rest: the op's argument conversion and its loop
between layers), and what follows it (the LM head and Python). Works on this session's start (decoder_stack, weights
passed per call) and on later commits (registered_stack). Usage: python stack_time.py MODEL ROWS FORWARDS
(after 300 cached tokens, 2 threads; min and median in us)."""
import statistics
import sys
import time

import torch

import multidraft
import multidraft.models.native as native
from multidraft.models import gguf_kernels

torch.set_num_threads(2)
rows = int(sys.argv[2])
lm = multidraft.load_model(sys.argv[1], runner="auto")
cache = lm.new_cache()
lm.forward(cache, [(1000 + i) % 40000 for i in range(300)], logits_rows=slice(-1, None))
stamps = {}
name = "registered_stack" if hasattr(gguf_kernels, "registered_stack") else "decoder_stack"
real_stack = getattr(gguf_kernels, name)


def timed_stack(*args):
    stamps["in"] = time.perf_counter()
    gguf_kernels.stage_times(True)
    out = real_stack(*args)
    stamps["stages"] = gguf_kernels.stage_times(False)
    stamps["out"] = time.perf_counter()
    return out


class Timed:                                  # gguf_kernels with the stack op's entry and exit stamped
    def __getattr__(self, attribute):
        return timed_stack if attribute == name else getattr(gguf_kernels, attribute)


native.gguf_kernels = Timed()
results = {}
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    lm.forward(cache, list(range(2000, 2000 + rows)))
    end = time.perf_counter()
    cache.crop(300)
    stages, stack = stamps["stages"], stamps["out"] - stamps["in"]
    for key, value in {"total": end - start, "before stack": stamps["in"] - start, "stack": stack,
                       "after stack": end - stamps["out"], "stack linears": stages["linears"] / 1e9,
                       "stack attention": stages["attention"] / 1e9, "stack steps": stages["layer steps"] / 1e9,
                       "stack rest": stack - sum(stages.values()) / 1e9}.items():
        results.setdefault(key, []).append(value)
for key, values in results.items():
    print("%-16s min %6.0f median %6.0f us" % (key, min(values) * 1e6, statistics.median(values) * 1e6))
