"""End to end in headless Chromium (Debian's /usr/bin/chromium driven by Playwright): type into the page,
see k suggestions with stats, Tab accepts the first one, a newer keystroke aborts the request in flight."""

import os
import shutil

import pytest

from multidraft.server import ServerConfig, ServerThread, create_app
from multidraft.server.plan import suggestion_defaults

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
K = 3


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("chromium is missing; `make browser` installs it")
        pytest.skip("chromium is not installed (`make browser`)")
    sync_api = pytest.importorskip("playwright.sync_api")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def server(smollm):
    config = ServerConfig(suggestions=K, suggestion_tokens=6)
    with ServerThread(create_app(smollm, config)) as running:
        yield running


def test_typing_shows_k_suggestions_and_tab_accepts(server, browser_context):
    page = browser_context.new_page()
    page.set_default_timeout(90_000)
    aborted, answered = [], []
    page.on("requestfailed", lambda r: aborted.append(r.url) if "/v1/completions" in r.url else None)
    page.on("requestfinished", lambda r: answered.append(r.url) if "/v1/completions" in r.url else None)
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready='1']")
    expected_method = suggestion_defaults(ServerConfig())["method"]
    assert page.input_value("#method") == expected_method

    editor = page.locator("#editor")
    editor.click()
    editor.press_sequentially("def add(a, b):", delay=30)      # faster than the debounce: one request
    page.wait_for_function(f"document.querySelectorAll('#suggestions .suggestion').length === {K}")
    assert len(answered) == 1
    stats = page.inner_text("#stats")
    assert expected_method in stats and "generated tokens" in stats and "mean acceptance length" in stats
    suggestions = page.locator("#suggestions .suggestion").all_inner_texts()
    assert len(suggestions) == K

    # A keystroke while a request is in flight aborts it; the newest text gets its own suggestions.
    with page.expect_request(lambda r: "/v1/completions" in r.url):
        editor.press_sequentially("\n", delay=0)
    editor.press_sequentially("    ", delay=0)
    page.wait_for_function("document.getElementById('status').textContent.includes('suggestions in')")
    page.wait_for_timeout(300)
    assert aborted, "the stale request was not aborted"
    first = page.evaluate("state.suggestions[0]")
    before = editor.input_value()
    editor.press("Tab")
    assert editor.input_value() == before + first
    assert page.evaluate("document.activeElement.id") == "editor"    # Tab did not move the focus
    page.close()


def test_page_with_an_api_key_asks_for_it_and_keeps_it_in_the_tab(browser_context):
    from tests.tiny_models import make_tiny_lm
    key = "sk-page-test-key"
    config = ServerConfig(suggestions=2, suggestion_tokens=3, api_key=key)
    with ServerThread(create_app(make_tiny_lm("llama", seed=3), config)) as running:
        page = browser_context.new_page()
        page.set_default_timeout(90_000)
        page.goto(running.url + "/")
        page.wait_for_selector("body[data-ready='1']")
        assert key not in page.content()                       # the server never writes the key into the page
        assert page.is_visible("#api-key")
        editor = page.locator("#editor")
        editor.click()
        editor.press_sequentially("the cat", delay=30)
        page.wait_for_function("document.getElementById('status').textContent.includes('API key')")
        page.fill("#api-key", key)
        page.press("#api-key", "Enter")                        # change: store it and ask again
        page.wait_for_function("document.querySelectorAll('#suggestions .suggestion').length === 2")
        assert page.evaluate("sessionStorage.getItem('multidraft-api-key')") == key
        page.close()
