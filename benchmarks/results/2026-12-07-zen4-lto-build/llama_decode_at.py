"""llama.cpp's 1-token decode after N cached tokens (llama-cpp-python, the 1.5B's GGUF, 2 threads): N random token ids
evaluated, then 24 tokens one at a time; ms per token, median and min.

    python llama_decode_at.py PATH_TO_GGUF N
"""
import sys, time, statistics, random
import llama_cpp
path = sys.argv[1]; n = int(sys.argv[2])
llm = llama_cpp.Llama(model_path=path, n_ctx=n + 64, n_threads=2, n_threads_batch=2, n_gpu_layers=0, verbose=False)
random.seed(0)
prompt = [random.randrange(200, 100000) for _ in range(n)]
t = time.perf_counter(); llm.eval(prompt); prefill = time.perf_counter() - t
times = []
for i in range(24):
    t = time.perf_counter(); llm.eval([1000 + i]); times.append(time.perf_counter() - t)
print(f"llama.cpp n_past={n}: prefill {prefill:.1f} s, 1-token decode median {statistics.median(times)*1e3:.1f} ms "
      f"min {min(times)*1e3:.1f} ms")
