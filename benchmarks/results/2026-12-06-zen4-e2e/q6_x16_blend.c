// Standalone copy of x16_vnni_rows<8> (Q6_K_X16, the avx512-vnni kernel) on random bytes, 8960 x 1536, 8 rows:
// -DOLD as landed (two vpdpwssd a sub-block), default: the half sub-blocks' int16 dots side by side (shift + blend)
// and one vpdpwssd; -DNOSCALE / -DNODECODE take the scale step / the decoding out (wrong sums: timing only).
//   gcc -O3 -march=native [-DOLD] q6_x16_blend.c -o x16 && ./x16 [ROWS]
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
#define GB 3360
#define VALUES 288
#define SCALES 32
static const uint8_t SPREAD[64] __attribute__((aligned(64))) = {
    0,  1,  2,  3,  4,  5,  5,  5,  6,  7,  8,  9,  10, 11, 11, 11, 12, 13, 14, 15, 16, 17,
    17, 17, 18, 19, 20, 21, 22, 23, 23, 23, 24, 25, 26, 27, 28, 29, 29, 29, 30, 31, 32, 33,
    34, 35, 35, 35, 36, 37, 38, 39, 40, 41, 41, 41, 42, 43, 44, 45, 46, 47, 47, 47};
static inline __m512i step_of(const uint8_t* o, int step) {
#if NODECODE
  return _mm512_loadu_si512(o + VALUES + 48 * step);
#else
  const __m512i packed = _mm512_maskz_loadu_epi8((1ULL << 48) - 1, o + VALUES + 48 * step);
  const __m512i lanes = _mm512_permutexvar_epi8(_mm512_load_si512(SPREAD), packed);
  return _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x2A241E18120C0600LL), lanes),
                          _mm512_set1_epi8(0x3F));
#endif
}
#define MG 8
__attribute__((noinline)) void rows(const int8_t* const* xq, const float* const* xd, const int32_t* offsets,
                                    const uint8_t* w, long superblocks, float* out, long N, long g0, long g1) {
  for (long g = g0; g < g1; ++g) {
    float total[MG][16] __attribute__((aligned(64)));
    for (int i = 0; i < MG; ++i) _mm512_store_ps(total[i], _mm512_setzero_ps());
    for (long sb = 0; sb < superblocks; ++sb) {
      const uint8_t* o = w + (g * superblocks + sb) * GB;
      const char* ahead = (const char*)(o + 3 * GB);
      __m512i isum[MG];
      for (int i = 0; i < MG; ++i) isum[i] = _mm512_setzero_si512();
      for (int j = 0; j < 16; ++j) {
        __m128i s8;
        memcpy(&s8, o + SCALES + 16 * j, 16);
        const __m512i sc16 = _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(s8));
        const __m512i sc = _mm512_or_si512(sc16, _mm512_slli_epi32(sc16, 16));
        __m512i first[MG];
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          const int32_t* start = offsets + ((sb * 16 + j) * 2 + half) * 8;
          __m512i dot[MG];
          for (int i = 0; i < MG; ++i) dot[i] = _mm512_set1_epi32(start[i]);
#pragma GCC unroll 2
          for (int kk = 0; kk < 2; ++kk) {
            const int step = 4 * j + 2 * half + kk;
            if (step < 53) _mm_prefetch(ahead + 64 * step, _MM_HINT_T1);
            const __m512i q = step_of(o, step);
            for (int i = 0; i < MG; ++i) {
              int32_t four;
              memcpy(&four, xq[i] + sb * 256 + 4 * step, 4);
              dot[i] = _mm512_dpbusd_epi32(dot[i], q, _mm512_set1_epi32(four));
            }
          }
#if NOSCALE
          for (int i = 0; i < MG; ++i) isum[i] = _mm512_add_epi32(isum[i], dot[i]);
#elif OLD
          for (int i = 0; i < MG; ++i) isum[i] = _mm512_dpwssd_epi32(isum[i], dot[i], sc16);
#else
          for (int i = 0; i < MG; ++i)
            if (half == 0)
              first[i] = dot[i];
            else
              isum[i] = _mm512_dpwssd_epi32(
                  isum[i], _mm512_mask_blend_epi16(0x55555555u, _mm512_slli_epi32(dot[i], 16), first[i]), sc);
#endif
        }
      }
      __m256i dh;
      memcpy(&dh, o, 32);
      const __m512 d = _mm512_cvtph_ps(dh);
      for (int i = 0; i < MG; ++i)
        _mm512_store_ps(total[i], _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(xd[i][sb]), d),
                                                  _mm512_cvtepi32_ps(isum[i]), _mm512_load_ps(total[i])));
    }
    for (int i = 0; i < MG; ++i) _mm512_storeu_ps(out + i * N + 16 * g, _mm512_load_ps(total[i]));
  }
}
int main(int argc, char** argv) {
  const long N = argc > 1 ? atol(argv[1]) : 8960, K = 1536, sbs = K / 256;
  uint8_t* w = aligned_alloc(64, N / 16 * sbs * GB + 4096);
  for (long i = 0; i < N / 16 * sbs * GB + 4096; i++) w[i] = rand();
  int8_t* xq[MG];
  float* xd[MG];
  for (int i = 0; i < MG; i++) {
    xq[i] = malloc(K);
    xd[i] = malloc(sbs * 4);
    for (int k = 0; k < K; k++) xq[i][k] = rand() % 255 - 127;
    for (int s = 0; s < sbs; s++) xd[i][s] = 0.01f;
  }
  int32_t* off = malloc(K * 4 * 8);
  for (long i = 0; i < K * 8; i++) off[i] = -(rand() % 30000);
  float* out = malloc(MG * N * 4);
  double best = 1e9;
  for (int r = 0; r < 30; r++) {
    double t = now();
    rows((const int8_t* const*)xq, (const float* const*)xd, off, w, sbs, out, N, 0, N / 16);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("%.0f us, %.1f cycles/iteration at 3.67 GHz (check %f)\n", best * 1e6, best * 3.67e9 / (N / 16 * sbs * 16),
         out[5]);
  return 0;
}
