// vpdpbusd zmm from registers, 10 independent chains: G instructions per second on one core.
// gcc -O2 vpdpbusd_peak.c && ./a.out
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
__attribute__((target("avx512f,avx512vnni,avx512bw")))
int main(){
  __m512i a=_mm512_set1_epi8(3), b=_mm512_set1_epi8(5);
  __m512i c0=_mm512_setzero_si512(),c1=c0,c2=c0,c3=c0,c4=c0,c5=c0,c6=c0,c7=c0,c8=c0,c9=c0;
  long n=200000000; struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long i=0;i<n;i++){
    __asm__ volatile("" : "+v"(a));
    c0=_mm512_dpbusd_epi32(c0,a,b);c1=_mm512_dpbusd_epi32(c1,a,b);c2=_mm512_dpbusd_epi32(c2,a,b);c3=_mm512_dpbusd_epi32(c3,a,b);c4=_mm512_dpbusd_epi32(c4,a,b);
    c5=_mm512_dpbusd_epi32(c5,a,b);c6=_mm512_dpbusd_epi32(c6,a,b);c7=_mm512_dpbusd_epi32(c7,a,b);c8=_mm512_dpbusd_epi32(c8,a,b);c9=_mm512_dpbusd_epi32(c9,a,b);}
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  __m512i c=_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0,c1),_mm512_add_epi32(c2,c3)),_mm512_add_epi32(_mm512_add_epi32(c4,c5),_mm512_add_epi32(c6,_mm512_add_epi32(c7,_mm512_add_epi32(c8,c9)))));
  printf("%.1f G vpdpbusd/s = %.0f GMAC/s (chk %d)\n", n*10/s/1e9, n*10*64/s/1e9, _mm512_reduce_add_epi32(c)&1);
}
