"""Whole generations with the weights prefetched non-temporally or into L2, alternating in one process (the order
flipped every round; gguf_kernels.set_nontemporal_weights, the same tokens either way): 3 code edits x 128 tokens per
method, mode and round, tok/s. Usage: PYTHONPATH=src python nontemporal_generate_ab.py ROUNDS METHODS"""
import statistics, sys, time, torch
import multidraft
from multidraft.models import gguf_kernels
from multidraft.eval.tasks import load_task
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", runner="auto")
prompts = [p.messages or p.prompt for p in load_task("code_edit", limit=3)]
multidraft.generate(lm, "def f(x):", method="greedy", max_new_tokens=8)
res = {"nta": [], "l2": []}
for rnd in range(int(sys.argv[1])):
    for mode in (("l2", "nta") if rnd % 2 else ("nta", "l2")):
        gguf_kernels.set_nontemporal_weights(mode == "nta")
        for method in sys.argv[2].split(","):
            tokens = seconds = 0
            for p in prompts:
                t = time.perf_counter(); r = multidraft.generate(lm, p, method=method, max_new_tokens=128)
                seconds += time.perf_counter() - t; tokens += len(r.token_ids)
            res[mode].append((method, tokens / seconds))
for mode, v in res.items():
    for method in sys.argv[2].split(","):
        print(mode, method, "tok/s per round:", [round(x, 2) for m, x in v if m == method])
