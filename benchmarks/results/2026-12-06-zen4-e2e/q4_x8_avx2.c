// Standalone copy of AVX2's x8_rows<MG> (Q4_K_X8) on random bytes, 8960 x 1536, 8 rows. Variants: -DREGSUM (sums
// in registers), -DBARRIER (a compiler barrier per sub-block), -DTREE (adds without add_in_order), and -DNODECODE /
// -DNOBCAST / -DNOSCALE (parts taken out: timing only).
//   gcc -O3 -mavx2 -mfma -mf16c [-DMG=2] [variants] q4_x8_avx2.c -o q4 && ./q4 [ROWS]
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
#define GB 1184
#ifndef MG
#define MG 4
#endif
static inline __m256i load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }
static inline __m128i load8(const void* p) { return _mm_loadl_epi64((const __m128i*)p); }
static inline __m128i load16(const void* p) { return _mm_loadu_si128((const __m128i*)p); }
static inline __m256i add_in_order(__m256i a, __m256i b) {
  __m256i s = _mm256_add_epi16(a, b);
  __asm__("" : "+v"(s));
  return s;
}
static inline __m256i scales4(__m128i s, int half) {
  const __m128i spread = _mm_shuffle_epi8(s, half ? _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)
                                                  : _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  return _mm256_cvtepu8_epi16(spread);
}
typedef struct {
  const int8_t* q;
  const float* d;
  const int16_t* sums32;
} Row;
__attribute__((noinline)) void rows(const Row* x, const uint8_t* w, long superblocks, float* out, long N, long g0,
                                    long g1) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i in_order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (long g = g0; g < g1; ++g) {
    float total[MG][8] __attribute__((aligned(32))), mins[MG][8] __attribute__((aligned(32)));
    for (int i = 0; i < MG; ++i)
      for (int r = 0; r < 8; ++r) total[i][r] = mins[i][r] = 0.f;
    for (long sb = 0; sb < superblocks; ++sb) {
      const uint8_t* o = w + (g * superblocks + sb) * GB;
      const char* ahead = (const char*)(o + 8 * GB);
#if REGSUM
      __m256i isa[MG], isb[MG];
      for (int i = 0; i < MG; ++i) isa[i] = isb[i] = _mm256_setzero_si256();
#else
      int32_t isum[MG][2][8] __attribute__((aligned(32)));
      for (int i = 0; i < MG; ++i)
        for (int h = 0; h < 2; ++h) _mm256_store_si256((__m256i*)isum[i][h], _mm256_setzero_si256());
#endif
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int p = j / 2;
#if BARRIER
        __asm__ volatile("" ::: "memory");
#endif
        __m256i dot_a[MG], dot_b[MG];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const uint8_t* qs = o + 160 + 256 * p + 64 * c;
          __m256i wa = load32(qs), wb = load32(qs + 32);
          if (j % 2) {
            wa = _mm256_srli_epi16(wa, 4);
            wb = _mm256_srli_epi16(wb, 4);
          } else {
            const int line = 4 * p + c;
            _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
            if (line < 3) _mm_prefetch(ahead + 64 * (line + 16), _MM_HINT_T0);
          }
#if !NODECODE
          wa = _mm256_and_si256(wa, low4);
          wb = _mm256_and_si256(wb, low4);
#endif
#pragma GCC unroll 4
          for (int i = 0; i < MG; ++i) {
            int64_t in;
            memcpy(&in, x[i].q + sb * 256 + 32 * j + 8 * c, 8);
#if NOBCAST
            const __m256i xb = _mm256_set1_epi64x(0x0102030405060708LL * (i + 1));
#else
            const __m256i xb = _mm256_set1_epi64x(in);
#endif
            const __m256i pa = _mm256_maddubs_epi16(wa, xb), pb = _mm256_maddubs_epi16(wb, xb);
#if TREE
            dot_a[i] = c ? _mm256_add_epi16(dot_a[i], pa) : pa;
            dot_b[i] = c ? _mm256_add_epi16(dot_b[i], pb) : pb;
#else
            dot_a[i] = c ? add_in_order(dot_a[i], pa) : pa;
            dot_b[i] = c ? add_in_order(dot_b[i], pb) : pb;
#endif
          }
        }
        const __m128i s = load8(o + 32 + 8 * j);
        const __m256i sc_a = scales4(s, 0), sc_b = scales4(s, 1);
#pragma GCC unroll 4
        for (int i = 0; i < MG; ++i) {
#if REGSUM
#if NOSCALE
          isa[i] = _mm256_add_epi32(isa[i], dot_a[i]);
          isb[i] = _mm256_add_epi32(isb[i], dot_b[i]);
#else
          isa[i] = _mm256_add_epi32(isa[i], _mm256_madd_epi16(dot_a[i], sc_a));
          isb[i] = _mm256_add_epi32(isb[i], _mm256_madd_epi16(dot_b[i], sc_b));
#endif
#else
          __m256i* ia = (__m256i*)isum[i][0];
          __m256i* ib = (__m256i*)isum[i][1];
          _mm256_store_si256(ia, _mm256_add_epi32(_mm256_load_si256(ia), _mm256_madd_epi16(dot_a[i], sc_a)));
          _mm256_store_si256(ib, _mm256_add_epi32(_mm256_load_si256(ib), _mm256_madd_epi16(dot_b[i], sc_b)));
#endif
        }
      }
      const __m256 d = _mm256_cvtph_ps(load16(o)), dmin = _mm256_cvtph_ps(load16(o + 16));
      for (int i = 0; i < MG; ++i) {
#if REGSUM
        const __m256i isum8 = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(isa[i], isb[i]), in_order);
#else
        const __m256i isum8 =
            _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(_mm256_load_si256((const __m256i*)isum[i][0]),
                                                          _mm256_load_si256((const __m256i*)isum[i][1])),
                                        in_order);
#endif
        __m256i msum = _mm256_setzero_si256();
        for (int q = 0; q < 4; ++q) {
          int32_t pair;
          memcpy(&pair, x[i].sums32 + sb * 8 + 2 * q, 4);
          msum = _mm256_add_epi32(
              msum, _mm256_madd_epi16(_mm256_cvtepu8_epi16(load16(o + 96 + 16 * q)), _mm256_set1_epi32(pair)));
        }
        const __m256 dx = _mm256_set1_ps(x[i].d[sb]);
        _mm256_store_ps(total[i],
                        _mm256_fmadd_ps(_mm256_mul_ps(dx, d), _mm256_cvtepi32_ps(isum8), _mm256_load_ps(total[i])));
        _mm256_store_ps(mins[i],
                        _mm256_fmadd_ps(_mm256_mul_ps(dx, dmin), _mm256_cvtepi32_ps(msum), _mm256_load_ps(mins[i])));
      }
    }
    for (int i = 0; i < MG; ++i)
      _mm256_storeu_ps(out + i * N + 8 * g, _mm256_sub_ps(_mm256_load_ps(total[i]), _mm256_load_ps(mins[i])));
  }
}
int main(int argc, char** argv) {
  const long N = argc > 1 ? atol(argv[1]) : 8960, K = 1536, sbs = K / 256;
  const long bytes = N / 8 * sbs * GB + 65536;
  uint8_t* w = aligned_alloc(64, bytes);
  for (long i = 0; i < bytes; i++) w[i] = rand();
  Row x[8];
  for (int i = 0; i < 8; i++) {
    int8_t* q = malloc(K);
    float* d = malloc(sbs * 4);
    int16_t* s = malloc(K / 32 * 2);
    for (int k = 0; k < K; k++) q[k] = rand() % 255 - 127;
    for (int t = 0; t < sbs; t++) d[t] = 0.01f;
    for (int t = 0; t < K / 32; t++) s[t] = rand() % 2000;
    x[i].q = q;
    x[i].d = d;
    x[i].sums32 = s;
  }
  float* out = malloc(8 * N * 4);
  double best = 1e9;
  for (int r = 0; r < 30; r++) {
    double t = now();
    for (int m = 0; m < 8; m += MG) rows(x + m, w, sbs, out + m * N, N, 0, N / 8);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("MG %d: 8 rows %.0f us, %.1f cycles a sub-block and 4 inputs (check %f)\n", MG, best * 1e6,
         best * 3.67e9 / (N / 8 * sbs * 8 * (8 / MG)) * (4.0 / MG), out[5]);
  return 0;
}
