"""llama.cpp (llama-cpp-python, the `make llama` build) reading a prompt of n tokens from an empty cache, 2 threads,
n_batch 512, min of 3: its prefill rate. Usage: python llama_prefill.py PATH.gguf"""
import time, llama_cpp, sys
path = sys.argv[1]
llm = llama_cpp.Llama(model_path=path, n_ctx=2048, n_threads=2, n_threads_batch=2, n_batch=512, verbose=False)
for n in (64, 256, 512):
    toks = [(i * 7919) % 30000 + 100 for i in range(n)]
    best = 1e9
    for _ in range(3):
        llm.reset(); t = time.perf_counter(); llm.eval(toks); best = min(best, time.perf_counter() - t)
    print(f"llama.cpp prefill {n} tokens: {best*1000:.1f} ms, {n/best:.0f} tok/s", flush=True)
