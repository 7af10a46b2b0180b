// Does independent vector ALU work (8 accumulators, no stores) overlap a unit's tile products? And 256-bit work?
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <initializer_list>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
struct TileConfig { uint8_t palette = 1, start_row = 0, reserved[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
#define TDP(c, a, b) asm volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")
alignas(64) uint8_t lo[4096], hi[4096], abuf[16][256], sink[1024];
alignas(64) int32_t cbuf[2][16][16];
template <class F> double per_iter(F f, int iters) {
  f(); auto t0 = std::chrono::steady_clock::now(); for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / iters;
}
template <int W> __attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void alu(int n) {
  __m512i a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i x = _mm512_load_si512(sink), y = _mm512_load_si512(sink + 64);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 8; ++i) {
      if (W == 0) a[i] = _mm512_dpbusd_epi32(a[i], x, y);           // vpdpbusd
      else if (W == 1) a[i] = _mm512_add_epi32(_mm512_xor_si512(a[i], x), y);   // simple ALU
      else a[i] = _mm512_permutexvar_epi32(x, a[i]);                 // p5 permute
    }
  for (int i = 0; i < 8; ++i) _mm512_store_si512(sink + 128 + 64 * (i % 4), a[i]);
}
inline void tiles() {
  asm volatile("tilezero %%tmm0\n tilezero %%tmm1" ::: "memory");
  for (int k = 0; k < 4; ++k) {
    asm volatile("tileloadd (%0,%1,1), %%tmm2" :: "r"(abuf[0] + 64 * k), "r"(256L) : "memory");
    asm volatile("tileloadd (%0,%1,1), %%tmm4" :: "r"(lo + 1024 * k), "r"(64L) : "memory");
    asm volatile("tileloadd (%0,%1,1), %%tmm5" :: "r"(hi + 1024 * k), "r"(64L) : "memory");
    TDP(0, 2, 4); TDP(1, 2, 5);
  }
  asm volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(cbuf[0]), "r"(64L) : "memory");
  asm volatile("tilestored %%tmm1, (%0,%1,1)" :: "r"(cbuf[1]), "r"(64L) : "memory");
}
int main() {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) { puts("no AMX permission"); return 1; }
  TileConfig c;
  for (int t = 0; t < 8; ++t) { c.rows[t] = 16; c.colsb[t] = 64; }
  asm volatile("ldtilecfg %0" :: "m"(c));
  const int N = 100000;
  const char* names[3] = {"vpdpbusd", "xor+add", "vpermd"};
  for (int n : {8, 16}) {
    double t = per_iter([] { tiles(); }, N);
    double v[3] = {per_iter([&] { alu<0>(n); }, N), per_iter([&] { alu<1>(n); }, N), per_iter([&] { alu<2>(n); }, N)};
    double both[3] = {per_iter([&] { tiles(); alu<0>(n); }, N), per_iter([&] { tiles(); alu<1>(n); }, N),
                      per_iter([&] { tiles(); alu<2>(n); }, N)};
    for (int w = 0; w < 3; ++w)
      printf("%d x 8 %s: alone %.1f ns, tiles alone %.1f, tiles then it %.1f (sum %.1f)\n", n, names[w], v[w], t, both[w], v[w] + t);
  }
  asm volatile("tilerelease" ::: "memory");
}
