"""A check run inside a model's forwards: before the model's forward and before each of its decoder layers, so that
a stop it raises (a deadline, a cancelled request) lands within one layer, even inside a long prefill or a wide
beam step. The one-at-a-time server watches every model it serves (server/worker.py); the engine watches its model
while a request that cannot share a forward runs alone (multidraft.engine)."""

from __future__ import annotations

from typing import Callable, Iterable


def watch_layers(lms: Iterable, check: Callable[[], None]) -> list:
    """Call `check()` before every forward of these models and of each of their decoder layers; returns the hook
    handles (remove() them to undo). Models without torch modules (e.g. test doubles) are skipped."""
    handles = []
    for lm in lms:
        model = getattr(lm, "model", None)
        if model is None or not hasattr(model, "register_forward_pre_hook"):
            continue
        layers = lm._find_layers() if hasattr(lm, "_find_layers") else None   # the LM knows where its layers are
        for module in [model, *(layers or [])]:
            handles.append(module.register_forward_pre_hook(lambda _module, _args: check()))
    return handles
