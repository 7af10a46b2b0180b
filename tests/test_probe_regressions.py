"""Issue #35's probe cases replayed: API keys that silently turned auth off or could never match, suffix-store
isolation keyed by unauthenticated strings, OpenAI fields dropped whatever their value, server paths in client
messages, bad artifacts found per request instead of at start, and `models verify`'s exit status."""

import hashlib

import httpx
import pytest

from multidraft.errors import InvalidOptionError
from multidraft.server import ServerConfig, ServerThread, create_app
from tests.tiny_models import make_tiny_lm

PROMPT = "the cat sat on the mat and the cat sat on the"


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=3)


def serve_args(*argv):
    from multidraft.cli import build_parser
    from multidraft.server.cli import build_config
    return build_config(build_parser().parse_args(["serve", *argv]))


# ------------------------------------------------------------------ 5. API keys


def test_an_empty_api_key_is_refused_not_auth_off(monkeypatch, capsys):
    from multidraft.cli import main
    from multidraft.server.cli import ServeError
    monkeypatch.delenv("MULTIDRAFT_API_KEY", raising=False)
    with pytest.raises(ServeError, match="empty"):
        serve_args("--api-key", "")
    monkeypatch.setenv("MULTIDRAFT_API_KEY", "")
    with pytest.raises(ServeError, match="set but empty"):
        serve_args()
    assert main(["serve", "--model", "no-such-model", "--api-key", ""]) == 2          # one line, before any load
    assert "--api-key is empty" in capsys.readouterr().err
    monkeypatch.delenv("MULTIDRAFT_API_KEY")
    assert serve_args().api_keys == ()                                               # no flag, no variable: no auth
    with pytest.raises(InvalidOptionError, match="empty"):
        ServerConfig(api_key="").validate()


@pytest.mark.parametrize("key", ["clé-secrète", " padded", "tab\tkey", "ключ"])
def test_a_key_no_client_could_send_is_refused_at_start(key):
    with pytest.raises(InvalidOptionError, match="printable ASCII"):
        serve_args("--api-key", key)


def test_several_keys_each_authenticate(lm):
    config = serve_args("--api-key", "sk-one", "--api-key", "sk-two")
    assert config.api_keys == ("sk-one", "sk-two")
    with ServerThread(create_app(lm, config)) as running:
        url = running.url + "/v1/completions"
        body = {"prompt": PROMPT, "max_tokens": 2}
        for key, status in (("sk-one", 200), ("sk-two", 200), ("sk-three", 401), ("sk-one sk-two", 401)):
            assert httpx.post(url, json=body, headers={"Authorization": f"Bearer {key}"}).status_code == status, key
        assert httpx.post(url, json=body).status_code == 401
        # UTF-8 bytes in the header (curl sends them as they are) never match and never crash the check
        raw = httpx.post(url, json=body, headers=[(b"Authorization", "Bearer sk-oné".encode())])
        assert raw.status_code == 401


# ------------------------------------------------------------------ 4. suffix-store isolation


def test_isolation_is_keyed_by_the_authenticated_key_only(lm):
    """The probe's case: without auth, two clients sending `Bearer EMPTY` shared a store and a client could probe
    another's text. Now isolation needs one key per client; a request's store is its key's, proved by the key."""
    with pytest.raises(InvalidOptionError, match="one key per client"):
        ServerConfig(suffix_isolation=True).validate()
    with pytest.raises(InvalidOptionError, match="one key per client"):
        serve_args("--suffix-isolation", "--api-key", "only")
    config = serve_args("--suffix-isolation", "--api-key", "alice-key", "--api-key", "bob-key",
                        "--suffix-store-tokens", "5000")
    app = create_app(lm, config)
    secret = "the zebra quietly ate forty purple lemons while the zebra"
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        def ask(key, prompt):
            response = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "method": "suffix"},
                                   headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200, response.text
            return response.json()["stats"]
        ask("alice-key", secret)
        stores = app.state.suffix_stores
        alice = stores.for_key(hashlib.sha256(b"alice-key").hexdigest())
        bob = stores.for_key(hashlib.sha256(b"bob-key").hexdigest())
        assert alice.num_documents == 1 and bob.num_documents == 0
        ask("bob-key", secret)
        assert alice.num_documents == 1 and bob.num_documents == 1       # bob's request met only bob's store
        ask("alice-key", "a dog")
        assert alice.num_documents == 2 and bob.num_documents == 1 and len(stores) == 2
        assert client.post("/v1/completions", json={"prompt": secret, "method": "suffix"},
                           headers={"Authorization": "Bearer EMPTY"}).status_code == 401


def test_the_readme_says_what_the_shared_store_leaks():
    from pathlib import Path
    security = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    assert "--suffix-isolation" in security and "shared" in security and "acceptance" in security


# ------------------------------------------------------------------ 6. fields refused, not dropped


@pytest.fixture(scope="module")
def server(lm, dense_ngram_path):
    config = ServerConfig(max_tokens=16, artifacts={"ngram": {"tiny": str(dense_ngram_path)}})
    with ServerThread(create_app(lm, config)) as running:
        yield running


@pytest.mark.parametrize("extra, status", [
    ({"method": "suffix", "store": "/etc/passwd"}, 400), ({"store": True}, 400), ({"store": 0}, 400),
    ({"store": False}, 200), ({"store": None}, 200),
    ({"user": 5}, 400), ({"user": "alice"}, 200),
    ({"metadata": "x"}, 400), ({"metadata": {"a": 1}}, 400), ({"metadata": {"a": "b"}}, 200),
    ({"service_tier": "priority"}, 400), ({"service_tier": "auto"}, 200), ({"service_tier": "default"}, 200),
])
def test_openai_bookkeeping_fields_are_checked(server, extra, status):
    body = {"prompt": PROMPT, "max_tokens": 2, **extra}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["param"] == next(k for k in extra if k != "method")


# ------------------------------------------------------------------ 7. server paths never reach clients


def test_no_server_path_in_an_error_message(server, tmp_path):
    from multidraft import paths
    home = str(paths.home())
    for body in ({"method": "blockwise"}, {"method": "blockwise", "rescoring": "ngram", "ngram": "tiny"}):
        response = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **body},
                              timeout=60)
        assert response.status_code in (400, 500)
        message = response.json()["error"]["message"]
        assert "/" not in message.replace("<server path>", "").replace("tokens/s", ""), message
        assert home not in message and "<server path>" in message


def test_a_bad_artifact_stops_the_start(tmp_path, capsys):
    from multidraft.cli import main
    not_ngram = tmp_path / "x.ngram"
    not_ngram.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    assert main(["serve", "--model", "no-such-model", "--ngram", f"x={not_ngram}"]) == 2
    assert "not a multidraft n-gram file" in capsys.readouterr().err
    assert main(["serve", "--model", "no-such-model", "--heads", f"h={not_ngram}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be read" in err and len(err.splitlines()) == 1 and len(err) < 400


def test_redaction_keeps_ordinary_text():
    from multidraft.server.service import _without_paths
    assert _without_paths("n-gram file /srv/x/y.ngram is bad; see ~/z") == "n-gram file <server path> is bad; see <server path>"
    for text in ("3 tokens/s, 1/2 of a/b", "GET /v1/models", "top_p must be in [1e-05, 1]"):
        assert _without_paths(text) == text


# ------------------------------------------------------------------ 10. models verify exit status


def test_models_verify_failed_exits_2(tmp_path, monkeypatch, capsys):
    from multidraft.cli import main
    from multidraft.models import registry
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    alias = next(iter(registry.MODELS))
    assert main(["models", "verify", alias]) == 2
    assert "FAILED (not pulled)" in capsys.readouterr().out
