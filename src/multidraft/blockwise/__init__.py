"""Blockwise parallel decoding (BPD, specs/bpd.md), in one place:

- heads.py, heads_store.py, heads_data.py, heads_train.py, cli.py: the prediction heads (h-1 residual FFN heads on
  a frozen base, §2.1, §4), their files, their training data and training, `multidraft heads train | list | info`;
- lattice.py: the top-k lattice of the heads' guesses and its rescoring;
- drafter.py: `method="blockwise"` (the drafter and its options, for the one draft-and-verify loop);
- evaluation.py: the offline analysis of heads and rescoring strategies (benchmarks/blockwise_bench.py).

    from multidraft.blockwise import load_heads, train_heads
    heads = load_heads(lm)                  # newest heads file in the cache trained for lm's base model
    logits, token_ids = heads.draft_logits(hidden_row)     # [h-1, S] over the shortlist token_ids

Head 1 is the base model's own next-token head; file heads are heads 2..h.
"""

from multidraft.blockwise.heads import BlockwiseHeads, model_fingerprint
from multidraft.blockwise.heads_store import find_heads, load_heads, save_heads

__all__ = ["BlockwiseHeads", "find_heads", "load_heads", "model_fingerprint", "save_heads", "train_heads"]


def train_heads(*args, **kwargs):
    from multidraft.blockwise.heads_train import train_heads as _train

    return _train(*args, **kwargs)
