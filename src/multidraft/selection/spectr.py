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


def solve_rho(draft_probs: torch.Tensor, target_probs: torch.Tensor, num_drafts: int) -> tuple[float, float]:
    """Return (rho, beta(rho)): f(rho) <= 0 and rho within ~1e-13 of the smallest such rho (rho*)."""
    if num_drafts == 1:
        return 1.0, float(torch.minimum(draft_probs, target_probs).sum())
    low, high = 1.0, float(num_drafts)
    # Bin 0: ratio < 1 (always adds q/rho); bins 1..B: the bracket; bin B+1: ratio >= K or p = 0
    # (adds p, which is 0 when p = 0). One float buffer and one index buffer over V.
    bucket = torch.div(target_probs, draft_probs)
    bucket.nan_to_num_(nan=float("inf")).sub_(low).mul_(_BUCKETS / (high - low)).floor_()
    bucket = bucket.clamp_(-1, _BUCKETS).add_(1).long()
    draft_mass = torch.bincount(bucket, weights=draft_probs, minlength=_BUCKETS + 2).cpu().numpy()
    target_mass = torch.bincount(bucket, weights=target_probs, minlength=_BUCKETS + 2).cpu().numpy()
    always_draft = float(draft_mass[-1])
    always_target = float(target_mass[0])
    token_ids = None  # tokens whose ratio lies in the current bracket (None: use the bins)
    while True:
        grid = low + (high - low) * np.arange(_BUCKETS + 1) / _BUCKETS
        inner_draft, inner_target = draft_mass[1:-1], target_mass[1:-1]
        draft_at_or_above = always_draft + np.concatenate([np.cumsum(inner_draft[::-1])[::-1], [0.0]])
        target_below = always_target + np.concatenate([[0.0], np.cumsum(inner_target)])
        beta = draft_at_or_above + target_below / grid
        non_positive = np.nonzero(_f(beta, grid, num_drafts) <= 0)[0]
        first = int(non_positive[0]) if len(non_positive) else _BUCKETS
        if first == 0:
            return low, float(beta[0])
        kept = first - 1  # f changes sign inside bin `kept` (+1 for the underflow bin)
        always_draft += float(inner_draft[kept + 1:].sum())
        always_target += float(inner_target[:kept].sum())
        low, high = float(grid[kept]), float(grid[kept + 1])
        if token_ids is None:  # first pass: bins over the whole vocabulary (torch)
            token_ids = torch.nonzero(bucket == kept + 1).reshape(-1)
        else:
            token_ids = token_ids[torch.as_tensor(np.nonzero(bucket == kept + 1)[0], dtype=torch.long)]
        if token_ids.numel() <= _SMALL_ENOUGH or high - low <= 1e-13 * high:
            break
        # re-bin the few tokens left over the narrower bracket
        ratio = (target_probs[token_ids] / draft_probs[token_ids]).cpu().numpy()
        bucket = np.clip(np.floor((ratio - low) * (_BUCKETS / (high - low))), -1, _BUCKETS).astype(np.int64) + 1
        draft_mass = np.bincount(bucket, weights=draft_probs[token_ids].cpu().numpy(), minlength=_BUCKETS + 2)
        target_mass = np.bincount(bucket, weights=target_probs[token_ids].cpu().numpy(), minlength=_BUCKETS + 2)
        always_draft += float(draft_mass[-1])
        always_target += float(target_mass[0])

    draft = draft_probs[token_ids].cpu().numpy()
    target = target_probs[token_ids].cpu().numpy()
    ratio = target / draft

    def beta_at(rho):
        return always_draft + always_target / rho + np.where(ratio >= rho, draft, target / rho).sum()

    for _ in range(200):
        if high - low <= 1e-15 * high:
            break
        middle = 0.5 * (low + high)
        if _f(beta_at(middle), middle, num_drafts) > 0:
            low = middle
        else:
            high = middle
    return high, float(beta_at(high))  # the upper end keeps the residual non-negative (spec A10)


class SpecTrPlan(SelectionPlan):
    """K-SEQ for identical drafts: every row of draft_probs is the same law."""

    def __init__(self, draft_probs: torch.Tensor, target_probs: torch.Tensor):
        self.num_drafts = draft_probs.shape[0]
        self.draft_row = draft_probs[0]
        self.target_probs = target_probs
        self.rho, self.beta = solve_rho(self.draft_row, target_probs, self.num_drafts)
        self.accept_probability = 1.0 - (1.0 - self.beta) ** self.num_drafts

    def residual(self) -> torch.Tensor:
        if self.beta <= 0:
            return self.target_probs  # nothing is ever accepted: the residual is the target itself
        accepted_part = torch.minimum(self.draft_row, self.target_probs / self.rho)
        raw = self.target_probs - accepted_part * (self.accept_probability / self.beta)
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
