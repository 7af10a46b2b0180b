// The CPU's peak rate of three instructions, twelve independent accumulators each (no memory in the loop):
// zmm vfmadd231ps, zmm vpdpbusd, ymm vfmadd231ps. Build and run with NT threads:
//   gcc -O3 -DNT=2 -mavx512f -mavx512vnni -mavx512bw -mfma -fopenmp peak.c -o peak && ./peak
// (-O3 and the unroll pragmas keep the accumulators in registers; at -O2 GCC kept them on the stack.)
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <omp.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  for (int kind=0; kind<3; ++kind){
  double t0=now(); long iters=4000000000L;
  float sink=0;
  #pragma omp parallel num_threads(NT) reduction(+:sink)
  {
    __m512 a[12]; for(int i=0;i<12;i++) a[i]=_mm512_set1_ps(i*1e-9f);
    __m512i b[12]; for(int i=0;i<12;i++) b[i]=_mm512_set1_epi32(i);
    __m512 x=_mm512_set1_ps(1.0000001f), y=_mm512_set1_ps(0.9999999f);
    __m512i xi=_mm512_set1_epi8(3), yi=_mm512_set1_epi8(5);
    __m256 c[12]; for(int i=0;i<12;i++) c[i]=_mm256_set1_ps(i*1e-9f);
    __m256 x2=_mm256_set1_ps(1.0000001f), y2=_mm256_set1_ps(0.9999999f);
    for(long it=0; it<iters/12/NT; ++it){
      if(kind==0)
#pragma GCC unroll 12
 for(int i=0;i<12;i++) a[i]=_mm512_fmadd_ps(a[i],x,y);
      else if(kind==1)
#pragma GCC unroll 12
 for(int i=0;i<12;i++) b[i]=_mm512_dpbusd_epi32(b[i],xi,yi);
      else
#pragma GCC unroll 12
 for(int i=0;i<12;i++) c[i]=_mm256_fmadd_ps(c[i],x2,y2);
    }
    for(int i=0;i<12;i++){ sink+=_mm512_reduce_add_ps(a[i]) + _mm512_reduce_add_epi32(b[i]) + c[i][0];}
  }
  double dt=now()-t0; long ops=iters; // total instrs across 2 threads = iters (each thread iters/2)
  int lanes = kind==2?8:16; int macs = kind==1?64:lanes;
  printf("%s: %.2f G instr/s total, %.1f GMAC/s (sink %g)\n", kind==0?"zmm fma":kind==1?"zmm dpbusd":"ymm fma", ops/dt/1e9, ops/dt/1e9*macs, sink);
  }
}
