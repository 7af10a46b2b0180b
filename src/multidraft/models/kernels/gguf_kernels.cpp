// The quantized runner's CPU kernels (AVX2 + FMA): linears over GGUF weight blocks, and attention, both
// batch-invariant: an output element is computed by the same operations in the same order whatever the number
// of rows (tokens) in the call, so a token's logits are the same bits alone or inside a verify or a tree.
//
// Linear: out[m, n] = sum_k x[m, k] * w[n, k], w stored as GGUF blocks along k (one row of blocks per output n).
// Weight rows are decoded in small chunks into an fp32 buffer that stays in L1/L2, and every input row is
// applied to the chunk while it is there: the weights stream from memory once per call, and decoding costs the
// same for 1 input row or 16. Each dot product runs in 8 fp32 lanes over k in order, then a fixed lane sum.
//
// Block formats (ggml's layouts; value = the fp32 arithmetic written in each decoder below):
//   F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/library.h>
#include <immintrin.h>
#include <cpuid.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>
#include <memory>
#include <mutex>

namespace {

inline float fp16_to_fp32(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t rd16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint64_t rd64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }   // byte i: p[i] (x86)
// The low (shift 0) or high (shift 4) nibbles of the 8 bytes at p, each in the low four bits of its byte.
inline uint64_t nibbles64(const uint8_t* p, int shift) { return rd64(p) >> shift & 0x0F0F0F0F0F0F0F0FULL; }

// ---------------------------------------------------------------- block decoders: one block -> fp32 values
// Q5_K (rare in the models we ship) decodes in plain C++; the hot formats have AVX2 decoders below.

struct Format { int block_values; int block_bytes; };

inline Format format_of(int64_t type) {
  switch (type) {
    case 0: return {1, 4};
    case 1: return {1, 2};
    case 30: return {1, 2};
    case 2: return {32, 18};
    case 3: return {32, 20};
    case 6: return {32, 22};
    case 7: return {32, 24};
    case 8: return {32, 34};
    case 20: return {32, 18};                 // IQ4_NL
    case 10: return {256, 84};                // Q2_K
    case 12: return {256, 144};
    case 13: return {256, 176};
    case 14: return {256, 210};
    case 23: return {256, 136};               // IQ4_XS
    case 18: return {256, 98};                // IQ3_XXS
    case 16: return {256, 66};                // IQ2_XXS
    case 17: return {256, 74};                // IQ2_XS
    case 22: return {256, 82};                // IQ2_S
    default: return {0, 0};
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (12 packed bytes).
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& mn) {
  if (j < 4) {
    sc = q[j] & 63; mn = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// IQ4_XS (ggml type 23): 256 values in 8 sub-blocks of 32, value = d * (ls_j - 32) * IQ4_VALUES[q] with one fp16 d,
// a 6-bit ls_j per sub-block (low 4 bits in scales_l, high 2 in scales_h) and a 4-bit index q into a fixed table.
// Bytes: d [0, 2), scales_h [2, 4), scales_l [4, 8), qs [8, 136): sub-block j's values 0-15 are the low nibbles of
// qs[16 j .. 16 j + 15], its values 16-31 the high ones.
constexpr int8_t IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The eight sub-block scales ls_j - 32 (-32..31) of an IQ4_XS block.
inline void iq4_xs_scales(const uint8_t* b, int8_t* sc) {
  const int high = rd16(b + 2);
  for (int j = 0; j < 8; ++j)
    sc[j] = int8_t((((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((high >> (2 * j)) & 3) << 4)) - 32);
}

inline void decode_iq4_xs(const uint8_t* b, float* y) {      // exact: d * scale * value needs 11 + 6 + 7 bits
  const float d = fp16_to_fp32(rd16(b));
  int8_t sc[8];
  iq4_xs_scales(b, sc);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * float(sc[j]);
    for (int l = 0; l < 16; ++l) {
      y[32 * j + l] = dl * float(IQ4_VALUES[b[8 + 16 * j + l] & 0xF]);
      y[32 * j + 16 + l] = dl * float(IQ4_VALUES[b[8 + 16 * j + l] >> 4]);
    }
  }
}

// IQ3_XXS (ggml type 18): 256 values in 8 sub-blocks of 32, value = d * (2 ls_j + 1) / 4 * g * sign with one fp16 d,
// a 4-bit ls_j per sub-block, g from a fixed grid of 256 quadruples (IQ3_XXS_GRID: even values 4..62) named by one
// byte per 4 values, and a sign per value: per 8 values 7 bits, the low ones of 8 sign bits whose count is even
// (the 8th is their parity). Bytes: d [0, 2), qs [2, 66) (value k's quadruple in byte 2 + k / 4), then sub-block j's
// uint32 at 66 + 4 j: bits 7 l .. 7 l + 6 the signs of its values 8 l .. 8 l + 7, bits 28-31 ls_j.
#include "iq_grids.inc"

// IQ2_XXS (ggml type 16): the same with d / 8 and a grid of 256 octets (IQ2_XXS_GRID: values 8, 25, 43) named by one
// byte per 8 values. Bytes: d [0, 2), then per sub-block j 8 bytes at 2 + 8 j: its 4 grid bytes, then its uint32 of
// signs and ls_j as IQ3_XXS's.
template <int TYPE>                                      // 16: IQ2_XXS, 18: IQ3_XXS
inline uint32_t iq_xxs_aux(const uint8_t* b, int j) {
  uint32_t aux;
  std::memcpy(&aux, b + (TYPE == 18 ? 66 + 4 * j : 6 + 8 * j), 4);
  return aux;
}
// The 8 sign bits of values 8 l .. 8 l + 7 of a sub-block (bit i: value 8 l + i negative).
constexpr uint32_t iq_signs8(uint32_t aux, int l) {
  const uint32_t low = (aux >> (7 * l)) & 127;
  return low | uint32_t(__builtin_popcount(low) & 1) << 7;
}
// The 8 values' signs of each 7-bit sign index as bytes, -1 or +1 (value i's in byte i): for the vector kernels.
struct SignBytes { long long of[128]; };
constexpr SignBytes iq_sign_bytes() {
  SignBytes t{};
  for (uint32_t k = 0; k < 128; ++k) {
    uint64_t bytes = 0;
    for (int i = 0; i < 8; ++i) bytes |= uint64_t((iq_signs8(k, 0) >> i) & 1 ? 0xFF : 0x01) << (8 * i);
    t.of[k] = (long long)bytes;
  }
  return t;
}
constexpr SignBytes IQ_SIGN_BYTES = iq_sign_bytes();
// IQ2_XS (ggml type 17): IQ2_XXS's values with a 4-bit ls per 16 values (byte 66 + j: its low nibble for values
// 32 j .., its high one for 32 j + 16 ..) and per 8 values a uint16 at 2 + 2 e: 9 bits of grid index (IQ2_XS_GRID:
// 512 octets) and 7 of sign index. IQ2_S (ggml type 22): a 10-bit index (IQ2_S_GRID: 1024 octets), its low 8 bits
// in byte 2 + e and its high 2 in byte 66 + e / 4 at bit 2 (e % 4); the 8 signs in byte 34 + e; the ls at 74 + j.
template <int TYPE>                                      // 16, 17, 22: IQ2_XXS, IQ2_XS, IQ2_S; 18: IQ3_XXS
inline uint64_t iq2_octet(const uint8_t* b, int e) {    // group e's 8 grid values, value i in byte i
  if constexpr (TYPE == 16) return IQ2_XXS_GRID[b[2 + 8 * (e / 4) + e % 4]];
  if constexpr (TYPE == 17) return IQ2_XS_GRID[rd16(b + 2 + 2 * e) & 511];
  return IQ2_S_GRID[b[2 + e] | ((b[66 + e / 4] >> (2 * (e % 4))) & 3) << 8];
}
template <int TYPE>
inline uint32_t iq2_signs(const uint8_t* b, int e) {    // group e's 8 sign bits (bit i: value 8 e + i negative)
  if constexpr (TYPE == 16) return iq_signs8(iq_xxs_aux<16>(b, e / 4), e % 4);
  if constexpr (TYPE == 17) return iq_signs8(uint32_t(rd16(b + 2 + 2 * e)) >> 9, 0);
  return b[34 + e];
}
// 2 ls + 1 (1..31) of values 16 h .. 16 h + 15
template <int TYPE>
inline int iq_grid_scale16(const uint8_t* b, int h) {
  if constexpr (TYPE == 16 || TYPE == 18) return 2 * int(iq_xxs_aux<TYPE>(b, h / 2) >> 28) + 1;
  const uint8_t byte = b[(TYPE == 17 ? 66 : 74) + h / 2];
  return 2 * ((h % 2 ? byte >> 4 : byte) & 15) + 1;
}
// Value k's g * sign (IQ3_XXS: -62..62; the IQ2 formats: -43..43): the block's values are d / 4 (IQ2: d / 8) *
// scale16 * this.
template <int TYPE>
inline int iq_grid_value(const uint8_t* b, int k) {
  if constexpr (TYPE == 18) {
    const int g = int((IQ3_XXS_GRID[b[2 + k / 4]] >> (8 * (k % 4))) & 0xFF);
    return (iq_signs8(iq_xxs_aux<18>(b, k / 32), k % 32 / 8) >> (k % 8)) & 1 ? -g : g;
  }
  const int g = int((iq2_octet<TYPE>(b, k / 8) >> (8 * (k % 8))) & 0xFF);
  return (iq2_signs<TYPE>(b, k / 8) >> (k % 8)) & 1 ? -g : g;
}

// gguf-py's d * (0.5 + ls) * 0.5 (IQ2: * 0.25) * g * sign, every step exact
template <int TYPE>
inline void decode_iq_grid(const uint8_t* b, float* y) {
  const float d = fp16_to_fp32(rd16(b));
  for (int h = 0; h < 16; ++h) {
    const float db = d * (0.5f + float(iq_grid_scale16<TYPE>(b, h) / 2)) * (TYPE == 18 ? 0.5f : 0.25f);
    for (int l = 0; l < 16; ++l) y[16 * h + l] = db * float(iq_grid_value<TYPE>(b, 16 * h + l));
  }
}

// Q2_K (ggml type 10): 256 values in 16 groups of 16, value = d * sc_g * q - dmin * m_g with a 4-bit scale and min
// per group (byte g of [0, 16): scale low, min high), q 2 bits (value k: bits 2 ((k % 128) / 32) of byte
// 16 + 32 (k / 128) + k % 32), d and dmin fp16 at 80 and 82.
inline int q2_value(const uint8_t* b, int k) { return (b[16 + 32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3; }

inline void decode_q2_k(const uint8_t* b, float* y) {    // gguf-py's order: (d * sc) * q - dmin * m
  const float d = fp16_to_fp32(rd16(b + 80)), dmin = fp16_to_fp32(rd16(b + 82));
  for (int k = 0; k < 256; ++k) {
    const float dl = d * float(b[k / 16] & 0xF), ml = dmin * float(b[k / 16] >> 4);
    y[k] = dl * float(q2_value(b, k)) - ml;
  }
}

inline void decode_q5_k(const uint8_t* b, float* y) {
  const float d = fp16_to_fp32(rd16(b)), dmin = fp16_to_fp32(rd16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 4; ++j) {
    int sc, mn;
    scale_min_k4(2 * j, scales, sc, mn);
    const float d1 = d * float(sc), m1 = dmin * float(mn);
    scale_min_k4(2 * j + 1, scales, sc, mn);
    const float d2 = d * float(sc), m2 = dmin * float(mn);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32; y += 64; u1 <<= 2; u2 <<= 2;
  }
}

// The 12 packed bytes of a Q4_K / Q5_K super-block's six-bit scales and mins (scale_min_k4's layout) as 16 bytes:
// the 8 scales, then the 8 mins.
inline void unpack_k4_scales(const uint8_t* q, uint32_t packed[4]) {
  std::memcpy(packed, q, 12);
  const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
  packed[3] = ((packed[2] >> 4) & m2) | (((packed[1] >> 6) & m3) << 4);
  const uint32_t mins_low = packed[1] & m1;
  packed[1] = (packed[2] & m2) | (((packed[0] >> 6) & m3) << 4);
  packed[2] = mins_low;
  packed[0] &= m1;
}

// Q6_K: the 32 six-bit values (0..63) of part 0..3 of a 128-value half, from its low-bit bytes a (ql), c (ql + 32)
// and high-bit bytes hb (qh).
inline __m256i q6_values(__m256i a, __m256i c, __m256i hb, int part) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x30);
  if (part == 0) return _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), two));
  if (part == 1) return _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), two));
  if (part == 2) return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4), _mm256_and_si256(hb, two));
  return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), two));
}

// ---------------------------------------------------------------- AVX2 decoders of the hot formats
// The same arithmetic as the scalar decoders above (a multiply, then an add or subtract: no fused multiply-add,
// so the values are the reference's bit for bit; tested against gguf-py's dequantize).

// 8 unsigned bytes -> 8 floats.
inline __m256 u8x8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
inline __m256 i8x8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }

// 32 bytes (as 4 groups of 8) -> y[0..31] = scale * float(byte) (+ or - offset).
template <bool SIGNED>
inline void store32(__m256i v, __m256 scale, float* y) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(scale, SIGNED ? i8x8(parts[i]) : u8x8(parts[i])));
}

inline void store32_affine(__m256i v, __m256 scale, __m256 offset, bool subtract, float* y) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256 product = _mm256_mul_ps(scale, u8x8(parts[i]));
    _mm256_storeu_ps(y + 8 * i, subtract ? _mm256_sub_ps(product, offset) : _mm256_add_ps(product, offset));
  }
}

// 16 bytes of nibbles -> 32 bytes: low nibbles first, then high nibbles (the Q4_0 / Q4_1 / Q5 value order).
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), _mm_and_si128(raw, mask));
}

// The 32 bits of qh -> 32 bytes, byte j = 0x10 where bit j is set.
inline __m256i high_bits_32(const uint8_t* qh_bytes) {
  uint32_t qh; std::memcpy(&qh, qh_bytes, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)),
      _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Eight outputs' scales (bytes 0-7 of s; SIGNED: int8) as int16 in the four maddubs lanes of each output of a 256-bit
// half of 4 outputs (lanes 4r..4r + 3: output r of the half; HALF 0: outputs 0-3, 1: 4-7): one madd then scales the
// int16 dots of AVX2's packed kernels.
template <bool SIGNED, int HALF>
inline __m256i scales_in_fours(__m128i s) {
  const __m128i spread = _mm_shuffle_epi8(s, HALF ? _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)
                                                  : _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  return SIGNED ? _mm256_cvtepi8_epi16(spread) : _mm256_cvtepu8_epi16(spread);
}

inline void decode_q4_0_avx2(const uint8_t* b, float* y) {
  const __m256i q = _mm256_sub_epi8(nibbles_32(b + 2), _mm256_set1_epi8(8));
  store32<true>(q, _mm256_set1_ps(fp16_to_fp32(rd16(b))), y);
}

inline void decode_q4_1_avx2(const uint8_t* b, float* y) {
  store32_affine(nibbles_32(b + 4), _mm256_set1_ps(fp16_to_fp32(rd16(b))), _mm256_set1_ps(fp16_to_fp32(rd16(b + 2))),
                 false, y);
}

inline void decode_q5_0_avx2(const uint8_t* b, float* y) {
  const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles_32(b + 6), high_bits_32(b + 2)), _mm256_set1_epi8(16));
  store32<true>(q, _mm256_set1_ps(fp16_to_fp32(rd16(b))), y);
}

inline void decode_q5_1_avx2(const uint8_t* b, float* y) {
  store32_affine(_mm256_or_si256(nibbles_32(b + 8), high_bits_32(b + 4)), _mm256_set1_ps(fp16_to_fp32(rd16(b))),
                 _mm256_set1_ps(fp16_to_fp32(rd16(b + 2))), false, y);
}

// IQ4_NL (ggml type 20): Q4_0's block (fp16 d, 16 bytes of nibbles) whose 4-bit indices pick IQ4_VALUES (the table
// IQ4_XS shares): value l = d * IQ4_VALUES[index l]. d * value is one rounding, as for the Q8_0 block of its values.
inline __m256i iq4_nl_values(const uint8_t* b) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(IQ4_VALUES))),
                             nibbles_32(b + 2));
}

inline void decode_iq4_nl_avx2(const uint8_t* b, float* y) {
  store32<true>(iq4_nl_values(b), _mm256_set1_ps(fp16_to_fp32(rd16(b))), y);
}

inline void decode_q8_0_avx2(const uint8_t* b, float* y) {
  store32<true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), _mm256_set1_ps(fp16_to_fp32(rd16(b))), y);
}

inline void decode_q4_k_avx2(const uint8_t* b, float* y) {
  const float d = fp16_to_fp32(rd16(b)), dmin = fp16_to_fp32(rd16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    int sc, mn;
    scale_min_k4(2 * j, scales, sc, mn);
    const float d1 = d * float(sc), m1 = dmin * float(mn);
    scale_min_k4(2 * j + 1, scales, sc, mn);
    const float d2 = d * float(sc), m2 = dmin * float(mn);
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    store32_affine(_mm256_and_si256(raw, mask), _mm256_set1_ps(d1), _mm256_set1_ps(m1), true, y);
    store32_affine(_mm256_and_si256(_mm256_srli_epi16(raw, 4), mask), _mm256_set1_ps(d2), _mm256_set1_ps(m2), true,
                   y + 32);
    q += 32; y += 64;
  }
}

inline void decode_q6_k_avx2(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = fp16_to_fp32(rd16(b + 208));
  const __m256i bias = _mm256_set1_epi8(32);
  for (int n = 0; n < 2; ++n) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    // the four 6-bit values of each l, minus 32 (values -32..31 fit a signed byte)
    const __m256i q[4] = {_mm256_sub_epi8(q6_values(a, c, h, 0), bias), _mm256_sub_epi8(q6_values(a, c, h, 1), bias),
                          _mm256_sub_epi8(q6_values(a, c, h, 2), bias), _mm256_sub_epi8(q6_values(a, c, h, 3), bias)};
#pragma GCC unroll 4
    for (int part = 0; part < 4; ++part) {
      // values l = 0..15 take scale 2*part, l = 16..31 scale 2*part + 1
      const __m128i lo = _mm256_castsi256_si128(q[part]), hi = _mm256_extracti128_si256(q[part], 1);
      const __m256 s0 = _mm256_set1_ps(d * float(sc[2 * part])), s1 = _mm256_set1_ps(d * float(sc[2 * part + 1]));
      float* out = y + 32 * part;
      _mm256_storeu_ps(out, _mm256_mul_ps(s0, i8x8(lo)));
      _mm256_storeu_ps(out + 8, _mm256_mul_ps(s0, i8x8(_mm_srli_si128(lo, 8))));
      _mm256_storeu_ps(out + 16, _mm256_mul_ps(s1, i8x8(hi)));
      _mm256_storeu_ps(out + 24, _mm256_mul_ps(s1, i8x8(_mm_srli_si128(hi, 8))));
    }
    y += 128; ql += 64; qh += 32; sc += 8;
  }
}

// One weight row (K values) from its blocks.
void decode_row(int64_t type, const uint8_t* row, int64_t K, float* y) {
  switch (type) {
    case 0: std::memcpy(y, row, K * 4); return;
    case 1: for (int64_t k = 0; k < K; ++k) y[k] = fp16_to_fp32(rd16(row + 2 * k)); return;
    case 30: for (int64_t k = 0; k < K; ++k) { uint32_t v = uint32_t(rd16(row + 2 * k)) << 16; std::memcpy(y + k, &v, 4); } return;
    default: break;
  }
  const Format f = format_of(type);
  const int64_t blocks = K / f.block_values;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = row + i * f.block_bytes;
    float* out = y + i * f.block_values;
    switch (type) {
      case 2: decode_q4_0_avx2(b, out); break;
      case 3: decode_q4_1_avx2(b, out); break;
      case 6: decode_q5_0_avx2(b, out); break;
      case 7: decode_q5_1_avx2(b, out); break;
      case 8: decode_q8_0_avx2(b, out); break;
      case 20: decode_iq4_nl_avx2(b, out); break;
      case 10: decode_q2_k(b, out); break;
      case 12: decode_q4_k_avx2(b, out); break;
      case 13: decode_q5_k(b, out); break;
      case 14: decode_q6_k_avx2(b, out); break;
      case 23: decode_iq4_xs(b, out); break;
      case 16: decode_iq_grid<16>(b, out); break;
      case 17: decode_iq_grid<17>(b, out); break;
      case 18: decode_iq_grid<18>(b, out); break;
      case 22: decode_iq_grid<22>(b, out); break;
    }
  }
}

// ---------------------------------------------------------------- the fp32 micro-kernel over a decoded chunk

// Fixed reduction order of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x1));
  return _mm_cvtss_f32(s);
}

// MG input rows x NR decoded weight rows (consecutive in `w`, stride K) in registers.
template <int MG, int NR>
inline void block(const float* __restrict x, const float* __restrict w, float* __restrict out,
                  int64_t K, int64_t N, int64_t n0) {
  __m256 acc[MG][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MG; ++i)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  const int64_t K8 = K & ~int64_t(7);
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) wv[r] = _mm256_loadu_ps(w + r * K + k);
#pragma GCC unroll 8
    for (int i = 0; i < MG; ++i) {
      __m256 xv = _mm256_loadu_ps(x + i * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  float sums[MG][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MG; ++i)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) sums[i][r] = hsum(acc[i][r]);
  for (int i = 0; i < MG; ++i)
    for (int r = 0; r < NR; ++r) {
      float s = sums[i][r];
      const float* wr = w + r * K;
      const float* xr = x + i * K;
      for (int64_t k = K8; k < K; ++k) s = std::fma(xr[k], wr[k], s);
      out[i * N + n0 + r] = s;
    }
}

template <int MG>
void apply_rows(const float* x, const float* w, float* out, int64_t K, int64_t N, int64_t n0, int64_t count) {
  constexpr int NR = MG <= 2 ? 4 : 2;   // 8-12 accumulators: within AVX2's 16 registers
  int64_t r = 0;
  for (; r + NR <= count; r += NR) block<MG, NR>(x, w + r * K, out, K, N, n0 + r);
  for (; r < count; ++r) block<MG, 1>(x, w + r * K, out, K, N, n0 + r);
}

void apply_any(int mg, const float* x, const float* w, float* out, int64_t K, int64_t N, int64_t n0, int64_t count) {
  switch (mg) {
    case 1: apply_rows<1>(x, w, out, K, N, n0, count); break;
    case 2: apply_rows<2>(x, w, out, K, N, n0, count); break;
    case 3: apply_rows<3>(x, w, out, K, N, n0, count); break;
    case 4: apply_rows<4>(x, w, out, K, N, n0, count); break;
    case 5: apply_rows<5>(x, w, out, K, N, n0, count); break;
    default: apply_rows<6>(x, w, out, K, N, n0, count); break;
  }
}


// ---------------------------------------------------------------- fused kernels of Q4_K and Q6_K
// The formats of the models we ship are read straight into the dot products, without a decoded buffer. A value is
// scale * q (- min), constant over a sub-block of 32 (Q4_K) or 16 (Q6_K) values, so per sub-block and input row
//     sum_k x_k * (scale * q_k - min) = scale * sum_k x_k q_k - min * sum_k x_k
// with sum_k x_k q_k in 8 fp32 lanes (q converted once, used by every input row of the group) and sum_k x_k
// precomputed once per call. The operations and their order depend only on the output element, never on how
// many rows are in the call.

constexpr int64_t PREFETCH_BYTES = 2048;
// Ask for every 64-byte line that a block of `bytes` starting at `p` may touch.
inline void prefetch_lines(const char* p, int bytes) {
  for (int offset = 0; offset < bytes; offset += 64) _mm_prefetch(p + offset, _MM_HINT_T0);
}
// The same into L2 only (prefetcht1), for the 8-bit kernels' weight streams. On a Xeon with AMX, from memory, 2
// threads, 8960 x 1536: prefetcht0 a few blocks ahead held the line-fill buffers; prefetcht1 4 KB (Q6_K) or 16
// groups (packed Q4_K, ~19 KB) ahead: Q6_K 1 row 687-740 -> 512-529 us, 4 rows 864-924 -> 661-670; packed Q4_K on
// the tile kernel 8 rows 695 -> 515, 16 rows 908 -> 681; one row with x8_rows 403-411 -> 381 (on Zen 3 the
// distance, T0, had made no difference; T1 was not timed there).
// Whether the VNNI kernels prefetch the weights of a one-pass call non-temporally (prefetch_weight); set at load.
std::atomic<bool> nontemporal_weights{false};
// Whether x8_vnni_rows prefetches a one-row call's Q4_K weights in software too; set at load (off on AMD's Zen 4, where
// its hardware prefetcher alone streamed them faster: prefers_hardware_prefetch_one_row). Q5_K's always.
std::atomic<bool> one_row_prefetch{true};

// A weight line a VNNI kernel reads soon: non-temporally (NTA) or into L2. A call that reads its matrix once (at
// most 8 input rows: one pass over each slice) takes NTA where nontemporal_weights is on (AMD's Zen 5, whose L3 takes
// every line L2 evicts: a model streamed through it evicts the KV cache, the activations and the interpreter's code
// and data every forward; Zen 5, 2 threads, alternating in one process: smollm2-135m's 1-row forward -6%, gemma3's
// -5% (median), the 1.5B's -2 to -4%; not Zen 4, where it was slower: prefers_nontemporal_weights). Otherwise, and
// where the rows come back to a slice (9+ inputs read it again from L2), prefetcht1, as tuned on a Xeon, where
// prefetcht0 held the line-fill buffers. The hint is a template argument of the kernels (with_weight_hint): a test in
// their inner loop slowed the 1.5B's 8-row forward by a fifth.
template <bool NTA>
inline void prefetch_weight(const char* p) {
  _mm_prefetch(p, NTA ? _MM_HINT_NTA : _MM_HINT_T1);
}

// f(std::bool_constant<NTA>()) with NTA for a call of M input rows.
template <typename F>
void with_weight_hint(int64_t M, F&& f) {
  if (M <= 8 && nontemporal_weights.load(std::memory_order_relaxed)) f(std::true_type());
  else f(std::false_type());
}

inline void prefetch_l2(const char* p, int bytes) {
  for (int offset = 0; offset < bytes; offset += 64) _mm_prefetch(p + offset, _MM_HINT_T1);
}

// With several input rows, a weight row is read in spans of this many super-blocks, every row of the slice in
// turn, so the inputs' matching slice (rows x 512 floats) stays in L1 instead of streaming from L2 per row.
constexpr int64_t SPAN_SUPERBLOCKS = 2;

// The 8-lane running sums of each (weight row, input row) between spans: stored and reloaded exactly, so the
// sums see the same operations in the same order as without spans.
struct PartialSums {
  std::vector<float> data;
  int per_row;
  int mg;
  PartialSums(int64_t rows, int mg_, int kinds) : data(rows * mg_ * kinds * 8), per_row(mg_ * kinds * 8), mg(mg_) {}
  template <int MG>
  void load(int64_t r, int kind, __m256 (&v)[MG], bool fresh) {
    for (int i = 0; i < MG; ++i)
      v[i] = fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(data.data() + r * per_row + (kind * mg + i) * 8);
  }
  template <int MG>
  void store(int64_t r, int kind, const __m256 (&v)[MG]) {
    for (int i = 0; i < MG; ++i) _mm256_storeu_ps(data.data() + r * per_row + (kind * mg + i) * 8, v[i]);
  }
};

// Sums of x over each 32-value block, in a fixed order: (M, K/32).
std::vector<float> block_sums(const float* x, int64_t M, int64_t K) {
  const int64_t blocks = K / 32;
  std::vector<float> sums(M * blocks);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* p = x + m * K + b * 32;
      const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)),
                                     _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)));
      sums[m * blocks + b] = hsum(s);
    }
  return sums;
}

template <int MG>
void q4_k_rows(const float* x, const float* xsums, const uint8_t* w, int64_t row_bytes, float* out, int64_t K,
               int64_t N, int64_t n_begin, int64_t n_end) {
  const int64_t superblocks = K / 256, sums_per_row = K / 32;
  const int64_t span = MG == 1 ? superblocks : SPAN_SUPERBLOCKS;
  PartialSums partial(n_end - n_begin, MG, 2);
  for (int64_t s0 = 0; s0 < superblocks; s0 += span) {
    const int64_t s1 = std::min(superblocks, s0 + span);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 total[MG], mins[MG];
    partial.load(n - n_begin, 0, total, s0 == 0);
    partial.load(n - n_begin, 1, mins, s0 == 0);
    for (int64_t sb = s0; sb < s1; ++sb) {
      const uint8_t* b = row + sb * 144;
      // Every line of the blocks we read next: ~2 KB ahead in this row, or this span of the next row.
      const char* ahead = span == superblocks ? (const char*)(b + PREFETCH_BYTES) : (const char*)(b + row_bytes);
      prefetch_lines(ahead, 144);
      // The 8 six-bit scales and mins, unpacked 32 bits at a time (scale_min_k4's layout), then d * scale and
      // dmin * min in 8 lanes: the same products as the scalar decoder.
      uint32_t packed[4];
      unpack_k4_scales(b + 4, packed);
      alignas(32) float scales[8];
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
      _mm256_store_ps(scales, _mm256_mul_ps(_mm256_set1_ps(fp16_to_fp32(rd16(b))), u8x8(bytes)));
      const __m256 offsets_v = _mm256_mul_ps(_mm256_set1_ps(fp16_to_fp32(rd16(b + 2))), u8x8(_mm_srli_si128(bytes, 8)));
      for (int i = 0; i < MG; ++i)
        mins[i] = _mm256_fmadd_ps(offsets_v, _mm256_loadu_ps(xsums + i * sums_per_row + sb * 8), mins[i]);
      const uint8_t* q = b + 16;
      const float* xb = x + sb * 256;
      const __m256i mask = _mm256_set1_epi32(0x0F);
      for (int j = 0; j < 4; ++j) {
        // 8 bytes at a time, zero-extended into 32-bit lanes: low nibbles are sub-block 2j, high ones 2j + 1.
        __m256 low[4], high[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          const __m256i wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 32 * j + 8 * v)));
          low[v] = _mm256_cvtepi32_ps(_mm256_and_si256(wide, mask));
          high[v] = _mm256_cvtepi32_ps(_mm256_srli_epi32(wide, 4));
        }
        const __m256 scale_low = _mm256_broadcast_ss(scales + 2 * j), scale_high = _mm256_broadcast_ss(scales + 2 * j + 1);
        const float* xs = xb + 64 * j;
#pragma GCC unroll 4
        for (int i = 0; i < MG; ++i) {
          const float* xr = xs + i * K;
          __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(xr), low[0]);
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), low[1], acc);
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 16), low[2], acc);
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 24), low[3], acc);
          total[i] = _mm256_fmadd_ps(scale_low, acc, total[i]);
          acc = _mm256_mul_ps(_mm256_loadu_ps(xr + 32), high[0]);
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 40), high[1], acc);
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 48), high[2], acc);
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 56), high[3], acc);
          total[i] = _mm256_fmadd_ps(scale_high, acc, total[i]);
        }
      }
    }
    partial.store(n - n_begin, 0, total);
    partial.store(n - n_begin, 1, mins);
    if (s1 == superblocks)
      for (int i = 0; i < MG; ++i) out[i * N + n] = hsum(total[i]) - hsum(mins[i]);
  }
  }
}

template <int MG>
void q6_k_rows(const float* x, const uint8_t* w, int64_t row_bytes, float* out, int64_t K, int64_t N,
               int64_t n_begin, int64_t n_end) {
  const int64_t superblocks = K / 256;
  const __m256i bias = _mm256_set1_epi8(32);
  const int64_t span = MG == 1 ? superblocks : SPAN_SUPERBLOCKS;
  PartialSums partial(n_end - n_begin, MG, 1);
  for (int64_t s0 = 0; s0 < superblocks; s0 += span) {
    const int64_t s1 = std::min(superblocks, s0 + span);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 total[MG];
    partial.load(n - n_begin, 0, total, s0 == 0);
    for (int64_t sb = s0; sb < s1; ++sb) {
      const uint8_t* b = row + sb * 210;
      const char* ahead = span == superblocks ? (const char*)(b + PREFETCH_BYTES) : (const char*)(b + row_bytes);
      prefetch_lines(ahead, 210);
      // The 16 scales as d * scale in 8 lanes at a time (the scalar decoder's products), read back by broadcast.
      alignas(32) float scales[16];
      const __m256 d = _mm256_set1_ps(fp16_to_fp32(rd16(b + 208)));
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
      _mm256_store_ps(scales, _mm256_mul_ps(d, i8x8(packed)));
      _mm256_store_ps(scales + 8, _mm256_mul_ps(d, i8x8(_mm_srli_si128(packed, 8))));
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b + 64 * h;
        const uint8_t* qh = b + 128 + 32 * h;
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
        for (int part = 0; part < 4; ++part) {
          const __m256i q = _mm256_sub_epi8(q6_values(a, c, hb, part), bias);
          const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
          const __m256 qv[4] = {i8x8(lo), i8x8(_mm_srli_si128(lo, 8)), i8x8(hi), i8x8(_mm_srli_si128(hi, 8))};
          const __m256 s0 = _mm256_broadcast_ss(scales + 8 * h + 2 * part);
          const __m256 s1 = _mm256_broadcast_ss(scales + 8 * h + 2 * part + 1);
          const float* xs = x + sb * 256 + 128 * h + 32 * part;
#pragma GCC unroll 6
          for (int i = 0; i < MG; ++i) {
            const float* xr = xs + i * K;
            const __m256 first = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), qv[1], _mm256_mul_ps(_mm256_loadu_ps(xr), qv[0]));
            const __m256 second = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 24), qv[3], _mm256_mul_ps(_mm256_loadu_ps(xr + 16), qv[2]));
            total[i] = _mm256_fmadd_ps(s1, second, _mm256_fmadd_ps(s0, first, total[i]));
          }
        }
      }
    }
    partial.store(n - n_begin, 0, total);
    if (s1 == superblocks)
      for (int i = 0; i < MG; ++i) out[i * N + n] = hsum(total[i]);
  }
  }
}

// f(std::integral_constant<int, min(mg, MAXG)>()) for a group of mg >= 1 rows.
template <int MAXG, typename F>
void by_group_size(int mg, F&& f) {
  if constexpr (MAXG > 1) {
    if (mg < MAXG) return by_group_size<MAXG - 1>(mg, f);
  }
  f(std::integral_constant<int, MAXG>());
}

// The fused kernels' schedule: weight rows split over threads, in slices of 64 that stay in L1/L2 while every
// balanced group of at most MAXG (4 or 8) input rows runs over them; rows(m0, MG, c, ce) runs one group on one slice.
template <int MAXG = 4, typename F>
void for_row_groups(int64_t M, int64_t N, F&& rows) {
  const int64_t groups = (M + MAXG - 1) / MAXG;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t grain = std::max<int64_t>(16, (N + threads - 1) / threads);
  at::parallel_for(0, N, grain, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; c += 64) {
      const int64_t ce = std::min(e, c + 64);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t m0 = g * M / groups, m1 = (g + 1) * M / groups;
        by_group_size<MAXG>(int(m1 - m0), [&](auto size) { rows(m0, size, c, ce); });
      }
    }
  });
}

// Time spent in the kernel ops by stage, summed while switched on (`multidraft bench forward-cost`: where a forward's
// time outside the linears goes, counting the ops the fused decoder layer calls from C++): the linears, the
// attention, the layers' elementwise steps (norms, rotary, the gated activation); off, one relaxed load per call.
enum Stage { STAGE_LINEARS = 0, STAGE_ATTENTION = 1, STAGE_LAYER_STEPS = 2, STAGES = 3 };
std::atomic<bool> stage_timing{false};
std::atomic<int64_t> stage_nanoseconds[STAGES] = {};

template <Stage S>
struct StageClock {
  const bool on = stage_timing.load(std::memory_order_relaxed);
  const std::chrono::steady_clock::time_point start = on ? std::chrono::steady_clock::now()
                                                         : std::chrono::steady_clock::time_point();
  ~StageClock() {
    if (on)
      stage_nanoseconds[S] += std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - start).count();
  }
};
using LinearClock = StageClock<STAGE_LINEARS>;

// Switches the timing on or off; returns each stage's nanoseconds summed since the previous call (then 0 again).
std::vector<int64_t> stage_times(bool on) {
  stage_timing = on;
  std::vector<int64_t> spent(STAGES);
  for (int s = 0; s < STAGES; ++s) spent[s] = stage_nanoseconds[s].exchange(0);
  return spent;
}

// x (..., K) -> the sizes (..., N) of a linear's output.
std::vector<int64_t> output_sizes(const at::Tensor& x, int64_t N) {
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return sizes;
}

// x (..., K) -> an empty (..., N) of the same options.
at::Tensor output_for(const at::Tensor& x, int64_t N) { return at::empty(output_sizes(x, N), x.options()); }

void check_blocks(const at::Tensor& blocks, int64_t type, int64_t K) {
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.dim() == 2 && blocks.is_contiguous(),
              "gguf kernels: blocks must be a contiguous 2-D uint8 tensor");
  const Format f = format_of(type);
  TORCH_CHECK(f.block_values > 0, "gguf kernels: unsupported block type ", type);
  TORCH_CHECK(K % f.block_values == 0 && blocks.size(1) == K / f.block_values * f.block_bytes,
              "gguf kernels: a row of ", blocks.size(1), " bytes does not hold ", K, " values of type ", type);
}

at::Tensor gguf_linear(const at::Tensor& x_in, const at::Tensor& blocks, int64_t type, int64_t K) {
  const LinearClock clock;
  check_blocks(blocks, type, K);
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && x_in.size(-1) == K, "gguf_linear: fp32 input of width K");
  auto x = x_in.contiguous();
  const int64_t N = blocks.size(0), M = x.numel() / K, row_bytes = blocks.size(1);
  auto out = output_for(x, N);
  if (M == 0) return out;
  const float* xp = x.data_ptr<float>();
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  if (type == 12 || type == 14) {                 // fused Q4_K / Q6_K: input rows in balanced groups of at most 4
    const std::vector<float> xsums = type == 12 ? block_sums(xp, M, K) : std::vector<float>();
    for_row_groups(M, N, [&](int64_t m0, auto size, int64_t c, int64_t ce) {
      constexpr int MG = decltype(size)::value;
      if (type == 12)
        q4_k_rows<MG>(xp + m0 * K, xsums.data() + m0 * (K / 32), bp, row_bytes, op + m0 * N, K, N, c, ce);
      else
        q6_k_rows<MG>(xp + m0 * K, bp, row_bytes, op + m0 * N, K, N, c, ce);
    });
    return out;
  }
  // Other formats: weight rows decoded per chunk, about 16 KB of fp32 (L1), at least 4 rows.
  const int64_t chunk = std::max<int64_t>(4, (int64_t(4096) / K) & ~int64_t(3));
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t grain = std::max<int64_t>(chunk, ((N + threads - 1) / threads + chunk - 1) / chunk * chunk);
  const int64_t groups = (M + 5) / 6;          // input rows in balanced groups of at most 6
  at::parallel_for(0, N, grain, [&](int64_t b, int64_t e) {
    std::vector<float> buffer(chunk * K);
    for (int64_t c = b; c < e; c += chunk) {
      const int64_t count = std::min(e, c + chunk) - c;
      for (int64_t r = 0; r < count; ++r) {
        if (c + r + 1 < e) _mm_prefetch((const char*)(bp + (c + r + 1) * row_bytes), _MM_HINT_T0);
        decode_row(type, bp + (c + r) * row_bytes, K, buffer.data() + r * K);
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t m0 = g * M / groups, m1 = (g + 1) * M / groups;
        apply_any(int(m1 - m0), xp + m0 * K, buffer.data(), op + m0 * N, K, N, c, count);
      }
    }
  });
  return out;
}

#include "q8_linear.inc"

// Rows `ids` of a block matrix as fp32 (embedding lookups, tests, the prefill GEMM's weights).
at::Tensor gguf_dequantize(const at::Tensor& blocks, int64_t type, int64_t K, const at::Tensor& ids_in) {
  check_blocks(blocks, type, K);
  auto ids = ids_in.to(at::kLong).contiguous();
  const int64_t R = ids.numel(), N = blocks.size(0), row_bytes = blocks.size(1);
  const int64_t* ip = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < R; ++i) TORCH_CHECK(ip[i] >= 0 && ip[i] < N, "gguf_dequantize: row ", ip[i], " out of range");
  auto out = at::empty({R, K}, at::kFloat);
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, R, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) decode_row(type, bp + ip[i] * row_bytes, K, op + i * K);
  });
  return out;
}

// ---------------------------------------------------------------- attention

// hsum of eight vectors at once: lane j = hsum(v[j]), by the very tree hsum uses (lane i + lane i+4, then the pairs
// two apart, then the last pair; fp32 addition is commutative, so each sum's bits are hsum's).
inline __m256 hsum8(const __m256 v[8]) {
  __m256 half[4];                                     // [v_a's i + (i+4) | v_b's], a = 2c, b = 2c + 1
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
    half[c] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * c], v[2 * c + 1], 0x20),
                            _mm256_permute2f128_ps(v[2 * c], v[2 * c + 1], 0x31));
  // [s0 s1 s2 s3 | ...] of keys (0, 2 | 1, 3) and (4, 6 | 5, 7): s0 + s2 and s1 + s3 side by side
  const __m256 p0 = _mm256_add_ps(_mm256_shuffle_ps(half[0], half[1], 0x44), _mm256_shuffle_ps(half[0], half[1], 0xEE));
  const __m256 p1 = _mm256_add_ps(_mm256_shuffle_ps(half[2], half[3], 0x44), _mm256_shuffle_ps(half[2], half[3], 0xEE));
  // (s0 + s2) + (s1 + s3): lanes hold keys 0, 2, 4, 6 | 1, 3, 5, 7
  const __m256 sums = _mm256_hadd_ps(p0, p1);
  return _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight keys' scores from their accumulators a (8 fp32 lanes each, d < D8 summed): hsum8's tree, the tail d >= D8
// after it (as hsum's callers do), then the scale.
inline void finish_eight_scores(const __m256 a[8], const float* qr, const float* const kr[8], int64_t D, int64_t D8,
                                float scale, float* scores) {
  __m256 dots = hsum8(a);
  if (D8 != D) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, dots);
    for (int j = 0; j < 8; ++j)
      for (int64_t d = D8; d < D; ++d) lanes[j] = std::fma(qr[d], kr[j][d], lanes[j]);
    dots = _mm256_load_ps(lanes);
  }
  _mm256_storeu_ps(scores, _mm256_mul_ps(dots, _mm256_set1_ps(scale)));
}

// One (head, row)'s dot products with its visible keys, eight keys at a time (independent accumulators in
// registers; the eight horizontal sums reduced together); each key's own arithmetic is the same: 8 fp32 lanes of
// fused multiply-adds over d, hsum's tree, then the tail, then the scale.
inline void key_scores(const float* qr, const float* kbase, int64_t D, const int64_t* keys, int64_t n, float scale,
                       float* scores) {
  const int64_t D8 = D & ~int64_t(7);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float* kr[8];
    __m256 a[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) kr[j] = kbase + keys[i + j] * D, a[j] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D8; d += 8) {
      const __m256 qv = _mm256_loadu_ps(qr + d);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr[j] + d), a[j]);
    }
    finish_eight_scores(a, qr, kr, D, D8, scale, scores + i);
  }
  for (; i < n; ++i) {
    const float* kr = kbase + keys[i] * D;
    __m256 a = _mm256_setzero_ps();
    for (int64_t d = 0; d < D8; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), _mm256_loadu_ps(kr + d), a);
    float dot = hsum(a);
    for (int64_t d = D8; d < D; ++d) dot = std::fma(qr[d], kr[d], dot);
    scores[i] = dot * scale;
  }
}

// exp(x) in eight lanes with a fixed sequence of fp32 operations (no libm: glibc's expf differs between versions;
// and a little faster: 903 values 3.6 us against 5.1 us of std::exp calls, standalone on a Zen 3): x clamped to [-87.34, 88.37] (a NaN stays NaN),
// n = round(x * log2(e)), r = x - n * ln2 in two parts (Cody-Waite), exp(r) by Cephes' degree-6 polynomial
// (relative error below 2 ulp on [-ln2/2, ln2/2]), times 2^n through the exponent bits. Every step an explicit
// operation and contraction off, so every machine with AVX2 and FMA, whatever its compiler, computes these bits.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
inline __m256 exp_lanes(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), _mm256_max_ps(_mm256_set1_ps(-87.3365478515625f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// sc[i] = exp(sc[i] - best) for i < n (the softmax's numerators); the last partial vector goes through the same
// lanes (padded), so a value's bits never depend on where it sits.
inline void exp_shifted(float* sc, int64_t n, float best) {
  const __m256 b = _mm256_set1_ps(best);
  const int64_t n8 = n & ~int64_t(7);
  for (int64_t i = 0; i < n8; i += 8) _mm256_storeu_ps(sc + i, exp_lanes(_mm256_sub_ps(_mm256_loadu_ps(sc + i), b)));
  if (n8 < n) {
    alignas(32) float lanes[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    std::memcpy(lanes, sc + n8, (n - n8) * sizeof(float));
    _mm256_store_ps(lanes, exp_lanes(_mm256_sub_ps(_mm256_load_ps(lanes), b)));
    std::memcpy(sc + n8, lanes, (n - n8) * sizeof(float));
  }
}

// total[j * stride] += sc[j * S + from] + sc[j * S + from + 1] + ... + sc[j * S + to - 1], each added in index
// order onto the total (the softmax's total: a sequential sum from 0.f, whose order is part of the arithmetic; a
// sum continued from where it stopped gets the same bits), for `count` rows of scores at once: the rows' chains are
// independent, so C of them interleaved cost about one's latency.
template <int C>
inline void sequential_sums(const float* sc, int64_t S, int64_t from, int64_t to, float* total, int64_t stride) {
  float t[C];
  for (int j = 0; j < C; ++j) t[j] = total[j * stride];
  for (int64_t i = from; i < to; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) t[j] += sc[j * S + i];
  for (int j = 0; j < C; ++j) total[j * stride] = t[j];
}
inline void sequential_sums(const float* sc, int64_t S, int64_t count, int64_t from, int64_t to, float* total,
                            int64_t stride) {
  for (int64_t j = 0; j < count; j += 8)
    by_group_size<8>(int(std::min<int64_t>(8, count - j)), [&](auto c) {
      sequential_sums<decltype(c)::value>(sc + j * S, S, from, to, total + j * stride, stride);
    });
}
#pragma GCC pop_options

// The largest of sc[0..n) (n >= 1): the softmax's shift. Where no score is NaN it is the one maximum, found in any
// order; a NaN score makes its head's every output NaN whichever shift it gets (its exp and the total are NaN).
inline float largest(const float* sc, int64_t n) {
  const int64_t n8 = n & ~int64_t(7);
  float best = sc[0];
  if (n8) {
    __m256 m = _mm256_loadu_ps(sc);
    for (int64_t i = 8; i < n8; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(sc + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    for (int j = 0; j < 8; ++j) best = std::max(best, lanes[j]);
  }
  for (int64_t i = n8; i < n; ++i) best = std::max(best, sc[i]);
  return best;
}

// The indices s < S of a row's visible keys (row[s] true), in order, into keys; -> their count. 32 flags per step:
// a run of visible keys (a cache's prefix) is written as consecutive indices, a mixed step bit by bit.
inline int64_t visible_keys(const bool* row, int64_t S, int64_t* keys) {
  int64_t n = 0, s = 0;
  const __m256i zero = _mm256_setzero_si256();
  for (; s + 32 <= S; s += 32) {
    const __m256i flags = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + s));
    uint32_t seen = ~uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(flags, zero)));
    if (seen == 0xFFFFFFFFu) {
      for (int j = 0; j < 32; ++j) keys[n + j] = s + j;
      n += 32;
      continue;
    }
    for (; seen; seen &= seen - 1) keys[n++] = s + __builtin_ctz(seen);
  }
  for (; s < S; ++s)
    if (row[s]) keys[n++] = s;
  return n;
}

// out[d] = sum over kept keys i, in order, of p[i] * v_i[d] (one fused multiply-add per key and lane), for W x 8
// lanes held in registers across the n keys: from 0 when `fresh`, else continuing the sums already in `out` (a
// chunk of keys after the previous ones: storing and reloading an fp32 lane changes no bit).
template <int W>
inline void weighted_values(const float* vbase, int64_t D, const int64_t* keys, const float* p, int64_t n,
                            float* out, bool fresh) {
  __m256 a[W];
  for (int j = 0; j < W; ++j) a[j] = fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8 * j);
  for (int64_t i = 0; i < n; ++i) {
    const __m256 pv = _mm256_set1_ps(p[i]);
    const float* vr = vbase + keys[i] * D;
    for (int j = 0; j < W; ++j) a[j] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8 * j), a[j]);
  }
  for (int j = 0; j < W; ++j) _mm256_storeu_ps(out + 8 * j, a[j]);
}

// How far ahead (floats) the AVX-512 attention kernels prefetch the keys and values they stream, into L2: a cache's
// rows are consecutive, so 16 KB on is 32 keys of a 128-wide head (a hint: a tree's scattered keys just miss it).
// One row over 3072 cached keys of the 1.5B's shape from memory (Zen 5, 2 threads, us a layer): 212-239 without,
// 95-155 with (L1 or L2, 8-32 KB on: all within the spread between builds and processes).
constexpr int64_t ATTENTION_AHEAD = 4096;

// Up to four query heads of one KV head at once where AVX-512 is there (attention_wide): each key's (value's) row
// loaded once for all of them (scores: two keys per zmm, 4 accumulators per head; values: 64 dimensions per 4 zmm),
// and every score and value lane the very operations of key_scores / weighted_values, in the same order: the same
// bits as one head at a time. Against two heads at a time with 8-lane scores (to 2026-12-02; warm, 2 threads, Zen
// 5, 8 rows over 308 keys, one process alternating): smollm2's shape 52 -> 44 us, the 1.5B's 112 -> 87, gemma3's
// 72 -> 51.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl")
// key_scores for NH (1-4) query heads of one KV head, two keys per zmm: for keys 2c and 2c + 1 of each eight, lanes
// 0-7 hold the first key's 8 accumulator lanes and lanes 8-15 the second's, each lane the same fused multiply-adds
// in the same order as key_scores' ymm lanes (a zmm is two ymm side by side: the same bits), so half the
// instructions; the halves are then split back into eight ymm for finish_eight_scores. Each key row's load is
// shared by the NH heads.
template <int NH>
inline void key_scores_heads(const float* const* q, const float* kbase, int64_t D, const int64_t* keys, int64_t n,
                             float scale, float* const* s) {
  const int64_t D8 = D & ~int64_t(7);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float* kr[8];
    __m512 a[NH][4];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) kr[j] = kbase + keys[i + j] * D;
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < 4; ++c) a[h][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D8; d += 8) {
      __m512 qv[NH];
      for (int h = 0; h < NH; ++h) {
        const __m256 q8 = _mm256_loadu_ps(q[h] + d);
        qv[h] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(q8)),
                                                    _mm256_castps_pd(q8), 1));
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512 kv = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castpd256_pd512(_mm256_loadu_pd(reinterpret_cast<const double*>(kr[2 * c] + d))),
            _mm256_loadu_pd(reinterpret_cast<const double*>(kr[2 * c + 1] + d)), 1));
        for (int h = 0; h < NH; ++h) a[h][c] = _mm512_fmadd_ps(qv[h], kv, a[h][c]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      __m256 halves[8];
      for (int c = 0; c < 4; ++c) {
        halves[2 * c] = _mm512_castps512_ps256(a[h][c]);
        halves[2 * c + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[h][c]), 1));
      }
      finish_eight_scores(halves, q[h], kr, D, D8, scale, s[h] + i);
    }
  }
  if (i < n)                                          // the last keys one at a time, as key_scores takes them
    for (int h = 0; h < NH; ++h) key_scores(q[h], kbase, D, keys + i, n - i, scale, s[h] + i);
}

// weighted_values for NH (1-4) heads (p[h] -> out[h]) over 64 dimensions: 4 zmm per head, each value row's load
// shared by the heads.
template <int NH>
inline void weighted_values_heads64(const float* vbase, int64_t D, const int64_t* keys, const float* const* p,
                                    int64_t n, float* const* out, bool fresh) {
  __m512 a[NH][4];
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < 4; ++j) a[h][j] = fresh ? _mm512_setzero_ps() : _mm512_loadu_ps(out[h] + 16 * j);
  for (int64_t i = 0; i < n; ++i) {
    __m512 pv[NH];
    for (int h = 0; h < NH; ++h) pv[h] = _mm512_set1_ps(p[h][i]);
    const float* vr = vbase + keys[i] * D;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      _mm_prefetch((const char*)(vr + ATTENTION_AHEAD + 16 * j), _MM_HINT_T1);
      const __m512 vv = _mm512_loadu_ps(vr + 16 * j);
      for (int h = 0; h < NH; ++h) a[h][j] = _mm512_fmadd_ps(pv[h], vv, a[h][j]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(out[h] + 16 * j, a[h][j]);
}

// Query vectors in pairs against keys broadcast: for a pair (a, b) a zmm holds a's 8 query lanes of dimensions d..d+7
// in lanes 0-7 and b's in lanes 8-15 (pair_queries lays them out once), and one key's 8 values are broadcast to both
// halves by the load itself, so each fused multiply-add serves two query vectors with no shuffle. A half's lane j is
// fma(q[d + j], k[d + j], lane) over d in order, as key_scores' ymm lane j: the same bits.
// pair_block: NP (1-3) consecutive pairs (2 * D8 floats each, from qz) x 8 keys in 24 accumulators, over d < D8.
// DC > 0 (64, 128, 256: the head sizes of our models): D8 == DC and the keys are consecutive rows from kr[0] (a
// cache's slots), so every address is a constant offset from two pointers instead of eight key pointers the
// registers cannot all hold.
template <int NP, int DC>
inline void pair_block(const float* qz, const float* const* kr, int64_t D8, __m512 (&a)[NP][8]) {
  const int64_t dn = DC ? DC : D8;
  for (int p = 0; p < NP; ++p)
    for (int j = 0; j < 8; ++j) a[p][j] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int64_t d = 0; d < dn; d += 8) {
    __m512 qv[NP];
    for (int p = 0; p < NP; ++p) qv[p] = _mm512_loadu_ps(qz + 2 * p * dn + 2 * d);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const float* k = DC ? kr[0] + j * DC : kr[j];
      if (d % 16 == 0) _mm_prefetch((const char*)(k + d + ATTENTION_AHEAD), _MM_HINT_T1);
      const __m256d k8 = _mm256_loadu_pd(reinterpret_cast<const double*>(k + d));     // 8 floats, both halves
      const __m512 kv = _mm512_castpd_ps(_mm512_broadcast_f64x4(k8));
      for (int p = 0; p < NP; ++p) a[p][j] = _mm512_fmadd_ps(qv[p], kv, a[p][j]);
    }
  }
}

// The scores of NP consecutive pairs of one KV head's query vectors (any rows, any heads) over n keys, 8 at a time
// (pair_block, then finish_eight_scores on each half); qa: each pair's two query rows (for the tail d >= D8), s:
// their score rows (nullptr: a pair's unused second half).
template <int NP>
inline void key_scores_pairs(const float* qz, const float* const* qa, const float* kbase, int64_t D,
                             const int64_t* keys, int64_t n, float scale, float* const* s) {
  const int64_t D8 = D & ~int64_t(7);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float* kr[8];
    __m512 a[NP][8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) kr[j] = kbase + keys[i + j] * D;
    const bool consecutive = keys[i + 7] == keys[i] + 7;         // keys ascend, so these are 8 adjacent slots
    if (consecutive && D == 128) pair_block<NP, 128>(qz, kr, D8, a);
    else if (consecutive && D == 64) pair_block<NP, 64>(qz, kr, D8, a);
    else if (consecutive && D == 256) pair_block<NP, 256>(qz, kr, D8, a);
    else pair_block<NP, 0>(qz, kr, D8, a);
    for (int p = 0; p < NP; ++p) {
      __m256 lo[8], hi[8];
      for (int j = 0; j < 8; ++j) {
        lo[j] = _mm512_castps512_ps256(a[p][j]);
        hi[j] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[p][j]), 1));
      }
      finish_eight_scores(lo, qa[2 * p], kr, D, D8, scale, s[2 * p] + i);
      if (s[2 * p + 1]) finish_eight_scores(hi, qa[2 * p + 1], kr, D, D8, scale, s[2 * p + 1] + i);
    }
  }
  if (i < n)                                          // the last keys one at a time, as key_scores takes them
    for (int v = 0; v < 2 * NP; ++v)
      if (s[v]) key_scores(qa[v], kbase, D, keys + i, n - i, scale, s[v] + i);
}

#pragma GCC pop_options

// pairs[p][16 (d / 8) + l]: query vector 2p's dimension d + l (l < 8) and 2p + 1's (l >= 8), for key_scores_pairs;
// an odd last vector is paired with itself.
inline void pair_queries(const float* const* q, int64_t count, int64_t D, float* pairs) {
  const int64_t D8 = D & ~int64_t(7);
  for (int64_t v = 0; v < count; v += 2) {
    const float* a = q[v];
    const float* b = q[std::min(v + 1, count - 1)];
    float* out = pairs + v * D8;                        // pair v / 2: 2 * D8 floats
    for (int64_t d = 0; d < D8; d += 8) {
      std::memcpy(out + 2 * d, a + d, 8 * sizeof(float));
      std::memcpy(out + 2 * d + 8, b + d, 8 * sizeof(float));
    }
  }
}

// Buffers of one thread's attention blocks.
struct AttentionScratch {
  std::vector<float> scores, acc, pairs;
  std::vector<int64_t> keys, counts;
};

// Query rows t0 .. t0 + rows - 1 (each with >= 1 visible key) of the heads [h0, h1) of one KV head: per (row, head)
// the arithmetic of attention_over's comment (scores: key_scores' lanes, or key_scores_pairs' with the same bits on
// AVX-512 (`wide`); softmax; values: weighted_values' lanes, four vectors at a time on AVX-512). The rows share each
// chunk of keys (then values) while it is in L1, so a verify of 8 rows or a prefill block reads the cache once, not
// once per row, and a grouped-query model once per KV head, not per query head. The keys every row sees first (a
// verify's cache, a prefill block's earlier tokens: the common prefix of the rows' lists) are taken for all the
// block's query vectors at once; each row's own later keys follow for it alone, in order, so every sum runs over
// its own keys in key order, as it would alone. Against one row at a time (Zen 5, 2 threads, the 1.5B's shape from
// memory, us a layer): 8 rows over 3072 cached keys 835 -> 540, 16 rows 1514 -> 1085, 1 row 219 -> 88-160. An
// engine's rows (one per request) share no key and run alone, with their heads in pairs where those are whole pairs
// and their values in chunks all their heads weigh while in L1: 8 requests over 1024 keys each 573 -> 464-470.
void attention_block(const float* qp, const float* kbase, const float* vbase, const bool* mask, int64_t T, int64_t t0,
                     int64_t rows, int64_t D, int64_t W, int64_t h0, int64_t h1, int64_t chunk, float scale,
                     bool wide, AttentionScratch& scratch, float* out, int64_t H) {
  const int64_t heads = h1 - h0, vectors = rows * heads, D8 = D & ~int64_t(7);
  scratch.keys.resize(rows * W);
  scratch.counts.resize(rows);
  int64_t* const keys = scratch.keys.data();
  int64_t common = W;
  for (int64_t r = 0; r < rows; ++r) {
    scratch.counts[r] = visible_keys(mask + (t0 + r) * W, W, keys + r * W);
    int64_t same = 0;
    const int64_t limit = std::min(common, scratch.counts[r]);
    while (same < limit && keys[r * W + same] == keys[same]) ++same;
    common = same;
  }
  scratch.scores.resize(vectors * W);
  scratch.acc.resize(vectors * (D + 1));
  scratch.pairs.resize(((vectors + 1) / 2) * 2 * D8);
  // vector v = r * heads + (h - h0): its query, score row and accumulators
  std::vector<const float*> q(vectors);
  std::vector<float*> sc(vectors), acc(vectors);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t v = r * heads + h - h0;
      q[v] = qp + (h * T + t0 + r) * D;
      sc[v] = scratch.scores.data() + v * W;
      acc[v] = scratch.acc.data() + v * (D + 1);
    }
  if (wide) pair_queries(q.data(), vectors, D, scratch.pairs.data());
  // the scores of vectors [v0, v1) over m keys ks, at `at` in their score rows: one at a time (AVX2); in pairs where
  // the range is whole pairs (or ends with the last vector, paired with itself); else four at a time
  auto score = [&](int64_t v0, int64_t v1, const int64_t* ks, int64_t m, int64_t at) {
    if (!wide) {
      for (int64_t v = v0; v < v1; ++v) key_scores(q[v], kbase, D, ks, m, scale, sc[v] + at);
    } else if (v0 % 2 == 0 && (v1 % 2 == 0 || v1 == vectors)) {
      for (int64_t p = v0 / 2, end = (v1 + 1) / 2; p < end; p += 3) {
        const int np = int(std::min<int64_t>(3, end - p));
        const float* qz = scratch.pairs.data() + p * 2 * D8;     // pairs p .. p + np - 1, one after another
        const float* qa[6];
        float* s[6];
        for (int e = 0; e < 2 * np; ++e) {
          const int64_t v = 2 * p + e;
          qa[e] = q[std::min(v, vectors - 1)], s[e] = v < vectors ? sc[v] + at : nullptr;
        }
        by_group_size<3>(np, [&](auto n) { key_scores_pairs<decltype(n)::value>(qz, qa, kbase, D, ks, m, scale, s); });
      }
    } else {
      for (int64_t v = v0; v < v1; v += 4) {
        const int nh = int(std::min<int64_t>(4, v1 - v));
        const float* qh[4];
        float* s[4];
        for (int j = 0; j < nh; ++j) qh[j] = q[v + j], s[j] = sc[v + j] + at;
        by_group_size<4>(nh, [&](auto n) { key_scores_heads<decltype(n)::value>(qh, kbase, D, ks, m, scale, s); });
      }
    }
  };
  for (int64_t c = 0; c < common; c += chunk)                    // the shared keys: every vector's scores
    score(0, vectors, keys + c, std::min(chunk, common - c), c);
  // each row's own keys after them, for that row alone (an engine's rows, one per request, share no key: all their
  // keys are their own)
  for (int64_t r = 0; r < rows; ++r)
    if (scratch.counts[r] > common)
      score(r * heads, (r + 1) * heads, keys + r * W + common, scratch.counts[r] - common, common);
  for (int64_t v = 0; v < vectors; ++v) {                        // softmax: each vector over its own keys
    const int64_t n = scratch.counts[v / heads];
    exp_shifted(sc[v], n, largest(sc[v], n));
  }
  for (int64_t v = 0; v < vectors; ++v) acc[v][D] = 0.f;
  sequential_sums(sc[0], W, vectors, 0, common, acc[0] + D, D + 1);   // the shared keys' part of every total
  for (int64_t r = 0; r < rows; ++r)
    sequential_sums(sc[r * heads], W, heads, common, scratch.counts[r], acc[r * heads] + D, D + 1);
  for (int64_t v = 0; v < vectors; ++v) acc[v][D] = 1.f / acc[v][D];
  const int64_t d_wide = wide ? D8 & ~int64_t(63) : 0;
  // values: the shared keys for every vector, then each row's own keys, in key order; 64 dimensions at a time on
  // up to four vectors, the rest of D8 by weighted_values, d >= D8 lane by lane
  auto weigh = [&](int64_t v0, int64_t count, const int64_t* ks, int64_t from, int64_t m, bool fresh) {
    for (int64_t v = v0; v < v0 + count; v += 4) {
      const int nv = int(std::min<int64_t>(4, v0 + count - v));
      const float* p[4];
      float* a[4];
      for (int j = 0; j < nv; ++j) p[j] = sc[v + j] + from;
      for (int64_t d0 = 0; d0 < d_wide; d0 += 64) {
        for (int j = 0; j < nv; ++j) a[j] = acc[v + j] + d0;
        by_group_size<4>(nv, [&](auto n) {
          weighted_values_heads64<decltype(n)::value>(vbase + d0, D, ks, p, m, a, fresh);
        });
      }
      for (int j = 0; j < nv; ++j) {
        int64_t d0 = d_wide;
        for (; d0 + 64 <= D8; d0 += 64) weighted_values<8>(vbase + d0, D, ks, p[j], m, acc[v + j] + d0, fresh);
        for (; d0 < D8; d0 += 8) weighted_values<1>(vbase + d0, D, ks, p[j], m, acc[v + j] + d0, fresh);
      }
    }
  };
  for (int64_t c = 0; c < common; c += chunk) weigh(0, vectors, keys + c, c, std::min(chunk, common - c), c == 0);
  for (int64_t r = 0; r < rows; ++r)                             // in chunks too: all its heads per chunk in L1
    for (int64_t c = common; c < scratch.counts[r]; c += chunk)
      weigh(r * heads, heads, keys + r * W + c, c, std::min(chunk, scratch.counts[r] - c), c == 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t v = r * heads + h - h0, n = scratch.counts[r];
      float* a = acc[v];
      const float* p = sc[v];
      for (int64_t d = D8; d < D; ++d) {
        float lane = 0.f;
        for (int64_t i = 0; i < n; ++i) lane = std::fma(p[i], vbase[keys[r * W + i] * D + d], lane);
        a[d] = lane;
      }
      float* o = out + ((t0 + r) * H + h) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = a[d] * a[D];
    }
}

// The attention's work as units (KV head, query row, query head of its group), in that order, cut into jobs of
// consecutive units. parts > 0: each (KV head, row)'s heads in `parts` jobs (tests vary it). 0: one job per thread
// of about equal cost, a unit weighing its row's visible keys (+ 16 for its fixed steps): three KV heads on two
// threads no longer leave one thread a third of the work, nor a causal prefill one thread its longest rows.
std::vector<std::pair<int64_t, int64_t>> attention_jobs(const bool* visible, int64_t T, int64_t S, int64_t KVH,
                                                        int64_t group, int64_t parts) {
  std::vector<std::pair<int64_t, int64_t>> jobs;
  if (parts > 0) {
    parts = std::min(parts, group);
    for (int64_t row = 0; row < KVH * T; ++row)
      for (int64_t part = 0; part < parts; ++part)
        jobs.emplace_back(row * group + part * group / parts, row * group + (part + 1) * group / parts);
    return jobs;
  }
  std::vector<int64_t> weight(T);
  int64_t total = 0;
  for (int64_t t = 0; t < T; ++t) {
    weight[t] = 16 + std::count(visible + t * S, visible + (t + 1) * S, true);
    total += KVH * group * weight[t];
  }
  const int64_t units = KVH * T * group;
  const int64_t shares = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), units));
  // With two rows or more per job, a job ends at a row's end, the one nearer its share: a row split between two
  // jobs would make two small blocks of attention_block (gemma3-270m's shape, 8 rows over 256 keys: 38-41 ->
  // 35-36 us).
  const bool whole_rows = KVH * T >= 2 * shares;
  int64_t unit = 0, done = 0;                        // units before `unit` weigh `done`
  for (int64_t j = 1; j <= shares; ++j) {
    const int64_t target = total * j / shares, from = unit;
    while (unit < units && done < target) {
      const int64_t row = unit / group, w = weight[row % T], rest = (row + 1) * group - unit;
      if (whole_rows && j < shares && 2 * done + rest * w > 2 * target) break;
      const int64_t take = whole_rows ? rest : std::min(rest, (target - done + w - 1) / w);
      unit += take, done += take * w;
    }
    if (j == shares) unit = units;                   // (whole rows: the last job takes what is left)
    if (unit > from) jobs.emplace_back(from, unit);
  }
  return jobs;
}

// q (H, T, D), k and v (KVH, S, D) (or a cache layer's (1, KVH, S, D) buffers), visible (T, W) bool with W <= S
// (keys from W on are never visible: a cache's spare slots need no mask columns) -> (T, H, D), or the same values
// as (1, T, H * D) when `flat` (the o linear's input). Per (head, query row): scores over the
// visible keys in key order, softmax with a sequential sum, values accumulated in key order. Nothing depends on
// T or on the keys a row cannot see, so a row gets the same bits in any forward that gives it the same keys (and
// a cache may hand over spare, masked slots past its length at no cost but the mask's scan). Jobs: attention_jobs
// (parts); chunk: keys per L1 chunk (0: a default from D). The bits of a head depend on neither (the
// attention_with op lets tests vary them).
at::Tensor attention_over(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                          const at::Tensor& visible_in, double scaling, int64_t chunk, int64_t parts, bool flat) {
  const StageClock<STAGE_ATTENTION> clock;
  auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  auto visible = visible_in.scalar_type() == at::kBool ? visible_in.contiguous() : visible_in.to(at::kBool).contiguous();
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "invariant_attention: fp32 only");
  TORCH_CHECK(q.dim() == 3 && (k.dim() == 3 || (k.dim() == 4 && k.size(0) == 1)) && v.sizes() == k.sizes() &&
              visible.dim() == 2, "invariant_attention: q (H, T, D), k and v (KVH, S, D), visible (T, keys)");
  const int64_t H = q.size(0), T = q.size(1), D = q.size(2), KVH = k.size(-3), S = k.size(-2);
  const int64_t W = visible.size(1);                 // the mask's width: the keys any row may see are below it
  TORCH_CHECK(H % KVH == 0 && k.size(-1) == D && visible.size(0) == T && W <= S,
              "invariant_attention: shape mismatch");
  auto out = flat ? at::empty({1, T, H * D}, q.options()) : at::empty({T, H, D}, q.options());
  const int64_t group = H / KVH;
  if (chunk <= 0) chunk = std::max<int64_t>(4, (int64_t(4096) / std::max<int64_t>(D, 1)) & ~int64_t(3));
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const bool* mp = visible.data_ptr<bool>();
  float* op = out.data_ptr<float>();
  const float scale = float(scaling);
  const auto jobs = attention_jobs(mp, T, W, KVH, group, parts);
  const bool wide = attention_wide.load(std::memory_order_relaxed);
  at::parallel_for(0, int64_t(jobs.size()), 1, [&](int64_t b, int64_t e) {
    AttentionScratch scratch;
    // a job's units as blocks of up to 8 consecutive rows of one KV head with the same heads
    int64_t kv = -1, t0 = 0, rows = 0, h0 = 0, h1 = 0;
    auto flush = [&]() {
      if (rows) attention_block(qp, kp + kv * S * D, vp + kv * S * D, mp, T, t0, rows, D, W, h0, h1, chunk, scale,
                                wide, scratch, op, H);
      rows = 0;
    };
    for (int64_t job = b; job < e; ++job)
      for (int64_t unit = jobs[job].first; unit < jobs[job].second;) {
        const int64_t row = unit / group, ukv = row / T, t = row % T;
        const int64_t u0 = ukv * group + unit % group;
        const int64_t u1 = u0 + std::min(jobs[job].second, (row + 1) * group) - unit;
        unit += u1 - u0;
        if (std::none_of(mp + t * W, mp + (t + 1) * W, [](bool seen) { return seen; })) {   // no key: zeros
          for (int64_t h = u0; h < u1; ++h) std::fill(op + (t * H + h) * D, op + (t * H + h + 1) * D, 0.f);
          continue;
        }
        if (rows && (ukv != kv || u0 != h0 || u1 != h1 || t != t0 + rows || rows == 8)) flush();
        if (!rows) kv = ukv, t0 = t, h0 = u0, h1 = u1;
        ++rows;
      }
    flush();
  });
  return out;
}

at::Tensor attention_with(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& visible,
                          double scaling, int64_t chunk, int64_t parts) {
  return attention_over(q, k, v, visible, scaling, chunk, parts, false);
}

at::Tensor invariant_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& visible, double scaling) {
  return attention_over(q, k, v, visible, scaling, 0, 0, false);
}

#include "layer_ops.inc"
#include "as_q6_k.inc"

}  // namespace

TORCH_LIBRARY(multidraft_gguf, m) {
  m.def("linear(Tensor x, Tensor blocks, int type, int K) -> Tensor");
  m.def("linear_q8(Tensor x, Tensor blocks, int type, int K) -> Tensor");
  m.def("linear_q8_on(Tensor x, Tensor blocks, int type, int K, int path) -> Tensor");
  m.def("linear_q8_many(Tensor x, Tensor[] blocks, int[] types, int K, Tensor?[] biases) -> Tensor[]");
  m.def("linear_q8_many_on(Tensor x, Tensor[] blocks, int[] types, int K, Tensor?[] biases, int path) -> Tensor[]");
  m.def("q8_missing(int path) -> str", &q8_missing_op);
  m.def("q8_q6_k_layout(int path) -> int", &q8_q6_k_layout);
  m.def("q8_packs_q5_k(int path) -> bool", &q8_packs_q5_k);
  m.def("q8_packs_x16_32(int path) -> bool", &q8_packs_x16_32);
  m.def("set_q8_path(int path) -> int", &set_q8_path);
  m.def("set_attention_wide(bool on) -> bool", &set_attention_wide);
  m.def("set_torch_sum_written(bool on) -> bool", +[](bool on) { return !ablate_torch_order_sum.exchange(!on); });
  m.def("torch_sum_lanes() -> int", +[]() -> int64_t { return torch_sum_lanes(); });
  m.def("set_nontemporal_weights(bool on) -> bool", &set_nontemporal_weights);
  m.def("set_one_row_prefetch(bool on) -> bool", &set_one_row_prefetch);
  m.def("set_amx_vnni_rows(int q4_k, int q6_k, int q32, int q2_k) -> int[]", &set_amx_vnni_rows);
  m.def("set_amx_pipelined(bool on) -> bool", +[](bool on) { return amx_pipelined.exchange(on); });
  m.def("q8_quantize(Tensor x, int block, bool scalar) -> (Tensor, Tensor, Tensor, Tensor)", &q8_quantize);
  m.def("dequantize(Tensor blocks, int type, int K, Tensor ids) -> Tensor");
  m.def("repack_q4_k_x8(Tensor blocks) -> Tensor");
  m.def("repack_q5_k_x8(Tensor blocks) -> Tensor");
  m.def("repack_iq4_xs_x8(Tensor blocks) -> Tensor");
  m.def("repack_q6_k_iq3_s_x8(Tensor blocks) -> Tensor");
  m.def("repack_q6_k_q3_k_x8(Tensor blocks) -> Tensor");
  m.def("convert_as_q6_k(Tensor blocks, int type) -> Tensor");
  m.def("repack_q2_k_x8(Tensor blocks) -> Tensor");
  m.def("repack_q6_k_x8(Tensor blocks) -> Tensor");
  m.def("repack_q6_k_x16(Tensor blocks) -> Tensor");
  m.def("repack_x16_32(Tensor blocks, int type) -> Tensor");
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor visible, float scaling) -> Tensor");
  m.def("attention_with(Tensor q, Tensor k, Tensor v, Tensor visible, float scaling, int chunk, int parts) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor? branch, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rotary_heads(Tensor q, Tensor k, Tensor cos, Tensor signed_sin) -> (Tensor, Tensor)");
  m.def("rotary_store(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor signed_sin, Tensor(a!) keys, Tensor(b!) values, "
        "int start, Tensor? row_slots=None) -> Tensor");
  m.def("silu_mul(Tensor gate, Tensor up) -> Tensor");
  m.def("release_layer_scratch() -> ()", &release_layer_scratch);
  m.def("layer_scratch_bytes() -> int", &layer_scratch_bytes);
  m.def("set_layer_scratch(bool on) -> bool", +[](bool on) { return layer_scratch_on.exchange(on); });
  m.def("decoder_layer(Tensor x, Tensor h, Tensor[] blocks, int[] types, Tensor?[] biases, Tensor[] norms, "
        "float[] eps, Tensor cos, Tensor signed_sin, Tensor(a!) keys, Tensor(b!) values, int start, Tensor visible, "
        "float scaling, Tensor? row_slots=None) -> (Tensor, Tensor, Tensor)");
  m.def("decoder_stack(Tensor x, Tensor h, Tensor[] blocks, int[] types, Tensor?[] biases, Tensor[] norms, "
        "float[] eps, Tensor[] cos, Tensor[] signed_sin, Tensor(a!)[] keys, Tensor(b!)[] values, int start, "
        "Tensor[] visible, int[] kinds, float scaling, Tensor? row_slots=None) -> (Tensor, Tensor)");
  m.def("register_stack(Tensor[] blocks, int[] types, Tensor?[] biases, Tensor[] norms, float[] eps, int[] kinds) "
        "-> int");
  m.def("release_stack(int handle) -> ()", &release_stack);
  m.def("registered_stack(int handle, Tensor x, Tensor h, Tensor[] cos, Tensor[] sin, Tensor(a!)[] keys, "
        "Tensor(b!)[] values, int start, Tensor[] visible, float scaling, Tensor? row_slots) -> (Tensor, Tensor)");
  m.def("all_finite(Tensor x) -> bool");
  m.def("stage_times(bool on) -> int[]", &stage_times);
}
TORCH_LIBRARY_IMPL(multidraft_gguf, CPU, m) {
  m.impl("linear", &gguf_linear);
  m.impl("linear_q8", &gguf_linear_q8);
  m.impl("linear_q8_on", &q8_linear_on);
  m.impl("linear_q8_many", &gguf_linear_q8_many);
  m.impl("linear_q8_many_on", +[](const at::Tensor& x, at::TensorList blocks, at::IntArrayRef types, int64_t K,
                                  const c10::List<std::optional<at::Tensor>>& biases, int64_t path) {
    return q8_linear_many_on(x, blocks, types, K, biases, path);
  });
  m.impl("dequantize", &gguf_dequantize);
  m.impl("repack_q4_k_x8", &repack_q4_k_x8);
  m.impl("repack_q5_k_x8", &repack_q5_k_x8);
  m.impl("repack_iq4_xs_x8", &repack_iq4_xs_x8);
  m.impl("repack_q6_k_iq3_s_x8", &repack_q6_k_iq3_s_x8);
  m.impl("repack_q6_k_q3_k_x8", &repack_q6_k_q3_k_x8);
  m.impl("convert_as_q6_k", &convert_as_q6_k);
  m.impl("repack_q2_k_x8", &repack_q2_k_x8);
  m.impl("repack_q6_k_x8", &repack_q6_k_x8);
  m.impl("repack_q6_k_x16", &repack_q6_k_x16);
  m.impl("repack_x16_32", &repack_x16_32);
  m.impl("attention", &invariant_attention);
  m.impl("attention_with", &attention_with);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("rotary_heads", &rotary_heads);
  m.impl("rotary_store", &rotary_store);
  m.impl("silu_mul", &silu_mul);
  m.impl("decoder_layer", &decoder_layer);
  m.impl("decoder_stack", &decoder_stack);
  m.impl("register_stack", &register_stack);
  m.impl("registered_stack", &registered_stack);
  m.impl("all_finite", &all_finite);
}
