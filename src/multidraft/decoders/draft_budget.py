"""The engine's global draft budget: how deep each adaptive request's draft is verified in one step, chosen for the
whole step from each request's acceptance estimate and the measured cost of a forward by its row count (the
draft-length policy itself is decoders/draft_length.py)."""

from __future__ import annotations

from typing import Optional

from multidraft.decoders.draft_length import batch_depths, nodes_by_depth

SEARCH_DEPTH = 16          # deepest draft the global budget considers before a sampled draft is proposed


def apply_budget(costs, decodings: list, other_rows: int) -> list[Optional[int]]:
    """Cut each adaptive cuttable draft of this step (decoders/loop.py `Decoding`s) to its budgeted depth; returns,
    per decoding, the cap of its next sampled draft (None where it has none: fixed or cuttable). `other_rows`:
    rows of the forward that are no decoding's (prompt chunks packed with them)."""
    adaptive = [d for d in decodings if d.policy is not None]
    fixed_rows = other_rows + sum(len(d.draft) + 1 for d in decodings if d.policy is None)
    cuttable = [d for d in adaptive if d.drafter.cuttable]
    sampled = [d for d in adaptive if not d.drafter.cuttable]
    base_rows = fixed_rows + len(adaptive)
    base_tokens = float(len(decodings))
    if cuttable:
        offers = [(d.policy, nodes_by_depth(d.draft.depths())) for d in cuttable]
        rows = base_rows + sum(len(d.draft) for d in sampled)
        for decoding, depth in zip(cuttable, batch_depths(costs, rows, base_tokens, offers)):
            decoding.cut(decoding.policy.probe(depth))
    caps: dict[int, int] = {}
    if sampled:      # next step's caps, with this step's cut drafts as the other rows
        rows = base_rows + sum(len(d.draft) for d in cuttable)
        offers = [(d.policy, list(range(min(SEARCH_DEPTH, d.output.remaining) + 1))) for d in sampled]
        for decoding, depth in zip(sampled, batch_depths(costs, rows, base_tokens, offers)):
            caps[id(decoding)] = max(1, depth)
    return [caps.get(id(d)) for d in decodings]
