// TMUL latency / throughput probe: chains of tdpbsud on C tiles, A and B loaded once.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <sys/syscall.h>
#include <unistd.h>
#include <initializer_list>
struct TileConfig { uint8_t palette = 1, start_row = 0, reserved[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
#define TDP(c, a, b) asm volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")
alignas(64) uint8_t buf[16][64];
alignas(64) int32_t cbuf[8][16][16];
template <class F> double per_iter(F f, int iters) {
  f(); auto t0 = std::chrono::steady_clock::now(); for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / iters;
}
int main(int argc, char** argv) {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) { puts("no AMX permission"); return 1; }
  for (int R : {1, 4, 8, 16}) {
    TileConfig c;
    for (int t = 0; t < 8; ++t) { c.rows[t] = t >= 4 && t < 6 ? R : 16; c.colsb[t] = 64; }
    // tmm0-3: C (R x 16 int32), tmm4,5: A (R x 64 B), tmm6,7: B (16 x 64 B)
    for (int t = 0; t < 4; ++t) c.rows[t] = R;
    asm volatile("ldtilecfg %0" :: "m"(c));
    asm volatile("tileloadd (%0,%1,1), %%tmm4" :: "r"(buf), "r"(64L) : "memory");
    asm volatile("tileloadd (%0,%1,1), %%tmm5" :: "r"(buf), "r"(64L) : "memory");
    asm volatile("tileloadd (%0,%1,1), %%tmm6" :: "r"(buf), "r"(64L) : "memory");
    asm volatile("tileloadd (%0,%1,1), %%tmm7" :: "r"(buf), "r"(64L) : "memory");
    const int N = 200000;
    double one = per_iter([] { TDP(0, 4, 6); TDP(0, 4, 6); TDP(0, 4, 6); TDP(0, 4, 6); }, N) / 4;
    double two = per_iter([] { TDP(0, 4, 6); TDP(1, 4, 7); TDP(0, 4, 6); TDP(1, 4, 7); }, N) / 4;
    double four = per_iter([] { TDP(0, 4, 6); TDP(1, 4, 7); TDP(2, 5, 6); TDP(3, 5, 7); }, N) / 4;
    // the kernel's unit shape: zero two C, 4 chunks x (load A, load B lo, hi; 2 TDP), store two C
    double unit = per_iter([] {
      asm volatile("tilezero %%tmm0\n tilezero %%tmm1" ::: "memory");
      for (int k = 0; k < 4; ++k) {
        asm volatile("tileloadd (%0,%1,1), %%tmm4" :: "r"(buf), "r"(64L) : "memory");
        asm volatile("tileloadd (%0,%1,1), %%tmm6" :: "r"(buf), "r"(64L) : "memory");
        asm volatile("tileloadd (%0,%1,1), %%tmm7" :: "r"(buf), "r"(64L) : "memory");
        TDP(0, 4, 6); TDP(1, 4, 7);
      }
      asm volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(cbuf[0]), "r"(64L) : "memory");
      asm volatile("tilestored %%tmm1, (%0,%1,1)" :: "r"(cbuf[1]), "r"(64L) : "memory");
    }, N);
    // two units interleaved on four C tiles (no loads): the chains' overlap bound
    double unit2 = per_iter([] {
      asm volatile("tilezero %%tmm0\n tilezero %%tmm1\n tilezero %%tmm2\n tilezero %%tmm3" ::: "memory");
      for (int k = 0; k < 4; ++k) { TDP(0, 4, 6); TDP(1, 4, 7); TDP(2, 5, 6); TDP(3, 5, 7); }
      asm volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(cbuf[0]), "r"(64L) : "memory");
      asm volatile("tilestored %%tmm1, (%0,%1,1)" :: "r"(cbuf[1]), "r"(64L) : "memory");
      asm volatile("tilestored %%tmm2, (%0,%1,1)" :: "r"(cbuf[2]), "r"(64L) : "memory");
      asm volatile("tilestored %%tmm3, (%0,%1,1)" :: "r"(cbuf[3]), "r"(64L) : "memory");
    }, N) / 2;
    // one unit without loads (zero, 8 TDP on two chains, store): its tile latency alone
    double unit_noload = per_iter([] {
      asm volatile("tilezero %%tmm0\n tilezero %%tmm1" ::: "memory");
      for (int k = 0; k < 4; ++k) { TDP(0, 4, 6); TDP(1, 4, 7); }
      asm volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(cbuf[0]), "r"(64L) : "memory");
      asm volatile("tilestored %%tmm1, (%0,%1,1)" :: "r"(cbuf[1]), "r"(64L) : "memory");
    }, N);
    // store then read back by vector loads (the epilogue's dependency)
    double store_read = per_iter([] {
      asm volatile("tilezero %%tmm0" ::: "memory");
      TDP(0, 4, 6);
      asm volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(cbuf[0]), "r"(64L) : "memory");
      volatile int32_t s = cbuf[0][0][0] + cbuf[0][15][15]; (void)s;
    }, N);
    printf("R=%2d ns per TDP: one chain %.2f, two chains %.2f, four chains %.2f | unit (loads, 8 TDP, 2 stores) %.1f ns,"
           " no loads %.1f, two units on 4 C %.1f per unit | zero+TDP+store+read %.1f\n",
           R, one, two, four, unit, unit_noload, unit2, store_read);
    asm volatile("tilerelease" ::: "memory");
  }
}
