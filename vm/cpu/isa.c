/*
** isa.c -- the widest instruction set the CPU kernels may use here: what
** cpuid says the CPU has, capped by $QKV_CPU ("baseline", "avx2" or
** "avx512"), so that the suites can run the baseline kernels on a machine
** that has more and compare their values (tests/backends/test_isa.lua).
** An unknown value is said on stderr once and ignored.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static int have (void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    return QKV_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return QKV_ISA_AVX2;
#endif
  return QKV_ISA_BASE;
}

int qkv_cpu_isa (void) {
  static int isa = -1;
  if (isa >= 0) return isa;
  int cap = QKV_ISA_AVX512;
  const char *s = getenv("QKV_CPU");
  if (s != NULL && *s != '\0') {
    if (strcmp(s, "baseline") == 0) cap = QKV_ISA_BASE;
    else if (strcmp(s, "avx2") == 0) cap = QKV_ISA_AVX2;
    else if (strcmp(s, "avx512") != 0)
      fprintf(stderr, "qkv: QKV_CPU=%s is not baseline, avx2 or avx512; ignored\n", s);
  }
  int h = have();
  isa = h < cap ? h : cap;
  return isa;
}
