"""Where multidraft keeps models, data and other cached artifacts."""

import os
from pathlib import Path


def home() -> Path:
    """The cache root: $MULTIDRAFT_HOME, or ~/.cache/multidraft."""
    root = os.environ.get("MULTIDRAFT_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "multidraft")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def subdir(name: str) -> Path:
    """A folder under the cache root (models, data, ngram, heads, ...), created if missing."""
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
