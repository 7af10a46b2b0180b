"""The one draft-and-verify loop. Every drafter x verifier pair (PLD, PLD+, draft models, MTAD, BPD) runs here.

Invariant at the top of each step: `seq` holds the committed tokens and the cache covers seq[:-1]; the last
token is fed together with the draft in one target forward (a chain, or a tree with a 4D mask). The verifier
accepts a root-to-node path and picks one more token; the cache keeps the root and the accepted nodes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from multidraft.decoders.draft_length import DraftLength, forward_costs
from multidraft.decoders.output import OutputCollector
from multidraft.drafters.base import Drafter, LoopState
from multidraft.types import DecodeStats, Draft
from multidraft.verify.base import Verifier


def draft_and_verify(lm, prompt_ids: list[int], drafter: Drafter, verifier: Verifier, sampler,
                     output: OutputCollector, stats: DecodeStats, draft_length: str = "fixed",
                     policy: Optional[DraftLength] = None) -> None:
    """Decode until `output` is done. draft_length="adaptive" verifies only as much of each draft as pays for its
    forward on this machine (decoders/draft_length.py; `policy` replaces the default one); "fixed" verifies every
    drafted token."""
    started = time.perf_counter()
    costs = forward_costs(lm)
    if draft_length != "adaptive":
        policy = None
    elif policy is None:
        policy = DraftLength(costs)
    seq = list(prompt_ids)
    state = LoopState(seq=seq, prompt_length=len(seq), lm=lm, sampler=sampler, stats=stats)
    capture = drafter.capture_options()
    cache = lm.new_cache()
    prefill_output = None
    if len(seq) > 1:
        prefill_output = lm.forward(cache, seq[:-1], logits_rows=slice(-1, None), **capture)
        stats.target_calls += 1
        stats.prefill_time += prefill_output.seconds
    drafter.begin(state, prefill_output)
    # What the forwards capture is fixed before the prefill, so it is the drafter's constructor's to say: a drafter
    # that sets hidden_layer / attention_heads in begin() would silently get nothing (issue #18). Refuse it.
    if drafter.capture_options() != capture:
        raise RuntimeError(f"drafter {drafter.name!r} changed what the loop captures in begin() "
                           f"({capture} -> {drafter.capture_options()}); set hidden_layer / attention_heads in its "
                           "constructor: the loop reads them once, before the prefill")

    while not output.done:
        t0 = time.perf_counter()
        budget = output.remaining - 1
        if policy is not None and budget > 0:
            budget = policy.request_depth(budget)
        draft = drafter.propose(state, budget) if budget > 0 else Draft()
        draft = _within_budget(draft, budget)
        if policy is not None and drafter.cuttable:
            draft = _within_budget(draft, policy.choose(draft.depths()))
        draft.validate(lm.vocab_size)
        missing = draft.missing(verifier.needs)
        if missing:         # the row check (methods.py) makes this unreachable for registered pairs
            raise TypeError(f"drafter {drafter.name!r} proposed a draft without {', '.join(missing)}, which verifier "
                            f"{verifier.name!r} needs (Drafter.provides / Verifier.needs)")
        depths = draft.depths()
        stats.draft_time += time.perf_counter() - t0

        past = cache.length
        forward_output = lm.forward(cache, [seq[-1]] + draft.token_ids,
                                    parents=[-1] + [p + 1 for p in draft.parents], **capture)
        stats.target_calls += 1
        t1 = time.perf_counter()
        verdict = verifier.verify(draft, forward_output.logits, sampler, first_position=len(seq))
        stats.verify_time += forward_output.seconds + time.perf_counter() - t1

        accepted = verdict.accepted_nodes
        if policy is not None and depths:
            policy.observe(max(depths), len(accepted))
        cache.keep(past + 1, [past + 1 + node for node in accepted])
        new_tokens = [draft.token_ids[node] for node in accepted] + [verdict.next_token]
        kept = output.add(new_tokens)
        seq.extend(kept)
        stats.record_step(len(kept), depths, min(len(accepted), len(kept)))
        if not output.done:
            drafter.observe(state, draft, verdict, forward_output, [0] + [node + 1 for node in accepted])
        # The whole step (drafting, forward, verification) by the number of tokens it verified: what a step costs.
        costs.record(len(draft) + 1, time.perf_counter() - t0)
    drafter.end(state)
    output.finalize(stats, started)


def _within_budget(draft: Draft, max_depth: int) -> Draft:
    """Drop nodes deeper than the token budget, so the loop never generates past max_new_tokens."""
    if not draft.token_ids:
        return draft
    if max_depth <= 0:
        return Draft()
    depths = draft.depths()
    if max(depths) <= max_depth:
        return draft
    keep = [i for i, d in enumerate(depths) if d <= max_depth]
    new_index = {old: new for new, old in enumerate(keep)}
    return dataclasses.replace(draft, token_ids=[draft.token_ids[i] for i in keep],
                               parents=[new_index[draft.parents[i]] if draft.parents[i] >= 0 else -1 for i in keep],
                               draft_probs=None if draft.draft_probs is None else draft.draft_probs[keep])
