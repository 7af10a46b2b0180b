"""Prefill of the 8 code-edit prompts in turn for 25 s (ms per prompt token); run under
`perf record -e cpu-clock -F 1000` for where the time goes."""
import time, torch, multidraft
from multidraft.eval.tasks import load_task
lm = multidraft.load_model("qwen2.5-coder-1.5b", threads=2)
items = load_task("code_edit", limit=8)
prompts = [lm.encode(it.input) for it in items]
lm.prefill(prompts[0])
t0 = time.perf_counter(); toks = 0
while time.perf_counter() - t0 < 25:
    for p in prompts:
        lm.prefill(p); toks += len(p)
dt = time.perf_counter() - t0
print(f"{toks} prompt tokens in {dt:.2f}s: {dt/toks*1e3:.2f} ms/token")
