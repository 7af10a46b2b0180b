# usage: PYTHONPATH=TREE/src python convert_only.py GGUF [whole]: one conversion (the runner's part, or whole) in a
# temporary folder, timed, with the process's peak RSS
import time, sys, tempfile, resource
from pathlib import Path
from multidraft.models import pulling
from tqdm import tqdm
g = Path(sys.argv[1]); whole = len(sys.argv) > 2
with tempfile.TemporaryDirectory() as out:
    t = time.perf_counter()
    pulling._convert_into(g, Path(out), tqdm(disable=True), reference_only=not whole)
    print(pulling.__file__.split("/src/")[0], "whole" if whole else "reference", f"{time.perf_counter() - t:.1f} s",
          f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
