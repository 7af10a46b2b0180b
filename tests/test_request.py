"""One Request type and one rule table for the sampling parameters (issue #30): the library, the CLIs, the bench
and the server build the same Request and apply the same rules; the server adds only its bounds."""

import re
from pathlib import Path

import pytest

import multidraft
from multidraft import validation
from multidraft.errors import InvalidOptionError
from multidraft.request import Request
from multidraft.server.config import ServerConfig
from multidraft.server.plan import build_plan
from multidraft.server.schemas import ApiError, CompletionRequest, parse_body
from tests.tiny_models import make_tiny_lm

SRC = Path(__file__).resolve().parents[1] / "src" / "multidraft"


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=4)


def test_the_rules_live_in_request_build():
    assert Request.build("hi", "sample").params.temperature == 1.0
    assert Request.build("hi", "pld").params.temperature == 0.0
    ran = Request.build("hi", "greedy", temperature=0.7, seed=3)
    assert ran.method == "sample" and ran.row.name == "sample" and not ran.greedy
    with pytest.raises(InvalidOptionError, match="temperature > 0"):
        Request.build("hi", "sample", temperature=0)
    with pytest.raises(InvalidOptionError, match="greedy matching"):
        Request.build("hi", "blockwise", temperature=1.0)
    with pytest.raises(InvalidOptionError, match="num_draft_tokens"):
        Request.build("hi", "pld", options={"num_draft_tokens": 0})
    assert Request.build("hi", "pld").options == multidraft.available_methods()["pld"].options


def test_requests_are_independent_values():
    first = Request.build("hi", "sample", seed=1, max_new_tokens=4)
    second = first.with_seed(2)
    assert (first.params.seed, second.params.seed) == (1, 2)
    with pytest.raises(Exception):
        first.method = "greedy"                 # frozen: a request never changes under a running decode
    wider = Request.build("hi", "pld").with_options(num_draft_tokens=3)
    assert wider.options["num_draft_tokens"] == 3
    with pytest.raises(InvalidOptionError):
        Request.build("hi", "pld").with_options(num_draft_tokens=-1)


def test_generate_request_equals_generate(lm):
    request = Request.build("the cat sat", "pld", max_new_tokens=10, options={"num_draft_tokens": 4})
    direct = multidraft.generate(lm, "the cat sat", method="pld", max_new_tokens=10, num_draft_tokens=4)
    assert multidraft.generate_request(lm, request).token_ids == direct.token_ids
    ids = request.prompt_ids(lm)
    assert multidraft.generate_request(lm, request, prompt_ids=ids).token_ids == direct.token_ids


@pytest.mark.parametrize("seed", [-(2 ** 63), -1, 0, 2 ** 62, 2 ** 63 - 1])
def test_one_seed_range_for_library_and_server(seed):
    assert Request.build("hi", "sample", seed=seed).params.seed == seed
    body = parse_body(f'{{"prompt": "hi", "seed": {seed}, "n": 3, "temperature": 1}}'.encode(), CompletionRequest)
    plan = build_plan(body, ServerConfig().validate())
    assert plan.seed == seed
    seeds = [validation.nth_seed(seed, i) for i in range(3)]     # the n choices' seeds stay in the range
    assert all(validation.SEED_RANGE[0] <= s <= validation.SEED_RANGE[1] for s in seeds)
    assert len(set(seeds)) == 3 and seeds[0] == seed


@pytest.mark.parametrize("seed", [2 ** 63, -(2 ** 63) - 1])
def test_seeds_outside_the_range_are_refused_alike(seed):
    with pytest.raises(InvalidOptionError, match="seed"):
        Request.build("hi", "sample", seed=seed)
    body = parse_body(f'{{"prompt": "hi", "seed": {seed}}}'.encode(), CompletionRequest)
    with pytest.raises(ApiError, match="seed must be"):
        build_plan(body, ServerConfig().validate())


def test_the_server_adds_only_its_bounds():
    config = ServerConfig().validate()
    assert Request.build("hi", "sample", top_p=1e-9).params.top_p == 1e-9       # the library takes it
    for field, value, fragment in [("top_p", 1e-9, "top_k=1"), ("temperature", 101, "this server's limit"),
                                   ("temperature", 0.001, "at least 0.01"), ("top_k", 10 ** 7, "this server's limit"),
                                   ("max_tokens", 513, r"this server's limit: serve --max-tokens")]:
        body = parse_body(f'{{"prompt": "hi", "{field}": {value}}}'.encode(), CompletionRequest)
        with pytest.raises(ApiError, match=fragment) as info:
            build_plan(body, config)
        assert info.value.param == field
    # The rule the server and the library share: greedy with a temperature runs (and reports) plain sampling.
    body = parse_body(b'{"prompt": "hi", "method": "greedy", "temperature": 0.5}', CompletionRequest)
    assert build_plan(body, config).method == "sample"


def test_the_server_builds_one_request_per_prompt_with_its_draft_length():
    body = parse_body(b'{"prompt": ["a", "b"], "method": "pld", "num_draft_tokens": 3}', CompletionRequest)
    plan = build_plan(body, ServerConfig(draft_length="adaptive").validate())
    assert [r.prompt for r in plan.requests] == ["a", "b"]
    assert all(r.options["num_draft_tokens"] == 3 and r.draft_length == "adaptive" for r in plan.requests)


def test_draft_length_is_passed_never_stored_on_the_model():
    pattern = re.compile(r"\b(lm|model|target|draft_lm)\.draft_length\b|getattr\((lm|model)\b[^)]*draft_length")
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_cli_sampling_types_use_the_rule_table():
    import argparse
    assert validation.cli_sampling("seed")(str(2 ** 63 - 1)) == 2 ** 63 - 1
    with pytest.raises(argparse.ArgumentTypeError, match="seed"):
        validation.cli_sampling("seed")(str(2 ** 63))
    with pytest.raises(argparse.ArgumentTypeError, match="top_p"):
        validation.cli_sampling("top_p")("0")
