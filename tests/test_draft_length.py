"""draft_length="adaptive": the policy picks the draft depth with the most tokens per unit of forward cost, and
cutting drafts that way never changes a lossless method's output (greedy equality for every lossless method, and
the whole loop's sampling law by a seeded chi-square test)."""

import collections
import itertools

import pytest

import multidraft
from multidraft.decoders import loop
from multidraft.decoders.draft_length import DraftLength, ForwardCosts, forward_costs
from multidraft.methods import METHODS
from multidraft.verify.multi_draft import MultiDraftVerifier
from multidraft.decoders.output import OutputCollector
from multidraft.eval.drafter_replay import FixedCosts as FrozenCosts     # a test decides what the machine costs
from multidraft.drafters.draft_model import DraftModelDrafter
from multidraft.sampling import PositionSampler, SamplingParams
from multidraft.types import DecodeStats
from tests.test_draft_model_sampling import LENGTH, PROMPT_IDS, TEMPERATURE, models  # noqa: F401 (a fixture)
from tests.test_methods import LOSSLESS, PROMPTS, SAMPLED_ONLY, method_options, tiny_artifacts
from tests.tiny_models import make_tiny_lm
from tests.test_sampling import chi_square_p_value

# Tiny models run fastest on one thread (and far faster than on two on a loaded machine).
pytestmark = pytest.mark.usefixtures("one_thread")


def expected_tokens(rate: float, depth: int) -> float:
    """What one pooled per-token rate a would predict: 1 + a + ... + a^depth (a geometric run capped at depth)."""
    if rate >= 1.0:
        return float(depth + 1)
    return (1.0 - rate ** (depth + 1)) / (1.0 - rate)


STEEP = FrozenCosts({1: 1.0, 2: 2.0, 3: 2.6, 4: 2.9, 8: 3.7, 16: 5.0})   # an AVX2 CPU with MKL (fast_path.md)
MODERATE = FrozenCosts({1: 1.0, 2: 1.1, 3: 1.3, 4: 1.6, 8: 2.5})       # depth 1 or 2 is best, as acceptance goes
FLAT = FrozenCosts({n: 1.0 for n in range(1, 65)})                       # a launch-bound GPU


def test_expected_tokens_is_the_mean_of_a_capped_geometric_run():
    for rate, depth in itertools.product((0.0, 0.3, 0.9, 1.0), range(6)):
        # P(run >= i) = rate**i for i <= depth; E = 1 (the verifier's token) + sum of those.
        assert expected_tokens(rate, depth) == pytest.approx(1 + sum(rate ** i for i in range(1, depth + 1)))


def test_costs_are_optimistic_and_monotone():
    costs = ForwardCosts()
    assert costs.relative(8) == 1.0                  # nothing known: every size looks free, so it gets tried
    costs.record(1, 1.0)
    assert costs.relative(8) == 1.0                  # one size known: still free beyond it
    costs.record(4, 3.0)
    assert costs.relative(4) == 3.0
    assert costs.relative(2) == pytest.approx(5 / 3)  # unseen, between two measured sizes: the line through them
    assert costs.relative(6) == pytest.approx(13 / 3)  # past the largest: the last measured rows' cost each
    costs.record(8, 2.0)                             # cheaper than 4 tokens: 4's 3.0 was a slowed step
    assert costs.relative(8) == 2.0
    assert costs.relative(4) == 2.0                  # a size costs no more than a larger one measured
    assert costs.relative(6) == 2.0
    assert costs.relative(2) == pytest.approx(4 / 3)
    assert costs.relative(10) == 2.0                 # a flat line extrapolates flat
    assert costs.relatives_up_to(10) == [costs.relative(n) for n in range(11)]
    costs.record(3, float("nan"))
    costs.record(0, 1.0)
    assert 3 not in costs.seconds and 0 not in costs.seconds


def test_a_slowed_step_is_forgotten_and_a_lasting_change_is_learnt():
    """Noise only slows a step: each size keeps the least of its last `window` steps. One spike among them changes
    nothing; a machine that stays slower (or faster) is priced so within `window` steps of each size."""
    costs = ForwardCosts(window=3)
    for seconds in (1.0, 2.0, 1.1):
        costs.record(2, seconds)
    assert costs.seconds[2] == 1.0
    costs.record(2, 3.0)
    assert costs.seconds[2] == 1.1                   # 1.0 fell out of the window; the spike is still ignored
    costs.record(2, 2.5)
    costs.record(2, 2.6)
    assert costs.seconds[2] == 2.5                   # three slower steps in a row: the machine is slower now
    costs.record(2, 0.9)
    assert costs.seconds[2] == 0.9


def test_a_spike_at_one_depth_does_not_price_out_the_deeper_drafts():
    """The agent episodes on a Zen 4 VM (2026-12-03): a 5-row step slowed to 1.8x one row; priced as the floor of
    every larger size, it cut a copying drafter's drafts at 3 tokens for the rest of the run, where the next sizes,
    measured at their usual cost, show 5 rows cheap."""
    costs = ForwardCosts()
    for size, seconds in ((1, 1.0), (2, 1.05), (3, 1.1), (4, 1.2), (5, 2.4), (6, 1.45), (7, 1.55), (8, 1.65)):
        costs.record(size, seconds)
    assert costs.relative(5) == pytest.approx(1.45)
    policy = DraftLength(costs)
    for _ in range(30):
        policy.observe(7, 7)                         # a copy that is right to its end
    assert policy.best_depth(7) == 7


def test_a_size_seen_fewer_times_than_the_window_is_priced_by_the_certain_sizes():
    """One slowed step at a depth seen once is capped by the line through the sizes measured `window` times (a
    slowed 7-row step, 133 ms between 6 rows' 59 and 17 rows' 162 ms, priced every draft of 7+ tokens out in a run);
    a size that really costs more (a second pass over the weights from the 9th row) is priced so once it has been
    measured `window` times."""
    costs = ForwardCosts(window=2)
    for _ in range(2):
        for size, seconds in ((1, 1.0), (4, 1.3), (8, 1.7)):
            costs.record(size, seconds)
    costs.record(6, 3.0)
    assert costs.relative(6) == pytest.approx(1.5)   # the line from 4 to 8, not the slowed step
    assert costs.relative(7) == pytest.approx(1.6)
    costs.record(6, 1.55)
    assert costs.relative(6) == pytest.approx(1.55)  # certain now: its least step
    costs.record(9, 2.4)
    assert costs.relative(9) == pytest.approx(1.775)  # uncertain: past 8, the line through 6 and 8
    costs.record(9, 2.3)
    assert costs.relative(9) == pytest.approx(2.3)


def test_policy_drafts_long_when_forwards_are_flat_and_short_when_steep():
    assert DraftLength(FLAT).request_depth(10) == 10
    steep = DraftLength(STEEP)
    assert 1 <= steep.request_depth(10) <= 3
    for _ in range(30):                              # a request whose drafts are always fully accepted
        steep.observe(10, 10)
    assert steep.rate > 0.95 and steep.request_depth(15) >= 7       # long runs: long drafts pay even here


def test_per_depth_rates_see_that_a_right_copy_stays_right():
    """Runs that end at depth 1 or reach 8 (a copy is wrong at once or right throughout): E(k) = 1 + k/2 exactly;
    one pooled per-token rate (80 accepted of 90 trials) would call it geometric and get every depth wrong."""
    policy = DraftLength(STEEP, decay=1.0)
    for accepted in [0, 8] * 10:
        policy.observe(8, accepted)
    expected = policy.expected_tokens(8)
    for depth in range(9):
        assert expected[depth] == pytest.approx(1 + depth / 2, abs=0.25), depth
    assert abs(expected_tokens(policy.rate, 8) - 5) > 0.5


def test_policy_stops_verifying_when_nothing_is_accepted_but_probes():
    policy = DraftLength(STEEP)
    for _ in range(20):
        policy.observe(3, 0)
    choices = [policy.choose([1, 2, 3]) for _ in range(DraftLength.PROBE_EVERY * 2)]
    assert choices.count(0) == len(choices) - 2 and choices.count(1) == 2


def test_tree_drafts_are_cut_where_their_nodes_make_the_forward_too_expensive():
    policy = DraftLength(STEEP)
    for _ in range(10):
        policy.observe(4, 3)                         # rate 0.75
    chain = policy.choose([1, 2, 3, 4])
    wide = policy.choose([1] * 5 + [2] * 5 + [3] * 5)    # 5 branches: 5 nodes per depth
    assert chain >= 3 and wide < chain


@pytest.fixture(scope="module")
def target(tiny_ngram):
    """One tiny target (test_methods covers both architectures for the fixed draft length)."""
    lm = make_tiny_lm("qwen2", seed=7)
    return lm, tiny_artifacts(lm, tiny_ngram)


@pytest.fixture
def steep_costs(monkeypatch):
    monkeypatch.setattr(loop, "forward_costs", lambda lm, past=0: STEEP)


@pytest.mark.parametrize("name", [n for n in LOSSLESS if n not in SAMPLED_ONLY and METHODS[n].make_drafter])
def test_adaptive_drafts_keep_every_lossless_method_equal_to_greedy(target, steep_costs, name):
    lm, artifacts = target
    options = method_options(name, artifacts)
    for prompt in PROMPTS:
        want = multidraft.generate(lm, prompt, method="greedy", max_new_tokens=24).token_ids
        fixed = multidraft.generate(lm, prompt, method=name, max_new_tokens=24, draft_length="fixed", **options)
        adaptive = multidraft.generate(lm, prompt, method=name, max_new_tokens=24, draft_length="adaptive",
                                       **options)
        assert adaptive.token_ids == want == fixed.token_ids, (name, prompt)
        if fixed.stats.draft_tokens_proposed:        # the steep curve must actually have cut something
            assert adaptive.stats.draft_tokens_proposed < fixed.stats.draft_tokens_proposed, name


def test_adaptive_learns_the_costs_of_the_model_it_runs(target):
    lm, _ = target
    multidraft.generate(lm, PROMPTS[0], method="pld", max_new_tokens=16, draft_length="adaptive")
    assert 1 in forward_costs(lm).seconds


def test_cost_tables_are_kept_per_context_length_and_a_new_one_starts_from_a_shorter_context():
    """One table below 1,024 cached keys, then one per doubling; recording at one length leaves the others as they
    were; a length's first table starts from the prices of the nearest shorter one measured, as a copy."""
    from multidraft.decoders.draft_length import context_bucket

    class Model:
        runner = "native"

    lm = Model()
    assert [context_bucket(n) for n in (0, 1023, 1024, 2047, 2048, 8191, 8192)] == [0, 0, 1, 1, 2, 3, 4]
    short = forward_costs(lm, past=0)
    assert forward_costs(lm, past=700) is short and forward_costs(lm) is short
    short.record(1, 0.030)
    short.record(8, 0.045)
    long = forward_costs(lm, past=6000)
    assert long is not short and long.seconds == {1: 0.030, 8: 0.045}       # the shorter context's prices, to start
    long.record(8, 0.130)
    long.record(1, 0.044)
    assert short.seconds == {1: 0.030, 8: 0.045} and long.seconds == {1: 0.044, 8: 0.130}
    assert forward_costs(lm, past=4096) is long and forward_costs(lm, past=3000) is not long


def test_a_request_prices_its_steps_on_its_own_contexts_table(monkeypatch):
    """The loop records each step in the table of the cache length it ran over: a short request's steps in the
    short table, a long prompt's in its own (buckets shrunk to 32 keys for a tiny model)."""
    from multidraft.decoders import draft_length

    monkeypatch.setattr(draft_length, "CONTEXT_BUCKET", 32)
    lm = make_tiny_lm("qwen2", seed=7)
    repeating = [5, 6, 7, 8, 9] * 3
    multidraft.generate(lm, repeating[:10], method="pld", max_new_tokens=8, draft_length="adaptive")
    short = forward_costs(lm, past=0)
    steps_before = {n: list(recent) for n, recent in short._recent.items()}
    assert steps_before and forward_costs(lm, past=40)._recent == {}
    multidraft.generate(lm, (repeating * 3)[:40], method="pld", max_new_tokens=8, draft_length="adaptive")
    assert forward_costs(lm, past=40)._recent                                 # the long prompt's steps, there
    assert {n: list(recent) for n, recent in short._recent.items()} == steps_before


def test_unknown_draft_length_is_a_clear_error(target):
    with pytest.raises(multidraft.InvalidOptionError, match="draft_length"):
        multidraft.generate(target[0], PROMPTS[0], method="pld", draft_length="short")


@pytest.mark.slow
def test_adaptive_loop_samples_the_target_law(models):  # noqa: F811
    """Depths chosen from the acceptance history (between 1 and 2 here) keep the law exact."""
    target_lm, draft_lm, law = models
    runs, counts, accepted, depths = 1000, collections.Counter(), 0, set()
    for seed in range(runs):
        stats, output = DecodeStats(), OutputCollector(target_lm, LENGTH)
        drafter = DraftModelDrafter(draft_lm, 2, 3, [1.0, 1.3])
        policy_depths = _recording_policy(depths)
        loop.draft_and_verify(target_lm, PROMPT_IDS, drafter, MultiDraftVerifier("specinfer"),
                                     PositionSampler(SamplingParams(TEMPERATURE, seed=seed)), output, stats,
                                     draft_length="adaptive", policy=policy_depths)
        counts[tuple(output.token_ids)] += 1
        accepted += stats.draft_tokens_accepted
    assert accepted > runs // 4, f"only {accepted} draft tokens accepted: too few for this test to mean anything"
    assert len(depths) > 1, f"the policy always asked for depth {depths}: nothing adaptive was tested"
    p_value = chi_square_p_value(law, counts, runs)
    assert p_value > 1e-3, f"adaptive draft length deviates from the target law (chi-square p = {p_value:.2e})"


def _recording_policy(depths):
    class Recording(DraftLength):
        def request_depth(self, max_depth):
            depth = super().request_depth(max_depth)
            depths.add(depth)
            return depth
    return Recording(MODERATE)
