"""`generate`: one entry point for every method (`generate_request` runs a prebuilt `multidraft.Request`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from multidraft.artifacts import Artifacts, artifacts_or_new
from multidraft.decoders.output import OutputCollector
from multidraft.decoders.loop import draft_and_verify
from multidraft import validation
from multidraft.errors import InvalidOptionError, PromptError
from multidraft.methods import Method
from multidraft.prefix_cache import PrefixCache, check_prefix_cache
from multidraft.request import Request
from multidraft.sampling import PositionSampler
from multidraft.types import DecodeStats, Generation
from multidraft.verify import GreedyVerifier, SampleMatchVerifier


def generate(model, prompt_or_messages, method: str = "greedy", max_new_tokens: int = 128,
             temperature: Optional[float] = None, top_p: float = 1.0, top_k: int = 0, seed: Optional[int] = None,
             stop: Union[str, Sequence[str], None] = None, on_token: Optional[Callable[[int], None]] = None,
             chat: Optional[bool] = None, draft_length: Optional[str] = None, artifacts: Optional[Artifacts] = None,
             prefix_cache: Optional[PrefixCache] = None, **method_options) -> Generation:
    """Generate a continuation of a prompt (text, chat messages, or token ids) with `method`.

    temperature defaults to 0 (greedy) for every method except "sample" (1.0). Lossless methods give exactly
    the target model's output law: token-identical to greedy at temperature 0. With the same seed the output is
    the same; prompt-lookup methods (sample-and-match) even equal plain sampling's token for token, draft-model
    methods only share its law.

    draft_length="adaptive" verifies only as much of each draft as pays for its forward on this machine (the
    forward costs are measured while decoding; decoders/draft_length.py); the tokens are the same, only the speed
    and the acceptance length change; it is the default (None). "fixed" verifies every drafted token, as the papers
    do: name it to reproduce a paper's acceptance lengths.

    method="greedy" with a temperature > 0 runs plain sampling, and `stats.method` says "sample". Bad input of
    any kind raises a `multidraft.errors.MultidraftError` subclass (see `multidraft.validation` for the rules).
    Draft models, n-gram files and heads named by path or alias load into `artifacts` (a `multidraft.Artifacts`;
    pass one to reuse them across calls, else they live for this call). This builds one `multidraft.Request` and
    runs it with `generate_request`.

    prefix_cache (a `multidraft.PrefixCache`, quantized-q8 runner only): reuse the keys/values of earlier
    generations for the start of the prompt they share (an agent loop's file, tests, conversation so far), and keep
    this one's; the tokens are the same bits as without it (multidraft.prefix_cache).
    """
    check_model(model)
    request = Request.build(prompt_or_messages, method, max_new_tokens=max_new_tokens, temperature=temperature,
                            top_p=top_p, top_k=top_k, seed=seed, stop=stop, chat=chat, draft_length=draft_length,
                            options=method_options)
    return generate_request(model, request, on_token=on_token, artifacts=artifacts, prefix_cache=prefix_cache)


def generate_request(model, request: Request, on_token: Optional[Callable[[int], None]] = None,
                     prompt_ids: Optional[list[int]] = None, artifacts: Optional[Artifacts] = None,
                     prefix_cache: Optional[PrefixCache] = None) -> Generation:
    """Run a validated `Request` on `model`. `prompt_ids`: the prompt already encoded by the caller (the server
    encodes it once to check its own limits); else the request encodes it. `artifacts`: where the draft models,
    n-gram files and heads the options name are loaded (the caller's, e.g. a server's; by default this call's).
    `prefix_cache`: see `generate`."""
    check_model(model)
    if not isinstance(request, Request):
        raise InvalidOptionError(f"generate_request() takes a multidraft.Request, got {type(request).__name__}")
    if prefix_cache is not None:
        check_prefix_cache(prefix_cache, model)
        if request.row.run is not None:
            raise InvalidOptionError(f"method {request.method!r} runs its own decoder, which does not read a "
                                     "prefix_cache: drop prefix_cache for it")
    prepared = prepare_request(model, request, on_token, prompt_ids, artifacts)
    drafts = None
    if prepared.spec.run is not None:
        drafts = prepared.spec.run(model, prepared.prompt_ids, prepared.sampler, prepared.output, prepared.stats,
                                   prepared.options)
    else:      # the one loop (greedy and sample too: their drafter proposes nothing)
        drafter, verifier = prepared.loop_pair(model, request)
        draft_and_verify(model, prepared.prompt_ids, drafter, verifier, prepared.sampler, prepared.output,
                         prepared.stats, request.draft_length, prefix_cache=prefix_cache)
    # Every decoder finalized the stats once (OutputCollector.finalize): generated tokens, stop reason, total time.
    return prepared.result(drafts)


@dataclass
class Prepared:
    """A request bound to a model: its prompt ids, resolved options (artifacts loaded), sampler, output and stats.
    `generate_request` runs it alone; the engine (multidraft.engine) runs many in one loop."""

    spec: Method
    options: dict
    prompt_ids: list[int]
    sampler: PositionSampler
    output: OutputCollector
    stats: DecodeStats

    def loop_pair(self, model, request: Request):
        """(drafter, verifier) of the one loop; None for a method with its own decoder (beam, superposed)."""
        spec = self.spec
        if spec.make_drafter is None:
            return None
        drafter = spec.make_drafter(model, self.sampler, self.options)
        if spec.make_verifier is not None:
            verifier = spec.make_verifier(model, self.sampler, self.options)
        else:
            verifier = GreedyVerifier() if request.greedy else SampleMatchVerifier()
        return drafter, verifier

    def result(self, drafts=None) -> Generation:
        return Generation(text=self.output.text, token_ids=list(self.output.token_ids), stats=self.stats,
                          drafts=drafts)


def prepare_request(model, request: Request, on_token: Optional[Callable[[int], None]] = None,
                    prompt_ids: Optional[list[int]] = None, artifacts: Optional[Artifacts] = None) -> Prepared:
    """Bind a validated request to `model` (see generate_request for the arguments; Engine.submit calls it too)."""
    validation.callback("on_token", on_token, (0,), "a function of one token id")
    if prompt_ids is None:
        prompt_ids = request.prompt_ids(model)
    else:       # the caller's own encoding (a server's, an Engine user's): the checks a token-id prompt gets
        if not validation.is_token_id_list(prompt_ids):
            raise PromptError(f"prompt_ids must be a non-empty list of token ids (integers), got {prompt_ids!r:.80}")
        prompt_ids = validation.token_ids(prompt_ids, model.vocab_size)
        model.check_prompt_length(len(prompt_ids), request.max_new_tokens)
    spec: Method = request.row                 # the method row: drafter x verifier, or its own decoder
    options = request.options
    if spec.load_artifacts is not None:        # draft model, calibration...: ready objects before any factory runs
        options = spec.load_artifacts(model, options, artifacts_or_new(artifacts))
    if options.get("draft_model") is not None:      # else the draft's forward refuses half-way, after tokens streamed
        options["draft_model"].check_prompt_length(len(prompt_ids), request.max_new_tokens, "the draft model ")
    return Prepared(spec, options, list(prompt_ids), PositionSampler(request.params),
                    OutputCollector(model, request.max_new_tokens, request.stop, on_token),
                    DecodeStats(method=request.method, lossless=spec.lossless, prompt_tokens=len(prompt_ids)))


def check_model(model) -> None:
    if isinstance(model, (str, os.PathLike)):
        raise InvalidOptionError(f"generate() takes a loaded model, not the name {os.fspath(model)!r}: call "
                                 f"lm = multidraft.load_model({os.fspath(model)!r}) first, then generate(lm, ...)")
    if not all(hasattr(model, attr) for attr in ("encode", "vocab_size", "forward")):
        raise InvalidOptionError(f"generate() takes a model from multidraft.load_model(...), got {type(model).__name__}")
