// Broadcasts from memory beside vpdpbusd zmm (8 accumulators): whether they take issue slots the multiplies need.
//   gcc -O2 -march=native broadcasts.c -o broadcasts && ./broadcasts    (cycles at 3.67 GHz)
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int64_t mem[64] __attribute__((aligned(64)));
#define RUN(NAME, BODY)                                                             \
  {                                                                                 \
    double t = now();                                                               \
    for (long n = 0; n < N; n++) {                                                  \
      BODY;                                                                         \
    }                                                                               \
    printf("%-28s %.2f cycles per iteration\n", NAME, (now() - t) / N * ghz * 1e9); \
  }
int main(int argc, char** argv) {
  const double ghz = 3.67;
  const long N = 100000000;
  const __m512i w = _mm512_set1_epi8(3);
  __m512i a0 = w, a1 = w, a2 = w, a3 = w, a4 = w, a5 = w, a6 = w, a7 = w;
  __m256i y0, y1, y2, y3, y4, y5, y6, y7;
#define BZ(r, k) __asm__ volatile("vpbroadcastq %1, %0" : "=v"(r) : "m"(mem[k]))
#define BY(r, k) __asm__ volatile("vpbroadcastq %1, %0" : "=x"(r) : "m"(mem[k]))
#define BD(r, k) __asm__ volatile("vpbroadcastd %1, %0" : "=v"(r) : "m"(mem[k]))
#define EMB(r, k) __asm__ volatile("vpdpbusd %1%{1to16%}, %2, %0" : "+v"(r) : "m"(*(int32_t*)&mem[k]), "v"(w))
#define DP(r) __asm__ volatile("vpdpbusd %1, %1, %0" : "+v"(r) : "v"(w))
  RUN("8 vpbroadcastq zmm", BZ(a0, 0); BZ(a1, 1); BZ(a2, 2); BZ(a3, 3); BZ(a4, 4); BZ(a5, 5); BZ(a6, 6); BZ(a7, 7));
  RUN("8 vpbroadcastd zmm", BD(a0, 0); BD(a1, 1); BD(a2, 2); BD(a3, 3); BD(a4, 4); BD(a5, 5); BD(a6, 6); BD(a7, 7));
  RUN("8 vpbroadcastq ymm", BY(y0, 0); BY(y1, 1); BY(y2, 2); BY(y3, 3); BY(y4, 4); BY(y5, 5); BY(y6, 6); BY(y7, 7));
  RUN("8 dpbusd zmm embedded bcast", EMB(a0, 0); EMB(a1, 1); EMB(a2, 2); EMB(a3, 3); EMB(a4, 4); EMB(a5, 5); EMB(a6, 6);
      EMB(a7, 7));
  RUN("8 dpbusd zmm reg", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7));
#define DPB(r, k)                                                       \
  {                                                                     \
    __m512i b;                                                          \
    BZ(b, k);                                                           \
    __asm__ volatile("vpdpbusd %1, %2, %0" : "+v"(r) : "v"(b), "v"(w)); \
  }
  __m512i b0, b1, b2, b3;
  RUN("8 dpbusd + 8 bcast", DPB(a0, 0); DPB(a1, 1); DPB(a2, 2); DPB(a3, 3); DPB(a4, 4); DPB(a5, 5); DPB(a6, 6);
      DPB(a7, 7));
  RUN("8 dpbusd + 12 bcast", DPB(a0, 0); DPB(a1, 1); DPB(a2, 2); DPB(a3, 3); DPB(a4, 4); DPB(a5, 5); DPB(a6, 6);
      DPB(a7, 7); BZ(b0, 8); BZ(b1, 9); BZ(b2, 10); BZ(b3, 11));
  RUN("8 dpbusd + 16 bcast", DPB(a0, 0); DPB(a1, 1); DPB(a2, 2); DPB(a3, 3); DPB(a4, 4); DPB(a5, 5); DPB(a6, 6);
      DPB(a7, 7); BZ(b0, 8); BZ(b1, 9); BZ(b2, 10); BZ(b3, 11); BZ(b0, 12); BZ(b1, 13); BZ(b2, 14); BZ(b3, 15));
  __asm__ volatile("" ::"v"(b0), "v"(b1), "v"(b2), "v"(b3));
  __asm__ volatile("" ::"v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5), "v"(a6), "v"(a7), "x"(y0), "x"(y1),
                   "x"(y2), "x"(y3), "x"(y4), "x"(y5), "x"(y6), "x"(y7));
  return 0;
}
