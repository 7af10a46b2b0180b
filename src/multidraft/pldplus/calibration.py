"""The stored PLD+ calibration (what `multidraft pld-plus calibrate` writes) and the per-model defaults read from it.

Split from `induction` (which decodes to calibrate, through `multidraft.api`) so the drafter can read its defaults
without importing the decoding entry point: that import closed a cycle api -> methods -> drafter -> heads -> api.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Optional

from multidraft import paths
from multidraft.errors import CorruptCacheError, InvalidOptionError
from multidraft.fsutil import atomic_path


def cache_file(model_name: str) -> Path:
    return paths.subdir("pldplus") / f"{_safe(model_name)}.json"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def save(record: dict, path: Optional[Path] = None) -> Path:
    path = Path(path) if path else cache_file(record["model"])
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=1))
    return path


# Where the shipped calibrations live in the package ("heads" before format 2: renamed, as "heads" elsewhere
# means BPD's trained prediction heads).
SHIPPED_DIR = "calibrations"
INDUCTION_KEYS = ("induction_heads", "heads")      # format 2, format 1


def load_record(model_name: str) -> Optional[dict]:
    """The calibration of a model: the cache first, then the shipped package data; None if neither has one.

    Records of either format load; the induction heads come back as (layer, head) pairs under "induction_heads".
    """
    candidates = [cache_file(model_name)]
    shipped = resources.files("multidraft.pldplus") / SHIPPED_DIR / f"{_safe(model_name)}.json"
    for path in candidates + [shipped]:
        try:
            text = path.read_text()
        except (FileNotFoundError, OSError):
            continue
        try:
            record = json.loads(text)
            key = next(k for k in INDUCTION_KEYS if k in record)
            record["induction_heads"] = [(int(l), int(g)) for l, g, *_ in record.pop(key)]
        except StopIteration:
            raise CorruptCacheError(f"{path} lists no induction heads; rerun `multidraft pld-plus calibrate --model "
                                    f"{model_name}`") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptCacheError(f"{path} is not a valid PLD+ calibration ({exc}); "
                                    f"rerun `multidraft pld-plus calibrate --model {model_name}`") from None
        record["source"] = str(path)
        return record
    return None


def default_heads(lm, num_heads: int = 50) -> list[tuple[int, int]]:
    record = load_record(lm.name)
    if record is None or not record["induction_heads"]:
        raise InvalidOptionError(
            f"no induction heads known for {lm.name}; run `multidraft pld-plus calibrate --model {lm.name}` "
            "or pass heads=[(layer, head), ...]")
    if (record.get("num_layers"), record.get("num_heads")) not in ((lm.num_layers, lm.num_heads), (None, None)):
        raise InvalidOptionError(f"the PLD+ calibration at {record['source']} is for a different architecture; "
                                 f"rerun `multidraft pld-plus calibrate --model {lm.name}`")
    return record["induction_heads"][:num_heads]


def default_layer(lm) -> int:
    """Hidden layer for PLD+(h): the calibrated sweep's best, else ~9/32 of the depth (the paper's l=9 of 32)."""
    record = load_record(lm.name)
    if record is not None and record.get("layer") is not None:
        return int(record["layer"])
    return max(1, round(lm.num_layers * 9 / 32))
