// Mask-register loads (kmovq, from a register or from memory) and masked byte adds beside vpdpbusd zmm: whether they
// take issue slots the multiplies need (8 accumulators; cycles at 3.67 GHz).
//   gcc -O2 -march=native kmov.c -o kmov && ./kmov
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
uint64_t mem[64] __attribute__((aligned(64)));
#define RUN(NAME, BODY)                                                          \
  {                                                                              \
    double t = now();                                                            \
    for (long n = 0; n < N; n++) {                                               \
      BODY;                                                                      \
    }                                                                            \
    printf("%-40s %.2f cycles per iteration\n", NAME, (now() - t) / N * 3.67e9); \
  }
int main() {
  const long N = 50000000;
  for (int i = 0; i < 64; i++) mem[i] = 0x5555555555555555ULL * (i + 1);
  __m512i w = _mm512_set1_epi8(3), s = _mm512_set1_epi8(16);
  __m512i a0 = w, a1 = w, a2 = w, a3 = w, a4 = w, a5 = w, a6 = w, a7 = w, b0 = w, b1 = w;
#define DP(r) __asm__ volatile("vpdpbusd %1, %1, %0" : "+v"(r) : "v"(w))
#define MADD(r, k)                        \
  {                                       \
    __mmask64 m;                          \
    memcpy(&m, &mem[k], 8);               \
    __asm__ volatile("" : "+m"(mem[k]));  \
    r = _mm512_mask_add_epi8(r, m, r, s); \
    __asm__ volatile("" ::"v"(r));        \
  }
  RUN("8 dpbusd", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7));
  RUN("2 kmov+masked add", MADD(b0, 0); MADD(b1, 1));
  RUN("8 dpbusd + 2 kmov+masked add", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); MADD(b0, 0);
      MADD(b1, 1));
  RUN("4 dpbusd + 2 kmov+masked add", DP(a0); DP(a1); DP(a2); DP(a3); MADD(b0, 0); MADD(b1, 1));
  RUN("2 dpbusd + 2 kmov+masked add", DP(a0); DP(a1); MADD(b0, 0); MADD(b1, 1));
#define KM(k)                                                   \
  {                                                             \
    __mmask64 m;                                                \
    memcpy(&m, &mem[k], 8);                                     \
    __asm__ volatile("" : "+m"(mem[k]));                        \
    __asm__ volatile("kmovq %1, %%k3" ::"r"(m), "r"(m) : "k3"); \
  }
#define KMM(k) \
  { __asm__ volatile("kmovq %0, %%k3" ::"m"(mem[k]) : "k3"); }
#define MA(r) \
  { __asm__ volatile("vpaddb %1, %0, %0%{%%k2%}" : "+v"(r) : "v"(s)); }
#define BL(r) \
  { __asm__ volatile("vpblendmb %1, %0, %0%{%%k2%}" : "+v"(r) : "v"(s)); }
#define ORM(r) \
  { __asm__ volatile("vpord %1, %0, %0" : "+v"(r) : "v"(s)); }
  RUN("8 dpbusd + 2 kmov from gpr", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); KM(0); KM(1));
  RUN("8 dpbusd + 2 kmov from mem", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); KMM(0); KMM(1));
  RUN("8 dpbusd + 2 masked vpaddb", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); MA(b0); MA(b1));
  RUN("8 dpbusd + 4 masked vpaddb", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); MA(b0); MA(b1);
      MA(b0); MA(b1));
  RUN("8 dpbusd + 4 vpord", DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7); ORM(b0); ORM(b1); ORM(b0);
      ORM(b1));
  __asm__ volatile("" ::"v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5), "v"(a6), "v"(a7), "v"(b0), "v"(b1));
  return 0;
}
