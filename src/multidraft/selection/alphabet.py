"""Truncated alphabet with a merged symbol (spec §3.7 and A4).

The importance-sampling schemes work on a small alphabet: the M most likely target tokens plus one
merged symbol ⊥ standing for every other token. Draft mass on ⊥ is p(outside), target mass on ⊥ is
0, and candidates outside the kept set are mapped to ⊥ rather than dropped, so the law of the
intermediate token is computed from the laws the candidates were really drawn from. The reduced
scheme outputs Y ~ q̃ (q restricted to the kept set); emitting Y with probability q(kept) and
otherwise a token from outside drawn in proportion to q gives exactly q.
"""

from __future__ import annotations

import numpy as np
import torch

from multidraft.selection.base import sample_from_weights


def top_tokens(target_probs: torch.Tensor, count: int) -> torch.Tensor:
    """Ids of the `count` most likely tokens, most likely first.

    torch.topk over 150k entries costs ~0.4 ms. At most 1/t tokens can exceed a threshold t, so
    topk runs on the few tokens above t when there are enough of them (same result, exact ties
    aside, which do not affect exactness: any kept set gives the exact law).
    """
    for threshold in (1.0 / (4 * count), 1.0 / (1000 * count)):
        above = torch.nonzero(target_probs > threshold).reshape(-1)
        if above.numel() >= count:
            order = torch.topk(target_probs[above], count).indices
            return above[order]
    return torch.topk(target_probs, count).indices


class ReducedAlphabet:
    """Maps the V-token vocabulary to `num_symbols` = M kept tokens (+ ⊥ when something is left out)."""

    def __init__(self, draft_probs: torch.Tensor, target_probs: torch.Tensor, alphabet_size: int | None):
        self.target_probs = target_probs
        vocab_size = target_probs.shape[0]
        self.merged = alphabet_size is not None and alphabet_size < vocab_size
        if self.merged:
            self.kept = top_tokens(target_probs, alphabet_size)
        else:
            self.kept = torch.arange(vocab_size, device=target_probs.device)
        self.kept_numpy = self.kept.cpu().numpy()
        kept_target = target_probs[self.kept].cpu().numpy()
        kept_draft = draft_probs[:, self.kept].cpu().numpy()
        self.kept_mass = float(kept_target.sum()) if self.merged else 1.0
        if self.merged:
            outside_draft = np.clip(1.0 - kept_draft.sum(axis=1, keepdims=True), 0.0, None)
            self.draft = np.concatenate([kept_draft, outside_draft], axis=1)
            self.target = np.concatenate([kept_target / self.kept_mass, [0.0]])
            self.bottom = alphabet_size  # index of ⊥
        else:
            self.draft = kept_draft
            self.target = kept_target
            self.bottom = None
        self.num_symbols = self.target.shape[0]

    def to_reduced(self, candidates: list[int]) -> list[int]:
        """Vocabulary ids -> symbol indices (⊥ for ids outside the kept set)."""
        if not self.merged:
            return list(candidates)
        symbols = []
        for token in candidates:
            where = np.nonzero(self.kept_numpy == token)[0]
            symbols.append(int(where[0]) if len(where) else self.bottom)
        return symbols

    def symbol_map(self) -> np.ndarray:
        """(V,) array mapping every vocabulary id to its symbol (used by exact enumeration)."""
        vocab_size = self.target_probs.shape[0]
        mapping = np.full(vocab_size, self.bottom if self.merged else 0, dtype=np.int64)
        mapping[self.kept_numpy] = np.arange(len(self.kept_numpy))
        return mapping

    def _outside_weights(self) -> torch.Tensor:
        weights = self.target_probs.clone()
        weights[self.kept] = 0.0
        return weights

    def finish_sample(self, symbol: int, accepted: bool, draw: float, generator) -> tuple[int, bool]:
        """Post-processing of §3.7: keep the reduced output with probability q(kept)."""
        if not self.merged or draw < self.kept_mass:
            return int(self.kept_numpy[symbol]), accepted
        return sample_from_weights(self._outside_weights(), generator), False

    def expand(self, accept_reduced: np.ndarray, residual_reduced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-tuple reduced laws (T, n) -> vocabulary laws (T, V), applying the §3.7 post-processing."""
        vocab_size = self.target_probs.shape[0]
        num_tuples = accept_reduced.shape[0]
        accept = np.zeros((num_tuples, vocab_size))
        residual = np.zeros((num_tuples, vocab_size))
        kept_columns = len(self.kept_numpy)
        accept[:, self.kept_numpy] = self.kept_mass * accept_reduced[:, :kept_columns]
        residual[:, self.kept_numpy] = self.kept_mass * residual_reduced[:, :kept_columns]
        if self.merged:
            outside = self._outside_weights().cpu().numpy()
            total = outside.sum()
            if total > 0:
                residual += (1.0 - self.kept_mass) * (outside / total)[None, :]
        return accept, residual
