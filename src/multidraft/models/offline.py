"""Keep the HF libraries offline: nothing in multidraft downloads at run time.

Its own module because both the loader and the GGUF conversion in pulling need it, and the loader imports pulling.
"""

from __future__ import annotations

import contextlib
import os

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
for _var in OFFLINE_VARS:
    os.environ.setdefault(_var, "1")


@contextlib.contextmanager
def offline_env():
    """Force the HF libraries offline for the duration of the block."""
    saved = {var: os.environ.get(var) for var in OFFLINE_VARS}
    os.environ.update({var: "1" for var in OFFLINE_VARS})
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
