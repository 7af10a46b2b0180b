"""Blockwise parallel decoding heads (specs/bpd.md §2.1, §4): h-1 residual FFN heads on a frozen base.

    from multidraft.heads import load_heads, train_heads
    heads = load_heads(lm)                  # newest heads file in the cache trained for lm's base model
    logits, token_ids = heads.draft_logits(hidden_row)     # [h-1, S] over the shortlist token_ids

Head 1 is the base model's own next-token head; file heads are heads 2..h.
"""

from multidraft.heads.model import BlockwiseHeads, model_fingerprint
from multidraft.heads.store import find_heads, load_heads, save_heads

__all__ = ["BlockwiseHeads", "find_heads", "load_heads", "model_fingerprint", "save_heads", "train_heads"]


def train_heads(*args, **kwargs):
    from multidraft.heads.train import train_heads as _train

    return _train(*args, **kwargs)
