"""Drafting cost of method="suffix" alone (no model forward): microseconds per drafted token and per step.

    multidraft bench micro suffix-draft --tokenizer smollm2-135m --store-functions 200 --runs 20

Replays decodes without a model: a stdlib function's text is the "output"; the drafter proposes before every
token (worst case: one accepted token per step), from the request and from a store holding other functions
(and, as the cross-request case, the same function once). Also times building the store.
"""

from __future__ import annotations

from multidraft.drafters.base import LoopState
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.eval.tasks import _stdlib_functions
from multidraft.eval.timing import Span, timed
from multidraft.ngram.corpus import load_tokenizer
from multidraft.suffix import SuffixStore


class _TokenizerOnly:
    """What SuffixDrafter needs from an LM when no forward runs."""

    def __init__(self, tokenizer):
        self.tokenizer, self.name = tokenizer, "tokenizer-only"
        self.eos_token_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()


def add_arguments(parser) -> None:
    parser.add_argument("--tokenizer", default="smollm2-135m")
    parser.add_argument("--store-functions", type=int, default=200)
    parser.add_argument("--runs", type=int, default=20)


def run(args) -> int:
    lm = _TokenizerOnly(load_tokenizer(args.tokenizer))
    functions = [source for _m, _n, source in _stdlib_functions()]
    encoded = [lm.tokenizer(text)["input_ids"] for text in functions]
    store = SuffixStore(lm=lm)
    with Span() as span:
        for ids in encoded[args.runs: args.runs + args.store_functions]:
            store.add(ids)
    build = span.seconds
    print(f"store: {store.num_tokens} tokens, built in {build:.2f}s ({1e6 * build / store.num_tokens:.1f} us/token), "
          f"{store.memory_bytes() / 1e6:.2f} MB ({store.memory_bytes() / store.num_tokens:.0f} bytes/token)")
    for label, seen in (("unseen text", False), ("text seen once before", True)):
        proposed = drafted = 0
        seconds = 0.0
        for ids in encoded[: args.runs]:
            if seen:
                store.add(ids)
            prompt = ids[:8]
            drafter = SuffixDrafter(lm, store=store, update_store=False)
            state = LoopState(seq=list(prompt), prompt_length=len(prompt), lm=lm, sampler=None, stats=None)
            drafter.begin(state, None)
            for token in ids[8:]:
                draft, span = timed(lambda: drafter.propose(state, 64))
                seconds += span.seconds
                proposed += 1
                drafted += len(draft)
                state.seq.append(token)
        print(f"{label}: {proposed} steps, {drafted} drafted tokens, {1e6 * seconds / proposed:.1f} us/step, "
              f"{1e6 * seconds / max(1, drafted):.1f} us per drafted token")

