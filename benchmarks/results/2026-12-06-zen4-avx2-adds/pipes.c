// Throughput of AVX2 integer ops alone and in pairs with vpmaddubsw: 12 independent chains, so only the issue rate
// counts. Which ops share vpmaddubsw's pipes shows as a pair taking 1 cycle (2 a cycle on those pipes) instead of
// ~0.5.   gcc -O2 -mavx2 pipes.c -o pipes && ./pipes [GHz]
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define KEEP(a) __asm__ volatile("" ::"x"(a[0]), "x"(a[1]), "x"(a[2]), "x"(a[3]), "x"(a[4]), "x"(a[5]), "x"(a[6]), \
                                 "x"(a[7]), "x"(a[8]), "x"(a[9]), "x"(a[10]), "x"(a[11]))
#define ALONE(NAME, OP)                                                                 \
  {                                                                                     \
    __m256i a[12];                                                                      \
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi8(i + 1);                        \
    double t = now();                                                                   \
    for (long n = 0; n < N; n++) {                                                      \
      _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = OP;                  \
      KEEP(a);                                                                          \
    }                                                                                   \
    printf("%-16s %.2f cycles an op\n", NAME, (now() - t) / N / 12 * ghz * 1e9);        \
  }
#define PAIR(NAME, OP1, OP2)                                                            \
  {                                                                                     \
    __m256i a[12];                                                                      \
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi8(i + 1);                        \
    double t = now();                                                                   \
    for (long n = 0; n < N; n++) {                                                      \
      _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {                             \
        a[i] = OP1;                                                                     \
        a[i + 6] = OP2;                                                                 \
      }                                                                                 \
      KEEP(a);                                                                          \
    }                                                                                   \
    printf("%-16s %.2f cycles a pair\n", NAME, (now() - t) / N / 6 * ghz * 1e9);        \
  }

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? atof(argv[1]) : 3.67;
  const long N = 100000000;
  const __m256i w = _mm256_set1_epi8(3);
  ALONE("vpmaddubsw", _mm256_maddubs_epi16(a[i], w));
  ALONE("vpmaddwd", _mm256_madd_epi16(a[i], w));
  ALONE("vpaddsw", _mm256_adds_epi16(a[i], w));
  ALONE("vpaddw", _mm256_add_epi16(a[i], w));
  ALONE("vpaddd", _mm256_add_epi32(a[i], w));
  ALONE("vpand", _mm256_and_si256(a[i], w));
  ALONE("vpsrlw", _mm256_srli_epi16(a[i], 4));
  PAIR("maddubs+paddsw", _mm256_maddubs_epi16(a[i], w), _mm256_adds_epi16(a[i + 6], w));
  PAIR("maddubs+paddw", _mm256_maddubs_epi16(a[i], w), _mm256_add_epi16(a[i + 6], w));
  PAIR("maddubs+madd", _mm256_maddubs_epi16(a[i], w), _mm256_madd_epi16(a[i + 6], w));
  PAIR("maddubs+paddd", _mm256_maddubs_epi16(a[i], w), _mm256_add_epi32(a[i + 6], w));
  PAIR("maddubs+pand", _mm256_maddubs_epi16(a[i], w), _mm256_and_si256(a[i + 6], w));
  PAIR("maddubs+psrlw", _mm256_maddubs_epi16(a[i], w), _mm256_srli_epi16(a[i + 6], 4));
  return 0;
}
