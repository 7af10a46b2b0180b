"""The engine: many requests decoded together, one target forward per step for all of them.

    engine = multidraft.Engine(lm, max_num_seqs=8)
    ids = [engine.submit(multidraft.Request.build(p, "pld")) for p in prompts]
    while engine.has_work():
        engine.step()
    results = [engine.take(i) for i in ids]          # or: multidraft.generate_batch(lm, requests)

Each step, every running request proposes its draft (possibly none) with its own drafter, the rows of all of them
(and chunks of the prompts still being read) go through ONE packed forward (models/packed.py: each request's KV
in its own region of a shared arena, a block-diagonal causal + tree mask), and each request is verified by its own
verifier on its own rows; rejected KV is dropped by bookkeeping. The step logic is the single-request loop's
(decoders/loop.py `Decoding`: propose, rows, accept), so every loop method batches the same way it runs alone.

What batches: every method of the one loop (pld, pld_plus with rank_by hidden/first, suffix, speculative,
multi_draft, mtad, bild, blockwise) and greedy / sample (a drafter that proposes nothing). The draft models batch
too (multidraft.batched_drafts): every request's proposal runs as a generator of the draft forwards it needs, and
the forwards of one depth level of all requests using one draft model go through one packed forward over a KV
arena of that draft model (each request's draft session in a region of it). What runs alone, between steps,
through `generate_request`: methods with their own decoder (beam, superposed) and drafters that capture attention
rows (pld_plus rank_by="attention"). Such a request is watched inside its forwards (multidraft.forward_watch): before
every decoder layer, `Engine.cancel` or the request's `check` (a server's deadline) stops it, so the model is free
for the others within one layer.

Scheduling: FIFO admission up to `max_num_seqs` running requests while the arena has a free region for the request
(prompt + max_new_tokens + `draft_room` slots: the KV memory is bounded by `kv_slots`; a draft-model request also
takes a region of that size in its draft model's arena, of `kv_slots` too); at most `prefill_chunk` prompt rows
join a step (shortest prompt first), so a long prompt is read over several steps while the others keep decoding (a
draft model reads a prompt in one forward, at the request's first draft, as it does alone).
Requests whose draft_length is "adaptive" share one global draft budget per step (decoders/draft_length.py
`batch_depths`): how deep each draft is verified is chosen for the whole step from each request's acceptance
estimate and the measured cost of a forward by its row count.

Exactness. Sampling is keyed per request and position, so what a request draws never depends on its neighbours;
with draft_length="fixed" a request's drafts do not either. With prefill_alone (the CPU default) a request's prompt
is read in forwards holding only its own rows, so its prompt KV never depends on the batch. On the quantized runner
the packed forward is batch-invariant too (each row's logits are the same bits alone and in any batch), so a
request's tokens are identical alone and in any batch, greedy and seeded sampling; a prompt read in one chunk gets
the same dense prefill as `generate`, so even the bits of `generate` are reproduced. The draft models' packed
forwards follow the same rules (a draft prefill alone with the dense GEMM), so a draft's logits are the same bits
too. On the eager and fast runners a decode step's matrix shapes change with the batch, which may change the last
bits of a logit and so a token where two logits tie to ~1e-5 (never seen in the tests). A request whose tokens
depend on its drafts' depths (rejection sampling with a draft model, the lossy mtad / bild) never takes its depth
from the global budget or measured timings (decoders/loop.py `Decoding`): with draft_length="adaptive" it drafts
its drafter's own length, so a seed fixes its tokens alone, in any batch and in `generate`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import torch

from multidraft.api import Prepared, check_model, prepare_request
from multidraft.artifacts import Artifacts
from multidraft.batched_drafts import DraftBatch
from multidraft.decoders.draft_length import batch_depths, forward_costs, nodes_by_depth
from multidraft.decoders.loop import Decoding
from multidraft.errors import InvalidOptionError, PromptError, reraise_fatal
from multidraft.forward_watch import watch_layers
from multidraft.models.packed import KVArena, Segment, SegmentOutput, packed_forward, unsupported_reason
from multidraft.prefix_cache import HiddenRecorder, PrefixCache, begin_reuse, check_prefix_cache
from multidraft.request import Request
from multidraft.sampling import check_finite
from multidraft.types import Generation


class _StopAlone(BaseException):
    """Raised inside a forward of a request running alone that was cancelled (a BaseException, like the server's
    stops, so that no `except Exception` of a decoder turns it into an error)."""

SEARCH_DEPTH = 16          # deepest draft the global budget considers before a sampled draft is proposed


@dataclass
class EngineMetrics:
    """Counters with vLLM's names (vllm:num_requests_running / waiting, spec_decode_*)."""

    num_requests_running: int = 0
    num_requests_waiting: int = 0
    num_steps: int = 0
    batch_size: int = 0                                   # requests in the last step's forward
    batch_size_histogram: dict[int, int] = field(default_factory=dict)
    num_batched_tokens: int = 0                           # rows of the last step's forward
    generation_tokens_total: int = 0
    prompt_tokens_total: int = 0
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_requests_alone: int = 0                           # ran with their own decoder between steps
    num_draft_forwards: int = 0                           # draft-model forwards: one per level and draft model
    num_preemptions: int = 0                              # always 0: regions are reserved at admission


class _Entry:
    def __init__(self, request_id: int, request: Request, prepared: Prepared, pair, solo_reason: Optional[str],
                 check: Optional[Callable[[], None]] = None):
        self.id, self.request, self.prepared, self.check = request_id, request, prepared, check
        self.pair, self.solo_reason = pair, solo_reason
        self.decoding: Optional[Decoding] = None
        self.prefill_done = 0
        self.prefill_ids: list[int] = []            # the rows the prefill reads (fixed at admission)
        self.decoding_started = False               # prefill read and the drafter begun
        self.hidden_parts: list[torch.Tensor] = []
        self.recorder: Optional[HiddenRecorder] = None     # hidden states for its PrefixCache entry
        self.cancelled = False
        self.result: Optional[Generation] = None
        self.error: Optional[BaseException] = None
        self.submitted = time.perf_counter()
        self.depth_cap: Optional[int] = None     # the global budget's limit on this request's next sampled draft
        self.draft_region = None                 # its draft session's region of the draft model's arena

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def region_size(self) -> int:
        return len(self.prepared.prompt_ids) + self.request.max_new_tokens


class Engine:
    """Continuous batching of draft-and-verify requests on one model (see the module docstring).

    max_num_seqs: requests decoded together; kv_slots: positions of KV the arena holds (all requests); prefill_chunk:
    prompt rows read per step; draft_room: slots reserved per request for a step's draft rows; prefill_alone: each
    prompt chunk in a forward of its own rather than packed with the decoding rows (default: on a CPU).
    `cancel` may be called from any thread; `submit` encodes the prompt and loads artifacts (the tokenizer is not
    safe to share across threads), so call it from the thread that steps, or pass prompt_ids.
    prefix_cache (a multidraft.PrefixCache; quantized-q8 runner): each prompt's start is read from the keys/values of
    earlier requests that share it, and each finished request's are kept for later ones."""

    def __init__(self, lm, *, max_num_seqs: int = 8, kv_slots: int = 8192, prefill_chunk: int = 256,
                 draft_room: int = 128, artifacts: Optional[Artifacts] = None, prefill_alone: Optional[bool] = None,
                 prefix_cache: Optional[PrefixCache] = None):
        check_model(lm)
        for name, value, low in (("max_num_seqs", max_num_seqs, 1), ("kv_slots", kv_slots, 1),
                                 ("prefill_chunk", prefill_chunk, 1), ("draft_room", draft_room, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidOptionError(f"{name} must be an integer >= {low}, got {value!r}")
        why_not = unsupported_reason(lm)
        if why_not is not None:
            raise InvalidOptionError(f"the engine cannot batch {lm.name}: {why_not}; use multidraft.generate")
        if prefix_cache is not None:
            check_prefix_cache(prefix_cache, lm)
        self.prefix_cache = prefix_cache
        self.lm = lm
        self.max_num_seqs, self.prefill_chunk, self.draft_room = max_num_seqs, prefill_chunk, draft_room
        # Prompt chunks in forwards of their own (CPU default): a request's prompt KV then never depends on its
        # neighbours on any runner, and the quantized runner may use its dense prefill GEMM (as lm.forward does). On
        # CUDA one packed forward per step costs less than the extra launches.
        self.prefill_alone = lm.device.type != "cuda" if prefill_alone is None else bool(prefill_alone)
        self.arena = KVArena(kv_slots)
        self.drafts = DraftBatch(kv_slots, self.prefill_alone)
        self.artifacts = artifacts if artifacts is not None else Artifacts()
        self.costs = forward_costs(lm)
        self.metrics = EngineMetrics()
        self._lock = threading.Lock()
        self._waiting: deque[_Entry] = deque()
        self._running: list[_Entry] = []
        self._entries: dict[int, _Entry] = {}
        self._next_id = 0

    # ----- requests -----
    def submit(self, request: Request, on_token: Optional[Callable[[int], None]] = None,
               prompt_ids: Optional[list[int]] = None, check: Optional[Callable[[], None]] = None) -> int:
        """Queue a request; returns its id. Errors a user can fix (prompt, options, artifacts) raise here.
        `check`: called before every decoder layer of the forwards of a request that runs alone (beam, superposed,
        pld_plus with attention rows); what it raises (e.g. a server's timeout) ends the request with that error."""
        if not isinstance(request, Request):
            raise InvalidOptionError(f"Engine.submit takes a multidraft.Request, got {type(request).__name__}")
        for name, value in (("on_token", on_token), ("check", check)):
            if value is not None and not callable(value):
                raise InvalidOptionError(f"{name} must be a function, got {type(value).__name__}")
        prepared = prepare_request(self.lm, request, on_token, prompt_ids, self.artifacts)
        pair = prepared.loop_pair(self.lm, request)
        solo_reason = None
        if pair is None:
            solo_reason = f"method {request.method!r} has its own decoder"
        elif pair[0].capture_options().get("attention_heads"):
            solo_reason = "its drafter captures attention rows"
        entry = _Entry(-1, request, prepared, pair, solo_reason, check)
        if solo_reason is None and entry.region_size + self.draft_room > self.arena.slots:
            raise PromptError(f"a prompt of {len(prepared.prompt_ids)} tokens plus max_new_tokens="
                              f"{request.max_new_tokens} needs {entry.region_size + self.draft_room} KV slots; the "
                              f"engine holds {self.arena.slots} (raise kv_slots or shorten the request)")
        with self._lock:
            entry.id = self._next_id
            self._next_id += 1
            self._entries[entry.id] = entry
            self._waiting.append(entry)
            self.metrics.num_requests_waiting = len(self._waiting)
        return entry.id

    def cancel(self, request_id: int) -> bool:
        """Stop a request at the next step boundary, or within one layer if it runs alone (its result keeps the
        tokens so far, stop reason "cancelled"). False if it is unknown or already finished."""
        with self._lock:
            entry = self._entries.get(request_id)
            if entry is None or entry.finished:
                return False
            entry.cancelled = True
            return True

    def has_work(self) -> bool:
        with self._lock:
            return bool(self._waiting or self._running)

    def done(self, request_id: int) -> bool:
        entry = self._entries.get(request_id)
        return entry is None or entry.finished

    def take(self, request_id: int) -> Generation:
        """The finished request's Generation (and forget it); raises the request's error if it failed."""
        with self._lock:
            entry = self._entries.get(request_id)
            if entry is None:
                raise KeyError(f"no request {request_id}")
            if not entry.finished:
                raise RuntimeError(f"request {request_id} is not finished")
            del self._entries[request_id]
        if entry.error is not None:
            raise entry.error
        return entry.result

    # ----- one step -----
    def step(self) -> list[int]:
        """Admit what fits, run one packed forward for every running request, verify; returns the ids that
        finished (or failed, or were cancelled) in this step."""
        finished = self._drop_cancelled()
        finished += self._admit()
        running = list(self._running)
        if not running:
            return finished
        started = time.perf_counter()
        decoding = [e for e in running if e.decoding_started]
        prefilling = [e for e in running if not e.decoding_started]
        prefill_rows = self._prefill_rows(prefilling)
        decoding = self._propose(decoding, finished)
        self._budget(decoding, 0 if self.prefill_alone else sum(n for _, n in prefill_rows))
        steps, owners = [], []
        for entry in decoding:
            try:
                token_ids, parents = entry.decoding.rows()
            except BaseException as error:              # a drafter's bad draft fails its request only
                reraise_fatal(error)
                self._fail(entry, error, finished)
                continue
            steps.append(Segment(entry.decoding.cache, token_ids, parents, True,
                                 entry.decoding.capture.get("hidden_layer")))
            owners.append((entry, entry.decoding.cache.length))
        prefills = []
        for entry, count in prefill_rows:
            ids = entry.prefill_ids[entry.prefill_done: entry.prefill_done + count]
            prefills.append(((entry, None), Segment(entry.decoding.cache, ids, None, False,
                                                    entry.decoding.capture.get("hidden_layer"))))
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
                self.costs.record(sum(len(s.token_ids) for s in segments), time.perf_counter() - started)
        if batch:
            self._count_step(batch, rows)
        return finished

    def _forward(self, segments: list[Segment], owners: list, dense: bool, finished: list[int]) -> None:
        """One packed forward, then each request's share: verify and emit, or record a prompt chunk."""
        try:
            outputs = packed_forward(self.lm, self.arena, segments, dense=dense)
        except BaseException as error:                  # nothing of this forward can be trusted: fail its requests
            reraise_fatal(error)
            for entry, _ in owners:
                self._fail(entry, error, finished)
            return
        for (entry, past), output in zip(owners, outputs):
            try:
                check_finite(output.logits)
                if past is None:
                    self._prefilled(entry, output)
                else:
                    self._accept(entry, output, past)
                    if entry.decoding.done:
                        self._finish(entry, finished)
            except BaseException as error:
                reraise_fatal(error)
                self._fail(entry, error, finished)

    def run(self) -> None:
        """Step until every submitted request is finished."""
        while self.has_work():
            self.step()

    # ----- scheduling -----
    def _drop_cancelled(self) -> list[int]:
        finished = []
        with self._lock:
            for entry in [e for e in self._waiting if e.cancelled]:
                self._waiting.remove(entry)
                entry.prepared.output.cancel()
                entry.prepared.output.finalize(entry.prepared.stats, entry.submitted)
                entry.result = entry.prepared.result()
                finished.append(entry.id)
            self.metrics.num_requests_waiting = len(self._waiting)
        for entry in [e for e in self._running if e.cancelled]:
            entry.prepared.output.cancel()
            entry.prepared.output.finalize(entry.prepared.stats, entry.decoding.started)
            entry.result = entry.prepared.result()
            self._release(entry)
            finished.append(entry.id)
        return finished

    def _admit(self) -> list[int]:
        finished = []
        while True:
            with self._lock:
                if not self._waiting or len(self._running) >= self.max_num_seqs:
                    break
                entry = self._waiting[0]
                region = None
                if entry.solo_reason is None:
                    region = self.arena.allocate(entry.region_size + self.draft_room)
                    if region is None:
                        break                          # wait for a region: first come, first served
                    if self.drafts.wants_region(entry.pair[0]):
                        entry.draft_region = self.drafts.allocate(entry.pair[0], region.capacity)
                        if entry.draft_region is None:
                            self.arena.release(region)
                            break
                self._waiting.popleft()
                self.metrics.num_requests_waiting = len(self._waiting)
            if region is None:
                self._run_alone(entry, finished)
                continue
            drafter, verifier = entry.pair
            p = entry.prepared
            try:
                entry.decoding = Decoding(self.lm, p.prompt_ids, drafter, verifier, p.sampler, p.output, p.stats,
                                          entry.request.draft_length, cache=region)
                entry.prefill_ids = entry.decoding.prefill_ids()
                self._running.append(entry)
                self._reuse_prefix(entry)
                if not entry.prefill_ids:
                    entry.decoding.begin(None)
                    entry.decoding_started = True
                elif entry.prefill_done >= len(entry.prefill_ids):      # the whole prefill came from the cache
                    self._begin(entry, SegmentOutput(torch.empty(0)))
            except BaseException as error:
                reraise_fatal(error)
                self.arena.release(region)
                self._release_draft_region(entry)
                self._fail(entry, error, finished)
        self.metrics.num_requests_running = len(self._running)
        return finished

    def _run_alone(self, entry: _Entry, finished: list[int]) -> None:
        """A method with its own decoder: the whole request now, between two steps, watched before every layer of
        its forwards (a cancel or its `check` stops it there)."""
        from multidraft.api import generate_request
        p, tokens, started = entry.prepared, [], time.perf_counter()
        self.metrics.num_requests_alone += 1

        def on_token(token_id):
            tokens.append(token_id)
            if p.output.on_token is not None:
                p.output.on_token(token_id)
        handles = watch_layers([self.lm], lambda: self._check_alone(entry))
        try:
            entry.result = generate_request(self.lm, entry.request, on_token, p.prompt_ids, self.artifacts)
            self.metrics.generation_tokens_total += len(entry.result.token_ids)
        except _StopAlone:
            p.stats.generated_tokens, p.stats.stop_reason = len(tokens), "cancelled"
            p.stats.total_time = time.perf_counter() - started
            entry.result = Generation(text=self.lm.decode(tokens), token_ids=tokens, stats=p.stats)
        except BaseException as error:
            reraise_fatal(error)
            entry.error = error
        finally:
            for handle in handles:
                handle.remove()
        finished.append(entry.id)

    @staticmethod
    def _check_alone(entry: _Entry) -> None:
        if entry.cancelled:
            raise _StopAlone()
        if entry.check is not None:
            entry.check()

    def _prefill_rows(self, prefilling: list[_Entry]) -> list[tuple[_Entry, int]]:
        """Prompt rows this step reads, at most prefill_chunk in all; the prompts with the fewest rows left first, so a
        short request starts decoding at once beside a long prompt (which gets the rest of every step's rows: at
        most max_num_seqs requests prefill at a time, so it is never starved)."""
        left, rows = self.prefill_chunk, []
        for entry in sorted(prefilling, key=lambda e: len(e.prefill_ids) - e.prefill_done):
            count = min(left, len(entry.prefill_ids) - entry.prefill_done)
            if count <= 0:
                break
            rows.append((entry, count))
            left -= count
        return rows

    def _propose(self, entries: list[_Entry], finished: list[int]) -> list[_Entry]:
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
                self._fail(entry, error, finished)
        return drafted

    def _fit_region(self, entry: _Entry) -> None:
        decoding = entry.decoding
        while len(decoding.draft) + 1 > decoding.cache.room:
            if not decoding.drafter.cuttable:
                raise InvalidOptionError(f"a draft of {len(decoding.draft)} tokens does not fit the engine's "
                                         f"draft_room ({self.draft_room}); raise it or draft fewer tokens")
            decoding.cut(max(decoding.draft.depths()) - 1)

    def _budget(self, decoding: list[_Entry], prefill_rows: int) -> None:
        """The global draft budget: how deep each adaptive request's draft is verified this step, and how deep the
        next sampled draft may be (decoders/draft_length.py batch_depths)."""
        adaptive = [e for e in decoding if e.decoding.policy is not None]
        fixed_rows = prefill_rows + sum(len(e.decoding.draft) + 1 for e in decoding if e.decoding.policy is None)
        cuttable = [e for e in adaptive if e.decoding.drafter.cuttable]
        sampled = [e for e in adaptive if not e.decoding.drafter.cuttable]
        base_rows = fixed_rows + len(adaptive)
        base_tokens = float(len(decoding))
        if cuttable:
            offers = [(e.decoding.policy, nodes_by_depth(e.decoding.draft.depths())) for e in cuttable]
            for entry, depth in zip(cuttable, batch_depths(self.costs, base_rows + sum(len(e.decoding.draft)
                                                                                        for e in sampled),
                                                           base_tokens, offers)):
                entry.decoding.cut(entry.decoding.policy.probe(depth))
        if sampled:      # next step's caps, with this step's cut drafts as the other rows
            rows = fixed_rows + len(adaptive) + sum(len(e.decoding.draft) for e in cuttable)
            offers = [(e.decoding.policy, list(range(min(SEARCH_DEPTH, e.decoding.output.remaining) + 1)))
                      for e in sampled]
            for entry, depth in zip(sampled, batch_depths(self.costs, rows, base_tokens, offers)):
                entry.depth_cap = max(1, depth)

    def _reuse_prefix(self, entry: _Entry) -> None:
        """Read the prompt's start from the prefix cache into the request's fresh region."""
        reused, entry.recorder = begin_reuse(self.prefix_cache, entry.decoding.cache, entry.prefill_ids,
                                             entry.decoding.capture, entry.prepared.stats)
        entry.prefill_done = reused.length
        if reused.hidden is not None:
            entry.hidden_parts.append(reused.hidden)

    def _prefilled(self, entry: _Entry, output: SegmentOutput) -> None:
        decoding, stats = entry.decoding, entry.prepared.stats
        stats.target_calls += 1
        stats.prefill_time += output.seconds
        if output.hidden is not None:
            entry.hidden_parts.append(output.hidden)
        entry.prefill_done = decoding.cache.length
        if entry.prefill_done >= len(entry.prefill_ids):
            self._begin(entry, output)

    def _begin(self, entry: _Entry, last: SegmentOutput) -> None:
        """The prefill is read: the drafter starts on the hidden states of every prompt row."""
        hidden = torch.cat(entry.hidden_parts) if entry.hidden_parts else None
        entry.hidden_parts = []
        if entry.recorder is not None:
            entry.recorder.add(hidden)
        self.metrics.prompt_tokens_total += len(entry.decoding.seq)
        entry.decoding.begin(SegmentOutput(last.logits, hidden, None, last.seconds))
        entry.decoding_started = True

    def _finish(self, entry: _Entry, finished: list[int]) -> None:
        entry.decoding.end()
        if entry.recorder is not None:          # before the region is released: its keys/values for later prompts
            self.prefix_cache.remember(entry.decoding.seq, entry.decoding.cache, entry.recorder.states())
        entry.result = entry.prepared.result()
        self.metrics.generation_tokens_total += len(entry.result.token_ids)
        self._release(entry)
        finished.append(entry.id)

    def _fail(self, entry: _Entry, error: BaseException, finished: list[int]) -> None:
        entry.error = error
        if entry in self._running:
            self._release(entry)
        if entry.id not in finished:
            finished.append(entry.id)

    def _release(self, entry: _Entry) -> None:
        if entry.decoding is not None:
            self.arena.release(entry.decoding.cache)
        self._release_draft_region(entry)
        if entry in self._running:
            self._running.remove(entry)
        self.metrics.num_requests_running = len(self._running)

    def _release_draft_region(self, entry: _Entry) -> None:
        if entry.draft_region is not None:
            entry.draft_region.arena.release(entry.draft_region)

    # ----- metrics -----
    def _accept(self, entry: _Entry, output: SegmentOutput, past: int) -> None:
        """Verify one request's rows, and count its draft with vLLM's spec-decode counters."""
        m, draft = self.metrics, entry.decoding.draft
        before = entry.prepared.stats.draft_tokens_accepted
        entry.decoding.accept(output, past, record_cost=False)
        if entry.recorder is not None:
            entry.recorder.add(output.hidden, entry.decoding.kept_rows)
        if draft.token_ids:
            accepted = entry.prepared.stats.draft_tokens_accepted - before
            m.spec_decode_num_drafts += 1
            m.spec_decode_num_draft_tokens += len(draft)
            m.spec_decode_num_accepted_tokens += accepted
            while len(m.spec_decode_num_accepted_tokens_per_pos) < accepted:
                m.spec_decode_num_accepted_tokens_per_pos.append(0)
            for position in range(accepted):
                m.spec_decode_num_accepted_tokens_per_pos[position] += 1

    def _count_step(self, batch: int, rows: int) -> None:
        m = self.metrics
        m.num_steps += 1
        m.batch_size, m.num_batched_tokens = batch, rows
        m.batch_size_histogram[batch] = m.batch_size_histogram.get(batch, 0) + 1


def generate_batch(lm, requests: Iterable, *, artifacts: Optional[Artifacts] = None, max_num_seqs: int = 8,
                   kv_slots: int = 8192, prefill_chunk: int = 256, prefill_alone: Optional[bool] = None,
                   prefix_cache: Optional[PrefixCache] = None, **build) -> list[Generation]:
    """Decode many requests together (offline): each item a `multidraft.Request`, or a prompt built with
    `Request.build(prompt, **build)` (e.g. method="pld", max_new_tokens=64). Results in the given order; the first
    failed request's error is raised after all have run."""
    engine = Engine(lm, max_num_seqs=max_num_seqs, kv_slots=kv_slots, prefill_chunk=prefill_chunk,
                    artifacts=artifacts, prefill_alone=prefill_alone, prefix_cache=prefix_cache)
    ids = []
    for item in requests:
        request = item if isinstance(item, Request) else Request.build(item, **build)
        ids.append(engine.submit(request))
    engine.run()
    return [engine.take(i) for i in ids]
