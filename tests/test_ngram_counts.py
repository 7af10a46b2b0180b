"""N-gram counts and probabilities against brute force on random corpora."""

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multidraft.ngram import NGramModel, build

corpora = st.lists(st.lists(st.integers(0, 5), max_size=30), min_size=0, max_size=12)


def brute_counts(docs, max_order):
    counts = collections.Counter()
    for doc in docs:
        for n in range(1, max_order + 1):
            for i in range(len(doc) - n + 1):
                counts[tuple(doc[i:i + n])] += 1
    return counts


def built(tmp_path, docs, vocab, max_order, **kw):
    path = tmp_path / "m.ngram"
    build([np.array(d, dtype=np.int64) for d in docs], vocab, path, max_order=max_order, **kw)
    return NGramModel.load(path)


def all_ngrams(model, max_order, vocab):
    """Every stored n-gram with its count, read back through the public query API."""
    got = collections.Counter({(t,): int(model.counts[t]) for t in range(vocab) if model.counts[t]})
    frontier = [(t,) for t in range(vocab)]
    for n in range(2, max_order + 1):
        nxt = []
        for ctx in frontier:
            ids, probs = model.next_token_distribution(list(ctx), n)
            if ids.size:
                total = model.cont_total[model.context_states([list(ctx)])[0][n - 2]]
                for tok, p in zip(ids, probs):
                    got[ctx + (int(tok),)] = int(round(p * total))
                    nxt.append(ctx + (int(tok),))
        frontier = nxt
    return got


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=corpora, max_order=st.integers(1, 4), chunk=st.sampled_from([3, 7, 1 << 20]))
def test_counts_equal_brute_force(tmp_path, docs, max_order, chunk):
    # Tiny chunks and merge limits force the multi-chunk, multi-run merge path.
    model = built(tmp_path, docs, 6, max_order, chunk_tokens=chunk, merge_limit=5)
    expected = brute_counts(docs, max_order)
    assert all_ngrams(model, max_order, 6) == expected
    for n in range(1, max_order + 1):
        assert model.header["levels"][n - 1]["size"] == (6 if n == 1 else sum(len(g) == n for g in expected))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=corpora, data=st.data())
def test_ml_probabilities_and_sparse_distributions(tmp_path, docs, data):
    model = built(tmp_path, docs, 6, 4)
    counts = brute_counts(docs, 4)
    # context totals = occurrences of the context followed by some token
    ctx_totals = collections.Counter()
    for gram, c in counts.items():
        if len(gram) >= 2:
            ctx_totals[gram[:-1]] += c
    ctx = data.draw(st.lists(st.integers(0, 5), min_size=0, max_size=5))
    cands = np.arange(6)
    probs, seen = model.candidate_probs(model.context_states([ctx]), cands[None], [2, 3, 4])
    for j, n in enumerate([2, 3, 4]):
        c = tuple(ctx[len(ctx) - (n - 1):]) if len(ctx) >= n - 1 else None
        total = ctx_totals.get(c, 0) if c is not None else 0
        assert seen[0, j] == (total > 0)
        for x in cands:
            want = counts.get(c + (int(x),), 0) / total if total else 0.0
            assert probs[0, j, x] == pytest.approx(want)
        ids, p = model.next_token_distribution(ctx, n)
        if total:
            assert p.sum() == pytest.approx(1.0)
            assert np.all(p > 0) and list(ids) == sorted(ids)
        else:
            assert ids.size == 0


def test_documents_do_not_join(tmp_path):
    model = built(tmp_path, [[1, 2], [3, 4]], 5, 3)
    assert model.next_token_distribution([2], 2)[0].size == 0  # 2 ends a document: no continuation
    ids, p = model.next_token_distribution([1], 2)
    assert list(ids) == [2] and list(p) == [1.0]


def test_ids_outside_vocabulary_are_rejected(tmp_path):
    from multidraft.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="outside the vocabulary"):
        build([np.array([1, 9])], 5, tmp_path / "x.ngram", max_order=2)
    assert not (tmp_path / "x.ngram").exists()


def test_large_vocabulary_keys_are_exact(tmp_path):
    # 5 context tokens x 18 bits would overflow a packed uint64; the trie ids must not.
    vocab = 151_936
    rng = np.random.default_rng(0)
    docs = [rng.integers(vocab - 50, vocab, 200) for _ in range(5)]
    model = built(tmp_path, [d.tolist() for d in docs], vocab, 6)
    counts = brute_counts([d.tolist() for d in docs], 6)
    gram = next(g for g in counts if len(g) == 6)
    total = sum(c for g, c in counts.items() if len(g) == 6 and g[:5] == gram[:5])
    probs, seen = model.candidate_probs(model.context_states([list(gram[:5])]), np.array([[gram[5]]]), [6])
    assert seen[0, 0] and probs[0, 0, 0] == pytest.approx(counts[gram] / total)


def test_corpus_of_empty_documents_builds_an_empty_model(tmp_path):
    """Found by hypothesis in a full run: several empty chunks used to crash the merge of count runs."""
    path = tmp_path / "empty.ngram"
    build([np.array([], dtype=np.int64)] * 5, 8, path, max_order=2, chunk_tokens=3, merge_limit=5)
    model = NGramModel.load(path)
    assert model.num_tokens == 0
    probs = model.smoothed_probs_batch([[1]], np.arange(8), order=2)[0]
    assert probs.sum() == pytest.approx(1.0)
