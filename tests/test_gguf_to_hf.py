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
    the chat template (pulling.transformers_reading)."""
    alias = model_store.entry_dir("smollm2-135m")
    assert (whole_folder / "chat_template.jinja").read_text() == (alias / "chat_template.jinja").read_text()
    assert without_version(whole_folder / "tokenizer_config.json") == without_version(alias / "tokenizer_config.json")


def test_transformers_reads_a_gguf_once_and_makes_what_it_makes_alone(tmp_path, monkeypatch):
    """Within pulling.transformers_reading transformers parses the GGUF's metadata once (its config, its tokenizer's
    class and the processor each asked for it) with the plain-view reader, and makes the same config, tokenizer and
    parse as it does by itself; the patches are gone after the block."""
    import gguf as gguf_py
    from transformers import AutoConfig, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    from multidraft.models import pulling

    (tmp_path / "alone").mkdir()
    link = tmp_path / "alone" / "model.gguf"
    link.symlink_to(smollm_gguf())
    made = [AutoConfig.from_pretrained(str(link.parent), gguf_file=link.name).to_dict() | {"_name_or_path": ""},
            AutoTokenizer.from_pretrained(str(link.parent), gguf_file=link.name),
            hf_gguf.load_gguf_checkpoint(str(link), return_tensors=False)]
    parse, reader, parses = hf_gguf.load_gguf_checkpoint, gguf_py.GGUFReader, []
    monkeypatch.setattr(hf_gguf, "load_gguf_checkpoint", lambda *a, **k: parses.append(a) or parse(*a, **k))
    with pulling.transformers_reading(link) as gguf:
        assert gguf.parent != link.parent and gguf.resolve() == link.resolve()
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name).to_dict() | {"_name_or_path": ""}
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        parsed = hf_gguf.load_gguf_checkpoint(str(gguf), return_tensors=False)
        parsed["config"].clear()                                        # each caller's own copy
        again = hf_gguf.load_gguf_checkpoint(str(gguf), return_tensors=False)
        assert gguf_py.GGUFReader is not reader
    assert len(parses) == 1 and hf_gguf.load_gguf_checkpoint is not parse and gguf_py.GGUFReader is reader
    assert config == made[0] and again == made[2]
    assert tokenizer.get_vocab() == made[1].get_vocab() and tokenizer.chat_template == made[1].chat_template
    assert tokenizer.special_tokens_map == made[1].special_tokens_map


def test_an_unconverted_gguf_beside_another_models_files_gives_its_own_tokenizer(tmp_path, monkeypatch):
    """load_tokenizer of a GGUF not converted yet reads the GGUF alone, not the tokenizer files beside it."""
    source, template = smollm_gguf(), loader.load_tokenizer("smollm2-135m").chat_template
    monkeypatch.setattr(model_store, "models_root", lambda: tmp_path / "models")
    (tmp_path / "mine").mkdir()
    gguf = tmp_path / "mine" / "model.gguf"
    gguf.symlink_to(source)
    (gguf.parent / "tokenizer_config.json").write_text(json.dumps({"chat_template": "another model's template"}))
    (gguf.parent / "chat_template.jinja").write_text("another model's template")
    tokenizer = loader.load_tokenizer(gguf)
    assert template and tokenizer.chat_template == template
    assert not (tmp_path / "models").exists() or not list((tmp_path / "models").rglob("*.safetensors"))


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
