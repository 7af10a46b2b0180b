// Standalone: a 512-bit kernel over Q6_K_X8 (8 rows a group; values decoded with shifts and masks, which issue
// beside vpdpbusd on Zen 4, where X16 needs vpermb + vpmultishiftqb), 8 inputs, random bytes, 8960 x 1536.
//   gcc -O3 -march=native [-DMG=4] [-DNODECODE] [-DNOSCALE] q6_x8_512.c -o x8z && ./x8z [ROWS]
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
#define GB 1680
#define SCALES 16
#define NIB 144
#define HIGH 1168
#ifndef MG
#define MG 8
#endif
// scales of sub-blocks j (low int16) and j2 (high) of each row, in lanes 2r and 2r + 1
static inline __m512i scale_pairs(const uint8_t* o, int j, int j2) {
  __m128i a, b;
  memcpy(&a, o + SCALES + 8 * j, 8);
  memcpy(&b, o + SCALES + 8 * j2, 8);
  a = _mm_cvtsi64_si128(*(const int64_t*)(o + SCALES + 8 * j));
  b = _mm_cvtsi64_si128(*(const int64_t*)(o + SCALES + 8 * j2));
  const __m256i pairs = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));  // row r's pair in int32 lane r
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                  _mm512_castsi256_si512(pairs));
}
__attribute__((noinline)) void rows(const int64_t* xi, const float* const* xd, const int64_t* offsets, const uint8_t* w,
                                    long superblocks, float* out, long N, long g0, long g1) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
  const __m512i rot_lo = _mm512_setr_epi64(4, 4, 4, 4, 0, 0, 0, 0),
                rot_hi = _mm512_setr_epi64(2, 2, 2, 2, 62, 62, 62, 62);
  const __m512i pairsum = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
  for (long g = g0; g < g1; ++g) {
    float total[MG][8] __attribute__((aligned(64)));
    for (int i = 0; i < MG; ++i) _mm256_store_ps(total[i], _mm256_setzero_ps());
    for (long sb = 0; sb < superblocks; ++sb) {
      const uint8_t* o = w + (g * superblocks + sb) * GB;
      const char* ahead = (const char*)(o + 6 * GB);
      __m512i isum[MG];
      for (int i = 0; i < MG; ++i) isum[i] = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
#pragma GCC unroll 2
        for (int half = 0; half < 2;
             ++half) {  // chunks 2 half, 2 half + 1: sub-blocks 4p + half (low nibbles), 4p + 2 + half (high)
          __m512i dl[MG], dh[MG];
          for (int i = 0; i < MG; ++i) {
            dl[i] = _mm512_set1_epi64(offsets[(sb * 16 + 4 * p + half) * 8 + i]);
            dh[i] = _mm512_set1_epi64(offsets[(sb * 16 + 4 * p + 2 + half) * 8 + i]);
          }
#pragma GCC unroll 2
          for (int k = 0; k < 2; ++k) {
            const int c = 2 * half + k;
            _mm_prefetch(ahead + 64 * (2 * (4 * p + c)), _MM_HINT_T1);
            _mm_prefetch(ahead + 64 * (2 * (4 * p + c) + 1), _MM_HINT_T1);
            const __m512i n = _mm512_loadu_si512(o + NIB + 256 * p + 64 * c);
            const __m512i t = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(o + HIGH + 128 * p + 32 * c)));
#if NODECODE
            const __m512i lo = n, hi = _mm512_loadu_si512(o + NIB + 256 * p + 64 * c + 1024);
#else
            const __m512i lo =
                _mm512_or_si512(_mm512_and_si512(n, low4), _mm512_and_si512(_mm512_rolv_epi64(t, rot_lo), top2));
            const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n, 4), low4),
                                               _mm512_and_si512(_mm512_rolv_epi64(t, rot_hi), top2));
#endif
            for (int i = 0; i < MG; ++i) {
              dl[i] = _mm512_dpbusd_epi32(dl[i], lo, _mm512_set1_epi64(xi[(sb * 32 + 8 * p + c) * 8 + i]));
              dh[i] = _mm512_dpbusd_epi32(dh[i], hi, _mm512_set1_epi64(xi[(sb * 32 + 8 * p + 4 + c) * 8 + i]));
            }
          }
          const __m512i sc = scale_pairs(o, 4 * p + half, 4 * p + 2 + half);
#if NOSCALE
          for (int i = 0; i < MG; ++i) isum[i] = _mm512_add_epi32(isum[i], _mm512_add_epi32(dl[i], dh[i]));
#else
          for (int i = 0; i < MG; ++i)
            isum[i] = _mm512_dpwssd_epi32(
                isum[i], _mm512_mask_blend_epi16(0x55555555u, _mm512_slli_epi32(dh[i], 16), dl[i]), sc);
#endif
        }
      }
      __m128i dhalf;
      memcpy(&dhalf, o, 16);
      const __m256 d = _mm256_cvtph_ps(dhalf);
      for (int i = 0; i < MG; ++i) {
        const __m512i both = _mm512_add_epi32(isum[i], _mm512_srli_epi64(isum[i], 32));  // lanes 2r
        const __m256i isum8 = _mm512_castsi512_si256(_mm512_permutexvar_epi32(pairsum, both));
        _mm256_store_ps(total[i], _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(xd[i][sb]), d),
                                                  _mm256_cvtepi32_ps(isum8), _mm256_load_ps(total[i])));
      }
    }
    for (int i = 0; i < MG; ++i) _mm256_storeu_ps(out + i * N + 8 * g, _mm256_load_ps(total[i]));
  }
}
int main(int argc, char** argv) {
  const long N = argc > 1 ? atol(argv[1]) : 8960, K = 1536, sbs = K / 256;
  uint8_t* w = aligned_alloc(64, N / 8 * sbs * GB + 16384);
  for (long i = 0; i < N / 8 * sbs * GB + 16384; i++) w[i] = rand();
  int8_t* xq[8];
  float* xd[8];
  int32_t* off[8];
  for (int i = 0; i < 8; i++) {
    xq[i] = malloc(K);
    xd[i] = malloc(sbs * 4);
    off[i] = malloc(K * 8 * 4);
    for (int k = 0; k < K; k++) xq[i][k] = rand() % 255 - 127;
    for (int s = 0; s < sbs; s++) xd[i][s] = 0.01f;
    for (int k = 0; k < K * 8; k++) off[i][k] = -(rand() % 30000);
  }
  float* out = malloc(8 * N * 4);
  int64_t* xi = malloc(K * 8);
  for (int b = 0; b < K / 8; b++)
    for (int i = 0; i < 8; i++) memcpy(xi + b * 8 + i, xq[i] + 8 * b, 8);
  double best = 1e9;
  for (int r = 0; r < 30; r++) {
    double t = now();
    for (int m = 0; m < 8; m += MG)
      rows(xi + m, (const float* const*)xd + m, (const int64_t*)off[0] + m, w, sbs, out + m * N, N, 0, N / 8);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("MG %d: 8 rows %.0f us (check %f)\n", MG, best * 1e6, out[5]);
  return 0;
}
