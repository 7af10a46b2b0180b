"""The "auto" alphabets of classical IS and the truncated LP, on the wide flat laws where a guessed cost budget cut
them short and lost to SpecInfer (issue #33): V = 3,000, no top-p, two drafts (is auto 0.570 against SpecInfer 0.713
before). The budgets now come from a measured cost (benchmarks/results/2026-11-23-selection/selection_is_cost.log)."""

import numpy as np
import pytest
import torch

from multidraft.sampling import SamplingParams, logits_to_probs
from multidraft.selection import closed_form_acceptance
from multidraft.selection.schemes import classical_is_alphabet_size

VOCAB = 3000


def flat_laws(top_p, identical, seed=1):
    """Zipf-shaped target logits at low sharpness (a flat law) and a noisy draft, as
    benchmarks/results/2026-11-23-selection/selection_laws.py."""
    rng = np.random.default_rng(seed)
    target_logits = 0.8 * (-1.1 * np.log(rng.permutation(VOCAB) + 1) + 0.5 * rng.standard_normal(VOCAB))
    draft_logits = torch.from_numpy(target_logits + rng.standard_normal(VOCAB))

    def warp(logits, temperature):
        probs = logits_to_probs(torch.as_tensor(logits), SamplingParams(temperature, 0, top_p)).double()
        return probs / probs.sum()

    target = warp(target_logits, 1.0)
    drafts = [warp(draft_logits, 1.2)] * 2 if identical else [warp(draft_logits, 1.2), warp(draft_logits, 1.6)]
    return torch.stack(drafts), target


@pytest.mark.parametrize("identical", [True, False])
@pytest.mark.parametrize("top_p", [1.0, 0.95])
def test_default_alphabets_keep_the_whole_support_and_beat_specinfer_where_the_full_alphabet_does(top_p, identical):
    drafts, target = flat_laws(top_p, identical)
    support = int((target > 0).sum())
    assert top_p < 1 or support == VOCAB
    assert classical_is_alphabet_size(2, support, int((drafts > 0).any(0).sum()), identical) == support
    specinfer = closed_form_acceptance("specinfer", drafts, target)
    for scheme in ("is", "is_lp_truncated"):
        auto = closed_form_acceptance(scheme, drafts, target)
        full = closed_form_acceptance(scheme, drafts, target, alphabet_size=None)
        assert auto == pytest.approx(full, abs=1e-9), (scheme, auto, full)
    # Classical IS with its whole alphabet beats SpecInfer on these laws, so its default must too (it lost before).
    assert closed_form_acceptance("is", drafts, target) > specinfer


def test_the_budget_still_truncates_what_it_cannot_afford():
    # A 49k vocabulary without top-p: K = 2 keeps thousands of tokens, K = 4 about a hundred, never more than the
    # support, and more drafts never get a larger alphabet.
    sizes = [classical_is_alphabet_size(k, 49152, 49152, True) for k in (2, 3, 4, 5, 6)]
    assert sizes == sorted(sizes, reverse=True) and 3000 < sizes[0] < 49152 and sizes[2] >= 80
    assert classical_is_alphabet_size(2, 37, 49152, False) == 37
