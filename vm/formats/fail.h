/*
** fail.h -- how the format readers (npy.c, safetensors.c) report an error:
** the message, printf-style, into the caller's err buffer of errlen bytes,
** and -1 returned.  Header only, so that npy.c still builds alone (the
** libFuzzer target, tests/fuzz/fuzz_npy.c).
*/
#ifndef QKV_FORMATS_FAIL_H
#define QKV_FORMATS_FAIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int qkv_format_fail (char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

#endif
