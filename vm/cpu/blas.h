/*
** blas.h -- OpenBLAS's gemm, loaded on first use.  Mapping OpenBLAS (36 MB
** with every CPU's kernels) and running its constructors took 1.7 ms of a
** process's start, half of qkv's; the products of a small script run as
** plain loops (matmul.c) and never need it.
*/
#ifndef QKV_BLAS_H
#define QKV_BLAS_H

#include <cblas.h>

extern __typeof__(cblas_sgemm) *qkv_sgemm;
extern __typeof__(cblas_dgemm) *qkv_dgemm;

/* QKV_OK once qkv_sgemm and qkv_dgemm may be called, else QKV_ENOBLAS.
   Call it on the thread that runs Lua, before any parallel region. */
int qkv_blas_load (void);

#endif
