"""Lossless verification of K drafted chains merged into one prefix tree (specs/multidraft.md §4).

At each depth every still-active draft sits on the same tree node, so they share one target law; a
token-level selection rule (`multidraft.selection`) picks the emitted token from their candidates, and
the drafts whose token equals it continue (exact even when the token came from a residual draw, spec A3).
When every depth is passed, one bonus token is drawn from the target. With one draft this is plain
speculative sampling (rejection with the residual); at temperature 0 the target law is one-hot and every
rule emits the target's argmax, so the output equals greedy decoding.

Randomness: the decision for absolute position n draws from `sampler.generator(n, VERIFY_STREAM)` and the
bonus token uses the sampler's own draw for its position; each position is decided once, so draws never repeat.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from multidraft.errors import InvalidOptionError
from multidraft.selection import SCHEMES, select
from multidraft.types import Verdict
from multidraft.verify.base import Verifier

VERIFY_STREAM = 1
# Schemes a user may pick for multi-draft decoding ("speculative" is the one-draft rule, used automatically).
SELECTION_SCHEMES = ("specinfer", "spectr", "is", "is_lp", "is_lp_truncated")


@dataclass
class DraftChains:
    """The K chains behind a draft tree: draft k's token at depth d sits on tree node `nodes[k][d]` and was
    drawn from `draft_probs[k, d]` (shape (K, L, V)); all chains have the same length L."""

    tokens: list[list[int]]
    nodes: list[list[int]]
    draft_probs: torch.Tensor

    @property
    def num_drafts(self) -> int:
        return len(self.tokens)

    @property
    def length(self) -> int:
        return len(self.tokens[0]) if self.tokens else 0


def chains_of(draft) -> DraftChains:
    """The chains of a multi-draft tree, or the single chain of an ordinary draft with `draft_probs`."""
    if draft.chains is not None:
        return draft.chains
    if len(draft) and (draft.draft_probs is None or not draft.is_chain()):
        raise ValueError("speculative verification needs a chain with draft_probs, or draft.chains")
    probs = draft.draft_probs[None] if len(draft) else torch.zeros(1, 0, 1)
    return DraftChains([list(draft.token_ids)], [list(range(len(draft)))], probs)


class MultiDraftVerifier(Verifier):
    """Token-level selection along the tree; `selection` is one of SELECTION_SCHEMES (or "speculative" for K=1)."""

    name = "multi_draft"
    lossless = True
    needs = ("chains",)

    def __init__(self, selection: str = "specinfer", **selection_options):
        if selection not in SCHEMES or selection == "optimal_lp":
            raise InvalidOptionError(f"unknown selection scheme {selection!r}; choose one of: "
                                     f"{', '.join(SELECTION_SCHEMES)}")
        self.selection = selection
        self.selection_options = selection_options

    def verify(self, draft, target_logits, sampler, first_position):
        chains = chains_of(draft)
        active = list(range(chains.num_drafts))
        node, path = -1, []
        for depth in range(chains.length):
            if any(chains.nodes[k][depth] >= len(draft) for k in active):
                break   # the loop cut the tree at the token budget
            target_probs = sampler.probs(target_logits[node + 1])
            candidates = [chains.tokens[k][depth] for k in active]
            draft_probs = chains.draft_probs[active, depth]
            generator = sampler.generator(first_position + depth, VERIFY_STREAM)
            if len(active) == 1:   # every rule reduces to single-draft speculative sampling
                token, _ = select("speculative", candidates, draft_probs, target_probs, generator)
            else:
                token, _ = select(self.selection, candidates, draft_probs, target_probs, generator,
                                  **self.selection_options)
            active = [k for k in active if chains.tokens[k][depth] == token]
            if not active:
                return Verdict(path, token)
            node = chains.nodes[active[0]][depth]
            path.append(node)
        bonus = sampler.pick(target_logits[node + 1], first_position + len(path))
        return Verdict(path, bonus)
