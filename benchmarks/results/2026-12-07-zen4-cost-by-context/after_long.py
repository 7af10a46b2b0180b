"""Five short code edits with `pld` (adaptive draft length), in a process that first decoded one 6,000-token
request ("after-long") or only a short warm-up ("fresh"). TABLES=one puts every context in one cost table (as before
the cost tables by context length), TABLES=by-context is the default. Usage: after_long.py fresh|after-long"""
import os
import sys

import torch

import multidraft
from multidraft.decoders import draft_length
from multidraft.eval.tasks import load_task
from multidraft.models.loader import load_model

if os.environ.get("TABLES") == "one":
    draft_length.CONTEXT_BUCKET = 10 ** 12
torch.set_num_threads(2)
lm = load_model("qwen2.5-coder-1.5b")
short = [lm.encode(item.messages) for item in load_task("code_edit")[:6]]
if sys.argv[1] == "after-long":
    ids = []
    for item in load_task("code_edit_long"):
        ids += lm.encode(item.messages)
        if len(ids) > 6000:
            break
    multidraft.generate(lm, ids[:6000], method="pld", max_new_tokens=64)
else:
    multidraft.generate(lm, short[-1], method="pld", max_new_tokens=32)       # a warm-up on another edit
tokens = seconds = steps = 0
for prompt in short[:5]:
    out = multidraft.generate(lm, prompt, method="pld", max_new_tokens=128)
    tokens, seconds, steps = tokens + len(out.token_ids), seconds + out.stats.total_time, steps + out.stats.target_calls
costs = draft_length.forward_costs(lm)
print(f"{os.environ.get('TABLES', 'by-context')} {sys.argv[1]}: {tokens / seconds:.2f} tok/s pooled, {tokens} tokens in "
      f"{steps} target calls; short table's 1 / 8 rows {costs.cost(1) * 1e3:.1f} / {costs.cost(8) * 1e3:.1f} ms",
      flush=True)
