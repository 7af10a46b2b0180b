import time, torch
from multidraft.models.loader import load_model
from multidraft.eval.forward_cost import stage_timer
from multidraft.eval.tasks import load_task
torch.set_num_threads(2)
lm = load_model("qwen2.5-coder-1.5b")
items = load_task("code_edit_long")
ids = lm.encode(items[0].messages) + lm.encode(items[1].messages)
for n in (1000, 4000):
    for rep in range(2):
        cache = lm.new_cache()
        with stage_timer() as st:
            t = time.perf_counter(); lm.forward(cache, ids[:n], logits_rows=slice(-1, None)); spent = time.perf_counter() - t
        print(n, f"{spent:.2f}s {1000*spent/n:.2f} ms/token", {k: round(v, 2) for k, v in st.items()}, flush=True)
