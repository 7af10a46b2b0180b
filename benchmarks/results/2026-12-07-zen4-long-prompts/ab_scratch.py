import time, torch
from multidraft.models.loader import load_model
from multidraft.models import gguf_kernels
from multidraft.eval.tasks import load_task
torch.set_num_threads(2)
lm = load_model("qwen2.5-coder-1.5b")
ids = lm.encode(load_task("code_edit_long")[0].messages)
def prefill(n):
    cache = lm.new_cache(); t = time.perf_counter(); lm.forward(cache, ids[:n], logits_rows=slice(-1, None)); return time.perf_counter() - t
def step(rows, reps=7):
    cache = lm.new_cache(); lm.forward(cache, ids[:300], logits_rows=slice(-1, None))
    best = 1e9
    for _ in range(reps):
        t = time.perf_counter(); lm.forward(cache, ids[300:300 + rows]); best = min(best, time.perf_counter() - t)
        cache.crop(300) if hasattr(cache, "crop") else None
    return best
res = {}
for round_ in range(3):
    for on in (False, True):
        gguf_kernels.set_layer_scratch(on)
        for rows in (1, 8, 16):
            res.setdefault((on, f"{rows} rows ms"), []).append(1000 * step(rows))
        res.setdefault((on, "prefill 2000 s"), []).append(prefill(2000))
for (on, what), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{what:16s} scratch {'on ' if on else 'off'}: " + " ".join(f"{x:.2f}" for x in v), flush=True)
