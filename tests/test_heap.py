"""The garbage collector around loading and serving (heap.py): paused while a model loads, the server's loaded
heap frozen out of later collections."""

import gc

import pytest

import multidraft
from multidraft.heap import collection_paused


@pytest.fixture
def collector_restored():
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was_enabled else gc.disable)()


def test_collection_is_paused_inside_the_block_and_restored_after_it_even_on_an_error(collector_restored):
    gc.enable()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError):
        with collection_paused():
            raise KeyError("load failed")
    assert gc.isenabled()
    gc.disable()                   # a caller that turned it off keeps it off
    with collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_model_loads_with_the_collector_paused_and_leaves_it_on(tiny_folder, monkeypatch, collector_restored):
    from multidraft.models import loader

    seen = []
    real = loader.load_hf_model

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "load_hf_model", recording)
    gc.enable()
    lm = multidraft.load_model(tiny_folder)
    assert seen == [False] and gc.isenabled()
    assert multidraft.generate(lm, "hello", method="greedy", max_new_tokens=2).token_ids
    monkeypatch.setattr(loader, "load_hf_model", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError, match="disk gone"):
        multidraft.load_model(tiny_folder)
    assert gc.isenabled()


def test_serve_freezes_the_loaded_heap_before_it_answers(tiny_folder, monkeypatch, collector_restored):
    import uvicorn

    from multidraft.cli import main

    frozen = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: frozen.append(gc.get_freeze_count()))
    gc.unfreeze()
    assert main(["serve", "--model", tiny_folder, "--port", "0", "--threads", "1"]) == 0
    assert len(frozen) == 1 and frozen[0] > 1000       # the models, the app and the imported modules
