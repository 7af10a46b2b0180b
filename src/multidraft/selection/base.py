"""What every selection scheme provides, plus the random draws they share.

Convention inside this package (spec §0, A1): the paper's p is the draft law and q the target
law; code spells them `draft_probs` / `target_probs`. A *plan* is built once per position from
(draft_probs, target_probs); it can then select a token for given candidates, and report the exact
per-tuple output law that its sampler follows (used by `output_distribution`).
"""

from __future__ import annotations

import numpy as np
import torch


class SelectionPlan:
    """One position's selection rule, built from the draft and target laws."""

    #: Every scheme in this package keeps the target law exactly.
    lossless = True

    def sample(self, candidates: list[int], generator: torch.Generator | None) -> tuple[int, bool]:
        """Return (token, accepted): `accepted` is True when the token came from the accept branch."""
        raise NotImplementedError

    def tuple_laws(self, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For candidate tuples (T, K), the output law split into (accept-branch mass, residual mass), each (T, V)."""
        raise NotImplementedError

    def accept_branch_closed_form(self) -> float:
        """The accept-branch probability computed from the laws alone (no enumeration)."""
        raise NotImplementedError


def uniforms(count: int, generator: torch.Generator | None) -> list[float]:
    """`count` U(0,1) draws from a CPU generator (one call, so the stream stays reproducible)."""
    return torch.rand(count, generator=generator, dtype=torch.float64).tolist()


def sample_from_weights(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw an index with probability proportional to non-negative `weights` (inverse CDF, O(V))."""
    cumulative = torch.cumsum(weights, dim=0)
    threshold = uniforms(1, generator)[0] * float(cumulative[-1])
    index = int(torch.searchsorted(cumulative, torch.tensor([threshold], dtype=cumulative.dtype,
                                                             device=cumulative.device), right=True))
    return min(index, weights.shape[0] - 1)


def sample_index_numpy(weights: np.ndarray, uniform: float) -> int:
    """Inverse-CDF draw on a small numpy weight vector, given one uniform."""
    cumulative = np.cumsum(weights)
    index = int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"))
    return min(index, len(weights) - 1)


def normalise_or_keep(weights: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """weights / sum, or `fallback` when the sum is 0 (that branch then has probability 0)."""
    total = float(weights.sum())
    return weights / total if total > 0 else fallback


def safe_ratio(numerator, denominator):
    """min(1, numerator / denominator) with 0 where the denominator is 0.

    A candidate with zero draft probability cannot have been drawn; sending it to the residual
    keeps every other case exact and avoids a division by zero.
    """
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.zeros(np.broadcast(numerator, denominator).shape)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return np.minimum(out, 1.0)


def one_hot(indices: np.ndarray, size: int) -> np.ndarray:
    """(T,) integer array -> (T, size) float one-hot rows."""
    out = np.zeros((len(indices), size))
    out[np.arange(len(indices)), indices] = 1.0
    return out
