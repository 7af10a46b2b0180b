"""The n-gram side of Superposed Decoding: per-draft mixtures q_i(c) on the shared candidates, the
geometric interpolation with the LM (spd.md Eq. 5-7). The file itself comes from `multidraft.ngram.resolve`.

Drafts are followed token by token through `NGramModel` trie states, so a step costs one batched
lookup for the k x K candidates and one to extend the k survivors, whatever the context length.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np
import torch

from multidraft.errors import InvalidOptionError

PAPER_WEIGHTS = (0.01, 0.04, 0.15, 0.18, 0.12)  # lambda for orders 2..6 (spd.md §5.1)


class DraftNGram:
    """Per-draft n-gram state and the SPD mixture q_i(c) = sum_n lambda_n p_n(c | draft i)."""

    def __init__(self, model, weights: Sequence[float]):
        self.model = model
        weights = [float(w) for w in weights]
        if not weights or any(w < 0 or w != w for w in weights):
            raise InvalidOptionError(f"ngram_weights must be non-negative numbers (orders 2, 3, ...), got {weights!r}")
        if len(weights) + 1 > model.max_order:
            raise InvalidOptionError(
                f"ngram_weights has {len(weights)} weights (orders 2..{len(weights) + 1}) but the n-gram file "
                f"{model.path} only has orders up to {model.max_order}")
        self.weights = np.asarray(weights)
        self.orders = np.arange(2, 2 + len(weights))
        self.seconds = 0.0

    def start(self, context_ids: Sequence[int]) -> np.ndarray:
        """State [1, width] of one context (the prompt)."""
        t0 = time.perf_counter()
        states = self.model.context_states([list(context_ids)])
        self.seconds += time.perf_counter() - t0
        return states

    def mixture(self, states: np.ndarray, candidates: torch.Tensor) -> torch.Tensor:
        """q [rows, K] (float64): each draft's mixture at the shared candidate tokens."""
        t0 = time.perf_counter()
        cand = np.broadcast_to(candidates.cpu().numpy().astype(np.int64), (states.shape[0], candidates.numel()))
        probs, _seen = self.model.candidate_probs(states, cand, self.orders)  # [rows, O, K]
        q = np.einsum("o,rok->rk", self.weights, probs)
        self.seconds += time.perf_counter() - t0
        return torch.from_numpy(q)

    def extend(self, states: np.ndarray, parents: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """States of the survivors: parent draft's state extended by its new token."""
        t0 = time.perf_counter()
        new = self.model.extend_states(states[np.asarray(parents, dtype=np.int64)], np.asarray(tokens, dtype=np.int64))
        self.seconds += time.perf_counter() - t0
        return new


def interpolate(lp_hat: torch.Tensor, q: Optional[torch.Tensor], alpha: float, log_penalty: float) -> torch.Tensor:
    """Per-draft step scores s_i(c) = (1-alpha) log p_hat(c) + alpha log q_i(c)  [rows, K].

    q = 0 gives -inf (the candidate is excluded) unless the draft has no support on any candidate,
    then s_i(c) = (1-alpha) log p_hat(c) - log_penalty (Eq. 7). The terms are masked rather than
    multiplied so alpha = 0 and alpha = 1 never form 0 * (-inf) = NaN.
    """
    lm_term = (1.0 - alpha) * lp_hat if alpha < 1.0 else torch.zeros_like(lp_hat)
    if q is None or alpha == 0.0:
        rows = 1 if q is None else q.shape[0]
        return lm_term.expand(rows, -1).clone()
    supported = q > 0
    log_q = torch.where(supported, q.clamp_min(1e-300).log(), torch.full_like(q, -float("inf")))
    scores = lm_term[None, :] + alpha * log_q
    no_support = ~supported.any(dim=1)
    if no_support.any():
        scores[no_support] = lm_term[None, :] - log_penalty
    return scores
