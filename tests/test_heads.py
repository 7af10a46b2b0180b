"""Blockwise heads: architecture, targets, training (a few steps, resumable), save/load checks (bpd.md §8 28-29)."""

import numpy as np
import pytest
import torch

from multidraft.errors import CorruptCacheError, InvalidOptionError, ModelNotFoundError, TokenizerMismatchError
from multidraft.blockwise import BlockwiseHeads, load_heads, save_heads
from multidraft.blockwise.heads_data import build_hidden_cache, load_hidden_cache
from multidraft.blockwise.heads_train import IGNORE, TrainConfig, make_targets, train_heads
from tests.tiny_models import WORDS, make_tiny_lm


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path / "home"))
    return tmp_path


def test_zero_w2_heads_equal_head_one(tiny_llama):
    heads = BlockwiseHeads(4, tiny_llama.hidden_size, 16).bind(tiny_llama)
    out = tiny_llama.forward(tiny_llama.new_cache(), [1, 5, 9, 12], hidden_layer=tiny_llama.num_layers)
    logits = heads.logits(out.hidden)
    assert logits.shape == (4, 3, tiny_llama.vocab_size)
    for i in range(3):
        torch.testing.assert_close(logits[:, i], out.logits, atol=1e-4, rtol=1e-4)


def test_shortlist_columns(tiny_llama):
    shortlist = torch.tensor([3, 7, 11, 40])
    heads = BlockwiseHeads(3, tiny_llama.hidden_size, 16, shortlist).bind(tiny_llama)
    out = tiny_llama.forward(tiny_llama.new_cache(), [1, 5], hidden_layer=tiny_llama.num_layers)
    torch.testing.assert_close(heads.logits(out.hidden)[:, 0], out.logits[:, shortlist], atol=1e-4, rtol=1e-4)
    assert heads.token_ids.tolist() == [3, 7, 11, 40]


def test_targets_are_shifted_by_head_offset():
    data = {"tokens": np.array([10, 11, 12, 13, 20, 21]), "argmax": np.array([31, 32, 33, 34, 41, 42]),
            "seq_ids": np.array([0, 0, 0, 0, 1, 1])}
    corpus = make_targets(data, 3, "corpus")      # head i at row r -> token r+i, same sequence only
    assert corpus[:, 0].tolist() == [12, 13, IGNORE, IGNORE, IGNORE, IGNORE]
    assert corpus[:, 1].tolist() == [13, IGNORE, IGNORE, IGNORE, IGNORE, IGNORE]
    base = make_targets(data, 3, "base")          # the base's prediction of position r+i = argmax[r+i-1]
    assert base[:, 0].tolist() == [32, 33, 34, IGNORE, 42, IGNORE]
    assert base[:, 1].tolist() == [33, 34, IGNORE, IGNORE, IGNORE, IGNORE]


def _corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        (folder / f"doc{i}.txt").write_text(" ".join(rng.choice(WORDS, 80)))
    return str(folder)


def test_train_few_steps_resume_and_load(home, tiny_llama):
    folder = build_hidden_cache(tiny_llama, [_corpus(home)], num_tokens=400, seq_len=64, log=lambda *a: None)
    data = load_hidden_cache(folder)
    assert data["hidden"].shape == (len(data["tokens"]), tiny_llama.hidden_size) and 0 < len(data["tokens"]) <= 400
    out = home / "heads" / "tiny.pt"
    config = TrainConfig(num_heads=3, shortlist_size=32, batch_size=16, minutes=0, max_steps=3, eval_seconds=0)
    history = train_heads(tiny_llama, data, config, out, log=lambda *a: None)
    assert history["steps"] == 3 and out.exists()
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    logs = []
    config.max_steps = 5
    history = train_heads(tiny_llama, data, config, out, log=logs.append)
    assert history["steps"] == 5 and any("resumed" in line and "step 3" in line for line in logs)
    heads = load_heads(tiny_llama, out)
    assert heads.num_heads == 3 and heads.meta["steps"] == 5 and len(heads.token_ids) == 32


def test_bad_heads_files(home, tiny_llama):
    path = home / "h.pt"
    save_heads(BlockwiseHeads(3, tiny_llama.hidden_size, 16), path, tiny_llama)
    other = make_tiny_lm("llama", seed=7)
    with pytest.raises(InvalidOptionError, match="trained for base model"):
        load_heads(other, path)
    with pytest.raises(InvalidOptionError, match="hold only 3 heads"):
        load_heads(tiny_llama, path, num_heads=5)
    blob = torch.load(path, weights_only=True)
    blob["meta"]["tokenizer_fingerprint"] = "vocab-somethingelse"
    torch.save(blob, home / "tok.pt")
    with pytest.raises(TokenizerMismatchError):
        load_heads(tiny_llama, home / "tok.pt")
    (home / "broken.pt").write_bytes(b"not a torch file")
    with pytest.raises(CorruptCacheError):
        load_heads(tiny_llama, home / "broken.pt")
    with pytest.raises(ModelNotFoundError, match="heads train"):
        load_heads(other)                     # nothing in the cache for this model
    with pytest.raises(InvalidOptionError):
        TrainConfig(num_heads=1).validate()


def test_cli_heads_list(home, capsys):
    from multidraft.cli import main

    assert main(["heads", "list"]) == 0
    assert "no heads" in capsys.readouterr().out
