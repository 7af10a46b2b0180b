"""Time inside the cyclic garbage collector: during `import multidraft`, during load_model (with the collector on,
as before heap.collection_paused, or `paused` as load_model now runs it), and during three greedy generations.

    PYTHONPATH=TREE/src python gc_time.py [paused]
"""
import gc
import sys
import time

stats, started = {"n": [0, 0, 0], "s": [0.0, 0.0, 0.0]}, {}


def on_collection(phase, info):
    if phase == "start":
        started["t"] = time.perf_counter()
    else:
        stats["n"][info["generation"]] += 1
        stats["s"][info["generation"]] += time.perf_counter() - started["t"]


def report(what, since):
    print(f"{what}: {time.perf_counter() - since:.2f} s; collections by generation {stats['n']}, seconds "
          f"{['%.3f' % s for s in stats['s']]}; objects {len(gc.get_objects())}")
    stats.update(n=[0, 0, 0], s=[0.0, 0.0, 0.0])


gc.callbacks.append(on_collection)
start = time.perf_counter()
import multidraft  # noqa: E402

report("import", start)
start = time.perf_counter()
if len(sys.argv) > 1:
    gc.disable()
lm = multidraft.load_model("qwen2.5-coder-1.5b")
gc.enable()
report("load", start)
start = time.perf_counter()
for _ in range(3):
    multidraft.generate(lm, "def fib(n):", method="greedy", max_new_tokens=32)
report("run", start)
