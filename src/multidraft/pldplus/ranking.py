"""Candidate occurrences and the PLD+ rankers (specs/pldplus.md §3.2-3.4), as vectorised tensor code.

Indexing (0-based): `seq` has N tokens, the artifacts cover positions 0..q with q = N-2. A candidate p
holds the last token (seq[p] == seq[-1], p <= q); its draft is seq[p+1 : p+1+k].
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from multidraft.errors import PromptError

SCOPES = ("context", "prompt")


def candidates(seq: Sequence[int], scope: str = "context", prompt_length: Optional[int] = None) -> np.ndarray:
    """Earlier positions p <= N-2 holding the last token (Eq. 1), ascending; "prompt" scope keeps p < prompt_length."""
    tokens = np.asarray(seq, dtype=np.int64)
    last = len(tokens) - 2
    if scope == "prompt" and prompt_length is not None:
        last = min(last, prompt_length - 1)
    if last < 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(tokens[: last + 1] == tokens[-1])


def _window_means(hidden: torch.Tensor, ends: torch.Tensor, window: int) -> torch.Tensor:
    """Mean of hidden[e-window+1 .. e] for each end e (windows clipped at 0)."""
    if window == 1:
        return hidden[ends]
    offsets = torch.arange(window)
    index = (ends[:, None] - offsets[None, :])
    valid = index >= 0
    gathered = hidden[index.clamp(min=0)] * valid[..., None]
    return gathered.sum(1) / valid.sum(1, keepdim=True)


def rank_hidden(hidden: torch.Tensor, positions: np.ndarray, theta: Optional[float] = None,
                window: int = 1) -> Optional[int]:
    """PLD+(h): the p maximising cos(mean H[p-m..p-1], mean H[q-m+1..q]) (Eq. 3), q = len(hidden)-1.

    p needs m earlier rows, so p < m is dropped; with `theta` only cosines > theta compete. Ties go to the
    smallest p (argmax returns the first). None when no candidate is left.
    """
    if hidden.shape[0] == 0:
        raise PromptError("PLD+ has no hidden states to rank with: the context is empty")
    positions = positions[positions - window >= 0]
    if len(positions) == 0:
        return None
    last = hidden.shape[0] - 1
    query = _window_means(hidden, torch.tensor([last]), window)[0]
    keys = _window_means(hidden, torch.as_tensor(positions - 1), window)
    # Clamped: float error can put a parallel pair at 1.0000001, and theta >= 1 must remove every candidate.
    scores = torch.nn.functional.cosine_similarity(keys, query[None], dim=-1, eps=1e-12).clamp(-1.0, 1.0)
    if theta is not None:
        keep = scores > theta
        if not bool(keep.any()):
            return None
        scores = torch.where(keep, scores, torch.full_like(scores, -float("inf")))
    return int(positions[int(torch.argmax(scores))])


def rank_attention(row: torch.Tensor, positions: np.ndarray, aggregate: str = "max") -> Optional[int]:
    """PLD+(a): the p maximising the aggregate over heads of the last query row's weight on key p (Eq. 2)."""
    if row is None or row.shape[-1] == 0:
        raise PromptError("PLD+ has no attention row to rank with: the context is empty")
    if len(positions) == 0:
        return None
    columns = row[:, torch.as_tensor(positions)]
    scores = columns.max(0).values if aggregate == "max" else columns.sum(0)
    return int(positions[int(torch.argmax(scores))])
