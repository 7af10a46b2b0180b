"""Registers the baselines (greedy, sample, beam) and prompt lookup (pld)."""

from __future__ import annotations

from multidraft.decoders.autoregressive import autoregressive, beam_search
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft import validation
from multidraft.errors import InvalidOptionError
from multidraft.methods import Method, register
from multidraft.types import Generation


def _run_autoregressive(lm, prompt_ids, sampler, output, stats, options):
    autoregressive(lm, prompt_ids, sampler, output, stats)


def _check_beam(options) -> None:
    validation.positive_int("num_beams", options["num_beams"])
    validation.number("length_penalty", options["length_penalty"])


def _run_beam(lm, prompt_ids, sampler, output, stats, options):
    _check_beam(options)
    num_beams, length_penalty = options["num_beams"], options["length_penalty"]
    if not sampler.params.greedy:
        raise InvalidOptionError("beam search is deterministic; use temperature=0 (or method='sample')")
    hypotheses = beam_search(lm, prompt_ids, num_beams, float(length_penalty), output, stats)
    return [Generation(lm.decode(ids), ids, stats, score=score) for ids, score in hypotheses]


register(Method("greedy", lossless=True, description="plain greedy decoding (argmax at every step)",
                run=_run_autoregressive))
register(Method("sample", lossless=True, description="plain sampling with temperature, top-k and top-p",
                run=_run_autoregressive))
register(Method("beam", lossless=False, description="beam search over the target model (a different decoder, not greedy)",
                options={"num_beams": 4, "length_penalty": 1.0}, run=_run_beam, check_options=_check_beam))
register(Method("pld", lossless=True,
                description="prompt lookup: drafts copied from the context after the trailing n-gram",
                options={"max_ngram": 3, "num_draft_tokens": 10, "variant": "hf"},
                make_drafter=lambda lm, sampler, options: PromptLookupDrafter(**options),
                check_options=lambda options: PromptLookupDrafter(**options)))   # construction checks everything
