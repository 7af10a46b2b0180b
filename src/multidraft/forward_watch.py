"""A check run inside a model's forwards: before the model's forward and before each of its decoder layers, so that
a stop it raises (a deadline, a cancelled request) lands within one layer, even inside a long prefill or a wide
beam step. The one-at-a-time server watches every model it serves (server/worker.py); the engine watches its model
while a request that cannot share a forward runs (multidraft.engine).

Two kinds of forwards carry the checks. HF's modules get forward pre-hooks (the model's and each decoder layer's). A
runner with its own layer loop (the native forward) calls no HF module, so it calls the LM's `WatchPoints` itself,
at the same two places; `watch_forwards` registers with both, and each forward fires exactly one of them."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

Check = Callable[[], None]


class WatchPoints:
    """The checks a runner with its own layer loop calls: `before_forward()` once per forward, `before_layer()`
    before each decoder layer. Owned by the LM, so that they outlive a change of runner."""

    def __init__(self):
        self._forward: list[Check] = []
        self._layer: list[Check] = []

    def add(self, before_forward: Optional[Check], before_layer: Optional[Check]) -> list:
        handles = []
        for checks, check in ((self._forward, before_forward), (self._layer, before_layer)):
            if check is not None:
                checks.append(check)
                handles.append(_Registered(checks, check))
        return handles

    def before_forward(self) -> None:
        for check in tuple(self._forward):
            check()

    def before_layer(self) -> None:
        for check in tuple(self._layer):
            check()

    @property
    def checks_layers(self) -> bool:
        """Whether a check runs before each layer (else a runner may run all its layers in one call)."""
        return bool(self._layer)


class _Registered:
    """A handle like torch's hook handles: remove() unregisters the check."""

    def __init__(self, checks: list, check: Check):
        self._checks, self._check = checks, check

    def remove(self) -> None:
        if self._check in self._checks:
            self._checks.remove(self._check)


def watch_forwards(lms: Iterable, before_forward: Optional[Check] = None,
                   before_layer: Optional[Check] = None) -> list:
    """Call `before_forward()` before every forward of these models and `before_layer()` before each of their decoder
    layers, whichever runner runs them; returns the handles (remove() them to undo). Models without torch modules
    (e.g. test doubles) are skipped."""
    handles = []
    for lm in lms:
        points = getattr(lm, "forward_watch", None)
        if isinstance(points, WatchPoints):
            handles += points.add(before_forward, before_layer)
        model = getattr(lm, "model", None)
        if model is None or not hasattr(model, "register_forward_pre_hook"):
            continue
        layers = lm._find_layers() if hasattr(lm, "_find_layers") else None   # the LM knows where its layers are
        hooked = [(model, before_forward)] + [(layer, before_layer) for layer in layers or []]
        handles += [module.register_forward_pre_hook(_as_hook(check)) for module, check in hooked if check is not None]
    return handles


def watch_layers(lms: Iterable, check: Check) -> list:
    """Call `check()` before every forward of these models and of each of their decoder layers."""
    return watch_forwards(lms, check, check)


def _as_hook(check: Check):
    return lambda _module, _args: check()
