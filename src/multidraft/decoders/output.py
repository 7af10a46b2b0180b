"""Collects emitted tokens for every decoder: EOS, stop strings, the token budget and streaming callbacks."""

from __future__ import annotations

from typing import Callable, Optional, Sequence


class OutputCollector:
    """Takes tokens as decoders emit them and says when generation must stop.

    EOS tokens are kept in `token_ids` (as HF does) but end generation; a stop string ends it too and is cut
    from `text`. `on_token(token_id)` is called once per kept token, in order.
    """

    def __init__(self, lm, max_new_tokens: int, stop: Sequence[str] = (), on_token: Optional[Callable] = None):
        self.lm = lm
        self.max_new_tokens = max_new_tokens
        self.stop = [s for s in stop if s]
        self.on_token = on_token
        self.token_ids: list[int] = []
        self.stop_reason = ""
        self._text_cut: Optional[str] = None

    @property
    def done(self) -> bool:
        return bool(self.stop_reason)

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.token_ids)

    def add(self, tokens: Sequence[int]) -> list[int]:
        """Append tokens (stopping early if needed); returns those actually kept."""
        kept = []
        for token in tokens:
            if self.done:
                break
            token = int(token)
            self.token_ids.append(token)
            kept.append(token)
            if self.on_token is not None:
                self.on_token(token)
            if token in self.lm.eos_token_ids:
                self.stop_reason = "eos"
            elif self.stop and self._hit_stop_string():
                self.stop_reason = "stop_string"
            elif len(self.token_ids) >= self.max_new_tokens:
                self.stop_reason = "max_new_tokens"
        return kept

    def _hit_stop_string(self) -> bool:
        text = self.lm.decode(self.token_ids)
        positions = [text.find(s) for s in self.stop if s in text]
        if positions:
            self._text_cut = text[: min(positions)]
            return True
        return False

    @property
    def text(self) -> str:
        return self._text_cut if self._text_cut is not None else self.lm.decode(self.token_ids)
