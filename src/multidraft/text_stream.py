"""Incremental text for streamed output, the one detokenizer of `multidraft generate --stream` and the server."""

from __future__ import annotations

from typing import Sequence


class TextStreamer:
    """Turns a growing list of token ids into text deltas whose concatenation is the final text.

    It holds back (a) a trailing U+FFFD, which is usually half of a multi-byte character, (b) the last
    len(longest stop string) - 1 characters, which could still become the start of a stop string, and
    (c) everything from a stop string on (the callback sees the token that completes it before `generate`
    cuts it). `finish(final_text)` sends whatever is left.
    """

    def __init__(self, decode, stop: Sequence[str] = ()):
        self.decode = decode
        self.token_ids: list[int] = []
        self.stop = [s for s in stop if s]
        self.holdback = max((len(s) for s in self.stop), default=1) - 1
        self.sent = 0

    def feed(self, token_id: int) -> str:
        self.token_ids.append(int(token_id))
        text = self.decode(self.token_ids)
        end = min([len(text) - self.holdback] + [text.find(s) for s in self.stop if s in text])
        while end > self.sent and text[end - 1] == "\ufffd":
            end -= 1
        if end <= self.sent:
            return ""
        delta, self.sent = text[self.sent:end], end
        return delta

    def finish(self, final_text: str) -> str:
        delta = final_text[self.sent:]
        self.sent = max(self.sent, len(final_text))
        return delta

