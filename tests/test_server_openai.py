"""The official `openai` Python client against a live `multidraft` server on loopback, with SmolLM2-135M."""

import openai
import pytest

import multidraft
from multidraft.server import ServerConfig, ServerThread, create_app

pytestmark = pytest.mark.real_model

PROMPT = "def fibonacci(n):\n    "


@pytest.fixture(scope="module")
def server(smollm):
    config = ServerConfig(max_n=4, max_tokens=32, draft_length="fixed")     # fixed: the tests count drafted tokens
    with ServerThread(create_app(smollm, config)) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_list(client, smollm):
    assert [m.id for m in client.models.list()] == [smollm.name]


def test_completion_greedy_equals_library_and_streams_the_same(client, smollm):
    reply = client.completions.create(model=smollm.name, prompt=PROMPT, max_tokens=8, temperature=0)
    direct = multidraft.generate(smollm, PROMPT, max_new_tokens=8)
    assert reply.choices[0].text == direct.text
    assert reply.usage.completion_tokens == len(direct.token_ids)
    stats = reply.model_extra["stats"]
    assert stats["method"] == "greedy" and stats["generated_tokens"] == len(direct.token_ids)

    chunks = list(client.completions.create(model=smollm.name, prompt=PROMPT, max_tokens=8, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == direct.text      # every chunk has a choice, as OpenAI's
    chunks = list(client.completions.create(model=smollm.name, prompt=PROMPT, max_tokens=8, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == direct.text
    assert chunks[-1].usage.completion_tokens == len(direct.token_ids)


def test_completion_with_a_method_and_its_options(client, smollm):
    prompt = "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2,"
    reply = client.completions.create(model=smollm.name, prompt=prompt, max_tokens=8, temperature=0,
                                      extra_body={"method": "pld", "num_draft_tokens": 4})
    assert reply.choices[0].text == multidraft.generate(smollm, prompt, max_new_tokens=8).text   # lossless
    assert reply.model_extra["method"] == "pld"
    assert reply.model_extra["stats"]["draft_tokens_proposed"] > 0


def test_chat_n_choices_streamed_and_not(client, smollm):
    messages = [{"role": "user", "content": "Name a colour."}]
    kwargs = dict(model=smollm.name, messages=messages, max_tokens=6, n=2, temperature=0.9, seed=7)
    reply = client.chat.completions.create(**kwargs)
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.message.role == "assistant" for c in reply.choices)
    streamed = {0: "", 1: ""}
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert streamed == {c.index: c.message.content for c in reply.choices}
    direct = multidraft.generate(smollm, messages, method="sample", temperature=0.9, seed=8, max_new_tokens=6)
    assert reply.choices[1].message.content == direct.text


def test_client_errors(client, smollm):
    with pytest.raises(openai.BadRequestError, match="'n' must be between 1 and 4"):
        client.completions.create(model=smollm.name, prompt=PROMPT, n=9)
    with pytest.raises(openai.BadRequestError, match="has no option 'bogus'"):
        client.completions.create(model=smollm.name, prompt=PROMPT, extra_body={"method": "pld", "bogus": 1})
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4o", prompt=PROMPT)
    assert client.completions.create(model=smollm.name, prompt=PROMPT, max_tokens=1).choices[0].text is not None
