"""A prompt's prefill, ms per prompt token, ours (runner auto) or llama.cpp's (llama-cpp-python on the same GGUF,
2 threads, its default batch): the first N tokens of a source file, best of 3 after a warm-up.

    PYTHONPATH=src python prefill.py 64,256,1024 ours|llama
"""
import os
import sys
import time

import multidraft

lengths, which = [int(n) for n in sys.argv[1].split(",")], sys.argv[2]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
ids = lm.encode(open(os.path.join(os.path.dirname(multidraft.__file__), "decoders", "loop.py")).read())
if which == "llama":
    import llama_cpp

    gguf = os.path.expanduser("~/.cache/multidraft/models/qwen2.5-coder-1.5b/source.gguf")
    llm = llama_cpp.Llama(model_path=gguf, n_ctx=4096, n_threads=2, n_threads_batch=2, n_gpu_layers=0, verbose=False)

    def run(n):
        llm.reset()
        llm.eval(ids[:n])
else:
    def run(n):
        lm.prefill(ids[:n])
for n in lengths:
    run(n)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        run(n)
        times.append(time.perf_counter() - start)
    print(f"{which} {n} tokens: best {min(times):.3f} s, {1000 * min(times) / n:.2f} ms/token", flush=True)
