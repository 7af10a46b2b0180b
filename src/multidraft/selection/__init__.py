"""Token-level selection rules for K drafted candidates (specs/multidraft.md).

Given K candidate tokens x_1..x_K, drawn independently from the draft laws (rows of
`draft_probs`, shape (K, V)), a rule outputs one token whose law is exactly `target_probs` (V,)
and which is one of the candidates as often as possible.

Schemes (`scheme=`), all **lossless** (the output law equals the target exactly; tested by
enumeration):

| scheme | rule | drafts | options |
|---|---|---|---|
| "speculative" | single-draft speculative sampling (§2) | K = 1 | |
| "specinfer" | SpecInfer recursive rejection with residuals (§3.9) | any | |
| "spectr" | SpecTr K-SEQ with rho* (§3.10) | identical only | |
| "is" | classical importance sampling, weights q/p, then speculative sampling (§3.2) | any | alphabet_size="auto" |
| "is_lp" | two-step IS, full pairwise-LP weights, K > 2 by chaining (§3.4, 3.6, 3.8) | any | alphabet_size=40 |
| "is_lp_truncated" | two-step IS, truncated LP with `s` free tokens (§3.5); the paper's "IS" | any | s=5, alphabet_size="auto" |
| "optimal_lp" | IS weights from the full LP over tuples: reaches P* (test oracle, V <= 8) | any | |

`alphabet_size=M` keeps the M most likely target tokens and merges the rest into one symbol
(§3.7, A4), which keeps the law exact; `None` disables it (then LPs grow with V). Classical IS's
"auto" alphabet keeps the target's whole support (tokens with zero target mass have IS weight 0, so merging
them into ⊥ costs no acceptance) unless its exact law would cost more than a fixed budget of terms; then it
keeps the largest M within a budget set from the measured cost of a term (the whole support up to ~3,000 tokens at
K = 2, ~340 at K = 3, ~100 at K = 4 on a 49k vocabulary).
A smaller alphabet only moves target mass to the exact fallback draw of §3.7. The truncated LP's "auto" alphabet
is the target's support up to 3,072 tokens (measured ~0.1 s a position; the paper's M = 40 capped its acceptance
at q(top 40) on wide supports: benchmarks/results/2026-11-23-selection/README.md); pass alphabet_size=40 for the
paper's setting.
The paper's "IS" (seed 002: truncated LP, s = 5, M = 40) is `is_lp_truncated`; `is` is the classical
importance-sampling baseline of its §3.2.

Letters: inside this package p is the draft law and q the target law, as in the paper.
"""

from multidraft.selection.schemes import (
    LOSSLESS,
    SCHEMES,
    acceptance_probability,
    build_plan,
    closed_form_acceptance,
    optimal_acceptance,
    output_distribution,
    select,
    surviving_drafts,
    theorem2_condition,
)
from multidraft.selection.specinfer import speculative_residual
from multidraft.selection.spectr import solve_rho

__all__ = [
    "LOSSLESS",
    "SCHEMES",
    "acceptance_probability",
    "build_plan",
    "closed_form_acceptance",
    "optimal_acceptance",
    "output_distribution",
    "select",
    "solve_rho",
    "speculative_residual",
    "surviving_drafts",
    "theorem2_condition",
]
