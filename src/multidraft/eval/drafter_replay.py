"""Replay a lossless drafter on a recorded greedy output: the verification steps it would take, without the model.

Why: a lossless method's output at temperature 0 is greedy's, fixed in advance, and a drafter that reads only the
committed tokens (prompt lookup, suffix) drafts the same trees whatever computes the logits. So one greedy run per
prompt gives, for any number of drafter settings, exactly the loop's counts: target calls, acceptance length, drafted
tokens, under draft_length="fixed" or, given a `DraftLength` policy on a fixed cost curve (`adaptive_policy`), under
"adaptive" as the loop runs it on a machine whose forwards cost that curve. These counts hold under any machine load
(tuning on them needs no idle machine); `cost` prices each step with a measured forward-cost curve to compare
settings that draft more or less.
"""

from __future__ import annotations

from typing import Callable, Optional

from multidraft.decoders.draft_length import DraftLength, ForwardCosts
from multidraft.decoders.loop import _within_budget
from multidraft.drafters.base import LoopState
from multidraft.types import Draft


def replay(drafter, lm, prompt_ids: list[int], tokens: list[int], max_new_tokens: int,
           cost: Callable[[int], float] = lambda n: 1.0, policy: Optional[DraftLength] = None) -> dict:
    """Run `drafter` as the loop does (greedy tree match) against the fixed output `tokens`, which a run with
    `max_new_tokens` produced (it bounds the drafts, also when the output stopped earlier at EOS). `policy`: the
    request's draft-length policy (draft_length="adaptive": a depth asked for, a cuttable draft cut to what pays on
    the policy's costs); None: "fixed", every drafted token verified.

    `lm` needs only what the drafter reads (suffix and prompt lookup: `eos_token_ids`; a store also the vocabulary
    identity). Returns {"tokens", "calls" (verifications, the prefill excluded), "drafted", "cost"}."""
    if len(tokens) > max_new_tokens:
        raise ValueError(f"{len(tokens)} tokens cannot come from a run with max_new_tokens={max_new_tokens}")
    seq = list(prompt_ids)
    state = LoopState(seq=seq, prompt_length=len(seq), lm=lm, sampler=None, stats=None)
    drafter.begin(state, None)
    position, calls, drafted, price = 0, 0, 0, 0.0
    while position < len(tokens):
        budget = max_new_tokens - position - 1        # the loop never drafts past max_new_tokens
        if policy is not None and budget > 0:
            budget = policy.request_depth(budget)
        draft = _within_budget(drafter.propose(state, budget), budget) if budget > 0 else Draft()
        if policy is not None and drafter.cuttable:
            draft = _within_budget(draft, policy.choose(draft.depths()))
        accepted, parent = 0, -1
        while position + accepted < len(tokens):     # the drafted child that equals the next greedy token, if any
            wanted = tokens[position + accepted]
            child = next((i for i in range(len(draft)) if draft.parents[i] == parent
                          and draft.token_ids[i] == wanted), None)
            if child is None:
                break
            parent, accepted = child, accepted + 1
        if policy is not None and len(draft):
            policy.observe(max(draft.depths()), accepted)
        step = min(accepted + 1, len(tokens) - position)
        seq.extend(tokens[position:position + step])
        position += step
        calls += 1
        drafted += len(draft)
        price += cost(len(draft) + 1)
    drafter.end(state)
    return {"tokens": len(tokens), "calls": calls, "drafted": drafted, "cost": price}


class FixedCosts(ForwardCosts):
    """A forward-cost table that the steps do not move: a replay's machine (`table`: new tokens -> cost)."""

    def __init__(self, table: dict[int, float]):
        super().__init__()
        self.seconds = {int(n): float(c) for n, c in table.items()}

    def record(self, num_new: int, seconds: float) -> None:
        pass


def adaptive_policy(table: dict[int, float]) -> DraftLength:
    """A new request's draft-length policy on a machine whose forwards cost `table` (new tokens -> cost)."""
    return DraftLength(FixedCosts(table))


def cost_curve(table: dict[int, float]) -> Callable[[int], float]:
    """A forward's cost for n new tokens, linear between the measured sizes of `table` (n -> cost) and beyond."""
    points = sorted(table.items())
    if len(points) < 2:
        raise ValueError("a cost curve needs at least two measured sizes")

    def cost(n: int) -> float:
        for (n0, c0), (n1, c1) in zip(points, points[1:]):
            if n <= n1:
                return c0 + (c1 - c0) * (n - n0) / (n1 - n0)
        (n0, c0), (n1, c1) = points[-2], points[-1]
        return c1 + (c1 - c0) * (n - n1) / (n1 - n0)
    return cost
