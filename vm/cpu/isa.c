/*
** isa.c -- the widest instruction set the CPU kernels may use here: what
** cpuid says the CPU has, capped by $QKV_CPU ("baseline", "avx2", "avx512"
** or "amx"), so that the suites can run the baseline kernels on a machine
** that has more and compare their values (tests/backends/test_isa.lua).
** An unknown value is said on stderr once and ignored.
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#endif

#include "cpu.h"

/* AVX-512's bfloat16 dot products (cpuid leaf 7, subleaf 1, eax bit 5) */
static int have_bf16 (void) {
#if defined(__x86_64__) && defined(__linux__)
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
#else
  return 0;
#endif
}

/* AMX's bfloat16 products (cpuid leaf 7, subleaf 0 edx bits 22 and 24)
   and AVX-512's bfloat16 conversions */
static int have_amx (void) {
#if defined(__x86_64__) && defined(__linux__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1)) return 0;
  return have_bf16();
#else
  return 0;
#endif
}

static int have (void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    return have_amx() ? QKV_ISA_AMX : QKV_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return QKV_ISA_AVX2;
#endif
  return QKV_ISA_BASE;
}

int qkv_cpu_has_bf16 (void) {
  static int has = -1;
  if (has < 0) has = qkv_cpu_isa() >= QKV_ISA_AVX512 && have_bf16();
  return has;
}

int qkv_cpu_isa (void) {
  static int isa = -1;
  if (isa >= 0) return isa;
  int cap = QKV_ISA_AMX;
  const char *s = getenv("QKV_CPU");
  if (s != NULL && *s != '\0') {
    if (strcmp(s, "baseline") == 0) cap = QKV_ISA_BASE;
    else if (strcmp(s, "avx2") == 0) cap = QKV_ISA_AVX2;
    else if (strcmp(s, "avx512") == 0) cap = QKV_ISA_AVX512;
    else if (strcmp(s, "amx") != 0)
      fprintf(stderr, "qkv: QKV_CPU=%s is not baseline, avx2, avx512 or amx; ignored\n", s);
  }
  int h = have();
  isa = h < cap ? h : cap;
  return isa;
}

/*
** Linux hands out the tile registers' 8 KB of state per process on request
** (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18); without it the
** first tile instruction kills the process.  Asked only when a kernel wants
** AMX, since it also makes every signal frame of the process bigger.
*/
static int amx_granted;

static void ask_amx (void) {
#if defined(__x86_64__) && defined(__linux__)
  amx_granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
}

int qkv_cpu_has_amx (void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (qkv_cpu_isa() < QKV_ISA_AMX) return 0;
  pthread_once(&once, ask_amx);
  return amx_granted;
}
