"""Stop strings are found incrementally (issue #30): a token costs a short decode, not a decode of the whole output,
and the result (where generation stops, the cut text) is the same as a whole-text search's."""

import multidraft
from multidraft.decoders.output import OutputCollector
from multidraft.types import DecodeStats


class CountingLM:
    """Decodes by joining words; counts the tokens it was asked to decode."""

    eos_token_ids = (0,)

    def __init__(self, words):
        self.words, self.decoded = words, 0

    def decode(self, ids):
        self.decoded += len(ids)
        return "".join(self.words[i] for i in ids)


def test_decoding_cost_stays_linear_in_the_output():
    words = ["", " a", " b", " c", "d", "\ufffd"]
    lm = CountingLM(words)
    output = OutputCollector(lm, 2800, stop=["zzz"])
    output.add([1, 2, 3, 4] * 700)
    assert output.stop_reason == "max_new_tokens"
    assert lm.decoded < 20 * 2800          # a whole-output decode per token would be ~ 2800**2 / 2 = 3.9M tokens


def test_stop_strings_cut_as_before(tiny_lm):
    free = multidraft.generate(tiny_lm, "the cat", max_new_tokens=24)
    assert len(free.text) > 8
    stop = free.text[4:8]
    cut = multidraft.generate(tiny_lm, "the cat", max_new_tokens=24, stop=stop)
    assert cut.stats.stop_reason == "stop_string" and cut.text == free.text[:free.text.find(stop)]
    assert free.token_ids[:len(cut.token_ids)] == cut.token_ids
    pld = multidraft.generate(tiny_lm, "the cat", method="pld", max_new_tokens=24, stop=stop)
    assert (pld.text, pld.token_ids) == (cut.text, cut.token_ids)


def test_a_stop_string_split_across_tokens_and_characters():
    lm = CountingLM(["", "ab", "c", "\xe9"])
    output = OutputCollector(lm, 50, stop=["bc"])
    output.add([1, 1, 3, 1, 2, 1])
    assert output.stop_reason == "stop_string" and output.text == "ab" * 2 + "\xe9" + "a"
    stats = DecodeStats()
    output.finalize(stats, 0.0)
    assert (stats.generated_tokens, stats.stop_reason) == (5, "stop_string")
