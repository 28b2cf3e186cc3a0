/*
** pngw.h -- a cairo image surface as PNG bytes, with settings for speed.
*/
#ifndef QKV_PNGW_H
#define QKV_PNGW_H

#include <stddef.h>

#include <cairo.h>

/* the encoded bytes: p (malloc'ed, the caller frees it) holds n of cap */
typedef struct qkv_png_bytes { unsigned char *p; size_t n, cap; } qkv_png_bytes;

/* NULL when encoded into out, else why not (out may then hold a part) */
const char *qkv_encode_png (cairo_surface_t *s, qkv_png_bytes *out);

#endif
