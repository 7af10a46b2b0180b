"""Server-sent-event framing of streamed choices (their text comes from `multidraft.text_stream`)."""

from __future__ import annotations

import json


def sse(data) -> bytes:
    """One server-sent event carrying JSON (or the literal [DONE])."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
