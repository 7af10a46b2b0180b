"""The server's app is a small service object plus routes (issue #30); the caller's configuration is never
rewritten, and one /v1/completions request runs through one library Request per prompt."""

import asyncio

from multidraft.server.app import create_app
from multidraft.server.config import ServerConfig
from multidraft.server.schemas import CompletionRequest, parse_body
from multidraft.server.service import GenerationService
from tests.tiny_models import make_tiny_lm


def test_create_app_leaves_the_configuration_as_given():
    lm, draft = make_tiny_lm("qwen2", seed=4), make_tiny_lm("qwen2", seed=9)
    given = {"ngram": {"corpus": "/srv/corpus.ngram"}}
    config = ServerConfig(artifacts=given)
    app = create_app(lm, config, draft_lm=draft)
    assert config.artifacts is given and given == {"ngram": {"corpus": "/srv/corpus.ngram"}}
    service = app.state.service
    assert isinstance(service, GenerationService)
    assert service.page_config()["artifacts"] == {"ngram": ["default", "corpus"], "draft_model": ["default", draft.name]}
    service.close()


def test_one_request_through_the_service():
    lm = make_tiny_lm("qwen2", seed=4)
    service = GenerationService(lm, ServerConfig(max_tokens=8).validate())
    body = parse_body(b'{"prompt": ["the cat", "a dog"], "max_tokens": 4, "method": "pld"}', CompletionRequest)
    plan = service.plan(body, None)
    assert [r.prompt for r in plan.requests] == ["the cat", "a dog"] and plan.method == "pld"

    async def run():
        job = service.submit(plan, __import__("time").monotonic())
        events = []
        while not events or events[-1][0] not in ("done", "error"):
            events.append(await service.next_event(job))
        return events

    events = asyncio.run(run())
    assert events[-1][0] == "done", events[-1]
    outcome = events[-1][1]
    assert len(outcome.choices) == 2 and outcome.prompt_tokens == sum(len(lm.encode(p)) for p in ["the cat", "a dog"])
    service.close()
