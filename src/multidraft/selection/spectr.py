"""SpecTr K-SEQ (Sun et al. 2024; spec §3.10), identical drafts only.

Each of the K candidates is tried in turn with acceptance min(1, q(x)/(rho p(x))); the residual is
(q - min(p, q/rho) * p_acc / beta)^+. Any rho with f(rho) = p_acc(rho) - rho*beta(rho) <= 0 keeps the
output law exact (the residual is then non-negative); the smallest such rho, rho*, accepts most.

Finding rho* needs beta(rho) = sum_y min(p(y), q(y)/rho). Sorting a 150k vocabulary costs ~17 ms
on a small CPU, so `solve_rho` instead buckets the ratios q/p over the current bracket (one
bincount), keeps the bucket where f changes sign, and repeats on the few tokens left; the
final bisection runs on a handful of tokens. Total work is O(V).
"""

from __future__ import annotations

import numpy as np
import torch

from multidraft.selection.base import SelectionPlan, sample_from_weights, safe_ratio, uniforms

_BUCKETS = 2048
_SMALL_ENOUGH = 256  # tokens left in the bracket before switching to plain bisection


def _f(beta, rho, num_drafts):
    return 1.0 - (1.0 - beta) ** num_drafts - rho * beta


def solve_rho(draft_probs: torch.Tensor, target_probs: torch.Tensor, num_drafts: int) -> float:
    """Return rho in [1, K] with f(rho) <= 0, within ~1e-13 of the smallest such rho (rho*)."""
    if num_drafts == 1:
        return 1.0
    drawable = draft_probs > 0  # tokens with p = 0 add min(0, .) = 0 to beta
    draft = draft_probs[drawable]
    target = target_probs[drawable]
    ratio = target / draft
    low, high = 1.0, float(num_drafts)
    always_draft = float(draft[ratio >= high].sum())   # ratio >= rho for every rho in the bracket
    always_target = float(target[ratio < low].sum())    # contributes target/rho
    inside = (ratio >= low) & (ratio < high)
    draft, target, ratio = draft[inside], target[inside], ratio[inside]

    while ratio.numel() > _SMALL_ENOUGH and high - low > 1e-13 * high:
        width = high - low
        bucket = ((ratio - low) / width * _BUCKETS).floor().clamp_(0, _BUCKETS - 1).long()
        draft_mass = torch.bincount(bucket, weights=draft, minlength=_BUCKETS).cpu().numpy()
        target_mass = torch.bincount(bucket, weights=target, minlength=_BUCKETS).cpu().numpy()
        grid = low + width * np.arange(_BUCKETS + 1) / _BUCKETS
        draft_at_or_above = always_draft + np.concatenate([np.cumsum(draft_mass[::-1])[::-1], [0.0]])
        target_below = always_target + np.concatenate([[0.0], np.cumsum(target_mass)])
        beta = draft_at_or_above + target_below / grid
        non_positive = np.nonzero(_f(beta, grid, num_drafts) <= 0)[0]
        first = int(non_positive[0]) if len(non_positive) else _BUCKETS
        if first == 0:
            return low
        kept = first - 1  # f changes sign inside bucket `kept`
        always_draft += float(draft_mass[kept + 1:].sum())
        always_target += float(target_mass[:kept].sum())
        low, high = float(grid[kept]), float(grid[kept + 1])
        in_bucket = bucket == kept
        draft, target, ratio = draft[in_bucket], target[in_bucket], ratio[in_bucket]

    draft, target, ratio = (t.cpu().numpy() for t in (draft, target, ratio))

    def beta_at(rho):
        return always_draft + always_target / rho + np.where(ratio >= rho, draft, target / rho).sum()

    if _f(beta_at(low), low, num_drafts) <= 0:
        return low
    for _ in range(200):
        if high - low <= 1e-15 * high:
            break
        middle = 0.5 * (low + high)
        if _f(beta_at(middle), middle, num_drafts) > 0:
            low = middle
        else:
            high = middle
    return high  # the upper end keeps the residual non-negative (spec A10)


class SpecTrPlan(SelectionPlan):
    """K-SEQ for identical drafts: every row of draft_probs is the same law."""

    def __init__(self, draft_probs: torch.Tensor, target_probs: torch.Tensor):
        self.num_drafts = draft_probs.shape[0]
        self.draft_row = draft_probs[0]
        self.target_probs = target_probs
        self.rho = solve_rho(self.draft_row, target_probs, self.num_drafts)
        self._accepted_part = torch.minimum(self.draft_row, target_probs / self.rho)
        self.beta = float(self._accepted_part.sum())
        self.accept_probability = 1.0 - (1.0 - self.beta) ** self.num_drafts

    def residual(self) -> torch.Tensor:
        if self.beta <= 0:
            return self.target_probs  # nothing is ever accepted: the residual is the target itself
        raw = self.target_probs - self._accepted_part * (self.accept_probability / self.beta)
        clipped = torch.clamp(raw, min=0.0)
        total = float(clipped.sum())
        return clipped / total if total > 0 else self.target_probs

    def sample(self, candidates, generator):
        draws = uniforms(len(candidates), generator)
        for round_index, token in enumerate(candidates):
            accept = safe_ratio(float(self.target_probs[token]), self.rho * float(self.draft_row[token]))
            if draws[round_index] < accept:
                return token, True
        return sample_from_weights(self.residual(), generator), False

    def tuple_laws(self, tuples):
        target = self.target_probs.cpu().numpy()
        draft = self.draft_row.cpu().numpy()
        residual = self.residual().cpu().numpy()
        num_tuples = len(tuples)
        accept_mass = np.zeros((num_tuples, len(target)))
        reach = np.ones(num_tuples)
        rows = np.arange(num_tuples)
        for round_index in range(tuples.shape[1]):
            tokens = tuples[:, round_index]
            accept = safe_ratio(target[tokens], self.rho * draft[tokens])
            np.add.at(accept_mass, (rows, tokens), reach * accept)
            reach = reach * (1.0 - accept)
        return accept_mass, reach[:, None] * residual[None, :]

    def accept_branch_closed_form(self):
        return self.accept_probability
