// Zen 5 probe (2026-12-04): vpdpbusd zmm throughput with its s8 operand broadcast by the load ({1to16}) or by a
// separate vpbroadcastq. Build: g++ -O3 -mavx512f -mavx512bw -mavx512vnni -o vnni_broadcast vnni_broadcast.cpp
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#define ACC(i) __m512i a##i = _mm512_set1_epi32(i);
#define OP(i) asm("vpdpbusd %c2(%1)%{1to16%}, %3, %0" : "+v"(a##i) : "r"(p), "i"(8 * i), "v"(w));
#define OPB(i) { __m512i s; asm("vpbroadcastq %c1(%2), %0" : "=v"(s) : "i"(8 * i), "r"(p)); a##i = _mm512_dpbusd_epi32(a##i, w, s); }
template <int MODE>
__attribute__((noinline)) __m512i run(long n, __m512i w, const unsigned char* x) {
  ACC(0) ACC(1) ACC(2) ACC(3) ACC(4) ACC(5) ACC(6) ACC(7) ACC(8) ACC(9) ACC(10) ACC(11)
  for (long k = 0; k < n; ++k) {
    const unsigned char* p = x + (k & 31) * 96;
    if (MODE == 0) { OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11) }
    else { OPB(0) OPB(1) OPB(2) OPB(3) OPB(4) OPB(5) OPB(6) OPB(7) OPB(8) OPB(9) OPB(10) OPB(11) }
  }
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
         _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)),
                          _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11))));
}
int main() {
  alignas(64) static unsigned char x[4096];
  for (int i = 0; i < 4096; ++i) x[i] = i * 7;
  __m512i w = _mm512_set1_epi8(3);
  long n = 20000000;
  for (int rep = 0; rep < 3; ++rep) {
    double r[2];
    for (int m = 0; m < 2; ++m) {
      auto t0 = std::chrono::steady_clock::now();
      __m512i s = m == 0 ? run<0>(n, w, x) : run<1>(n, w, x);
      r[m] = 12.0 * n / std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      if (_mm512_reduce_add_epi32(s) == 12345) printf("!");
    }
    printf("vpdpbusd/ns: embedded {1to16} %.2f, vpbroadcastq + vpdpbusd %.2f\n", r[0], r[1]);
  }
}
