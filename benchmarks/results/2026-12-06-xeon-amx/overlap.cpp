// Does vector work overlap a unit's tile work?  vector: V rounds of (load, permute, 2 mullo, 2 stores) into 8 KB.
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <initializer_list>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
struct TileConfig { uint8_t palette = 1, start_row = 0, reserved[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
#define TDP(c, a, b) asm volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")
alignas(64) uint8_t src[4096], lo[2][4096], hi[2][4096], abuf[16][256];
alignas(64) int32_t cbuf[2][16][16];
template <class F> double per_iter(F f, int iters) {
  f(); auto t0 = std::chrono::steady_clock::now(); for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / iters;
}
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void vec_part(int slot, int part, int parts) {
  const __m512i idx = _mm512_set1_epi8(3), m = _mm512_set1_epi16(7); __m512i acc = _mm512_setzero_si512();
  for (int r = 64 / parts * part; r < 64 / parts * (part + 1); ++r) {
    __m512i z = _mm512_load_si512(src + 64 * (r % 64));
    __m512i v = _mm512_permutexvar_epi8(idx, z);
#ifdef NOMUL
    _mm512_store_si512(lo[slot] + 64 * r, _mm512_permutexvar_epi8(m, v));
    _mm512_store_si512(hi[slot] + 64 * r, _mm512_permutexvar_epi8(idx, v));
#elif defined(NOSTORE)
    acc = _mm512_add_epi16(acc, _mm512_mullo_epi16(v, m)); acc = _mm512_add_epi16(acc, _mm512_mullo_epi16(_mm512_srli_epi16(v, 4), m));
#else
    _mm512_store_si512(lo[slot] + 64 * r, _mm512_mullo_epi16(v, m));
    _mm512_store_si512(hi[slot] + 64 * r, _mm512_mullo_epi16(_mm512_srli_epi16(v, 4), m));
#endif
  }
  _mm512_store_si512(src + 64 * slot, _mm512_xor_si512(acc, _mm512_load_si512(src + 64 * slot)));
}
inline void chunk(int slot, int k) {
  asm volatile("tileloadd (%0,%1,1), %%tmm2" :: "r"(abuf[0] + 64 * k), "r"(256L) : "memory");
  asm volatile("tileloadd (%0,%1,1), %%tmm4" :: "r"(lo[slot] + 1024 * k), "r"(64L) : "memory");
  asm volatile("tileloadd (%0,%1,1), %%tmm5" :: "r"(hi[slot] + 1024 * k), "r"(64L) : "memory");
  TDP(0, 2, 4); TDP(1, 2, 5);
}
inline void zero() { asm volatile("tilezero %%tmm0\n tilezero %%tmm1" ::: "memory"); }
inline void store(int s) {
  asm volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(cbuf[0]), "r"(64L) : "memory");
  asm volatile("tilestored %%tmm1, (%0,%1,1)" :: "r"(cbuf[1]), "r"(64L) : "memory");
}
int main() {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) { puts("no AMX permission"); return 1; }
  for (int R : {1, 8, 16}) {
    TileConfig c;
    for (int t = 0; t < 8; ++t) { c.rows[t] = 16; c.colsb[t] = 64; }
    c.rows[0] = c.rows[1] = c.rows[2] = c.rows[3] = R;
    asm volatile("ldtilecfg %0" :: "m"(c));
    const int N = 100000;
    double vec = per_iter([] { vec_part(0, 0, 1); }, N);
    double tiles = per_iter([] { zero(); for (int k = 0; k < 4; ++k) chunk(1, k); store(0); }, N);
    int it = 0;
    double seq = per_iter([&] { int s = it++ & 1; zero(); for (int k = 0; k < 4; ++k) chunk(s, k); store(0); vec_part(s ^ 1, 0, 1); }, N);
    double seq_late = per_iter([&] { int s = it++ & 1; zero(); for (int k = 0; k < 4; ++k) chunk(s, k); vec_part(s ^ 1, 0, 1); store(0); }, N);
    double inter = per_iter([&] { int s = it++ & 1; zero(); for (int k = 0; k < 4; ++k) { chunk(s, k); vec_part(s ^ 1, k, 4); } store(0); }, N);
    printf("R=%2d ns: vector %.1f, tiles %.1f, tiles then vector %.1f, vector before the store %.1f, interleaved per chunk %.1f\n",
           R, vec, tiles, seq, seq_late, inter);
    asm volatile("tilerelease" ::: "memory");
  }
}
