"""The drafter interface used by the one draft-and-verify loop (multidraft.decoders.loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

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

