"""SPD mixture, incremental states, smoothing normalisation, batched == single queries."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multidraft.errors import InvalidOptionError
from multidraft.ngram import NGramModel, build

VOCAB = 8


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    rng = np.random.default_rng(1)
    # A skewed random corpus: plenty of repeated contexts at every order.
    docs = [rng.choice(VOCAB, size=rng.integers(5, 120), p=[.3, .2, .15, .1, .1, .08, .05, .02]) for _ in range(40)]
    path = tmp_path_factory.mktemp("ng") / "m.ngram"
    build(docs, VOCAB, path, max_order=5)
    return NGramModel.load(path)


contexts = st.lists(st.integers(0, VOCAB - 1), max_size=7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ctx=contexts)
def test_smoothed_distribution_sums_to_one(model, ctx):
    for order in (1, 2, 3, 5):
        probs = model.smoothed_probs_batch([ctx], np.arange(VOCAB), order=order)[0]
        assert probs.sum() == pytest.approx(1.0, abs=1e-9)
        assert np.all(probs > 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ctx=contexts)
def test_mixture_mass_is_sum_of_seen_weights(model, ctx):
    weights = {2: 0.2, 3: 0.1, 4: 0.15, 5: 0.05}
    ids, q = model.interpolated(ctx, weights)
    seen = [n for n in weights if model.next_token_distribution(ctx, n)[0].size]
    assert q.sum() == pytest.approx(sum(weights[n] for n in seen))
    # dense candidates agree with the sparse mixture
    dense = model.interpolated(ctx, weights, candidates=np.arange(VOCAB))
    expect = np.zeros(VOCAB)
    expect[ids] = q
    np.testing.assert_allclose(dense, expect)


def test_unseen_context_gives_zero_mass(model):
    q = model.interpolated([VOCAB - 1] * 6, [0.1] * 4, candidates=np.arange(VOCAB))
    manual = sum(0.1 * model.candidate_probs(model.context_states([[VOCAB - 1] * 6]),
                                             np.arange(VOCAB)[None], [n])[0][0, 0] for n in range(2, 6))
    np.testing.assert_allclose(q, manual)
    assert model.interpolated([], [0.1] * 4, candidates=np.arange(VOCAB)).sum() == 0  # no context at all
    probs, seen = model.prob_batch([[VOCAB - 1] * 6, [0, 1]], np.tile(np.arange(VOCAB), (2, 1)), 3)
    assert probs.shape == (2, VOCAB) and seen.tolist() == [bool(probs[0].sum()), True]
    assert probs[1].sum() == pytest.approx(1.0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ctxs=st.lists(contexts, min_size=1, max_size=4), toks=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=3))
def test_batched_and_incremental_states_match(model, ctxs, toks):
    weights = [0.1, 0.2, 0.3, 0.4]
    cands = np.tile(np.arange(VOCAB), (len(ctxs), 1))
    batched = model.interpolated_batch(ctxs, weights, cands)
    for i, ctx in enumerate(ctxs):
        np.testing.assert_allclose(batched[i], model.interpolated(ctx, weights, candidates=np.arange(VOCAB)))
    # following drafts token by token with extend_states == walking the full contexts again
    states = model.context_states(ctxs)
    grown = [list(c) for c in ctxs]
    for t in toks:
        states = model.extend_states(states, np.full(len(ctxs), t))
        grown = [g + [t] for g in grown]
        np.testing.assert_array_equal(states, model.context_states(grown))
    np.testing.assert_allclose(model.interpolated_batch(None, weights, cands, states=states),
                               model.interpolated_batch(grown, weights, cands))


def test_log_prob_matches_smoothed_probs(model):
    seq = [0, 1, 0, 2, 3, 0, 1]
    lp = model.log_prob(seq)
    assert lp.shape == (len(seq),) and np.all(lp < 0)
    for t in range(len(seq)):
        p = model.smoothed_probs_batch([seq[max(0, t - 4):t]], [seq[t]])[0, 0]
        assert lp[t] == pytest.approx(np.log(p))
    assert model.log_prob(seq, order=2).shape == (len(seq),)


def test_bad_options(model):
    with pytest.raises(InvalidOptionError):
        model.next_token_distribution([1], 9)
    with pytest.raises(InvalidOptionError):
        model.log_prob([1, 2], smoothing="laplace")
    with pytest.raises(InvalidOptionError):
        model.interpolated([1], [-0.1])


def test_out_of_vocabulary_tokens_match_nothing(model):
    weights = [0.25] * 4
    cands = np.arange(VOCAB)
    clean = model.interpolated([0, 1], weights, candidates=cands)
    # an id beyond the vocabulary inside the context cuts every order that spans it
    assert np.allclose(model.interpolated([0, 1, VOCAB + 3, 0, 1], weights, candidates=cands), clean)
    assert model.interpolated([0, 1, VOCAB + 3], weights, candidates=cands).sum() == 0
    assert np.all(model.interpolated([0, 1], weights, candidates=np.array([VOCAB, -1])) == 0)


def test_every_seen_context_at_every_order_is_normalised(model):
    """Exhaustive over the corpus' contexts: the first n-gram stored at the top level once collided with
    the 'missing' sentinel id and was dropped, so one context's distribution summed to 0.66."""
    import itertools
    for order in (2, 3, 4, 5):
        for ctx in itertools.product(range(VOCAB), repeat=order - 1):
            ids, probs = model.next_token_distribution(list(ctx), order)
            if not ids.size:
                continue
            dense = model.smoothed_probs_batch([list(ctx)], np.arange(VOCAB), order=order)[0]
            assert dense.sum() == pytest.approx(1.0, abs=1e-9), (ctx, order)
            ml, seen = model.prob_batch([list(ctx)], ids[None], order)
            np.testing.assert_allclose(ml[0], probs)
