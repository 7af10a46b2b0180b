"""PNG figures for benchmarks/results/2026-11-23-paper-multidraft/README.md from a `selection_paper.py acceptance --json` result: the exact
per-token acceptance of each scheme against the draft temperature (the paper's Fig. 3, identical drafts) and
against the second draft's temperature (Fig. 4, non-identical drafts).

    .venv/bin/python benchmarks/results/2026-11-23-paper-multidraft/multidraft_figures.py benchmarks/results/2026-11-23-paper-multidraft/selection_paper_qwen.json \
        --out benchmarks/results/2026-11-23-paper-multidraft/multidraft_qwen
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHEMES = ("SD (K=1)", "SpecInfer", "SpecTr", "IS (s=5, M=40)", "IS (s=5, M=|supp q|)", "classical IS (auto)",
           "optimal P*")


def plot(section: dict, prefix: str, xlabel: str, title: str, path: str) -> None:
    labels = list(section)
    xs = [float(label.split("=")[1]) for label in labels]
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    for scheme in SCHEMES:
        ys = [section[label].get(scheme) for label in labels]
        points = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if points:
            axis.plot(*zip(*points), marker="o", label=scheme)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("accept-branch probability per token (exact)")
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result")
    parser.add_argument("--out", required=True, help="path prefix of the PNG files")
    args = parser.parse_args()
    result = json.load(open(args.result))
    pair = f"{result['args'].get('draft_model') or 'layer-skip'} -> {result['args'].get('model')}"
    plot(result["mean"]["Fig. 3"], "T_draft", "draft temperature (both drafts)",
         f"K=2 identical drafts, top-p 0.95\n{pair}", f"{args.out}_fig3.png")
    plot(result["mean"]["Fig. 4"], "T_draft2", "temperature of draft 2 (draft 1 at 1.2)",
         f"K=2 non-identical drafts, top-p 0.95\n{pair}", f"{args.out}_fig4.png")
    print(f"wrote {args.out}_fig3.png and {args.out}_fig4.png")


if __name__ == "__main__":
    main()
