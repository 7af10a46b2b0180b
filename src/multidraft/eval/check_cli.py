"""`multidraft check <name>`: the GPU check and bit checks across runners and CPUs (eval/presets/check_*.py)."""

from multidraft.eval.bench_cli import register_check as register

__all__ = ["register"]
