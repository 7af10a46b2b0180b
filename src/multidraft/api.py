"""`generate`: one entry point for every method."""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence, Union

from multidraft.decoders.output import OutputCollector
from multidraft.decoders.draft_length import check_mode as check_draft_length
from multidraft.decoders.loop import draft_and_verify
from multidraft import validation
from multidraft.errors import InvalidOptionError
from multidraft.methods import get_method
from multidraft.sampling import PositionSampler, SamplingParams
from multidraft.types import DecodeStats, Generation
from multidraft.verify import GreedyVerifier, SampleMatchVerifier


def generate(model, prompt_or_messages, method: str = "greedy", max_new_tokens: int = 128,
             temperature: Optional[float] = None, top_p: float = 1.0, top_k: int = 0, seed: Optional[int] = None,
             stop: Union[str, Sequence[str], None] = None, on_token: Optional[Callable[[int], None]] = None,
             chat: Optional[bool] = None, draft_length: Optional[str] = None, **method_options) -> Generation:
    """Generate a continuation of a prompt (text, chat messages, or token ids) with `method`.

    temperature defaults to 0 (greedy) for every method except "sample" (1.0). Lossless methods give exactly
    the target model's output law: token-identical to greedy at temperature 0. With the same seed the output is
    the same; prompt-lookup methods (sample-and-match) even equal plain sampling's token for token, draft-model
    methods only share its law.

    draft_length="adaptive" verifies only as much of each draft as pays for its forward on this machine (the
    forward costs are measured while decoding; decoders/draft_length.py); the tokens are the same, only the speed
    and the acceptance length change. "fixed" verifies every drafted token, as the papers do. None (the default)
    takes `model.draft_length` when the model has one (the CLIs and the server set it), else "fixed".

    method="greedy" with a temperature > 0 runs plain sampling, and `stats.method` says "sample". Bad input of
    any kind raises a `multidraft.errors.MultidraftError` subclass (see `multidraft.validation` for the rules).
    """
    _check_model(model)
    if not isinstance(method, str):
        raise InvalidOptionError(f"method must be a method name (see multidraft.available_methods()), got {method!r}")
    spec = get_method(method)
    options = spec.resolve_options(method_options)
    if temperature is None:
        temperature = 1.0 if method == "sample" else 0.0
    params = SamplingParams(temperature, top_k, top_p, seed).validate()
    if method == "sample" and params.greedy:
        raise InvalidOptionError("method='sample' needs temperature > 0; use method='greedy' for temperature 0")
    if spec.greedy_only and not params.greedy:
        raise InvalidOptionError(f"method={method!r} verifies by greedy matching; use temperature=0")
    if method == "greedy" and not params.greedy:
        # "greedy" names the plain decoder; with a temperature it samples, and the result says so.
        method, spec = "sample", get_method("sample")
    max_new_tokens = validation.max_new_tokens(max_new_tokens)
    if draft_length is None:
        draft_length = getattr(model, "draft_length", None) or "fixed"
    check_draft_length(draft_length)
    stops = validation.stop_strings(stop)
    if chat is not None and not isinstance(chat, bool):
        raise InvalidOptionError(f"chat must be true, false or None (automatic), got {chat!r}")
    if on_token is not None and not callable(on_token):
        raise InvalidOptionError(f"on_token must be a function of one token id, got {type(on_token).__name__}")

    prompt_or_messages = validation.prompt(prompt_or_messages, model.vocab_size, getattr(model, "tokenizer", None))
    prompt_ids = model.encode(prompt_or_messages, chat=chat)
    model.check_prompt_length(len(prompt_ids), max_new_tokens)
    sampler = PositionSampler(params)
    stats = DecodeStats(method=method, lossless=spec.lossless, prompt_tokens=len(prompt_ids))
    output = OutputCollector(model, max_new_tokens, stops, on_token)

    drafts = None
    if spec.load_artifacts is not None:        # draft model, calibration...: ready objects before any factory runs
        options = spec.load_artifacts(model, options)
    if spec.run is not None:
        drafts = spec.run(model, prompt_ids, sampler, output, stats, options)
    else:
        drafter = spec.make_drafter(model, sampler, options)
        if spec.make_verifier is not None:
            verifier = spec.make_verifier(model, sampler, options)
        else:
            verifier = GreedyVerifier() if params.greedy else SampleMatchVerifier()
        draft_and_verify(model, prompt_ids, drafter, verifier, sampler, output, stats, draft_length)
    stats.generated_tokens = len(output.token_ids)
    stats.stop_reason = output.stop_reason
    return Generation(text=output.text, token_ids=list(output.token_ids), stats=stats, drafts=drafts)


def _check_model(model) -> None:
    if isinstance(model, (str, os.PathLike)):
        raise InvalidOptionError(f"generate() takes a loaded model, not the name {os.fspath(model)!r}: call "
                                 f"lm = multidraft.load_model({os.fspath(model)!r}) first, then generate(lm, ...)")
    if not all(hasattr(model, attr) for attr in ("encode", "vocab_size", "forward")):
        raise InvalidOptionError(f"generate() takes a model from multidraft.load_model(...), got {type(model).__name__}")
