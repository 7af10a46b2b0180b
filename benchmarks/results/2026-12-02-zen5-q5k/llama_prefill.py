"""llama.cpp (llama-cpp-python) evaluating N prompt tokens, n_batch 512, 2 threads. Usage: python llama_prefill.py GGUF"""
import sys, time, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=2, n_threads_batch=2, n_batch=512, verbose=False)
for rows in (8, 16, 64, 128, 256):
    best = 1e9
    for rep in range(3):
        llm.reset()
        toks = [(1000 + 7*i) % 40000 for i in range(rows)]
        t = time.perf_counter(); llm.eval(toks); best = min(best, time.perf_counter() - t)
    print(f"llama.cpp {rows} rows: {1e3*best:.0f} ms, {1e3*best/rows:.2f} ms/row")
