"""The quantized runner's part of a GGUF's conversion (models/gguf_to_hf.py) against transformers' whole one.

On SmolLM2-135M's GGUF (a Llama: its q/k rows are stored in llama.cpp's rotary order, so the processor reorders
them): the reference part holds the whole folder's norms and, of each matrix, its checked rows, bit for bit; a GGUF
file given by path loads on the quantized runner from the reference part alone, with the logits of the pulled alias
(the same GGUF beside the whole folder), and the whole folder is made only when HF weights are asked for.
"""

import json

import pytest
import torch

from multidraft.models import gguf_kernels, gguf_to_hf, loader, model_store
from tests.installed import missing

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


def smollm_gguf():
    folder = model_store.entry_dir("smollm2-135m")
    if not model_store.alias_status("smollm2-135m").ok or not (folder / model_store.SOURCE_GGUF).is_file():
        missing("smollm2-135m is not pulled (`multidraft models pull smollm2-135m`)", "models-data")
    return folder / model_store.SOURCE_GGUF


@pytest.fixture(scope="module")
def whole_folder(tmp_path_factory):
    """transformers' whole conversion (from_pretrained of the GGUF, then save_pretrained), as a pull makes it."""
    from tqdm import tqdm

    from multidraft.models import pulling

    folder = tmp_path_factory.mktemp("transformers")
    with tqdm(total=3, disable=True) as bar:
        pulling._convert_into(smollm_gguf(), folder, bar)
    return folder


def folder_tensors(folder):
    from safetensors import safe_open

    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
    return tensors


def without_version(path):
    values = json.loads(path.read_text())
    values.pop("transformers_version", None)
    return values


def test_reference_part_holds_the_checked_rows_and_the_norms(whole_folder, tmp_path):
    from safetensors import safe_open

    assert gguf_to_hf.write_reference(smollm_gguf(), tmp_path) is not None
    assert not (tmp_path / "model.safetensors").exists()    # not an HF checkpoint: from_pretrained cannot take it
    theirs = folder_tensors(whole_folder)
    with safe_open(str(tmp_path / gguf_to_hf.REFERENCE_FILE), "pt") as handle:
        assert set(handle.keys()) == set(theirs)
        for name in theirs:
            stored, full = handle.get_tensor(name), theirs[name]
            if full.dim() == 2:                                 # q/k rows: in the processor's order
                full = full[gguf_to_hf.reference_rows(full.shape[0])]
            assert torch.equal(stored, full), name
    assert without_version(tmp_path / "config.json") == without_version(whole_folder / "config.json")


def test_a_gguf_beside_other_model_files_converts_as_alone(whole_folder):
    """The alias's GGUF sits beside its tokenizer files; transformers, given that folder, read them too and lost
    the chat template (pulling._alone)."""
    alias = model_store.entry_dir("smollm2-135m")
    assert (whole_folder / "chat_template.jinja").read_text() == (alias / "chat_template.jinja").read_text()
    assert without_version(whole_folder / "tokenizer_config.json") == without_version(alias / "tokenizer_config.json")


def kernels_or_missing():
    if not gguf_kernels.load():
        missing(f"the quantized kernels did not build ({gguf_kernels.unavailable_reason()})", "compiler")


def test_a_gguf_path_runs_from_its_reference_part(tmp_path, monkeypatch):
    kernels_or_missing()
    gguf = smollm_gguf()
    alias = loader.load_model("smollm2-135m")
    digest = model_store.read_marker(model_store.entry_dir("smollm2-135m"))["source_sha256"]
    monkeypatch.setattr(model_store, "models_root", lambda: tmp_path / "models")   # kernels stay where they are
    mine = loader.load_model(gguf)
    assert mine.quantized and mine.info.path == model_store.gguf_entry_dir(digest, reference=True)
    assert not model_store.gguf_entry_dir(digest).exists()             # no bf16 folder for the quantized runner
    ids = alias.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    assert ids.tolist() == mine.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids.tolist()
    with torch.inference_mode():
        assert torch.equal(alias.model(ids).logits, mine.model(ids).logits)
    _, _, info = loader.load_hf_model(gguf, dtype="fp32", progress=False)  # HF weights: the whole folder, now
    assert info.path == model_store.gguf_entry_dir(digest)
    assert loader.runner_folder(loader.resolve(gguf)) == model_store.gguf_entry_dir(digest)


def test_an_architecture_converted_whole_falls_back_to_the_whole_folder(tmp_path, monkeypatch):
    gguf = smollm_gguf()
    monkeypatch.setattr(model_store, "models_root", lambda: tmp_path / "models")
    monkeypatch.setattr(gguf_to_hf, "_PER_TENSOR", ())                 # as for a mixture-of-experts processor
    assert gguf_to_hf.write_reference(gguf, tmp_path) is None and not list(tmp_path.glob("*.json"))
    folder = loader.runner_folder(loader.resolve(gguf), progress=False)
    digest = model_store.read_marker(folder)["source_sha256"]
    assert folder == model_store.gguf_entry_dir(digest) and (folder / "model.safetensors").is_file()
    assert not model_store.gguf_entry_dir(digest, reference=True).exists()
