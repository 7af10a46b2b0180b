"""The engine's prompt chunks in forwards of their own (prefill_alone, the CPU default) against packed with the step's
decode rows, in one process: the serve load test's 8 code-edit chat prompts x 64 tokens in one Engine(max_num_seqs=8),
the two arms alternating, tokens/s per run and whether every request's tokens equal the first run's.

    PYTHONPATH=src python benchmarks/results/2026-12-05-zen5-kernel-cache/prefill_alone_ab.py [greedy|pld] [rounds]
"""
import sys
import time

import torch

import multidraft
from multidraft.eval.presets.serve_load import code_edit_prompts

method = sys.argv[1] if len(sys.argv) > 1 else "greedy"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
prompts = code_edit_prompts(8)
multidraft.generate_batch(lm, [multidraft.Request.build(prompts[0], method, max_new_tokens=4)])   # warm-up
first, rates = None, {True: [], False: []}
for number in range(rounds):
    for alone in ((True, False) if number % 2 == 0 else (False, True)):
        engine = multidraft.Engine(lm, max_num_seqs=8, prefill_alone=alone)
        ids = [engine.submit(multidraft.Request.build(p, method, max_new_tokens=64)) for p in prompts]
        start = time.perf_counter()
        while engine.has_work():
            engine.step()
        wall = time.perf_counter() - start
        tokens = [engine.take(i).token_ids for i in ids]
        first = first or tokens
        rates[alone].append(sum(map(len, tokens)) / wall)
        print(f"{method} prefill_alone={alone}: {rates[alone][-1]:.1f} tok/s, {wall:.2f} s, "
              f"same tokens as the first run: {tokens == first}", flush=True)
for alone, values in rates.items():
    values = sorted(values)
    print(f"prefill_alone={alone}: median {values[len(values) // 2]:.1f} tok/s, range {values[0]:.1f}-{values[-1]:.1f}")
