// The autocomplete page: k suggestions for the text before the cursor, refreshed as the user types.
// Requests are debounced; a newer keystroke aborts the request in flight (AbortController), and the
// server cancels its generation when the connection closes.
// With `serve --api-key`, the page asks for the key and keeps it in sessionStorage (this tab only, gone when
// it closes); the server never writes the key into the page, so fetching the page does not reveal it.
"use strict";

const DEBOUNCE_MS = 250;
const $ = (id) => document.getElementById(id);
const state = { defaults: null, timer: null, controller: null, sequence: 0, suggestions: [] };
const KEY_STORAGE = "multidraft-api-key";

async function init() {
  const config = await (await fetch("/config")).json();
  state.defaults = config.suggest;
  $("model").textContent = config.model;
  for (const [name, info] of Object.entries(config.methods)) {
    const option = new Option(`${name}${info.lossless ? "" : " (lossy)"}`, name);
    option.title = info.description;
    $("method").add(option);
  }
  $("method").value = config.suggest.method;
  $("k").value = config.suggest.n;
  $("k").max = config.limits.max_n;
  $("max-tokens").value = config.suggest.max_tokens;
  if (config.auth) {
    $("key-box").hidden = false;
    $("api-key").value = sessionStorage.getItem(KEY_STORAGE) || "";
    $("api-key").addEventListener("input", () => sessionStorage.setItem(KEY_STORAGE, $("api-key").value.trim()));
    $("api-key").addEventListener("change", schedule);
  }
  $("editor").addEventListener("input", schedule);
  $("editor").addEventListener("click", schedule);
  $("editor").addEventListener("keydown", onKey);
  for (const id of ["method", "k", "max-tokens"]) $(id).addEventListener("change", schedule);
  document.body.dataset.ready = "1";
  if ($("editor").value) schedule();
}

function onKey(event) {
  if (event.key === "Tab" && !event.shiftKey && state.suggestions.length) {
    event.preventDefault();
    accept(0);
  } else if (event.key === "Escape") {
    cancelPending();
    render([], null);
  }
}

function cancelPending() {
  clearTimeout(state.timer);
  if (state.controller) state.controller.abort();
  state.controller = null;
  state.sequence += 1;             // any answer still on its way is now stale
}

function schedule() {
  cancelPending();
  state.timer = setTimeout(refresh, DEBOUNCE_MS);
}

async function refresh() {
  const editor = $("editor");
  const prompt = editor.value.slice(0, editor.selectionStart);
  if (!prompt.trim()) { render([], null); setStatus("Start typing."); return; }
  const controller = new AbortController();
  state.controller = controller;
  const sequence = ++state.sequence;
  const method = $("method").value;
  // The server's defaults hold the parameters of its suggestion method; `sample` gets its own.
  const params = method === state.defaults.method ? state.defaults.params
    : method === "sample" ? state.defaults.sample_params : {};
  const body = { prompt, method, n: Number($("k").value), max_tokens: Number($("max-tokens").value), ...params };
  setStatus("…");
  const started = performance.now();
  try {
    const headers = { "Content-Type": "application/json" };
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch("/v1/completions", {
      method: "POST", headers,
      body: JSON.stringify(body), signal: controller.signal,
    });
    const data = await response.json();
    if (sequence !== state.sequence) return;        // the text changed meanwhile
    if (response.status === 401) { setStatus("This server needs its API key: enter it above.", true); return; }
    if (!response.ok) { setStatus(data.error ? data.error.message : response.statusText, true); return; }
    render(data.choices.map((c) => c.text), data.stats);
    setStatus(`${data.choices.length} suggestions in ${Math.round(performance.now() - started)} ms`);
  } catch (error) {
    if (error.name !== "AbortError" && sequence === state.sequence) setStatus(String(error), true);
  } finally {
    if (state.controller === controller) state.controller = null;
  }
}

function accept(index) {
  const text = state.suggestions[index];
  if (text === undefined) return;
  const editor = $("editor");
  const at = editor.selectionStart;
  editor.setRangeText(text, at, editor.selectionEnd, "end");
  editor.focus();
  render([], null);
  schedule();
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function render(texts, stats) {
  state.suggestions = texts;
  const list = $("suggestions");
  list.replaceChildren(...texts.map((text, index) => {
    const item = document.createElement("li");
    item.className = "suggestion" + (text ? "" : " empty");
    item.textContent = text || "(end of text)";
    item.addEventListener("mousedown", (event) => { event.preventDefault(); accept(index); });
    return item;
  }));
  const rows = stats ? [
    ["method", `${stats.method}${stats.lossless ? "" : " (lossy)"}`],
    ["generated tokens", stats.generated_tokens],
    ["target forwards", stats.target_calls],
    ["generate calls", stats.generate_calls],
    ["time", `${stats.total_time.toFixed(3)} s`],
    ["tokens / s", stats.tokens_per_second.toFixed(1)],
    ["mean acceptance length", stats.mean_acceptance_length.toFixed(2)],
    ["draft tokens accepted", `${stats.draft_tokens_accepted} / ${stats.draft_tokens_proposed}`],
  ] : [];
  $("stats").replaceChildren(...rows.map(([name, value]) => {
    const row = document.createElement("tr");
    row.append(Object.assign(document.createElement("td"), { textContent: name }),
               Object.assign(document.createElement("td"), { textContent: String(value) }));
    return row;
  }));
}

init().catch((error) => setStatus(`could not load /config: ${error}`, true));
