#include <immintrin.h>
#include <stdio.h>
#include <time.h>
__attribute__((target("avx512f"),noinline)) double run(float* mem){
  __m512 a=_mm512_set1_ps(1.0001f), c[24];
  for(int i=0;i<24;i++) c[i]=_mm512_set1_ps(i);
  long n=20000000; struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long i=0;i<n;i++){
    __asm__ volatile("" : "+v"(a));
    #pragma GCC unroll 24
    for(int k=0;k<24;k++) c[k]=_mm512_fmadd_ps(a,c[k],a);
  }
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  __m512 t=c[0]; for(int i=1;i<24;i++) t=_mm512_add_ps(t,c[i]); _mm512_storeu_ps(mem,t);
  return n*24/s/1e9;
}
__attribute__((target("avx512f"),noinline)) double runb(float* mem, const float* k){
  // 24 accumulators, per step 8 broadcast loads + 3 loads + 24 FMAs, like pair_block
  __m512 c[24]; for(int i=0;i<24;i++) c[i]=_mm512_setzero_ps();
  long n=5000000; struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long i=0;i<n;i++){
    const float* kk=k; __asm__ volatile("" : "+r"(kk));
    #pragma GCC unroll 4
    for(int d=0;d<64;d+=16){
    __m512 q0=_mm512_loadu_ps(kk+1024+d), q1=_mm512_loadu_ps(kk+1280+d), q2=_mm512_loadu_ps(kk+1536+d);
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ __m512 kv=_mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double*)(kk+128*j+d))));
      c[j]=_mm512_fmadd_ps(q0,kv,c[j]); c[8+j]=_mm512_fmadd_ps(q1,kv,c[8+j]); c[16+j]=_mm512_fmadd_ps(q2,kv,c[16+j]);}
    }
  }
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  __m512 t=c[0]; for(int i=1;i<24;i++) t=_mm512_add_ps(t,c[i]); _mm512_storeu_ps(mem,t);
  return n*4*24/s/1e9;
}
int main(){ static float mem[16]; static float k[4096]; for(int i=0;i<4096;i++) k[i]=i*1e-3f;
  printf("zmm fma from regs: %.2f G/s\n", run(mem)); printf("pair_block-like: %.2f G FMA/s\n", runb(mem,k)); }
