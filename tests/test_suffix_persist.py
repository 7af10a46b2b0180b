"""`multidraft serve --suffix-store-path`: the suffix stores survive a restart, a damaged file stops the start, and
/metrics shows the stores' memory."""

import hashlib
import re

import httpx
import pytest

from multidraft.errors import CorruptCacheError, InvalidOptionError, TokenizerMismatchError
from multidraft.server import ServerConfig, ServerThread, create_app
from multidraft.server.service import GenerationService
from multidraft.suffix import SuffixStore
from tests.tiny_models import make_tiny_lm

PROMPT = "one two three four one two three four one two"


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("qwen2", seed=4)


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def test_stores_survive_a_restart(lm, tmp_path):
    config = ServerConfig(max_tokens=16, suffix_store_tokens=5000, suffix_store_path=str(tmp_path / "stores")).validate()
    service = GenerationService(lm, config)
    store = service.suffix_stores.for_key(None)
    store.add(lm.encode(PROMPT))
    store.add([5, 6, 7, 8])
    service.close()                          # shutdown writes the changed stores
    assert sorted(p.name for p in (tmp_path / "stores").iterdir()) == ["anonymous.npz"]
    again = GenerationService(lm, config)
    loaded = again.suffix_stores.for_key(None)
    assert [d.tolist() for d in loaded.documents] == [d.tolist() for d in store.documents]
    assert loaded.automaton.match([5, 6, 7]) == store.automaton.match([5, 6, 7]) and loaded.max_tokens == 5000
    again.close()


def test_isolated_stores_survive_a_restart_under_their_digests(lm, tmp_path):
    config = ServerConfig(suffix_isolation=True, api_key=("key-a", "key-b"), suffix_store_path=str(tmp_path)).validate()
    service = GenerationService(lm, config)
    for key, tokens in (("key-a", [1, 2, 3]), ("key-b", [4, 5, 6, 7])):
        service.suffix_stores.for_key(key).add(tokens)
    service.close()
    digests = {hashlib.sha256(k.encode()).hexdigest() for k in ("key-a", "key-b")}
    assert {p.name for p in tmp_path.iterdir()} == {f"{d}.npz" for d in digests}      # no key in the clear
    again = GenerationService(lm, config)
    assert again.suffix_stores.for_key("key-b").documents[0].tolist() == [4, 5, 6, 7]
    assert again.suffix_stores.for_key("key-a").num_tokens == 3
    again.close()


def test_served_requests_are_saved_and_drafted_from_after_a_restart(lm, tmp_path):
    config = ServerConfig(max_tokens=16, suffix_store_path=str(tmp_path))
    body = {"prompt": PROMPT, "max_tokens": 8, "method": "suffix"}
    app = create_app(lm, config)
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        before = metric(client.get("/metrics").text, "multidraft:suffix_store_bytes")
        assert client.post("/v1/completions", json=body).status_code == 200
        page = client.get("/metrics").text
        assert metric(page, "multidraft:suffix_store_bytes") > before
        tokens = metric(page, "multidraft:suffix_store_tokens")
        assert tokens == app.state.suffix_stores.for_key(None).num_tokens > 0
    app.state.service.close()
    app = create_app(lm, config)
    assert app.state.suffix_stores.for_key(None).num_tokens == tokens
    app.state.service.close()


def test_a_damaged_or_foreign_store_stops_the_start(lm, tmp_path):
    (tmp_path / "anonymous.npz").write_bytes(b"PK\x03\x04 not a zip at all")
    config = ServerConfig(suffix_store_path=str(tmp_path)).validate()
    with pytest.raises(CorruptCacheError, match="anonymous.npz"):
        GenerationService(lm, config)
    foreign = SuffixStore()
    foreign.fingerprint = "vocab-of-another-tokenizer"
    foreign.add([1, 2, 3])
    foreign.save(tmp_path / "anonymous.npz")
    with pytest.raises(TokenizerMismatchError, match="another tokenizer"):
        GenerationService(lm, config)
    (tmp_path / "anonymous.npz").unlink()
    (tmp_path / "anonymous.npz").mkdir()          # not a file: ignored, nothing to read
    GenerationService(lm, config).close()


def test_store_path_must_be_a_folder(lm, tmp_path):
    file = tmp_path / "stores.npz"
    file.write_bytes(b"")
    with pytest.raises(InvalidOptionError, match="is a file"):
        GenerationService(lm, ServerConfig(suffix_store_path=str(file)).validate())
    with pytest.raises(InvalidOptionError, match="folder path"):
        ServerConfig(suffix_store_path="  ").validate()


def test_serve_flag_sets_the_path(tmp_path):
    import argparse

    from multidraft.server import cli
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--suffix-store-path", str(tmp_path)])
    assert cli.build_config(args).suffix_store_path == str(tmp_path)


def test_a_save_killed_mid_write_leaves_nothing_after_the_next_start(lm, tmp_path):
    """Issue 46 item 3: a save killed (kill -9) after writing its temporary `.anonymous.npz.*.partial/` left that
    folder for good; the next start removes it, as it puts back or removes `.old` copies. A live writer's
    temporary (held with a lock) is kept."""
    from multidraft import fsutil
    from tests.crash_runs import forked_crash_runs

    folder = tmp_path / "stores"
    config = ServerConfig(max_tokens=16, suffix_store_path=str(folder)).validate()
    store = SuffixStore()
    store.add(lm.encode(PROMPT))
    crashes = list(forked_crash_runs(lambda: store.save(folder / "anonymous.npz"), steps=["atomic.written"],
                                     max_occurrences=1))
    assert crashes == [("atomic.written", 1)]
    assert [p.name for p in folder.iterdir() if p.name.endswith(".partial")], "the crash left no temporary"
    with fsutil.atomic_path(folder / "other.npz") as live:       # a live writer's temporary, mid-write
        live.write_bytes(b"x")
        service = GenerationService(lm, config)
        service.close()
        assert live.parent.is_dir()
        left = sorted(p.name for p in folder.iterdir())
        assert left == [live.parent.name], left
    assert sorted(p.name for p in folder.iterdir()) == ["other.npz"]
