"""One request inside the engine: what it asked for and where its decoding stands."""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from multidraft.api import Prepared
from multidraft.decoders.loop import Decoding
from multidraft.prefix_cache import HiddenRecorder
from multidraft.request import Request
from multidraft.types import Generation


class Entry:
    def __init__(self, request_id: int, request: Request, prepared: Prepared, pair, solo_reason: Optional[str],
                 check: Optional[Callable[[], None]] = None):
        self.id, self.request, self.prepared, self.check = request_id, request, prepared, check
        self.pair, self.solo_reason = pair, solo_reason
        self.decoding: Optional[Decoding] = None
        self.solo = None                            # its own decoder's run (engine/solo.py), when it has one
        self.prefill_done = 0
        self.prefill_ids: list[int] = []            # the rows the prefill reads (fixed at admission)
        self.decoding_started = False               # prefill read and the drafter begun
        self.hidden_parts: list[torch.Tensor] = []
        self.recorder: Optional[HiddenRecorder] = None     # hidden states for its PrefixCache entry
        self.cancelled = False
        self.result: Optional[Generation] = None
        self.error: Optional[BaseException] = None
        self.submitted = time.perf_counter()
        self.depth_cap: Optional[int] = None     # the global budget's limit on this request's next sampled draft
        self.draft_region = None                 # its draft session's region of the draft model's arena

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def region_size(self) -> int:
        return len(self.prepared.prompt_ids) + self.request.max_new_tokens
