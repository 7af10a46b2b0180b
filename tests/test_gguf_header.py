"""The GGUF readers of models/gguf_header.py against gguf-py's: the one that skips metadata arrays has the same
tensors and scalar fields, the arrays left out, and a damaged file is an error, never a long walk; the one that walks
a plain view of the file has every field and tensor of gguf-py's."""

import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QType

from multidraft.models.gguf_header import FieldsReader, TensorReader
from tests.tiny_gguf import random_blocks


def _write(path, rng):
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_uint32("qwen2.block_count", 2)
    writer.add_float32("qwen2.rope.freq_base", 1e6)
    writer.add_string("general.name", "tiny")
    writer.add_bool("general.flag", True)
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" * (i % 5) for i in range(3000)])   # empty strings too
    writer.add_array("tokenizer.ggml.token_type", list(range(3000)))
    writer.add_array("general.scores", [0.5 * i for i in range(7)])
    writer.add_array("general.nested", [[1, 2], [3, 4, 5]])
    writer.add_uint64("general.after_arrays", 12345)
    writer.add_tensor("blk.0.ffn_up.weight", random_blocks("Q4_K", 32, 512, rng), raw_dtype=QType.Q4_K)
    writer.add_tensor("blk.0.ffn_down.weight", random_blocks("Q6_K", 16, 256, rng), raw_dtype=QType.Q6_K)
    writer.add_tensor("output_norm.weight", rng.standard_normal(64).astype(np.float32))
    writer.add_tensor("token_embd.weight", rng.standard_normal((8, 64)).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _tensors(reader):
    return [(t.name, int(t.tensor_type), tuple(t.shape), t.n_elements, t.n_bytes, t.data_offset, t.data.dtype,
             t.data.shape, bytes(t.data.tobytes())) for t in reader.tensors]


def test_the_same_tensors_and_scalar_fields_as_gguf_py(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write(path, np.random.default_rng(0))
    ours, theirs = TensorReader(str(path), "r"), gguf.GGUFReader(str(path), "r")
    assert _tensors(ours) == _tensors(theirs)
    assert ours.data_offset == theirs.data_offset and ours.alignment == theirs.alignment
    arrays = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "general.scores", "general.nested"}
    assert set(theirs.fields) - set(ours.fields) == arrays
    for name, field in ours.fields.items():
        other = theirs.fields[name]
        assert field.types == other.types and field.data == other.data and field.offset == other.offset, name
        assert [bytes(part) for part in field.parts] == [bytes(part) for part in other.parts], name
    assert ours.fields["general.after_arrays"].contents() == 12345
    assert ours.fields["general.architecture"].contents() == "qwen2"


def _offset_of_tokens_count(data: bytes) -> int:
    """Where the tokens array's u64 count lies: after its key and the two type words."""
    key = b"tokenizer.ggml.tokens"
    return data.index(key) + len(key) + 4 + 4


def test_a_damaged_array_is_an_error_not_a_long_walk(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write(path, np.random.default_rng(1))
    data = bytearray(path.read_bytes())
    (tmp_path / "cut.gguf").write_bytes(data[:_offset_of_tokens_count(data) + 8 + 5000])   # inside the tokens
    with pytest.raises(ValueError, match="past the end"):
        TensorReader(str(tmp_path / "cut.gguf"), "r")
    struct.pack_into("<Q", data, _offset_of_tokens_count(data), 2 ** 62)      # a count no file holds
    (tmp_path / "huge.gguf").write_bytes(data)
    with pytest.raises(ValueError, match="past the end"):
        TensorReader(str(tmp_path / "huge.gguf"), "r")


def test_the_plain_view_reader_has_every_field_and_tensor_of_gguf_py(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write(path, np.random.default_rng(2))
    ours, theirs = FieldsReader(str(path), "r"), gguf.GGUFReader(str(path), "r")
    assert _tensors(ours) == _tensors(theirs) and isinstance(ours.data, np.memmap)
    assert list(ours.fields) == list(theirs.fields)
    for name, field in ours.fields.items():
        other = theirs.fields[name]
        assert field.types == other.types and field.data == other.data and field.offset == other.offset, name
        assert [bytes(part) for part in field.parts] == [bytes(part) for part in other.parts], name
        assert [part.dtype for part in field.parts] == [part.dtype for part in other.parts], name
        assert field.contents() == other.contents(), name
    assert ours.fields["tokenizer.ggml.tokens"].contents()[:3] == ["", "tok1", "tok2tok2"]
