"""The SPD evaluation harness end to end on a tiny model (real figures come from the benchmark)."""

import numpy as np
import pytest

from multidraft.superposed.evaluation import latency, quality
from multidraft.ngram import NGramModel, build
from tests.tiny_models import make_tiny_lm


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    rng = np.random.default_rng(2)
    path = tmp_path_factory.mktemp("spd_eval") / "tiny.ngram"
    build([rng.integers(3, 64, size=60) for _ in range(300)], 64, path, max_order=6)
    lm = make_tiny_lm("llama", seed=8)
    prefixes = [lm.encode(text) for text in ("the cat sat on the mat", "def x ( y ) : return y + 1")]
    return lm, NGramModel.load(path), prefixes


def test_latency_rows(setup):
    lm, ngram, prefixes = setup
    rows = latency(lm, prefixes[:1], [1, 3], G=4, ngram=ngram)
    assert [r["k"] for r in rows] == [1, 3]
    for row in rows:
        assert row["spd_s"] > 0 and row["sequential_nucleus_s"] > 0 and row["batched_nucleus_s"] > 0
        assert row["speedup_vs_sequential"] == pytest.approx(row["sequential_nucleus_s"] / row["spd_s"])


def test_quality_summary(setup):
    lm, ngram, prefixes = setup
    scorer = make_tiny_lm("llama", seed=9)  # same tokenizer, other weights
    result = quality(lm, scorer, prefixes, k=3, G=5, ngram=ngram)
    summary = result["summary"]
    assert summary["prefixes"] == 2 and len(summary["spd_ppl_by_rank"]) == 3
    assert summary["spd_best_of_k_ppl"] <= min(summary["spd_ppl_by_rank"]) + 1e-9
    assert summary["nucleus_best_of_k_ppl"] <= summary["nucleus_ppl"] + 1e-9
    assert 0 <= summary["spd_self_bleu"] <= 1 and 0 <= summary["nucleus_self_bleu"] <= 1
    assert all(0 < r <= 1 for r in summary["spd_unique_ngram_ratio"])
    assert len(result["examples"][0]["spd"]) == 3
