"""The `multidraft bench forward-cost` options (kept light: the timing code, eval/forward_cost.py, loads on use)."""

from __future__ import annotations

DESCRIPTION = ("How much a forward of n new tokens (1..64, and trees) costs relative to one, per runner and per "
               "instruction-set path of the 8-bit kernels (--isa), with the machine's read bandwidth, each 1-token "
               "forward's share of it, and the share of a 1-token forward spent outside the GGUF linears. "
               "Example: multidraft bench forward-cost --model qwen2.5-coder-1.5b --runners auto,quantized-q8 "
               "--isa all --json cost.json")


def register(sub) -> None:
    """`multidraft bench forward-cost` (a subcommand of bench_cli's `bench`)."""
    parser = sub.add_parser("forward-cost", help="the cost of a forward of 1..64 rows and of trees, per runner and "
                            "instruction-set path", description=DESCRIPTION, formatter_class=_raw_formatter())
    parser.add_argument("--model", default=None, help="registry alias or path")
    parser.add_argument("--random", default=None, help="random weights of this shape (qwen2.5-1.5b)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers of the --random model")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the loader's choice; cpu for --random)")
    parser.add_argument("--runners", default="auto", help="comma-separated runners (auto: the one load_model picks "
                        "for the model here, native for a GGUF Qwen2 / Qwen3 / Llama / Mistral / Gemma3 on a CPU; "
                        "eager and fast with --random); also native, quantized-q8, quantized, eager, fast")
    parser.add_argument("--isa", default="", help="8-bit kernel paths to time the native and quantized-q8 runners on: "
                        "a comma-separated list of scalar, avx2, avx-vnni, avx512-vnni, amx, or 'all' (every path "
                        "this CPU has but scalar); default: the path chosen at load")
    parser.add_argument("--chains", default="1,2,3,4,6,8,12,16,24,32,48,64")
    parser.add_argument("--trees", default="2x4,4x4,8x8", help="k x d trees (k branches of depth d)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prefix", type=int, default=300, help="tokens in the cache before each timed forward")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--linear", action="store_true", help="time single linears instead of a model")
    parser.add_argument("--no-bandwidth", action="store_true", help="skip measuring the machine's read bandwidth")
    parser.add_argument("--cpu-time", action="store_true",
                        help="measure process CPU time instead of wall time (meaningful with --threads 1 on a busy machine)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the figures to FILE as JSON")
    parser.set_defaults(func=_run)


def _raw_formatter():
    import argparse
    return argparse.RawDescriptionHelpFormatter




def _run(args) -> int:
    from multidraft.eval.forward_cost import run
    return run(args)
