"""The verifier interface."""

from __future__ import annotations

import torch

from multidraft.sampling import PositionSampler
from multidraft.types import Draft, Verdict


class Verifier:
    """Accepts part of a draft. `lossless` says whether the output law equals plain decoding's."""

    name = "verifier"
    lossless = True
    # The typed Draft parts (types.DRAFT_FIELDS) this verifier reads: its drafter must provide them.
    needs: tuple[str, ...] = ()

    def length_sensitive(self, sampler: PositionSampler) -> bool:
        """Whether which tokens come out depends on how deep the drafts are: true for a lossy verifier, and for a
        lossless one that samples by rejection (a drafted token is kept by a draw against its draft probability, so
        a position's token depends on whether a draft reached it). Such a request's draft length must never come
        from measured timings, or a seed would not fix its text (decoders/loop.py)."""
        return not (self.lossless and sampler.params.greedy)

    def verify(self, draft: Draft, target_logits: torch.Tensor, sampler: PositionSampler,
               first_position: int) -> Verdict:
        """`target_logits` has 1 + len(draft) rows: row 0 is the root (the last committed token), row 1 + i is
        draft node i; each row predicts the token after its node. `first_position` is the absolute position of
        the first new token, so a node at depth d predicts position first_position + d.
        """
        raise NotImplementedError
