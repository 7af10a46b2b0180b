"""Our 1-token decode after N cached tokens, as llama_decode_at.py times llama.cpp's: the 1.5B (runner auto, 2
threads), N random token ids prefilled, then 24 forwards of one token each (the cache growing): ms per token, median
and min.

    PYTHONPATH=TREE/src python ours_decode_at.py N
"""
import random, statistics, sys, time
import torch
import multidraft
torch.set_num_threads(2)
n = int(sys.argv[1])
lm = multidraft.load_model("qwen2.5-coder-1.5b")
random.seed(0)
prompt = [random.randrange(200, 100000) for _ in range(n)]
cache = lm.new_cache()
t = time.perf_counter(); lm.forward(cache, prompt, logits_rows=slice(-1, None)); prefill = time.perf_counter() - t
times = []
for i in range(24):
    t = time.perf_counter(); lm.forward(cache, [1000 + i]); times.append(time.perf_counter() - t)
print(f"ours ({lm.runner}) n_past={n}: prefill {prefill:.1f} s, 1-token decode median "
      f"{statistics.median(times)*1e3:.1f} ms min {min(times)*1e3:.1f} ms")
