"""Python's cyclic garbage collector around model loading and serving, and the C heap after a load.

A model's load allocates hundreds of thousands of long-lived objects (transformers' modules imported, the model's
modules, parameters and hooks), and while the heap grows each full collection walks all of it again: on the 1.5B
(Zen 4, Python 3.11) five full collections took 0.73-0.74 s of a 3.6-3.7 s load. After it, a full collection walks
the ~400,000 objects of the loaded heap (~0.2 s each, two in a 15 s run of generations): a pause in whatever request is
decoding.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc


@contextlib.contextmanager
def collection_paused():
    """No cyclic collection inside the block; the collector's state before it is restored on the way out (an error
    included), and the block's garbage goes in the next collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_loaded_heap() -> None:
    """Keep every object alive now (the loaded models, the imported modules) out of every later collection, so a
    full collection walks only what came after. For a process that keeps its models until it exits (a server, a
    replica): a frozen model in a reference cycle (its modules' bound forwards are) is never freed, so a process
    that loads and drops models must not call it."""
    gc.freeze()


def return_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing). A load that makes
    and frees transient copies (Q3_K's and IQ3_S's Q6_K blocks, one matrix at a time) leaves its freed chunks
    between the kept ones, where glibc keeps them: 164 MB of the 1.5B's Q3_K_M, measured on a Zen 4."""
    try:
        ctypes.CDLL(None).malloc_trim(0)                # the process's own symbols: libc's where it is glibc
    except (OSError, AttributeError, TypeError):    # not glibc (musl, macOS, Windows): nothing to trim
        pass
