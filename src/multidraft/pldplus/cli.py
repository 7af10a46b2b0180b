"""`multidraft pld-plus calibrate|show`: induction-head calibration and layer sweep for PLD+ (specs/pldplus.md §3.5)."""

from __future__ import annotations

import json

from multidraft.fsutil import check_output_file
from multidraft.models.device import add_device_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser("pld-plus", help="PLD+ calibration: induction heads and hidden layer per model")
    commands = parser.add_subparsers(dest="pld_plus_command", metavar="SUBCOMMAND", required=True)

    calibrate = commands.add_parser(
        "calibrate", help="find the model's induction heads (and best hidden layer) on input-guided prompts; "
                          "saves <cache>/pldplus/<model>.json, which method='pld_plus' then uses by default")
    calibrate.add_argument("--model", required=True, help="model alias, HF folder, HF id or GGUF file")
    calibrate.add_argument("--task", "--tasks", dest="task", default="code_edit,text_edit,summarize",
                           help="eval task(s) the prompts come from, comma-separated (default: code_edit,text_edit,summarize)")
    calibrate.add_argument("--split", default="validation", choices=("validation", "test"),
                           help="task split (default: validation, the prompts benchmarks never run)")
    calibrate.add_argument("--prompts", type=int, default=4, help="prompts per task (default 4)")
    calibrate.add_argument("--gen-len", type=int, default=96, help="greedy tokens generated per prompt (default 96)")
    calibrate.add_argument("--top-k", type=int, default=50, help="induction heads kept, best first (default 50)")
    calibrate.add_argument("--no-layer-sweep", action="store_true", help="skip the PLD+(h) layer sweep")
    calibrate.add_argument("--decode-method", default="pld",
                           help="lossless method that produces the greedy outputs (default pld: token-identical to "
                                "greedy, fewer forwards; 'greedy' decodes token by token)")
    calibrate.add_argument("--decode-runner", default=None, choices=("eager", "fast", "auto"),
                           help="runner for that decoding (default: the eager one the calibration forward uses)")
    calibrate.add_argument("--dtype", default=None, help="model dtype (default: the loader's choice)")
    add_device_argument(calibrate)
    calibrate.add_argument("--output", default=None, help="write here instead of the cache")
    calibrate.set_defaults(func=_calibrate)

    merge = commands.add_parser("merge", help="pool several calibrations of one model (e.g. one run per task, run "
                                              "side by side) into one: hits add up, the layer is chosen again")
    merge.add_argument("inputs", nargs="+", help="calibration JSON files (written with --top-k 1000)")
    merge.add_argument("--top-k", type=int, default=50, help="induction heads kept, best first (default 50)")
    merge.add_argument("--output", required=True)
    merge.set_defaults(func=_merge)

    show = commands.add_parser("show", help="print the calibration method='pld_plus' would use for a model")
    show.add_argument("--model", required=True)
    show.set_defaults(func=_show)


def _calibrate(args) -> int:
    import multidraft
    from multidraft.errors import InvalidOptionError
    from multidraft.eval.tasks import load_task
    from multidraft.pldplus import calibration, induction

    for name in ("prompts", "gen_len", "top_k"):
        if getattr(args, name) < 1:
            raise InvalidOptionError(f"--{name.replace('_', '-')} must be >= 1")
    items = [item for task in args.task.split(",") if task.strip()
             for item in load_task(task.strip(), limit=args.prompts, split=args.split)]
    if not items:
        raise InvalidOptionError("--task names no task; give e.g. --task code_edit,text_edit,summarize")
    if args.output:
        check_output_file(args.output, "--output")
    lm = multidraft.load_model(args.model, dtype=args.dtype, device=args.device, attn_implementation="eager")
    record = induction.calibrate(lm, [item.input for item in items], gen_len=args.gen_len, top_k=args.top_k,
                             sweep=not args.no_layer_sweep, progress=print, labels=[item.task for item in items],
                             decode_method=args.decode_method, decode_runner=args.decode_runner)
    record.update(task=args.task, split=args.split, prompt_ids=[item.id for item in items])
    path = calibration.save(record, args.output)
    top = ", ".join(f"({l},{g}):{h}" for l, g, h in record["induction_heads"][:8])
    print(f"{record['heads_with_hits']} attention heads with hits over {record['events']} copy events; top: {top}")
    if record.get("layer") is not None:
        point = record["layer_curve"][str(record["layer"])]
        print(f"PLD+(h) layer: {record['layer']} (replayed mean acceptance length {point['aal']:.2f}, "
              f"95% CI {point['low']:.2f}-{point['high']:.2f}, at K=10; {record['layer_rule']['rule']})")
    print(f"saved {path}")
    return 0


def _merge(args) -> int:
    from pathlib import Path

    from multidraft.errors import InvalidOptionError
    from multidraft.pldplus import calibration, induction

    check_output_file(args.output, "--output")
    records = []
    for name in args.inputs:
        try:
            records.append(json.loads(Path(name).read_text()))
        except (OSError, ValueError) as exc:
            raise InvalidOptionError(f"cannot read calibration {name}: {exc}") from None
    record = induction.merge_records(records, top_k=args.top_k)
    path = calibration.save(record, args.output)
    print(f"{record['num_prompts']} prompts, {record['events']} copy events {record['events_by_task']}; "
          f"layer {record['layer']} ({record.get('layer_rule', {}).get('rule', 'no sweep')}); saved {path}")
    return 0


def _show(args) -> int:
    from multidraft.errors import InvalidOptionError
    from multidraft.pldplus import calibration

    record = calibration.load_record(args.model)
    if record is None:
        raise InvalidOptionError(f"no PLD+ calibration for {args.model}; run `multidraft pld-plus calibrate --model {args.model}`")
    print(json.dumps({k: v for k, v in record.items() if k not in ("hit_rates", "layer_counts")}, indent=1,
                     default=list))
    return 0
