"""`multidraft bench <preset>`, `bench micro <name>`, `bench serve <name>` and `multidraft check <name>`.

Each preset is a module here with `add_arguments(parser)` and `run(args) -> int`; its docstring is its --help
text. The command line knows presets by name only (the tables below) and imports a module when it runs, so
`multidraft --help` stays fast: torch and the models load only for the preset that runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# group -> {name: (module, one-line help)}; the empty group is `multidraft bench <preset>`.
GROUPS: dict[str, dict[str, tuple[str, str]]] = {
    "": {
        "foundation": ("foundation", "greedy and prompt lookup vs HF generate() on code edits"),
        "pld_plus": ("pld_plus", "PLD+ (hidden, attention) vs PLD vs HF prompt lookup, K sweeps"),
        "pld_plus_replay": ("pld_plus_replay", "prompt-lookup drafters replayed on recorded greedy outputs (counts)"),
        "suffix": ("suffix", "SuffixDecoding vs PLD+ / PLD / HF prompt lookup on self-repeating workloads"),
        "draft_model": ("draft_model", "helper-model drafting (speculative, multi_draft) vs HF assisted generation"),
        "agentic": ("agentic", "agent episodes: suffix vs prompt lookup vs HF and llama.cpp, and suffix tuning"),
        "blockwise": ("blockwise", "blockwise parallel decoding: offline block efficiency and online speed"),
        "superposed": ("superposed", "Superposed Decoding: latency vs k and draft quality"),
        "batch_offline": ("batch_offline", "generate_batch vs one by one vs HF continuous batching"),
        "quantized_e2e": ("quantized_e2e", "the quantized runners end to end beside llama.cpp on the same GGUF"),
        "runners": ("runners", "eager vs fast runner end to end beside HF generate() (wall or CPU time)"),
        "static_graphs": ("static_graphs", "the static runner (CUDA graphs) vs eager and HF on a GPU"),
        "paired": ("paired", "paired statistics of a bench results folder (no model, no timing)"),
    },
    "micro": {
        "kernels": ("micro_kernels", "one linear layer: F.linear vs oneDNN vs the fast kernel, M = 1..16"),
        "ngram": ("micro_ngram", "n-gram build throughput, size per order and lookup latency"),
        "selection": ("micro_selection", "microseconds per multidraft.selection.select call at vocabulary scale"),
        "suffix-draft": ("micro_suffix_draft", "suffix drafting cost alone (no model forward)"),
    },
    "serve": {
        "load": ("serve_load", "load test of `multidraft serve`: concurrent clients, load curve"),
        "ray": ("serve_ray", "Ray Serve replicas of the server under concurrent clients"),
    },
    "check": {
        "gpu": ("check_gpu", "a CUDA machine end to end: every method, equality with greedy, speed beside HF"),
        "engine-cuda": ("check_engine_cuda", "the engine on a GPU: batch vs alone token identity, on-device draw"),
        "batch-bits": ("check_batch_bits", "eager fp32: logits and tokens alone vs in batches of 4 and 16"),
        "quantized-bits": ("check_quantized_bits", "the quantized runner's bits across CPUs (write / check)"),
    },
}


def module(group: str, name: str):
    return importlib.import_module(f"{__name__}.{GROUPS[group][name][0]}")


def prog(group: str, name: str) -> str:
    return " ".join(["multidraft", "check" if group == "check" else "bench"]
                    + ([group] if group not in ("", "check") else []) + [name])


def build_parser(group: str, name: str) -> argparse.ArgumentParser:
    """The preset's full parser (importing its module)."""
    from multidraft.cli_parser import OneLineErrorParser
    preset = module(group, name)
    parser = OneLineErrorParser(prog=prog(group, name), description=preset.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    preset.add_arguments(parser)
    return parser


def parse(group: str, name: str, argv: list[str]) -> argparse.Namespace:
    """The preset's options; a preset that hands the rest to another parser (PASS_THROUGH) gets them as args.rest."""
    parser = build_parser(group, name)
    if getattr(module(group, name), "PASS_THROUGH", False):
        args, rest = parser.parse_known_args(argv)
        args.rest = rest
        return args
    return parser.parse_args(argv)


def run(group: str, name: str, argv: list[str]) -> int:
    args = parse(group, name, argv)
    if isinstance(getattr(args, "json", None), str):   # refused before the work, not after it
        from multidraft.fsutil import check_output_file
        check_output_file(args.json, "--json")
    print(f"{prog(group, name)}: load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return int(module(group, name).run(args) or 0)


def register(subparsers, group: str) -> None:
    """One sub-command per preset of `group`; everything after its name goes to the preset's own parser."""
    for name, (_module, help_text) in GROUPS[group].items():
        # prefix_chars no option can start with: every later word, --help included, reaches the preset's parser.
        sub = subparsers.add_parser(name, help=help_text, prefix_chars="\x01", add_help=False)
        sub.add_argument("preset_argv", nargs="*")
        sub.set_defaults(func=lambda args, g=group, n=name: run(g, n, args.preset_argv))
