"""Seed 002's "token rate, % over single-draft speculative decoding", measured with the real loop on a real model.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/selection_token_rate.py --prompts 3 --tokens 48 \
        --draft-layers 28 --json benchmarks/reports/selection_token_rate_l28.json

Target SmolLM2-135M (fp32, the only model pulled here), draft = its first `--draft-layers` layers + final norm + LM
head (a layer-skip draft with the same tokenizer). Every row runs `multidraft.generate` (the library's one
draft-and-verify loop, one target forward per step over the K-draft tree) on the same prompts (HumanEval and
MT-Bench turn 1) and seeds, under the paper's conditions: target T 1, top-p 0.95 on both models, draft temperature
1.2 (Table 1), L = 4 draft tokens. Rows: single-draft speculative sampling (SD, the reference), and for each K:
SpecInfer, SpecTr, IS (`is_lp_truncated`, s 5; "auto" alphabet and the paper's M = 40) and classical IS.

Timing: the process's CPU time (`time.process_time`, one torch thread) around each `generate` call, so waiting for
a core on this shared machine does not count; wall time is logged beside it. Rows are interleaved per prompt and
seed (SD, then every scheme, then the next prompt), so slow drifts of the machine hit every row alike. The token
rate is total tokens / total CPU seconds; "vs SD" is its ratio to SD's minus 1. Block efficiency (tokens per target
verification) and its gain over SD are given beside it: the difference between the two gains is what the extra
drafts, the larger tree forward and the selection rule cost on this CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

import multidraft
from multidraft.fsutil import atomic_path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-23-mtad"))    # mtad_paper.py
from mtad_paper import real_pair_and_prompts  # noqa: E402

WARP = {"temperature": 1.0, "top_p": 0.95}
DRAFT_T = 1.2


SCHEMES = ("specinfer", "spectr", "is_auto", "is_m40", "classical_is")


def rows(ks, schemes=SCHEMES):
    """(label, K, method, options); `schemes` picks the multi-draft rows (SD is always the reference)."""
    yield "SD (K=1)", 1, "speculative", {"draft_temperature": DRAFT_T}
    for k in ks:
        common = {"num_drafts": k, "draft_temperatures": [DRAFT_T] * k}
        every = {
            "specinfer": (f"SpecInfer K={k}", {**common, "selection": "specinfer"}),
            "spectr": (f"SpecTr K={k}", {**common, "selection": "spectr"}),
            "is_auto": (f"IS (s=5, auto) K={k}", {**common, "selection": "is_lp_truncated"}),
            # the paper's IS: truncated LP with s = 5 free tokens over an alphabet of M = 40
            "is_m40": (f"IS (s=5, M=40) K={k}", {**common, "selection": "is_lp_truncated",
                                                 "selection_options": {"s": 5, "alphabet_size": 40}}),
            "classical_is": (f"classical IS K={k}", {**common, "selection": "is"}),
        }
        for scheme in schemes:
            label, options = every[scheme]
            yield label, k, "multi_draft", options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=3, help="prompts per task (HumanEval, chat)")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--seeds", type=int, default=1, help="sampling seeds per prompt")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--draft-layers", type=int, default=28)
    parser.add_argument("--draft-model", default=None, help="a separate draft model instead of the layer-skip draft")
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES),
                        help="multi-draft rows to run beside SD (is_m40 is the paper's IS)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    target, draft, prompts = real_pair_and_prompts(args)
    table = {label: {"K": k, "tokens": 0, "calls": 0, "accepted": 0, "cpu_s": 0.0, "wall_s": 0.0, "runs": []}
             for label, k, _, _ in rows(args.ks, args.schemes)}
    # warm-up (allocator, first-call paths), not counted
    multidraft.generate(target, prompts[0], method="speculative", draft_model=draft, max_new_tokens=8, seed=0, **WARP)
    started = time.perf_counter()
    for index, prompt in enumerate(prompts):
        for seed in range(args.seeds):
            for label, _, method, options in rows(args.ks, args.schemes):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                out = multidraft.generate(target, prompt, method=method, draft_model=draft,
                                          num_draft_tokens=args.draft_tokens, max_new_tokens=args.tokens,
                                          seed=1000 * index + seed, **WARP, **options)
                run = {"prompt": index, "seed": seed, "cpu_s": time.process_time() - cpu0,
                       "wall_s": time.perf_counter() - wall0, "tokens": len(out.token_ids),
                       "calls": out.stats.verification_calls, "accepted": out.stats.draft_tokens_accepted}
                cell = table[label]
                for key in ("cpu_s", "wall_s", "tokens", "calls", "accepted"):
                    cell[key] += run[key]
                cell["runs"].append(run)
            print(f"prompt {index} seed {seed} done ({time.perf_counter() - started:.0f} s, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
            write_json(args, table, target, draft, finished=False)   # a partial result survives a stopped run
    reference = table["SD (K=1)"]
    ref_rate, ref_block = reference["tokens"] / reference["cpu_s"], reference["tokens"] / reference["calls"]
    print(f"\n{'row':<24}{'tokens':>8}{'block eff':>10}{'vs SD':>9}{'tok/CPU-s':>11}{'vs SD':>9}{'tok/wall-s':>11}")
    for label, cell in table.items():
        cell["block_efficiency"] = cell["tokens"] / cell["calls"]
        cell["tokens_per_cpu_s"] = cell["tokens"] / cell["cpu_s"]
        cell["tokens_per_wall_s"] = cell["tokens"] / cell["wall_s"]
        cell["block_vs_sd_pct"] = 100 * (cell["block_efficiency"] / ref_block - 1)
        cell["token_rate_vs_sd_pct"] = 100 * (cell["tokens_per_cpu_s"] / ref_rate - 1)
        print(f"{label:<24}{cell['tokens']:>8}{cell['block_efficiency']:>10.3f}{cell['block_vs_sd_pct']:>8.1f}%"
              f"{cell['tokens_per_cpu_s']:>11.2f}{cell['token_rate_vs_sd_pct']:>8.1f}%{cell['tokens_per_wall_s']:>11.2f}")
    write_json(args, table, target, draft, finished=True)


def write_json(args, table, target, draft, finished: bool) -> None:
    if args.json:
        result = {"rows": table, "args": vars(args), "target": target.name, "draft": draft.name,
                  "load_avg": os.getloadavg(), "finished": finished}
        with atomic_path(args.json) as path:      # no half-written file on a crash
            path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
