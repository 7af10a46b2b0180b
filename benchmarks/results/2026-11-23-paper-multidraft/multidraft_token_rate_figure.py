"""Table and PNG for benchmarks/results/2026-11-23-paper-multidraft/README.md from a `selection_token_rate.py --json` result: real-loop block
efficiency against K for each scheme (ours beside the paper's Table 1), and the token rate vs single-draft SD.

    .venv/bin/python benchmarks/results/2026-11-23-paper-multidraft/multidraft_token_rate_figure.py \
        benchmarks/results/2026-11-23-paper-multidraft/multidraft_token_rate_qwen.json --out benchmarks/results/2026-11-23-paper-multidraft/multidraft_qwen_loop.png

Block efficiency of a row = its generated tokens / target verification calls, pooled over its runs (prompt x
seed); the +- is the standard error of the per-run block efficiencies (runs differ in prompt, so it includes the
prompt-to-prompt spread). Token rate = pooled tokens / pooled process CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# seed 002, Table 1 (Dolly, OPT-125M -> OPT-13B, identical drafts, K = 2..6): block efficiency, mean (+- spread)
PAPER_TABLE_1 = {"IS": [2.13, 2.22, 2.26, 2.27, 2.28], "SpecInfer": [1.76, 1.86, 1.95, 2.00, 2.04],
                 "SpecTr": [1.77, 1.89, 1.96, 2.03, 2.08]}
PAPER_KS = [2, 3, 4, 5, 6]
SCHEME_OF_LABEL = {"SpecInfer": "SpecInfer", "SpecTr": "SpecTr", "IS (s=5, M=40)": "IS"}


def per_run_block_efficiency(cell: dict) -> list[float]:
    return [run["tokens"] / run["calls"] for run in cell["runs"] if run["calls"]]


def standard_error(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")


def summarize(rows: dict) -> dict:
    """{scheme: {K: {...}}} with pooled block efficiency, its SE over runs, and the token rate vs SD."""
    sd = rows["SD (K=1)"]
    out: dict = {}
    for label, cell in rows.items():
        if not cell["runs"]:
            continue
        scheme = "SD" if label.startswith("SD") else SCHEME_OF_LABEL.get(label.rsplit(" K=", 1)[0])
        if scheme is None:        # a scheme the paper's Table 1 does not have (auto alphabet, classical IS)
            continue
        done = len(cell["runs"])
        # pool SD over the same runs as this row (a stopped run may have fewer runs in later rows)
        sd_runs = sd["runs"][:done]
        sd_block = sum(r["tokens"] for r in sd_runs) / sum(r["calls"] for r in sd_runs)
        block = sum(r["tokens"] for r in cell["runs"]) / sum(r["calls"] for r in cell["runs"])
        rate = sum(r["tokens"] for r in cell["runs"]) / sum(r["cpu_s"] for r in cell["runs"])
        sd_rate = sum(r["tokens"] for r in sd_runs) / sum(r["cpu_s"] for r in sd_runs)
        out.setdefault(scheme, {})[cell["K"]] = {
            "runs": done, "tokens": sum(r["tokens"] for r in cell["runs"]), "block": block,
            "block_se": standard_error(per_run_block_efficiency(cell)), "block_vs_sd_pct": 100 * (block / sd_block - 1),
            "rate": rate, "rate_vs_sd_pct": 100 * (rate / sd_rate - 1)}
    return out


def print_table(summary: dict) -> None:
    sd = summary["SD"][1]
    print(f"SD (K=1): block efficiency {sd['block']:.2f} +- {sd['block_se']:.2f}, {sd['rate']:.3f} tokens/CPU-s, "
          f"{sd['tokens']} tokens over {sd['runs']} runs")
    print("| K | scheme | block eff. (ours) | vs SD | paper's Table 1 | token rate vs SD (ours, CPU) | runs | tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for k in PAPER_KS:
        for scheme in ("SpecInfer", "SpecTr", "IS"):
            cell = summary.get(scheme, {}).get(k)
            if cell is None:
                continue
            paper = PAPER_TABLE_1[scheme][PAPER_KS.index(k)]
            print(f"| {k} | {scheme} | {cell['block']:.2f} +- {cell['block_se']:.2f} | {cell['block_vs_sd_pct']:+.1f} % "
                  f"| {paper:.2f} | {cell['rate_vs_sd_pct']:+.1f} % | {cell['runs']} | {cell['tokens']} |")


def plot(summary: dict, pair: str, path: str) -> None:
    figure, (ours, paper) = plt.subplots(1, 2, figsize=(9, 3.8))
    for scheme, marker in (("SpecInfer", "s"), ("SpecTr", "^"), ("IS", "o")):
        cells = summary.get(scheme, {})
        ks = sorted(cells)
        if ks:
            ours.errorbar(ks, [cells[k]["block"] for k in ks], yerr=[cells[k]["block_se"] for k in ks],
                          marker=marker, capsize=3, label=scheme)
        paper.plot(PAPER_KS, PAPER_TABLE_1[scheme], marker=marker, label=scheme)
    sd = summary["SD"][1]
    ours.axhline(sd["block"], color="grey", linestyle="--", label="SD (K=1)")
    ours.set_title(f"ours: {pair}\nreal loop, top-p 0.95, draft T 1.2, L 4", fontsize=9)
    paper.set_title("paper (seed 002 Table 1): OPT-125M -> 13B, Dolly", fontsize=9)
    for axis in (ours, paper):
        axis.set_xlabel("K (identical drafts)")
        axis.set_xticks(PAPER_KS)
        axis.set_ylabel("block efficiency (tokens / target call)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result")
    parser.add_argument("--out", default=None, help="PNG path")
    args = parser.parse_args()
    result = json.load(open(args.result))
    summary = summarize(result["rows"])
    print_table(summary)
    if args.out:
        plot(summary, f"{result['draft']} -> {result['target']}", args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
