"""The decoding methods `generate` knows, with their options, defaults and whether they are lossless.

A speculative method is a drafter factory plus a verifier choice; all of them run in the one loop of
`multidraft.decoders.speculative`. Other issues add methods by calling `register`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from multidraft.errors import InvalidOptionError, UnknownMethodError


@dataclass
class Method:
    name: str
    lossless: bool
    description: str
    options: dict[str, Any] = field(default_factory=dict)     # option name -> default
    # For speculative methods: build the drafter (and optionally a verifier) from (lm, sampler, options).
    make_drafter: Optional[Callable] = None
    make_verifier: Optional[Callable] = None
    # For methods with their own decoder: run(lm, prompt_ids, sampler, output, stats, options) -> drafts or None.
    run: Optional[Callable] = None
    # check_options(options) raises InvalidOptionError for values that are wrong whatever the model (types,
    # ranges), so the CLI, the bench and the server refuse them before loading a model or running anything.
    check_options: Optional[Callable[[dict], None]] = None

    def resolve_options(self, given: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            valid = ", ".join(sorted(self.options)) or "none"
            raise InvalidOptionError(f"method {self.name!r} has no option {', '.join(map(repr, unknown))}; "
                                     f"its options are: {valid}")
        options = {**self.options, **given}
        if self.check_options is not None:
            try:
                self.check_options(options)
            except InvalidOptionError as exc:     # say which method, for the bench's METHOD.NAME=VALUE options
                raise type(exc)(f"method {self.name!r}: {exc}") from None
        return options


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    _load_builtin_methods()
    if name not in METHODS:
        raise UnknownMethodError(f"unknown method {name!r}; choose one of: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def available_methods() -> dict[str, Method]:
    _load_builtin_methods()
    return dict(METHODS)


# Modules that register methods when imported; a module not written yet is skipped.
_METHOD_MODULES = [
    "multidraft.decoders.builtin_methods",
    "multidraft.drafters.pld_plus",
    "multidraft.drafters.draft_model",
    "multidraft.decoders.superposed",
    "multidraft.drafters.blockwise",
]
_loaded = False


def _load_builtin_methods() -> None:
    global _loaded
    if _loaded:
        return
    import importlib
    for name in _METHOD_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    _loaded = True
