"""`generate`: one entry point for every method."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

from multidraft.decoders.output import OutputCollector
from multidraft.decoders.speculative import draft_and_verify
from multidraft.errors import InvalidOptionError
from multidraft.methods import get_method
from multidraft.sampling import PositionSampler, SamplingParams
from multidraft.types import DecodeStats, Generation
from multidraft.verify import GreedyVerifier, SampleMatchVerifier


def generate(model, prompt_or_messages, method: str = "greedy", max_new_tokens: int = 128,
             temperature: Optional[float] = None, top_p: float = 1.0, top_k: int = 0, seed: Optional[int] = None,
             stop: Union[str, Sequence[str], None] = None, on_token: Optional[Callable[[int], None]] = None,
             chat: Optional[bool] = None, **method_options) -> Generation:
    """Generate a continuation of a prompt (text, chat messages, or token ids) with `method`.

    temperature defaults to 0 (greedy) for every method except "sample" (1.0). Lossless methods give exactly
    the target model's output law: token-identical to greedy at temperature 0. With the same seed the output is
    the same; prompt-lookup methods (sample-and-match) even equal plain sampling's token for token, draft-model
    methods only share its law.
    """
    spec = get_method(method)
    options = spec.resolve_options(method_options)
    if temperature is None:
        temperature = 1.0 if method == "sample" else 0.0
    if method == "sample" and temperature == 0:
        raise InvalidOptionError("method='sample' needs temperature > 0; use method='greedy' for temperature 0")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InvalidOptionError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    params = SamplingParams(float(temperature) if isinstance(temperature, (int, float)) else temperature,
                            top_k, top_p, seed).validate()
    stops = [stop] if isinstance(stop, str) else list(stop or [])

    prompt_ids = model.encode(prompt_or_messages, chat=chat)
    model.check_prompt_length(len(prompt_ids), max_new_tokens)
    sampler = PositionSampler(params)
    stats = DecodeStats(method=method, lossless=spec.lossless, prompt_tokens=len(prompt_ids))
    output = OutputCollector(model, max_new_tokens, stops, on_token)

    drafts = None
    if spec.run is not None:
        drafts = spec.run(model, prompt_ids, sampler, output, stats, options)
    else:
        drafter = spec.make_drafter(model, sampler, options)
        if spec.make_verifier is not None:
            verifier = spec.make_verifier(model, sampler, options)
        else:
            verifier = GreedyVerifier() if params.greedy else SampleMatchVerifier()
        draft_and_verify(model, prompt_ids, drafter, verifier, sampler, output, stats)
    stats.generated_tokens = len(output.token_ids)
    stats.stop_reason = output.stop_reason
    return Generation(text=output.text, token_ids=list(output.token_ids), stats=stats, drafts=drafts)
