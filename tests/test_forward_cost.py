"""`multidraft bench forward-cost`: a smoke test on a tiny Q4_K model (figures written, no timing asserted)."""

import contextlib
import json

import pytest

from multidraft.cli import main
from multidraft.eval import forward_cost
from multidraft.models import gguf_kernels
from tests.tiny_gguf import temp_model_folder, write_tiny_gguf
from tests.tiny_models import make_tokenizer

pytestmark = pytest.mark.skipif(not gguf_kernels.load(progress=False),
                                reason=f"quantized kernels unavailable: {gguf_kernels.unavailable_reason()}")


class SmallProbe(forward_cost.ReadProbe):
    def __init__(self):
        super().__init__(megabytes=64)                       # the real measurement, on a small buffer


def test_forward_cost_writes_rows_trees_and_shares_per_runner_and_path(monkeypatch, tmp_path):
    from multidraft.models.quantized import load_quantized_model
    from multidraft.models.runner import LM

    folder = temp_model_folder("tiny-gguf-cost-")
    path = write_tiny_gguf(folder, "qwen2", "Q4_K", seed=3)
    lm = LM(load_quantized_model(folder, path, activations="q8"), make_tokenizer(), name="tiny", runner="quantized-q8")
    monkeypatch.setattr(forward_cost, "runner_views", lambda _lm, runners, *rest: {r: lm for r in runners})
    monkeypatch.setattr(forward_cost, "ReadProbe", SmallProbe)
    out = tmp_path / "cost.json"
    assert main(["bench", "forward-cost", "--model", "tiny", "--runners", "quantized-q8", "--isa", "avx2,scalar",
                 "--chains", "1,2", "--trees", "2x1", "--reps", "1", "--prefix", "4", "--threads", "1",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["runners"]) == {"quantized-q8@avx2", "quantized-q8@scalar"}
    for entry in figures["runners"].values():
        assert set(entry["rows"]) == {"1", "2"} and set(entry["trees"]) == {"2x1"}
        assert entry["rows"]["1"]["ms"] > 0 and entry["trees"]["2x1"]["nodes"] == 3
        assert 0 < entry["bandwidth_share"] and 0 < entry["bandwidth_share_pair_median"]
        assert 0 < entry["read_bandwidth_gbps"] <= figures["read_bandwidth_gbps"]
        assert 0 <= entry["outside_linears_share"] < 1
        parts = entry["outside_linears"]
        assert parts["attention"] > 0 and parts["layer_steps"] >= 0    # HF's modules run this runner's norms
        assert abs(parts["attention"] + parts["layer_steps"] + parts["other"] - entry["outside_linears_share"]) < 1e-9
        for shape in list(entry["rows"].values()) + list(entry["trees"].values()):   # where each figure's time went
            spent = [shape[f"{part}_ms"] for part in ("linears", "attention", "layer_steps", "other")]
            assert spent[0] > 0 and spent[1] > 0 and abs(sum(spent) - shape["ms"]) < 1e-6
        one = entry["rows"]["1"]
        assert one["linears_ms"] / one["ms"] == pytest.approx(1 - entry["outside_linears_share"])
    assert gguf_kernels.isa() != "scalar"                  # the path is put back after its rows


def test_each_path_gets_its_own_model_loaded_on_that_path(monkeypatch):
    # a matrix is packed at load for the path that will run it (X16_32 on avx512-vnni, GGUF's layout on avx2)
    loads = []

    def load_model(model, runner):
        loads.append((runner, gguf_kernels.isa()))
        return object()

    monkeypatch.setattr(forward_cost.multidraft, "load_model", load_model)
    before = gguf_kernels.isa()
    views = forward_cost.runner_views(None, ["native@avx2", "native@scalar", "quantized"], "tiny", "float32")
    assert loads == [("native", "avx2"), ("native", "scalar"), ("quantized", before)]
    assert len({id(view) for view in views.values()}) == 3
    assert gguf_kernels.isa() == before


def test_forward_cost_refuses_an_unknown_path():
    from multidraft.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="not a path"):
        with forward_cost.isa_of("quantized-q8@sse9"):
            pass


@pytest.mark.parametrize("chains, trees, message", [("1,0", "", "--chains"), ("1,x", "", "--chains"),
                                                     ("1", "0", "--trees"), ("1", "2x", "--trees"),
                                                     ("1", "2x0", "--trees"), ("100000", "", "at most 1024"),
                                                     ("1", "64x64", "lower --chains or --trees")])
def test_forward_cost_refuses_bad_shapes_before_loading_a_model(monkeypatch, capsys, chains, trees, message):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded for a command that was going to fail")

    monkeypatch.setattr(forward_cost.multidraft, "load_model", no_load)
    monkeypatch.setattr(forward_cost, "runner_views", no_load)
    assert main(["bench", "forward-cost", "--model", "tiny", "--chains", chains, "--trees", trees]) != 0
    assert message in capsys.readouterr().err


class _Stop(Exception):
    pass


@pytest.mark.parametrize("extra, timed, reused", [([], ["native"], True), (["--isa", "avx2"], ["native@avx2"], False),
                                                  (["--runners", "auto,quantized"], ["native", "quantized"], True),
                                                  (["--runners", "quantized-q8"], ["quantized-q8"], False)])
def test_the_default_runner_is_the_one_load_model_picks(monkeypatch, extra, timed, reused):
    # the default figures are those of what users run (native), not of HF's modules around the same kernels
    loads, seen = [], {}

    class Loaded:
        runner = "native"

    def load_model(model, **kwargs):
        loads.append(kwargs)
        return Loaded()

    def runner_views(lm, runners, model, dtype, loaded=None):
        seen.update(runners=runners, loaded=loaded, lm=lm)
        raise _Stop

    monkeypatch.setattr(forward_cost.multidraft, "load_model", load_model)
    monkeypatch.setattr(forward_cost, "runner_views", runner_views)
    with pytest.raises(_Stop):
        main(["bench", "forward-cost", "--model", "tiny", "--chains", "1", "--trees", ""] + extra)
    assert seen["runners"] == timed and seen["lm"] is None
    assert len(loads) == (0 if extra == ["--runners", "quantized-q8"] else 1)
    assert "runner" not in (loads or [{}])[0]                   # load_model's own choice
    if reused:                                                  # the model loaded to learn the name is timed
        assert isinstance(seen["loaded"]["native"], Loaded)
    else:
        assert not seen["loaded"]


def test_the_default_runners_of_a_random_model_are_eager_and_fast():
    import argparse
    runners, lm = forward_cost.resolve_auto(["auto"], argparse.Namespace(random="qwen2.5-1.5b"))
    assert runners == ["eager", "fast"] and lm is None


def test_forward_cost_shapes_add_the_one_token_chain_and_read_trees():
    shapes = forward_cost.forward_shapes("4", "2x3, 1X1")
    assert [label for label, _ in shapes] == ["chain 1", "chain 4", "tree 2x3 (7 nodes)", "tree 1x1 (2 nodes)"]
    assert shapes[1][1] == [-1, 0, 1, 2]


def test_shapes_and_runners_are_timed_round_robin(monkeypatch):
    """Each round times every shape of every runner once (the first round is the warm-up and not counted), so a
    slow spell of the machine hits every shape alike; each shape's figure is its fastest counted forward."""
    from types import SimpleNamespace

    calls = []

    class Cache:
        def crop(self, length):
            assert length == 5

    class View:
        def __init__(self, name):
            self.name, self.runner = name, name
            self.model = SimpleNamespace(config=SimpleNamespace(vocab_size=100))
            self.device = SimpleNamespace(type="cpu")

        def new_cache(self):
            return Cache()

        def forward(self, cache, ids, parents=None, logits_rows=None):
            if parents is not None:
                calls.append((self.name, len(ids)))

    # a clock read twice per timed forward: the warm-up round's forwards take 1 ms (the fastest: never counted),
    # the two counted rounds 500 ms then 300 ms
    spans = iter([0.001] * 4 + [0.5] * 4 + [0.3] * 4)
    state = {"t": 0.0, "open": False}

    def now():
        if state["open"]:
            state["t"] += next(spans)
        state["open"] = not state["open"]
        return state["t"]

    monkeypatch.setattr(forward_cost, "clock", lambda cpu_time: now)
    views = {"a": View("a"), "b": View("b")}
    shapes = [("chain 1", [-1]), ("chain 2", [-1, 0])]
    best, split = forward_cost.time_shapes(views, ["a", "b"], shapes, reps=2, prefix=5)
    assert calls == [("a", 1), ("a", 2), ("b", 1), ("b", 2)] * 3          # warm-up round, then two counted ones
    assert best == {runner: {"chain 1": pytest.approx(0.3), "chain 2": pytest.approx(0.3)} for runner in "ab"}
    assert split == {runner: {"chain 1": None, "chain 2": None} for runner in "ab"}     # no GGUF linear ran

    # a runner on a kernel path (--isa) alone: entering its path runs the path's self-check, so each round starts
    # with one untimed 1-row forward before the timed ones
    calls.clear()
    spans = iter([0.1] * 9)
    monkeypatch.setattr(forward_cost, "isa_of", lambda runner: contextlib.nullcontext())
    forward_cost.time_shapes({"a@avx2": View("a")}, ["a@avx2"], shapes, reps=2, prefix=5)
    assert calls == [("a", 1), ("a", 1), ("a", 2)] * 3
