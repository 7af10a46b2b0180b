"""PNG figure for benchmarks/results/2026-11-23-paper-mtad/README.md from a `mtad_paper.py real --json` result: block efficiency and counted
energy per token (relative to target-only sampling) of each method of the main comparison.

    .venv/bin/python benchmarks/results/2026-11-23-paper-mtad/mtad_figures.py benchmarks/results/2026-11-23-paper-mtad/mtad_real_qwen.json \
        --out benchmarks/results/2026-11-23-paper-mtad/mtad_qwen_main.png
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = json.load(open(args.result))
    rows = result["results"]["Table 4 (main)"]
    base = rows["sample (target only)"]["counted_mj_per_token"]
    names = [name.split(",")[0].replace(" (target only)", "") for name in rows]
    efficiency = [row["block_efficiency"] for row in rows.values()]
    energy = [row["counted_mj_per_token"] / base for row in rows.values()]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar(names, efficiency, color="tab:blue")
    left.set_ylabel("block efficiency (tokens / target call)")
    right.bar(names, energy, color="tab:orange")
    right.set_ylabel("counted energy per token vs sampling")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=35, labelsize=8)
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle(f"{result['draft']} -> {result['target']}, paper's warp (T 1, top-k 20, top-p 0.9)", fontsize=9)
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
