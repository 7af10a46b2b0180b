"""Bad input to method="superposed": each mistake gets a MultidraftError that says what to do."""

import numpy as np
import pytest
import torch

import multidraft
from multidraft.superposed.ngram_mixture import interpolate
from multidraft.errors import DataNotFoundError, InvalidOptionError, TokenizerMismatchError
from multidraft.models.runner import LM
from multidraft.ngram import build
from tests.tiny_models import make_tiny_hf_model, make_tiny_lm, make_tokenizer


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("qwen2", seed=5)


def spd(lm, **options):
    return multidraft.generate(lm, "the cat sat", method="superposed", max_new_tokens=3, **options)


@pytest.mark.parametrize("options, fragment", [
    ({"num_drafts": 0}, "num_drafts"), ({"num_drafts": 2.5}, "num_drafts"), ({"num_drafts": True}, "num_drafts"),
    ({"alpha": -0.1}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"alpha": float("nan")}, "alpha"),
    ({"tau": 0}, "tau"), ({"tau": -1.0}, "tau"), ({"tau": float("inf")}, "tau"),
    ({"n_token_sample": 1, "num_drafts": 2}, "n_token_sample"), ({"log_penalty": -1}, "log_penalty"),
    ({"first_step": "beam"}, "first_step"), ({"reset_every": 0}, "reset_every"),
    ({"reset_choice": "best"}, "reset_choice"), ({"no_such_option": 1}, "no option"),
])
def test_bad_options(lm, options, fragment):
    with pytest.raises(InvalidOptionError, match=fragment):
        spd(lm, **{"alpha": 0.0, **options})  # alpha = 0: no n-gram file needed to reach the check


def test_sampling_temperature_is_refused(lm):
    with pytest.raises(InvalidOptionError, match="tau"):
        spd(lm, alpha=0.0, temperature=0.7)


def test_missing_default_ngram_file_names_the_build_command(lm, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    with pytest.raises(DataNotFoundError, match="multidraft ngram build-default --model"):
        spd(lm)  # alpha defaults to 0.54: an n-gram file is needed
    assert len(spd(lm, alpha=0.0).drafts) == 3  # alpha = 0 needs none


def test_missing_ngram_path(lm, tmp_path):
    with pytest.raises(DataNotFoundError, match="multidraft ngram build"):
        spd(lm, ngram=str(tmp_path / "nope.ngram"))


def test_ngram_file_of_another_tokenizer(lm, tmp_path):
    docs = [np.arange(10) % 64]
    other = tmp_path / "other.ngram"
    build(docs, 64, other, max_order=3, tokenizer_name="someone-else", tokenizer_fingerprint="vocab-0123456789abcdef")
    with pytest.raises(TokenizerMismatchError, match="rebuild"):
        spd(lm, ngram=str(other), ngram_weights=(0.1, 0.1))
    bigger = tmp_path / "bigger.ngram"
    build(docs, 100, bigger, max_order=3)
    with pytest.raises(TokenizerMismatchError):
        spd(lm, ngram=str(bigger), ngram_weights=(0.1, 0.1))


def test_more_weights_than_orders(lm, tmp_path):
    path = tmp_path / "small.ngram"
    build([np.arange(30) % 64], 64, path, max_order=3)
    with pytest.raises(InvalidOptionError, match="orders up to 3"):
        spd(lm, ngram=str(path))  # the paper's five weights need orders up to 6


class NoEmbedsModel(torch.nn.Module):
    """A causal LM whose forward takes token ids only."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config, self.generation_config = inner, inner.config, inner.generation_config

    def forward(self, input_ids, past_key_values=None, use_cache=True, position_ids=None, attention_mask=None,
                logits_to_keep=0):
        return self.inner(input_ids=input_ids, past_key_values=past_key_values, use_cache=use_cache,
                          position_ids=position_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep)

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


def test_model_without_inputs_embeds():
    lm = LM(NoEmbedsModel(make_tiny_hf_model("llama", seed=0)), make_tokenizer(), name="ids-only")
    assert multidraft.generate(lm, "the cat", method="greedy", max_new_tokens=2).token_ids  # the wrapper works
    with pytest.raises(InvalidOptionError, match="inputs_embeds"):
        multidraft.generate(lm, "the cat", method="superposed", max_new_tokens=2, alpha=0.0)


def test_interpolation_edge_cases():
    lp_hat = torch.log(torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64))
    q = torch.tensor([[0.2, 0.0, 0.1], [0.0, 0.0, 0.0]], dtype=torch.float64)
    for alpha in (0.0, 0.54, 1.0):
        s = interpolate(lp_hat, q, alpha, 200.0)
        assert not torch.isnan(s).any()
    s = interpolate(lp_hat, q, 0.5, 200.0)
    assert s[0, 1] == -float("inf")  # partial overlap: the unsupported candidate is excluded
    assert torch.allclose(s[0, [0, 2]], 0.5 * lp_hat[[0, 2]] + 0.5 * q[0, [0, 2]].log())
    assert torch.allclose(s[1], 0.5 * lp_hat - 200.0)  # no support at all: the penalty path
    assert s[1].max() < s[0, [0, 2]].min()  # ranks below every supported candidate
    s1 = interpolate(lp_hat, q, 1.0, 200.0)
    assert torch.allclose(s1[0, [0, 2]], q[0, [0, 2]].log())  # alpha = 1: only q counts
    assert torch.allclose(s1[1], torch.full((3,), -200.0, dtype=torch.float64))
    assert torch.equal(interpolate(lp_hat, q, 0.0, 200.0), lp_hat.expand(2, -1))
