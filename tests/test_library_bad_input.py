"""The Python library's bad input (generate, Request, Engine, SuffixStore, load_model): a MultidraftError that says
what to do, never a traceback from deep inside torch, and no state left broken for the next call."""

import pytest

import multidraft
from multidraft import Engine, Request


class InterruptOnce:
    """An on_token that raises KeyboardInterrupt at its first token (Ctrl-C mid-generation), then counts."""

    def __init__(self):
        self.fired = False

    def __call__(self, token_id):
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt


@pytest.mark.parametrize("method", ["pld", "beam"])
def test_an_interrupt_mid_step_leaves_the_engine_usable(tiny_llama, method):
    """A KeyboardInterrupt half-way through a step used to leave the other requests' KV and bookkeeping apart: the
    next run() decoded on and gave wrong tokens. Now the caught requests end cancelled with verified tokens only."""
    prompt = "the cat sat on the mat"
    alone = multidraft.generate(tiny_llama, prompt, method=method, max_new_tokens=6).token_ids
    engine = Engine(tiny_llama, max_num_seqs=2, kv_slots=512)
    first = engine.submit(Request.build(prompt, method, max_new_tokens=6), on_token=InterruptOnce())
    second = engine.submit(Request.build(prompt, method, max_new_tokens=6))
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    engine.run()
    for request_id in (first, second):
        result = engine.take(request_id)            # a result, not the KeyboardInterrupt raised again
        assert result.token_ids == alone[:len(result.token_ids)]
        assert result.stats.stop_reason in ("cancelled", "max_new_tokens")
    again = engine.submit(Request.build(prompt, method, max_new_tokens=6))
    engine.run()
    assert engine.take(again).token_ids == alone


@pytest.mark.parametrize("prompt_ids,match", [([999], "outside the vocabulary"), ([-1], "outside the vocabulary"),
                                              ([], "non-empty list"), ("abc", "non-empty list"),
                                              ([3.5], "non-empty list"), ([3] * 300, "context")])
def test_prompt_ids_given_by_the_caller_are_checked(tiny_llama, prompt_ids, match):
    """generate_request(prompt_ids=...) and Engine.submit(prompt_ids=...) used to skip the prompt checks: an
    IndexError from torch's embedding, or a float id silently truncated."""
    request = Request.build("the cat", "pld", max_new_tokens=2)
    with pytest.raises(multidraft.PromptError, match=match):
        multidraft.generate_request(tiny_llama, request, prompt_ids=prompt_ids)
    engine = Engine(tiny_llama, kv_slots=512)
    with pytest.raises(multidraft.PromptError, match=match):
        engine.submit(request, prompt_ids=prompt_ids)
    assert not engine.has_work()


def test_more_beams_than_tokens(tiny_llama):
    """num_beams past the vocabulary was torch's "selected index k out of range"."""
    with pytest.raises(multidraft.InvalidOptionError, match="num_beams=100 is more than the 64 tokens"):
        multidraft.generate(tiny_llama, "the cat", method="beam", num_beams=100, max_new_tokens=2)


@pytest.mark.parametrize("options", [[1, 2], "num_draft_tokens=3", 5])
def test_request_options_must_be_a_dict(options):
    """A list or a string was a TypeError / ValueError from dict()."""
    with pytest.raises(multidraft.InvalidOptionError, match="options must be a dict"):
        Request.build("the cat", "pld", options=options)


@pytest.mark.parametrize("prompt,match", [
    (["the cat", "the dog"], "generate_batch"),
    ([3.0, 4.0], "item 0 is 3.0 \\(float\\)"),
    ([3, "cat"], "item 1 is 'cat'"),
    ([[3, 4]], "item 0 is \\[3, 4\\]"),
])
def test_a_list_that_is_neither_token_ids_nor_messages(tiny_llama, prompt, match):
    """Such lists were reported as bad chat messages ("message 0 must be a {'role': ...} dict, got 3.0")."""
    with pytest.raises(multidraft.PromptError, match=match):
        multidraft.generate(tiny_llama, prompt, max_new_tokens=2)


def test_a_tensor_prompt_says_tolist(tiny_llama):
    import numpy as np
    import torch
    for ids in (torch.tensor([3, 4, 5]), np.array([3, 4, 5])):
        with pytest.raises(multidraft.PromptError, match="ids.tolist()"):
            multidraft.generate(tiny_llama, ids, max_new_tokens=2)


@pytest.mark.parametrize("call,match", [
    (dict(method="PLD"), "unknown method 'PLD' \\(did you mean 'pld'\\?\\)"),
    (dict(method="pld-plus"), "did you mean 'pld_plus'"),
    (dict(method="speculatve"), "did you mean 'speculative'"),
    (dict(max_tokens=8), "no option 'max_tokens' \\(did you mean 'max_new_tokens'\\?\\)"),
    (dict(temprature=0.5), "did you mean 'temperature'"),
    (dict(method="pld", num_draft_token=3), "did you mean 'num_draft_tokens'"),
])
def test_a_misspelled_name_is_named_right(tiny_llama, call, match):
    with pytest.raises(multidraft.InvalidOptionError, match=match):
        multidraft.generate(tiny_llama, "the cat", **call)


def test_generate_batch_takes_a_list_and_method_options(tiny_llama):
    """A string was decoded character by character; method options as keywords were a TypeError."""
    with pytest.raises(multidraft.InvalidOptionError, match="for one prompt use multidraft.generate"):
        multidraft.generate_batch(tiny_llama, "the cat sat")
    one = multidraft.generate(tiny_llama, "the cat sat", method="pld", num_draft_tokens=3, max_new_tokens=4)
    [batched] = multidraft.generate_batch(tiny_llama, ["the cat sat"], method="pld", num_draft_tokens=3,
                                          max_new_tokens=4)
    assert batched.token_ids == one.token_ids
    with pytest.raises(multidraft.InvalidOptionError, match="did you mean 'method'"):
        multidraft.generate_batch(tiny_llama, ["the cat sat"], methd="pld")


@pytest.mark.parametrize("document", ["the cat", None, 5, [1.5, 2.7], [[1, 2], [3, 4]], [2 ** 70]])
def test_a_suffix_store_document_is_token_ids(document):
    """A string was int()'s ValueError, None and 5 a TypeError, floats were truncated to ids."""
    store = multidraft.SuffixStore()
    with pytest.raises(multidraft.InvalidOptionError, match="list of token ids"):
        store.add(document)
    assert store.num_tokens == 0


def test_a_suffix_store_with_ids_past_the_vocabulary(tiny_llama):
    """Ids added without a model became drafts: a ValueError from deep in the loop ("Draft holds a token id outside
    the model's vocabulary"). Now the store is refused when the model binds it."""
    store = multidraft.SuffixStore()
    ids = tiny_llama.encode("the cat sat on")
    store.add(ids + [1000, 1001])
    with pytest.raises(multidraft.TokenizerMismatchError, match="token id 1001, beyond tiny-llama's vocabulary"):
        multidraft.generate(tiny_llama, ids, method="suffix", store=store, max_new_tokens=4)
    with pytest.raises(multidraft.TokenizerMismatchError, match="beyond"):
        multidraft.SuffixStore().add([1000], lm=tiny_llama)
    store.clear()
    store.add(ids)
    multidraft.generate(tiny_llama, ids, method="suffix", store=store, max_new_tokens=4)


@pytest.mark.parametrize("bad", [{"header": {"max_tokens": "x"}}, {"header": {"low_water": -1}},
                                 {"tokens": [1.5, 2.0]}])
def test_a_damaged_suffix_store_file(tmp_path, bad):
    """A header with a bad value was int()'s ValueError; float token ids were truncated and loaded."""
    import io
    import json

    import numpy as np
    header = {"format": "multidraft-suffix-store", "version": 1, **bad.get("header", {})}
    buffer = io.BytesIO()
    np.savez(buffer, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
             tokens=np.array(bad.get("tokens", [1, 2])), lengths=np.array([2]))
    path = tmp_path / "store.npz"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(multidraft.CorruptCacheError, match="store.npz"):
        multidraft.SuffixStore.load(path)


@pytest.mark.parametrize("kwargs", [{"low_water": True}, {"lm": "smollm2-135m"}])
def test_suffix_store_arguments(kwargs):
    with pytest.raises(multidraft.InvalidOptionError):
        multidraft.SuffixStore(**kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"threads": 2}, "no argument 'threads'.*torch.set_num_threads"),
    ({"dtyp": "fp32"}, "did you mean 'dtype'"),
    ({"dtype": "torch.int8"}, "unknown dtype"),
    ({"attn_implementation": "flash", "runner": "eager"}, "attn_implementation.*sdpa"),   # was: "save it again"
])
def test_load_model_arguments(tiny_folder, kwargs, match):
    """An unknown keyword was load_hf_model()'s TypeError."""
    with pytest.raises(multidraft.InvalidOptionError, match=match):
        multidraft.load_model(tiny_folder, **kwargs)


def test_load_model_with_an_integer_torch_dtype(tiny_folder):
    """torch.int8 reached transformers, whose refusal was reported as a damaged folder ("save it again")."""
    import torch
    with pytest.raises(multidraft.InvalidOptionError, match="not a floating-point type"):
        multidraft.load_model(tiny_folder, dtype=torch.int8, runner="eager")


def test_engine_take_says_what_to_do(tiny_llama):
    """Was a bare KeyError('no request 0') / RuntimeError('request 0 is not finished')."""
    engine = Engine(tiny_llama, kv_slots=512)
    request_id = engine.submit(Request.build("the cat sat", "pld", max_new_tokens=2))
    with pytest.raises(multidraft.InvalidOptionError, match=r"not finished: call engine.step\(\) until"):
        engine.take(request_id)
    assert engine.cancel(request_id) and engine.cancel(request_id)      # cancelling twice is harmless
    engine.run()
    assert engine.take(request_id).stats.stop_reason == "cancelled"
    assert not engine.cancel(request_id)
    for unknown in (request_id, 99, "0"):
        with pytest.raises(multidraft.InvalidOptionError, match="taken already"):
            engine.take(unknown)


def test_a_draft_model_with_a_shorter_context_is_refused_up_front(tiny_llama):
    """The draft's own forward refused half-way ("the sequence would reach 64 tokens"), after tokens had streamed."""
    from tests.tiny_models import make_tiny_lm
    short = make_tiny_lm("llama", seed=5, max_position_embeddings=64)
    streamed = []
    with pytest.raises(multidraft.PromptError, match="context of the draft model tiny-llama \\(64 tokens\\)"):
        multidraft.generate(tiny_llama, [3] * 60, method="speculative", draft_model=short, max_new_tokens=10,
                            on_token=streamed.append)
    assert streamed == []
    multidraft.generate(tiny_llama, [3] * 54, method="speculative", draft_model=short, max_new_tokens=10)


def _context_end_runs(lm):
    """Methods whose draft trees go past the context's last slot, on a request that fits: greedy's tokens (lossless
    rows) or max_new_tokens tokens (mtad, multi_draft). The forward refused a tree by cache slots, not positions."""
    prompt = [3 + i % 40 for i in range(lm.context_length - 6)]
    greedy = multidraft.generate(lm, prompt, max_new_tokens=6).token_ids
    assert len(greedy) == 6
    for method, options in (("mtad", {"draft_model": lm}), ("multi_draft", {"draft_model": lm, "seed": 1,
                                                                              "temperature": 1.0}),
                            ("speculative", {"draft_model": lm}), ("pld", {}), ("suffix", {})):
        tokens = multidraft.generate(lm, prompt, method=method, max_new_tokens=6, **options).token_ids
        assert len(tokens) == 6, method
        if method not in ("mtad", "multi_draft"):
            assert tokens == greedy, method
    with pytest.raises(multidraft.PromptError, match="exceeds the context"):
        multidraft.generate(lm, prompt, method="mtad", draft_model=lm, max_new_tokens=7)


def test_tree_methods_run_to_the_context_end_on_hf_modules(tiny_llama):
    _context_end_runs(tiny_llama)


def test_tree_methods_run_to_the_context_end_on_the_native_forward():
    from multidraft.models import gguf_kernels
    from tests.tiny_gguf import tiny_gguf_lm

    if not gguf_kernels.load(progress=False):
        pytest.skip(f"quantized kernels unavailable: {gguf_kernels.unavailable_reason()}")
    _context_end_runs(tiny_gguf_lm("qwen2", "Q4_K", seed=3, runner="native"))


def test_a_draft_model_with_fewer_token_rows_than_the_tokenizer_is_refused(tiny_llama):
    """Same tokenizer, 48 embedding rows for 64 tokens: a prompt id >= 48 was torch's IndexError inside the draft."""
    from tests.tiny_models import make_tiny_lm

    small = make_tiny_lm("llama", seed=3, vocab_size=48)
    with pytest.raises(multidraft.TokenizerMismatchError, match="fewer than the 64 tokens"):
        multidraft.generate(tiny_llama, "the cat w50 w55 sat", method="speculative", draft_model=small,
                            max_new_tokens=4)


def test_a_huge_num_drafts_is_refused_before_any_list_is_built(tiny_llama, monkeypatch):
    """The row's own checks ran before each value's: multi_draft's built [1.0] * num_drafts first (10**9: 8 GB)."""
    from multidraft.drafters import draft_model_options

    built = []
    real = draft_model_options.draft_temperature_list
    monkeypatch.setattr(draft_model_options, "draft_temperature_list",
                        lambda value, num_drafts, *a, **k: built.append(num_drafts) or real(value, 1, *a, **k))
    for num_drafts in (0, 2 ** 70, "many"):
        with pytest.raises(multidraft.InvalidOptionError, match="num_drafts"):
            multidraft.generate(tiny_llama, "the cat", method="multi_draft", draft_model=tiny_llama,
                                num_drafts=num_drafts, max_new_tokens=2)
    assert built == []


def test_an_interrupt_while_a_request_joins_the_batch_ends_it_and_frees_its_region(tiny_llama, monkeypatch):
    """A Ctrl-C inside Scheduler._start, after the request left the queue and before it joined the batch: it was in
    neither (take() never had a result) and its arena region was never freed."""
    from multidraft.engine import scheduler

    engine = Engine(tiny_llama, max_num_seqs=2, kv_slots=512)
    free = engine.scheduler.arena.free_slots
    real = scheduler.Decoding

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(scheduler, "Decoding", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(scheduler, "Decoding", interrupted)
    first = engine.submit(Request.build("the cat sat on the mat", "pld", max_new_tokens=6))
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    assert engine.take(first).stats.stop_reason == "cancelled"
    assert engine.scheduler.arena.free_slots == free
    again = engine.submit(Request.build("the cat sat on the mat", "pld", max_new_tokens=6))
    engine.run()
    assert engine.take(again).token_ids == multidraft.generate(tiny_llama, "the cat sat on the mat", method="pld",
                                                               max_new_tokens=6).token_ids


def test_an_interrupt_while_a_request_alone_runs_its_forward_stops_it_before_the_engine_goes_on(tiny_llama,
                                                                                                 monkeypatch):
    """A Ctrl-C on the engine's thread while a beam request's own thread ran a forward: that thread went on and
    later released a turn nobody waited for, so a batch forward could run beside its next one. Now the request is
    cancelled and its thread has stopped before the interrupt goes up."""
    from multidraft.engine import solo

    runs = []
    real_wait = solo.SoloRun._wait_rest

    def wait_interrupted_once(run):
        runs.append(run)
        if len(runs) == 2:                 # an advance: the decoder thread is running its forward now
            real_acquire = run._rest.acquire

            class Interrupted:
                def acquire(self):
                    run._rest.acquire = real_acquire
                    raise KeyboardInterrupt

            run._rest.acquire = Interrupted().acquire
        return real_wait(run)

    monkeypatch.setattr(solo.SoloRun, "_wait_rest", wait_interrupted_once)
    engine = Engine(tiny_llama, max_num_seqs=2, kv_slots=512)
    beam = engine.submit(Request.build("the cat sat on the mat", "beam", max_new_tokens=8))
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    runs[0]._thread.join(timeout=10)
    assert not runs[0]._thread.is_alive()
    engine.run()
    assert engine.take(beam).stats.stop_reason == "cancelled"


def test_an_engine_whose_kv_arena_cannot_fit_in_memory_is_refused_at_once(tiny_llama):
    """kv_slots=10**12 was accepted and failed at the first forward with torch's 'can't allocate ... bytes'."""
    with pytest.raises(multidraft.InvalidOptionError, match="lower kv_slots"):
        Engine(tiny_llama, kv_slots=10 ** 12)
    Engine(tiny_llama, kv_slots=1 << 20)          # a large arena that fits is still taken (allocated when used)


def test_settings_that_would_be_ignored_are_refused(tiny_llama):
    """chat=True on token ids, and generate_batch's build keywords beside a built Request, were silently dropped."""
    with pytest.raises(multidraft.InvalidOptionError, match="token ids are the prompt as it is"):
        multidraft.generate(tiny_llama, [3, 4, 5], chat=True, max_new_tokens=2)
    request = Request.build("the cat", "greedy", max_new_tokens=2)
    with pytest.raises(multidraft.InvalidOptionError, match="max_new_tokens apply to prompts"):
        multidraft.generate_batch(tiny_llama, [request], max_new_tokens=8)
    assert len(multidraft.generate_batch(tiny_llama, [request])[0].token_ids) == 2


def test_callbacks_of_the_wrong_arity_are_refused_before_decoding(tiny_llama):
    """on_token=lambda: ... (no argument) failed with a TypeError from inside the decoding loop, after the prompt's
    forward; Engine.submit's check likewise. Callables that take the argument, however declared, still run."""
    with pytest.raises(multidraft.InvalidOptionError, match="on_token must be a function of one token id"):
        multidraft.generate(tiny_llama, "the cat", max_new_tokens=2, on_token=lambda: None)
    engine = Engine(tiny_llama)
    request = Request.build("the cat", "greedy", max_new_tokens=2)
    with pytest.raises(multidraft.InvalidOptionError, match="on_token must be a function of one token id"):
        engine.submit(request, on_token=lambda a, b: None)
    with pytest.raises(multidraft.InvalidOptionError, match="check must be a function of no arguments"):
        engine.submit(request, check=lambda token: None)
    seen = []
    got = multidraft.generate(tiny_llama, "the cat", max_new_tokens=2, on_token=lambda *ids: seen.extend(ids))
    assert seen == got.token_ids
    appended = []
    multidraft.generate(tiny_llama, "the cat", max_new_tokens=2, on_token=appended.append)    # a builtin method
    assert appended == got.token_ids
