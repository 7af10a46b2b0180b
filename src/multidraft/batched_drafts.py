"""The draft models' forwards of one engine step, batched across requests.

A request's proposal is a generator (decoders/loop.py `Decoding.proposing` -> `Drafter.drafting`) that asks for
the draft-model forwards it needs one at a time (drafters/base.py `DraftForward`) and gets back their logits.
`DraftBatch.propose` drives every request's generator in lockstep: each round it takes the forward each request is
waiting on, runs those of one draft model in ONE packed forward (models/packed.py) over that model's KV arena,
where each request's DraftSession owns a region, and answers each with its rows' logits. A step thus costs one
draft forward per depth level and draft model, not one per request and level. Drafters that run no model (pld,
suffix, ...) finish in the first round without asking for anything.

Exactness. A row sees exactly the keys it sees in a session's own cache, in the same order, so on the quantized
runners its draft logits are the same bits as alone. A draft prefill (the first forward, on an empty region)
follows the engine's prefill rule: with prefill_alone (the CPU default) it runs in a forward of its own with the
dense prefill GEMM, as LM.forward does on an empty cache. Draft models the packed forward cannot serve
(sliding-window layers) keep their sessions' own caches and run one request at a time.
"""

from __future__ import annotations

from typing import Generator, Hashable, Iterator, Optional

import torch

from multidraft.drafters.base import DraftForward
from multidraft.drafters.draft_session import DraftLMDrafter
from multidraft.errors import reraise_fatal
from multidraft.models.packed import KVArena, RegionCache, Segment, packed_forward, segment_positions, \
    unsupported_reason
from multidraft.sampling import check_finite
from multidraft.types import Draft


class DraftBatch:
    """One KV arena per draft model (`slots` positions each, as the target's) and the lockstep driver."""

    def __init__(self, slots: int, prefill_alone: bool):
        self.slots, self.prefill_alone = int(slots), bool(prefill_alone)
        self._arenas: dict[int, tuple[object, KVArena]] = {}   # id(draft LM) -> (the LM, kept alive; its arena)
        self.forwards = 0                                   # draft-model forwards run (packed or alone)

    def wants_region(self, drafter) -> bool:
        """True for a draft-model drafter whose draft model the packed forward can serve."""
        return isinstance(drafter, DraftLMDrafter) and unsupported_reason(drafter.draft_lm) is None

    def allocate(self, drafter: DraftLMDrafter, size: int) -> Optional[RegionCache]:
        """A region of the drafter's draft-model arena for its session (None while none is free)."""
        lm = drafter.draft_lm
        if id(lm) not in self._arenas:
            self._arenas[id(lm)] = (lm, KVArena(self.slots))
        region = self._arenas[id(lm)][1].allocate(size)
        if region is not None:
            drafter.use_cache(region)
        return region

    def propose(self, steps: dict[Hashable, Generator[DraftForward, torch.Tensor, Draft]]) -> dict:
        """Run every generator to its end; returns key -> its Draft, or the exception that ended it (that request
        fails alone)."""
        outcomes: dict = {}
        waiting: dict = {}

        def advance(key, answer) -> None:
            try:
                waiting[key] = steps[key].send(answer)
            except StopIteration as stop:
                outcomes[key] = stop.value
            except BaseException as error:
                reraise_fatal(error)
                outcomes[key] = error

        def fail(key, error: BaseException) -> None:
            steps[key].close()
            outcomes[key] = error

        for key in steps:
            advance(key, None)
        while waiting:
            asked, waiting = waiting, {}
            for keys, forwards, dense in self._forwards(asked, fail):
                try:
                    answers = self._run(forwards, dense)
                except BaseException as error:          # nothing of this forward can be trusted: fail its requests
                    reraise_fatal(error)
                    for key in keys:
                        fail(key, error)
                    continue
                for key, logits in zip(keys, answers):
                    try:
                        check_finite(logits)
                    except BaseException as error:
                        reraise_fatal(error)
                        fail(key, error)
                        continue
                    advance(key, logits)
        return outcomes

    def _forwards(self, asked: dict, fail) -> Iterator[tuple[list, list[DraftForward], Optional[bool]]]:
        """This round's forwards: (keys, their DraftForwards, dense) where dense None = the session's own cache,
        run alone; else one packed forward per arena (a draft prefill alone with dense=True under prefill_alone)."""
        packed: dict[int, tuple[list, list]] = {}
        for key, forward in asked.items():
            cache = forward.cache
            if not isinstance(cache, RegionCache):
                yield [key], [forward], None
                continue
            try:
                segment_positions(forward.lm, _segment(forward))        # this request's forward must fit alone
            except BaseException as error:
                reraise_fatal(error)
                fail(key, error)
                continue
            if self.prefill_alone and cache.length == 0:
                yield [key], [forward], True
                continue
            keys, forwards = packed.setdefault(id(cache.arena), ([], []))
            keys.append(key)
            forwards.append(forward)
        for keys, forwards in packed.values():
            yield keys, forwards, False

    def _run(self, forwards: list[DraftForward], dense: Optional[bool]) -> list[torch.Tensor]:
        self.forwards += 1
        if dense is None:
            return [forwards[0].run()]
        first = forwards[0]
        outputs = packed_forward(first.lm, first.cache.arena, [_segment(f) for f in forwards], dense=dense)
        return [output.logits for output in outputs]


def _segment(forward: DraftForward) -> Segment:
    return Segment(forward.cache, forward.token_ids, forward.parents, not forward.last_only, visible=forward.visible)
