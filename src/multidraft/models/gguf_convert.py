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
exactly for the smallest d, and IQ2's grid values reach 43, past Q6_K's 31. IQ1_S and IQ1_M (d / 8 as IQ3_XXS's
d / 2) stay fp32.)
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


def grid_words(quant_name: str) -> np.ndarray:
    """An IQ format's fixed grid as gguf-py has it (the codebook llama.cpp defines): one little-endian word per entry,
    its values' bytes in order (uint32 for quadruples: IQ3_XXS, IQ3_S; uint64 for octets: IQ2_XXS, IQ2_XS, IQ2_S)."""
    import gguf.quants

    quant = getattr(gguf.quants, quant_name)
    quant.init_grid()
    entries, values = quant.grid.shape[-2:]
    words = np.ascontiguousarray(quant.grid.reshape(entries, values).astype(np.uint8)).view(f"<u{values}")
    return words.reshape(entries)
