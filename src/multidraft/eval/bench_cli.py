"""`multidraft bench` (run a benchmark), `bench report DIR` (rebuild its report), the presets (`bench <preset>`,
`bench micro <name>`, `bench serve <name>`: eval/presets/) and `multidraft check <name>`."""

from __future__ import annotations

import os
import sys
from typing import Optional

from multidraft import validation
from multidraft.errors import InvalidOptionError
from multidraft.eval import forward_cost_cli, presets
from multidraft.eval.bench_args import add_model_argument
from multidraft.eval.results import BASELINE, BASELINES
from multidraft.fsutil import check_output_folder
from multidraft.decoders.draft_length import add_draft_length_argument
from multidraft.models.runner_choice import add_dtype_argument, add_runner_argument, dtype_choice
from multidraft.models.device import add_device_argument
from multidraft.models.threads import add_threads_argument, apply_threads

DEFAULT_OUT = "bench-results"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="benchmark every method against HF generate() on evaluation tasks",
        description="Run every method and HF generate() (plain, prompt lookup, assisted) on the same prompts, "
                    "interleaved per prompt. Writes OUT/results.jsonl (resumable), OUT/report.md and PNG plots. "
                    "Lossy methods are marked in the report.")
    add_model_argument(parser)
    parser.add_argument("--draft", help="draft model for speculative / multi_draft / mtad and HF assisted generation")
    parser.add_argument("--tasks", default="code_edit",
                        help="comma-separated: code_edit, code_edit_long (the same edits inside ~2,000 tokens of their "
                             "module), summarize, text_edit, chat, humaneval, autocomplete, agent_edit, agent_fix, "
                             "agent_chat (multi-step agent episodes)")
    parser.add_argument("--methods", default="all",
                        help="'all' or a comma-separated list of methods (see `multidraft methods`) and HF peers "
                             "(hf_greedy, hf_prompt_lookup, hf_assisted; llama_cpp_greedy, llama_cpp_prompt_lookup on the "
                             "model's GGUF, with `make llama`); the baseline (--baseline) always runs first")
    parser.add_argument("--baseline", default=BASELINE, choices=BASELINES,
                        help="what speedups and output equality are measured against: HF generate() greedy "
                             "(default), or our own greedy on the same runner (no HF model is loaded then, unless "
                             "an HF peer is asked for)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, default=5, help="prompts per task")
    parser.add_argument("--seed", type=validation.cli_sampling("seed"), default=0)
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_runner_argument(parser, peers_note=True)
    add_draft_length_argument(parser)
    parser.add_argument("--option", "-o", action="append", default=[], metavar="METHOD.NAME=VALUE",
                        help="a method option, e.g. -o pld.num_draft_tokens=8 (value parsed as JSON when possible)")
    parser.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_OUT}/MODEL); an existing one "
                                                    "of the same configuration is resumed (an existing file is refused)")
    parser.add_argument("--overwrite", action="store_true", help="discard earlier results in OUT instead of resuming")
    parser.add_argument("--ray", metavar="ADDRESS|local", help="spread prompts over Ray workers (needs `pip install ray`)")
    parser.add_argument("--workers", type=validation.cli_int(minimum=1), default=None,
                        help="Ray workers, one model copy each (only with --ray; default 2)")
    add_threads_argument(parser, "torch threads (default: all cores; auto: the cores other processes leave idle)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_bench_command)

    sub = parser.add_subparsers(dest="bench_command", metavar="PRESET")
    report = sub.add_parser("report", help="rebuild report.md and plots from DIR/results.jsonl",
                            description="Rebuild DIR/report.md and the PNG plots from DIR/results.jsonl alone.")
    report.add_argument("dir")
    report.set_defaults(func=run_report_command)
    presets.register(sub, "")
    _group(sub, "micro", "micro-benchmarks: one part of the work at a time", forward_cost_cli.register)
    _group(sub, "serve", "the HTTP server under load (local server, Ray Serve)")
    forward_cost_cli.register(sub)          # `bench forward-cost`: the old name of `bench micro forward-cost`


def register_check(subparsers) -> None:
    """`multidraft check <name>`: correctness checks of a machine (GPU, bits across runners and CPUs)."""
    _group(subparsers, "check", "check this machine: the GPU end to end, the same bits across runners and CPUs",
           command="check")


def _group(sub, group: str, help_text: str, extra=None, command: Optional[str] = None) -> None:
    parser = sub.add_parser(command or group, help=help_text, description=help_text)
    names = parser.add_subparsers(dest=f"{group}_command", metavar="NAME")
    if extra is not None:
        extra(names)
    presets.register(names, group)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser) -> int:
    parser.print_help()
    return 2


def parse_method_options(pairs: list[str]) -> dict[str, dict]:
    from multidraft.methods import parse_cli_option
    options: dict[str, dict] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        method, dot, option = name.strip().partition(".")
        if not sep or not dot or not method or not option:
            raise InvalidOptionError(f"bench option {pair!r} must look like METHOD.NAME=VALUE, e.g. pld.num_draft_tokens=8")
        validation.text(f"bench option {name!r:.40}", pair, error=InvalidOptionError)
        option = option.replace("-", "_")
        options.setdefault(method, {})[option] = parse_cli_option(method, option, value)
    return options


def check_out_dir(out: str) -> None:
    """--out must be a folder (existing or not); an existing file there is refused, never overwritten."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise InvalidOptionError(f"--out {out!r} is an existing file, not a folder; give a folder path "
                                 "(the bench writes results.jsonl, report.md and plots into it)")
    parent = os.path.dirname(os.path.abspath(out))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        raise InvalidOptionError(f"--out {out!r}: {parent!r} is a file, so no folder can be made there")


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run_bench_command(args) -> int:
    from multidraft.eval.bench import BenchConfig, check_tasks, resolve_methods, run_bench
    from multidraft.eval.report import differs_from_greedy, render_tables
    from multidraft.eval.bench import read_results

    if args.workers is not None and not args.ray:
        raise InvalidOptionError("--workers sets the number of Ray workers and needs --ray (ADDRESS or local); "
                                 "without --ray the bench runs in this process")
    workers = 2 if args.workers is None else args.workers
    if args.out is not None and not args.out.strip():
        raise InvalidOptionError("--out is empty; give a folder path (or leave --out out for bench-results/MODEL)")
    out = args.out or os.path.join(DEFAULT_OUT, os.path.basename(os.path.normpath(args.model)))
    check_out_dir(out)
    apply_threads(args.threads)
    config = BenchConfig(model=args.model, draft=args.draft, tasks=_split(args.tasks), methods=_split(args.methods),
                         max_new_tokens=args.max_new_tokens, limit=args.limit, seed=args.seed,
                         dtype=dtype_choice(args.dtype), options=parse_method_options(args.option),
                         runner=args.runner, device=args.device, draft_length=args.draft_length,
                         baseline=args.baseline)
    # Bad input fails before any model is loaded.
    config.validate()
    check_tasks(config.tasks)
    _methods, skipped = resolve_methods(config.methods, bool(config.draft), config.options, model=config.model,
                                   baseline=config.baseline)
    for name, reason in skipped.items():
        print(f"skipping {name}: {reason}", file=sys.stderr)
    check_output_folder(out, "--out")                  # made and written once before the model loads
    print(f"bench: {config.model} on {', '.join(config.tasks)} -> {out} (load average "
          f"{os.getloadavg()[0]:.1f})", file=sys.stderr)
    path = run_bench(config, out, progress=not args.no_progress, ray_address=args.ray, workers=workers,
                     overwrite=args.overwrite)
    header, rows = read_results(path)
    print(render_tables(header, rows))
    print(f"report: {os.path.join(out, 'report.md')}; load average {os.getloadavg()[0]:.1f}")
    mismatched = sorted({r["method"] for r in rows if differs_from_greedy(r)})
    if mismatched:
        print(f"warning: lossless methods that differ from greedy on some prompt: {', '.join(mismatched)}",
              file=sys.stderr)
    return 0


def run_report_command(args) -> int:
    from multidraft.eval.bench import read_results
    from multidraft.eval.report import render_tables, write_report

    write_report(args.dir)
    header, rows = read_results(args.dir)
    print(render_tables(header, rows))
    print(f"report: {os.path.join(args.dir, 'report.md')}")
    return 0
