"""Issue 46 item 2: a request whose tokens depend on how deep its drafts are (rejection sampling with a draft model,
the lossy mtad / bild) gets the same tokens whatever the machine measured: alone with any forward timings, inside
any engine batch, and from `generate()`, with draft_length="adaptive" (the commands' default).

The timings are injected: the model's cost table (decoders/draft_length.py `forward_costs`) is frozen at a table
where a long draft is free, or one where every drafted row is dear, so the adaptive policy would ask for very
different draft lengths. Before the fix those gave different texts for the same seed."""

import pytest

import multidraft
from multidraft import Engine, Request
from multidraft.decoders.draft_length import ForwardCosts, forward_costs

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "the cat sat on the mat and the cat sat on"
OTHERS = ["a dog ran on the mat . a dog ran", "def x ( y ) : return x ( y ) + 1 if x",
          "then the cat ran and the dog sat on the mat . then"]
# Free: a forward of 16 rows costs what one costs (deep drafts); dear: each extra row doubles the cost (none).
TIMINGS = {"free": {n: 1.0 for n in range(1, 40)}, "dear": {n: float(2 ** min(n - 1, 30)) for n in range(1, 40)}}
SIX, BILD_SIX = {"num_draft_tokens": 6}, {"max_draft_tokens": 6}
SAMPLED = [("speculative", SIX, 0.9), ("multi_draft", SIX, 0.9), ("mtad", SIX, 0.9), ("bild", BILD_SIX, 0.9),
           ("bild", BILD_SIX, 0.0), ("mtad", SIX, 0.0)]


@pytest.fixture
def frozen_costs(target, monkeypatch):
    """set(name): the target's cost table becomes TIMINGS[name] and learns nothing more while decoding."""
    monkeypatch.setattr(ForwardCosts, "record", lambda self, num_new, seconds: None)
    costs = forward_costs(target)
    saved = dict(costs.seconds)

    def set_timings(name):
        costs.seconds = dict(TIMINGS[name])
    yield set_timings
    costs.seconds = saved


def _request(draft, method, options, temperature, seed=1001, prompt=PROMPT, max_new_tokens=24):
    return Request.build(prompt, method, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                         top_p=0.95, draft_length="adaptive", options=dict(draft_model=draft, **options))


@pytest.mark.parametrize("method,options,temperature", SAMPLED, ids=[f"{m}-t{t}" for m, _, t in SAMPLED])
def test_tokens_do_not_depend_on_measured_timings(target, draft, frozen_costs, method, options, temperature):
    request = _request(draft, method, options, temperature)
    artifacts = multidraft.Artifacts()
    texts = {}
    for timings in TIMINGS:
        frozen_costs(timings)
        texts[timings] = multidraft.generate_request(target, request, artifacts=artifacts).token_ids
    assert texts["free"] == texts["dear"]


@pytest.mark.parametrize("method,options,temperature", SAMPLED[:4], ids=[m for m, _, _ in SAMPLED[:4]])
def test_engine_alone_and_batched_equal_generate(target, draft, frozen_costs, method, options, temperature):
    frozen_costs("free")
    request = _request(draft, method, options, temperature)
    artifacts = multidraft.Artifacts()
    expected = multidraft.generate(target, PROMPT, method, max_new_tokens=24, temperature=temperature, seed=1001,
                                   top_p=0.95, draft_length="adaptive",
                                   draft_model=draft, **options).token_ids
    others = [_request(draft, m, {}, 0.8, seed=7 + i, prompt=p, max_new_tokens=30)
              for i, (m, p) in enumerate(zip(("speculative", "multi_draft", "bild"), OTHERS))]
    for timings, batch in (("free", []), ("dear", []), ("free", others), ("dear", others)):
        frozen_costs(timings)
        engine = Engine(target, max_num_seqs=4, artifacts=artifacts)
        ids = [engine.submit(r) for r in [*batch[:1], request, *batch[1:]]]
        engine.run()
        results = [engine.take(i) for i in ids]
        assert results[1 if batch else 0].token_ids == expected, (timings, len(batch))
