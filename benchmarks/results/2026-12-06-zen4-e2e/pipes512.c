// Throughput of 512-bit ops alone and in pairs with vpdpbusd zmm: 12 independent chains, so only the issue rate
// counts. An op that shares vpdpbusd's pipes shows as a pair taking 2 cycles instead of ~1.
//   gcc -O2 -march=native pipes512.c -o pipes512 && ./pipes512 [GHz]    (cycles at 3.67 GHz unless given)
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
#define KEEP(a)                                                                                                 \
  __asm__ volatile("" ::"v"(a[0]), "v"(a[1]), "v"(a[2]), "v"(a[3]), "v"(a[4]), "v"(a[5]), "v"(a[6]), "v"(a[7]), \
                   "v"(a[8]), "v"(a[9]), "v"(a[10]), "v"(a[11]))
#define ALONE(NAME, OP)                                                          \
  {                                                                              \
    __m512i a[12];                                                               \
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi8(i + 1);                 \
    double t = now();                                                            \
    for (long n = 0; n < N; n++) {                                               \
      _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = OP;           \
      KEEP(a);                                                                   \
    }                                                                            \
    printf("%-20s %.2f cycles an op\n", NAME, (now() - t) / N / 12 * ghz * 1e9); \
  }
#define PAIR(NAME, OP1, OP2)                                                     \
  {                                                                              \
    __m512i a[12];                                                               \
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi8(i + 1);                 \
    double t = now();                                                            \
    for (long n = 0; n < N; n++) {                                               \
      _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {                      \
        a[i] = OP1;                                                              \
        a[i + 6] = OP2;                                                          \
      }                                                                          \
      KEEP(a);                                                                   \
    }                                                                            \
    printf("%-20s %.2f cycles a pair\n", NAME, (now() - t) / N / 6 * ghz * 1e9); \
  }
int main(int argc, char** argv) {
  const double ghz = argc > 1 ? atof(argv[1]) : 3.67;
  const long N = 50000000;
  const __m512i w = _mm512_set1_epi8(3), idx = _mm512_set1_epi8(5);
  ALONE("vpdpbusd", _mm512_dpbusd_epi32(a[i], w, w));
  ALONE("vpdpwssd", _mm512_dpwssd_epi32(a[i], w, w));
  ALONE("vpmulld", _mm512_mullo_epi32(a[i], w));
  ALONE("vpslld", _mm512_slli_epi32(a[i], 16));
  ALONE("vpblendmw", _mm512_mask_blend_epi16(0x55555555u, a[i], w));
  ALONE("vpaddd", _mm512_add_epi32(a[i], w));
  ALONE("vpermb", _mm512_permutexvar_epi8(idx, a[i]));
  ALONE("vpmultishiftqb", _mm512_multishift_epi64_epi8(w, a[i]));
  ALONE("vpshldd", _mm512_shldi_epi32(a[i], w, 16));
  PAIR("dpbusd+dpwssd", _mm512_dpbusd_epi32(a[i], w, w), _mm512_dpwssd_epi32(a[i + 6], w, w));
  PAIR("dpbusd+pslld", _mm512_dpbusd_epi32(a[i], w, w), _mm512_slli_epi32(a[i + 6], 16));
  PAIR("dpbusd+blendmw", _mm512_dpbusd_epi32(a[i], w, w), _mm512_mask_blend_epi16(0x55555555u, a[i + 6], w));
  PAIR("dpbusd+paddd", _mm512_dpbusd_epi32(a[i], w, w), _mm512_add_epi32(a[i + 6], w));
  PAIR("dpbusd+pmulld", _mm512_dpbusd_epi32(a[i], w, w), _mm512_mullo_epi32(a[i + 6], w));
  PAIR("dpbusd+vpermb", _mm512_dpbusd_epi32(a[i], w, w), _mm512_permutexvar_epi8(idx, a[i + 6]));
  PAIR("dpbusd+multishift", _mm512_dpbusd_epi32(a[i], w, w), _mm512_multishift_epi64_epi8(w, a[i + 6]));
  PAIR("dpbusd+pshldd", _mm512_dpbusd_epi32(a[i], w, w), _mm512_shldi_epi32(a[i + 6], w, 16));
  PAIR("dpbusd+pandd", _mm512_dpbusd_epi32(a[i], w, w), _mm512_and_si512(a[i + 6], w));
  ALONE("vpslldq", _mm512_bslli_epi128(a[i], 2));
  ALONE("vpshufb", _mm512_shuffle_epi8(a[i], idx));
  PAIR("dpbusd+pslldq", _mm512_dpbusd_epi32(a[i], w, w), _mm512_bslli_epi128(a[i + 6], 2));
  PAIR("dpbusd+pshufb", _mm512_dpbusd_epi32(a[i], w, w), _mm512_shuffle_epi8(a[i + 6], idx));
  PAIR("dpbusd+psllq", _mm512_dpbusd_epi32(a[i], w, w), _mm512_slli_epi64(a[i + 6], 16));
  const __m512i cnt = _mm512_setr_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  ALONE("vpsllvq", _mm512_sllv_epi64(a[i], cnt));
  PAIR("dpbusd+psllvq", _mm512_dpbusd_epi32(a[i], w, w), _mm512_sllv_epi64(a[i + 6], cnt));
  PAIR("dpbusd+psrlw", _mm512_dpbusd_epi32(a[i], w, w), _mm512_srli_epi16(a[i + 6], 4));
  PAIR("dpbusd+pord", _mm512_dpbusd_epi32(a[i], w, w), _mm512_or_si512(a[i + 6], w));
  PAIR("dpbusd+fma", _mm512_dpbusd_epi32(a[i], w, w),
       _mm512_castps_si512(
           _mm512_fmadd_ps(_mm512_castsi512_ps(a[i + 6]), _mm512_castsi512_ps(w), _mm512_castsi512_ps(w))));
  PAIR("dpbusd+mulps", _mm512_dpbusd_epi32(a[i], w, w),
       _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(a[i + 6]), _mm512_castsi512_ps(w))));
  PAIR("dpbusd+cvtdq2ps", _mm512_dpbusd_epi32(a[i], w, w), _mm512_castps_si512(_mm512_cvtepi32_ps(a[i + 6])));
  return 0;
}
