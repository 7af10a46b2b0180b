"""The n-gram file: round trip, memory mapping, and clear errors for damaged or foreign files."""

import numpy as np
import pytest

from multidraft.errors import CorruptCacheError, DataNotFoundError, TokenizerMismatchError
from multidraft.ngram import NGramModel, build
from multidraft.ngram import fileformat


@pytest.fixture()
def ngram_file(tmp_path):
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 10, rng.integers(1, 60)) for _ in range(25)]
    path = tmp_path / "m.ngram"
    build(docs, 10, path, max_order=4, tokenizer_name="toy", tokenizer_fingerprint="vocab-toy", corpora=["random"])
    return path, docs


def test_round_trip_header_and_memmap(ngram_file):
    path, docs = ngram_file
    model = NGramModel.load(path, tokenizer_fingerprint="vocab-toy", vocab_size=10)
    assert isinstance(model.keys, np.memmap) and isinstance(model.counts, np.memmap)
    assert model.tokenizer_name == "toy" and model.vocab_size == 10 and model.orders == [2, 3, 4]
    assert model.header["num_tokens"] == sum(len(d) for d in docs)
    assert model.header["num_documents"] == len(docs) and model.header["corpora"] == ["random"]
    assert len(model.header["corpus_digest"]) == 64
    # a rebuild from the same tokens is byte-identical (deterministic build)
    again = path.with_name("again.ngram")
    build(docs, 10, again, max_order=4, tokenizer_name="toy", tokenizer_fingerprint="vocab-toy", corpora=["random"])
    assert again.read_bytes() == path.read_bytes()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".partial")]


def test_truncated_file_is_rejected(ngram_file):
    path, _ = ngram_file
    data = path.read_bytes()
    for cut in (5, 40, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(CorruptCacheError, match="truncated|corrupt"):
            NGramModel.load(path)


def test_flipped_data_byte_is_rejected(ngram_file):
    path, _ = ngram_file
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside the arrays
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCacheError, match="sha256"):
        NGramModel.load(path)
    NGramModel.load(path, verify=False)  # opt-out for trusted files skips the full read


def test_flipped_header_byte_is_rejected(ngram_file):
    path, _ = ngram_file
    data = bytearray(path.read_bytes())
    data[30] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCacheError, match="crc32|corrupt"):
        NGramModel.load(path)


def test_not_an_ngram_file(tmp_path):
    other = tmp_path / "x.ngram"
    other.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(CorruptCacheError, match="not a multidraft n-gram file"):
        NGramModel.load(other)
    with pytest.raises(DataNotFoundError, match="multidraft ngram build"):
        NGramModel.load(tmp_path / "missing.ngram")


def test_other_version_is_rejected(ngram_file):
    path, _ = ngram_file
    data = bytearray(path.read_bytes())
    data[8] = fileformat.FORMAT_VERSION + 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCacheError, match="format version"):
        NGramModel.load(path)


def test_tokenizer_mismatch(ngram_file):
    path, _ = ngram_file
    with pytest.raises(TokenizerMismatchError, match="built with tokenizer 'toy'.*rebuild"):
        NGramModel.load(path, tokenizer_fingerprint="vocab-other")
    with pytest.raises(TokenizerMismatchError, match="vocabulary of 10 tokens"):
        NGramModel.load(path, vocab_size=5)

    class FakeTokenizer:
        def get_vocab(self):
            return {f"t{i}": i for i in range(10)}

        def __len__(self):
            return 10

    with pytest.raises(TokenizerMismatchError):
        NGramModel.load(path, tokenizer=FakeTokenizer())


def test_interrupted_build_leaves_no_file(tmp_path):
    def docs():
        yield np.array([1, 2, 3])
        raise KeyboardInterrupt

    path = tmp_path / "m.ngram"
    with pytest.raises(KeyboardInterrupt):
        build(docs(), 10, path, max_order=3)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_cli_build_and_info(tmp_path, capsys, monkeypatch):
    """`multidraft ngram build` end to end with a tiny local tokenizer folder and a text folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from multidraft.cli import main

    vocab = {w: i for i, w in enumerate(["[UNK]", "def", "return", "x", "y", "(", ")", ":", "+"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.py").write_text("def x ( y ) : return x + y\n" * 5)
    (corpus / "b.py").write_text("def y ( x ) : return y\n")
    out = tmp_path / "c.ngram"
    assert main(["ngram", "build", "--tokenizer", str(folder), "--corpus", str(corpus), "--orders", "2-3",
                 "--out", str(out), "--quiet"]) == 0
    assert "peak memory" in capsys.readouterr().out
    model = NGramModel.load(out)
    assert model.max_order == 3 and model.header["num_documents"] == 2
    ids, p = model.next_token_distribution([vocab["def"]], 2)
    assert dict(zip(ids.tolist(), p.tolist())) == {vocab["x"]: 5 / 6, vocab["y"]: 1 / 6}
    assert main(["ngram", "info", str(out)]) == 0
    assert main(["ngram", "build", "--tokenizer", str(folder), "--corpus", str(corpus), "--orders", "0-x",
                 "--out", str(out)]) == 2

    # A corpus without text is refused and writes nothing (it wrote a 0-token model, exit 0); so is a binary file.
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("")
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"def x\0\x01\x02" * 100)
    for corpus_spec, message in ((empty, "no text to count"), (binary, "binary file")):
        nothing = tmp_path / "nothing.ngram"
        capsys.readouterr()
        assert main(["ngram", "build", "--tokenizer", str(folder), "--corpus", str(corpus_spec), "--out",
                     str(nothing), "--quiet"]) != 0
        assert message in capsys.readouterr().err and not nothing.exists()


@pytest.mark.real_model
def test_cli_build_default(tmp_path, capsys):
    """`multidraft ngram build-default`: counts every document but the held-out ones, orders 2-6, and the resolver's
    error names this very command."""
    from multidraft.cli import main
    from multidraft.ngram.defaults import HOLDOUT, build_command

    out = tmp_path / "default.ngram"
    assert main(["ngram", "build-default", "--model", "smollm2-135m", "--corpus", "humaneval", "--out", str(out),
                 "--quiet"]) == 0
    model = NGramModel.load(out)
    held_out = len(range(0, 164, HOLDOUT))                # HumanEval has 164 problems
    assert model.header["num_documents"] == 164 - held_out
    assert model.header["orders"] == [2, 3, 4, 5, 6] and model.header["tokenizer"] == "smollm2-135m"
    capsys.readouterr()
    assert main(["ngram", "build-default", "--model", "smollm2-135m", "--corpus", "humaneval", "--out",
                 str(out)]) == 0
    assert "exists (use --force to rebuild)" in capsys.readouterr().out
    assert main(["ngram", "build-default", "--model", "no-such-model", "--out", str(tmp_path / "x.ngram")]) == 2
    assert "no model named 'no-such-model'" in capsys.readouterr().err
    assert build_command("smollm2-135m") == "multidraft ngram build-default --model smollm2-135m"
