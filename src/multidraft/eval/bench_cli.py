"""`multidraft bench` (run a benchmark) and `multidraft bench report DIR` (rebuild its report)."""

from __future__ import annotations

import os
import sys

from multidraft import validation
from multidraft.errors import InvalidOptionError
from multidraft.eval import forward_cost_cli
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
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="target model: alias, HF folder or GGUF")
    parser.add_argument("--draft", help="draft model for speculative / multi_draft / mtad and HF assisted generation")
    parser.add_argument("--tasks", default="code_edit",
                        help="comma-separated: code_edit, summarize, text_edit, chat, humaneval, autocomplete, agent_edit, agent_fix, "
                             "agent_chat (multi-step agent episodes)")
    parser.add_argument("--methods", default="all",
                        help="'all' or a comma-separated list of methods (see `multidraft methods`) and HF peers "
                             "(hf_greedy, hf_prompt_lookup, hf_assisted; llama_cpp_greedy, llama_cpp_prompt_lookup on the "
                             "model's GGUF, with `make llama`); hf_greedy always runs as the baseline")
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

    sub = parser.add_subparsers(dest="bench_command", metavar="{report,forward-cost}")
    report = sub.add_parser("report", help="rebuild report.md and plots from DIR/results.jsonl",
                            description="Rebuild DIR/report.md and the PNG plots from DIR/results.jsonl alone.")
    report.add_argument("dir")
    report.set_defaults(func=run_report_command)
    forward_cost_cli.register(sub)


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
    from multidraft.eval.report import render_tables
    from multidraft.eval.bench import read_results

    if args.workers is not None and not args.ray:
        raise InvalidOptionError("--workers sets the number of Ray workers and needs --ray (ADDRESS or local); "
                                 "without --ray the bench runs in this process")
    workers = 2 if args.workers is None else args.workers
    out = args.out or os.path.join(DEFAULT_OUT, os.path.basename(os.path.normpath(args.model)))
    check_out_dir(out)
    apply_threads(args.threads)
    config = BenchConfig(model=args.model, draft=args.draft, tasks=_split(args.tasks), methods=_split(args.methods),
                         max_new_tokens=args.max_new_tokens, limit=args.limit, seed=args.seed,
                         dtype=dtype_choice(args.dtype), options=parse_method_options(args.option),
                         runner=args.runner, device=args.device, draft_length=args.draft_length)
    # Bad input fails before any model is loaded.
    config.validate()
    check_tasks(config.tasks)
    _methods, skipped = resolve_methods(config.methods, bool(config.draft), config.options, model=config.model)
    for name, reason in skipped.items():
        print(f"skipping {name}: {reason}", file=sys.stderr)
    print(f"bench: {config.model} on {', '.join(config.tasks)} -> {out} (load average "
          f"{os.getloadavg()[0]:.1f})", file=sys.stderr)
    path = run_bench(config, out, progress=not args.no_progress, ray_address=args.ray, workers=workers,
                     overwrite=args.overwrite)
    header, rows = read_results(path)
    print(render_tables(header, rows))
    print(f"report: {os.path.join(out, 'report.md')}; load average {os.getloadavg()[0]:.1f}")
    mismatched = sorted({r["method"] for r in rows if r.get("lossless") and not r.get("temperature")
                         and r.get("equal_greedy") is False})
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
