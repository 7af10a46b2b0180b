"""Loaded artifacts are owned by the caller (issue #30): a `multidraft.Artifacts` per server, bench run or generate
call, never a module global, and nothing keyed by id() (a reused id would hand out another model's objects)."""

import gc
import re
from pathlib import Path

import multidraft
from multidraft.artifacts import Artifacts
from multidraft.models.draft_models import resolve_draft_model
from multidraft.ngram.resolve import resolve_ngram

SRC = Path(__file__).resolve().parents[1] / "src" / "multidraft"


class Target:
    pass


def test_per_target_entries_go_with_their_model():
    artifacts, target = Artifacts(), Target()
    made = []
    first = artifacts.get(("heads", "x"), lambda: made.append(1) or object(), target=target)
    assert artifacts.get(("heads", "x"), lambda: made.append(1) or object(), target=target) is first
    assert made == [1] and len(artifacts) == 1
    other = Target()
    assert artifacts.get(("heads", "x"), object, target=other) is not first     # another model: its own entry
    del target, other, first
    gc.collect()
    assert len(artifacts) == 0


def test_a_draft_model_loads_once_per_owner(tiny_folder):
    target = multidraft.load_model(tiny_folder)
    mine, theirs = Artifacts(), Artifacts()
    draft = resolve_draft_model(tiny_folder, target, "speculative", mine)
    assert resolve_draft_model(tiny_folder, target, "speculative", mine) is draft
    assert resolve_draft_model(tiny_folder, target, "speculative", theirs) is not draft     # nothing shared
    assert resolve_draft_model(draft, target, "speculative") is draft                       # an LM passes through


def test_an_ngram_file_loads_once_per_owner(tiny_lm, dense_ngram_path):
    artifacts = Artifacts()
    ngram = resolve_ngram(tiny_lm, dense_ngram_path, artifacts)
    assert resolve_ngram(tiny_lm, dense_ngram_path, artifacts) is ngram
    assert resolve_ngram(tiny_lm, dense_ngram_path) is not ngram


def test_no_module_keeps_loaded_objects_or_keys_by_id():
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"^_(loaded\w*|LOADED|checked)\s*(:\s*dict|=\s*\{)", text, re.MULTILINE) or re.search(r"\(\s*id\(lm\)", text) \
                or re.search(r"\bid\(lm\)\s*[,)]", text):
            offenders.append(str(path.relative_to(SRC)))
    assert offenders == []
