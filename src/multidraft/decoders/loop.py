"""The one draft-and-verify loop. Every drafter x verifier pair (PLD, PLD+, draft models, MTAD, BPD) runs here.

Invariant at the top of each step: `seq` holds the committed tokens and the cache covers seq[:-1]; the last
token is fed together with the draft in one target forward (a chain, or a tree with a 4D mask). The verifier
accepts a root-to-node path and picks one more token; the cache keeps the root and the accepted nodes.

A step is three calls on one request's `Decoding`: `propose` (the draft, within the token budget), the target's
forward over `rows()`, and `accept` (verify, keep the accepted KV, emit tokens, let the drafter observe).
`draft_and_verify` runs them for one request with `lm.forward`; the engine (multidraft.engine) runs the same
three calls for many requests around one packed forward, so a method's step logic exists once.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Generator, Optional

import torch

from multidraft.decoders.draft_length import DEFAULT_MODE, DraftLength, forward_costs
from multidraft.decoders.output import OutputCollector
from multidraft.drafters.base import DraftForward, Drafter, LoopState, run_alone
from multidraft.models.runner import ForwardOutput
from multidraft.prefix_cache import Reused, begin_reuse
from multidraft.types import DecodeStats, Draft
from multidraft.verify.base import Verifier


class Decoding:
    """One request inside the loop: its committed tokens, drafter, verifier, sampler, output, stats and cache."""

    def __init__(self, lm, prompt_ids: list[int], drafter: Drafter, verifier: Verifier, sampler,
                 output: OutputCollector, stats: DecodeStats, draft_length: str = DEFAULT_MODE,
                 policy: Optional[DraftLength] = None, cache=None):
        self.started = time.perf_counter()
        self.lm, self.drafter, self.verifier, self.sampler = lm, drafter, verifier, sampler
        self.output, self.stats = output, stats
        self.costs = forward_costs(lm)
        self._own_policy = False          # the default policy prices each step on its context's cost table
        if draft_length != "adaptive":
            policy = None
        elif policy is None and not _length_sensitive(verifier, sampler):
            policy, self._own_policy = DraftLength(self.costs), True
        # else, with no policy given: the default policy chooses from measured timings; where the draft's depth
        # changes the tokens (rejection sampling, lossy verifiers) that would make a seeded request's text depend
        # on the machine's load and on its batch, so such a request drafts its drafter's own length ("fixed").
        self.policy = policy
        self.state = LoopState(seq=list(prompt_ids), prompt_length=len(prompt_ids), lm=lm, sampler=sampler,
                               stats=stats)
        self.capture = drafter.capture_options()
        self.cache = cache if cache is not None else lm.new_cache()
        self.draft = Draft()
        self.kept_rows: list[int] = []
        self._step_started = 0.0

    @property
    def seq(self) -> list[int]:
        return self.state.seq

    @property
    def done(self) -> bool:
        return self.output.done

    def prefill_ids(self) -> list[int]:
        """What the prefill runs: every committed token but the last (fed with the first draft)."""
        return self.seq[:-1]

    def begin(self, prefill_output) -> None:
        """After the prefill (prefill_output None for a 1-token prompt): the drafter starts."""
        self.drafter.begin(self.state, prefill_output)
        # What the forwards capture is fixed before the prefill, so it is the drafter's constructor's to say: a
        # drafter that sets hidden_layer / attention_heads in begin() would silently get nothing (issue #18).
        if self.drafter.capture_options() != self.capture:
            raise RuntimeError(f"drafter {self.drafter.name!r} changed what the loop captures in begin() "
                               f"({self.capture} -> {self.drafter.capture_options()}); set hidden_layer / "
                               "attention_heads in its constructor: the loop reads them once, before the prefill")

    def propose(self, depth_cap: Optional[int] = None) -> Draft:
        """This step's draft within the token budget. `depth_cap`: the depth a caller's budget allows (the
        engine's global one); else the request's own adaptive policy, if any, asks for a depth."""
        return run_alone(self.proposing(depth_cap))

    def proposing(self, depth_cap: Optional[int] = None) -> Generator[DraftForward, torch.Tensor, Draft]:
        """`propose` as a generator of the draft-model forwards it needs (Drafter.drafting): the engine answers
        those of every request together."""
        self._step_started = time.perf_counter()
        self.costs = forward_costs(self.lm, past=self.cache.length)
        if self._own_policy:
            self.policy.costs = self.costs
        budget = self.output.remaining - 1
        if depth_cap is not None:
            budget = min(budget, depth_cap)
        elif self.policy is not None and budget > 0:
            budget = self.policy.request_depth(budget)
        draft = (yield from self.drafter.drafting(self.state, budget)) if budget > 0 else Draft()
        draft = _within_budget(draft, budget)
        if depth_cap is None and self.policy is not None and self.drafter.cuttable:
            draft = _within_budget(draft, self.policy.choose(draft.depths()))
        self.draft = draft
        self.stats.draft_time += time.perf_counter() - self._step_started
        return draft

    def cut(self, max_depth: int) -> None:
        """Verify only the draft's nodes up to `max_depth` (cuttable drafters only: a prefix is a valid draft)."""
        self.draft = _within_budget(self.draft, max_depth)

    def rows(self) -> tuple[list[int], list[int]]:
        """(token ids, parents) of this step's forward: the last committed token, then the draft's tree."""
        draft = self.draft
        draft.validate(self.lm.vocab_size)
        missing = draft.missing(getattr(self.verifier, "needs", ()))     # duck-typed verifiers (tests) need nothing
        if missing:         # the row check (methods.py) makes this unreachable for registered pairs
            raise TypeError(f"drafter {self.drafter.name!r} proposed a draft without {', '.join(missing)}, which "
                            f"verifier {self.verifier.name!r} needs (Drafter.provides / Verifier.needs)")
        return [self.seq[-1]] + draft.token_ids, [-1] + [p + 1 for p in draft.parents]

    def accept(self, forward_output, past: int, record_cost: bool = True) -> list[int]:
        """Verify the draft on the forward's rows, keep the accepted KV (`past`: the cache length before the
        forward), emit the tokens; returns the tokens kept."""
        draft, stats = self.draft, self.stats
        stats.target_calls += 1
        t1 = time.perf_counter()
        verdict = self.verifier.verify(draft, forward_output.logits, self.sampler, first_position=len(self.seq))
        stats.verify_time += forward_output.seconds + time.perf_counter() - t1
        accepted = verdict.accepted_nodes
        depths = draft.depths()
        if self.policy is not None and depths:
            self.policy.observe(max(depths), len(accepted))
        self.cache.keep(past + 1, [past + 1 + node for node in accepted])
        self.kept_rows = [0] + [node + 1 for node in accepted]     # the forward's rows whose keys/values stay
        new_tokens = [draft.token_ids[node] for node in accepted] + [verdict.next_token]
        kept = self.output.add(new_tokens)
        self.seq.extend(kept)
        stats.record_step(len(kept), depths, min(len(accepted), len(kept)))
        if not self.output.done:
            self.drafter.observe(self.state, draft, verdict, forward_output, [0] + [node + 1 for node in accepted])
        if record_cost:    # the whole step (drafting, forward, verification) by the rows it verified
            self.costs.record(len(draft) + 1, time.perf_counter() - self._step_started)
        self.draft = Draft()
        return kept

    def end(self) -> None:
        self.drafter.end(self.state)
        self.output.finalize(self.stats, self.started)


def draft_and_verify(lm, prompt_ids: list[int], drafter: Drafter, verifier: Verifier, sampler,
                     output: OutputCollector, stats: DecodeStats, draft_length: str = DEFAULT_MODE,
                     policy: Optional[DraftLength] = None, prefix_cache=None) -> None:
    """Decode until `output` is done. draft_length="adaptive" verifies only as much of each draft as pays for its
    forward on this machine (decoders/draft_length.py; `policy` replaces the default one); "fixed" verifies every
    drafted token. `prefix_cache` (multidraft.PrefixCache): reuse earlier generations' keys/values of the prompt's
    start, and keep this one's for later prompts."""
    decoding = Decoding(lm, prompt_ids, drafter, verifier, sampler, output, stats, draft_length, policy)
    capture, prefill_ids = decoding.capture, decoding.prefill_ids()
    reused, recorder = begin_reuse(prefix_cache, decoding.cache, prefill_ids, capture, stats)
    prefill_output = prefill_rest(lm, decoding.cache, prefill_ids, reused, capture, stats)
    if recorder is not None:
        recorder.add(getattr(prefill_output, "hidden", None))
    decoding.begin(prefill_output)
    while not decoding.done:
        decoding.propose()
        token_ids, parents = decoding.rows()
        past = decoding.cache.length
        forward_output = lm.forward(decoding.cache, token_ids, parents=parents, **capture)
        decoding.accept(forward_output, past)
        if recorder is not None:
            recorder.add(forward_output.hidden, decoding.kept_rows)
    decoding.end()
    if recorder is not None:
        prefix_cache.remember(decoding.seq, decoding.cache, recorder.states())


def prefill_rest(lm, cache, prefill_ids: list[int], reused: Reused, capture: dict, stats: DecodeStats):
    """The prefill of what `cache` lacks of `prefill_ids` (it holds the `reused` prefix). Returns what the drafters'
    begin() reads (a ForwardOutput whose hidden states cover every prefill position), or None for an empty
    prefill."""
    rest = prefill_ids[reused.length:]
    if not rest:
        return None if reused.length == 0 else ForwardOutput(logits=torch.empty(0), hidden=reused.hidden)
    output = lm.forward(cache, rest, logits_rows=slice(-1, None), **capture)
    stats.target_calls += 1
    stats.prefill_time += output.seconds
    if reused.hidden is not None and output.hidden is not None:
        output.hidden = torch.cat([reused.hidden, output.hidden])
    return output


def _length_sensitive(verifier, sampler) -> bool:
    check = getattr(verifier, "length_sensitive", None)       # duck-typed verifiers (tests): as a lossless greedy one
    return bool(check(sampler)) if check is not None else False


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
