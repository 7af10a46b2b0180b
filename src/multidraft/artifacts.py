"""Loaded artifacts (draft and rescoring models, n-gram files, trained heads) owned by whoever runs requests.

The server, a bench run or one `generate` call owns an `Artifacts`: what its resolvers load is kept there, and
goes when the owner goes. No module keeps loaded objects in a global, and nothing is keyed by `id(...)` (an id is
reused once its object is freed): what belongs to one target model is kept in a weak mapping keyed by the model
itself, so it disappears with the model.

    artifacts = multidraft.Artifacts()        # reuse the draft model loaded by alias across calls
    for prompt in prompts:
        multidraft.generate(lm, prompt, method="speculative", draft_model="qwen2.5-coder-0.5b", artifacts=artifacts)
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable, Optional


class Artifacts:
    def __init__(self):
        self._shared: dict[Hashable, Any] = {}
        self._per_target: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()

    def get(self, key: Hashable, make: Callable[[], Any], target: Optional[Any] = None) -> Any:
        """The object stored under `key` (for `target` when given), made by `make()` the first time."""
        store = self._shared if target is None else self._per_target.setdefault(target, {})
        if key not in store:
            store[key] = make()
        return store[key]

    def drop(self, kind: str) -> None:
        """Forget every shared object whose key starts with `kind` (e.g. keep one draft model alive at a time)."""
        for key in [k for k in self._shared if isinstance(k, tuple) and k and k[0] == kind]:
            del self._shared[key]

    def __len__(self) -> int:
        return len(self._shared) + sum(len(v) for v in self._per_target.values())


def artifacts_or_new(artifacts: Optional[Artifacts]) -> Artifacts:
    """The caller's artifacts, or a fresh set that lives as long as this one call."""
    return artifacts if artifacts is not None else Artifacts()
