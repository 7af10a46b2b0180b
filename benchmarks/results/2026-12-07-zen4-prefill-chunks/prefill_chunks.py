"""A long prompt's prefill (one LM.forward, the logits of its last row) as one forward or in PREFILL_CHUNK-row
chunks: wall time, the process's peak resident memory, and the last row's logits (the same bits either way).
One prefill per process, so ru_maxrss is that prefill's peak. Usage: prefill_chunks.py TOKENS CHUNK"""
import hashlib
import resource
import sys
import time

import torch

from multidraft.eval.tasks import load_task
from multidraft.models import runner as lm_module
from multidraft.models.loader import load_model

tokens, chunk = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(2)
lm = load_model("qwen2.5-coder-1.5b")
ids = []
for item in load_task("code_edit_long"):            # consecutive long prompts, concatenated
    ids += lm.encode(item.messages)
    if len(ids) >= tokens:
        break
lm_module.PREFILL_CHUNK = chunk
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
start = time.perf_counter()
logits = lm.forward(lm.new_cache(), ids[:tokens], logits_rows=slice(-1, None)).logits
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
digest = hashlib.sha256(logits.numpy().tobytes()).hexdigest()[:16]
print(f"tokens {tokens} chunk {chunk}: {seconds:.2f} s, peak RSS {peak:.2f} GB (after load {before:.2f}), "
      f"last row's logits sha256 {digest}", flush=True)
