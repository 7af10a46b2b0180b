"""Requests that cannot share a forward (beam, superposed, pld_plus with attention rows): their own decoder, through
`generate_request`, watched before every layer of its forwards so that a cancel or the request's `check` (a server's
deadline) stops it within one layer."""

from __future__ import annotations

import time

from multidraft.engine.entry import Entry
from multidraft.engine.metrics import EngineMetrics
from multidraft.errors import reraise_fatal
from multidraft.forward_watch import watch_layers
from multidraft.types import Generation


class StopSolo(BaseException):
    """Raised inside a forward of a cancelled request (a BaseException, like the server's stops, so that no
    `except Exception` of a decoder turns it into an error)."""


def run_solo(lm, artifacts, metrics: EngineMetrics, entry: Entry, finished: list[int]) -> None:
    """The whole request now, between two steps."""
    from multidraft.api import generate_request
    p, tokens, started = entry.prepared, [], time.perf_counter()
    metrics.num_requests_alone += 1

    def on_token(token_id):
        tokens.append(token_id)
        if p.output.on_token is not None:
            p.output.on_token(token_id)
    handles = watch_layers([lm], lambda: check_solo(entry))
    try:
        entry.result = generate_request(lm, entry.request, on_token, p.prompt_ids, artifacts)
        metrics.generation_tokens_total += len(entry.result.token_ids)
    except StopSolo:
        p.stats.generated_tokens, p.stats.stop_reason = len(tokens), "cancelled"
        p.stats.total_time = time.perf_counter() - started
        entry.result = Generation(text=lm.decode(tokens), token_ids=tokens, stats=p.stats)
    except BaseException as error:
        reraise_fatal(error)
        entry.error = error
    finally:
        for handle in handles:
            handle.remove()
    finished.append(entry.id)


def check_solo(entry: Entry) -> None:
    if entry.cancelled:
        raise StopSolo()
    if entry.check is not None:
        entry.check()
