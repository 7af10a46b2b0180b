"""Pieces behind benchmarks/results/2026-11-23-paper-bpd/README.md: the paper's cost model (Table 11), the h ablation
by head slicing, and per-step oracle bounds for every strategy, local rescoring included (bpd.md §8 19-20, 26)."""

import pytest
import torch

import multidraft
from multidraft.blockwise.cost import (GB, PAPER_KV_BYTES_PER_POSITION, PAPER_MODEL_BYTES, PAPER_RESCORER_BYTES,
                                       PAPER_RESCORER_KV_BYTES_PER_POSITION, MeasuredCosts, kv_bytes_per_position,
                                       kv_io, parameter_io)
from multidraft.blockwise.drafter import BlockwiseStrategy, NeuralScorer, NGramScorer
from multidraft.blockwise.evaluation import OfflineRun
from multidraft.blockwise.lattice import matched_length, oracle_length
from multidraft.errors import MultidraftError
from tests.tiny_models import make_tiny_lm, random_heads

PROMPTS = ["the cat sat on the mat and", "def x ( y ) : return"]

# Table 11 of the paper: (B, parameter I/O GB, KV I/O GB at L = 128, 512, 1024, 2048), and how each setting drafts.
TABLE11 = {
    "autoregressive": (1.000, 3.000, (0.113, 0.453, 0.906, 1.812)),
    "base BPD": (1.646, 1.823, (0.074, 0.280, 0.555, 1.106)),
    "4-gram BPD": (1.657, 1.811, (0.073, 0.278, 0.552, 1.098)),
    "neural-61M BPD": (1.724, 1.811, (0.076, 0.290, 0.574, 1.144)),
    "16-best 0-gram": (1.717, 1.747, (0.140, 0.338, 0.602, 1.129)),
    "16-best 4-gram": (1.797, 1.669, (0.134, 0.323, 0.575, 1.079)),
}


@pytest.mark.parametrize("name", list(TABLE11))
def test_cost_model_reproduces_table_11(name):
    b, param_gb, kv_gb = TABLE11[name]
    neural = name.startswith("neural")
    drafts = 16 if name.startswith("16-best") else 1
    got = parameter_io(PAPER_MODEL_BYTES, b, PAPER_RESCORER_BYTES if neural else 0.0) / GB
    assert got == pytest.approx(param_gb, abs=6e-4)
    for context, want in zip((128, 512, 1024, 2048), kv_gb):
        kv = kv_io(PAPER_KV_BYTES_PER_POSITION, context, b, drafts, 9,
                   PAPER_RESCORER_KV_BYTES_PER_POSITION if neural else 0.0,
                   autoregressive=name == "autoregressive") / GB
        assert kv == pytest.approx(want, abs=6e-4), (name, context)


def test_measured_cost_model():
    costs = MeasuredCosts(ar_forward=0.02, verify_forward=0.03, heads=0.004, search=0.002)
    assert costs.time_per_token(1.8) == pytest.approx(0.036 / 1.8)
    assert costs.speedup(1.8) == pytest.approx(0.02 * 1.8 / 0.036)
    assert costs.break_even_block_efficiency() == pytest.approx(1.8)
    assert costs.speedup(costs.break_even_block_efficiency()) == pytest.approx(1.0)
    assert kv_bytes_per_position(30, 3, 64, 2) == 23040         # SmolLM2-135M in 2-byte precision
    with pytest.raises(MultidraftError, match="block_efficiency"):
        costs.speedup(0.5)                                        # B < 1 is impossible: tokens >= calls


@pytest.fixture(scope="module")
def run6():
    """float64 tiny model with 6 heads close to head 1 (some drafts accepted, some lattice paths near-tied)."""
    lm = make_tiny_lm("llama", seed=2)
    lm.model.double()
    heads = random_heads(lm, 6, seed=3, scale=0.05).double().bind(lm)
    runs = []
    for prompt in PROMPTS:
        greedy = multidraft.generate(lm, prompt, max_new_tokens=40).token_ids
        runs.append(OfflineRun(lm, heads, lm.encode(prompt), 40, num_heads=6, greedy_ids=greedy))
    return lm, heads, runs


def test_head_slicing_equals_a_run_with_fewer_heads(run6, tiny_ngram):
    """Table 10 evaluates h = 3/6/9 by slicing one set of heads; identical to evaluating with num_heads=h."""
    lm, heads, runs = run6
    for run in runs:
        for h in (2, 3, 5):
            sliced, direct = run.with_heads(h), OfflineRun(lm, heads, run.prompt, 40, num_heads=h, greedy_ids=run.greedy)
            # Equal up to float64 rounding (a batched einsum over fewer heads may sum in another order).
            assert torch.allclose(sliced.head_logits, direct.head_logits, rtol=0, atol=1e-12)
            for strategy in (BlockwiseStrategy("none", 1, 1), BlockwiseStrategy("ngram", 3, 2, 1.0, tiny_ngram, 2)):
                assert sliced.run(strategy).steps == direct.run(strategy).steps
            assert sliced.run_oracle(4).steps == direct.run_oracle(4).steps
            # No step can gain more than h tokens (the certain token + h-1 drafts).
            assert max(sliced.run_oracle(lm.vocab_size).steps) <= h
        assert run.with_heads(6).run_oracle(3).steps == run.run_oracle(3).steps
        for bad in (1, 7):
            with pytest.raises(MultidraftError, match="num_heads"):
                run.with_heads(bad)


def test_oracle_bounds_every_strategy_at_every_step(run6, tiny_ngram):
    """Per step, on the same lattice: the oracle matches at least as far as any strategy's best draft (local
    rescoring with a neural LM or an n-gram included), p-best gains are non-decreasing in p, and p-best with
    p = k**(h-1) (every path) reaches the oracle exactly (bpd.md §8 19-20). Whole-sequence B is not ordered (A10)."""
    lm, heads, runs = run6
    rescorer = make_tiny_lm("llama", seed=5, hidden_size=16, intermediate_size=32)
    k = 2
    strategies = [BlockwiseStrategy("none", 1, 1), BlockwiseStrategy("none", k, 3),
                  BlockwiseStrategy("ngram", k, 1, 1.0, tiny_ngram, 3),
                  BlockwiseStrategy("neural", k, 1, 2.0, scorer=NeuralScorer(rescorer)),
                  BlockwiseStrategy("neural", k, 2, 1.0, scorer=NGramScorer(tiny_ngram, 2))]
    checked = strictly_better = 0
    for run in runs:
        for h in (3, 6):
            sub = run.with_heads(h)
            every = k ** (h - 1)
            pbest = [BlockwiseStrategy("ngram", k, p, 1.0, tiny_ngram, 2) for p in (1, 2, 4, every)]
            for decided in range(1, sub.total):
                lattice, future = sub.lattice(decided, k), sub.future(decided)
                oracle = oracle_length(lattice, future)
                for strategy in strategies:
                    drafts = strategy.drafts(sub.lattice(decided, strategy.lattice_k), sub.context(decided))
                    best = max(matched_length(d, future) for d in drafts)
                    assert oracle >= best, (h, decided, strategy.rescoring)
                    strictly_better += oracle > best
                    checked += 1
                gains = [max(matched_length(d, future) for d in s.drafts(lattice, sub.context(decided))) for s in pbest]
                assert gains == sorted(gains), (h, decided, gains)
                assert gains[-1] == oracle, (h, decided)
    assert checked >= len(strategies) * 2 * 2 * 30
    assert strictly_better > 0          # the bound is not vacuous on this fixture
