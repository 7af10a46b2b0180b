"""Single-draft speculative sampling (spec §2) and SpecInfer's multi-round rejection (§3.9).

SpecInfer with K = 1 *is* single-draft speculative sampling, so one plan serves both schemes.
Round k accepts candidate x_k with probability min(1, r_k(x_k) / p_k(x_k)); on rejection the
running target becomes r_{k+1} = normalise((r_k - p_k)^+). Residuals are computed lazily in
`sample`, so a token accepted in round 1 costs O(K) work, not O(K V).
"""

from __future__ import annotations

import numpy as np
import torch

from multidraft.selection.base import (
    SelectionPlan,
    normalise_or_keep,
    sample_from_weights,
    safe_ratio,
    uniforms,
)


def speculative_residual(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """normalise((target - draft)^+): the law to sample after a rejection.

    If draft == target the sum is 0 and rejection had probability 0; the target is returned so
    callers never divide by zero.
    """
    return normalise_or_keep(torch.clamp(target_probs - draft_probs, min=0.0), target_probs)


class SpecInferPlan(SelectionPlan):
    """Recursive rejection over the drafts in their given order (IID or non-IID)."""

    def __init__(self, draft_probs: torch.Tensor, target_probs: torch.Tensor):
        self.draft_probs = draft_probs
        self.target_probs = target_probs

    def residuals(self) -> list[torch.Tensor]:
        """[r_1 = target, r_2, ..., r_{K+1}]; r_{K+1} is the law sampled when every round rejects."""
        running = [self.target_probs]
        for draft_row in self.draft_probs:
            running.append(speculative_residual(draft_row, running[-1]))
        return running

    def sample(self, candidates, generator):
        draws = uniforms(len(candidates), generator)
        running = self.target_probs
        for round_index, token in enumerate(candidates):
            draft_row = self.draft_probs[round_index]
            accept = safe_ratio(float(running[token]), float(draft_row[token]))
            if draws[round_index] < accept:
                return token, True
            running = speculative_residual(draft_row, running)
        return sample_from_weights(running, generator), False

    def tuple_laws(self, tuples):
        residuals = [r.cpu().numpy() for r in self.residuals()]
        draft = self.draft_probs.cpu().numpy()
        num_tuples, vocab_size = len(tuples), draft.shape[1]
        accept_mass = np.zeros((num_tuples, vocab_size))
        reach = np.ones(num_tuples)  # probability that round k is reached
        rows = np.arange(num_tuples)
        for round_index in range(tuples.shape[1]):
            tokens = tuples[:, round_index]
            accept = safe_ratio(residuals[round_index][tokens], draft[round_index][tokens])
            np.add.at(accept_mass, (rows, tokens), reach * accept)
            reach = reach * (1.0 - accept)
        residual_mass = reach[:, None] * residuals[-1][None, :]
        return accept_mass, residual_mass

    def accept_branch_closed_form(self):
        # 1 - prod(1 - beta_k) with beta_k = sum min(r_k, p_k) (spec §3.9)
        residuals = self.residuals()
        reject_all = 1.0
        for round_index, draft_row in enumerate(self.draft_probs):
            beta = float(torch.minimum(residuals[round_index], draft_row).sum())
            reject_all *= 1.0 - beta
        return 1.0 - reject_all
