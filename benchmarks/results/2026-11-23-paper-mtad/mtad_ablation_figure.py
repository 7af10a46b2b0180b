"""Tables and a PNG for benchmarks/results/2026-11-23-paper-mtad/README.md from a `mtad_paper.py real --only ... --json` run of the ablations
(the paper's Fig. 3 tau sweep, Table 7 beam count, Table 10 warp), with the paper's numbers beside ours.

    .venv/bin/python benchmarks/results/2026-11-23-paper-mtad/mtad_ablation_figure.py benchmarks/results/2026-11-23-paper-mtad/mtad_ablations_qwen.json \
        --out benchmarks/results/2026-11-23-paper-mtad/mtad_qwen_tau.png

The main MTAD row (tau 0.1, 8 beams, top-k 20 / top-p 0.9) is the tau = 0.1, 8-beam and (20, 0.9) point of every
ablation. PPL +- : the standard error of the mean per-prompt NLL, shown as the PPL range exp(mean +- SE).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAIN = "MTAD, gamma 4, 8 beams, tau 0.1 (LOSSY)"
SAMPLE = "sample (target only)"
# seed 003, Table 7 (beams 2 / 4 / 6 / 8): perplexity and speed (tokens/s, GPU), Llama-2 pair and OPT pair
PAPER_TABLE_7 = {2: ("2.44 / 3.63", "55.9 / 51.0"), 4: ("2.12 / 3.16", "59.9 / 54.1"),
                 6: ("2.14 / 3.42", "60.2 / 54.3"), 8: ("2.10 / 3.19", "61.3 / 55.9")}
# seed 003, Table 10 ((top-k, top-p): PPL of sampling ("Greedy" column), speculative, MTAD; MTAD tokens/s)
PAPER_TABLE_10 = {(20, 0.9): (3.74, 3.64, 2.06), (20, 0.8): (3.06, 3.10, 1.93), (10, 0.9): (3.03, 3.22, 1.95),
                  (10, 0.8): (2.56, 2.53, 1.80)}


def ppl_range(row: dict) -> str:
    nlls = row.get("nll_per_prompt") or []
    if len(nlls) < 2:
        return f"{row['ppl']:.2f}"
    mean, se = statistics.fmean(nlls), statistics.stdev(nlls) / math.sqrt(len(nlls))
    return f"{row['ppl']:.2f} ({math.exp(mean - se):.2f}-{math.exp(mean + se):.2f})"


def line(setting: str, row: dict, paper: str = "") -> str:
    return (f"| {setting} | {ppl_range(row)} | {row['block_efficiency']:.2f} | {row['target_forwards_per_token']:.2f} | "
            f"{row['draft_forwards_per_token']:.2f} | {row['tokens']} |{paper}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result")
    parser.add_argument("--out", default=None, help="PNG path (tau sweep)")
    args = parser.parse_args()
    result = json.load(open(args.result))["results"]
    main_rows = result.get("Table 4 (main)", {})
    head = "| setting | PPL (+-1 SE range) | block eff. | target fwd/token | draft fwd/token | tokens |"
    print("reference rows"); print(head); print("|---|---|---|---|---|---|")
    for label, row in main_rows.items():
        print(line(label, row))

    taus = {float(label.split()[1]): row for label, row in result.get("Fig. 3 (tau)", {}).items()}
    if MAIN in main_rows:
        taus[0.1] = main_rows[MAIN]
    print("\nFig. 3 (tau)"); print(head); print("|---|---|---|---|---|---|")
    for tau in sorted(taus):
        print(line(f"tau {tau}", taus[tau]))

    beams = {int(label.split()[0]): row for label, row in result.get("Table 7 (beams)", {}).items()}
    if MAIN in main_rows:
        beams[8] = main_rows[MAIN]
    print("\nTable 7 (beams)"); print(head + " paper PPL (Llama-2 / OPT) | paper tokens/s |")
    print("|---|---|---|---|---|---|---|---|")
    for count in sorted(beams):
        paper = PAPER_TABLE_7.get(count)
        print(line(f"{count} beams", beams[count], f" {paper[0]} | {paper[1]} |" if paper else " - | - |"))

    print("\nTable 10 (warp)")
    print("| (top-k, top-p) | sample PPL | MTAD PPL | MTAD block eff. | paper: sample / speculative / MTAD PPL |")
    print("|---|---|---|---|---|")
    warps = {(20, 0.9): (main_rows.get(SAMPLE), main_rows.get(MAIN))}
    for label, row in result.get("Table 10 (warp)", {}).items():
        k, p = label.split(":")[0].replace("k ", "").split(", p ")
        key = (int(k), float(p))
        pair = list(warps.get(key, (None, None)))
        pair[0 if label.endswith("sample") else 1] = row
        warps[key] = tuple(pair)
    for key, (sample, mtad) in warps.items():
        paper = PAPER_TABLE_10[key]
        block = f"{mtad['block_efficiency']:.2f}" if mtad else "-"
        print(f"| {key} | {ppl_range(sample) if sample else '-'} | {ppl_range(mtad) if mtad else '-'} | {block} | "
              f"{paper[0]:.2f} / {paper[1]:.2f} / {paper[2]:.2f} |")

    if args.out and taus:
        xs = sorted(taus)
        figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
        left.plot(xs, [taus[t]["block_efficiency"] for t in xs], marker="o")
        left.set_ylabel("block efficiency (tokens / target call)")
        right.plot(xs, [taus[t]["ppl"] for t in xs], marker="o", label="MTAD")
        if SAMPLE in main_rows:
            right.axhline(main_rows[SAMPLE]["ppl"], color="grey", linestyle="--", label="target-only sampling")
        right.set_ylabel("perplexity under the unwarped target")
        right.legend(fontsize=7)
        for axis in (left, right):
            axis.set_xlabel("acceptance threshold tau")
            axis.grid(alpha=0.3)
        figure.suptitle("MTAD tau sweep (paper's Fig. 3), qwen2.5-coder-0.5b -> 1.5b, gamma 4, 8 beams, "
                        "top-k 20 / top-p 0.9", fontsize=9)
        figure.tight_layout()
        figure.savefig(args.out, dpi=120)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
