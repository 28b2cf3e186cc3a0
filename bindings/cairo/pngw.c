/*
** pngw.c -- encodes a cairo image surface as PNG bytes in memory through
** libpng; lcairo.c's write_png hands them to qkv's atomic file writer, so
** that a failed write (a full disk) leaves an old file of that name as it
** was.  cairo_surface_write_to_png takes libpng's defaults (every filter
** tried on every row, zlib level 6): 5 ms for a 650 x 410 figure, most of a
** small script's whole run.  A figure is mostly flat colour, which zlib's
** level 1 on unfiltered rows compresses about as well (measured on a
** scatter plot and a 10 x 10 heatmap: faster and smaller than the Sub or Up
** filters or the run-length strategy).  A canvas is opaque (cairo.new
** paints it white and everything is drawn over that), so it is written as
** RGB, as cairo writes an opaque image.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "pngw.h"

/* one row of native-endian ARGB32 as RGB bytes (alpha is 255) */
static void row_bytes (const uint32_t *p, int w, unsigned char *out) {
  for (int x = 0; x < w; x++, out += 3) {
    out[0] = (unsigned char)(p[x] >> 16);
    out[1] = (unsigned char)(p[x] >> 8);
    out[2] = (unsigned char)p[x];
  }
}

/* libpng's output: the bytes so far, grown as they come */
static void put (png_structp png, png_bytep data, size_t n) {
  qkv_png_bytes *b = png_get_io_ptr(png);
  if (n > b->cap - b->n) {
    size_t cap = b->cap ? b->cap : 4096;
    while (n > cap - b->n) {
      if (cap > SIZE_MAX / 2) png_error(png, "out of memory");
      cap *= 2;
    }
    unsigned char *p = realloc(b->p, cap);
    if (p == NULL) png_error(png, "out of memory");
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}

static void flush (png_structp png) { (void)png; }

/* libpng's errors end in a longjmp to encode's setjmp, printing nothing
   (its default prints "libpng error: ..." on stderr) */
static void fail (png_structp png, png_const_charp msg) {
  (void)msg;
  png_longjmp(png, 1);
}

static void warn (png_structp png, png_const_charp msg) { (void)png; (void)msg; }

/* libpng reports its errors by longjmp: everything it may leave half-done
   is set up before setjmp and undone after it */
static const char *encode (qkv_png_bytes *out, const unsigned char *data, int w, int h,
                           int stride, unsigned char *row) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, fail, warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (info == NULL) {
    png_destroy_write_struct(&png, NULL);
    return "out of memory";
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "out of memory";       /* in memory, nothing else can fail */
  }
  png_set_write_fn(png, out, put, flush);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
               PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_set_compression_level(png, 1);
  png_write_info(png, info);
  for (int y = 0; y < h; y++) {
    row_bytes((const uint32_t *)(data + (size_t)y * (size_t)stride), w, row);
    png_write_row(png, row);
  }
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return NULL;
}

const char *qkv_encode_png (cairo_surface_t *s, qkv_png_bytes *out) {
  cairo_format_t fmt = cairo_image_surface_get_format(s);
  if (fmt != CAIRO_FORMAT_ARGB32 && fmt != CAIRO_FORMAT_RGB24)
    return "not an RGB image";
  cairo_surface_flush(s);
  const unsigned char *data = cairo_image_surface_get_data(s);
  int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  int stride = cairo_image_surface_get_stride(s);
  if (data == NULL || w <= 0 || h <= 0) return "empty image";
  unsigned char *row = malloc((size_t)w * 3);
  if (row == NULL) return "out of memory";
  const char *why = encode(out, data, w, h, stride, row);
  free(row);
  return why;
}
