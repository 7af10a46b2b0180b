"""Load a GGUF file by path (runner "auto") and greedy-decode 16 tokens; prints the load's seconds, the runner, the
folder it read and the tokens. Run under /usr/bin/time for the peak RSS (see README.md)."""
import sys
import time

import multidraft

started = time.perf_counter()
lm = multidraft.load_model(sys.argv[1], progress=False)
loaded = time.perf_counter() - started
result = multidraft.generate(lm, "def quicksort(items):", method="greedy", max_new_tokens=16)
print(f"load_s={loaded:.1f} runner={lm.runner} folder={lm.info.path.name} tokens={list(result.token_ids)}")
