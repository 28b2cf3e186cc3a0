/*
** blas.c -- finds cblas_sgemm and cblas_dgemm with dlopen the first time a
** product needs them (see blas.h).
*/
#include <dlfcn.h>
#include <stddef.h>

#include "cpu.h"
#include "blas.h"

__typeof__(cblas_sgemm) *qkv_sgemm;
__typeof__(cblas_dgemm) *qkv_dgemm;
static void (*set_threads)(int);
static _Thread_local int serial_here;

void qkv_blas_serial (void) {
  if (serial_here || qkv_sgemm == NULL) return;
  serial_here = 1;
  if (set_threads) set_threads(1);
}

int qkv_blas_load (void) {
  /* OpenBLAS first (Debian's alternatives point libblas.so.3 at it too) */
  static const char *const names[] = {"libopenblas.so.0", "libopenblas.so",
                                      "libblas.so.3", "libcblas.so.3"};
  static int tried;
  if (qkv_sgemm != NULL) { qkv_blas_serial(); return QKV_OK; }
  if (tried) return QKV_ENOBLAS;
  tried = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) continue;
    void *s = dlsym(h, "cblas_sgemm"), *d = dlsym(h, "cblas_dgemm");
    if (s != NULL && d != NULL) {
      /* (an object pointer to a function pointer, as POSIX allows) */
      *(void **)&qkv_sgemm = s;
      *(void **)&qkv_dgemm = d;
      *(void **)&set_threads = dlsym(h, "openblas_set_num_threads");
      qkv_blas_serial();
      return QKV_OK;
    }
    dlclose(h);
  }
  return QKV_ENOBLAS;
}
