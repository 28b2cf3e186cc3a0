/*
** elementwise_avx2.c -- elementwise_rows.h compiled for AVX2 (see there); used
** only where the CPU has it (qkv_cpu_isa, cpu.h).
*/
#if defined(__x86_64__)
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast")
#define QKV_ROWS(name) qkv_cpu_##name##_rows_avx2
#include "elementwise_rows.h"
#else
typedef int qkv_no_avx2;                 /* (an empty file is not ISO C) */
#endif
