"""An HF folder named with a quantized runner runs on its matrices as Q8_0 blocks (models/hf_q8_0.py): the blocks
llama.cpp's converter writes with --outtype q8_0, cached once per version of the weights, exact under every
lossless method; runner "auto" keeps the folder's own weights."""

import warnings

import gguf
import numpy as np
import pytest
import torch
from safetensors import safe_open

import multidraft
from multidraft.errors import CorruptCacheError
from multidraft.models import gguf_kernels, hf_q8_0
from multidraft.models.gguf_header import TensorReader
from multidraft.models.gguf_weights import HF_NAMES
from tests.tiny_models import make_tiny_hf_model, make_tokenizer

PROMPT = "the cat sat on the mat and then the dog ran on the mat . def x ( y ) : return x"


@pytest.fixture
def home(tmp_path, monkeypatch):
    gguf_kernels.load(progress=False)          # built under the real cache before the cache root moves
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def save_folder(path, arch="qwen2", seed=1, dtype=torch.float32, shard=None, **overrides):
    model = make_tiny_hf_model(arch, seed=seed, **overrides).to(dtype)
    model.save_pretrained(path, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    make_tokenizer().save_pretrained(path)
    return path


def ggml_q8_0(values: np.ndarray) -> bytes:
    """ggml's quantize_row_q8_0_ref as written in ggml-quants.c: per 32 values d = max|x| / 127, id = 1 / d (0 where
    d is 0), q = roundf(x * id) (halves away from zero), then d stored as fp16."""
    blocks = values.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    scaled = np.abs((blocks * inverse).astype(np.float32))
    whole = np.floor(scaled)
    q = (np.sign(blocks) * (whole + (scaled - whole >= np.float32(0.5)))).astype(np.int8)   # exact: no x + 0.5
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)
    return out.tobytes()


def test_the_file_holds_ggml_q8_0_blocks_of_every_matrix_under_its_hf_name(home, tmp_path):
    folder = save_folder(tmp_path / "bf16", dtype=torch.bfloat16)
    path = hf_q8_0.q8_0_gguf(folder, progress=False)
    reader = TensorReader(str(path), "r")
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == HF_NAMES
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        names = list(handle.keys())
        matrices = [name for name in names if handle.get_slice(name).get_shape().__len__() == 2]
        assert matrices and set(tensors) == set(matrices)      # norms and biases stay the folder's
        for name in matrices:
            values = handle.get_tensor(name).float().numpy()
            assert tensors[name].tensor_type == gguf.GGMLQuantizationType.Q8_0
            assert bytes(np.asarray(tensors[name].data)) == ggml_q8_0(values), name


@pytest.mark.parametrize("arch,tie", [("qwen2", False), ("qwen2", True), ("llama", False), ("gemma3", False),
                                      ("qwen3", False), ("mistral", False)])
def test_a_quantized_runner_named_on_an_hf_folder_runs_its_q8_0_blocks_exactly(home, tmp_path, arch, tie):
    folder = save_folder(tmp_path / arch, arch, tie_word_embeddings=tie)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # no "cannot serve ... using the HF folder's weights"
        lm = multidraft.load_model(folder, runner="native")
    assert lm.runner == "native"
    reference = multidraft.load_model(folder)         # auto: the folder's own fp32 weights
    assert reference.runner not in ("native", "quantized-q8", "quantized")
    ids = lm.encode(PROMPT)
    ours, theirs = (model.forward(model.new_cache(), ids).logits.float() for model in (lm, reference))
    assert not torch.equal(ours, theirs)               # another model: Q8_0's values ...
    assert (ours - theirs).abs().max() <= 0.05 * theirs.abs().max()     # ... close to the fp32 ones
    greedy = multidraft.generate(lm, PROMPT, method="greedy", max_new_tokens=24)
    for method in ("pld", "suffix"):
        got = multidraft.generate(lm, PROMPT, method=method, max_new_tokens=24, draft_length="fixed")
        assert got.token_ids == greedy.token_ids, method


def test_the_blocks_are_made_once_per_version_of_the_weights(home, tmp_path, monkeypatch):
    folder = save_folder(tmp_path / "m")
    writes = []
    real_write = hf_q8_0.write_q8_0_gguf
    monkeypatch.setattr(hf_q8_0, "write_q8_0_gguf", lambda *args: writes.append(1) or real_write(*args))
    first = hf_q8_0.q8_0_gguf(folder, progress=False)
    assert hf_q8_0.q8_0_gguf(folder, progress=False) == first and len(writes) == 1
    save_folder(folder, seed=2)                        # other weights, the same folder
    second = hf_q8_0.q8_0_gguf(folder, progress=False)
    assert second != first and len(writes) == 2
    assert not first.exists() and sorted((home / "q8_0").iterdir()) == [second.parent]   # the old version's file


def test_a_file_two_folders_share_stays_while_either_uses_it(home, tmp_path):
    one, two = save_folder(tmp_path / "one"), save_folder(tmp_path / "two")      # the same weights
    shared = hf_q8_0.q8_0_gguf(one, progress=False)
    assert hf_q8_0.q8_0_gguf(two, progress=False) == shared
    save_folder(one, seed=2)
    assert hf_q8_0.q8_0_gguf(one, progress=False) != shared and shared.exists()     # two still uses it
    save_folder(two, seed=3)
    hf_q8_0.q8_0_gguf(two, progress=False)
    assert not shared.exists() and len(list((home / "q8_0").iterdir())) == 2


def test_an_interrupted_quantization_leaves_no_file_and_the_next_load_completes_it(home, tmp_path, monkeypatch):
    folder = save_folder(tmp_path / "m")
    calls = []

    def failing(values, qtype):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(values, qtype)
    real = gguf.quants.quantize
    monkeypatch.setattr(gguf.quants, "quantize", failing)
    with pytest.raises(KeyboardInterrupt):
        hf_q8_0.q8_0_gguf(folder, progress=False)
    assert not list((home / "q8_0").glob("*/weights.gguf"))
    monkeypatch.setattr(gguf.quants, "quantize", real)
    path = hf_q8_0.q8_0_gguf(folder, progress=False)
    assert len(TensorReader(str(path), "r").tensors) == 2 * 7 + 2     # 2 layers x 7 matrices, embedding, head


def test_a_folder_without_safetensors_falls_back_saying_why(home, tmp_path):
    folder = save_folder(tmp_path / "bin")
    model = make_tiny_hf_model("qwen2", seed=1)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")         # weights as a pickle, not safetensors
    with pytest.warns(RuntimeWarning, match="no .safetensors weights"):
        lm = multidraft.load_model(folder, runner="native")
    assert lm.runner not in ("native", "quantized-q8", "quantized")


def test_a_damaged_cached_file_is_made_again(home, tmp_path):
    folder = save_folder(tmp_path / "m")
    path = hf_q8_0.q8_0_gguf(folder, progress=False)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])                 # truncated after it was written
    with pytest.warns(RuntimeWarning, match="do not read as a GGUF file; quantizing again"):
        assert hf_q8_0.q8_0_gguf(folder, progress=False) == path
    assert path.read_bytes() == whole


def test_a_cache_that_cannot_take_the_file_falls_back_saying_what_to_do(home, tmp_path, monkeypatch):
    folder = save_folder(tmp_path / "m")

    def full_disk(files, out, progress, label):
        out.write_bytes(b"GGUF")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(hf_q8_0, "write_q8_0_gguf", full_disk)
    with pytest.warns(RuntimeWarning, match="could not be written .*No space left on device.*MULTIDRAFT_HOME"):
        lm = multidraft.load_model(folder, runner="native")
    assert lm.runner not in ("native", "quantized-q8", "quantized")
    assert not list((home / "q8_0").glob("*/weights.gguf"))     # no half-written file left behind


def test_a_sharded_folder_quantizes_every_shard(home, tmp_path):
    folder = save_folder(tmp_path / "shards", shard="20KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    path = hf_q8_0.q8_0_gguf(folder, progress=False)
    assert len(TensorReader(str(path), "r").tensors) == 2 * 7 + 2
    assert multidraft.load_model(folder, runner="native").runner == "native"


def test_a_broken_index_is_one_clear_error(home, tmp_path):
    folder = save_folder(tmp_path / "shards", shard="20KB")
    (folder / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(CorruptCacheError, match="is not a safetensors index .*save the model folder again"):
        multidraft.load_model(folder, runner="native")


def test_no_file_is_written_where_the_kernels_cannot_run(home, tmp_path, monkeypatch):
    folder = save_folder(tmp_path / "m")
    monkeypatch.setattr(gguf_kernels, "_loaded", False)
    monkeypatch.setattr(gguf_kernels, "unavailable_reason", lambda: "this CPU has no AVX2 (test)")
    with pytest.warns(RuntimeWarning, match="no AVX2"):
        assert multidraft.load_model(folder, runner="native").runner not in ("native", "quantized-q8", "quantized")
    assert not (home / "q8_0").exists() or not list((home / "q8_0").iterdir())


def test_the_command_line_says_how_to_run_an_hf_folder_on_the_8bit_kernels(home, tmp_path, capsys):
    from multidraft.cli import main

    folder = str(save_folder(tmp_path / "m"))
    assert main(["generate", "--model", folder, "--max-new-tokens", "4", "the cat"]) == 0
    assert "--runner native runs its matrices as Q8_0 blocks" in capsys.readouterr().err
    assert main(["generate", "--model", folder, "--runner", "native", "--max-new-tokens", "4", "the cat"]) == 0
    assert "--runner native runs" not in capsys.readouterr().err


def test_models_info_names_the_folders_q8_0_file(home, tmp_path, capsys):
    from multidraft.cli import main

    folder = save_folder(tmp_path / "m")
    assert main(["models", "info", str(folder)]) == 0
    assert "q8_0:      none yet" in capsys.readouterr().out
    path = hf_q8_0.q8_0_gguf(folder, progress=False)
    assert main(["models", "info", str(folder)]) == 0
    assert f"q8_0:      {path} (" in capsys.readouterr().out
