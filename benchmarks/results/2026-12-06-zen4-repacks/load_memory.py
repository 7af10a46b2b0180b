"""`load_model(MODEL)`: wall seconds, and the process's anonymous resident memory (RssAnon: what the load allocated,
not the file's pages) before, after, at its peak (sampled every 5 ms) and after a malloc_trim.

    PYTHONPATH=TREE/src python load_memory.py MODEL         # an alias or a .gguf path
"""
import ctypes
import gc
import sys
import threading
import time

import multidraft


def resident_mb():
    status = open("/proc/self/status").read()
    return [int(status.split(f"{field}:")[1].split()[0]) // 1024 for field in ("RssAnon", "RssFile")]


peak = [0]


def watch():
    while True:
        peak[0] = max(peak[0], resident_mb()[0])
        time.sleep(0.005)


threading.Thread(target=watch, daemon=True).start()
before = resident_mb()[0]
start = time.perf_counter()
lm = multidraft.load_model(sys.argv[1])
seconds = time.perf_counter() - start
after, file_pages = resident_mb()
gc.collect()
ctypes.CDLL(None).malloc_trim(0)
print(f"{sys.argv[1]}: load {seconds:.2f} s, anon before {before} MB, after {after} MB, peak {peak[0]} MB, "
      f"after malloc_trim {resident_mb()[0]} MB (file pages {file_pages} MB)")
