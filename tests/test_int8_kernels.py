"""The 8-bit-activation kernels' paths (kernels/q8_linear.inc): every path computes the canonical arithmetic bit for
bit, at every row count and thread count.

- Each path this CPU has, plus the VNNI template with vpdpbusd emulated in AVX2 and the AMX tile kernel with its
  tile ops emulated (all in scalar C++ on any CPU; beside the amx path's own vector code where the CPU has
  AVX512-VBMI: amx-emulated-tiles), against the scalar reference.
- The scalar reference against a plain numpy replica of the canonical arithmetic (integer sums, then one fused
  multiply-add per block), and a negative control: the same sums with an epilogue in another order differ.
- Every format with an 8-bit kernel: Q4_K / Q5_K / Q6_K (activations per 256 values) and Q4_0 / Q4_1 / Q5_0 /
  Q5_1 / Q8_0 (per 32; widths that are not multiples of 256, as SmolLM2's 576).
- The real VNNI paths run where the CPU has them (skipped elsewhere, the reason naming the flag).
"""

import re
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from multidraft.errors import InvalidOptionError
from multidraft.models import gguf_convert, gguf_kernels
from multidraft.models.gguf_weights import BlockMatrix
from tests.tiny_gguf import random_blocks

pytestmark = pytest.mark.skipif(not gguf_kernels.load(progress=False),
                                reason=f"quantized kernels unavailable: {gguf_kernels.unavailable_reason()}")
TYPES = {"Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q2_K": 10, "IQ4_XS": 23, "IQ3_XXS": 18, "IQ2_XXS": 16, "IQ2_XS": 17,
         "IQ2_S": 22, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "IQ4_NL": 20}
K_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q2_K", "IQ4_XS", "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S")
OUTPUTS = 45                             # not a multiple of 16, 64 or the thread split


def _width(type_name):
    """Three super-blocks for the K formats; 18 blocks of 32 (SmolLM2's 576: not a multiple of 256) for the others."""
    return 768 if type_name in K_TYPES else 576


def _paths_here():
    return [p for p in gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS if not gguf_kernels.missing_flag(p)]


def _data(type_name, seed, rows=40):
    rng = np.random.default_rng(seed)
    blocks = torch.from_numpy(random_blocks(type_name, OUTPUTS, _width(type_name), rng, scale=0.05))
    x = (torch.randn(rows, _width(type_name), generator=torch.Generator().manual_seed(seed))
         * torch.logspace(-2, 1, rows)[:, None])
    return blocks, x


def _bits(t):
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("type_name", list(TYPES))
@pytest.mark.parametrize("path", [p for p in gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS if p != "scalar"])
def test_every_path_is_the_scalar_reference_at_every_row_and_thread_count(type_name, path):
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, x = _data(type_name, 3)
    type_id, WIDTH = TYPES[type_name], _width(type_name)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in range(1, 41):
                part = x[40 - rows:]                            # each row count on other rows too
                expected = gguf_kernels.linear_q8_on(part, blocks, type_id, WIDTH, "scalar")
                got = gguf_kernels.linear_q8_on(part, blocks, type_id, WIDTH, path)
                assert torch.equal(_bits(got), _bits(expected)), (path, count, rows)
    finally:
        torch.set_num_threads(threads)


def test_iq4_nl_gives_the_bits_of_the_q8_0_blocks_of_its_values_everywhere():
    """IQ4_NL's own kernels (its 18-byte blocks, packed in sixteens or not; the fp32 linear; the dequantizer) give the
    bits of the Q8_0 blocks of the same values (d, table[index]: 34 bytes), which it was converted to before."""
    blocks, x = _data("IQ4_NL", 17)
    raw = blocks.numpy().reshape(-1, 18)
    q8_0 = np.empty((raw.shape[0], 34), np.uint8)
    q8_0[:, :2] = raw[:, :2]
    q8_0[:, 2:18] = gguf_convert.IQ4_NL_TABLE[raw[:, 2:] & 0x0F].view(np.uint8)
    q8_0[:, 18:] = gguf_convert.IQ4_NL_TABLE[raw[:, 2:] >> 4].view(np.uint8)
    q8_0 = torch.from_numpy(q8_0.reshape(OUTPUTS, -1))
    width = _width("IQ4_NL")
    expected = _bits(gguf_kernels.linear_q8_on(x, q8_0, 8, width, "scalar"))
    packed = gguf_kernels.repack_x16_32(blocks[:32].contiguous(), 20)
    for path in _paths_here():
        assert torch.equal(_bits(gguf_kernels.linear_q8_on(x, blocks, 20, width, path)), expected), path
        assert torch.equal(_bits(gguf_kernels.linear_q8_on(x, packed, 120, width, path)), expected[:, :32]), path
    assert torch.equal(_bits(gguf_kernels.linear(x, blocks, 20, width)), _bits(gguf_kernels.linear(x, q8_0, 8, width)))
    assert torch.equal(_bits(gguf_kernels.dequantize(blocks, 20, width)), _bits(gguf_kernels.dequantize(q8_0, 8, width)))


@pytest.mark.parametrize("type_name", list(TYPES))
def test_a_row_alone_equals_the_row_inside_forty(type_name):
    blocks, x = _data(type_name, 4)
    for path in _paths_here():
        full = gguf_kernels.linear_q8_on(x, blocks, TYPES[type_name], _width(type_name), path)
        for row in (0, 7, 39):
            alone = gguf_kernels.linear_q8_on(x[row:row + 1], blocks, TYPES[type_name], _width(type_name), path)
            assert torch.equal(_bits(alone[0]), _bits(full[row])), (path, row)


def test_the_default_path_is_the_best_one_here_and_passed_its_self_check():
    assert gguf_kernels.isa() in _paths_here() and gguf_kernels.isa() != "scalar"
    assert gguf_kernels.self_check.__wrapped__(gguf_kernels.isa())      # checked again, not the kept verdict
    blocks, x = _data("Q4_K", 5, rows=6)
    assert torch.equal(gguf_kernels.linear_q8(x, blocks, 12, 768),
                       gguf_kernels.linear_q8_on(x, blocks, 12, 768, gguf_kernels.isa()))


# ---------------------------------------------------------------- the activation quantizer


def _quantizer_inputs(block):
    """Rows that exercise the quantizer: random scales, exact ties (max 127 makes the scale 1: k + 0.5 values round
    half to even), zeros, an all-zero block, tiny and huge values, and a NaN."""
    generator = torch.Generator().manual_seed(block)
    x = torch.randn(12, 2 * block, generator=generator) * torch.logspace(-30, 30, 12)[:, None]
    ties = torch.arange(2 * block, dtype=torch.float32) % 254 - 126.5          # -126.5 .. 126.5, all ties
    ties[::block] = 127.0                                                       # each block's max: scale exactly 1
    x[0] = ties
    x[1, :block] = 0.0                                                          # an all-zero block
    x[2, ::3] = 0.0
    x[3, 7] = float("nan")                                                      # the NaN's block only
    return x


@pytest.mark.parametrize("block", [32, 256])
def test_vector_quantizer_is_the_scalar_reference_ties_zeros_and_nan_included(block):
    """The AVX2 quantizer (clamp, pack and sums vectorized) gives the scalar reference's bytes, scales and sums; a
    block with a NaN gets a NaN scale on both (its bytes are unspecified: every output it touches is NaN)."""
    x = _quantizer_inputs(block)
    q, d, s16, s32 = torch.ops.multidraft_gguf.q8_quantize(x, block, False)
    rq, rd, rs16, rs32 = torch.ops.multidraft_gguf.q8_quantize(x, block, True)
    nan_block = torch.isnan(x.view(12, -1, block)).any(-1)                      # (rows, blocks)
    assert torch.equal(torch.isnan(d), nan_block) and torch.equal(torch.isnan(rd), nan_block)
    finite = ~nan_block.repeat_interleave(block, dim=1)
    assert torch.equal(q[finite], rq[finite]) and torch.equal(d[~nan_block], rd[~nan_block])
    for got, expected, size in ((s16, rs16, 16), (s32, rs32, 32)):          # int16 sums per 16 and per 32 values
        kept = ~nan_block.repeat_interleave(block // size, dim=1)
        assert torch.equal(got[kept], expected[kept])
    # ties round half to even (numpy's rint), and the result is numpy's replica of the quantizer
    assert torch.equal(q[0], torch.from_numpy(np.rint(x[0].numpy())).to(torch.int8).clamp(-127, 127))
    replica, replica_d = _quantize(x[4:], block)
    assert torch.equal(q[4:].view(8, -1, block).long(), torch.from_numpy(replica))
    assert torch.equal(d[4:], torch.from_numpy(replica_d))
    assert bool((q[1, :block] == 0).all()) and bool((d[1, 0] == 0))
    # Negative control: rounding half away from zero (C's round) differs on the ties
    away = torch.from_numpy(np.trunc(x[0].numpy() + np.copysign(0.5, x[0].numpy()))).to(torch.int8)
    assert not torch.equal(q[0], away)


# ---------------------------------------------------------------- several matrices on one input (q, k, v; gate, up)


def _many_case(seed, group):
    """Matrices of one activation block (a K-format mix as a Q4_K_M / Q5_K_M model's q / k / v with v in Q6_K, or
    32-value formats) or of both (an IQ4_NL file's q / k with v in Q5_K), of different output counts, some with a
    bias; an input of 40 rows."""
    rng = np.random.default_rng(seed)
    names = {"k": ["Q4_K", "Q5_K", "Q6_K"], "32": ["Q4_1", "Q8_0", "Q5_0"], "mixed": ["IQ4_NL", "Q5_K", "Q8_0"]}[group]
    width = 768 if group == "mixed" else _width(names[0])
    blocks = [torch.from_numpy(random_blocks(name, rows, width, rng, scale=0.05))
              for name, rows in zip(names, (45, 16, 23))]
    generator = torch.Generator().manual_seed(seed)
    biases = [torch.randn(45, generator=generator), None, torch.randn(23, generator=generator)]
    x = torch.randn(40, width, generator=generator) * torch.logspace(-2, 1, 40)[:, None]
    return blocks, [TYPES[name] for name in names], width, biases, x


@pytest.mark.parametrize("group", ["k", "32", "mixed"])
def test_many_matrices_on_one_input_are_each_linears_bits_plus_bias(group):
    """linear_q8_many quantizes the input once per activation block for all matrices: each output is the bits of its
    own linear_q8 call plus its bias (torch's add), on every path here, 1..40 rows, 1 and 2 threads."""
    blocks, types, width, biases, x = _many_case(9, group)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            for path in _paths_here():
                for rows in (1, 2, 3, 5, 8, 17, 40):
                    part = x[40 - rows:]
                    got = gguf_kernels.linear_q8_many_on(part, blocks, types, width, biases, path)
                    for out, b, t, bias in zip(got, blocks, types, biases):
                        alone = gguf_kernels.linear_q8_on(part, b, t, width, path)
                        expected = alone if bias is None else alone + bias
                        assert torch.equal(_bits(out), _bits(expected)), (path, count, rows)
    finally:
        torch.set_num_threads(threads)
    # Negative control: the same comparison sees one value one int8 step away (a shared quantization of another
    # input than each linear's would be seen), and a bias given to the wrong matrix.
    nudged = x.clone()
    nudged[3, 5] -= torch.sign(nudged[3, 5]) * x[3, :32].abs().max() / 127
    got = gguf_kernels.linear_q8_many(nudged, blocks, types, width, biases)
    alone = gguf_kernels.linear_q8(x, blocks[0], types[0], width)
    assert not torch.equal(_bits(got[0][3]), _bits(alone[3] + biases[0]))
    swapped = gguf_kernels.linear_q8_many(x, blocks[:1], types[:1], width, [torch.flip(biases[0], (0,))])
    assert not torch.equal(_bits(swapped[0]), _bits(alone + biases[0]))


def test_mixed_activation_blocks_take_the_many_matrices_op_and_refuse_a_width_of_no_k_format(monkeypatch):
    from multidraft.models.gguf_weights import BlockMatrix
    from multidraft.models.quantized import block_linears

    blocks, types, width, _, x = _many_case(10, "mixed")
    mixed = [BlockMatrix(b, t, width) for b, t in zip(blocks, types)]
    calls = []
    many = gguf_kernels.linear_q8_many
    monkeypatch.setattr(gguf_kernels, "linear_q8_many", lambda *args: calls.append(args[2]) or many(*args))
    got = block_linears(mixed, x[:3], "q8", [None, None, None])
    assert calls == [types]
    assert all(torch.equal(_bits(g), _bits(m.linear(x[:3], q8=True))) for g, m in zip(got, mixed))
    q8_0 = torch.from_numpy(random_blocks("Q8_0", 7, 576, np.random.default_rng(11), scale=0.05))   # 18 blocks of 32
    with pytest.raises(RuntimeError, match="does not hold 576 values"):   # no K format is 576 wide
        many(torch.randn(3, 576), [q8_0, blocks[1][:, :176 * 2].contiguous()], [8, 13], 576, [None, None])


# ---------------------------------------------------------------- the canonical arithmetic, written in numpy


def _quantize(x, block=256):
    """The one activation quantizer: per `block` values, q = round-half-even(x * (127 / max|x|)), d = max|x| / 127."""
    groups = x.numpy().reshape(x.shape[0], -1, block).astype(np.float32)
    top = np.abs(groups).max(-1)
    d = top / np.float32(127)
    scale = np.float32(127) / top
    q = np.clip(np.rint(groups * scale[..., None]), -127, 127).astype(np.int64)
    return q, d.astype(np.float32)                    # (M, SB, 256), (M, SB)


def _k4_scales(packed):
    """Q4_K's six-bit sub-block scales and mins, (N, SB, 8) each (ggml's get_scale_min_k4)."""
    q = packed.astype(np.int64)
    sc, mn = np.empty(q.shape[:2] + (8,), np.int64), np.empty(q.shape[:2] + (8,), np.int64)
    for j in range(8):
        if j < 4:
            sc[..., j], mn[..., j] = q[..., j] & 63, q[..., j + 4] & 63
        else:
            sc[..., j] = (q[..., j + 4] & 0xF) | ((q[..., j - 4] >> 6) << 4)
            mn[..., j] = (q[..., j + 4] >> 4) | ((q[..., j] >> 6) << 4)
    return sc, mn


def _integer_sums32(type_name, blocks, q):
    """(isum, xsum, d_w, m_w) per (m, n, block) / (n, block) of a 32-value format. Its integers (Q4_0 q - 8, Q5_0
    q - 16, Q4_1 / Q5_1 q, Q8_0 the byte, IQ4_NL its table value) come from gguf-py's dequantize of the same blocks
    with d = 1 and m = 0."""
    raw = blocks.numpy().reshape(OUTPUTS, _width(type_name) // 32, -1)
    unit = raw.copy()
    unit[..., 0:2] = np.array([1.0], np.float16).view(np.uint8)
    has_min = type_name in ("Q4_1", "Q5_1")
    if has_min:
        unit[..., 2:4] = 0
    values = gguf.quants.dequantize(unit.reshape(OUTPUTS, -1), gguf.GGMLQuantizationType[type_name])
    values = values.reshape(OUTPUTS, -1, 32).astype(np.int64)
    isum = np.einsum("nbl,mbl->mnb", values, q)
    xsum = np.broadcast_to(q.sum(-1)[:, None, :], isum.shape)
    fp16 = lambda at: raw[..., at:at + 2].copy().view(np.float16)[..., 0]
    return isum, xsum, fp16(0), fp16(2) if has_min else None


def _integer_sums(type_name, blocks, q):
    """(isum, msum, d_w, dmin) per (m, n, sb) / (n, sb): the exact integer parts of the canonical arithmetic."""
    if type_name not in K_TYPES:
        return _integer_sums32(type_name, blocks, q)
    WIDTH = _width(type_name)
    raw = blocks.numpy().reshape(OUTPUTS, WIDTH // 256, -1)
    if type_name == "Q2_K":         # its 2-bit values from gguf-py's dequantize with d = 1, dmin = 0, every scale 1
        unit = raw.copy()
        unit[..., 0:16] = 0x01
        unit[..., 80:82] = np.array([1.0], np.float16).view(np.uint8)
        unit[..., 82:84] = 0
        values = gguf.quants.dequantize(unit.reshape(OUTPUTS, -1), gguf.GGMLQuantizationType.Q2_K)
        values = values.reshape(OUTPUTS, -1, 16, 16).astype(np.int64)
        assert values.min() >= 0 and values.max() <= 3
        sc, mn = (raw[..., 0:16] & 0xF).astype(np.int64), (raw[..., 0:16] >> 4).astype(np.int64)
        xq = q.reshape(q.shape[0], q.shape[1], 16, 16)
        isum = np.einsum("nsg,nsgl,msgl->mns", sc, values, xq)
        msum = np.einsum("nsg,msg->mns", mn, xq.sum(-1))
        fp16 = lambda at: raw[..., at:at + 2].copy().view(np.float16)[..., 0]    # noqa: E731
        return isum, msum, fp16(80), fp16(82)
    if type_name == "IQ4_XS":       # its table values from gguf-py's dequantize with d = 1 and every scale 33 - 32
        unit = raw.copy()
        unit[..., 0:2] = np.array([1.0], np.float16).view(np.uint8)
        unit[..., 2:8] = [0xAA, 0xAA, 0x11, 0x11, 0x11, 0x11]
        values = gguf.quants.dequantize(unit.reshape(OUTPUTS, -1), gguf.GGMLQuantizationType.IQ4_XS)
        values = values.reshape(OUTPUTS, -1, 8, 32).astype(np.int64)
        assert set(np.unique(values)) <= {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
        high = raw[..., 2:4].copy().view(np.uint16).astype(np.int64)               # (n, sb, 1)
        sc = np.stack([((raw[..., 4 + j // 2].astype(np.int64) >> (4 * (j % 2))) & 0xF)
                       | (((high[..., 0] >> (2 * j)) & 3) << 4) for j in range(8)], axis=-1) - 32
        isum = np.einsum("nsj,nsjl,msjl->mns", sc, values, q.reshape(q.shape[0], q.shape[1], 8, 32))
        return isum, np.zeros_like(isum), raw[..., 0:2].copy().view(np.float16)[..., 0], None
    if type_name.startswith(("IQ2", "IQ3")):   # g * sign from gguf-py's dequantize with d = 1, every ls 0: d / 8 (4) g
        eighths = type_name != "IQ3_XXS"
        unit = raw.copy()
        unit[..., 0:2] = np.array([1.0], np.float16).view(np.uint8)
        if type_name in ("IQ3_XXS", "IQ2_XXS"):          # ls: the top nibble of a uint32 per 32 values
            aux = raw[..., 66:98] if type_name == "IQ3_XXS" else raw[..., 2:66].reshape(*raw.shape[:2], 8, 8)[..., 4:]
            ls = np.repeat((aux.copy().view(np.uint32).reshape(*raw.shape[:2], 8) >> 28).astype(np.int64), 2, -1)
            unit[..., slice(69, 98, 4) if type_name == "IQ3_XXS" else slice(9, 66, 8)] &= 0x0F
        else:                                            # IQ2_XS, IQ2_S: a nibble per 16 values
            at = 66 if type_name == "IQ2_XS" else 74
            packed = raw[..., at:at + 8].astype(np.int64)
            ls = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*raw.shape[:2], 16)
            unit[..., at:at + 8] = 0
        values = gguf.quants.dequantize(unit.reshape(OUTPUTS, -1), gguf.GGMLQuantizationType[type_name])
        values = (values * (8 if eighths else 4)).reshape(OUTPUTS, -1, 16, 16).astype(np.int64)
        assert np.abs(values).max() <= (43 if eighths else 62)
        isum = np.einsum("nsh,nshl,mshl->mns", 2 * ls + 1, values, q.reshape(q.shape[0], q.shape[1], 16, 16))
        dw = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32) * np.float32(0.125 if eighths else 0.25)
        return isum, np.zeros_like(isum), dw, None
    if type_name in ("Q4_K", "Q5_K"):
        sc, mn = _k4_scales(raw[..., 4:16])
        if type_name == "Q4_K":
            qs = raw[..., 16:144].astype(np.int64).reshape(OUTPUTS, -1, 4, 32)
            values = np.stack([qs & 0xF, qs >> 4], axis=3).reshape(OUTPUTS, -1, 8, 32)   # sub-block 2j, 2j+1
        else:       # Q5_K's integers from gguf-py's dequantize of the same blocks with d = 1, dmin = 0, all sc 1, m 0
            unit = raw.copy()
            unit[..., 0:2] = np.array([1.0], np.float16).view(np.uint8)
            unit[..., 2:4] = 0
            unit[..., 4:16] = [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
            values = gguf.quants.dequantize(unit.reshape(OUTPUTS, -1), gguf.GGMLQuantizationType.Q5_K)
            values = values.reshape(OUTPUTS, -1, 8, 32).astype(np.int64)
            assert values.min() >= 0 and values.max() <= 31
        xq = q.reshape(q.shape[0], q.shape[1], 8, 32)
        isum = np.einsum("nsj,nsjl,msjl->mns", sc, values, xq)
        msum = np.einsum("nsj,msj->mns", mn, xq.sum(-1))
        return isum, msum, raw[..., 0:2].copy().view(np.float16)[..., 0], raw[..., 2:4].copy().view(np.float16)[..., 0]
    ql, qh = raw[..., :128].astype(np.int64), raw[..., 128:192].astype(np.int64)
    values = np.empty(raw.shape[:2] + (256,), np.int64)
    for h in range(2):
        a, c, hb = ql[..., 64 * h:64 * h + 32], ql[..., 64 * h + 32:64 * h + 64], qh[..., 32 * h:32 * h + 32]
        lows = [a & 0xF, c & 0xF, a >> 4, c >> 4]
        for part in range(4):
            values[..., 128 * h + 32 * part:128 * h + 32 * part + 32] = lows[part] | (((hb >> (2 * part)) & 3) << 4)
    sc = raw[..., 192:208].copy().view(np.int8).astype(np.int64)
    isum = np.einsum("nsg,nsgl,msgl->mns", sc, (values - 32).reshape(OUTPUTS, -1, 16, 16),
                     q.reshape(q.shape[0], q.shape[1], 16, 16))
    return isum, np.zeros_like(isum), raw[..., 208:210].copy().view(np.float16)[..., 0], None


def _fma32(a, b, c):
    """fp32 fused multiply-add: the float64 product of two fp32 values is exact, the sum rounds once to float64
    and once to fp32 (a double rounding that differs from one rounding about once in 2^29: not on this data)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def _epilogue(type_name, isum, msum, dx, dw, dmin, fused=True):
    total = np.zeros(isum.shape[:2], np.float32)
    mins = np.zeros(isum.shape[:2], np.float32)
    for sb in range(isum.shape[2]):
        scale = (dx[:, None, sb] * dw[None, :, sb].astype(np.float32)).astype(np.float32)
        if fused:
            total = _fma32(scale, isum[..., sb].astype(np.float32), total)
        else:                                          # another order: multiply, round, then add
            total = (scale * isum[..., sb].astype(np.float32)).astype(np.float32) + total
        if dmin is not None:
            mscale = (dx[:, None, sb] * dmin[None, :, sb].astype(np.float32)).astype(np.float32)
            mins = _fma32(mscale, msum[..., sb].astype(np.float32), mins)
    if type_name in ("Q4_1", "Q5_1"):                # values d * q + m
        return total + mins
    return total - mins if type_name in ("Q4_K", "Q5_K", "Q2_K") else total


@pytest.mark.parametrize("type_name", list(TYPES))
def test_the_kernels_compute_the_canonical_arithmetic_and_another_order_differs(type_name):
    blocks, x = _data(type_name, 6, rows=9)
    WIDTH = _width(type_name)
    q, dx = _quantize(x, 256 if type_name in K_TYPES else 32)
    isum, msum, dw, dmin = _integer_sums(type_name, blocks, q)
    assert np.abs(isum).max() < 2**31 and np.abs(msum).max() < 2**31
    canonical = torch.from_numpy(_epilogue(type_name, isum, msum, dx, dw, dmin))
    for path in _paths_here():
        got = gguf_kernels.linear_q8_on(x, blocks, TYPES[type_name], WIDTH, path)
        assert torch.equal(_bits(got), _bits(canonical)), path
    # Negative controls: the same exact integer sums with the epilogue in another order give other bits, and so
    # does the right epilogue over activations quantized per 64 values instead of 32 (32-value formats).
    got = _bits(gguf_kernels.linear_q8(x, blocks, TYPES[type_name], WIDTH))
    other = torch.from_numpy(_epilogue(type_name, isum, msum, dx, dw, dmin, fused=False))
    assert not torch.equal(got, _bits(other))
    if type_name not in K_TYPES:
        q64, dx64 = _quantize(x, 64)
        isum64, msum64, _, _ = _integer_sums(type_name, blocks, q64.reshape(q.shape))
        coarse = _epilogue(type_name, isum64, msum64, np.repeat(dx64, 2, axis=1), dw, dmin)
        assert not torch.equal(got, _bits(torch.from_numpy(coarse)))
    scale = float(canonical.abs().max())                                  # ... though close: same model
    assert torch.allclose(other, canonical, rtol=1e-4, atol=1e-6 * scale)


# ---------------------------------------------------------------- MULTIDRAFT_ISA


def _choose_with(monkeypatch, value):
    monkeypatch.setenv("MULTIDRAFT_ISA", value)
    gguf_kernels._choose_isa()


def test_multidraft_isa_forces_a_path_and_refuses_bad_values(monkeypatch):
    try:
        for path in ("avx2", "scalar"):
            _choose_with(monkeypatch, path)
            assert gguf_kernels.isa() == path
        with pytest.raises(InvalidOptionError, match="avx2, avx-vnni"):
            _choose_with(monkeypatch, "sse9")
        lacking = [p for p in gguf_kernels.ISA_PATHS if gguf_kernels.missing_flag(p)]
        for path in lacking:                         # a path this CPU lacks: the error names the cpuid flag
            with pytest.raises(InvalidOptionError, match=gguf_kernels.missing_flag(path).split()[0]):
                _choose_with(monkeypatch, path)
    finally:
        monkeypatch.delenv("MULTIDRAFT_ISA")
        gguf_kernels._choose_isa()
    assert gguf_kernels.isa() == [p for p in gguf_kernels.ISA_PATHS if not gguf_kernels.missing_flag(p)][-1]


@pytest.mark.parametrize("path", ["avx-vnni", "avx512-vnni", "amx"])
def test_forced_path_runs_the_model_arithmetic(monkeypatch, path):
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)}: the forced {path} test runs on a CPU with it")
    try:
        _choose_with(monkeypatch, path)
        assert gguf_kernels.isa() == path
        for type_name in ("Q6_K", "Q4_1"):
            blocks, x = _data(type_name, 8, rows=17)
            width = _width(type_name)
            assert torch.equal(gguf_kernels.linear_q8(x, blocks, TYPES[type_name], width),
                               gguf_kernels.linear_q8_on(x, blocks, TYPES[type_name], width, "scalar"))
    finally:
        monkeypatch.delenv("MULTIDRAFT_ISA")
        gguf_kernels._choose_isa()


def test_a_path_that_fails_its_self_check_is_not_used(monkeypatch):
    monkeypatch.setattr(gguf_kernels, "self_check", lambda path: path == "scalar")
    try:
        with pytest.warns(RuntimeWarning, match="avx2 path"):
            gguf_kernels._choose_isa()
        assert gguf_kernels.isa() == "scalar"
    finally:
        monkeypatch.undo()
        gguf_kernels._choose_isa()
    assert gguf_kernels.isa() != "scalar"


def test_a_path_is_self_checked_once_per_process(monkeypatch):
    # forward-cost's --isa switches paths twice a round: the second switch to a path reuses its verdict
    calls = []
    real = gguf_kernels.linear_q8_on
    monkeypatch.setattr(gguf_kernels, "linear_q8_on", lambda *args: calls.append(args[-1]) or real(*args))
    before = gguf_kernels.isa()
    gguf_kernels.self_check.cache_clear()
    try:
        gguf_kernels.use_isa("avx2")
        checked = len(calls)
        assert checked > 0 and "avx2" in calls
        gguf_kernels.use_isa(before)
        gguf_kernels.use_isa("avx2")
        gguf_kernels.use_isa(before)
        assert calls.count("avx2") == calls[:checked].count("avx2")
    finally:
        gguf_kernels.use_isa(before)
    assert gguf_kernels.self_check(before)


def test_a_path_that_crashes_its_probe_costs_that_path_only(monkeypatch, tmp_path):
    # A child process stands in for a trapping instruction (it kills itself with SIGILL in avx2's check): the
    # parent survives, records avx2 as crashed beside the build, and never puts linear_q8 on it.
    monkeypatch.setattr(gguf_kernels, "_build_folder", str(tmp_path))
    monkeypatch.setattr(gguf_kernels, "_crashed", None)
    monkeypatch.setenv("MULTIDRAFT_ISA_PROBE_CRASH", "avx2")
    try:
        crashed = gguf_kernels.crashing_paths()
        assert crashed == {"avx2": "signal 4"}
        with pytest.warns(RuntimeWarning, match="avx2 path .* crashed its self-check"):
            gguf_kernels.use_isa()
        assert gguf_kernels.isa() != "avx2"
        with pytest.warns(RuntimeWarning, match="avx2 path"):
            gguf_kernels.use_isa("avx2")             # forced: the next one down
        assert gguf_kernels.isa() == "scalar"
        # the verdict is read back from its file, not probed again (the crash variable is gone)
        monkeypatch.delenv("MULTIDRAFT_ISA_PROBE_CRASH")
        monkeypatch.setattr(gguf_kernels, "_crashed", None)
        assert gguf_kernels.crashing_paths() == {"avx2": "signal 4"}
        assert [f.name.startswith("paths-") for f in tmp_path.iterdir()] == [True]
        # with no crash, every path this CPU claims passes and nothing is recorded as crashed
        (next(tmp_path.iterdir())).unlink()
        monkeypatch.setattr(gguf_kernels, "_crashed", None)
        assert gguf_kernels.crashing_paths() == {}
    finally:
        monkeypatch.undo()
        gguf_kernels._choose_isa()
    assert gguf_kernels.isa() != "scalar"


# ---------------------------------------------------------------- Q4_K packed in groups of 8 rows (Q4_K_X8)


def _packed_case(type_name, repack, seed, outputs, rows):
    """(GGUF blocks of type_name (IQ3_S, Q3_K: the Q6_K blocks they convert to at load), the same repacked, an input
    of `rows` rows of very different sizes), 768 wide."""
    rng = np.random.default_rng(seed)
    raw = random_blocks(type_name, outputs, 768, rng, scale=0.05)
    convert = {"IQ3_S": gguf_convert.iq3_s_as_q6_k, "Q3_K": gguf_convert.q3_k_as_q6_k}.get(type_name)
    blocks = torch.from_numpy(convert(raw) if convert else raw)
    x = torch.randn(rows, 768, generator=torch.Generator().manual_seed(seed)) * torch.logspace(-2, 1, rows)[:, None]
    return blocks, repack(blocks), x


@pytest.mark.parametrize("type_name", ["Q4_K", "Q5_K", "Q6_K", "Q2_K", "IQ4_XS", "Q5_0", "Q8_0", "IQ3_S", "Q3_K"])
def test_a_matrix_whose_rows_do_not_fill_its_layouts_groups_packs_with_its_last_row_repeated(type_name):
    """45 rows (a vocabulary like 32002: not in eights or sixteens) pack anyway: the packed copy repeats the last row
    up to whole groups and linear() drops those outputs, so every row keeps the scalar reference's bits over the
    plain blocks, at any row count; q, k, v (gate, up) with such a matrix among them run one at a time (their
    shared kernel takes no padding), with the same bits."""
    converted = {"IQ3_S": 21, "Q3_K": 11}.get(type_name)
    plain_type = 14 if converted else TYPES[type_name]
    width = 768 if converted else _width(type_name)
    rng = np.random.default_rng(41)
    raw = random_blocks(type_name, OUTPUTS, width, rng, scale=0.05)
    if converted:
        raw = {21: gguf_convert.iq3_s_as_q6_k, 11: gguf_convert.q3_k_as_q6_k}[converted](raw)
    blocks = torch.from_numpy(raw)
    x = torch.randn(40, width, generator=torch.Generator().manual_seed(41)) * torch.logspace(-2, 1, 40)[:, None]
    matrix = BlockMatrix(blocks, plain_type, width, source_type=converted)
    matrix.pack_for_q8()
    if matrix.packed is None:
        pytest.skip(f"no packed layout of {type_name} on the {gguf_kernels.isa()} path")
    group = 8 if converted else gguf_kernels.PACKED[matrix.packed_type][2]
    assert matrix.padded_rows == -OUTPUTS % group > 0 and matrix.packed.shape[0] == OUTPUTS + matrix.padded_rows
    assert matrix.rows == OUTPUTS
    for rows in (1, 5, 9, 17, 40):
        expected = gguf_kernels.linear_q8_on(x[:rows], blocks, plain_type, width, "scalar")
        got = matrix.linear(x[:rows], q8=True)
        assert got.shape == (rows, OUTPUTS) and got.is_contiguous()
        assert torch.equal(_bits(got), _bits(expected)), rows
    from multidraft.models.quantized import block_linears
    other = BlockMatrix(torch.from_numpy(random_blocks("Q8_0", 16, width, rng, scale=0.05)), 8, width)
    other.pack_for_q8()
    biases = [torch.randn(OUTPUTS), None]
    first, second = block_linears([matrix, other], x[:9], "q8", biases)
    assert torch.equal(_bits(first), _bits(gguf_kernels.linear_q8_on(x[:9], blocks, plain_type, width, "scalar")
                                           + biases[0]))
    assert torch.equal(_bits(second), _bits(gguf_kernels.linear_q8_on(x[:9], other.blocks, 8, width, "scalar")))


def _x8_data(seed, outputs=56, rows=40):          # 7 groups: AMX's tile kernel takes pairs and a last one alone
    return _packed_case("Q4_K", gguf_kernels.repack_q4_k_x8, seed, outputs, rows)


def _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, plain_type, packed, packed_type, x):
    """The last 1..40 rows of x on `path` over the packed blocks == the scalar reference over the plain ones, on 1
    and 2 threads."""
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in range(1, 41):
                part = x[40 - rows:]
                expected = gguf_kernels.linear_q8_on(part, blocks, plain_type, 768, "scalar")
                got = gguf_kernels.linear_q8_on(part, packed, packed_type, 768, path)
                assert torch.equal(_bits(got), _bits(expected)), (path, count, rows)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_q4_k_packed_in_eights_gives_q4_ks_bits_on_every_path_row_and_thread_count(path):
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _x8_data(7)
    assert packed.shape == (56, 3 * 148)
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 12, packed, gguf_kernels.Q4_K_X8, x)
    # the many-matrices op (q/k/v, gate/up) takes packed and plain matrices side by side
    plain_q6 = torch.from_numpy(random_blocks("Q6_K", 40, 768, np.random.default_rng(8), scale=0.05))
    both = gguf_kernels.linear_q8_many_on(x[:5], [packed, plain_q6], [gguf_kernels.Q4_K_X8, 14], 768,
                                          [None, None], path)
    assert torch.equal(_bits(both[0]), _bits(gguf_kernels.linear_q8_on(x[:5], blocks, 12, 768, "scalar")))
    assert torch.equal(_bits(both[1]), _bits(gguf_kernels.linear_q8_on(x[:5], plain_q6, 14, 768, "scalar")))


def test_q4_k_packed_layout_gives_the_largest_dots_on_every_path():
    """Every value 15, every scale and min 63, every input +-127: AVX2's kernel adds a sub-block's maddubs pairs as
    int16 (four chunks: 15240), the VNNI ones a chunk's dots; the scalar reference's bits on every path."""
    blocks, _, _ = _x8_data(9, outputs=16, rows=1)
    extreme = blocks.clone().view(16, 3, 144)
    extreme[:, :, 4:] = 255                              # scales, mins and values at their largest
    _assert_largest_dots_on_every_path(extreme.view(16, -1).contiguous(), 12, gguf_kernels.repack_q4_k_x8,
                                       gguf_kernels.Q4_K_X8)


def _x8_q5_data(seed, outputs=56, rows=40):
    return _packed_case("Q5_K", gguf_kernels.repack_q5_k_x8, seed, outputs, rows)


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_q5_k_packed_in_eights_gives_q5_ks_bits_on_every_path_row_and_thread_count(path):
    """Q5_K_X8: the AVX-512 kernels (avx512-vnni, amx) read it with the fifth bits as masks, the amx path its tile
    kernel past Q4_K's VNNI limit (amx-emulated: at every row count), the 256-bit paths (avx2, avx-vnni,
    vnni-emulated) AVX2's maddubs kernel, the scalar path the reference. The bits of Q5_K in GGUF's layout on the
    scalar reference, 1..40 rows."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _x8_q5_data(17)
    assert packed.shape == (56, 3 * 180)
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 13, packed, gguf_kernels.Q5_K_X8, x)


def test_q5_k_packed_layout_reads_each_fifth_bit_where_it_is_laid_out():
    blocks, packed, x = _x8_q5_data(18, outputs=16, rows=9)
    # Negative control, on every path: one fifth bit flipped (row 2's value 0 of chunk 5, the odd sub-block of pair 1,
    # super-block 0; the bits at 1184: 16 bytes a chunk, row r's value i in byte 8 (r % 2) + i at bit r // 2, + 4 for
    # the odd sub-block) and rows 5 and 6's of chunk 2 (the even sub-block of pair 0) change their row's outputs only
    expected = _bits(gguf_kernels.linear_q8_on(x, blocks, 13, 768, "scalar"))
    for at, bit, row in ((1184 + 16 * 5 + 0, 4 + 1, 2), (1184 + 16 * 2 + 8, 2, 5), (1184 + 16 * 2 + 0, 3, 6)):
        for path in _paths_here():
            changed = packed.clone()
            changed.view(-1)[at] ^= 1 << bit
            got = _bits(gguf_kernels.linear_q8_on(x, changed, gguf_kernels.Q5_K_X8, 768, path))
            assert not torch.equal(got[:, row], expected[:, row]), path
            others = [n for n in range(16) if n != row]
            assert torch.equal(got[:, others], expected[:, others]), path
    # The largest dots: every value 31 and every input +-127. Sixteen such products would overflow the int16 that
    # vpdpwssd reads a lane's dot as (the VNNI kernel applies the scales every two chunks: eight products); AVX2's adds
    # a sub-block's maddubs pairs as int16 (four chunks: 31496).
    extreme = blocks.clone().view(16, 3, 176)
    extreme[:, :, 4:16] = 255                            # every sub-block's scale and min 63
    extreme[:, :, 16:] = 255                             # qh and qs: every value 31
    _assert_largest_dots_on_every_path(extreme.view(16, -1).contiguous(), 13, gguf_kernels.repack_q5_k_x8,
                                       gguf_kernels.Q5_K_X8)
    with pytest.raises(RuntimeError, match="repack_q5_k_x8's output"):
        gguf_kernels.linear_q8(x, blocks, gguf_kernels.Q5_K_X8, 768)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        gguf_kernels.repack_q5_k_x8(blocks[:12])


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_iq4_xs_packed_in_eights_gives_iq4_xss_bits_on_every_path_row_and_thread_count(path):
    """IQ4_XS_X8: the AVX-512 kernel (avx512-vnni, amx), the 256-bit ones (avx2, avx-vnni, vnni-emulated: the values
    + 128 on vpdpbusd, or their magnitudes on maddubs) and the scalar reference: the bits of IQ4_XS in GGUF's layout
    on the scalar reference, 1..40 rows."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _packed_case("IQ4_XS", gguf_kernels.repack_iq4_xs_x8, 27, 56, 40)
    assert packed.shape == (56, 3 * 148)
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 23, packed, gguf_kernels.IQ4_XS_X8, x)


def _assert_a_changed_byte_changes_its_row_only(blocks, packed, plain_type, packed_type, x, at, flip, row):
    """The packed layout gives the plain blocks' bits, and `flip` xor-ed into its byte `at` (of output `row`) changes
    that row's outputs only: the byte is read where the layout lays it out."""
    expected = _bits(gguf_kernels.linear_q8(x, blocks, plain_type, 768))
    assert torch.equal(_bits(gguf_kernels.linear_q8(x, packed, packed_type, 768)), expected)
    changed = packed.clone()
    changed.view(-1)[at] ^= flip
    got = _bits(gguf_kernels.linear_q8(x, changed, packed_type, 768))
    assert not torch.equal(got[:, row], expected[:, row])
    assert torch.equal(got[:, :row], expected[:, :row]) and torch.equal(got[:, row + 1:], expected[:, row + 1:])


def _assert_largest_dots_on_every_path(extreme, plain_type, repack, packed_type):
    """Inputs +-127 over `extreme` blocks: the scalar reference's bits on every path, plain and packed; 8 rows (all +,
    all -, in turn), so that the kernels that take several inputs at once (Q2_K's and Q3_K's from 2 and 4 on, which
    fold the scales into the values) take them here too."""
    signs = torch.ones(8, 768)
    signs[1::2] = -1
    expected = _bits(gguf_kernels.linear_q8_on(signs, extreme, plain_type, 768, "scalar"))
    for path in _paths_here():
        assert torch.equal(_bits(gguf_kernels.linear_q8_on(signs, repack(extreme), packed_type, 768, path)), expected)
        assert torch.equal(_bits(gguf_kernels.linear_q8_on(signs, extreme, plain_type, 768, path)), expected)


def test_iq4_xs_packed_layout_reads_each_index_and_the_largest_dots():
    blocks, packed, x = _packed_case("IQ4_XS", gguf_kernels.repack_iq4_xs_x8, 28, 16, 9)
    # row 5's byte 3 of chunk 2 of pair 1, super-block 0: its sub-block 2 value 19
    _assert_a_changed_byte_changes_its_row_only(blocks, packed, 23, gguf_kernels.IQ4_XS_X8, x,
                                                160 + ((1 * 4 + 2) * 8 + 5) * 8 + 3, 0x05, 5)
    for extreme in _iq4_xs_extremes(blocks):        # (the table values + 128: up to 241 on the VNNI kernels)
        _assert_largest_dots_on_every_path(extreme, 23, gguf_kernels.repack_iq4_xs_x8, gguf_kernels.IQ4_XS_X8)
    with pytest.raises(RuntimeError, match="repack_iq4_xs_x8's output"):
        gguf_kernels.linear_q8(x, blocks, gguf_kernels.IQ4_XS_X8, 768)
    with pytest.raises(RuntimeError, match="multiple of"):
        gguf_kernels.repack_iq4_xs_x8(blocks[:12])


@pytest.mark.parametrize("type_name", ["IQ3_S", "Q3_K"])
@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_converted_formats_packed_with_their_own_tables_give_their_q6_k_blocks_bits_everywhere(path, type_name):
    """IQ3_S and Q3_K, converted to Q6_K at load, packed in IQ4_XS_X8's layout with IQ3_S's table (odd values
    -15..15) and in Q3_K_X8 (the table -4..3, a scale per 16 values): every path's kernels of these layouts give the
    bits of their Q6_K blocks on the scalar reference, 1..40 rows, 1 and 2 threads, so whether a matrix is packed
    changes no bit."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    packed_type, repack, row_bytes, _, _ = _CONVERTED[type_name]
    blocks, packed, x = _packed_case(type_name, repack, 33, 56, 40)
    assert packed.shape == (56, 3 * row_bytes)          # Q6_K's 210 bytes a super-block and row -> 148 / 164
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 14, packed, packed_type, x)


@pytest.mark.parametrize("type_name", ["IQ3_S", "Q3_K"])
def test_converted_formats_packed_layouts_read_their_table_each_index_and_the_largest_dots(type_name):
    packed_type, repack, row_bytes, extremes, broken_bytes = _CONVERTED[type_name]
    blocks, packed, x = _packed_case(type_name, repack, 34, 16, 9)
    # row 5's byte 3 of chunk 2 of pair 1, super-block 0: its sub-block 2 value 19
    _assert_a_changed_byte_changes_its_row_only(blocks, packed, 14, packed_type, x,
                                                160 + ((1 * 4 + 2) * 8 + 5) * 8 + 3, 0x05, 5)
    # IQ3_S: the kernels read the table from the matrix (each super-block holds a copy): IQ4_XS's in its place changes
    # every output on every path. Q3_K_X8 keeps none (its indices are the values + 4).
    expected = _bits(gguf_kernels.linear_q8_on(x, blocks, 14, 768, "scalar"))
    tables = packed.view(-1, row_bytes * 8)[:, 16:32]
    if type_name == "Q3_K":
        assert not tables.any()
    else:
        other = packed.clone()
        other.view(-1, row_bytes * 8)[:, 16:32] = torch.tensor(gguf_convert.IQ4_NL_TABLE).view(torch.uint8)
        for path in _paths_here():
            got = _bits(gguf_kernels.linear_q8_on(x, other, packed_type, 768, path))
            assert bool((got != expected).any(dim=0).all()), path
    for extreme in extremes(blocks):
        _assert_largest_dots_on_every_path(extreme, 14, repack, packed_type)
    # Q6_K blocks that hold none of the format's values are refused: a real Q6_K matrix, and one changed byte
    with pytest.raises(RuntimeError, match="cannot hold"):
        repack(torch.from_numpy(random_blocks("Q6_K", 16, 768, np.random.default_rng(35))))
    for at, change in broken_bytes:
        broken = blocks.clone()
        broken[3, at] ^= change
        with pytest.raises(RuntimeError, match="cannot hold"):
            repack(broken)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        repack(blocks[:12])


def _iq3_s_extremes(blocks):
    """IQ3_S blocks (as Q6_K, as many rows as `blocks`) with every grid entry 24 (15, 15, 1, 1: maddubs adds the two
    15s' products as int16), every scale 31 or 1 (s 15 or 0), every sign set or clear."""
    raw = random_blocks("IQ3_S", len(blocks), 768, np.random.default_rng(36), scale=0.05).reshape(len(blocks), 3, 110)
    raw[:, :, 2:66], raw[:, :, 66:74] = 24, 0
    for scale_bits, sign_bits in ((0xFF, 0x00), (0xFF, 0xFF), (0x00, 0xFF), (0x00, 0x00)):
        raw[:, :, 106:110], raw[:, :, 74:106] = scale_bits, sign_bits
        yield torch.from_numpy(gguf_convert.iq3_s_as_q6_k(raw.reshape(len(blocks), -1)))


def _q3_k_extremes(blocks):
    """Q3_K blocks (as Q6_K, as many rows as `blocks`) with every value -4 or 3 and every scale -32 or 31 (|w| up to
    128, one past an int8)."""
    raw = random_blocks("Q3_K", len(blocks), 768, np.random.default_rng(37), scale=0.05).reshape(len(blocks), 3, 110)
    for value_bits, scale_bits in ((0x00, 0x00), (0xFF, 0x00), (0x00, 0xFF), (0xFF, 0xFF)):
        raw[:, :, :96], raw[:, :, 96:108] = value_bits, scale_bits       # hmask and qs; the packed scales
        yield torch.from_numpy(gguf_convert.q3_k_as_q6_k(raw.reshape(len(blocks), -1)))


# type name -> (packed type, repack from its Q6_K blocks, bytes a row and super-block, extremes, (byte, xor) that
# make a converted block one the layout cannot hold)
_CONVERTED = {
    "IQ3_S": (gguf_kernels.IQ4_XS_X8, gguf_kernels.repack_q6_k_iq3_s_x8, 148, _iq3_s_extremes,
              ((5, 0x01), (193, 0x02))),             # a value even (ql byte 5's low bit); a 16's scale not its twin's
    "Q3_K": (gguf_kernels.Q3_K_X8, gguf_kernels.repack_q6_k_q3_k_x8, 164, _q3_k_extremes,
             ((5, 0x08), (192, 0x40))),              # a value moved by 8; a scale past -32..31
}


def _iq4_xs_extremes(blocks):
    """Every index 0 or 15 (values -127, 113) and every scale -32 or 31 (ls 0 or 63), the four combinations."""
    for index, scale_bits in ((0xFF, 0x00), (0x00, 0xFF), (0xFF, 0xFF), (0x00, 0x00)):
        extreme = blocks.clone().view(len(blocks), -1, 136)
        extreme[:, :, 2:8] = scale_bits
        extreme[:, :, 8:] = index
        yield extreme.view(len(blocks), -1).contiguous()


def _q2_k_extremes(blocks):
    """Every value 3 with every scale 15 and every min 15 or 0, and every value 0 with the mins 15."""
    for scale_bits, values in ((0xFF, 0xFF), (0x0F, 0xFF), (0xFF, 0x00)):
        extreme = blocks.clone().view(len(blocks), -1, 84)
        extreme[:, :, :16] = scale_bits
        extreme[:, :, 16:80] = values
        yield extreme.view(len(blocks), -1).contiguous()


# type name -> (GGUF type, packed type, repack, (byte of group 0's row 6 in super-block 1, bits flipped), extremes)
_NEWER_TILE_KERNELS = {
    "IQ4_XS": (23, gguf_kernels.IQ4_XS_X8, gguf_kernels.repack_iq4_xs_x8,
               (1184 + 160 + ((2 * 4 + 1) * 8 + 6) * 8 + 4, 0x30), _iq4_xs_extremes),      # sub-block 5's index
    "IQ3_S": (14, gguf_kernels.IQ4_XS_X8, gguf_kernels.repack_q6_k_iq3_s_x8,
              (1184 + 160 + ((2 * 4 + 1) * 8 + 6) * 8 + 4, 0x30), _iq3_s_extremes),      # as IQ4_XS's
    "Q3_K": (14, gguf_kernels.Q3_K_X8, gguf_kernels.repack_q6_k_q3_k_x8,
             (1312 + 160 + ((2 * 4 + 1) * 8 + 6) * 8 + 4, 0x30), _q3_k_extremes),       # as IQ4_XS's
    "Q2_K": (10, gguf_kernels.Q2_K_X8, gguf_kernels.repack_q2_k_x8,
             (672 + 160 + ((1 * 4 + 2) * 8 + 6) * 8 + 4, 0x30), _q2_k_extremes),          # value 128 + 64 + 16 + 4
}


@pytest.mark.parametrize("type_name", sorted(_NEWER_TILE_KERNELS))
@pytest.mark.parametrize("path", ["amx", "amx-emulated", "amx-emulated-tiles"])
def test_the_iq4_xs_and_q2_k_tile_kernels_read_each_value_and_the_largest_ones(path, type_name):
    """IQ4_XS_X8's (with IQ4_XS's table and with IQ3_S's), Q3_K_X8's and Q2_K_X8's tile kernels at every row count
    (set_amx_vnni_rows(0, 0)), their products and epilogues overlapped or not, 1..40 rows over 7 groups (three pairs
    and one alone): the scalar reference's bits; IQ4_XS's w = sc * v split as 256 hi + lo with hi signed (|w| up to
    32 * 127; Q3_K's a scale per 16), Q2_K's w = sc * q in one byte and 16 mins a super-block, at their extremes with
    every input +-127; one changed value changes its row only."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    plain_type, packed_type, repack, (at, flip), extremes = _NEWER_TILE_KERNELS[type_name]
    blocks, packed, x = _packed_case(type_name, repack, 29, 56, 40)
    signs = torch.ones(20, 768)
    signs[1::2] = -1
    limits, pipelined = gguf_kernels.set_amx_vnni_rows(0, 0), gguf_kernels.set_amx_pipelined(True)
    try:
        for overlapped in (False, True):
            gguf_kernels.set_amx_pipelined(overlapped)
            _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, plain_type, packed, packed_type, x)
        expected = _bits(gguf_kernels.linear_q8_on(x[:12], blocks, plain_type, 768, "scalar"))
        changed = packed.clone()
        changed.view(-1)[at] ^= flip
        got = _bits(gguf_kernels.linear_q8_on(x[:12], changed, packed_type, 768, path))
        assert not torch.equal(got[:, 6], expected[:, 6])
        assert torch.equal(got[:, :6], expected[:, :6]) and torch.equal(got[:, 7:], expected[:, 7:])
        for extreme in extremes(blocks[:24]):                # three groups: a pair and one alone
            assert torch.equal(_bits(gguf_kernels.linear_q8_on(signs, repack(extreme), packed_type, 768, path)),
                               _bits(gguf_kernels.linear_q8_on(signs, extreme, plain_type, 768, "scalar")))
    finally:
        gguf_kernels.set_amx_vnni_rows(*limits)
        gguf_kernels.set_amx_pipelined(pipelined)


@pytest.mark.parametrize("type_name", ["IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S"])
def test_the_iq_grid_formats_decode_to_gguf_pys_values_bit_for_bit(type_name):
    """The fp32 runner's decoder (and so the reference the model is checked against) of the grid formats: gguf-py's
    dequantization, every bit, on random blocks."""
    raw = random_blocks(type_name, 24, 768, np.random.default_rng(41), scale=0.05)
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name])
    ours = gguf_kernels.dequantize(torch.from_numpy(raw), TYPES[type_name], 768).numpy()
    assert np.array_equal(ours.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("type_name", ["IQ3_XXS", "IQ2_XXS"])
def test_iq3_xxs_and_iq2_xxs_at_their_largest_values_on_every_path(type_name):
    """Every group the grid's entry with the largest pair of neighbours (IQ3_XXS: 62, 52; IQ2_XXS: 43, 43: maddubs adds
    neighbours' products as int16) at every scale 31 (ls 15) with every input +-127, every sign bit set or clear (the
    parity bit with them): the scalar reference's bits on every path."""
    octets = type_name == "IQ2_XXS"
    grid = gguf_kernels._iq_grids().split("IQ2_XXS_GRID")[1 if octets else 0]
    words = [int(w, 16) for w in re.findall(r"0x([0-9a-f]+)u", grid)]
    value = lambda i, k: (words[i] >> (8 * k)) & 0xFF                 # noqa: E731
    pairs = range(0, 8 if octets else 4, 2)
    index = max(range(256), key=lambda i: max(value(i, k) + value(i, k + 1) for k in pairs))
    assert max(value(index, k) + value(index, k + 1) for k in pairs) == (43 + 43 if octets else 62 + 52)
    size = 66 if octets else 98
    blocks = random_blocks(type_name, 16, 768, np.random.default_rng(31)).reshape(16, 3, size)
    for sign_bits, signs in ((0x0FFFFFFF, torch.ones(2, 768)), (0x00000000, -torch.ones(2, 768))):
        aux = np.full((16, 3, 8), 0xF0000000 | sign_bits, np.uint32).view(np.uint8).reshape(16, 3, 8, 4)
        if octets:                                     # per sub-block: 4 grid bytes, then its uint32
            grid_bytes = np.full((16, 3, 8, 4), index, np.uint8)
            blocks[:, :, 2:66] = np.concatenate([grid_bytes, aux], axis=3).reshape(16, 3, 64)
        else:                                          # 64 grid bytes, then 8 uint32
            blocks[:, :, 2:66], blocks[:, :, 66:98] = index, aux.reshape(16, 3, 32)
        plain = torch.from_numpy(blocks.reshape(16, -1).copy())
        signs[1] = -signs[1]
        expected = gguf_kernels.linear_q8_on(signs, plain, TYPES[type_name], 768, "scalar")
        assert float(expected.abs().min()) > 0
        for path in _paths_here():
            got = gguf_kernels.linear_q8_on(signs, plain, TYPES[type_name], 768, path)
            assert torch.equal(_bits(got), _bits(expected)), path


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_q2_k_packed_in_eights_gives_q2_ks_bits_on_every_path_row_and_thread_count(path):
    """Q2_K_X8: the AVX-512 kernel (avx512-vnni), the tile kernel (amx past its VNNI limit, at every row count by
    default; amx-emulated), the 256-bit ones (avx2, avx-vnni, vnni-emulated) and the scalar reference: the bits of
    Q2_K in GGUF's layout on the scalar reference, 1..40 rows."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _packed_case("Q2_K", gguf_kernels.repack_q2_k_x8, 37, 56, 40)
    assert packed.shape == (56, 3 * 84)
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 10, packed, gguf_kernels.Q2_K_X8, x)


def test_q2_k_packed_layout_reads_each_value_and_the_largest_dots():
    blocks, packed, x = _packed_case("Q2_K", gguf_kernels.repack_q2_k_x8, 38, 16, 9)
    # row 6's byte 5 of half 1, chunk 3, super-block 0: bits 2 of value 128 + 32 + 24 + 5
    _assert_a_changed_byte_changes_its_row_only(blocks, packed, 10, gguf_kernels.Q2_K_X8, x,
                                                160 + ((1 * 4 + 3) * 8 + 6) * 8 + 5, 0x04, 6)
    extreme = blocks.clone().view(16, 3, 84)
    extreme[:, :, :80] = 255                             # every value 3, every scale and min 15
    _assert_largest_dots_on_every_path(extreme.view(16, -1).contiguous(), 10, gguf_kernels.repack_q2_k_x8,
                                       gguf_kernels.Q2_K_X8)
    with pytest.raises(RuntimeError, match="repack_q2_k_x8's output"):       # (its rows are Q2_K's size)
        gguf_kernels.linear_q8(x[:, :512], packed, gguf_kernels.Q2_K_X8, 512)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        gguf_kernels.repack_q2_k_x8(blocks[:12])


@pytest.mark.parametrize("path", ["amx", "amx-emulated", "amx-emulated-tiles"])
def test_the_q5_k_tile_kernel_reads_each_fifth_bit_and_the_largest_values(path):
    """The tile kernel at every row count (set_amx_vnni_rows(0, 0)): w = sc * q split as 8 hi + lo, each in [0, 217]
    at q = 31 and sc = 63, with every input +-127; and one fifth bit flipped changes its row's outputs only."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _x8_q5_data(18, outputs=16, rows=9)
    extreme = blocks.clone().view(16, 3, 176)
    extreme[:, :, 4:16] = 255                            # every sub-block's scale and min 63
    extreme[:, :, 16:] = 255                             # qh and qs: every value 31
    extreme = extreme.view(16, -1).contiguous()
    signs = torch.ones(20, 768)
    signs[1::2] = -1
    limits = gguf_kernels.set_amx_vnni_rows(0, 0)
    try:
        expected = _bits(gguf_kernels.linear_q8_on(x, blocks, 13, 768, "scalar"))
        assert torch.equal(_bits(gguf_kernels.linear_q8_on(x, packed, gguf_kernels.Q5_K_X8, 768, path)), expected)
        changed = packed.clone()
        changed.view(-1)[1184 + 16 * 5] ^= 1 << 5         # as in the test above: row 2's outputs only
        got = _bits(gguf_kernels.linear_q8_on(x, changed, gguf_kernels.Q5_K_X8, 768, path))
        assert not torch.equal(got[:, 2], expected[:, 2])
        assert torch.equal(got[:, :2], expected[:, :2]) and torch.equal(got[:, 3:], expected[:, 3:])
        assert torch.equal(_bits(gguf_kernels.linear_q8_on(signs, gguf_kernels.repack_q5_k_x8(extreme),
                                                           gguf_kernels.Q5_K_X8, 768, path)),
                           _bits(gguf_kernels.linear_q8_on(signs, extreme, 13, 768, "scalar")))
    finally:
        gguf_kernels.set_amx_vnni_rows(*limits)


def test_q5_k_is_packed_on_every_vector_path(monkeypatch):
    blocks = torch.from_numpy(random_blocks("Q5_K", 16, 512, np.random.default_rng(19), scale=0.05))
    avx512_vnni = not gguf_kernels.missing_flag("avx512-vnni")
    for isa, packs in (("amx", avx512_vnni), ("avx512-vnni", avx512_vnni), ("avx-vnni", True), ("avx2", True),
                       ("scalar", False)):
        monkeypatch.setattr(gguf_kernels, "_isa", isa)
        matrix = BlockMatrix(blocks, 13, 512)
        matrix.pack_for_q8()
        assert matrix.q8_weights[1] == (gguf_kernels.Q5_K_X8 if packs else 13), isa


def test_the_packed_layout_is_read_as_laid_out_and_bad_packed_input_is_refused():
    # 3 input rows and 12 (on an AVX512-VNNI CPU: its kernel, then on an AMX one the tile kernel)
    for rows in (3, 12):
        blocks, packed, x = _x8_data(9, outputs=16, rows=rows)
        expected = _bits(gguf_kernels.linear_q8(x, blocks, 12, 768))
        assert torch.equal(_bits(gguf_kernels.linear_q8(x, packed, gguf_kernels.Q4_K_X8, 768)), expected)
        # Negative control: one changed scale byte (row 2's sub-block 0 in super-block 1) changes row 2's outputs
        # only.
        changed = packed.clone()
        changed.view(-1)[1184 + 32 + 2] ^= 1    # rows 0..7 are one group of 1184 bytes per super-block, in order
        got = _bits(gguf_kernels.linear_q8(x, changed, gguf_kernels.Q4_K_X8, 768))
        assert not torch.equal(got[:, 2], expected[:, 2]) and torch.equal(got[:, 3:], expected[:, 3:])
        assert torch.equal(got[:, :2], expected[:, :2])
    with pytest.raises(RuntimeError, match="repack_q4_k_x8's output"):
        gguf_kernels.linear_q8(x, blocks, gguf_kernels.Q4_K_X8, 768)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        gguf_kernels.repack_q4_k_x8(blocks[:12])
    with pytest.raises(RuntimeError, match="unsupported block type 112"):
        gguf_kernels.linear(x, packed, gguf_kernels.Q4_K_X8, 768)     # fp32 activations read GGUF blocks only


# ---------------------------------------------------------------- Q6_K packed in groups of 16 rows (Q6_K_X16, AMX)


def _x16_data(seed, outputs=48, rows=40):
    return _packed_case("Q6_K", gguf_kernels.repack_q6_k_x16, seed, outputs, rows)


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_q6_k_packed_in_sixteens_gives_q6_ks_bits_on_every_path_row_and_thread_count(path):
    # amx: 1-8 input rows the VNNI kernel, then the tile kernel (17-40 in equal runs, the last one overlapping);
    # amx-emulated: the tile kernel with the tile ops in C++ and a scalar decoding; amx-emulated-tiles: the amx path
    # with the tile ops alone in C++; the vector paths: AVX2's kernel
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _x16_data(11)
    assert packed.shape == blocks.shape == (48, 3 * 210)
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 14, packed, gguf_kernels.Q6_K_X16, x)
    plain_q4 = torch.from_numpy(random_blocks("Q4_K", 40, 768, np.random.default_rng(12), scale=0.05))
    both = gguf_kernels.linear_q8_many_on(x[:6], [packed, plain_q4], [gguf_kernels.Q6_K_X16, 12], 768,
                                          [None, None], path)
    assert torch.equal(_bits(both[0]), _bits(gguf_kernels.linear_q8_on(x[:6], blocks, 14, 768, "scalar")))
    assert torch.equal(_bits(both[1]), _bits(gguf_kernels.linear_q8_on(x[:6], plain_q4, 12, 768, "scalar")))


@pytest.mark.parametrize("path", ["amx", "amx-emulated-tiles"])
def test_the_amx_path_gives_the_same_bits_on_its_tiles_or_its_vnni_kernels_at_every_row_count(path):
    """set_amx_vnni_rows moves the amx path's crossover from its AVX512-VNNI kernels to its tile kernels (an A/B knob
    for timing it): the tiles at every row count (0) and the VNNI kernels at every row count give the same bits."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    q4_k, q6_k = _x8_data(7), _x16_data(11)
    q2_k = _packed_case("Q2_K", gguf_kernels.repack_q2_k_x8, 39, 56, 40)
    before = gguf_kernels.set_amx_vnni_rows(0, 0)
    try:
        for limit in (0, 40):
            gguf_kernels.set_amx_vnni_rows(limit, limit)            # (q32 and q2_k follow q4_k's)
            _assert_packed_is_plain_at_every_row_and_thread_count(path, q4_k[0], 12, q4_k[1], gguf_kernels.Q4_K_X8,
                                                                  q4_k[2])
            _assert_packed_is_plain_at_every_row_and_thread_count(path, q6_k[0], 14, q6_k[1], gguf_kernels.Q6_K_X16,
                                                                  q6_k[2])
            _assert_packed_is_plain_at_every_row_and_thread_count(path, q2_k[0], 10, q2_k[1], gguf_kernels.Q2_K_X8,
                                                                  q2_k[2])
        with pytest.raises(RuntimeError, match="row counts >= 0"):
            gguf_kernels.set_amx_vnni_rows(-1, 8)
    finally:
        assert gguf_kernels.set_amx_vnni_rows(*before) == (40, 40, 40, 40)


@pytest.mark.parametrize("path", ["amx", "amx-emulated", "amx-emulated-tiles"])
def test_the_tile_kernels_give_the_same_bits_with_their_products_and_epilogues_overlapped_or_not(path):
    """set_amx_pipelined (an A/B knob): each unit's tile products issued before the previous unit's epilogue, or each
    epilogue right after its products; 1..40 rows (up to three runs a super-block, the last overlapping), three
    super-blocks: the scalar reference's bits both ways, Q4_K and Q5_K (seven groups: three pairs and one alone), Q6_K."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    q4_k, q5_k, q6_k = _x8_data(7), _x8_q5_data(17), _x16_data(11)
    limits, before = gguf_kernels.set_amx_vnni_rows(0, 0), gguf_kernels.set_amx_pipelined(True)
    try:
        assert before is True                            # the default
        for pipelined in (False, True):
            assert gguf_kernels.set_amx_pipelined(pipelined) is not pipelined
            _assert_packed_is_plain_at_every_row_and_thread_count(path, q4_k[0], 12, q4_k[1], gguf_kernels.Q4_K_X8,
                                                                  q4_k[2])
            _assert_packed_is_plain_at_every_row_and_thread_count(path, q5_k[0], 13, q5_k[1], gguf_kernels.Q5_K_X8,
                                                                  q5_k[2])
            _assert_packed_is_plain_at_every_row_and_thread_count(path, q6_k[0], 14, q6_k[1], gguf_kernels.Q6_K_X16,
                                                                  q6_k[2])
    finally:
        gguf_kernels.set_amx_vnni_rows(*limits)
        gguf_kernels.set_amx_pipelined(before)


def _x16_value_bit(row, value, superblock):
    """The first bit of a row's value in the Q6_K_X16 bytes of group 0 (q6_x16.inc's layout)."""
    t = 256 * (value // 16) + 64 * (value % 16 // 4) + 4 * row + value % 4
    return (3360 * superblock + 288) * 8 + 6 * t


def test_the_q6_packed_layout_is_read_as_laid_out_and_bad_packed_input_is_refused():
    for rows in (1, 6, 12, 20):               # on an AMX CPU: the VNNI kernel, one run of tiles, two that overlap
        blocks, packed, x = _x16_data(13, outputs=32, rows=rows)
        expected = _bits(gguf_kernels.linear_q8_on(x, blocks, 14, 768, "scalar"))
        for path in ("scalar", gguf_kernels.isa()):
            assert torch.equal(_bits(gguf_kernels.linear_q8_on(x, packed, gguf_kernels.Q6_K_X16, 768, path)), expected)
        # Negative controls: row 2's scale of sub-block 0 in super-block 1, then one bit of row 5's value 37 in
        # super-block 2: each changes its row's outputs only.
        for row, byte, bit in ((2, 3360 + 32 + 2, 0), (5, *divmod(_x16_value_bit(5, 37, 2) + 1, 8))):
            changed = packed.clone()
            changed.view(-1)[byte] ^= 1 << bit
            got = _bits(gguf_kernels.linear_q8(x, changed, gguf_kernels.Q6_K_X16, 768))
            assert not torch.equal(got[:, row], expected[:, row]), (rows, row)
            others = [n for n in range(32) if n != row]
            assert torch.equal(got[:, others], expected[:, others]), (rows, row)
    with pytest.raises(RuntimeError, match="repack_q6_k_x16's output"):
        gguf_kernels.linear_q8(x, blocks[:, :420], gguf_kernels.Q6_K_X16, 768)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        gguf_kernels.repack_q6_k_x16(blocks[:24])
    with pytest.raises(RuntimeError, match="unsupported block type 114"):
        gguf_kernels.linear(x, packed, gguf_kernels.Q6_K_X16, 768)     # fp32 activations read GGUF blocks only


def test_q6_k_is_packed_in_sixteens_for_amx_or_vbmi_and_in_eights_for_the_256_bit_paths(monkeypatch):
    rng = np.random.default_rng(14)
    q6 = torch.from_numpy(random_blocks("Q6_K", 32, 512, rng, scale=0.05))
    flags = set(next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), []))
    # the path's own cpuid check too: under an emulator (QEMU's user mode) /proc/cpuinfo is the host's
    vbmi_vnni = "avx512vbmi" in flags and not gguf_kernels.missing_flag("avx512-vnni")
    for isa, packed_type in (("amx", gguf_kernels.Q6_K_X16), ("avx2", gguf_kernels.Q6_K_X8),
                             ("avx-vnni", gguf_kernels.Q6_K_X8), ("scalar", None),
                             ("avx512-vnni", gguf_kernels.Q6_K_X16 if vbmi_vnni else gguf_kernels.Q6_K_X8)):
        monkeypatch.setattr(gguf_kernels, "_isa", isa)
        matrix = BlockMatrix(q6, 14, 512)
        matrix.pack_for_q8()
        assert matrix.packed_type == packed_type, isa
        assert matrix.q8_weights[1] == (packed_type or 14)
    monkeypatch.setattr(gguf_kernels, "_isa", "amx")
    odd = BlockMatrix(q6[:24], 14, 512)                       # rows not in sixteens: the last one repeated
    odd.pack_for_q8()
    assert odd.q8_weights[1] == gguf_kernels.Q6_K_X16 and odd.padded_rows == 8 and odd.packed.shape[0] == 32
    q4 = BlockMatrix(torch.from_numpy(random_blocks("Q4_K", 16, 512, rng, scale=0.05)), 12, 512)
    q4.pack_for_q8()
    assert q4.packed_type == gguf_kernels.Q4_K_X8


# ---------------------------------------------------------------- Q6_K packed in groups of 8 rows (Q6_K_X8, 256-bit)


def _x8q6_data(seed, outputs=56, rows=40):
    return _packed_case("Q6_K", gguf_kernels.repack_q6_k_x8, seed, outputs, rows)


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_q6_k_packed_in_eights_gives_q6_ks_bits_on_every_path_row_and_thread_count(path):
    """Q6_K_X8: the 256-bit kernels (avx-vnni's vpdpbusd, avx512-vnni's on 256 bits, AVX2's maddubs, the emulated
    vpdpbusd), four input rows at a time and a last one to three; the scalar path reads it value by value. The bits
    of Q6_K in GGUF's layout on the scalar reference, 1..40 rows, 1 and 2 threads, and beside Q4_K_X8 in one
    shared region."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    blocks, packed, x = _x8q6_data(21)
    assert packed.shape == blocks.shape == (56, 3 * 210)
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, 14, packed, gguf_kernels.Q6_K_X8, x)
    plain_q4 = torch.from_numpy(random_blocks("Q4_K", 40, 768, np.random.default_rng(22), scale=0.05))
    for rows in (1, 6, 13):
        both = gguf_kernels.linear_q8_many_on(x[:rows], [packed, gguf_kernels.repack_q4_k_x8(plain_q4)],
                                              [gguf_kernels.Q6_K_X8, gguf_kernels.Q4_K_X8], 768, [None, None], path)
        assert torch.equal(_bits(both[0]), _bits(gguf_kernels.linear_q8_on(x[:rows], blocks, 14, 768, "scalar")))
        assert torch.equal(_bits(both[1]), _bits(gguf_kernels.linear_q8_on(x[:rows], plain_q4, 12, 768, "scalar")))


def _x8q6_high_bit(row, value, superblock):
    """(byte, bit) of the lower of row's value's two top bits in the Q6_K_X8 bytes of group 0 (q6_x8.inc's layout)."""
    p, high, c, i = value // 64, value % 64 // 32, value % 32 // 8, value % 8
    return 1680 * superblock + 1168 + 128 * p + 32 * c + 8 * (row % 4) + i, 4 * (row // 4) + 2 * high


def test_the_q6_eights_layout_is_read_as_laid_out_and_bad_packed_input_is_refused():
    paths = [p for p in ("avx2", "avx-vnni", "avx512-vnni", "vnni-emulated", "scalar")
             if not gguf_kernels.missing_flag(p)]
    for rows in (1, 4, 7):
        blocks, packed, x = _x8q6_data(23, outputs=24, rows=rows)
        expected = _bits(gguf_kernels.linear_q8_on(x, blocks, 14, 768, "scalar"))
        # Negative controls: row 2's scale of sub-block 3 in super-block 1, one top bit of row 5's value 37 in
        # super-block 2 (a high nibble's value), one of row 1's value 200 (a low nibble's) and the lowest bit of row 6's
        # value 100 (a high nibble): each changes its row's outputs only, on every path.
        for row, byte, bit in ((2, 1680 + 16 + 8 * 3 + 2, 0), (5, *_x8q6_high_bit(5, 37, 2)),
                               (1, *_x8q6_high_bit(1, 200, 0)), (6, 144 + 256 * 1 + 64 * 0 + 8 * 6 + 4, 4)):
            changed = packed.clone()
            changed.view(-1)[byte] ^= 1 << bit
            for path in paths:
                got = _bits(gguf_kernels.linear_q8_on(x, changed, gguf_kernels.Q6_K_X8, 768, path))
                assert not torch.equal(got[:, row], expected[:, row]), (rows, row, path)
                others = [n for n in range(24) if n != row]
                assert torch.equal(got[:, others], expected[:, others]), (rows, row, path)
    # The largest dots: every value 0 (q - 32 = -32) or 63, every input +-127: a lane's 8 products reach 32512, the
    # most the int16 that vpdpwssd reads can hold; scales -128 and 127.
    for value_byte, scale in ((0x00, -128), (0xFF, 127)):
        extreme = blocks.clone().view(24, 3, 210)
        extreme[:, :, :192] = value_byte
        extreme[:, :, 192:208] = scale % 256
        extreme = extreme.view(24, -1).contiguous()
        signs = torch.ones(2, 768)
        signs[1] = -1
        reference = _bits(gguf_kernels.linear_q8_on(signs, extreme, 14, 768, "scalar"))
        for path in paths:
            assert torch.equal(_bits(gguf_kernels.linear_q8_on(signs, gguf_kernels.repack_q6_k_x8(extreme),
                                                               gguf_kernels.Q6_K_X8, 768, path)), reference), path
    with pytest.raises(RuntimeError, match="repack_q6_k_x8's output"):
        gguf_kernels.linear_q8(x, blocks[:, :420], gguf_kernels.Q6_K_X8, 768)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        gguf_kernels.repack_q6_k_x8(blocks[:12])
    with pytest.raises(RuntimeError, match="unsupported block type 115"):
        gguf_kernels.linear(x, packed, gguf_kernels.Q6_K_X8, 768)     # fp32 activations read GGUF blocks only


# ---------------------------------------------------------------- the 32-value formats packed in sixteens (X16_32)

THIRTY_TWO = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL")


def _x16_32_data(type_name, seed, outputs=48, rows=40):
    rng = np.random.default_rng(seed)
    blocks = torch.from_numpy(random_blocks(type_name, outputs, 768, rng, scale=0.05))
    x = torch.randn(rows, 768, generator=torch.Generator().manual_seed(seed)) * torch.logspace(-2, 1, rows)[:, None]
    return blocks, gguf_kernels.repack_x16_32(blocks, TYPES[type_name]), x


@pytest.mark.parametrize("type_name", THIRTY_TWO)
@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_32_value_formats_packed_in_sixteens_give_their_bits_on_every_path_row_and_thread_count(path, type_name):
    # avx512-vnni and amx: the packed kernel (vpdpbusd into 16 output lanes); the others read it unpacked per group
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    plain = TYPES[type_name]
    blocks, packed, x = _x16_32_data(type_name, 21 + plain)
    assert packed.shape == blocks.shape and packed.dtype == torch.uint8
    _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, plain, packed, gguf_kernels.X16_32[plain], x)
    # beside a plain matrix of another 32-value format in the many-matrices op (gate and up, q k v)
    other = 8 if plain != 8 else 2
    plain_other = torch.from_numpy(random_blocks("Q8_0" if other == 8 else "Q4_0", 40, 768,
                                                 np.random.default_rng(5), scale=0.05))
    both = gguf_kernels.linear_q8_many_on(x[:9], [packed, plain_other], [gguf_kernels.X16_32[plain], other], 768,
                                          [None, torch.ones(40)], path)
    assert torch.equal(_bits(both[0]), _bits(gguf_kernels.linear_q8_on(x[:9], blocks, plain, 768, "scalar")))
    assert torch.equal(_bits(both[1]), _bits(gguf_kernels.linear_q8_on(x[:9], plain_other, other, 768, "scalar") + 1))


@pytest.mark.parametrize("type_name, values_at", [("Q4_0", 2), ("Q4_1", 4), ("Q5_0", 2), ("Q5_1", 4)])
def test_32_value_formats_packed_in_sixteens_give_the_largest_dots_on_every_path(type_name, values_at):
    """Every value at its largest (15; 31 with the fifth bits), every input +-127: AVX2's kernel adds a block's
    maddubs pairs as int16 (Q4: 8 steps, 30480; Q5: 4 steps, 31496), the VNNI ones add int32 dots; the scalar
    reference's bits on every path."""
    blocks, _, _ = _x16_32_data(type_name, 7, outputs=16, rows=1)
    extreme = blocks.clone().view(16, 768 // 32, -1)
    extreme[:, :, values_at:] = 255                      # the fifth bits (Q5) and the values, the scales left as drawn
    _assert_largest_dots_on_every_path(extreme.view(16, -1).contiguous(), TYPES[type_name],
                                       lambda plain: gguf_kernels.repack_x16_32(plain, TYPES[type_name]),
                                       gguf_kernels.X16_32[TYPES[type_name]])


@pytest.mark.parametrize("path", ["amx", "amx-emulated", "amx-emulated-tiles"])
def test_the_32_value_tile_kernel_gives_their_bits_in_either_order_and_reads_each_bit_where_it_lies(path):
    """amx_x16_32 (set_amx_vnni_rows(0, 0): the tiles at every row count on amx) for Q4_0, Q5_0 and Q8_0 (Q4_1 and Q5_1
    stay on the VNNI kernel, checked here too) at 1..40 rows, 1 and 2 threads, with the tile products overlapped and in
    turn (set_amx_pipelined); a flipped scale, value or fifth bit changes its row's outputs only; an odd number of
    blocks (K = 96) is left to the kernels without tiles."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    limits, pipelined = gguf_kernels.set_amx_vnni_rows(0, 0), gguf_kernels.set_amx_pipelined(True)
    try:
        for type_name in THIRTY_TWO:
            plain = TYPES[type_name]
            packed_type = gguf_kernels.X16_32[plain]
            blocks, packed, x = _x16_32_data(type_name, 41 + plain)
            for overlapped in (False, True):
                gguf_kernels.set_amx_pipelined(overlapped)
                _assert_packed_is_plain_at_every_row_and_thread_count(path, blocks, plain, packed, packed_type, x)
            expected = _bits(gguf_kernels.linear_q8_on(x[:12], blocks, plain, 768, "scalar"))
            _assert_each_bit_flip_changes_its_row_only(type_name, x[:12], expected, packed, path)
            odd = torch.from_numpy(random_blocks(type_name, 16, 96, np.random.default_rng(plain), scale=0.05))
            x96 = torch.randn(12, 96, generator=torch.Generator().manual_seed(plain))
            assert torch.equal(_bits(gguf_kernels.linear_q8_on(x96, gguf_kernels.repack_x16_32(odd, plain), packed_type,
                                                               96, path)),
                               _bits(gguf_kernels.linear_q8_on(x96, odd, plain, 96, "scalar")))
    finally:
        gguf_kernels.set_amx_vnni_rows(*limits)
        gguf_kernels.set_amx_pipelined(pipelined)


def _cpu_field(name: str) -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.split(":", 1)[0].strip() == name:
            return line.split(":", 1)[1].strip()
    return ""


def test_weights_stream_past_an_amd_l3_and_the_prefetch_changes_no_bit():
    """On AMD's Zen 5 and later (family 0x1A+: an L3 of L2's victims) the VNNI kernels prefetch the weights of a
    one-pass call non-temporally, elsewhere (Zen 4 and Intel) into L2: chosen at load; either way every packed layout
    gives its bits at 1, 8 (one pass) and 9+ rows."""
    if gguf_kernels.missing_flag("avx512-vnni"):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag('avx512-vnni')} (the VNNI kernels run where it has it)")
    gguf_kernels.load()
    chosen = gguf_kernels.set_nontemporal_weights(False)
    try:
        assert chosen == (_cpu_field("vendor_id") == "AuthenticAMD" and int(_cpu_field("cpu family") or 0) >= 0x1A)
        rng = np.random.default_rng(3)
        cases = [(gguf_kernels.repack_x16_32(torch.from_numpy(random_blocks("Q4_1", 48, 768, rng, 0.05)), 3),
                  gguf_kernels.X16_32[3], 768),
                 (gguf_kernels.repack_q4_k_x8(torch.from_numpy(random_blocks("Q4_K", 48, 768, rng, 0.05))),
                  gguf_kernels.Q4_K_X8, 768)]
        for blocks, type_id, width in cases:
            x = torch.randn(17, width, generator=torch.Generator().manual_seed(type_id))
            for rows in (1, 8, 17):
                outputs = []
                for nontemporal in (False, True):
                    gguf_kernels.set_nontemporal_weights(nontemporal)
                    outputs.append(gguf_kernels.linear_q8_on(x[:rows], blocks, type_id, width, "avx512-vnni"))
                assert torch.equal(_bits(outputs[0]), _bits(outputs[1])), (type_id, rows)
    finally:
        gguf_kernels.set_nontemporal_weights(chosen)


def test_one_rows_weights_are_left_to_zen4s_hardware_prefetcher_and_that_changes_no_bit():
    """On AMD's Zen 4 (family 0x19) the VNNI kernel of Q4_K packed in eights leaves a one-row call's weights to the
    hardware prefetcher, elsewhere it also prefetches them in software: chosen at load; either way the same bits at 1
    row (the setting's only kernel), 2 and 9 rows, and Q5_K's (which keeps its prefetch) too."""
    if gguf_kernels.missing_flag("avx512-vnni"):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag('avx512-vnni')} (the VNNI kernels run where it has it)")
    gguf_kernels.load()
    chosen = gguf_kernels.set_one_row_prefetch(True)
    try:
        zen4 = _cpu_field("vendor_id") == "AuthenticAMD" and int(_cpu_field("cpu family") or 0) == 0x19
        assert chosen == (not zen4)
        rng = np.random.default_rng(4)
        cases = [(gguf_kernels.repack_q4_k_x8(torch.from_numpy(random_blocks("Q4_K", 48, 768, rng, 0.05))),
                  gguf_kernels.Q4_K_X8),
                 (gguf_kernels.repack_q5_k_x8(torch.from_numpy(random_blocks("Q5_K", 48, 768, rng, 0.05))),
                  gguf_kernels.Q5_K_X8)]
        for blocks, type_id in cases:
            x = torch.randn(9, 768, generator=torch.Generator().manual_seed(type_id))
            for rows in (1, 2, 9):
                outputs = []
                for prefetch in (False, True):
                    gguf_kernels.set_one_row_prefetch(prefetch)
                    outputs.append(gguf_kernels.linear_q8_on(x[:rows], blocks, type_id, 768, "avx512-vnni"))
                reference = gguf_kernels.linear_q8_on(x[:rows], blocks, type_id, 768, "scalar")
                assert torch.equal(_bits(outputs[0]), _bits(outputs[1])), (type_id, rows)
                assert torch.equal(_bits(outputs[0]), _bits(reference)), (type_id, rows)
    finally:
        gguf_kernels.set_one_row_prefetch(chosen)


def _x16_32_group_block(plain):
    """Bytes of one block of a group of 16 rows in the X16_32 layout: 16 x GGUF's block."""
    return 16 * {2: 18, 3: 20, 6: 22, 7: 24, 8: 34, 20: 18}[plain]


def _x16_32_value_byte(type_name, row, value, block):
    """(byte, bit) of the lowest bit of a row's value in group 0 of the X16_32 bytes (q32_x16.inc's layout)."""
    plain = TYPES[type_name]
    group_block = _x16_32_group_block(plain)
    start = 64 if plain in (3, 7) else 32
    step, lane = divmod(value, 4)
    if plain == 8:
        return group_block * block + start + 64 * step + 4 * row + lane, 0
    return group_block * block + start + 64 * (step % 4) + 4 * row + lane, 4 if step >= 4 else 0


def _assert_each_bit_flip_changes_its_row_only(type_name, x, expected, packed, path):
    """Negative controls in group 0 of X16_32 bytes: the scale of row 2 in block 1, the low bit of row 5's value 21 in
    block 3 (a high nibble for the 4-bit formats), and for Q5 the fifth bit of row 9's value 6 in block 0: each flip,
    read on `path`, changes that row's outputs (columns of `expected`) and no other's."""
    plain = TYPES[type_name]
    flips = [(2, _x16_32_group_block(plain) + 2 * 2 + 1, 0), (5, *_x16_32_value_byte(type_name, 5, 21, 3))]
    if plain in (6, 7):                                 # byte 4n + i of the fifth bits, bit s: value 4s + i of row n
        flips.append((9, (64 if plain == 7 else 32) + 256 + 4 * 9 + 6 % 4, 6 // 4))
    for row, byte, bit in flips:
        changed = packed.clone()
        changed.view(-1)[byte] ^= 1 << bit
        got = _bits(gguf_kernels.linear_q8_on(x, changed, gguf_kernels.X16_32[plain], x.shape[1], path))
        assert not torch.equal(got[:, row], expected[:, row]), (len(x), row)
        others = [n for n in range(expected.shape[1]) if n != row]
        assert torch.equal(got[:, others], expected[:, others]), (len(x), row)


@pytest.mark.parametrize("type_name", THIRTY_TWO)
def test_the_32_value_packed_layout_is_read_as_laid_out_and_bad_packed_input_is_refused(type_name):
    plain = TYPES[type_name]
    packed_type = gguf_kernels.X16_32[plain]
    for rows in (1, 5, 12):
        blocks, packed, x = _x16_32_data(type_name, 31 + plain, outputs=32, rows=rows)
        expected = _bits(gguf_kernels.linear_q8_on(x, blocks, plain, 768, "scalar"))
        for path in ("scalar", gguf_kernels.isa()):
            assert torch.equal(_bits(gguf_kernels.linear_q8_on(x, packed, packed_type, 768, path)), expected)
        _assert_each_bit_flip_changes_its_row_only(type_name, x, expected, packed, gguf_kernels.isa())
    with pytest.raises(RuntimeError, match="repack_x16_32's output"):
        gguf_kernels.linear_q8(x, packed[:, :-4].contiguous(), packed_type, 768)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        gguf_kernels.repack_x16_32(blocks[:24], plain)
    with pytest.raises(RuntimeError, match="a 32-value format"):
        gguf_kernels.repack_x16_32(blocks, 12)
    with pytest.raises(RuntimeError, match=f"unsupported block type {packed_type}"):
        gguf_kernels.linear(x, packed, packed_type, 768)     # fp32 activations read GGUF blocks only


def test_the_32_value_formats_are_packed_on_every_vector_path_and_not_for_the_scalar_one(monkeypatch):
    rng = np.random.default_rng(15)
    avx512_vnni = not gguf_kernels.missing_flag("avx512-vnni")
    for type_name in THIRTY_TWO:
        blocks = torch.from_numpy(random_blocks(type_name, 32, 576, rng, scale=0.05))
        for isa, packs in (("amx", avx512_vnni), ("avx512-vnni", avx512_vnni), ("avx-vnni", True), ("avx2", True),
                           ("scalar", False)):
            monkeypatch.setattr(gguf_kernels, "_isa", isa)
            matrix = BlockMatrix(blocks, TYPES[type_name], 576)
            matrix.pack_for_q8()
            expected = gguf_kernels.X16_32[TYPES[type_name]] if packs else TYPES[type_name]
            assert matrix.q8_weights[1] == expected, (type_name, isa)
        monkeypatch.setattr(gguf_kernels, "_isa", "avx2")
        odd = BlockMatrix(blocks[:24], TYPES[type_name], 576)     # rows not in sixteens: the last one repeated
        odd.pack_for_q8()
        assert odd.q8_weights[1] == gguf_kernels.X16_32[TYPES[type_name]] and odd.padded_rows == 8


@pytest.mark.parametrize("path", gguf_kernels.ISA_PATHS + gguf_kernels.TEST_PATHS)
def test_packed_matrices_of_one_input_share_one_parallel_region_with_each_ones_bits(path):
    """q, k, v (gate, up) all packed: on the avx512-vnni and amx paths (Q4_K alone: also avx-vnni and its emulation)
    one parallel region computes each thread's share of every matrix (q8_run_many). Each output is the scalar
    reference's bits, at 1..17 rows and 1, 2 and 3 threads (three shares of 56, 48 and 40 columns: uneven splits, a
    share of a matrix may be empty)."""
    if gguf_kernels.missing_flag(path):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag(path)} (the {path} path runs where it has it)")
    q4, q4_packed, x = _x8_data(31)
    k4, k4_packed, _ = _x8_data(32, outputs=8)
    q6, q6_packed, _ = _x16_data(33)
    sets = [([q4, k4, q6], [12, 12, 14], [q4_packed, k4_packed, q6_packed],
             [gguf_kernels.Q4_K_X8, gguf_kernels.Q4_K_X8, gguf_kernels.Q6_K_X16], x),
            ([q4, k4], [12, 12], [q4_packed, k4_packed], [gguf_kernels.Q4_K_X8, gguf_kernels.Q4_K_X8], x)]
    q5, q5_packed, _ = _x8_q5_data(36)
    sets.append(([q5, k4], [13, 12], [q5_packed, k4_packed], [gguf_kernels.Q5_K_X8, gguf_kernels.Q4_K_X8], x))
    a, a_packed, x32 = _x16_32_data("Q4_1", 34)
    b, b_packed, _ = _x16_32_data("Q8_0", 35, outputs=16)
    sets.append(([a, b], [3, 8], [a_packed, b_packed], [gguf_kernels.X16_32[3], gguf_kernels.X16_32[8]], x32))
    threads = torch.get_num_threads()
    try:
        for plain, plain_types, packed, packed_types, inputs in sets:
            biases = [torch.randn(p.shape[0]) if i == 0 else None for i, p in enumerate(plain)]
            for count in (1, 2, 3):
                torch.set_num_threads(count)
                for rows in (1, 2, 5, 8, 9, 17):
                    part = inputs[40 - rows:]
                    got = gguf_kernels.linear_q8_many_on(part, packed, packed_types, 768, biases, path)
                    for out, blocks, t, bias in zip(got, plain, plain_types, biases):
                        alone = gguf_kernels.linear_q8_on(part, blocks, t, 768, "scalar")
                        expected = alone if bias is None else alone + bias
                        assert torch.equal(_bits(out), _bits(expected)), (path, count, rows, t)
    finally:
        torch.set_num_threads(threads)
