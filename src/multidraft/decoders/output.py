"""Collects emitted tokens for every decoder: EOS, stop strings, the token budget and streaming callbacks."""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence


class OutputCollector:
    """Takes tokens as decoders emit them and says when generation must stop.

    EOS tokens are kept in `token_ids` (as HF does) but end generation; a stop string ends it too and is cut
    from `text`. `on_token(token_id)` is called once per kept token, in order. Stop strings are looked for in a
    window: the newest token and the fewest earlier ones whose text holds every place a stop string ending in it
    could start, plus one token of margin (a window's first token may decode differently than inside the whole
    text: a leading space, half a character). So a token costs the same at the end of a long output as at its
    start; a hit is confirmed on the whole decoded text, which also says where to cut.
    """

    def __init__(self, lm, max_new_tokens: int, stop: Sequence[str] = (), on_token: Optional[Callable] = None):
        self.lm = lm
        self.max_new_tokens = max_new_tokens
        self.stop = [s for s in stop if s]
        self.on_token = on_token
        self.token_ids: list[int] = []
        self.stop_reason = ""
        self._text_cut: Optional[str] = None
        self._reach = max((len(s) for s in self.stop), default=1) - 1    # characters before the newest token
        self._start = 0                                                 # first token of the window

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

    def cancel(self) -> None:
        """Stop here: the request was cancelled (its tokens so far are its output)."""
        self.stop_reason = "cancelled"

    def _hit_stop_string(self) -> bool:
        ids, decode = self.token_ids, self.lm.decode
        # Move the window's start up while the tokens after its margin token still hold `reach` characters.
        while self._start + 2 < len(ids) and len(decode(ids[self._start + 2:-1])) >= self._reach:
            self._start += 1
        window = decode(ids[self._start:])
        if not any(s in window for s in self.stop):
            return False
        text = self.lm.decode(self.token_ids)        # once, at the hit: the exact text and where to cut it
        positions = [text.find(s) for s in self.stop if s in text]
        if positions:
            self._text_cut = text[: min(positions)]
            return True
        return False

    def finalize(self, stats, started: float) -> None:
        """Write the output's share of the stats, once, when the decoder is done."""
        stats.generated_tokens = len(self.token_ids)
        stats.stop_reason = self.stop_reason
        stats.total_time = time.perf_counter() - started

    @property
    def text(self) -> str:
        return self._text_cut if self._text_cut is not None else self.lm.decode(self.token_ids)
