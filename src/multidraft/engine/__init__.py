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
arena of that draft model (each request's draft session in a region of it). What cannot share the packed forward
runs through `generate_request` (engine/solo.py): methods with their own decoder (beam, superposed) and drafters that
capture attention rows (pld_plus rank_by="attention") take turns with the batch, one of their forwards per step, so
the batched requests keep emitting tokens between them. Such a request is watched inside its
forwards (multidraft.forward_watch): before every decoder layer, `Engine.cancel` or the request's `check` (a server's
deadline) stops it, so the model is free for the others within one layer.

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

from typing import Callable, Iterable, Optional

from multidraft import validation
from multidraft.api import check_model, prepare_request
from multidraft.artifacts import Artifacts
from multidraft.batched_drafts import DraftBatch
from multidraft.engine.entry import Entry
from multidraft.engine.metrics import EngineMetrics
from multidraft.engine.plan import StepPlan
from multidraft.engine.scheduler import Scheduler
from multidraft.engine.solo import SoloRun
from multidraft.errors import InvalidOptionError, PromptError
from multidraft.models.packed import KVArena, unsupported_reason
from multidraft.prefix_cache import PrefixCache, check_prefix_cache
from multidraft.request import BUILD_ARGUMENTS, Request
from multidraft.types import Generation

# The parts, one job each: engine/scheduler.py (queue, admission, prefill chunks, a request's end), engine/plan.py
# (which rows of which request go in this step's forwards, and their outputs), decoders/draft_budget.py (the global
# draft budget), engine/solo.py (requests with their own decoder), engine/metrics.py (counters).
__all__ = ["Engine", "EngineMetrics", "generate_batch"]

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
        check_kv_memory(lm, kv_slots)
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
        self.metrics = EngineMetrics()
        self.scheduler = Scheduler(lm, self.arena, self.drafts, self.metrics, prefix_cache, max_num_seqs, draft_room)
        self.plan = StepPlan(lm, self.scheduler, prefill_chunk, self.prefill_alone)

    # ----- requests -----
    def submit(self, request: Request, on_token: Optional[Callable[[int], None]] = None,
               prompt_ids: Optional[list[int]] = None, check: Optional[Callable[[], None]] = None) -> int:
        """Queue a request; returns its id. Errors a user can fix (prompt, options, artifacts) raise here.
        `check`: called before every decoder layer of the forwards of a request that runs alone (beam, superposed,
        pld_plus with attention rows); what it raises (e.g. a server's timeout) ends the request with that error."""
        if not isinstance(request, Request):
            raise InvalidOptionError(f"Engine.submit takes a multidraft.Request, got {type(request).__name__}")
        validation.callback("check", check, (), "a function of no arguments")     # on_token: prepare_request
        prepared = prepare_request(self.lm, request, on_token, prompt_ids, self.artifacts)
        pair = prepared.loop_pair(self.lm, request)
        solo_reason = None
        if pair is None:
            solo_reason = f"method {request.method!r} has its own decoder"
        elif pair[0].capture_options().get("attention_heads"):
            solo_reason = "its drafter captures attention rows"
        entry = Entry(-1, request, prepared, pair, solo_reason, check)
        if solo_reason is None and entry.region_size + self.draft_room > self.arena.slots:
            raise PromptError(f"a prompt of {len(prepared.prompt_ids)} tokens plus max_new_tokens="
                              f"{request.max_new_tokens} needs {entry.region_size + self.draft_room} KV slots; the "
                              f"engine holds {self.arena.slots} (raise kv_slots or shorten the request)")
        return self.scheduler.add(entry)

    def cancel(self, request_id: int) -> bool:
        """Stop a request at the next step boundary, or within one layer if it runs alone (its result keeps the
        tokens so far, stop reason "cancelled"). False if it is unknown or already finished."""
        return self.scheduler.cancel(request_id)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def done(self, request_id: int) -> bool:
        entry = self.scheduler.entries.get(request_id)
        return entry is None or entry.finished

    def take(self, request_id: int) -> Generation:
        """The finished request's Generation (and forget it); raises the request's error if it failed."""
        entry = self.scheduler.take(request_id)
        if entry.error is not None:
            raise entry.error
        return entry.result

    def step(self) -> list[int]:
        """Admit what fits, run one packed forward for every running request and verify, then one forward of each
        request with its own decoder; returns the ids that finished (or failed, or were cancelled) in this step."""
        finished = self.scheduler.drop_cancelled()
        try:
            self.scheduler.admit(finished, self._start_solo)
            if self.scheduler.running:
                self.plan.run(finished)
        except BaseException:
            # Only an interrupt gets here (a request's own error fails that request alone). The step stopped half-way,
            # so the batch's KV and its requests' bookkeeping may disagree: decoding on would give wrong tokens. End
            # them as cancelled (their tokens so far were verified); waiting requests are untouched.
            self.scheduler.cancel_running()
            raise
        for entry in list(self.scheduler.solo):
            if entry.solo.advance():
                self.scheduler.solo.remove(entry)
                finished.append(entry.id)
        self.scheduler.count_running()
        return finished

    def _start_solo(self, entry: Entry, finished: list[int]) -> None:
        entry.solo = SoloRun(self.lm, self.artifacts, self.metrics, entry)
        if entry.solo.start():
            finished.append(entry.id)
        else:
            self.scheduler.solo.append(entry)

    def run(self) -> None:
        """Step until every submitted request is finished."""
        while self.has_work():
            self.step()

    def close(self) -> None:
        """Cancel every request not yet finished and step until they have stopped: an engine dropped while a request
        takes turns would otherwise keep that request's decoder thread (and the model) waiting until exit. Finished
        and cancelled requests can still be taken. `with Engine(...) as engine:` closes it on the way out."""
        for request_id in list(self.scheduler.entries):
            self.scheduler.cancel(request_id)
        self.run()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def generate_batch(lm, requests: Iterable, *, artifacts: Optional[Artifacts] = None, max_num_seqs: int = 8,
                   kv_slots: int = 8192, prefill_chunk: int = 256, prefill_alone: Optional[bool] = None,
                   prefix_cache: Optional[PrefixCache] = None, **build) -> list[Generation]:
    """Decode many requests together (offline): each item a `multidraft.Request`, or a prompt built with
    `Request.build(prompt, **build)` (e.g. method="pld", max_new_tokens=64; a method's options too, as in
    `generate`). Results in the given order; the first failed request's error is raised after all have run."""
    if isinstance(requests, str) or not isinstance(requests, Iterable):
        raise InvalidOptionError(f"generate_batch takes a list of prompts or multidraft.Requests, got "
                                 f"{type(requests).__name__}; for one prompt use multidraft.generate")
    options = {name: build.pop(name) for name in list(build) if name not in (*BUILD_ARGUMENTS, "options", "bounds")}
    if options:            # method options as keywords, as generate() takes them
        build["options"] = {**(build.get("options") or {}), **options}
    engine = Engine(lm, max_num_seqs=max_num_seqs, kv_slots=kv_slots, prefill_chunk=prefill_chunk,
                    artifacts=artifacts, prefill_alone=prefill_alone, prefix_cache=prefix_cache)
    ids = []
    for item in requests:
        if isinstance(item, Request) and build:     # a built Request keeps its own settings: say so, never ignore
            raise InvalidOptionError(f"generate_batch's {', '.join(sorted(build))} apply to prompts; a "
                                     "multidraft.Request carries its own (give Request.build those settings)")
        request = item if isinstance(item, Request) else Request.build(item, **build)
        ids.append(engine.submit(request))
    engine.run()
    return [engine.take(i) for i in ids]


def check_kv_memory(lm, kv_slots: int) -> None:
    """Refuse an arena whose keys and values could never fit this machine's memory (the device's, on CUDA): it is
    allocated at the first forward, where kv_slots=10**12 was torch's 'can't allocate 64000000000000 bytes'."""
    import os

    import torch

    from multidraft.blockwise.cost import kv_bytes_per_position

    config = lm.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_slot = kv_bytes_per_position(lm.num_layers, kv_heads, head_dim, lm.dtype.itemsize)
    if lm.device.type == "cuda":
        memory = torch.cuda.get_device_properties(lm.device).total_memory
    else:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if per_slot * kv_slots > memory:
        raise InvalidOptionError(f"kv_slots={kv_slots:,} needs {per_slot * kv_slots / 2**30:,.1f} GiB of keys and "
                                 f"values for {lm.name} ({per_slot:,} bytes a slot), more than this machine's "
                                 f"{memory / 2**30:,.1f} GiB; lower kv_slots (at most {memory // per_slot:,})")
