"""How the baselines (greedy, sample: the one loop with a drafter that proposes nothing; beam) and prompt lookup (pld) run; their rows live in multidraft.methods."""

from __future__ import annotations

from multidraft.decoders.beam import beam_search
from multidraft.drafters.base import Drafter
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.errors import InvalidOptionError
from multidraft.types import Draft, Generation


def run_beam(lm, prompt_ids, sampler, output, stats, options):
    num_beams, length_penalty = options["num_beams"], options["length_penalty"]
    if not sampler.params.greedy:
        raise InvalidOptionError("beam search is deterministic; use temperature=0 (or method='sample')")
    if num_beams > lm.vocab_size:          # the first step keeps num_beams distinct tokens (torch's topk)
        raise InvalidOptionError(f"num_beams={num_beams} is more than the {lm.vocab_size} tokens of {lm.name}'s "
                                 f"vocabulary; use at most {lm.vocab_size}")
    hypotheses = beam_search(lm, prompt_ids, num_beams, float(length_penalty), output, stats)
    return [Generation(lm.decode(ids), ids, stats, score=score) for ids, score in hypotheses]


def make_pld_drafter(lm, sampler, options):
    return PromptLookupDrafter(**options)


class NoDrafter(Drafter):
    """Proposes nothing: the loop then verifies one row per step, which is plain greedy / sampling (the engine
    batches greedy and sample requests this way)."""

    name = "none"
    cuttable = True

    def propose(self, state, max_tokens):
        return Draft()


def make_no_drafter(lm, sampler, options):
    return NoDrafter()
