"""N-gram models for Superposed Decoding (spd.md §3-4) and BPD lattice rescoring (bpd.md §4).

    from multidraft.ngram import NGramModel, build
    build(token_docs, vocab_size, "stdlib.ngram", max_order=6)      # or `multidraft ngram build`
    model = NGramModel.load("stdlib.ngram", tokenizer=tok)
    q = model.interpolated_batch(drafts, {2: .1, 3: .1, 4: .1, 5: .1, 6: .1}, candidates)   # [k, K]

The core works on token id arrays only; tokenizers are needed only to turn corpora into ids.
"""

from multidraft.ngram.build import BuildStats, build
from multidraft.ngram.model import SMOOTHINGS, NGramModel

__all__ = ["BuildStats", "NGramModel", "SMOOTHINGS", "build"]
