"""The batching engine: five short code edits with `pld` batched together (max_num_seqs 5), in a process whose
engine first decoded one 6,000-token request ("after-long") or a short warm-up batch ("fresh"). TABLES=one puts every
context in one cost table (as before), by-context is the default. Usage: engine_after_long.py fresh|after-long"""
import os
import sys
import time

import torch

import multidraft
from multidraft.decoders import draft_length
from multidraft.eval.tasks import load_task
from multidraft.models.loader import load_model

if os.environ.get("TABLES") == "one":
    draft_length.CONTEXT_BUCKET = 10 ** 12
torch.set_num_threads(2)
lm = load_model("qwen2.5-coder-1.5b")
short = [lm.encode(item.messages) for item in load_task("code_edit")[:10]]
if sys.argv[1] == "after-long":
    ids = []
    for item in load_task("code_edit_long"):
        ids += lm.encode(item.messages)
        if len(ids) > 6000:
            break
    first = [multidraft.Request.build(ids[:6000], "pld", max_new_tokens=64)]
else:
    first = [multidraft.Request.build(p, "pld", max_new_tokens=32) for p in short[5:]]     # a warm-up batch
multidraft.generate_batch(lm, first, max_num_seqs=5)
requests = [multidraft.Request.build(p, "pld", max_new_tokens=128) for p in short[:5]]
start = time.perf_counter()
results = multidraft.generate_batch(lm, requests, max_num_seqs=5)
seconds = time.perf_counter() - start
tokens = sum(len(r.token_ids) for r in results)
calls = sum(r.stats.target_calls for r in results)
costs = draft_length.forward_costs(lm)
print(f"{os.environ.get('TABLES', 'by-context')} {sys.argv[1]}: {tokens / seconds:.2f} tok/s, {tokens} tokens, "
      f"{calls} target calls over the 5 requests; short table's 8 / 16 rows {costs.cost(8) * 1e3:.1f} / "
      f"{costs.cost(16) * 1e3:.1f} ms", flush=True)
