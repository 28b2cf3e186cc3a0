/*
** utf8.h -- the text checks that qkv's C code shares (vm/formats/safetensors.c and
** bindings/json/ljson.c): a UTF-8 sequence (for the names safetensors
** writes and the strings json encodes) and the end of a JSON string with
** whether it holds a NUL (for the headers and texts they read).
** Header-only, so that the modules built apart from qkv.so use it too.
*/
#ifndef QKV_UTF8_H
#define QKV_UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
** The length (1 to 4) of the well-formed UTF-8 sequence at s[0..n), or 0
** when none starts there: a stray or missing continuation byte, an
** overlong form, a surrogate or a code point past U+10FFFF.
*/
static inline size_t qkv_utf8_seq (const unsigned char *s, size_t n) {
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  unsigned c = s[0];
  size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
           : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (k == 0 || k > n) return 0;
  uint32_t cp = k == 1 ? c : c & (0x7fu >> k);
  for (size_t j = 1; j < k; j++) {
    if ((s[j] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[j] & 0x3f);
  }
  if (cp < least[k] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return k;
}

/*
** The closing quote of the JSON string whose text starts at p (after its
** opening quote), or end when it has none; *nul tells whether the text
** holds a NUL byte, raw or written \u0000 (libcjson's C strings would end
** there: "a\u0000b" read as "a").  An escaped character is skipped, so
** \\u0000 is a backslash and "u0000".
*/
static inline const char *qkv_json_string_end (const char *p, const char *end, int *nul) {
  *nul = 0;
  for (; p < end && *p != '"'; p++) {
    if (*p == '\0') *nul = 1;
    else if (*p == '\\' && end - p > 1) {
      if (end - p >= 6 && memcmp(p + 1, "u0000", 5) == 0) *nul = 1;
      p++;
    }
  }
  return p;
}

#endif
