"""The test suite's tiny random models, for the dry runs of a preset (`--tiny`, `--model tiny-random`): they live
in tests/ of a source checkout, not in the installed package."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from multidraft.errors import InvalidOptionError

ROOT = Path(__file__).resolve().parents[4]          # src/multidraft/eval/presets/ -> the checkout


def tests_module(name: str):
    """tests.<name> of the source checkout this package runs from."""
    if (ROOT / "tests" / f"{name}.py").is_file() and str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"tests.{name}")
    except ImportError as exc:
        raise InvalidOptionError(f"this dry run needs tests/{name}.py of a multidraft source checkout ({exc}); "
                                 "run it from a clone, or name a real model") from exc
