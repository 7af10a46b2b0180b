"""The head architecture: g_i(u) = u + W2_i ReLU(W1_i u + b1_i) + b2_i, logits_i = E g_i(u) (bpd.md §2.1).

`u` is the base's last decoder block output after its final norm, and E is the base's own (frozen)
unembedding, so with W2 = 0 every head starts as an exact copy of head 1. The unembedding is restricted
to a `shortlist` of frequent tokens: on CPU a full 49k-row unembedding per head costs about as much as a
fifth of a base forward, and rare tokens are almost never correct drafts anyway.
"""

from __future__ import annotations

import hashlib
from typing import Optional

import torch
from torch import nn

from multidraft.errors import InvalidOptionError


def final_norm(lm) -> nn.Module:
    """The base model's final norm (applied by the model after its last decoder block)."""
    base = getattr(lm.model, "model", None)
    for owner in (base, getattr(base, "language_model", None), getattr(lm.model, "transformer", None)):
        for name in ("norm", "ln_f", "final_layernorm"):
            module = getattr(owner, name, None) if owner is not None else None
            if isinstance(module, nn.Module):
                return module
    raise InvalidOptionError(f"cannot find the final norm of {lm.name}; blockwise heads support Llama/Qwen-style models")


def model_fingerprint(lm) -> str:
    """A digest of the base model's shape and of weights the heads depend on (final norm, unembedding).

    Weights are rounded to bf16 first, so the same checkpoint loaded in bf16 or fp32 gives one fingerprint."""
    digest = hashlib.sha256()
    config = lm.config
    digest.update(f"{config.model_type}|{lm.hidden_size}|{lm.num_layers}|{lm.vocab_size}".encode())
    rows = torch.linspace(0, lm.vocab_size - 1, 64).long()
    for tensor in (getattr(final_norm(lm), "weight", None), lm.unembedding(rows)):
        if tensor is not None:
            data = tensor.detach().to(torch.bfloat16).float().cpu().contiguous().numpy()
            digest.update(data.tobytes())
    return "model-" + digest.hexdigest()[:16]


class BlockwiseHeads(nn.Module):
    """Heads 2..num_heads (head 1 is the base's own). Parameters: stacked per-head FFNs; base parts are bound."""

    def __init__(self, num_heads: int, hidden_size: int, ffn_size: int, shortlist: Optional[torch.Tensor] = None,
                 meta: Optional[dict] = None):
        super().__init__()
        if num_heads < 2:
            raise InvalidOptionError(f"num_heads must be >= 2 (head 1 is the base model's own), got {num_heads}")
        extra = num_heads - 1
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.ffn_size = ffn_size
        self.w1 = nn.Parameter(torch.randn(extra, ffn_size, hidden_size) * hidden_size ** -0.5)
        self.b1 = nn.Parameter(torch.zeros(extra, ffn_size))
        self.w2 = nn.Parameter(torch.zeros(extra, hidden_size, ffn_size))   # zero: heads start as head 1
        self.b2 = nn.Parameter(torch.zeros(extra, hidden_size))
        self.register_buffer("shortlist", shortlist.long() if shortlist is not None else torch.zeros(0, dtype=torch.long))
        self.meta = dict(meta or {})
        self._norm = None
        self._unembed = None          # [S, d]: the base unembedding rows of the shortlist
        self._token_ids = None

    # ----- binding to the frozen base -----
    def bind(self, lm) -> "BlockwiseHeads":
        """Attach the base's final norm and unembedding (not copied into the heads file)."""
        if lm.hidden_size != self.hidden_size:
            raise InvalidOptionError(f"heads have hidden size {self.hidden_size}, {lm.name} has {lm.hidden_size}")
        norm = final_norm(lm)
        ids = self.shortlist.cpu() if self.shortlist.numel() else torch.arange(lm.vocab_size)
        if int(ids.max()) >= lm.vocab_size:
            raise InvalidOptionError(f"heads' shortlist holds token ids beyond {lm.name}'s vocabulary")
        self.to(lm.device)           # the heads run where the base's hidden states are (CUDA too)
        dtype = self.w1.dtype
        object.__setattr__(self, "_norm", norm)
        object.__setattr__(self, "_unembed", lm.unembedding(ids).to(lm.device, dtype).contiguous())
        object.__setattr__(self, "_token_ids", ids.clone())      # on the host: the lattice is built there
        return self

    @property
    def token_ids(self) -> torch.Tensor:
        """Token id of each logit column (the shortlist, or the whole vocabulary)."""
        self._require_bound()
        return self._token_ids

    def _require_bound(self):
        if self._unembed is None:
            raise RuntimeError("BlockwiseHeads.bind(lm) must be called before computing logits")

    # ----- forward -----
    def normed(self, hidden: torch.Tensor) -> torch.Tensor:
        """u = the base's final norm of the last block's output (computed in the base's dtype, no grad)."""
        self._require_bound()
        with torch.no_grad():
            param = next(self._norm.parameters(), None)
            dtype = param.dtype if param is not None else hidden.dtype
            return self._norm(hidden.to(dtype)).to(self.w1.dtype)

    def transform(self, u: torch.Tensor, num_heads: Optional[int] = None) -> torch.Tensor:
        """g_i(u) for heads 2..num_heads: [N, d] -> [N, num_heads-1, d]."""
        extra = (num_heads or self.num_heads) - 1
        inner = torch.relu(torch.einsum("nd,hfd->nhf", u, self.w1[:extra]) + self.b1[:extra])
        return u[:, None, :] + torch.einsum("nhf,hdf->nhd", inner, self.w2[:extra]) + self.b2[:extra]

    def logits(self, hidden: torch.Tensor, num_heads: Optional[int] = None) -> torch.Tensor:
        """Shortlist logits of heads 2..num_heads for captured hidden states [N, d] -> [N, num_heads-1, S]."""
        return self.transform(self.normed(hidden), num_heads) @ self._unembed.T

    @torch.no_grad()
    def draft_logits(self, hidden_row: torch.Tensor, num_heads: Optional[int] = None) -> torch.Tensor:
        """[num_heads-1, S] logits of heads 2..num_heads at one position (columns are `token_ids`)."""
        return self.logits(hidden_row.reshape(1, -1), num_heads)[0]
