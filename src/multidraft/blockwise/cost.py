"""The paper's per-token cost model (bpd.md §3.10, Appendix H / Table 11), and the same idea with measured times.

Per decoded token at batch size 1, a memory-bound accelerator reads the weights once per serial call and the
KV cache once per call, so both are divided by the block efficiency B:
- parameter I/O = (bytes of the base + bytes of a neural rescorer) / B;
- KV-cache I/O at context L = c_kv * (L + p*h) / B  (+ c_kv_r * (L + h) / B with a neural rescorer),
  autoregressive = c_kv * L.
On a CPU the costs are compute, not I/O, so `time_per_token` uses measured seconds instead:
(verification forward + heads + lattice search) / B against one autoregressive forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from multidraft import validation

GB = 1e9
# Paper constants: 1.5B model in 2-byte weights, KV bytes per cached position (1.812 GB / 2048), 61M rescorer.
PAPER_MODEL_BYTES = 3.0 * GB
PAPER_RESCORER_BYTES = 0.122 * GB
PAPER_KV_BYTES_PER_POSITION = 1.812 * GB / 2048
PAPER_RESCORER_KV_BYTES_PER_POSITION = 0.074e-3 * GB


def _check_b(block_efficiency: float) -> None:
    validation.number("block_efficiency", block_efficiency, minimum=1.0)


def parameter_io(model_bytes: float, block_efficiency: float, rescorer_bytes: float = 0.0) -> float:
    """Bytes of weights read per decoded token."""
    _check_b(block_efficiency)
    return (model_bytes + rescorer_bytes) / block_efficiency


def kv_io(kv_bytes_per_position: float, context: int, block_efficiency: float = 1.0, num_drafts: int = 1,
          num_heads: int = 1, rescorer_kv_bytes_per_position: float = 0.0, autoregressive: bool = False) -> float:
    """Bytes of KV cache read per decoded token at context length `context`."""
    if autoregressive:
        return kv_bytes_per_position * context
    _check_b(block_efficiency)
    out = kv_bytes_per_position * (context + num_drafts * num_heads) / block_efficiency
    if rescorer_kv_bytes_per_position:
        out += rescorer_kv_bytes_per_position * (context + num_heads) / block_efficiency
    return out


def kv_bytes_per_position(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_value: int = 2) -> int:
    """Keys and values of one cached position over all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_value


@dataclass
class MeasuredCosts:
    """Seconds of one step's parts, measured side by side on one machine."""
    ar_forward: float            # one autoregressive forward (1 token)
    verify_forward: float        # the verification forward of one block (h tokens, or a p-draft tree)
    heads: float = 0.0           # the draft heads at one position
    search: float = 0.0          # lattice build + rescoring (n-gram DP or local rescoring)

    def time_per_token(self, block_efficiency: float) -> float:
        _check_b(block_efficiency)
        return (self.verify_forward + self.heads + self.search) / block_efficiency

    def speedup(self, block_efficiency: float) -> float:
        """Predicted wall-clock speedup over autoregressive decoding (> 1: faster)."""
        return self.ar_forward / self.time_per_token(block_efficiency)

    def break_even_block_efficiency(self) -> float:
        """The B at which this setting is as fast as autoregressive decoding."""
        return (self.verify_forward + self.heads + self.search) / self.ar_forward
