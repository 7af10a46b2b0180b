"""Greedy match: follow the tree while a child holds the target's argmax. Lossless at temperature 0."""

from __future__ import annotations

from multidraft.sampling import argmax_rows
from multidraft.verify.base import Verifier
from multidraft.types import Verdict


class GreedyVerifier(Verifier):
    name = "greedy_match"

    def length_sensitive(self, sampler) -> bool:
        return False           # the target's argmax, drafted or not

    def verify(self, draft, target_logits, sampler, first_position):
        choices = argmax_rows(target_logits)   # choices[row] = the target's token after that row's node
        children = _children_by_token(draft)
        node, path = -1, []
        while True:
            token = choices[node + 1]
            child = children.get((node, token))
            if child is None:
                return Verdict(path, token)
            path.append(child)
            node = child


def _children_by_token(draft) -> dict[tuple[int, int], int]:
    """(parent, token) -> first child holding that token."""
    index: dict[tuple[int, int], int] = {}
    for child, (parent, token) in enumerate(zip(draft.parents, draft.token_ids)):
        index.setdefault((parent, token), child)
    return index
