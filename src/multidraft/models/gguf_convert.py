"""Lossless re-encodings, at load, of GGUF block formats that no kernel reads into one that the kernels compute.

Q3_K -> Q6_K. Both hold 256 values a block in 16 sub-blocks of 16, value = d * scale * q with one fp16 d, an integer
scale per sub-block and an integer q, and no min: Q3_K's scale is 6 bits stored with 32 added (-32..31), its q is 3
bits (-4..3); Q6_K stores an int8 scale and q + 32 in 6 bits. So every Q3_K block is a Q6_K block of the very same
values (d's bytes, scale - 32, q + 32), and the Q6_K kernels (8-bit activations on every path, packed layouts, the
fp32 path) compute a Q3_K_M / Q3_K_S / Q3_K_L GGUF at 1.9x its file's bytes (210 / 110), where expanding it to fp32
took 9.3x and ran the linears at fp32's pace.

IQ4_NL -> Q8_0. An IQ4_NL block is 32 values d * table[i] with one fp16 d and a 4-bit index i into a fixed table of
int8s; a Q8_0 block is 32 values d * q with one fp16 d and int8 q: the same d and q = table[i], 34 bytes for 18.
(Q2_K and IQ4_XS have kernels of their own; the other IQ formats have no exact match in a format the kernels
compute: they stay fp32.)
"""

from __future__ import annotations

import numpy as np

Q3_K_BYTES, Q6_K_BYTES = 110, 210
IQ4_NL_BYTES, Q8_0_BYTES = 18, 34
IQ4_NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)


def q3_k_as_q6_k(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of Q3_K blocks -> (rows, row bytes * 210 / 110) uint8 of Q6_K blocks of the same
    values, in ggml's layouts (block_q3_K: hmask[32], qs[64], scales[12], d; block_q6_K: ql[128], qh[64],
    scales[16], d)."""
    count = rows.shape[0]
    blocks = np.ascontiguousarray(rows).reshape(-1, Q3_K_BYTES)
    hmask, qs, packed, d = blocks[:, :32], blocks[:, 32:96], blocks[:, 96:108], blocks[:, 108:110]
    # value v = 128 h + 32 j + l (h: which half, j: 0..3, l: 0..31) has its low 2 bits in qs[32 h + l] at bit 2 j
    # and its high bit in hmask[l] at bit 4 h + j; a clear high bit means q = low - 4, a set one q = low
    q = np.empty((blocks.shape[0], 256), np.int16)
    for h in range(2):
        for j in range(4):
            low = (qs[:, 32 * h:32 * h + 32] >> (2 * j)) & 3
            high = (hmask >> (4 * h + j)) & 1
            q[:, 128 * h + 32 * j:128 * h + 32 * j + 32] = low.astype(np.int16) - 4 * (1 - high.astype(np.int16))
    # sub-block s's scale: low 4 bits in byte s % 8 at bit 4 (s // 8), high 2 bits in byte 8 + s % 4 at bit 2 (s // 4)
    s = np.arange(16)
    scale_low = (packed[:, s % 8] >> (4 * (s // 8)).astype(np.uint8)) & 0x0F
    scale_high = (packed[:, 8 + s % 4] >> (2 * (s // 4)).astype(np.uint8)) & 0x03
    scales = (scale_low | (scale_high << 4)).astype(np.int16) - 32

    u = (q + 32).astype(np.uint8)                                  # Q6_K's stored q: 28..35 here
    out = np.empty((blocks.shape[0], Q6_K_BYTES), np.uint8)
    for h in range(2):                                             # ggml's Q6_K order, per half of 128 values
        part = [u[:, 128 * h + 32 * k:128 * h + 32 * k + 32] for k in range(4)]
        out[:, 64 * h:64 * h + 32] = (part[0] & 0x0F) | ((part[2] & 0x0F) << 4)
        out[:, 64 * h + 32:64 * h + 64] = (part[1] & 0x0F) | ((part[3] & 0x0F) << 4)
        out[:, 128 + 32 * h:160 + 32 * h] = ((part[0] >> 4) | ((part[1] >> 4) << 2) | ((part[2] >> 4) << 4)
                                             | ((part[3] >> 4) << 6))
    out[:, 192:208] = scales.astype(np.int8).view(np.uint8)
    out[:, 208:210] = d
    return out.reshape(count, -1)


def iq4_nl_as_q8_0(rows: np.ndarray) -> np.ndarray:
    """(rows, row bytes) uint8 of IQ4_NL blocks -> (rows, row bytes * 34 / 18) uint8 of Q8_0 blocks of the same values
    (block_iq4_nl: d, qs[16] with value j's index in qs[j]'s low nibble and value 16 + j's in its high one;
    block_q8_0: d, qs[32])."""
    count = rows.shape[0]
    blocks = np.ascontiguousarray(rows).reshape(-1, IQ4_NL_BYTES)
    out = np.empty((blocks.shape[0], Q8_0_BYTES), np.uint8)
    out[:, :2] = blocks[:, :2]
    out[:, 2:18] = IQ4_NL_TABLE[blocks[:, 2:] & 0x0F].view(np.uint8)
    out[:, 18:34] = IQ4_NL_TABLE[blocks[:, 2:] >> 4].view(np.uint8)
    return out.reshape(count, -1)
