#include <chrono>
#include <cstdio>
#include <cstdint>
alignas(64) int8_t xs[4096];
#define DP8(src) "vpdpbusd " src ", %%zmm16, %%zmm0\n vpdpbusd " src ", %%zmm16, %%zmm1\n vpdpbusd " src ", %%zmm16, %%zmm2\n vpdpbusd " src ", %%zmm16, %%zmm3\n vpdpbusd " src ", %%zmm16, %%zmm4\n vpdpbusd " src ", %%zmm16, %%zmm5\n vpdpbusd " src ", %%zmm16, %%zmm6\n vpdpbusd " src ", %%zmm16, %%zmm7\n"
int main() {
  const long iters = 100'000'000;
  for (int rep = 0; rep < 2; ++rep) {
    auto time = [&](auto f, const char* name) {
      auto s = std::chrono::steady_clock::now(); f();
      double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - s).count();
      printf("%-36s %.3f ns per vpdpbusd\n", name, ns / (iters * 8.0));
    };
    time([&] { long n = iters; asm volatile("1:\n" DP8("%%zmm17") "dec %0\n jnz 1b\n" : "+r"(n) : "r"(xs) : "memory"); }, "register");
    time([&] { long n = iters; asm volatile("1:\n"
      "vpbroadcastq (%1), %%zmm20\n vpdpbusd %%zmm20, %%zmm16, %%zmm0\n vpbroadcastq 8(%1), %%zmm21\n vpdpbusd %%zmm21, %%zmm16, %%zmm1\n"
      "vpbroadcastq 16(%1), %%zmm22\n vpdpbusd %%zmm22, %%zmm16, %%zmm2\n vpbroadcastq 24(%1), %%zmm23\n vpdpbusd %%zmm23, %%zmm16, %%zmm3\n"
      "vpbroadcastq 32(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm16, %%zmm4\n vpbroadcastq 40(%1), %%zmm25\n vpdpbusd %%zmm25, %%zmm16, %%zmm5\n"
      "vpbroadcastq 48(%1), %%zmm26\n vpdpbusd %%zmm26, %%zmm16, %%zmm6\n vpbroadcastq 56(%1), %%zmm27\n vpdpbusd %%zmm27, %%zmm16, %%zmm7\n"
      "dec %0\n jnz 1b\n" : "+r"(n) : "r"(xs) : "memory"); }, "vpbroadcastq m64 + vpdpbusd");
    time([&] { long n = iters; asm volatile("1:\n"
      "vpdpbusd (%1)%{1to16%}, %%zmm16, %%zmm0\n vpdpbusd 4(%1)%{1to16%}, %%zmm16, %%zmm1\n vpdpbusd 8(%1)%{1to16%}, %%zmm16, %%zmm2\n vpdpbusd 12(%1)%{1to16%}, %%zmm16, %%zmm3\n"
      "vpdpbusd 16(%1)%{1to16%}, %%zmm16, %%zmm4\n vpdpbusd 20(%1)%{1to16%}, %%zmm16, %%zmm5\n vpdpbusd 24(%1)%{1to16%}, %%zmm16, %%zmm6\n vpdpbusd 28(%1)%{1to16%}, %%zmm16, %%zmm7\n"
      "dec %0\n jnz 1b\n" : "+r"(n) : "r"(xs) : "memory"); }, "vpdpbusd m32{1to16}");
    time([&] { long n = iters; asm volatile("1:\n" DP8("%%zmm17")
      "vpsrlw $4, %%zmm18, %%zmm19\n vpandd %%zmm18, %%zmm17, %%zmm28\n vpsrlw $4, %%zmm18, %%zmm29\n vpandd %%zmm18, %%zmm17, %%zmm30\n"
      "dec %0\n jnz 1b\n" : "+r"(n) : "r"(xs) : "memory"); }, "register + 4 shift/and");
    time([&] { long n = iters; asm volatile("1:\n" DP8("%%zmm17")
      "vpackssdw %%zmm18, %%zmm17, %%zmm19\n vpackssdw %%zmm18, %%zmm17, %%zmm28\n vpackssdw %%zmm18, %%zmm17, %%zmm29\n vpackssdw %%zmm18, %%zmm17, %%zmm30\n"
      "dec %0\n jnz 1b\n" : "+r"(n) : "r"(xs) : "memory"); }, "register + 4 vpackssdw");
    time([&] { long n = iters; asm volatile("1:\n" DP8("%%zmm17")
      "vpmullw %%zmm18, %%zmm17, %%zmm19\n vpmullw %%zmm18, %%zmm17, %%zmm28\n vpmullw %%zmm18, %%zmm17, %%zmm29\n vpmullw %%zmm18, %%zmm17, %%zmm30\n"
      "dec %0\n jnz 1b\n" : "+r"(n) : "r"(xs) : "memory"); }, "register + 4 vpmullw");
  }
}
