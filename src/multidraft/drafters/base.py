"""The drafter interface used by the one draft-and-verify loop (multidraft.decoders.loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Optional, Sequence

import torch

from multidraft.types import Draft


@dataclass
class LoopState:
    """What a drafter may read: the committed tokens and the models. The cache covers seq[:-1]."""

    seq: list[int]
    prompt_length: int
    lm: Any                      # the target LM
    sampler: Any                 # multidraft.sampling.PositionSampler
    stats: Any                   # multidraft.types.DecodeStats

    @property
    def generated(self) -> list[int]:
        return self.seq[self.prompt_length:]


class Drafter:
    """Proposes a `Draft` each step.

    Hooks, all optional except `propose`:
    - `hidden_layer` / `attention_heads`: artifacts the loop should capture on every target forward. They are part
      of the drafter's construction: the loop reads them (`capture_options()`) once, before the prefill and
      `begin`, and refuses a drafter whose `begin` changes them (it would silently capture nothing).
    - `begin(state, prefill_output)`: after the prefill of seq[:-1] (prefill_output is None for a 1-token prompt).
    - `observe(state, draft, verdict, forward_output, kept_rows)`: after each verification; `kept_rows` are the
      rows of forward_output (root first) whose positions stayed in the cache, in sequence order.
    - `end(state)`: once after the last step, with every committed token in state.seq (e.g. to remember them).
    - `drafting(state, max_tokens)`: `propose` as a generator of the model forwards it needs (`DraftForward`s, each
      answered with its logits), for a caller that runs many requests' forwards together (the engine). A drafter
      that runs a model writes its proposal there once and `propose` drives it alone (`run_alone`); the default
      asks for no forward.
    """

    name = "drafter"
    # True when any root-side prefix of a draft is itself a valid draft of this drafter: deterministic drafts with no
    # per-node state (prompt lookup, PLD+, suffix, blockwise). Then draft_length="adaptive" may verify less than was
    # proposed; sampled drafts are only limited before proposing (cutting them by their realised shape biases them).
    cuttable = False
    # The typed Draft parts (types.DRAFT_FIELDS) this drafter fills in; a verifier that needs others is refused.
    provides: tuple[str, ...] = ()
    hidden_layer: Optional[int] = None
    attention_heads: Optional[Sequence[tuple[int, int]]] = None

    def begin(self, state: LoopState, prefill_output) -> None:
        pass

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        raise NotImplementedError

    def drafting(self, state: LoopState, max_tokens: int) -> Generator["DraftForward", torch.Tensor, Draft]:
        draft = self.propose(state, max_tokens)
        return draft
        yield                       # a generator that asks for no forward

    def observe(self, state: LoopState, draft: Draft, verdict, forward_output, kept_rows: list[int]) -> None:
        pass

    def end(self, state: LoopState) -> None:
        pass

    def capture_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.hidden_layer is not None:
            options["hidden_layer"] = self.hidden_layer
        if self.attention_heads:
            options["attention_heads"] = list(self.attention_heads)
        return options


@dataclass
class DraftForward:
    """One forward of a draft model that a drafting generator asks for: `token_ids` on top of `cache`, a chain, a
    tree (`parents`, -1 = on the cache) or the general `visible` = (allowed, positions) of `LM.forward`; only the
    last row's logits when `last_only`. The answer sent back is the (rows, V) float32 logits."""

    lm: Any
    cache: Any
    token_ids: list[int]
    parents: Optional[list[int]] = None
    visible: Optional[tuple[torch.Tensor, list[int]]] = None
    last_only: bool = False

    def run(self) -> torch.Tensor:
        """This forward alone, on its own cache."""
        return self.lm.forward(self.cache, self.token_ids, parents=self.parents, visible=self.visible,
                               logits_rows=slice(-1, None) if self.last_only else None).logits


def run_alone(steps: Generator[DraftForward, torch.Tensor, Draft]) -> Draft:
    """Drive a drafting generator for one request: each forward it asks for runs at once (DraftForward.run)."""
    try:
        forward = next(steps)
        while True:
            forward = steps.send(forward.run())
    except StopIteration as stop:
        return stop.value
