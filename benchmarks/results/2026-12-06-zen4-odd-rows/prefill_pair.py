"""A 141- and a 300-token prefill (token ids 1000 on), ours (the native runner) then llama.cpp's (llama-cpp-python from
`make llama`), 2 threads each, three 141-token runs then one of 300.

    PYTHONPATH=src python benchmarks/results/2026-12-06-zen4-odd-rows/prefill_pair.py
"""
import time
import torch
import multidraft
from multidraft.models.model_store import entry_dir
torch.set_num_threads(2)
ids = lambda n: [(1000 + i) % 150000 for i in range(n)]
view = multidraft.load_model("qwen2.5-coder-1.5b")
for n in (141, 141, 141, 300):
    cache = view.new_cache()
    t = time.perf_counter(); view.forward(cache, ids(n), logits_rows=slice(-1, None)); dt = time.perf_counter() - t
    print(f"ours      {n} tokens: {dt:.3f} s ({n / dt:.1f} tok/s)", flush=True)
from llama_cpp import Llama
llm = Llama(model_path=str(entry_dir("qwen2.5-coder-1.5b") / "source.gguf"), n_threads=2, n_threads_batch=2,
            n_ctx=2048, verbose=False)
for n in (141, 141, 141, 300):
    llm.reset()
    t = time.perf_counter(); llm.eval(ids(n)); dt = time.perf_counter() - t
    print(f"llama.cpp {n} tokens: {dt:.3f} s ({n / dt:.1f} tok/s)", flush=True)
