"""The step plan: which rows of which request go in this step's forwards (each decoding request's draft rows, the
prompt chunks the scheduler chose), the forwards themselves, and each request's share of their outputs."""

from __future__ import annotations

import time

from multidraft.decoders.draft_budget import apply_budget
from multidraft.decoders.draft_length import forward_costs
from multidraft.engine.entry import Entry
from multidraft.engine.scheduler import Scheduler
from multidraft.errors import InvalidOptionError, reraise_fatal
from multidraft.models.packed import Segment, SegmentOutput, packed_forward
from multidraft.sampling import check_finite


class StepPlan:
    def __init__(self, lm, scheduler: Scheduler, prefill_chunk: int, prefill_alone: bool):
        self.lm, self.scheduler = lm, scheduler
        self.metrics, self.drafts = scheduler.metrics, scheduler.drafts
        self.prefill_chunk, self.prefill_alone = prefill_chunk, prefill_alone

    def run(self, finished: list[int]) -> None:
        """Draft, budget, then the step's forwards (the batch's, and each prompt chunk's own when prefill_alone)."""
        started = time.perf_counter()
        running = self.scheduler.running
        prefill_rows = self.scheduler.prefill_rows(self.prefill_chunk)
        decoding = self._propose([e for e in running if e.decoding_started], finished)
        # the step's cost table: its longest context's (each drafted row attends to its request's every cached key)
        costs = forward_costs(self.lm, past=max((e.decoding.cache.length for e in decoding), default=0))
        caps = apply_budget(costs, [e.decoding for e in decoding],
                            0 if self.prefill_alone else sum(n for _, n in prefill_rows))
        for entry, cap in zip(decoding, caps):
            if cap is not None:
                entry.depth_cap = cap
        steps, owners = self._draft_segments(decoding, finished)
        prefills = [self._prefill_segment(entry, count) for entry, count in prefill_rows]
        if self.prefill_alone:       # each prompt chunk in a forward of its own: its KV never depends on the batch
            forwards = [(steps, owners, False)] + [([segment], [owner], True) for owner, segment in prefills]
        else:
            forwards = [(steps + [s for _, s in prefills], owners + [o for o, _ in prefills], False)]
        batch = sum(len(segments) for segments, _, _ in forwards)
        rows = sum(len(s.token_ids) for segments, _, _ in forwards for s in segments)
        for number, (segments, segment_owners, dense) in enumerate(forwards):
            if segments:
                self._forward(segments, segment_owners, dense, finished)
            if number == 0 and segments:     # the cost table learns the step's forward (the budget's rows)
                costs.record(sum(len(s.token_ids) for s in segments), time.perf_counter() - started)
        if batch:
            self.metrics.count_step(batch, rows)

    def _draft_segments(self, decoding: list[Entry], finished: list[int]):
        steps, owners = [], []
        for entry in decoding:
            try:
                token_ids, parents = entry.decoding.rows()
            except BaseException as error:              # a drafter's bad draft fails its request only
                reraise_fatal(error)
                self.scheduler.fail(entry, error, finished)
                continue
            steps.append(Segment(entry.decoding.cache, token_ids, parents, True,
                                 entry.decoding.capture.get("hidden_layer")))
            owners.append((entry, entry.decoding.cache.length))
        return steps, owners

    @staticmethod
    def _prefill_segment(entry: Entry, count: int):
        ids = entry.prefill_ids[entry.prefill_done: entry.prefill_done + count]
        return (entry, None), Segment(entry.decoding.cache, ids, None, False,
                                      entry.decoding.capture.get("hidden_layer"))

    def _propose(self, entries: list[Entry], finished: list[int]) -> list[Entry]:
        """Every request's draft; the draft models' forwards of all of them batched level by level
        (batched_drafts.py). Returns the requests that drafted (the others failed)."""
        steps = {}
        for entry in entries:
            decoding = entry.decoding
            cap = None
            if decoding.policy is not None or decoding.drafter.cuttable:
                cap = decoding.output.remaining - 1            # cut afterwards by the global budget (cuttable)
            if decoding.policy is not None and not decoding.drafter.cuttable:
                cap = entry.depth_cap                          # a sampled draft: limited before it is drawn
            steps[entry] = decoding.proposing(cap)
        before = self.drafts.forwards
        outcomes = self.drafts.propose(steps)
        self.metrics.num_draft_forwards += self.drafts.forwards - before
        drafted = []
        for entry in entries:
            try:
                if isinstance(outcomes[entry], BaseException):
                    raise outcomes[entry]
                self._fit_region(entry)
                drafted.append(entry)
            except BaseException as error:
                reraise_fatal(error)
                self.scheduler.fail(entry, error, finished)
        return drafted

    def _fit_region(self, entry: Entry) -> None:
        decoding = entry.decoding
        while len(decoding.draft) + 1 > decoding.cache.room:
            if not decoding.drafter.cuttable:
                raise InvalidOptionError(f"a draft of {len(decoding.draft)} tokens does not fit the engine's "
                                         f"draft_room ({self.scheduler.draft_room}); raise it or draft fewer tokens")
            decoding.cut(max(decoding.draft.depths()) - 1)

    def _forward(self, segments: list[Segment], owners: list, dense: bool, finished: list[int]) -> None:
        """One packed forward, then each request's share: verify and emit, or record a prompt chunk."""
        try:
            outputs = packed_forward(self.lm, self.scheduler.arena, segments, dense=dense)
        except BaseException as error:                  # nothing of this forward can be trusted: fail its requests
            reraise_fatal(error)
            for entry, _ in owners:
                self.scheduler.fail(entry, error, finished)
            return
        for (entry, past), output in zip(owners, outputs):
            try:
                check_finite(output.logits)
                if past is None:
                    self.scheduler.prefilled(entry, output)
                else:
                    self._accept(entry, output, past)
                    if entry.decoding.done:
                        self.scheduler.finish(entry, finished)
            except BaseException as error:
                reraise_fatal(error)
                self.scheduler.fail(entry, error, finished)

    def _accept(self, entry: Entry, output: SegmentOutput, past: int) -> None:
        """Verify one request's rows, and count its draft with vLLM's spec-decode counters."""
        draft = entry.decoding.draft
        before = entry.prepared.stats.draft_tokens_accepted
        entry.decoding.accept(output, past, record_cost=False)
        if entry.recorder is not None:
            entry.recorder.add(output.hidden, entry.decoding.kept_rows)
        if draft.token_ids:
            self.metrics.count_draft(len(draft), entry.prepared.stats.draft_tokens_accepted - before)
