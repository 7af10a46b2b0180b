"""Superposed Decoding on tiny random models with a tiny n-gram file (spec spd.md §7)."""

import math

import numpy as np
import pytest
import torch

import multidraft
from multidraft.superposed.decoder import SuperposedConfig, superpose, superposed_decode
from multidraft.ngram import NGramModel
from tests.tiny_models import make_tiny_lm

PROMPT = "the cat sat on the mat and then"
WEIGHTS = (0.01, 0.04, 0.15, 0.18)  # orders 2..5, sum <= 1


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=3)


@pytest.fixture(scope="module")
def ngram(dense_ngram_path):
    return NGramModel.load(dense_ngram_path)


@pytest.fixture(scope="module")
def prompt(lm):
    return lm.encode(PROMPT)


def run(lm, prompt, ngram=None, G=8, trace=True, **cfg):
    cfg.setdefault("ngram_weights", WEIGHTS)
    return superposed_decode(lm, prompt, G, SuperposedConfig(**cfg), ngram, trace=trace)


class ForwardSpy:
    """Wraps model.forward: counts calls and records the shapes and inputs each one received."""

    def __init__(self, model):
        self.model, self.original, self.calls = model, model.forward, []

    def __enter__(self):
        def spy(*args, **kwargs):
            embeds, ids = kwargs.get("inputs_embeds"), kwargs.get("input_ids")
            self.calls.append({"embeds": None if embeds is None else embeds.detach().clone(),
                               "shape": tuple((embeds if embeds is not None else ids).shape[:2]),
                               "past": kwargs["past_key_values"].get_seq_length()})
            return self.original(*args, **kwargs)
        self.model.forward = spy
        return self

    def __exit__(self, *exc):
        del self.model.forward  # back to the class method


# ------------------------------------------------------------------ reductions to known decoders

@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("tau", [0.06, 1.0])
def test_k1_alpha0_equals_greedy(arch, tau):
    lm = make_tiny_lm(arch, seed=4)
    spd = multidraft.generate(lm, PROMPT, method="superposed", max_new_tokens=12, num_drafts=1, alpha=0.0, tau=tau)
    greedy = multidraft.generate(lm, PROMPT, method="greedy", max_new_tokens=12)
    assert spd.token_ids == greedy.token_ids
    assert spd.drafts[0].token_ids == greedy.token_ids
    assert not spd.stats.lossless


@pytest.mark.parametrize("alpha", [0.3, 0.54, 1.0])
def test_k1_is_greedy_on_the_combined_score(lm, prompt, ngram, alpha):
    """spd.md §7.10, against a reference that feeds real token ids and queries the n-gram per context."""
    G, tau, K = 8, 0.06, 3
    out = run(lm, prompt, ngram, G=G, num_drafts=1, alpha=alpha, tau=tau, trace=False)
    cache, fwd = lm.prefill(prompt)
    tokens = []
    for _ in range(G):
        logp = torch.log_softmax(fwd.logits[-1].double() / tau, -1)
        top, cand = torch.topk(logp, K)
        lp_hat = (top - torch.logsumexp(top, 0)).numpy()
        q = ngram.interpolated(prompt + tokens, list(WEIGHTS), cand.numpy())
        with np.errstate(divide="ignore"):
            combined = (1 - alpha) * lp_hat + alpha * np.log(q)
        if not (q > 0).any():
            combined = (1 - alpha) * lp_hat - 200.0
        tokens.append(int(cand[int(np.argmax(combined))]))
        fwd = lm.forward(cache, [tokens[-1]])
    assert out.drafts[0].token_ids == tokens


def test_first_step_alpha0_is_lm_top_k(lm, prompt):
    k = 4
    out = run(lm, prompt, G=3, num_drafts=k, alpha=0.0, tau=0.3)
    _, fwd = lm.prefill(prompt)
    expected = torch.topk(fwd.logits[-1], k).indices
    first = out.trace[0]
    assert first["tokens"].tolist() == expected.tolist()
    assert torch.all(first["scores"][1:] <= first["scores"][:-1])


# ------------------------------------------------------------------ one forward per token, one sequence

@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_one_forward_per_generated_token(lm, prompt, ngram, k):
    G = 7
    with ForwardSpy(lm.model) as spy:
        gen = multidraft.generate(lm, prompt, method="superposed", max_new_tokens=G, num_drafts=k,
                                  ngram=ngram, ngram_weights=WEIGHTS)
    assert len(spy.calls) == G == gen.stats.target_calls
    assert spy.calls[0]["shape"] == (1, len(prompt))
    assert all(call["shape"] == (1, 1) and call["embeds"] is not None for call in spy.calls[1:])
    # the cache grows by one superposed position per step: m + G - 1 at the end
    assert [c["past"] for c in spy.calls] == [0] + list(range(len(prompt), len(prompt) + G - 1))
    assert len(gen.drafts) == k


def test_superposed_input_is_weighted_sum_of_embeddings(lm, prompt, ngram):
    E = lm.model.get_input_embeddings().weight.detach().float()
    with ForwardSpy(lm.model) as spy:
        out = run(lm, prompt, ngram, G=6, num_drafts=3, alpha=0.54, tau=1.0)
    fed = [c["embeds"][0, 0].float() for c in spy.calls[1:]]
    assert len(fed) == 5
    for step, embeds in zip(out.trace[:-1], fed):
        gamma = step["gamma"]
        assert gamma.sum().item() == pytest.approx(1.0)
        assert torch.allclose(gamma, torch.softmax(step["scores"], 0))
        expected = (gamma.float()[:, None] * E[step["tokens"]]).sum(0)
        assert torch.allclose(embeds, expected, atol=1e-6)
        assert torch.allclose(step["embedding"], expected, atol=1e-6)


def test_same_token_drafts_merge_into_one_weight(lm):
    gamma = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    merged = superpose(lm, torch.tensor([7, 7, 9]), gamma)
    assert torch.allclose(merged, superpose(lm, torch.tensor([7, 9]), torch.tensor([0.8, 0.2])), atol=1e-6)


# ------------------------------------------------------------------ selection invariants

@pytest.mark.parametrize("k", [2, 4])
def test_drafts_distinct_ranked_and_top_k_members(lm, prompt, ngram, k):
    gen = multidraft.generate(lm, prompt, method="superposed", max_new_tokens=8, num_drafts=k, ngram=ngram,
                              ngram_weights=WEIGHTS)
    seqs = [tuple(d.token_ids) for d in gen.drafts]
    assert len(set(seqs)) == len(seqs) == k
    scores = [d.score for d in gen.drafts]
    assert scores == sorted(scores, reverse=True)
    assert gen.token_ids == gen.drafts[0].token_ids and gen.text == gen.drafts[0].text
    out = run(lm, prompt, ngram, G=8, num_drafts=k)
    assert len(set(out.trace[0]["tokens"].tolist())) == k  # k distinct first tokens after step 1
    for step in out.trace:  # every chosen token was among the shared top-K LM tokens of its step
        assert set(step["tokens"].tolist()) <= set(step["candidates"].tolist())
        assert torch.all(step["scores"][1:] <= step["scores"][:-1])


def test_scores_add_up_along_lineages_and_never_increase(lm, prompt, ngram):
    out = run(lm, prompt, ngram, G=8, num_drafts=3)
    best = out.drafts[0]
    assert not best.finished
    # walk back from the final step: S = sum of the step scores of the draft's tokens along its parents
    row = next(r for r in range(len(out.trace[-1]["tokens"])) if math.isclose(out.trace[-1]["scores"][r], best.score))
    total = 0.0
    for j in range(len(out.trace) - 1, -1, -1):
        step = out.trace[j]
        parent, token = int(step["parents"][row]), int(step["tokens"][row])
        assert token == best.token_ids[j]
        col = step["candidates"].tolist().index(token)
        total += float(step["step_scores"][parent if step["step_scores"].shape[0] > 1 else 0, col])
        if j:
            prev = out.trace[j - 1]["scores"][parent]
            assert step["scores"][row] <= prev + 1e-12  # sum(lambda) <= 1: every step term is <= 0
        row = parent
    assert total == pytest.approx(best.score, abs=1e-5)


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_scaling_lambdas_keeps_tokens(lm, prompt, ngram, scale):
    base = run(lm, prompt, ngram, G=6, num_drafts=3, trace=False)
    scaled = run(lm, prompt, ngram, G=6, num_drafts=3, ngram_weights=[w * scale for w in WEIGHTS], trace=False)
    assert [d.token_ids for d in base.drafts] == [d.token_ids for d in scaled.drafts]


def test_deterministic(lm, prompt, ngram):
    a = run(lm, prompt, ngram, G=6, num_drafts=3, trace=False)
    b = run(lm, prompt, ngram, G=6, num_drafts=3, trace=False)
    assert [(d.token_ids, d.score) for d in a.drafts] == [(d.token_ids, d.score) for d in b.drafts]


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_alpha_extremes_have_no_nan(lm, prompt, ngram, alpha):
    out = run(lm, prompt, ngram, G=6, num_drafts=3, alpha=alpha)
    assert len(out.drafts) == 3 and all(math.isfinite(d.score) for d in out.drafts)
    for step in out.trace:
        assert not torch.isnan(step["step_scores"]).any()
        if step["gamma"] is not None:
            assert not torch.isnan(step["gamma"]).any()


# ------------------------------------------------------------------ finished drafts

def test_eos_drafts_finish_and_alive_ones_run_to_length():
    lm = make_tiny_lm("llama", seed=3)
    prompt = lm.encode(PROMPT)
    lm.eos_token_ids = set()
    probe = run(lm, prompt, G=6, num_drafts=3, alpha=0.0, tau=1.0)
    eos = int(probe.trace[1]["tokens"][0])  # the best extension at step 2 becomes "EOS"
    lm.eos_token_ids = {eos}
    out = run(lm, prompt, G=6, num_drafts=3, alpha=0.0, tau=1.0)
    step2 = out.trace[1]
    assert eos not in step2["tokens"].tolist()  # never alive
    assert 1 <= len(out.finished) <= 3
    for d in out.finished:
        assert d.finished and d.token_ids[-1] == eos and eos not in d.token_ids[:-1]
    assert len(out.drafts) == 3
    for d in out.drafts:
        if d.finished:
            assert d.token_ids[-1] == eos and eos not in d.token_ids[:-1]
        else:
            assert len(d.token_ids) == 6 and eos not in d.token_ids
    assert [d.norm_score for d in out.drafts] == sorted((d.norm_score for d in out.drafts), reverse=True)
    assert len(out.trace[-1]["tokens"]) == 3  # alive still has k drafts at the last step


# ------------------------------------------------------------------ resets

def test_reset_refills_with_real_tokens_and_is_reproducible(lm, prompt, ngram):
    G, s = 8, 3
    with ForwardSpy(lm.model) as spy:
        out = run(lm, prompt, ngram, G=G, num_drafts=3, reset_every=s, tau=1.0, alpha=0.3)
    assert len(spy.calls) == G  # the refill replaces the superposed forward
    reset_steps = [t for t in out.trace if t["reset_to"] is not None]
    assert [t["step"] for t in reset_steps] == [3, 6]
    # after the first reset the cache was cropped to the prompt and refilled with the 3 committed tokens
    refill = spy.calls[s]
    assert refill["past"] == len(prompt) and refill["shape"] == (1, s) and refill["embeds"] is None
    committed = out.drafts[0].token_ids[:2 * s]
    assert all(d.token_ids[:2 * s] == committed for d in out.drafts)
    # the step after a reset sees exactly the logits of a fresh forward over prompt + committed tokens
    _, fresh = lm.prefill(prompt + committed[:s])
    logp = torch.log_softmax(fresh.logits[-1].double() / 1.0, -1)
    top, _ = torch.topk(logp, 9)
    assert torch.allclose(out.trace[s]["lp_hat"], top - torch.logsumexp(top, 0), atol=1e-5)
    again = run(lm, prompt, ngram, G=G, num_drafts=3, reset_every=s, tau=1.0, alpha=0.3)
    assert [d.token_ids for d in again.drafts] == [d.token_ids for d in out.drafts]


@pytest.mark.parametrize("k", [2, 5])
def test_tiny_tau_collapses_onto_greedy(k):
    """spd.md §7.9: as tau -> 0 gamma is one-hot on the best draft, so draft #1 is the greedy path (float64)."""
    from multidraft.models.runner import LM
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer

    lm = LM(make_tiny_hf_model("qwen2", seed=6).double(), make_tokenizer(), name="tiny-f64")
    prompt = lm.encode(PROMPT)
    out = run(lm, prompt, G=8, num_drafts=k, alpha=0.0, tau=1e-4)
    greedy = multidraft.generate(lm, prompt, method="greedy", max_new_tokens=8)
    assert out.drafts[0].token_ids == greedy.token_ids
    assert all(step["gamma"].max() == 1.0 for step in out.trace[:-1])
