/*
** pngw.h -- a cairo image surface to a PNG file, with settings for speed.
*/
#ifndef QKV_PNGW_H
#define QKV_PNGW_H

#include <cairo.h>

/* NULL when written, else why not (the file is then removed) */
const char *qkv_write_png (cairo_surface_t *s, const char *path);

#endif
