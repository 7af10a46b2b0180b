"""PLD+ calibration one prompt at a time, resumable: `multidraft pld-plus calibrate` on a busy machine.

Writes one calibration record per validation prompt (`<out>/<task>-<id>.json`, kept heads: all), taking the
tasks in turn (summarize 0, code_edit 0, text_edit 0, summarize 1, ...) so that a run cut short still covers
every task; prompts whose file exists are skipped. Pool them with
`multidraft pld-plus merge <out>/*.json --output <file>` (hits add up, the layer is chosen again on all prompts).
Each record is what `induction.calibrate` (the CLI's function) gives for that one prompt.

    OMP_NUM_THREADS=1 python benchmarks/results/2026-11-23-paper-pldplus/pldplus_calibrate_each.py --model qwen2.5-coder-1.5b \
        --prompts 7 --gen-len 128 --out benchmarks/results/2026-11-23-paper-pldplus/pldplus_cal_qwen15
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--tasks", default="summarize,code_edit,text_edit")
    parser.add_argument("--prompts", type=int, default=7, help="validation prompts per task")
    parser.add_argument("--gen-len", type=int, default=128)
    parser.add_argument("--decode-method", default="pld")
    parser.add_argument("--out", required=True, help="folder for the per-prompt records")
    parser.add_argument("--reverse", action="store_true",
                        help="take the prompts last first (a second process on the same folder then meets the first "
                             "one only in the middle)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    import multidraft
    from multidraft.eval.tasks import load_task
    from multidraft.pldplus import calibration, induction

    per_task = [load_task(t.strip(), limit=args.prompts, split="validation") for t in args.tasks.split(",")]
    ordered = [item for group in itertools.zip_longest(*per_task) for item in group if item is not None]
    if args.reverse:
        ordered.reverse()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm = multidraft.load_model(args.model, attn_implementation="eager")
    for item in ordered:
        path = out / f"{item.id.replace('/', '-')}.json"
        if path.exists():
            continue
        record = induction.calibrate(lm, [item.input], gen_len=args.gen_len, top_k=1000, labels=[item.task],
                                     decode_method=args.decode_method, progress=lambda m: print(item.id, m, flush=True))
        record.update(task=item.task, split="validation", prompt_ids=[item.id])
        calibration.save(record, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
