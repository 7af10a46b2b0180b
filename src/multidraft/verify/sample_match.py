"""Sample-and-match for deterministic drafts (prompt lookup, PLD+, greedy heads): lossless at any temperature.

At each node draw the target's own token for that position; move to the child holding it, or stop and
emit it. For a deterministic draft this *is* speculative sampling with a point-mass draft (accept d with
probability target(d); on rejection draw from the target restricted to the other tokens), so the output law
is exactly the target's (specs/pldplus.md §3.7). With position-keyed draws the output is even token-identical
to plain sampling with the same seed. At temperature 0 it reduces to greedy match.
"""

from __future__ import annotations

from multidraft.types import Verdict
from multidraft.verify.base import Verifier
from multidraft.verify.greedy import _children_by_token


class SampleMatchVerifier(Verifier):
    name = "sample_match"

    def length_sensitive(self, sampler) -> bool:
        return False           # each position's token is the target's own keyed draw, drafted or not

    def verify(self, draft, target_logits, sampler, first_position):
        children = _children_by_token(draft)
        depths = [0] + draft.depths()
        node, path = -1, []
        while True:
            token = sampler.pick(target_logits[node + 1], first_position + depths[node + 1])
            child = children.get((node, token))
            if child is None:
                return Verdict(path, token)
            path.append(child)
            node = child
