"""Tiny random models as a GGUF file in any block format, beside an HF folder holding the same values in fp32.

Weights are random blocks of the chosen format (any bytes are a valid block once the fp16 scale fields hold
finite values); their exact values (gguf-py's dequantize) go into the HF folder, so the quantized runner and the
fp32 eager runner compute the same model and may differ only by summation order.
"""

import atexit
import shutil
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as QType

from tests.tiny_models import make_tiny_hf_model, make_tokenizer

# Byte offsets of the fp16 scale fields in one block of each format, and the scale's typical size.
SCALE_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2),
                "Q5_K": (0, 2), "Q6_K": (208,), "Q2_K": (80, 82), "Q3_K": (108,),
                "IQ4_NL": (0,), "IQ4_XS": (0,), "IQ3_S": (0,), "IQ3_XXS": (0,), "IQ2_XXS": (0,), "IQ2_XS": (0,),
                "IQ2_S": (0,), "IQ1_S": (0,), "TQ1_0": (52,), "TQ2_0": (64,)}  # Q3_K, IQ3_S, IQ1, TQ: converted
# IQ1_M's fp16 d is spread over the top 4 bits of its four 16-bit scale words (from byte 48)
IQ1_M_SCALES = 48
# llama.cpp's converter writes a Mistral model as its "llama" architecture (the rotary order of q / k included)
GGUF_ARCHES = {"mistral": "llama"}
FORMATS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32")


def temp_model_folder(prefix: str) -> Path:
    """A fresh folder for a tiny model that lives as long as the test process (its LM may be kept module-wide, its
    GGUF memory-mapped): removed at exit, so a suite run leaves no models behind (it left ~1 GB of them in /tmp)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def random_blocks(type_name: str, rows: int, width: int, rng, scale: float = 0.02) -> np.ndarray:
    """(rows, bytes per row) uint8 of random blocks of `type_name` (a block format, not F16/BF16/F32)."""
    qtype = QType[type_name]
    values_per_block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, width // values_per_block, block_bytes), dtype=np.uint8)
    if type_name in ("IQ1_S", "IQ1_M"):        # |d| of scale / 2 .. scale, so that d / 8 is an fp16 (converted)
        d = (rng.uniform(scale / 2, scale, raw.shape[:2]) * rng.choice([-1, 1], raw.shape[:2])).astype(np.float16)
        set_iq1_d(raw, type_name, d.view(np.uint16))
        return raw.reshape(rows, -1)
    for offset in SCALE_FIELDS[type_name]:
        field = rng.uniform(-scale, scale, size=raw.shape[:2]).astype(np.float16)
        raw[..., offset:offset + 2] = field.view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw.reshape(rows, -1)


def set_iq1_d(blocks: np.ndarray, type_name: str, d_bits: np.ndarray) -> None:
    """Write each IQ1 block's fp16 d (its bits, uint16, one per block) in place: blocks (..., block bytes) uint8,
    IQ1_S's d its first two bytes, IQ1_M's spread over the top 4 bits of its four 16-bit scale words."""
    if type_name == "IQ1_S":
        blocks[..., 0:2] = d_bits.astype("<u2")[..., None].view(np.uint8)
        return
    words = blocks[..., IQ1_M_SCALES:IQ1_M_SCALES + 8].copy().view("<u2")
    pieces = d_bits.astype(np.uint16)[..., None] >> np.array([0, 4, 8, 12], np.uint16)
    words = (words & np.uint16(0x0FFF)) | ((pieces & np.uint16(0xF)) << np.uint16(12))
    blocks[..., IQ1_M_SCALES:IQ1_M_SCALES + 8] = words.view(np.uint8)


def encode_matrix(weight: torch.Tensor, type_name: str, rng, scale: float):
    """(bytes or typed array for the GGUF, raw dtype, the exact fp32 values it holds) for a weight's shape."""
    rows, width = weight.shape
    if type_name == "F32":
        values = (torch.randn(rows, width) * scale).numpy().astype(np.float32)
        return values, None, torch.from_numpy(values.copy())
    if type_name == "F16":
        values = (torch.randn(rows, width) * scale).numpy().astype(np.float16)
        return values, None, torch.from_numpy(values.astype(np.float32))
    if type_name == "BF16":
        values = (torch.randn(rows, width) * scale).bfloat16()
        raw = values.view(torch.int16).numpy().view(np.uint8).reshape(rows, width * 2)
        return raw, QType.BF16, values.float()
    # A block's value is its fp16 scale times sub-scales times quants, so random blocks' size depends on the format
    # (rms 0.003 for TQ1_0 to 5 for Q6_K at one scale field): a trial draw sizes the fields so that the values' rms
    # is `scale` in every format. Oversized q / k weights made the attention one-hot (a wrong cached key or position
    # then left the logits bit-identical, and the tests guarding them could not fail).
    trial = gguf.quants.dequantize(random_blocks(type_name, rows, width, rng, scale / 8), QType[type_name])
    raw = random_blocks(type_name, rows, width, rng, scale / 8 * scale / rms(trial))
    exact = gguf.quants.dequantize(raw, QType[type_name]).reshape(rows, width).astype(np.float32)
    return raw, QType[type_name], torch.from_numpy(exact.copy())


def rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values, dtype=np.float64))))


def rotary_order(rows: int, heads: int) -> np.ndarray:
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).transpose(0, 2, 1).reshape(rows)


def write_tiny_gguf(folder: Path, arch: str = "qwen2", type_name: str = "Q4_K", seed: int = 0,
                    tie: bool = False, vocab_size: int = 64) -> Path:
    """Save an HF folder (fp32) and `model.gguf` of one tiny random model in `folder`; returns the GGUF path.

    Sizes are multiples of 256 so the K formats fit. Llama's q/k rows are stored in llama.cpp's rotary order, as
    its converter does; Gemma3 (three layers, a sliding window of 8) keeps HF's order and stores 1 + norm weight.
    type_name "A/B": the v and down projections in B, the other matrices in A (llama.cpp's IQ4_NL files: IQ4_NL/Q5_K).
    """
    folder = Path(folder)
    type_name, other_type = (type_name.split("/") + [None])[:2]
    rng = np.random.default_rng(seed)
    model = make_tiny_hf_model(arch, seed, vocab_size=vocab_size, hidden_size=256, intermediate_size=512,
                               num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie)
    config = model.config
    gguf_arch = GGUF_ARCHES.get(arch, arch)
    names = gguf.get_tensor_name_map({v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[gguf_arch],
                                     config.num_hidden_layers)
    writer = gguf.GGUFWriter(str(folder / "model.gguf"), gguf_arch)
    state = model.state_dict()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if tie and name == "lm_head.weight":
                continue
            gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if param.dim() == 2:
                scale = 0.5 if name in ("lm_head.weight", "model.embed_tokens.weight") else 0.05
                chosen = other_type if other_type and (".v_proj." in name or ".down_proj." in name) else type_name
                data, raw_dtype, exact = encode_matrix(param, chosen, rng, scale)
                param.copy_(exact)
                if gguf_arch == "llama" and (".q_proj." in name or ".k_proj." in name):
                    heads = config.num_attention_heads if ".q_proj." in name else config.num_key_value_heads
                    stored = np.empty_like(data)
                    stored[rotary_order(param.shape[0], heads)] = data
                    data = stored
                writer.add_tensor(gguf_name, data, raw_dtype=raw_dtype)
            else:
                value = 1.0 + 0.1 * torch.randn(param.shape)
                # Gemma's norms multiply by 1 + weight and its GGUF holds 1 + weight (exact: value in [0.5, 2])
                param.copy_(value - 1.0 if arch == "gemma3" else value)
                writer.add_tensor(gguf_name, value.numpy().astype(np.float32))
    del state
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return folder / "model.gguf"


def tiny_gguf_lm(arch: str = "qwen2", type_name: str = "Q4_K", seed: int = 0, runner: str = "native",
                 vocab_size: int = 64):
    """An LM on a fresh tiny GGUF model (a temporary folder), run by `runner` (the native forward by default);
    Gemma3's head is tied to its embeddings, as in the real model. vocab_size: the model's (the tokenizer has 64)."""
    from multidraft.models.quantized import load_quantized_model
    from multidraft.models.runner import LM

    folder = temp_model_folder(f"tiny-gguf-{arch}-{type_name.replace('/', '-')}-")
    path = write_tiny_gguf(folder, arch, type_name, seed=seed, tie=arch == "gemma3", vocab_size=vocab_size)
    return LM(load_quantized_model(folder, path), make_tokenizer(), name="tiny", runner=runner)
