"""One definition of a vocabulary's identity, shared by n-gram files, heads files and draft/target checks."""

from types import SimpleNamespace

from multidraft.tokenizer_identity import model_vocab_fingerprint, same_vocabulary, vocab_family, vocab_fingerprint
from tests.tiny_models import make_tokenizer


def test_fingerprint_follows_the_token_map():
    first, second, bigger = make_tokenizer(), make_tokenizer(), make_tokenizer()
    bigger.add_tokens(["zebra"])
    assert vocab_fingerprint(first) == vocab_fingerprint(second)
    assert vocab_fingerprint(first) != vocab_fingerprint(bigger)
    assert vocab_fingerprint(first).startswith("vocab-") and len(vocab_fingerprint(first)) == len("vocab-") + 16


def test_family_prefers_the_registry_name_and_models_compare_by_either():
    tokenizer = make_tokenizer()
    registered = SimpleNamespace(tokenizer=tokenizer, info=SimpleNamespace(vocab_family="tiny-family"))
    on_disk = SimpleNamespace(tokenizer=make_tokenizer(), info=None)
    other = make_tokenizer()
    other.add_tokens(["zebra"])
    stranger = SimpleNamespace(tokenizer=other, info=None)
    assert vocab_family(registered) == "tiny-family"
    assert vocab_family(on_disk) == model_vocab_fingerprint(on_disk) == vocab_fingerprint(tokenizer)
    assert same_vocabulary(registered, on_disk)          # different family names, the same token -> id map
    assert not same_vocabulary(on_disk, stranger)
