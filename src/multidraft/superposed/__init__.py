"""Superposed Decoding (Shen et al. 2024; spec: specs/spd.md), in one place.

- decoder.py: the decoder (k drafts from one forward pass per token) and its options;
- ngram_mixture.py: the per-draft n-gram mixtures and their interpolation with the LM (the n-gram file itself
  comes from `multidraft.ngram.resolve`, built by `multidraft ngram build-default`);
- evaluation.py: the paper's latency and draft-quality evaluation (`python -m multidraft.superposed.evaluation`).
- paper_eval.py: the rest of the paper's evaluation (validation/test split, equal-length comparison, N-gram-only
  baseline, Eq. 8 linearity probe, repetition curves), run by benchmarks/papers/superposed_paper.py.
"""
