"""From a validated request to `generate` calls, and the choices they produce.

How n choices are made (one place, so the page and the API agree):
- a method with its own decoder that makes several outputs in one pass (`superposed`: a `run` decoder with
  an option `num_drafts` or `k`) runs once with that option set to n; the choices are its ranked drafts.
  (`multi_draft`'s num_drafts is the number of draft chains behind one output: a drafter, not this case);
- at temperature 0 every choice would be the same, so the method runs once and the result is copied;
- otherwise the method runs n times with seeds seed, seed+1, ... (random seeds when none is given).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Optional

from multidraft import validation
from multidraft.api import generate_request
from multidraft.errors import InvalidOptionError, PromptError, ServerLimitError, UnknownMethodError
from multidraft.methods import Method, available_methods, get_method
from multidraft.request import Request
from multidraft.server.config import ServerConfig
from multidraft.server.options import check_sizes, default_artifact, request_options
from multidraft.server.schemas import ApiError, ChatRequest
from multidraft.server.worker import JobCancelled, JobTimedOut
from multidraft.text_stream import TextStreamer
from multidraft.types import DecodeStats

MAX_STOP_STRINGS = 4
MAX_STOP_LENGTH = 256


SAMPLE_PARAMS = {"temperature": 0.8, "top_p": 0.95}


def suggestion_defaults(config: ServerConfig, lm=None) -> dict:
    """What the autocomplete page asks for: k superposed drafts from one pass when that method exists, else
    k separately seeded `sample` runs. `params` go into the request body as they are."""
    if "superposed" in available_methods():
        # Superposed decoding is deterministic (its own temperature is `tau`); without the default n-gram
        # file of this model's tokenizer it runs LM-only (alpha=0) instead of failing on every keystroke.
        params = {} if lm is None or _has_default_ngram(lm) else {"alpha": 0.0}
        method = "superposed"
    else:
        method, params = "sample", dict(SAMPLE_PARAMS)
    return {"method": method, "n": config.suggestions, "max_tokens": config.suggestion_tokens, "params": params,
            "sample_params": dict(SAMPLE_PARAMS)}


def _has_default_ngram(lm) -> bool:
    try:
        from multidraft.ngram.defaults import default_path, vocab_family_of
        return default_path(vocab_family_of(lm)).exists()
    except Exception:          # no n-gram support, or a tokenizer it cannot fingerprint: LM-only drafts
        return False


@dataclass
class Plan:
    """A checked HTTP request: one library `Request` per prompt (the same method, options and sampling), plus what
    only the server has (n choices, streaming)."""
    requests: list[Request]
    chat: bool
    n: int
    stream: bool

    @property
    def method(self) -> str:
        return self.requests[0].method

    @property
    def spec(self) -> Method:
        return self.requests[0].row

    @property
    def greedy(self) -> bool:
        return self.requests[0].greedy

    @property
    def seed(self) -> Optional[int]:
        return self.requests[0].params.seed


@dataclass
class Choice:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class Outcome:
    choices: list[Choice]
    prompt_tokens: int
    stats: DecodeStats
    calls: int


def build_plan(request, config: ServerConfig, draft_lm=None, suffix_store=None, named=None, *,
               suffix_stores=None, client: Optional[str] = None) -> Plan:
    """Check a request before it is queued; raises ApiError(400). The library builds and checks the `Request`s with
    the server's bounds (Request.build(bounds=...): sampling, max_tokens and every option within the HTTP bounds and
    caps, in the library's words); the server adds only what is HTTP's: the request's shape, its allow-list, its
    artifacts (`named`: kind -> {name: value}, default config.artifacts), products of options, and its suffix store
    (`suffix_store`, or the one of `suffix_stores` for `client` when the method drafts from one)."""
    named = config.artifacts if named is None else named
    chat = isinstance(request, ChatRequest)
    prompts, max_tokens = _prompts_and_budget(request, config, chat)
    if not 1 <= request.n <= config.max_n:
        raise ApiError(400, f"'n' must be between 1 and {config.max_n} (serve --max-n), got {request.n}", param="n")
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if len(stop) > MAX_STOP_STRINGS:
        raise ApiError(400, f"'stop' holds {len(stop)} strings; at most {MAX_STOP_STRINGS} are allowed", param="stop")
    if any(isinstance(s, str) and len(s) > MAX_STOP_LENGTH for s in stop):
        raise ApiError(400, f"a stop string is longer than {MAX_STOP_LENGTH} characters", param="stop")
    # the one place the default method is chosen ("" is a name no method has, not the default)
    method = request.method if request.method is not None else config.default_method
    if suffix_stores is not None:
        suffix_store = suffix_store_for(method, suffix_stores, client)
    options = _options(request, method, config, draft_lm, suffix_store, named)
    try:
        requests = [Request.build(prompt, method, max_new_tokens=max_tokens, temperature=request.temperature,
                                  top_p=request.top_p, top_k=request.top_k, seed=request.seed, stop=stop,
                                  chat=chat, draft_length=config.draft_length, options=options,
                                  bounds=config.bounds())
                    for prompt in prompts]
    except PromptError as exc:
        raise ApiError(400, str(exc), param="messages" if chat else "prompt") from None
    except InvalidOptionError as exc:    # an option, sampling, max_tokens, the temperature rules: the library's words
        raise _api_error(exc, request) from None
    check_sizes(requests[0].row, requests[0].options, config, request.n)
    if any(name not in options for name in requests[0].row.artifact_options("draft_model")):
        # never the library's default draft (a request would load a model the operator did not name, on the model
        # thread: every client stalls for its load); and its words ("needs draft_model=: an LM") are for Python
        raise ApiError(400, f"method {method!r} needs a draft model and this server has none; its operator gives one "
                            f"with `multidraft serve --draft MODEL` (a model with the same tokenizer), or use a method "
                            f"without one (pld, suffix)", param="method", code="no_draft_model")
    return Plan(requests, chat, request.n, request.stream)


def _api_error(exc: InvalidOptionError, request) -> ApiError:
    """A library refusal as a 400 naming the request's field (`param`: the check's, in the request's terms)."""
    message = str(exc)
    param = exc.param
    if param == "max_new_tokens":
        param = "max_completion_tokens" if getattr(request, "max_completion_tokens", None) is not None else "max_tokens"
    elif param is None:
        param = "method" if message.startswith("method '") else "stop" if message.startswith("stop") else \
            "temperature" if "temperature" in message else None
    return ApiError(400, message, param=param, code="limit_exceeded" if isinstance(exc, ServerLimitError) else None)


def _prompts_and_budget(request, config: ServerConfig, chat: bool) -> tuple[list, int]:
    """The request's prompts (chat: its messages as one prompt; the library checks them, roles and emptiness
    included, when it encodes them) and its max_tokens (the server's defaults; its range is the library's check)."""
    if chat:
        prompts = [[{"role": m.role, "content": m.text()} for m in request.messages]]
        max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    else:
        prompts = _prompts(request.prompt, config)
        max_tokens = request.max_tokens
    if max_tokens is None:
        max_tokens = config.default_max_tokens if not chat else config.max_tokens
    return prompts, max_tokens


def _options(request, method: str, config: ServerConfig, draft_lm, suffix_store, named) -> dict:
    """The method options a request may set (the allow-list, caps, artifact names) plus what the server supplies:
    its draft model, n as the number of one pass's outputs, its suffix store."""
    unknown = {}
    try:
        spec = get_method(method)
        given = dict(request.model_extra or {})
        unknown = {name: value for name, value in given.items() if name not in spec.specs}
        if unknown:                                  # the library's message lists the method's options
            spec.resolve_options(unknown)
    except InvalidOptionError as exc:          # the field at fault: the unknown option, else the method
        param = min(unknown) if unknown and not isinstance(exc, UnknownMethodError) else "method"
        raise ApiError(400, str(exc), param=param) from None
    options = request_options(method, given, config, named)
    for name in spec.artifact_options("draft_model"):   # the operator's draft model unless the request named one
        if name not in options:
            chosen = draft_lm if draft_lm is not None else default_artifact("draft_model", named)
            if chosen is not None:
                options[name] = chosen
    if spec.outputs_option:                          # one pass makes the n choices
        options[spec.outputs_option] = request.n
    if suffix_store is not None and "store" in spec.specs:
        options["store"] = suffix_store
    return options


def suffix_store_for(method: str, stores, client: Optional[str]):
    """The server's suffix store for this request's client when the method drafts from one, else None: the API key
    the request authenticated with (None without authentication: the shared store), never an unchecked bearer."""
    if method != "suffix":
        return None
    return stores.for_key(client)


def _prompts(prompt, config: ServerConfig) -> list:
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]                      # one prompt as token ids
    else:
        prompts = list(prompt)                        # several prompts: texts or token-id lists
    if not prompts:
        raise ApiError(400, "'prompt' is empty", param="prompt")
    if len(prompts) > config.max_prompts:
        raise ApiError(400, f"'prompt' holds {len(prompts)} prompts; at most {config.max_prompts} per request",
                       param="prompt")
    return prompts


def _encode(lm, request: Request, config: ServerConfig) -> list[int]:
    """The prompt's ids, encoded once and checked by the library (vocabulary, chat roles, context length), within
    the server's own limit on prompt tokens."""
    ids = request.encode(lm)
    if len(ids) > config.max_prompt_tokens:
        raise PromptError(f"the prompt has {len(ids)} tokens; this server allows at most {config.max_prompt_tokens} "
                          f"(serve --max-prompt-tokens)")
    lm.check_prompt_length(len(ids), request.max_new_tokens)
    return ids


@dataclass
class Call:
    """One generation of a plan: a request (with its choice's seed), its prompt ids and the choices it fills."""

    base: int                      # index of the prompt's first choice
    indices: list[int]             # the choices this call's result becomes
    request: Request
    ids: list[int]
    streamer: Optional[TextStreamer]
    produced: int = 0
    started: bool = False
    finished: bool = False


class PlanRun:
    """A plan's calls and what their results become (choices, metrics, stream events). `run_plan` runs the calls one
    after the other; the engine worker (server/engine_worker.py) runs many plans' calls in one batch. Built on the
    worker thread (it encodes the prompts)."""

    def __init__(self, lm, plan: Plan, job, config: ServerConfig, metrics):
        self.plan, self.job, self.metrics = plan, job, metrics
        self.one_pass = plan.spec.outputs_option is not None     # the n choices come from one run's ranked drafts
        self.choices: list[Choice] = []
        self.all_stats: list[DecodeStats] = []
        self.prompt_tokens = 0
        self.calls: list[Call] = []
        for prompt_index, request in enumerate(plan.requests):
            try:
                ids = _encode(lm, request, config)
            except PromptError as exc:            # the field it is about, in the client's terms
                raise ApiError(400, str(exc), param="messages" if plan.chat else "prompt") from None
            self.prompt_tokens += len(ids)
            base = prompt_index * plan.n
            if self.one_pass:
                seeds = [(plan.seed if plan.seed is not None else _random_seed(), list(range(plan.n)))]
            elif plan.greedy:
                seeds = [(plan.seed, list(range(plan.n)))]
            else:
                first = plan.seed if plan.seed is not None else _random_seed()
                seeds = [(validation.nth_seed(first, i), [i]) for i in range(plan.n)]
            for seed, indices in seeds:
                streamer = TextStreamer(lm.decode, request.stop) if plan.stream and not self.one_pass else None
                self.calls.append(Call(base, indices, request.with_seed(seed), ids, streamer))

    def on_token(self, call: Call, check: bool = True):
        """The token callback of one call: counts, streams deltas; `check` stops it when the job must stop (the
        engine worker checks between steps instead)."""
        def on_token(token_id):
            call.produced += 1
            if check:
                self.job.check()
            if call.streamer is not None:
                delta = call.streamer.feed(token_id)
                if delta:
                    for index in call.indices:
                        self.job.emit("delta", call.base + index, delta)
        return on_token

    def aborted(self) -> None:
        """Like vLLM: the work done still counts (prompt and generated tokens), and every choice that did not
        finish is a request_success_total{finished_reason="abort"}."""
        cut = [call for call in self.calls if call.started and not call.finished]
        self.metrics.inc("vllm:prompt_tokens_total", sum(len(call.ids) for call in cut))
        self.metrics.inc("vllm:generation_tokens_total", sum(call.produced for call in cut))
        unfinished = len(self.plan.requests) * self.plan.n - len(self.choices)
        self.metrics.inc("vllm:request_success_total", unfinished, finished_reason="abort")

    def finish(self, call: Call, result) -> None:
        """A call's result becomes its choices (and their stream events)."""
        call.finished = True
        self.all_stats.append(result.stats)
        finish = _finish_reason(result.stats)
        self.metrics.record_generation(result.stats, finish)
        outputs = list(result.drafts or [])[:self.plan.n] if self.one_pass else [result] * len(call.indices)
        for index, output in zip(call.indices, outputs):
            reason = _finish_reason(output.stats) if output is not result else finish
            choice = Choice(call.base + index, output.text, list(output.token_ids), reason)
            self.choices.append(choice)
            self.metrics.inc("vllm:request_success_total", finished_reason=reason)
            if self.plan.stream:
                rest = call.streamer.finish(choice.text) if call.streamer is not None else choice.text
                if rest:
                    self.job.emit("delta", choice.index, rest)
                self.job.emit("finish", choice.index, reason)

    def outcome(self) -> "Outcome":
        choices = sorted(self.choices, key=lambda choice: choice.index)
        return Outcome(choices, self.prompt_tokens, DecodeStats.merge(self.all_stats), len(self.all_stats))


def run_plan(lm, plan: Plan, job, config: ServerConfig, metrics, artifacts=None, prefix_cache=None) -> Outcome:
    """Runs on the worker thread. With plan.stream, emits ("delta", choice_index, text) events as it goes.
    prefix_cache: the server's, for the methods of the one loop (the others run their own decoders)."""
    run = PlanRun(lm, plan, job, config, metrics)
    for call in run.calls:
        call.started = True
        row = call.request.row
        reuse = prefix_cache if row.run is None else None
        try:
            result = generate_request(lm, call.request, on_token=run.on_token(call), prompt_ids=call.ids,
                                      artifacts=artifacts, prefix_cache=reuse)
        except (JobCancelled, JobTimedOut):
            run.aborted()
            raise
        run.finish(call, result)
    return run.outcome()


def _random_seed() -> int:
    return secrets.randbits(62)


def _finish_reason(stats: DecodeStats) -> str:
    return "length" if stats.stop_reason == "max_new_tokens" else "stop"
