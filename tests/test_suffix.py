"""method="suffix": the suffix automaton against brute force, the drafter's losslessness (greedy and seeded
sampling, with empty, helpful and misleading stores), the store's bound, isolation, files and errors."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import multidraft
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.errors import CorruptCacheError, InvalidOptionError, TokenizerMismatchError
from multidraft.suffix import SuffixAutomaton, SuffixStore
from multidraft.suffix.automaton import SEPARATOR
from multidraft.suffix.registry import StoreRegistry
from tests.tiny_models import make_tiny_lm

PROMPTS = [
    "the cat sat on the mat and the cat sat on the",
    "def x ( y ) : return x + 1 def x ( y ) : return",
    "print value list of print value list of print value",
    "a b",
]
OTHER_TEXT = "dog ran to it was z y x w1 w2 w3 w4 dog ran to it was z y x w5 w6 the cat ran to a mat"


def occurrences(text, pattern):
    n = len(pattern)
    return sum(1 for i in range(len(text) - n + 1) if text[i:i + n] == pattern)


def continuations(text, pattern):
    n = len(pattern)
    return {text[i + n] for i in range(len(text) - n) if text[i:i + n] == pattern}


# ----- the automaton against brute force -----
token_lists = st.lists(st.integers(min_value=-1, max_value=3), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(token_lists, st.data())
def test_counts_and_continuations_match_brute_force(text, data):
    sam = SuffixAutomaton(text)
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i + 1, len(text)))
    pattern = text[i:j]
    if SEPARATOR in pattern:
        return
    state, matched = sam.match(pattern)
    assert matched == len(pattern)
    assert sam.count[state] == occurrences(text, pattern)
    kids = sam.children(state)
    assert {token for token, _, _ in kids} == continuations(text, pattern)
    for token, _, count in kids:
        assert count == occurrences(text, pattern + [token])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_longest_match_walk_is_the_longest_occurring_suffix(text, context):
    sam = SuffixAutomaton(text)
    state, matched = 0, 0
    for end in range(1, len(context) + 1):
        state, matched = sam.step(state, matched, context[end - 1])
        prefix = context[:end]
        best = max(n for n in range(end + 1) if n == 0 or occurrences(text, prefix[end - n:]) > 0)
        assert matched == best
        if matched:
            assert sam.count[state] == occurrences(text, prefix[end - matched:])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=2, max_size=60))
def test_context_match_is_the_longest_suffix_that_ended_earlier(text):
    sam = SuffixAutomaton(text)
    node = sam.link[sam.last]
    n = len(text)
    earlier = [k for k in range(1, n) if occurrences(text[:n - 1], text[n - k:]) > 0]
    assert (sam.length[node] if node > 0 else 0) == max(earlier, default=0)


@settings(max_examples=120, deadline=None)
@given(token_lists, st.integers(1, 12), st.sampled_from([0.0, 0.1, 0.3]), st.data())
def test_every_drafted_continuation_occurs_with_its_stated_count(text, budget, min_prob, data):
    sam = SuffixAutomaton(text)
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i + 1, min(len(text), i + 4)))
    pattern = text[i:j]
    if SEPARATOR in pattern:
        return
    state, _ = sam.match(pattern)
    tokens, parents, probs, counts = sam.draft_tree(state, budget, min_prob, stop_tokens=frozenset({3}))
    assert len(tokens) <= budget
    paths = []
    for node, (token, parent) in enumerate(zip(tokens, parents)):
        assert parent < node and token not in (SEPARATOR, 3)
        path = (paths[parent] if parent >= 0 else []) + [token]
        paths.append(path)
        assert counts[node] == occurrences(text, pattern + path) > 0
        # probability = product of count(child) / count(all continuations of the parent)
        prev = pattern + path[:-1]
        total = sum(occurrences(text, prev + [c]) for c in continuations(text, prev))
        parent_prob = probs[parent] if parent >= 0 else 1.0
        assert probs[node] == pytest.approx(parent_prob * counts[node] / total)
        assert probs[node] >= min_prob
    assert len({tuple(p) for p in paths}) == len(paths)          # no duplicate branch
    # best-first: nothing left out is more probable than what was drafted (when the budget was the limit)
    if len(tokens) == budget and probs:
        drafted = {tuple(p) for p in paths}
        frontier = [p + [c] for p in [[]] + paths for c in continuations(text, pattern + p)
                    if tuple(p + [c]) not in drafted and c not in (SEPARATOR, 3)]
        for extra in frontier:
            prob, prefix = 1.0, []
            for token in extra:
                options = continuations(text, pattern + prefix)
                total = sum(occurrences(text, pattern + prefix + [c]) for c in options)
                prob *= occurrences(text, pattern + prefix + [token]) / total
                prefix.append(token)
            assert prob <= min(probs) + 1e-12


def test_tokens_outside_the_id_range_are_refused():
    with pytest.raises(ValueError):
        SuffixAutomaton([-2])


# ----- losslessness -----
@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=2)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def any_lm(request):
    return make_tiny_lm(request.param, seed=2)


_CACHE: dict = {}


def _greedy(lm, prompt, max_new):
    key = ("greedy", id(lm), prompt, max_new)
    if key not in _CACHE:
        _CACHE[key] = multidraft.generate(lm, prompt, max_new_tokens=max_new).token_ids
    return _CACHE[key]


def _stores(lm):
    """Built once per model; the tests that use them pass update_store=False, so they stay as built."""
    if ("stores", id(lm)) not in _CACHE:
        _CACHE[("stores", id(lm))] = _make_stores(lm)
    return _CACHE[("stores", id(lm))]


def _make_stores(lm):
    own = SuffixStore(lm=lm)
    for prompt in PROMPTS:                      # the model's own earlier outputs: drafts mostly right
        own.add(lm.encode(prompt) + _greedy(lm, prompt, 30))
    misleading = SuffixStore(lm=lm)
    misleading.add(lm.encode(OTHER_TEXT))       # another text: drafts mostly wrong
    return {"none": None, "empty": SuffixStore(), "own": own, "misleading": misleading}


GREEDY_CASES = [(kind, options) for kind in ["none", "empty", "own", "misleading"]
                for options in [{}, {"alpha": 4.0, "min_token_prob": 0.0, "max_draft_tokens": 8}, {"use_context": False}]
                if kind != "none" or options.get("use_context", True)]   # use_context=False needs a store


@pytest.mark.parametrize("store_kind,options", GREEDY_CASES)
def test_greedy_equality(any_lm, store_kind, options):
    store = _stores(any_lm)[store_kind]
    for prompt in PROMPTS:
        for max_new in (1, 7, 30):
            out = multidraft.generate(any_lm, prompt, method="suffix", store=store, update_store=False,
                                      max_new_tokens=max_new, **options)
            assert out.token_ids == _greedy(any_lm, prompt, max_new), (prompt, max_new, store_kind, options)


def test_own_store_is_used_and_helps(lm):
    stores = _stores(lm)
    with_store = without = 0
    for prompt in PROMPTS[:3]:
        a = multidraft.generate(lm, prompt, method="suffix", store=stores["own"], update_store=False, max_new_tokens=30)
        b = multidraft.generate(lm, prompt, method="suffix", max_new_tokens=30)
        with_store += a.stats.verification_calls
        without += b.stats.verification_calls
    assert with_store < without


@pytest.mark.parametrize("store_kind", ["none", "own", "misleading"])
@pytest.mark.parametrize("temperature,top_p", [(0.7, 1.0), (1.0, 0.9)])
def test_seeded_sampling_equals_plain_sampling(lm, store_kind, temperature, top_p):
    store = _stores(lm)[store_kind]
    for seed in range(3):
        plain = multidraft.generate(lm, PROMPTS[1], method="sample", temperature=temperature, top_p=top_p,
                                    seed=seed, max_new_tokens=25)
        ours = multidraft.generate(lm, PROMPTS[1], method="suffix", store=store, update_store=False,
                                   temperature=temperature, top_p=top_p, seed=seed, max_new_tokens=25)
        assert ours.token_ids == plain.token_ids


def test_the_store_learns_across_requests(lm):
    store = SuffixStore()
    first = multidraft.generate(lm, PROMPTS[0], method="suffix", store=store, max_new_tokens=30, draft_length="fixed")
    assert store.num_documents == 1 and store.num_tokens == len(lm.encode(PROMPTS[0])) + 30
    second = multidraft.generate(lm, PROMPTS[0], method="suffix", store=store, max_new_tokens=30, draft_length="fixed")
    assert second.token_ids == first.token_ids
    assert second.stats.verification_calls < first.stats.verification_calls
    assert second.stats.mean_acceptance_length > 3


def test_draft_size_follows_the_match_length(lm):
    store = SuffixStore(lm=lm)
    ids = lm.encode(PROMPTS[0])
    store.add(ids + lm.encode("w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18"))
    for alpha, context_tokens in [(1.0, 2), (1.0, 5), (2.0, 5), (1.0, 30)]:
        drafter = SuffixDrafter(lm, store=store, alpha=alpha, use_context=False, max_draft_tokens=16,
                                min_token_prob=0.1)
        state = multidraft.drafters.base.LoopState(seq=list(ids[-context_tokens:]), prompt_length=context_tokens,
                                                   lm=lm, sampler=None, stats=None)
        drafter.begin(state, None)
        draft = drafter.propose(state, 100)
        assert drafter.last_match == min(context_tokens, len(ids))
        assert len(draft) == min(16, int(np.ceil(alpha * drafter.last_match)))


# ----- the store -----
def test_eviction_keeps_the_bound_and_drops_the_oldest(lm):
    store = SuffixStore(max_tokens=100, low_water=0.5)
    rng = random.Random(0)
    docs = [[rng.randrange(3, 60) for _ in range(rng.randrange(5, 40))] for _ in range(30)]
    for doc in docs:
        store.add(doc)
        assert store.num_tokens <= 100
        assert store.num_tokens == sum(len(d) for d in store.documents)
        kept = [list(d) for d in store.documents]
        assert kept == docs[docs.index(kept[-1]) - len(kept) + 1: docs.index(kept[-1]) + 1]   # newest, in order
        # the automaton holds exactly the kept documents
        text = []
        for d in kept:
            text += d + [SEPARATOR]
        assert store.automaton.num_tokens == len(text)
        probe = kept[0][:3]
        assert store.automaton.count[store.automaton.match(probe)[0]] == occurrences(text, probe)
    assert store.evicted_documents > 0
    long_doc = list(range(3, 63)) * 3
    store.add(long_doc)                                            # longer than the bound: its tail is kept
    assert store.num_tokens <= 100 and list(store.documents[-1]) == long_doc[-100:]


def test_memory_is_reported_and_grows_with_tokens():
    store = SuffixStore()
    empty = store.memory_bytes()
    store.add(list(range(5, 1005)))
    assert store.memory_bytes() > empty + 1000 * 4
    assert store.describe()["memory_bytes"] == store.memory_bytes()


def test_isolation_two_keys_never_draft_from_each_other(lm):
    registry = StoreRegistry(max_tokens=10_000, isolation=True)
    a, b = registry.for_key("key-a"), registry.for_key("key-b")
    assert a is not b and registry.for_key("key-a") is a
    multidraft.generate(lm, PROMPTS[0], method="suffix", store=a, max_new_tokens=20)
    assert b.num_tokens == 0
    drafter = SuffixDrafter(lm, store=b, use_context=False)
    state = multidraft.drafters.base.LoopState(seq=lm.encode(PROMPTS[0]), prompt_length=1, lm=lm, sampler=None,
                                               stats=None)
    drafter.begin(state, None)
    assert len(drafter.propose(state, 10)) == 0                    # nothing of key-a's text reaches key-b
    shared = StoreRegistry(max_tokens=10_000, isolation=False)
    assert shared.for_key("key-a") is shared.for_key("key-b") is shared.for_key(None)


def test_registry_keeps_at_most_max_keys():
    registry = StoreRegistry(max_tokens=100, isolation=True, max_keys=2)
    first = registry.for_key("1")
    registry.for_key("2"), registry.for_key("3")
    assert len(registry) == 2 and registry.for_key("1") is not first


def test_save_load_round_trip(lm, tmp_path):
    store = SuffixStore(max_tokens=5000, lm=lm)
    multidraft.generate(lm, PROMPTS[0], method="suffix", store=store, max_new_tokens=20)
    multidraft.generate(lm, PROMPTS[1], method="suffix", store=store, max_new_tokens=20)
    path = store.save(tmp_path / "store.npz")
    assert not [p for p in tmp_path.iterdir() if p.name != "store.npz"]          # no temporary left behind
    loaded = SuffixStore.load(path, lm=lm)
    assert [list(d) for d in loaded.documents] == [list(d) for d in store.documents]
    assert loaded.fingerprint == store.fingerprint and loaded.max_tokens == 5000
    assert list(loaded.automaton.count) == list(store.automaton.count)
    # fixed: every drafted token verified, so the step count is the store's doing (adaptive follows the timings)
    a = multidraft.generate(lm, PROMPTS[0], method="suffix", store=store, update_store=False, max_new_tokens=20,
                            draft_length="fixed")
    b = multidraft.generate(lm, PROMPTS[0], method="suffix", store=loaded, update_store=False, max_new_tokens=20,
                            draft_length="fixed")
    assert a.token_ids == b.token_ids and a.stats.verification_calls == b.stats.verification_calls
    empty = SuffixStore.load(SuffixStore().save(tmp_path / "empty.npz"))
    assert empty.num_tokens == 0 and empty.fingerprint is None


def test_store_of_another_tokenizer_is_a_clear_error(lm, tmp_path):
    store = SuffixStore(lm=lm)
    store.fingerprint = "vocab-0000000000000000"                  # as if made with another vocabulary
    with pytest.raises(TokenizerMismatchError, match="another tokenizer"):
        multidraft.generate(lm, PROMPTS[0], method="suffix", store=store, max_new_tokens=3)
    path = store.save(tmp_path / "other.npz")
    with pytest.raises(TokenizerMismatchError):
        SuffixStore.load(path, lm=lm)
    SuffixStore.load(path)                                          # without a model to check against, it loads


def test_corrupt_and_missing_files_are_clear_errors(lm, tmp_path):
    store = SuffixStore(lm=lm)
    store.add(lm.encode(PROMPTS[0]))
    good = store.save(tmp_path / "good.npz").read_bytes()
    cases = {"empty.npz": b"", "truncated.npz": good[: len(good) // 2], "text.npz": b"not a zip file"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CorruptCacheError, match="suffix store"):
            SuffixStore.load(tmp_path / name)
    with pytest.raises(CorruptCacheError, match="no suffix store"):
        SuffixStore.load(tmp_path / "missing.npz")
    # a readable file whose header says another format version, or whose arrays disagree
    for name, edit in [("version.npz", lambda h: h.replace(b'"version": 1', b'"version": 99')),
                       ("format.npz", lambda h: h.replace(b"multidraft-suffix-store", b"something-else"))]:
        header = np.load(tmp_path / "good.npz")["header"].tobytes()
        np.savez(tmp_path / name, header=np.frombuffer(edit(header), dtype=np.uint8),
                 tokens=np.load(tmp_path / "good.npz")["tokens"], lengths=np.load(tmp_path / "good.npz")["lengths"])
        with pytest.raises(CorruptCacheError):
            SuffixStore.load(tmp_path / name)
    data = np.load(tmp_path / "good.npz")
    np.savez(tmp_path / "lengths.npz", header=data["header"], tokens=data["tokens"], lengths=data["lengths"] + 1)
    with pytest.raises(CorruptCacheError, match="inconsistent"):
        SuffixStore.load(tmp_path / "lengths.npz")


def test_bad_options(lm):
    for options in [{"store": "a path"}, {"max_draft_tokens": 0}, {"alpha": 0}, {"min_token_prob": 2},
                    {"use_context": False}, {"no_such_option": 1}]:
        with pytest.raises(InvalidOptionError):
            multidraft.generate(lm, PROMPTS[0], method="suffix", max_new_tokens=3, **options)
    for bad in [{"max_tokens": 0}, {"max_tokens": 1.5}, {"low_water": 0}]:
        with pytest.raises(InvalidOptionError):
            SuffixStore(**bad)
    with pytest.raises(InvalidOptionError):
        SuffixStore().add([1, -5])
    store = SuffixStore()
    store.add([])                                                   # an empty document changes nothing
    assert store.num_documents == 0 and store.version == 0


# ----- the real model -----
@pytest.mark.real_model
def test_smollm_greedy_equality_with_a_store(smollm):
    store = SuffixStore(lm=smollm)
    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"
    store.add(smollm.encode(OTHER_TEXT + " The capital of France is Paris."))     # unrelated text first
    greedy = multidraft.generate(smollm, prompt, max_new_tokens=24)
    for _ in range(2):                          # the second run drafts from the first's output in the store
        out = multidraft.generate(smollm, prompt, method="suffix", store=store, max_new_tokens=24,
                                  draft_length="fixed")
        assert out.token_ids == greedy.token_ids
    assert out.stats.mean_acceptance_length > 2 and store.num_documents == 3


def test_server_keeps_one_store_per_api_key_with_isolation(lm):
    """Isolation is keyed by the API key a request authenticated with: one store per configured key; no key or an
    unknown one is a 401, so no client can pick (or share) another's store by sending a made-up bearer string."""
    import hashlib

    import httpx

    from multidraft.server import ServerConfig, ServerThread, create_app

    app = create_app(lm, ServerConfig(max_tokens=16, suffix_store_tokens=1000, suffix_isolation=True,
                                      api_key=("key-a", "key-b")))
    body = {"prompt": PROMPTS[0], "max_tokens": 8, "method": "suffix"}
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        for key in ("key-a", "key-b", "key-a"):
            response = client.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200, response.text
        stores = app.state.suffix_stores
        a, b = (stores.for_key(hashlib.sha256(key.encode()).hexdigest()) for key in ("key-a", "key-b"))
        assert (a.num_documents, b.num_documents) == (2, 1) and len(stores) == 2
        for headers in ({}, {"Authorization": "Bearer EMPTY"}, {"Authorization": "Bearer key-c"}):
            assert client.post("/v1/completions", json=body, headers=headers).status_code == 401
        # OpenAI's own `store` field cannot swap in another store: anything but false is refused
        response = client.post("/v1/completions", json={**body, "store": "/etc/passwd"},
                               headers={"Authorization": "Bearer key-a"})
        assert response.status_code == 400 and response.json()["error"]["param"] == "store"
        assert (a.num_documents, b.num_documents) == (2, 1) and len(stores) == 2


def test_isolation_without_two_keys_is_refused_at_start():
    from multidraft.errors import InvalidOptionError
    from multidraft.server import ServerConfig
    for keys in (None, "only-one", ("same", "same")):
        with pytest.raises(InvalidOptionError, match="one key per client"):
            ServerConfig(suffix_isolation=True, api_key=keys).validate()
    assert ServerConfig(suffix_isolation=True, api_key=["a", "b"]).validate().api_keys == ("a", "b")