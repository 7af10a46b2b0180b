"""kill -9 at every write step: afterwards each file or folder is its old version, intact, or its new one, complete.

Each writer runs in a child process that kills itself at the n-th time it reaches one of fsutil's crash points
(new version written and synced / old folder moved aside / new version renamed in), for every n until a run
finishes; after each crash the test reads what is on disk the way the project's readers do.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from multidraft import fsutil
from tests.crash_runs import crash_runs, forked_crash_runs, run_child
from tests.test_models_loader import fake, home, tiny_hf_folder  # noqa: F401  (fixtures)



# ---------------------------------------------------------------- atomic_path itself


def write_version(path, version, folder):
    if folder:
        with fsutil.atomic_path(path) as tmp:
            tmp.mkdir()
            for i in range(3):
                (tmp / f"part{i}.txt").write_text(f"{version}-{i}")
    else:
        with fsutil.atomic_path(path) as tmp:
            tmp.write_text(version * 1000)


def version_of(path, folder):
    if folder:
        parts = sorted(p.name for p in path.iterdir())
        assert parts == ["part0.txt", "part1.txt", "part2.txt"], parts
        versions = {(path / name).read_text().rsplit("-", 1)[0] for name in parts}
        assert len(versions) == 1, versions          # never a mix of two versions
        return versions.pop()
    text = path.read_text()
    assert set(text) <= {"o", "l", "d", "n", "e", "w"} and text in ("old" * 1000, "new" * 1000)
    return text[:3]


@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
@pytest.mark.parametrize("had_old", [True, False], ids=["replace", "create"])
def test_a_crash_at_any_step_leaves_the_old_version_or_the_new(tmp_path, folder, had_old):
    path = tmp_path / ("entry" if folder else "entry.txt")

    def reset():
        fsutil._remove(path) if os.path.lexists(path) else None
        if had_old:
            write_version(path, "old", folder)
    seen = {}
    for step, _n in forked_crash_runs(lambda: write_version(path, "new", folder), reset=reset):
        fsutil.recover(path)                      # what the readers of cache folders do first
        if not path.exists():
            assert not had_old, f"crash at {step}: the old version is gone and the new one is not there"
            seen[step] = None
        else:
            seen[step] = version_of(path, folder)
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".old")]
    expected = {"atomic.written": "old" if had_old else None, "atomic.renamed": "new"}
    if folder and had_old:
        expected["atomic.aside"] = "old"
    assert seen == expected


def test_kill_9_of_a_real_process_between_the_renames(tmp_path):
    """The same through a fresh interpreter (fsutil alone, no torch): the folder is gone until `recover`."""
    path = tmp_path / "entry"
    write_version(path, "old", True)
    code = f"""
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("fsutil", {str(Path(fsutil.__file__))!r})
fsutil = importlib.util.module_from_spec(spec); spec.loader.exec_module(fsutil)
with fsutil.atomic_path(Path({str(path)!r})) as tmp:
    tmp.mkdir()
    for i in range(3):
        (tmp / f"part{{i}}.txt").write_text(f"new-{{i}}")
"""
    crashes = list(crash_runs(code, steps=["atomic.aside"], reset=lambda: fsutil.recover(path)))
    assert crashes == [("atomic.aside", 1)]
    fsutil.recover(path)
    assert version_of(path, True) == "new"              # the finishing run wrote it
    write_version(path, "old", True)
    done = run_child(code, {fsutil.CRASH_ENV: "atomic.aside"})
    assert done.returncode == -9 and not path.exists()        # the crash window the aside copy covers
    fsutil.recover(path)
    # (a killed writer's .partial temporaries stay until its owner's next sweep: only a live writer knows they
    # are not its own)
    assert version_of(path, True) == "old"
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".partial")] == ["entry"]


def test_the_next_write_recovers_the_aside_copy_first(tmp_path):
    path = tmp_path / "entry"
    write_version(path, "old", True)
    assert list(forked_crash_runs(lambda: write_version(path, "new", True), steps=["atomic.aside"],
                                  max_occurrences=1)) == [("atomic.aside", 1)]
    assert not path.exists()
    write_version(path, "newer", True)                        # recovers the old one, then replaces it
    assert version_of(path, True) == "newer"
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".partial")] == ["entry"]


def test_a_failed_write_keeps_the_old_version_and_leaves_no_temporary(tmp_path):
    for folder in (False, True):
        path = tmp_path / f"x{folder}"
        write_version(path, "old", folder)
        with pytest.raises(RuntimeError):
            with fsutil.atomic_path(path) as tmp:
                tmp.write_text("half")
                raise RuntimeError("stop")
        assert version_of(path, folder) == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["xFalse", "xTrue"]


def test_a_folder_can_replace_a_file_but_a_file_never_a_folder(tmp_path):
    path = tmp_path / "x"
    write_version(path, "old", False)
    write_version(path, "new", True)
    assert version_of(path, True) == "new"
    with pytest.raises(fsutil.OutputPathError, match="existing folder"):   # its files would go with it
        write_version(path, "newer", False)
    assert version_of(path, True) == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["x"]


# ---------------------------------------------------------------- the project's writers


def check_every_crash(write, reset, check, min_crashes=2):
    crashes = 0
    for step, n in forked_crash_runs(write, reset=reset):
        crashes += 1
        check(f"{step}@{n}")
    assert crashes >= min_crashes


def test_suffix_store_save(tmp_path):
    from multidraft.suffix.store import SuffixStore
    path = tmp_path / "store.npz"

    def store_of(tokens):
        store = SuffixStore(1000)
        store.add(np.asarray(tokens, dtype=np.int32))
        return store

    def check(where):
        documents = [list(d) for d in SuffixStore.load(path).documents]
        assert documents in ([list(range(5, 25))], [list(range(100, 400))]), where
    check_every_crash(lambda: store_of(range(100, 400)).save(path), lambda: store_of(range(5, 25)).save(path), check)


def test_ngram_build(tmp_path):
    from multidraft.ngram import NGramModel, build
    path = tmp_path / "corpus.ngram"
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 64, 500).astype(np.uint32) for _ in range(20)]

    def check(where):
        assert NGramModel.load(path).max_order in (3, 4), where
    work = tmp_path / "work"                 # a killed build's counting folder stays there, not in /tmp
    work.mkdir()
    check_every_crash(lambda: build(docs, 64, path, max_order=4, workdir=work),
                      lambda: build([np.arange(10, dtype=np.uint32)], 64, path, max_order=3, workdir=work), check)


def test_pld_plus_calibration_save(tmp_path):
    from multidraft.pldplus import calibration
    path = tmp_path / "calibration.json"
    old, new = {"model": "m", "induction_heads": [[0, 1]]}, {"model": "m", "induction_heads": [[1, 0]], "x": "y" * 9999}

    def check(where):
        assert json.loads(path.read_text()) in (old, new), where
    check_every_crash(lambda: calibration.save(new, path), lambda: calibration.save(old, path), check)


def test_bench_results_rewrite_and_appends(tmp_path):
    from multidraft.eval.results import ResultsFile, read_results
    path = tmp_path / "results.jsonl"
    header = {"kind": "header", "identity": {"model": "m"}, "created": "t", "runs": [{"run": 1}], "methods": [],
              "tasks": ["a"]}

    def reset():
        results = ResultsFile(path)
        path.unlink(missing_ok=True)
        results.start(header)
        for i in range(3):
            results.append({"kind": "row", "i": i})

    def resume():
        results = ResultsFile(path)
        results.start({**header, "runs": [{"run": 2}]}, retry=lambda row: row["i"] == 1)
        results.append({"kind": "row", "i": 9})

    def check(where):
        head, rows = read_results(path)
        expected = [0, 1, 2] if len(head["runs"]) == 1 else [0, 2]        # the rewrite dropped the row to retry
        assert [r["i"] for r in rows] == expected, where
    check_every_crash(resume, reset, check)


def test_model_pull_and_the_manifest_rewrite_of_verify(fake, home):
    """A re-pull (--force) and the manifest rewrite of `models verify` (after a file's time changed), killed at
    every step: the model verifies in full afterwards (the old pull or the new one); the manifest is never missing."""
    import time
    from multidraft.models import loader, model_store
    from tests.test_models_loader import FAKE
    folder = loader.pull(FAKE, progress=False)

    def check(where):
        status = model_store.check_entry(folder, fake.spec.gguf_sha256, full=True)
        assert status.ok, (where, status.reason)
    check_every_crash(lambda: loader.pull(FAKE, progress=False, force=True), None, check, min_crashes=4)

    def touch():
        for path in folder.iterdir():
            os.utime(path, ns=(time.time_ns(), time.time_ns() + 10 ** 10))

    def verify():
        assert model_store.check_entry(folder, fake.spec.gguf_sha256, full=True).ok
    check_every_crash(verify, touch, check)
    assert sorted(p.name for p in home.rglob("*.old")) == []
