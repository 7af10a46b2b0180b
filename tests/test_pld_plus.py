"""PLD+ on tiny random models: losslessness, draft construction, ranking, the artifact store, calibration, errors."""

import numpy as np
import pytest
import torch

import multidraft
from multidraft.decoders.output import OutputCollector
from multidraft.decoders.loop import draft_and_verify
from multidraft.drafters.base import LoopState
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.prompt_lookup import lookup
from multidraft.errors import InvalidOptionError, PromptError
from multidraft.methods import get_method
from multidraft.pldplus import calibration, induction
from multidraft.pldplus.ranking import candidates, rank_attention, rank_hidden
from multidraft.pldplus.sweep import replay_acceptance
from multidraft.sampling import PositionSampler, SamplingParams
from multidraft.types import DecodeStats, Verdict
from multidraft.verify import GreedyVerifier
from tests.tiny_models import make_tiny_lm

PROMPTS = [
    "the cat sat on the mat and the cat sat on the",
    "def x ( y ) : return x + 1 def x ( y ) : return",
    "print value list of print value list of print value",
    "a b",
]
HEADS = [(0, 1), (1, 2), (1, 0)]


# Baseline and PLD+ share one model, so one attention kernel (spec A17): eager returns the weights, sdpa makes the
# runner compute the heads' rows from their queries and keys (multidraft.models.attention_rows).
@pytest.fixture(scope="module", params=[("llama", "eager"), ("qwen2", "eager"), ("llama", "sdpa"), ("qwen2", "sdpa")],
                ids=lambda p: "-".join(p))
def both_lms(request):
    arch, kernel = request.param
    return make_tiny_lm(arch, seed=2, attn_implementation=kernel)


@pytest.fixture(scope="module")
def eager_lm():
    return make_tiny_lm("llama", seed=2, attn_implementation="eager")


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def llama_lm(request):
    return make_tiny_lm("llama", seed=2, attn_implementation=request.param)


def options(rank_by):
    return {"induction_heads": HEADS} if rank_by == "attention" else {}


@pytest.mark.parametrize("rank_by", ["hidden", "attention", "first"])
def test_greedy_equality(both_lms, rank_by):
    eager_lm = both_lms
    for prompt, max_new in zip(PROMPTS, (40, 30, 7, 12)):
        if True:
            greedy = multidraft.generate(eager_lm, prompt, max_new_tokens=max_new)
            for k in ((1, 10, 70) if rank_by != "first" else (10,)):
                out = multidraft.generate(eager_lm, prompt, method="pld_plus", rank_by=rank_by, num_draft_tokens=k,
                                          max_new_tokens=max_new, **options(rank_by))
                assert out.token_ids == greedy.token_ids, (prompt, max_new, k)
                stats = out.stats
                assert stats.generated_tokens == len(greedy.token_ids)
                assert stats.generated_tokens == stats.verification_calls + stats.draft_tokens_accepted


def test_drafts_are_accepted_on_repetitive_text(eager_lm):
    accepted = sum(multidraft.generate(eager_lm, p, method="pld_plus", rank_by=r, max_new_tokens=30,
                                       **options(r)).stats.draft_tokens_accepted
                   for p in PROMPTS[:2] for r in ("hidden", "attention"))
    assert accepted > 0


@pytest.mark.parametrize("rank_by", ["hidden", "attention"])
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_seeded_sampling_equals_plain_sampling(both_lms, rank_by, temperature, top_p):
    eager_lm = both_lms
    for seed in range(2):
        plain = multidraft.generate(eager_lm, PROMPTS[1], method="sample", temperature=temperature, top_p=top_p,
                                    seed=seed, max_new_tokens=30)
        ours = multidraft.generate(eager_lm, PROMPTS[1], method="pld_plus", rank_by=rank_by, temperature=temperature,
                                   top_p=top_p, seed=seed, max_new_tokens=30, **options(rank_by))
        assert ours.token_ids == plain.token_ids


def run_loop(lm, prompt, drafter, max_new_tokens=40):
    ids = lm.encode(prompt)
    output = OutputCollector(lm, max_new_tokens)
    stats = DecodeStats()
    draft_and_verify(lm, ids, drafter, GreedyVerifier(), PositionSampler(SamplingParams()), output, stats)
    return ids, output.token_ids, stats


class Checked(PLDPlusDrafter):
    """Records every draft with its source, and sometimes spoils a draft's last token to force rejections."""

    def __init__(self, lm, spoil=False, **kw):
        super().__init__(lm, **kw)
        self.spoil, self.records, self.store_checks = spoil, [], []

    def propose(self, state, max_tokens):
        draft = super().propose(state, max_tokens)
        self.records.append((list(state.seq), self.last_source, list(draft.token_ids), max_tokens))
        if self.spoil and len(draft) >= 2 and len(self.records) % 2:
            draft.token_ids[-1] = (draft.token_ids[-1] + 1) % state.lm.vocab_size
        return draft

    def observe(self, state, draft, verdict, forward_output, kept_rows):
        super().observe(state, draft, verdict, forward_output, kept_rows)
        self.store_checks.append((list(state.seq), len(verdict.accepted_nodes) < len(draft)))


def full_forward_artifacts(lm, seq, layer=None, heads=None):
    out = lm.forward(lm.new_cache(), seq[:-1], hidden_layer=layer, attention_heads=heads)
    if out.attention is None:
        return out.hidden, None
    if isinstance(out.attention, torch.Tensor):
        return out.hidden, out.attention[:, -1]
    return out.hidden, out.attention.weights(len(seq) - 2, range(len(seq) - 1))


@pytest.mark.parametrize("rank_by", ["hidden", "attention"])
def test_store_equals_a_full_forward_after_accepts_and_rejects(llama_lm, rank_by):
    eager_lm = llama_lm
    drafter = Checked(eager_lm, spoil=True, rank_by=rank_by, layer=1, **options(rank_by))
    snapshots = []
    original = drafter.observe

    def observe(state, draft, verdict, forward_output, kept_rows):
        original(state, draft, verdict, forward_output, kept_rows)
        store = drafter.hidden_store.rows.clone() if rank_by == "hidden" else drafter.attention_store.row.clone()
        snapshots.append((list(state.seq), store))
    drafter.observe = observe
    run_loop(eager_lm, PROMPTS[0], drafter)
    rejected = [r for _, r in drafter.store_checks if r]
    assert len(snapshots) >= 5 and rejected, "the run must include several steps and some rejections"
    for seq, stored in snapshots[:: max(1, len(snapshots) // 6)] + [snapshots[-1]]:
        hidden, row = full_forward_artifacts(eager_lm, seq, layer=1 if rank_by == "hidden" else None,
                                             heads=HEADS if rank_by == "attention" else None)
        expected = hidden if rank_by == "hidden" else row
        assert stored.shape == expected.shape
        assert stored.shape[0 if rank_by == "hidden" else 1] == len(seq) - 1
        torch.testing.assert_close(stored, expected, atol=1e-5, rtol=1e-4)


def test_long_drafts_only_after_a_fully_accepted_one(eager_lm):
    """Two draft lengths: short_draft_tokens after a rejection or a fresh start, num_draft_tokens while copying."""
    seq = [5, 6, 7, 8, 9] * 6
    state = LoopState(seq=seq, prompt_length=len(seq), lm=eager_lm, sampler=None, stats=None)
    drafter = PLDPlusDrafter(eager_lm, rank_by="first", num_draft_tokens=12, short_draft_tokens=3)
    drafter.begin(state, None)
    first = drafter.propose(state, 100)
    assert len(first) == 3
    drafter.observe(state, first, Verdict(accepted_nodes=[0, 1, 2], next_token=5), None, [])
    second = drafter.propose(state, 100)
    assert len(second) == 12 and second.token_ids == seq[5:17]
    drafter.observe(state, second, Verdict(accepted_nodes=[0, 1], next_token=5), None, [])
    assert len(drafter.propose(state, 100)) == 3
    drafter.begin(state, None)                # a new generation starts short
    assert len(drafter.propose(state, 100)) == 3
    fixed = PLDPlusDrafter(eager_lm, rank_by="first", num_draft_tokens=12, short_draft_tokens=None)
    fixed.begin(state, None)
    assert len(fixed.propose(state, 100)) == 12


@pytest.mark.parametrize("rank_by", ["hidden", "attention", "first"])
def test_drafts_are_contiguous_copies_from_the_context(eager_lm, rank_by):
    drafter = Checked(eager_lm, rank_by=rank_by, num_draft_tokens=6, layer=1, **options(rank_by))
    run_loop(eager_lm, PROMPTS[2], drafter)
    proposed = 0
    for seq, source, draft, max_tokens in drafter.records:
        if source is None:
            assert draft == [] and (seq[-1] not in seq[:-1] or rank_by == "hidden" or max_tokens == 0)
            continue
        proposed += 1
        assert 0 <= source <= len(seq) - 2 and seq[source] == seq[-1]
        assert draft == seq[source + 1: source + 1 + len(draft)]
        assert 1 <= len(draft) <= min(6, len(seq) - 1 - source, max_tokens)
    assert proposed > 0


def test_no_candidate_gives_a_one_token_step(eager_lm):
    # "w5" never occurred before the last position: no draft, the step emits exactly one token.
    drafter = PLDPlusDrafter(eager_lm, rank_by="hidden", layer=1)
    ids = eager_lm.encode("the cat sat on the mat w5")
    state = LoopState(seq=ids, prompt_length=len(ids), lm=eager_lm, sampler=None, stats=None)
    cache, prefill = eager_lm.prefill(ids[:-1], hidden_layer=1)
    drafter.begin(state, prefill)
    assert len(drafter.propose(state, 10)) == 0 and drafter.last_source is None


def test_first_ranker_equals_hf_prompt_lookup_with_unigrams(eager_lm):
    for prompt in PROMPTS[:2]:
        ours = multidraft.generate(eager_lm, prompt, method="pld_plus", rank_by="first", num_draft_tokens=5,
                                   short_draft_tokens=None, max_new_tokens=30, draft_length="fixed")
        pld = multidraft.generate(eager_lm, prompt, method="pld", variant="hf", max_ngram=1, num_draft_tokens=5,
                                  max_new_tokens=30, draft_length="fixed")
        assert ours.token_ids == pld.token_ids
        assert ours.stats.acceptance_histogram == pld.stats.acceptance_histogram
        assert ours.stats.draft_tokens_proposed == pld.stats.draft_tokens_proposed


# ----- the worked example of specs/pldplus.md §3.6 -----
def test_worked_example(eager_lm):
    words = "The cat sat . The dog ran . The".split()
    vocab = {w: i + 10 for i, w in enumerate(dict.fromkeys(words))}
    seq = [vocab[w] for w in words]                  # positions 0..8; artifacts cover 0..7
    assert candidates(seq).tolist() == [0, 4]
    state = LoopState(seq=seq, prompt_length=len(seq), lm=eager_lm, sampler=None, stats=None)

    hidden = PLDPlusDrafter(eager_lm, rank_by="hidden", layer=1, num_draft_tokens=70, short_draft_tokens=None)
    hidden.hidden_store.append(torch.randn(8, eager_lm.hidden_size))
    draft = hidden.propose(state, 70)
    assert hidden.last_source == 4 and draft.token_ids == seq[5:9]        # "dog ran . The": p=0 has no H[-1]

    attention = PLDPlusDrafter(eager_lm, rank_by="attention", induction_heads=[(0, 0), (1, 3)], num_draft_tokens=70,
                               short_draft_tokens=None)
    row = torch.full((2, 8), 0.01)
    row[1, 0], row[0, 4] = 0.5, 0.3                   # head (1,3) peaks on p=0, above head (0,0)'s weight on p=4
    attention.attention_store.row = row
    draft = attention.propose(state, 70)
    assert attention.last_source == 0 and draft.token_ids == seq[1:9]      # "cat sat . The dog ran . The"
    row[0, 4] = 0.6
    assert attention.propose(state, 70).token_ids == seq[5:9]
    assert lookup(seq, 3, 10, 70, variant="reference") == []             # reference PLD proposes nothing


# ----- rankers on mocked stores -----
def test_hidden_ranking_picks_the_parallel_candidate_and_is_scale_invariant():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(20, 16, generator=gen)
    positions = np.array([3, 7, 11, 15])
    hidden[10] = 2.5 * hidden[19]                     # H[p-1] parallel to H[q] only for p = 11
    assert rank_hidden(hidden, positions) == 11
    assert rank_hidden(hidden * 7.0, positions) == 11
    assert rank_hidden(hidden, positions, window=1) == rank_hidden(hidden, positions)
    assert rank_hidden(hidden, np.array([0])) is None                        # p = 0 has no H[-1]
    assert rank_hidden(hidden, positions, theta=1.0) is None                 # strict >: nothing passes
    assert rank_hidden(hidden, positions, theta=-1.01) == rank_hidden(hidden, positions)
    hidden[2] = hidden[6] = hidden[19]
    assert rank_hidden(hidden, positions) == 3                               # ties go to the smallest p


def test_hidden_ranking_window_averages_both_sides():
    hidden = torch.randn(12, 8)
    positions = np.array([2, 5, 8])
    window = 2
    query = hidden[10:12].mean(0)
    scores = [torch.cosine_similarity(hidden[p - 2:p].mean(0), query, dim=0) for p in positions]
    assert rank_hidden(hidden, positions, window=window) == positions[int(torch.stack(scores).argmax())]


def test_attention_ranking_max_and_sum():
    row = torch.zeros(2, 10)
    row[0, 2], row[1, 6], row[0, 6] = 0.5, 0.4, 0.3
    positions = np.array([2, 6])
    assert rank_attention(row, positions, "max") == 2
    assert rank_attention(row, positions, "sum") == 6
    assert rank_attention(row[1:], positions) == 6                            # |S*| = 1: argmax over P
    assert rank_attention(row, np.array([], dtype=np.int64)) is None


def test_empty_context_is_a_clear_error():
    with pytest.raises(PromptError):
        rank_hidden(torch.empty(0, 4), np.array([1]))
    with pytest.raises(PromptError):
        rank_attention(torch.empty(2, 0), np.array([1]))


# ----- head identification (mocked attention) -----
def test_copy_events_and_hits():
    #        prompt: 0  1  2  3  4  5 | generated: 6  7  8
    seq = [5, 6, 7, 5, 6, 8, 5, 6, 9]
    events = list(induction.copy_events(seq, 6))
    # s[6]=5: sources {0, 3}, overlap 1 each -> tie, both count; s[7]=6: sources {1, 4}, "5 6" shared by both
    assert events == [(6, {0, 3}), (7, {1, 4})]                              # token 9 is absent: no event
    argmax = np.zeros((2, 3, len(seq)), dtype=np.int64)
    argmax[0, 0, 5], argmax[0, 0, 6] = 3, 4        # a perfect head: row p-1 lands on a copy source
    argmax[1, 2, 5], argmax[1, 2, 6] = 0, 2        # right once
    argmax[1, 1, :] = 8                            # never right
    hits, count = induction.count_hits(argmax, seq, 6)
    assert count == 2 and hits[0, 0] == 2 and hits[1, 2] == 1 and hits[1, 1] == 0
    ranked = induction.rank_heads(hits)
    assert ranked[0] == (0, 0, 2) and (1, 1) not in [(l, g) for l, g, _ in ranked]
    assert induction.rank_heads(hits, top_k=1) == [(0, 0, 2)]


def test_longest_suffix_source_wins():
    seq = [1, 2, 3, 9, 2, 3, 1, 2, 3]       # prompt 0..5; s[8]=3 has sources 2 ("1 2 3") and 5 ("9 2 3")
    events = dict(induction.copy_events(seq, 6))
    assert events[8] == {2}


def test_calibrate_saves_and_pld_plus_uses_the_induction_heads(eager_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    # Prompts that hold the model's own continuation, so generated tokens do occur in the prompt (copy events).
    prompts = []
    for prompt in PROMPTS[:2]:
        text = prompt + " " + multidraft.generate(eager_lm, prompt, max_new_tokens=12).text
        prompts.append(text + " " + text)
    record = induction.calibrate(eager_lm, prompts, gen_len=20, top_k=5)
    assert record["events"] > 0 and 1 <= len(record["induction_heads"]) <= 5
    assert all(0 <= r <= 1 for *_, r in record["hit_rates"])
    assert 1 <= record["layer"] <= eager_lm.num_layers
    calibration.save(record)
    assert calibration.default_induction_heads(eager_lm, 3) == [tuple(h[:2]) for h in record["induction_heads"][:3]]
    assert calibration.default_layer(eager_lm) == record["layer"]
    greedy = multidraft.generate(eager_lm, PROMPTS[0], max_new_tokens=20)
    out = multidraft.generate(eager_lm, PROMPTS[0], method="pld_plus", rank_by="attention", max_new_tokens=20)
    assert out.token_ids == greedy.token_ids


def test_replay_matches_the_real_loop(eager_lm):
    # The layer sweep replays greedy outputs; its step count must equal what the loop really does.
    for prompt in PROMPTS[:2]:
        out = multidraft.generate(eager_lm, prompt, method="pld_plus", layer=1, num_draft_tokens=10,
                                  short_draft_tokens=None, max_new_tokens=30, draft_length="fixed")
        ids = eager_lm.encode(prompt)
        seq = ids + out.token_ids
        hidden = eager_lm.forward(eager_lm.new_cache(), seq[:-1], hidden_layer=1).hidden

        def choose(prefix):
            return rank_hidden(hidden[: len(prefix) - 1], candidates(prefix))
        tokens, steps = replay_acceptance(seq, len(ids), choose, 10)
        assert (tokens, steps) == (out.stats.generated_tokens, out.stats.verification_calls)


# ----- bad input -----
def test_bad_options(eager_lm):
    sdpa_lm = make_tiny_lm("llama", seed=3)
    bad = [dict(layer=0), dict(layer=eager_lm.num_layers + 1), dict(layer="9"), dict(rank_by="keys"),
           dict(num_draft_tokens=0), dict(short_draft_tokens=0), dict(avg_window=0), dict(theta="high"),
           dict(scope="everywhere"),
           dict(rank_by="attention", induction_heads=[(eager_lm.num_layers, 0)]),
           dict(rank_by="attention", induction_heads=[(0, 99)]),
           dict(rank_by="attention", induction_heads=[]), dict(rank_by="attention", induction_heads=[(0,)]),
           dict(rank_by="attention", induction_heads=HEADS, aggregate="mean"),
           dict(rank_by="attention", induction_head_set="layer:9"), dict(num_induction_heads=0),
           dict(induction_head_set="some")]
    for opts in bad:
        with pytest.raises(InvalidOptionError):
            multidraft.generate(eager_lm, PROMPTS[0], method="pld_plus", max_new_tokens=3, **opts)
    odd = make_tiny_lm("llama", seed=2)     # sdpa, with an attention class the query hooks do not know
    for layer in odd._decoder_layers:
        layer.self_attn.__class__ = type("UnknownAttention", (type(layer.self_attn),), {"__module__": __name__})
    with pytest.raises(InvalidOptionError, match="eager"):
        multidraft.generate(odd, PROMPTS[0], method="pld_plus", rank_by="attention", induction_heads=HEADS,
                            max_new_tokens=3)
    with pytest.raises(InvalidOptionError, match="eager"):
        induction.calibrate(sdpa_lm, PROMPTS[:1], gen_len=5)
    with pytest.raises(InvalidOptionError, match="calibrate"):
        multidraft.generate(eager_lm, PROMPTS[0], method="pld_plus", rank_by="attention",
                            max_new_tokens=3)                          # no calibration for tiny models
    with pytest.raises(PromptError):
        multidraft.generate(eager_lm, "", method="pld_plus", max_new_tokens=3)


@pytest.mark.parametrize("old,new", [("heads", "induction_heads"), ("num_heads", "num_induction_heads"),
                                     ("head_set", "induction_head_set")])
def test_old_head_option_names_are_refused_naming_the_new_one(eager_lm, old, new):
    # "heads" means BPD's prediction heads only: PLD+'s attention-head options were renamed, never silently kept.
    value = {"heads": HEADS, "num_heads": 5, "head_set": "all"}[old]
    with pytest.raises(InvalidOptionError, match=f"no option '{old}' any more: it is now '{new}'"):
        multidraft.generate(eager_lm, PROMPTS[0], method="pld_plus", rank_by="attention", max_new_tokens=3,
                            **{old: value})
    assert get_method("pld_plus").resolve_options({new: value, "rank_by": "attention"})[new] == value


def test_the_drafter_takes_ready_heads_and_layer(eager_lm):
    # Pure proposer: the calibration is read by generate() (pldplus.calibration.resolve_options), not the drafter.
    with pytest.raises(InvalidOptionError, match="needs induction_heads"):
        PLDPlusDrafter(eager_lm, rank_by="attention")
    with pytest.raises(InvalidOptionError, match="layer None does not exist"):
        PLDPlusDrafter(eager_lm, rank_by="hidden")
    assert PLDPlusDrafter(eager_lm, rank_by="attention", induction_heads=[(0, 1)]).capture_options() == \
        {"attention_heads": [(0, 1)]}


def test_ablation_head_sets_are_lossless(eager_lm):
    greedy = multidraft.generate(eager_lm, PROMPTS[0], max_new_tokens=15)
    for opts in (dict(induction_head_set="all"), dict(induction_head_set="layer:1", aggregate="sum")):
        out = multidraft.generate(eager_lm, PROMPTS[0], method="pld_plus", rank_by="attention", max_new_tokens=15, **opts)
        assert out.token_ids == greedy.token_ids
    for opts in (dict(theta=0.0, avg_window=3), dict(scope="prompt")):
        assert multidraft.generate(eager_lm, PROMPTS[0], method="pld_plus", max_new_tokens=15, **opts).token_ids \
            == greedy.token_ids


def test_attention_store_refuses_rows_shorter_than_the_context():
    """Sliding-window layers keep fewer keys than the context has positions: a clear error, not a wrong index."""
    from multidraft.models.attention_rows import AttentionQueries
    from multidraft.pldplus.store import AttentionRowStore
    store = AttentionRowStore()
    store.set(torch.rand(2, 1, 6), 0, range(6))
    assert store.length == 6
    with pytest.raises(InvalidOptionError, match="sliding-window"):
        store.set(torch.rand(2, 1, 4), 0, range(6))
    short = AttentionQueries([torch.rand(1, 8)], [torch.rand(4, 8)], [1.0])
    with pytest.raises(InvalidOptionError, match="sliding-window"):
        store.set(short, 0, range(6))
