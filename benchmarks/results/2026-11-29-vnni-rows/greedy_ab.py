"""greedy and pld, 64 tokens on one code-edit prompt, min of 3 (the 1.5B, 2 threads): run on two checkouts in alternating
processes. Usage: PYTHONPATH=src python greedy_ab.py"""
import time, torch, multidraft
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b", dtype="float32")
p = "Rewrite this function to use a list comprehension:\n\ndef squares(xs):\n    out = []\n    for x in xs:\n        out.append(x * x)\n    return out\n"
best = {}
for rep in range(3):
    for m in ("greedy", "pld"):
        t = time.perf_counter(); multidraft.generate(lm, p, method=m, max_new_tokens=64); best[m] = min(best.get(m, 1e9), time.perf_counter() - t)
print("  ".join(f"{m} {64/v:.2f} tok/s" for m, v in best.items()))
