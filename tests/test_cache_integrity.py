"""A damaged model cache gives one clear line with the repair, never a traceback or garbage text.

Every test runs in a temporary MULTIDRAFT_HOME with the fake registry entry and fake pull of
test_models_loader (a tiny random Llama); ~/.cache/multidraft is never touched. Which check catches what:

| damage (file size unchanged)            | cheap checks (every load, list, pull) | `models verify` (sha256) |
|-----------------------------------------|---------------------------------------|--------------------------|
| garbled safetensors header              | header parse                          | yes                      |
| invalid config.json                     | JSON parse                            | yes                      |
| invalid tokenizer.json                  | first/last byte + the tokenizer load  | yes                      |
| weight bytes overwritten, mtime changed | re-hash of the changed file           | yes                      |
| weight bytes overwritten, mtime kept    | no (garbage text would follow)        | yes                      |
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multidraft.errors import CorruptCacheError
from multidraft.models import integrity, loader, model_store
from tests.installed import missing
from tests.test_models_loader import FAKE, fake, home, models_cli, tiny_hf_folder  # noqa: F401  (fixtures)

HINT = f"multidraft models pull {FAKE} --force"


def overwrite(path: Path, offset: int, data: bytes, keep_mtime: bool = False) -> None:
    """Overwrite bytes in place (same size). With keep_mtime the modification time is put back, as a copy
    tool preserving times or a bit flip on disk would leave it; otherwise it is moved clearly forward."""
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10 ** 10))
    assert path.stat().st_size == before.st_size


def garble_header(folder):
    overwrite(folder / "model.safetensors", 8, b"#GARBLED#")


def break_config(folder):
    overwrite(folder / "config.json", 0, b"X")


def break_tokenizer(folder):
    overwrite(folder / "tokenizer.json", 0, b"X")


def break_tokenizer_middle(folder):
    """Valid first and last bytes, broken inside: the tokenizer load itself fails, in one line."""
    path = folder / "tokenizer.json"
    overwrite(path, path.stat().st_size // 2, b"\x00\x00\x00")


def overwrite_weights(folder):
    path = folder / "model.safetensors"
    overwrite(path, path.stat().st_size - 64, b"\xff" * 64)


CHEAP = {"garbled safetensors header": (garble_header, "safetensors header"),
         "invalid config.json": (break_config, "config.json is not valid JSON"),
         "invalid tokenizer.json": (break_tokenizer, "tokenizer.json is not valid JSON"),
         "weights overwritten": (overwrite_weights, "model.safetensors fails its sha256 check")}


@pytest.mark.parametrize("damage", sorted(CHEAP))
def test_cheap_checks_catch_damage_at_load_list_and_pull(fake, home, damage, capsys):
    corrupt, reason = CHEAP[damage]
    folder = loader.pull(FAKE, progress=False)
    corrupt(folder)
    for action in (lambda: loader.resolve(FAKE), lambda: loader.load_hf_model(FAKE)):
        with pytest.raises(CorruptCacheError) as error:
            action()
        assert reason in str(error.value) and HINT in str(error.value) and "\n" not in str(error.value)
    assert models_cli(["models", "list"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith(FAKE))
    assert "corrupt" in line and "pulled (" not in line and HINT in line
    assert models_cli(["models", "verify", FAKE]) == 2
    assert f"{FAKE}: FAILED" in capsys.readouterr().out
    assert models_cli(["models", "pull", FAKE, "--no-progress"]) == 0      # repairs without --force
    out = capsys.readouterr().out
    assert "already pulled" not in out and f"{FAKE}: pulled in" in out
    assert len(fake.conversions) == 2 and model_store.alias_status(FAKE, full=True).ok
    model, _, _ = loader.load_hf_model(FAKE)
    assert model is not None


def test_a_large_tokenizer_broken_inside_fails_at_load_in_one_line(fake, home, monkeypatch):
    """JSON files over 1 MiB (Qwen's tokenizer.json) only get a first/last byte check; damage inside them is
    caught by the re-hash of a changed file, and in a folder without a manifest by the tokenizer load itself."""
    monkeypatch.setattr(integrity, "_PARSE_LIMIT", 16)      # make the tiny tokenizer.json count as large
    folder = loader.pull(FAKE, progress=False)
    break_tokenizer_middle(folder)
    assert integrity.folder_problem(folder) is None
    status = model_store.alias_status(FAKE)
    assert status.state == "corrupt" and "tokenizer.json fails its sha256 check" in status.reason
    with pytest.raises(CorruptCacheError, match="download or save the model folder again") as error:
        loader.load_hf_model(str(folder))                   # by path: no manifest consulted
    assert "\n" not in str(error.value)


def test_weights_overwritten_with_the_time_kept_are_found_by_verify_only(fake, home, capsys):
    folder = loader.pull(FAKE, progress=False)
    path = folder / "model.safetensors"
    overwrite(path, path.stat().st_size - 64, b"\xff" * 64, keep_mtime=True)
    assert model_store.alias_status(FAKE).ok                    # what the cheap checks cannot see
    assert models_cli(["models", "verify", FAKE]) == 2
    out = capsys.readouterr().out.strip()
    assert out == (f"{FAKE}: FAILED (model.safetensors fails its sha256 check); run `{HINT}` to fetch and "
                   "convert it again")
    assert models_cli(["models", "pull", FAKE, "--no-progress"]) == 0
    assert "already pulled" in capsys.readouterr().out     # without --force the cheap checks see nothing...
    assert models_cli(["models", "pull", FAKE, "--force", "--no-progress"]) == 0   # ...--force repairs it
    assert models_cli(["models", "verify", FAKE]) == 0


def test_verify_every_pulled_model(fake, home, capsys):
    assert models_cli(["models", "verify"]) == 0
    assert "no pulled models" in capsys.readouterr().out
    loader.pull(FAKE, progress=False)
    assert models_cli(["models", "verify"]) == 0
    assert capsys.readouterr().out.startswith(f"{FAKE}: OK (")


def test_the_manifest_records_size_sha256_and_time_of_every_file(fake, home):
    folder = loader.pull(FAKE, progress=False)
    marker = json.loads((folder / model_store.MARKER).read_text())
    assert set(marker["files"]) == {p.name for p in folder.iterdir() if p.is_file() and p.name != model_store.MARKER}
    for name, entry in marker["files"].items():
        stat = (folder / name).stat()
        assert entry["size"] == stat.st_size and len(entry["sha256"]) == 64 and entry["mtime_ns"] == stat.st_mtime_ns


def test_a_manifest_from_before_times_were_recorded_still_loads_and_verify_adds_them(fake, home):
    """Caches pulled before this change have sizes and sha256 but no mtime_ns: they load as before (sizes and
    parse checks), and the first successful verify records the times."""
    folder = loader.pull(FAKE, progress=False)
    marker = json.loads((folder / model_store.MARKER).read_text())
    for entry in marker["files"].values():
        del entry["mtime_ns"]
    (folder / model_store.MARKER).write_text(json.dumps(marker))
    assert model_store.alias_status(FAKE).ok
    assert "mtime_ns" not in json.loads((folder / model_store.MARKER).read_text())["files"]["config.json"]
    assert model_store.alias_status(FAKE, full=True).ok
    assert "mtime_ns" in json.loads((folder / model_store.MARKER).read_text())["files"]["config.json"]


def test_a_touched_but_intact_file_is_rehashed_once(fake, home, monkeypatch):
    folder = loader.pull(FAKE, progress=False)
    path = folder / "model.safetensors"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 10))
    hashed = []
    real = model_store.sha256_file
    monkeypatch.setattr(model_store, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    assert model_store.alias_status(FAKE).ok and hashed == ["model.safetensors"]
    assert model_store.alias_status(FAKE).ok and hashed == ["model.safetensors"]   # the new time was recorded


@pytest.mark.parametrize("damage", [garble_header, break_config])
def test_a_local_folder_with_a_damaged_file_says_so(tiny_hf_folder, tmp_path, home, damage):
    import shutil
    folder = tmp_path / "copy"
    shutil.copytree(tiny_hf_folder, folder)
    damage(folder)
    with pytest.raises(CorruptCacheError, match="download or save the model folder again"):
        loader.load_hf_model(str(folder))


def test_safetensors_header_checks(tmp_path):
    import struct
    path = tmp_path / "x.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    assert integrity.safetensors_problem(path) is None
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)          # data cut short
    assert "outside the file" in integrity.safetensors_problem(path)
    path.write_bytes(struct.pack("<Q", 10 ** 9) + header + b"\0" * 16)              # absurd header length
    assert "damaged" in integrity.safetensors_problem(path)
    path.write_bytes(b"\1\2")
    assert "too short" in integrity.safetensors_problem(path)


def test_the_real_smollm_cache_passes_the_cheap_checks():
    """The cache every test uses (pulled before manifests had times) still counts as pulled; read-only here."""
    folder = Path(os.path.expanduser("~/.cache/multidraft/models/smollm2-135m"))
    if not folder.is_dir():
        missing(f"smollm2-135m is not pulled (no {folder})", "models-data")
    assert integrity.folder_problem(folder) is None


def test_cli_load_of_a_damaged_cache_prints_one_line(fake, home, tmp_path):
    """End to end through a real `multidraft generate` process: exit 2, one line, the repair command."""
    folder = loader.pull(FAKE, progress=False)
    break_config(folder)
    env = {**os.environ, "MULTIDRAFT_HOME": str(home)}
    # The fake alias lives in this process's registry only, so the subprocess loads the folder by path.
    result = subprocess.run([sys.executable, "-m", "multidraft.cli", "generate", "--model", str(folder), "hello"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "config.json is not valid JSON" in result.stderr
