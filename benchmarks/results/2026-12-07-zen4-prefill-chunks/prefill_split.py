"""A 4,000-token prefill of the 1.5B in 512-row chunks (the default) and as one forward, each split by the kernels'
own stage clocks (the linears, the attention, the layers' elementwise steps), one process, alternating."""
import time

import torch

from multidraft.eval.forward_cost import stage_timer
from multidraft.eval.tasks import load_task
from multidraft.models import runner as lm_module
from multidraft.models.loader import load_model

torch.set_num_threads(2)
lm = load_model("qwen2.5-coder-1.5b")
ids = []
for item in load_task("code_edit_long"):
    ids += lm.encode(item.messages)
    if len(ids) >= 4000:
        break
for chunk in (512, 10 ** 6, 512, 10 ** 6):
    lm_module.PREFILL_CHUNK = chunk
    with stage_timer() as stages:
        start = time.perf_counter()
        lm.forward(lm.new_cache(), ids[:4000], logits_rows=slice(-1, None))
        seconds = time.perf_counter() - start
    print(f"chunk {chunk}: {seconds:.2f} s, {1e3 * stages['linears'] / 4000:.2f} ms a row in the linears,",
          {name: round(value, 2) for name, value in stages.items()}, flush=True)
