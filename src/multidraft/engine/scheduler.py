"""The engine's scheduler: the queue, FIFO admission while the KV arena has a region, the prompt chunks each step
reads, and each request's end (finished, failed or cancelled: its regions go back)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Optional

import torch

from multidraft.decoders.loop import Decoding
from multidraft.engine.entry import Entry
from multidraft.engine.metrics import EngineMetrics
from multidraft.errors import InvalidOptionError, is_interrupt, reraise_fatal
from multidraft.models.packed import SegmentOutput
from multidraft.prefix_cache import PrefixCache, begin_reuse


class Scheduler:
    def __init__(self, lm, arena, drafts, metrics: EngineMetrics, prefix_cache: Optional[PrefixCache],
                 max_num_seqs: int, draft_room: int):
        self.lm = lm
        self.arena, self.drafts, self.metrics, self.prefix_cache = arena, drafts, metrics, prefix_cache
        self.max_num_seqs, self.draft_room = max_num_seqs, draft_room
        self.lock = threading.Lock()           # submit / cancel / take may come from other threads than step
        self.waiting: deque[Entry] = deque()
        self.running: list[Entry] = []         # requests of the packed forward
        self.solo: list[Entry] = []            # requests with their own decoder, one forward per step (solo.py)
        self.entries: dict[int, Entry] = {}
        self._next_id = 0

    # ----- the queue (any thread) -----
    def add(self, entry: Entry) -> int:
        with self.lock:
            entry.id = self._next_id
            self._next_id += 1
            self.entries[entry.id] = entry
            self.waiting.append(entry)
            self.metrics.num_requests_waiting = len(self.waiting)
        return entry.id

    def cancel(self, request_id: int) -> bool:
        with self.lock:
            entry = self.entries.get(request_id)
            if entry is None or entry.finished:
                return False
            entry.cancelled = True
            return True

    def has_work(self) -> bool:
        with self.lock:
            return bool(self.waiting or self.running or self.solo)

    def take(self, request_id: int) -> Entry:
        with self.lock:
            entry = self.entries.get(request_id)
            if entry is None:
                raise InvalidOptionError(f"no request {request_id!r} to take: never submitted, or taken already (each "
                                         "result is taken once)")
            if not entry.finished:
                raise InvalidOptionError(f"request {request_id} is not finished: call engine.step() until "
                                         f"engine.done({request_id}), or engine.run()")
            del self.entries[request_id]
        return entry

    # ----- admission -----
    def drop_cancelled(self) -> list[int]:
        finished = []
        with self.lock:
            for entry in [e for e in self.waiting if e.cancelled]:
                self.waiting.remove(entry)
                self._end_cancelled(entry, entry.submitted)
                finished.append(entry.id)
            self.metrics.num_requests_waiting = len(self.waiting)
        for entry in [e for e in self.running if e.cancelled and e.decoding is not None]:
            self._end_cancelled(entry, entry.decoding.started)
            self.release(entry)
            finished.append(entry.id)
        return finished

    def cancel_running(self) -> None:
        """After an interrupt half-way through a step: end the batch's requests as cancelled, their regions freed."""
        for entry in list(self.running):
            if not entry.finished:
                self._end_cancelled(entry, entry.decoding.started)
            self.release(entry)

    @staticmethod
    def _end_cancelled(entry: Entry, started: float) -> None:
        entry.prepared.output.cancel()
        entry.prepared.output.finalize(entry.prepared.stats, started)
        entry.result = entry.prepared.result()

    def admit(self, finished: list[int], own_decoder: Callable[[Entry, list[int]], None]) -> None:
        """FIFO while a request fits; a request with its own decoder goes to `own_decoder`."""
        while True:
            with self.lock:
                if not self.waiting or len(self.running) + len(self.solo) >= self.max_num_seqs:
                    break
                entry = self.waiting[0]
                region = None
                if entry.solo_reason is None:
                    region = self._regions(entry)
                    if region is None:
                        break                          # wait for a region: first come, first served
                self.waiting.popleft()
                self.metrics.num_requests_waiting = len(self.waiting)
            if region is None:
                own_decoder(entry, finished)
            else:
                self._start(entry, region, finished)
        self.count_running()

    def count_running(self) -> None:
        """Running: in the batch, or taking turns with it (its own decoder)."""
        self.metrics.num_requests_running = len(self.running) + len(self.solo)

    def _regions(self, entry: Entry):
        """Its region of the arena (and of its draft model's), or None while they do not fit."""
        region = self.arena.allocate(entry.region_size + self.draft_room)
        if region is None:
            return None
        if self.drafts.wants_region(entry.pair[0]):
            entry.draft_region = self.drafts.allocate(entry.pair[0], region.capacity)
            if entry.draft_region is None:
                self.arena.release(region)
                return None
        return region

    def _start(self, entry: Entry, region, finished: list[int]) -> None:
        drafter, verifier = entry.pair
        p = entry.prepared
        try:
            entry.decoding = Decoding(self.lm, p.prompt_ids, drafter, verifier, p.sampler, p.output, p.stats,
                                      entry.request.draft_length, cache=region)
            entry.prefill_ids = entry.decoding.prefill_ids()
            self.running.append(entry)
            self._reuse_prefix(entry)
            if not entry.prefill_ids:
                entry.decoding.begin(None)
                entry.decoding_started = True
            elif entry.prefill_done >= len(entry.prefill_ids):      # the whole prefill came from the cache
                self.begin(entry, SegmentOutput(torch.empty(0)))
        except BaseException as error:
            if entry not in self.running:          # else fail() (an interrupt: Engine.step's cancel_running) frees them
                self.arena.release(region)
                self.release_draft_region(entry)
                if is_interrupt(error):            # out of the queue, not in the batch: end it, or it is lost
                    self._end_cancelled(entry, entry.submitted)
            reraise_fatal(error)
            self.fail(entry, error, finished)

    def _reuse_prefix(self, entry: Entry) -> None:
        """Read the prompt's start from the prefix cache into the request's fresh region."""
        reused, entry.recorder = begin_reuse(self.prefix_cache, entry.decoding.cache, entry.prefill_ids,
                                             entry.decoding.capture, entry.prepared.stats)
        entry.prefill_done = reused.length
        if reused.hidden is not None:
            entry.hidden_parts.append(reused.hidden)

    # ----- prefill -----
    def prefill_rows(self, prefill_chunk: int) -> list[tuple[Entry, int]]:
        """Prompt rows this step reads, at most prefill_chunk in all; the prompts with the fewest rows left first, so a
        short request starts decoding at once beside a long prompt (which gets the rest of every step's rows: at
        most max_num_seqs requests prefill at a time, so it is never starved)."""
        prefilling = [e for e in self.running if not e.decoding_started]
        left, rows = prefill_chunk, []
        for entry in sorted(prefilling, key=lambda e: len(e.prefill_ids) - e.prefill_done):
            count = min(left, len(entry.prefill_ids) - entry.prefill_done)
            if count <= 0:
                break
            rows.append((entry, count))
            left -= count
        return rows

    def prefilled(self, entry: Entry, output: SegmentOutput) -> None:
        decoding, stats = entry.decoding, entry.prepared.stats
        stats.target_calls += 1
        stats.prefill_time += output.seconds
        if output.hidden is not None:
            entry.hidden_parts.append(output.hidden)
        entry.prefill_done = decoding.cache.length
        if entry.prefill_done >= len(entry.prefill_ids):
            self.begin(entry, output)

    def begin(self, entry: Entry, last: SegmentOutput) -> None:
        """The prefill is read: the drafter starts on the hidden states of every prompt row."""
        hidden = torch.cat(entry.hidden_parts) if entry.hidden_parts else None
        entry.hidden_parts = []
        if entry.recorder is not None:
            entry.recorder.add(hidden)
        self.metrics.prompt_tokens_total += len(entry.decoding.seq)
        entry.decoding.begin(SegmentOutput(last.logits, hidden, None, last.seconds))
        entry.decoding_started = True

    # ----- the end -----
    def finish(self, entry: Entry, finished: list[int]) -> None:
        entry.decoding.end()
        if entry.recorder is not None:          # before the region is released: its keys/values for later prompts
            self.prefix_cache.remember(entry.decoding.seq, entry.decoding.cache, entry.recorder.states())
        entry.result = entry.prepared.result()
        self.metrics.generation_tokens_total += len(entry.result.token_ids)
        self.release(entry)
        finished.append(entry.id)

    def fail(self, entry: Entry, error: BaseException, finished: list[int]) -> None:
        entry.error = error
        if entry in self.running:
            self.release(entry)
        if entry.id not in finished:
            finished.append(entry.id)

    def release(self, entry: Entry) -> None:
        if entry.decoding is not None:
            self.arena.release(entry.decoding.cache)
        self.release_draft_region(entry)
        if entry in self.running:
            self.running.remove(entry)
        self.count_running()

    @staticmethod
    def release_draft_region(entry: Entry) -> None:
        if entry.draft_region is not None:
            entry.draft_region.arena.release(entry.draft_region)
