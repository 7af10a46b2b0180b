"""Requests that cannot share a forward (beam, superposed, pld_plus with attention rows): their own decoder, through
`generate_request`, watched before every layer of its forwards so that a cancel or the request's `check` (a server's
deadline) stops it within one layer.

They interleave with the batch: the decoder runs in a thread of its own that waits before each of its model forwards
until the engine's next step lets it through, so each engine step runs at most one of its forwards and the batched
requests keep stepping in between (on HF's modules the waits and checks are forward pre-hooks; the native forward's
own layer loop calls the LM's watch points instead: forward_watch.py). The turns are strict (the engine thread waits
while the decoder thread runs and the other way round), so the model never runs two forwards at once, callbacks never
run concurrently with the engine, and the decoders need no change: their tokens are the same as alone. pld_plus with
attention rows keeps its capture hooks on the layers while it waits for its turn; they fire only on the thread that
installed them (attention_rows.on_this_thread), so the batch's forwards never feed them."""

from __future__ import annotations

import threading
import time
from typing import Optional

from multidraft.engine.entry import Entry
from multidraft.engine.metrics import EngineMetrics
from multidraft.errors import reraise_fatal
from multidraft.forward_watch import watch_forwards, watch_layers
from multidraft.types import Generation


class StopSolo(BaseException):
    """Raised inside a forward of a cancelled request (a BaseException, like the server's stops, so that no
    `except Exception` of a decoder turns it into an error)."""


class SoloRun:
    """One request's own decoder, one forward per `advance`."""

    def __init__(self, lm, artifacts, metrics: EngineMetrics, entry: Entry):
        self.lm, self.artifacts, self.metrics, self.entry = lm, artifacts, metrics, entry
        self.done = False
        self._turn = threading.Semaphore(0)     # released by the engine: run up to the next forward
        self._rest = threading.Semaphore(0)     # released by the decoder thread: it waits at a forward, or is done
        self._fatal: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._main, name=f"multidraft-solo-{entry.id}", daemon=True)
        self._handles: list = []

    def start(self) -> bool:
        """Run up to its first forward (or to its end); True when done."""
        self.metrics.num_requests_alone += 1
        self._handles += watch_forwards([self.lm], before_forward=self._wait_turn)
        self._handles += watch_layers([self.lm], self._check)
        self._thread.start()
        return self._wait_rest()

    def advance(self) -> bool:
        """Let it run one forward (a cancelled request stops before it); True when done."""
        if self.done:
            return True
        self._turn.release()
        return self._wait_rest()

    def _wait_rest(self) -> bool:
        try:
            self._rest.acquire()
        except BaseException:
            # An interrupt (Ctrl-C) while the decoder thread runs its forward: it would go on and later release a
            # rest nobody waited for, letting a batch forward run beside its next one. Cancel it (it stops at its
            # next layer) and wait for that before the interrupt goes up.
            self.entry.cancelled = True
            self._rest.acquire()
            raise
        if self._fatal is not None:             # an interrupt inside the decoder thread goes on up in the engine's
            raise self._fatal
        return self.done

    def _check(self) -> None:
        """Before every layer: the decoder thread's own forwards only (the batch's run on the engine's thread)."""
        if self._mine():
            check_solo(self.entry)

    def _mine(self) -> bool:
        return threading.current_thread() is self._thread

    def _wait_turn(self) -> None:
        """Before each forward of the model, in the decoder thread only: wait for the engine's next step."""
        if not self._mine():
            return
        self._rest.release()
        self._turn.acquire()
        check_solo(self.entry)
        self.metrics.num_alone_forwards += 1

    def _main(self) -> None:
        from multidraft.api import generate_request
        entry, tokens, started = self.entry, [], time.perf_counter()
        p = entry.prepared

        def on_token(token_id):
            tokens.append(token_id)
            if p.output.on_token is not None:
                p.output.on_token(token_id)
        try:
            entry.result = generate_request(self.lm, entry.request, on_token, p.prompt_ids, self.artifacts)
            self.metrics.generation_tokens_total += len(entry.result.token_ids)
        except StopSolo:
            self._cancelled(tokens, started)
        except BaseException as error:
            try:
                reraise_fatal(error)
                entry.error = error
            except BaseException as fatal:      # an interrupt: the engine raises it; the request ends as cancelled,
                self._fatal = fatal             # as the batch's requests do (Engine.step)
                self._cancelled(tokens, started)
        finally:
            for handle in self._handles:
                handle.remove()
            self.done = True
            self._rest.release()


    def _cancelled(self, tokens: list[int], started: float) -> None:
        p = self.entry.prepared
        p.stats.generated_tokens, p.stats.stop_reason = len(tokens), "cancelled"
        p.stats.total_time = time.perf_counter() - started
        self.entry.result = Generation(text=self.lm.decode(tokens), token_ids=tokens, stats=p.stats)


def check_solo(entry: Entry) -> None:
    if entry.cancelled:
        raise StopSolo()
    if entry.check is not None:
        entry.check()
