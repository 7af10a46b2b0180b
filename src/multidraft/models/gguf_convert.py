"""Lossless re-encodings, at load, of GGUF block formats that no kernel reads into one that the kernels compute.

Q3_K -> Q6_K. Both hold 256 values a block in 16 sub-blocks of 16, value = d * scale * q with one fp16 d, an integer
scale per sub-block and an integer q, and no min: Q3_K's scale is 6 bits stored with 32 added (-32..31), its q is 3
bits (-4..3); Q6_K stores an int8 scale and q + 32 in 6 bits. So every Q3_K block is a Q6_K block of the very same
values (d's bytes, scale - 32, q + 32), and the Q6_K kernels (8-bit activations on every path, packed layouts, the
fp32 path) compute a Q3_K_M / Q3_K_S / Q3_K_L GGUF at 1.9x its file's bytes (210 / 110), where expanding it to fp32
took 9.3x and ran the linears at fp32's pace.

IQ3_S -> Q6_K. An IQ3_S block is 256 values d * (1 + 2 s) * g * sign: one fp16 d, a 4-bit s per 32 values, g from
a fixed grid of 512 quadruples of odd numbers 1..15 (an index of 9 bits per 4 values) and a sign bit per value. So
Q6_K's d is the same d, each sub-block of 16 the scale 1 + 2 s (1..31) of its 32, and q = sign * g (-15..15): the
very same values, 210 bytes for 110 (IQ3_S, IQ3_M and IQ3_XS GGUFs are mostly IQ3_S). The 8-bit kernels read these
blocks packed in IQ4_XS's layout with a table of IQ3_S's 16 values (kernels/iq4_x8.inc: 148 bytes, the same bits).

(Q2_K, IQ2_XXS / XS / S, IQ3_XXS, IQ4_XS and IQ4_NL have kernels of their own. IQ4_NL is Q4_0's block whose 4-bit
indices pick IQ4_NL_TABLE's values: its kernels compute the Q8_0 block of those values, at 18 bytes for its 34.
IQ3_XXS's values d * (2 s + 1) / 4 * g with g up to 62 would need Q6_K's d to be d / 2, which fp16 does not hold
exactly for the smallest d, and IQ2's grid values reach 43, past Q6_K's 31.)

IQ1_S, IQ1_M -> Q6_K. Their values are d * (2 s + 1) * (g + delta): an fp16 d per 256 values, a 3-bit s per 32
(IQ1_S) or 16 (IQ1_M), g in -1, 0, 1 from a fixed grid of 2048 octets and delta = +-1/8 per 32 (IQ1_S) or 8 (IQ1_M)
values. That is (d / 8) * (2 s + 1) * (8 g +- 1): Q6_K's d is d / 8, its scale 2 s + 1 (1..15), q = 8 g +- 1 (-9..9),
the very same values wherever d / 8 is an fp16 (every d of 2^-11 and up, and smaller ones whose last bits are zero).
A matrix with a block whose d / 8 is not (`iq1_d_exact`) stays fp32 (the load warns). IQ1_S's blocks then pack as
IQ3_S's do (odd values, a scale per 32: gguf_kernels.PACKS_AS).

TQ1_0, TQ2_0 -> Q6_K (ternary: d * t, t in -1, 0, 1, an fp16 d per 256 values, base 3 or 2 bits a value): Q6_K's d
is d, every scale 1, q = t; packed as Q3_K's (164 bytes for 54 / 66, where fp32 took 1024).
"""

from __future__ import annotations

import numpy as np

Q3_K_BYTES, Q6_K_BYTES, IQ3_S_BYTES = 110, 210, 110
# IQ4_NL's and IQ4_XS's 16 values (ggml's kvalues_iq4nl)
IQ4_NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)


def q3_k_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of Q3_K blocks -> (rows, row bytes * 210 / 110) uint8 of Q6_K blocks of the same
    values, in ggml's layouts (block_q3_K: hmask[32], qs[64], scales[12], d; block_q6_K: ql[128], qh[64],
    scales[16], d)."""
    s = np.arange(16)
    low_shift, high_shift = (4 * (s // 8)).astype(np.uint8), (2 * (s // 4)).astype(np.uint8)

    def as_q6_k(part):                                  # all uint8
        hmask, qs, packed, d = part[:, :32], part[:, 32:96], part[:, 96:108], part[:, 108:110]
        # value v = 128 h + 32 j + l (h: which half, j: 0..3, l: 0..31) has its low 2 bits in qs[32 h + l] at bit
        # 2 j and its high bit in hmask[l] at bit 4 h + j; a clear high bit means q = low - 4, a set one q = low,
        # so Q6_K's stored q + 32 is low + 4 high + 28
        u = np.empty((part.shape[0], 256), np.uint8)
        for h in range(2):
            for j in range(4):
                low = (qs[:, 32 * h:32 * h + 32] >> np.uint8(2 * j)) & np.uint8(3)
                high = (hmask >> np.uint8(4 * h + j)) & np.uint8(1)
                u[:, 128 * h + 32 * j:128 * h + 32 * j + 32] = low + (high << np.uint8(2)) + np.uint8(28)
        # sub-block s's scale: low 4 bits in byte s % 8 at bit 4 (s // 8), high 2 bits in byte 8 + s % 4 at bit
        # 2 (s // 4); stored with 32 added (x - 32 as an int8: x + 224 mod 256)
        scales = ((packed[:, s % 8] >> low_shift) & np.uint8(0x0F)) | (((packed[:, 8 + s % 4] >> high_shift)
                                                                        & np.uint8(0x03)) << np.uint8(4))
        return _q6_k_blocks(u, (scales + np.uint8(224)).view(np.int8), d)

    return _converted(rows, Q3_K_BYTES, as_q6_k)


def _converted(rows: np.ndarray, block_bytes: int, as_q6_k) -> np.ndarray:
    """(rows, row bytes) uint8 of blocks of `block_bytes` -> the Q6_K blocks `as_q6_k` makes of each part (blocks,
    block_bytes), ~1 MB of blocks at a time: small temporaries."""
    blocks = np.ascontiguousarray(rows).reshape(-1, block_bytes)
    out = np.empty((blocks.shape[0], Q6_K_BYTES), np.uint8)
    for start in range(0, blocks.shape[0], 8192):
        out[start:start + 8192] = as_q6_k(blocks[start:start + 8192])
    return out.reshape(rows.shape[0], -1)


def _q6_k_blocks(u: np.ndarray, scales: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Q6_K blocks (ggml's layout: ql[128], qh[64], scales[16], d) of values d * scale * (u - 32): u (blocks, 256)
    uint8 in 0..63 (Q6_K's stored q), scales (blocks, 16) per 16 values in -128..127, d (blocks, 2) the fp16 bytes."""
    out = np.empty((u.shape[0], Q6_K_BYTES), np.uint8)
    for h in range(2):                                             # ggml's Q6_K order, per half of 128 values
        part = [u[:, 128 * h + 32 * k:128 * h + 32 * k + 32] for k in range(4)]
        out[:, 64 * h:64 * h + 32] = (part[0] & 0x0F) | ((part[2] & 0x0F) << 4)
        out[:, 64 * h + 32:64 * h + 64] = (part[1] & 0x0F) | ((part[3] & 0x0F) << 4)
        out[:, 128 + 32 * h:160 + 32 * h] = ((part[0] >> 4) | ((part[1] >> 4) << 2) | ((part[2] >> 4) << 4)
                                             | ((part[3] >> 4) << 6))
    out[:, 192:208] = scales.astype(np.int8).view(np.uint8)
    out[:, 208:210] = d
    return out


def iq3_s_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of IQ3_S blocks -> (rows, row bytes * 210 / 110) uint8 of Q6_K blocks of the same
    values (block_iq3_s: d, qs[64] (an index's low 8 bits), qh[8] (its 9th: index j's in qh[j / 8] at bit j % 8),
    signs[32] (value v's in signs[v / 8] at bit v % 8, set: negative), scales[4] (32 values' s: byte k's low nibble
    for values 64 k.., its high one for 64 k + 32..); index j names values 4 j .. 4 j + 3)."""
    grid = grid_words("IQ3_S")

    def as_q6_k(part):
        d, qs, qh, signs, packed = part[:, :2], part[:, 2:66], part[:, 66:74], part[:, 74:106], part[:, 106:110]
        index = qs.astype(np.uint16) | (np.unpackbits(qh, axis=1, bitorder="little").astype(np.uint16) << 8)
        g = grid[index].view(np.uint8).reshape(-1, 256)             # odd, 1..15 (a quadruple per uint32 gathered)
        negative = np.unpackbits(signs, axis=1, bitorder="little") * np.uint8(255)  # 255 where the sign bit is set
        u = ((g ^ negative) - negative) + np.uint8(32)          # 32 -+ g, mod 256: Q6_K's stored q, 17..47
        s = np.stack([packed & 0x0F, packed >> 4], axis=2).reshape(-1, 8)           # per 32 values
        scales = np.repeat(1 + 2 * s, 2, axis=1)                                   # per 16 values, 1..31
        return _q6_k_blocks(u, scales, d)

    return _converted(rows, IQ3_S_BYTES, as_q6_k)


IQ1_S_BYTES, IQ1_M_BYTES, TQ1_0_BYTES, TQ2_0_BYTES = 50, 56, 54, 66


def _iq1_grid() -> np.ndarray:
    """IQ1_S's (and IQ1_M's) 2048 octets of -1, 0, 1 as gguf-py has them: (2048, 8) int8."""
    import gguf.quants

    gguf.quants.IQ1_S.init_grid()
    return gguf.quants.IQ1_S.grid.reshape(2048, 8).astype(np.int8)


def _eighth(d: np.ndarray) -> np.ndarray:
    """fp16 bytes (blocks, 2) -> the fp16 bytes of d / 8 (exact where `iq1_d_exact` holds)."""
    with np.errstate(invalid="ignore"):                           # a NaN d stays NaN (never converted: not exact)
        return (d.view(np.float16).astype(np.float32) / np.float32(8)).astype(np.float16).view(np.uint8)


def _iq1_m_d(part: np.ndarray) -> np.ndarray:
    """IQ1_M's fp16 d, spread over the top 4 bits of its four 16-bit scale words: (blocks, 2) bytes."""
    words = np.ascontiguousarray(part[:, 48:56]).view("<u2")
    bits = (words[:, 0] >> 12) | ((words[:, 1] >> 12) << 4) | ((words[:, 2] >> 12) << 8) | ((words[:, 3] >> 12) << 12)
    return bits.astype("<u2").view(np.uint8).reshape(-1, 2)


def iq1_d_exact(rows: np.ndarray, type_id: int) -> bool:
    """Whether every block's d / 8 is an fp16 (IQ1_S: type 19, IQ1_M: 29), so that the Q6_K blocks hold the very same
    values (a non-finite d is not: its matrix stays fp32)."""
    block_bytes = IQ1_S_BYTES if type_id == 19 else IQ1_M_BYTES
    blocks = np.ascontiguousarray(rows).reshape(-1, block_bytes)
    d = np.ascontiguousarray(blocks[:, :2]) if type_id == 19 else _iq1_m_d(blocks)
    exact = d.view(np.float16).astype(np.float32)
    back = _eighth(d).view(np.float16).astype(np.float32) * np.float32(8)
    return bool(np.all(back == exact))


def _iq1_values(index: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Q6_K's stored q (32 + 8 g +- 1) of the octets `index` (blocks, 32) names, delta negative per octet: (blocks,
    256) uint8."""
    g = _iq1_grid()[index].astype(np.int16)                          # (blocks, 32, 8)
    sign = np.where(negative, -1, 1).astype(np.int16)[..., None]
    return (32 + 8 * g + sign).astype(np.uint8).reshape(-1, 256)


def iq1_s_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of IQ1_S blocks (d, qs[32], qh[8] as uint16: per 32 values j, bits 3 l .. 3 l + 2 the
    high bits of octet l's index, bits 12-14 s, bit 15 delta's sign) -> the Q6_K blocks of the same values (where
    `iq1_d_exact`)."""
    def as_q6_k(part):
        d, qs, qh = part[:, :2], part[:, 2:34], np.ascontiguousarray(part[:, 34:50]).view("<u2")   # qh (blocks, 8)
        high = (qh[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & np.uint16(7)          # (blocks, 8, 4)
        index = qs.astype(np.uint16) | (high.reshape(-1, 32) << np.uint16(8))
        negative = np.repeat((qh & np.uint16(0x8000)) != 0, 4, axis=1)                      # per octet
        scales = np.repeat(2 * ((qh >> np.uint16(12)) & np.uint16(7)) + 1, 2, axis=1)        # per 16 values
        return _q6_k_blocks(_iq1_values(index, negative), scales, _eighth(np.ascontiguousarray(d)))

    return _converted(rows, IQ1_S_BYTES, as_q6_k)


def iq1_m_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of IQ1_M blocks (qs[32], qh[16]: per octet a nibble, low then high, its bits 0-2 the
    index's high bits and bit 3 delta's sign; scales[8] as four uint16: s of 16 values k at bits 3 (k % 4) of word
    k / 4, d's 4-bit pieces at bits 12-15) -> the Q6_K blocks of the same values (where `iq1_d_exact`)."""
    def as_q6_k(part):
        qs, qh = part[:, :32], part[:, 32:48]
        nibbles = np.stack([qh & 0x0F, qh >> 4], axis=2).reshape(-1, 32)                  # per octet
        index = qs.astype(np.uint16) | ((nibbles & 7).astype(np.uint16) << np.uint16(8))
        words = np.ascontiguousarray(part[:, 48:56]).view("<u2")
        s = (words[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & np.uint16(7)           # (blocks, 4, 4)
        return _q6_k_blocks(_iq1_values(index, (nibbles & 8) != 0), 2 * s.reshape(-1, 16) + 1, _eighth(_iq1_m_d(part)))

    return _converted(rows, IQ1_M_BYTES, as_q6_k)


def tq2_0_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of TQ2_0 blocks (qs[64]: value 128 j + 32 l + m in bits 2 l of byte 32 j + m, stored
    t + 1; d) -> the Q6_K blocks of the same values."""
    def as_q6_k(part):
        qs = part[:, :64].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
        u = (qs & np.uint8(3)).reshape(-1, 256) + np.uint8(31)                       # 32 + t
        return _q6_k_blocks(u, np.ones((part.shape[0], 16), np.int8), part[:, 64:66])

    return _converted(rows, TQ2_0_BYTES, as_q6_k)


def tq1_0_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of TQ1_0 blocks (qs[48], qh[4]: five (qs) or four (qh) base-3 digits a byte, read as
    the top digit of byte * 3^n (mod 256) times 3 / 256, stored t + 1; d) -> the Q6_K blocks of the same values."""
    powers = np.array([1, 3, 9, 27, 81], np.uint8)

    def as_q6_k(part):
        qs0 = (part[:, None, 0:32] * powers[None, :, None]).reshape(-1, 160)       # uint8 products wrap, as ggml's
        qs1 = (part[:, None, 32:48] * powers[None, :, None]).reshape(-1, 80)
        qh = (part[:, None, 48:52] * powers[None, :4, None]).reshape(-1, 16)
        digits = (np.concatenate([qs0, qs1, qh], axis=1).astype(np.uint16) * 3) >> 8
        return _q6_k_blocks(digits.astype(np.uint8) + np.uint8(31), np.ones((part.shape[0], 16), np.int8),
                            part[:, 52:54])

    return _converted(rows, TQ1_0_BYTES, as_q6_k)


def grid_words(quant_name: str) -> np.ndarray:
    """An IQ format's fixed grid as gguf-py has it (the codebook llama.cpp defines): one little-endian word per entry,
    its values' bytes in order (int8 two's complement; uint32 for quadruples: IQ3_XXS, IQ3_S; uint64 for octets:
    IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S)."""
    import gguf.quants

    quant = getattr(gguf.quants, quant_name)
    quant.init_grid()
    entries, values = quant.grid.shape[-2:]
    octets = quant.grid.reshape(entries, values).astype(np.int8).view(np.uint8)     # IQ1_S's -1 as 255
    words = np.ascontiguousarray(octets).view(f"<u{values}")
    return words.reshape(entries)
