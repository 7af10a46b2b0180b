// vpdpbusd zmm where each waits on its own qword broadcast from memory, 16 chains: G per second on one core.
// gcc -O2 vpdpbusd_broadcast.c && ./a.out
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
static long long buf[4096];
__attribute__((target("avx512f,avx512vnni,avx512bw"),noinline))
double run(int mode){
  __m512i a=_mm512_set1_epi8(3), b=_mm512_set1_epi8(5);
  __m512i c0=_mm512_setzero_si512(),c1=c0,c2=c0,c3=c0,c4=c0,c5=c0,c6=c0,c7=c0,c8=c0,c9=c0,c10=c0,c11=c0,c12=c0,c13=c0,c14=c0,c15=c0;
  long n=50000000; struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  const long long* p=buf;
  for(long i=0;i<n;i++){
    __asm__ volatile("" : "+r"(p));
    #define B(k) (mode? _mm512_set1_epi64(p[k]) : b)
    c0=_mm512_dpbusd_epi32(c0,a,_mm512_set1_epi64(p[0]));c1=_mm512_dpbusd_epi32(c1,a,_mm512_set1_epi64(p[1]));
    c2=_mm512_dpbusd_epi32(c2,a,_mm512_set1_epi64(p[2]));c3=_mm512_dpbusd_epi32(c3,a,_mm512_set1_epi64(p[3]));
    c4=_mm512_dpbusd_epi32(c4,a,_mm512_set1_epi64(p[4]));c5=_mm512_dpbusd_epi32(c5,a,_mm512_set1_epi64(p[5]));
    c6=_mm512_dpbusd_epi32(c6,a,_mm512_set1_epi64(p[6]));c7=_mm512_dpbusd_epi32(c7,a,_mm512_set1_epi64(p[7]));
    c8=_mm512_dpbusd_epi32(c8,a,_mm512_set1_epi64(p[8]));c9=_mm512_dpbusd_epi32(c9,a,_mm512_set1_epi64(p[9]));
    c10=_mm512_dpbusd_epi32(c10,a,_mm512_set1_epi64(p[10]));c11=_mm512_dpbusd_epi32(c11,a,_mm512_set1_epi64(p[11]));
    c12=_mm512_dpbusd_epi32(c12,a,_mm512_set1_epi64(p[12]));c13=_mm512_dpbusd_epi32(c13,a,_mm512_set1_epi64(p[13]));
    c14=_mm512_dpbusd_epi32(c14,a,_mm512_set1_epi64(p[14]));c15=_mm512_dpbusd_epi32(c15,a,_mm512_set1_epi64(p[15]));
  }
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  __m512i c=_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0,c1),_mm512_add_epi32(c2,c3)),_mm512_add_epi32(_mm512_add_epi32(c4,c5),_mm512_add_epi32(c6,_mm512_add_epi32(c7,_mm512_add_epi32(c8,c9)))));
  c=_mm512_add_epi32(c,_mm512_add_epi32(_mm512_add_epi32(c10,c11),_mm512_add_epi32(_mm512_add_epi32(c12,c13),_mm512_add_epi32(c14,c15))));
  printf("chk %d ", _mm512_reduce_add_epi32(c)&1);
  return n*16/s/1e9;
}
int main(){ memset(buf,1,sizeof buf); printf("bcast+dpbusd: %.2f G/s\n", run(1)); }
