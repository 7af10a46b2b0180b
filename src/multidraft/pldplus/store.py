"""The artifact store: only what ranking needs, always covering exactly the positions in the KV cache.

The loop hands the drafter the rows of each forward that stayed in the cache (`kept_rows`), so appending
just those rows keeps the store trimmed with the cache: rows of rejected draft tokens never enter it.
"""

from __future__ import annotations

import torch

from multidraft.errors import InvalidOptionError


class HiddenStore:
    """Layer-l hidden states of positions 0..length-1, in a buffer that grows by doubling."""

    def __init__(self, hidden_size: int, capacity: int = 256):
        self._buffer = torch.empty(max(1, capacity), hidden_size, dtype=torch.float32)
        self.length = 0

    @property
    def rows(self) -> torch.Tensor:
        return self._buffer[: self.length]

    def reset(self) -> None:
        self.length = 0

    def append(self, rows: torch.Tensor) -> None:
        rows = rows.detach().to(torch.float32)
        needed = self.length + rows.shape[0]
        if needed > self._buffer.shape[0]:
            grown = torch.empty(max(needed, 2 * self._buffer.shape[0]), self._buffer.shape[1], dtype=torch.float32)
            grown[: self.length] = self._buffer[: self.length]
            self._buffer = grown
        self._buffer[self.length: needed] = rows
        self.length = needed


class AttentionRowStore:
    """The attention row of the most recently processed position, for the selected heads: (num_heads, length)."""

    def __init__(self):
        self.row = None

    @property
    def length(self) -> int:
        return 0 if self.row is None else int(self.row.shape[-1])

    def reset(self) -> None:
        self.row = None

    def set(self, attention, row: int, columns) -> None:
        """Keep query row `row` of a captured block, over the key positions `columns` it saw (past + its path).

        `attention` is eager weights (heads, T, kv_len) or `AttentionQueries` (other kernels: computed here).
        """
        columns = list(columns)
        available = attention.shape[-1] if isinstance(attention, torch.Tensor) else attention.num_keys
        if columns and columns[-1] >= available:
            raise InvalidOptionError(
                f"the captured attention heads see only {available} keys, not the {columns[-1] + 1} positions of the "
                "context (a sliding-window attention layer?); pass induction_heads=[(layer, head), ...] from "
                "full-attention layers or use rank_by='hidden'")
        if isinstance(attention, torch.Tensor):
            weights = attention[:, row, columns]
        else:
            weights = attention.weights(row, columns)
        self.row = weights.detach().to(torch.float32)    # a new tensor: list indexing and weights() both copy
