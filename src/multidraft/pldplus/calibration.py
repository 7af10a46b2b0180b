"""The stored PLD+ calibration (what `multidraft pld-plus calibrate` writes), the per-model defaults read from it, and
the one resolver that turns `method="pld_plus"`'s options into what the drafter captures (`resolve_options`).

PLD+'s "induction heads" are the target model's own attention heads (not BPD's trained prediction heads, which
multidraft calls "heads"). Split from `induction` (which decodes to calibrate, through `multidraft.api`) so the
method wiring can read the defaults without importing the decoding entry point (a cycle api -> methods -> api).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Optional

from multidraft import paths, validation
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


def default_induction_heads(lm, count: int = 50) -> list[tuple[int, int]]:
    """The calibrated top `count` induction heads of `lm`, best first, as (layer, head) pairs."""
    record = load_record(lm.name)
    if record is None or not record["induction_heads"]:
        raise InvalidOptionError(
            f"no induction heads known for {lm.name}; run `multidraft pld-plus calibrate --model {lm.name}` "
            "or pass induction_heads=[(layer, head), ...]")
    if (record.get("num_layers"), record.get("num_heads")) not in ((lm.num_layers, lm.num_heads), (None, None)):
        raise InvalidOptionError(f"the PLD+ calibration at {record['source']} is for a different architecture; "
                                 f"rerun `multidraft pld-plus calibrate --model {lm.name}`")
    return record["induction_heads"][:count]


def default_layer(lm) -> int:
    """Hidden layer for PLD+(h): the calibrated sweep's best, else ~9/32 of the depth (the paper's l=9 of 32)."""
    record = load_record(lm.name)
    if record is not None and record.get("layer") is not None:
        return int(record["layer"])
    return max(1, round(lm.num_layers * 9 / 32))


HEAD_SETS = "'selected', 'all' or 'layer:<l>'"


def check_options(options: dict) -> None:
    """The checks of the calibration's own options that need no model."""
    validation.positive_int("num_induction_heads", options["num_induction_heads"])
    head_set = options["induction_head_set"]
    if not isinstance(head_set, str) or not (head_set in ("selected", "all") or head_set.startswith("layer:")):
        raise InvalidOptionError(f"induction_head_set must be {HEAD_SETS}, got {head_set!r:.80}")


def resolve_options(lm, options: dict) -> dict:
    """pld_plus's options as `PLDPlusDrafter` takes them: `layer` (rank_by="hidden") and `induction_heads`
    (rank_by="attention") filled in from the stored calibration when unset; `num_induction_heads` and
    `induction_head_set` are consumed here. The drafter itself reads no file."""
    options = dict(options)
    count = options.pop("num_induction_heads")
    head_set = options.pop("induction_head_set")
    if options["rank_by"] == "hidden" and options["layer"] is None:
        options["layer"] = default_layer(lm)
    elif options["rank_by"] == "attention":
        options["induction_heads"] = _induction_head_pairs(lm, options["induction_heads"], count, head_set)
    return options


def _induction_head_pairs(lm, explicit, count: int, head_set: str) -> list:
    """Every head (head_set="all"), every head of one layer ("layer:<l>"), else the explicit pairs or, when none
    are given, the calibrated top `count`."""
    if head_set == "all":
        return [(l, g) for l in range(lm.num_layers) for g in range(lm.num_heads)]
    if isinstance(head_set, str) and head_set.startswith("layer:"):
        try:
            layer = int(head_set.split(":", 1)[1])
        except ValueError:
            layer = -1
        if not 0 <= layer < lm.num_layers:
            raise InvalidOptionError(f"induction_head_set {head_set!r}: {lm.name} has attention layers "
                                     f"0..{lm.num_layers - 1}")
        return [(layer, g) for g in range(lm.num_heads)]
    if head_set != "selected":
        raise InvalidOptionError(f"induction_head_set must be {HEAD_SETS}, got {head_set!r}")
    return default_induction_heads(lm, count) if explicit is None else explicit
