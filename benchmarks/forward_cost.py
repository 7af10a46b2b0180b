"""Kept for old commands: the forward-cost benchmark is `multidraft bench forward-cost` (eval/forward_cost.py).

    .venv/bin/python benchmarks/forward_cost.py --model qwen2.5-coder-1.5b --runners quantized,quantized-q8 --isa all
"""

import sys

from multidraft.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "forward-cost"] + sys.argv[1:]))
