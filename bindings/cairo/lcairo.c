/*
** lcairo.c -- qkv.cairo: a thin canvas over cairo's image surface, for the
** PNG figures of qkv.plot. It knows nothing of tensors or layout: it takes
** and returns plain Lua values, and stock Lua can load it as well as qkv
** (write_png requires the qkv module, whose writer writes the file).
** It lives in its own .so so that only a script that writes a PNG loads
** cairo (the terminal plots and start-up never pay for it).
*/
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cairo.h>

#include "lua.h"
#include "lauxlib.h"

#include "fonts.h"
#include "pngw.h"

#define CANVAS "qkv.cairo.Canvas"

/* cairo's own limit per side is 32767; the product keeps one canvas at
   256 MiB, far above any figure, so a typo cannot take the machine's RAM */
#define MAXSIDE 32767
#define MAXPIXELS (1 << 26)

#define PI 3.14159265358979323846

typedef struct Canvas {
  cairo_surface_t *surface;
  cairo_t *cr;
} Canvas;

static Canvas *checkcanvas (lua_State *L, int i) {
  Canvas *c = (Canvas *)luaL_checkudata(L, i, CANVAS);
  luaL_argcheck(L, c->cr != NULL, i, "canvas is closed");
  return c;
}

/* cairo turns NaN into a sticky error state (or worse, in old versions),
   so a coordinate must be a finite number before it gets there */
static double checkfinite (lua_State *L, int i) {
  double v = luaL_checknumber(L, i);
  luaL_argcheck(L, isfinite(v), i, "must be a finite number");
  return v;
}

static double optfinite (lua_State *L, int i, double def) {
  return lua_isnoneornil(L, i) ? def : checkfinite(L, i);
}

/* cairo puts the context in an error state on invalid UTF-8; refuse it
   here so that the error names the argument instead */
static const char *checkutf8 (lua_State *L, int i) {
  size_t n;
  const char *s = luaL_checklstring(L, i, &n);
  for (size_t k = 0; k < n; ) {
    unsigned char b = (unsigned char)s[k];
    size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 :
                 (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    luaL_argcheck(L, len > 0 && k + len <= n, i, "invalid UTF-8");
    for (size_t j = 1; j < len; j++)
      luaL_argcheck(L, ((unsigned char)s[k + j] & 0xC0) == 0x80, i,
                    "invalid UTF-8");
    luaL_argcheck(L, b != 0, i, "embedded zero");
    k += len;
  }
  return s;
}

static void checksize (lua_State *L, int iw, lua_Integer w, lua_Integer h) {
  luaL_argcheck(L, w >= 1 && w <= MAXSIDE, iw, "width out of range");
  luaL_argcheck(L, h >= 1 && h <= MAXSIDE, iw + 1, "height out of range");
  if (w * h > MAXPIXELS)
    luaL_error(L, "canvas of %d x %d pixels is too large (at most %d pixels)",
               (int)w, (int)h, MAXPIXELS);
}

/* cairo.new(width, height) -> canvas, all white and opaque */
static int c_new (lua_State *L) {
  lua_Integer w = luaL_checkinteger(L, 1), h = luaL_checkinteger(L, 2);
  checksize(L, 1, w, h);
  Canvas *c = (Canvas *)lua_newuserdatauv(L, sizeof(Canvas), 0);
  c->surface = NULL;
  c->cr = NULL;
  luaL_setmetatable(L, CANVAS);
  c->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, (int)w, (int)h);
  c->cr = cairo_create(c->surface);
  cairo_status_t st = cairo_status(c->cr);
  if (st != CAIRO_STATUS_SUCCESS)   /* __gc frees both */
    return luaL_error(L, "cairo.new: %s", cairo_status_to_string(st));
  cairo_set_source_rgb(c->cr, 1, 1, 1);
  cairo_paint(c->cr);
  cairo_set_source_rgb(c->cr, 0, 0, 0);
  qkv_set_font(c->cr, 0);
  return 1;
}

/* __gc and __close: safe to call twice, and after a failed cairo.new */
static int m_close (lua_State *L) {
  Canvas *c = (Canvas *)luaL_checkudata(L, 1, CANVAS);
  if (c->cr != NULL) cairo_destroy(c->cr);
  if (c->surface != NULL) cairo_surface_destroy(c->surface);
  c->cr = NULL;
  c->surface = NULL;
  return 0;
}

static int m_size (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  lua_pushinteger(L, cairo_image_surface_get_width(c->surface));
  lua_pushinteger(L, cairo_image_surface_get_height(c->surface));
  return 2;
}

/* canvas:rgb(r, g, b [, a]), components in [0, 1] (cairo clamps them) */
static int m_rgb (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double r = checkfinite(L, 2), g = checkfinite(L, 3), b = checkfinite(L, 4);
  cairo_set_source_rgba(c->cr, r, g, b, optfinite(L, 5, 1.0));
  return 0;
}

static int m_rect (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3);
  double w = checkfinite(L, 4), h = checkfinite(L, 5);
  cairo_rectangle(c->cr, x, y, w, h);
  return 0;
}

static int m_move_to (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3);
  cairo_move_to(c->cr, x, y);
  return 0;
}

static int m_line_to (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3);
  cairo_line_to(c->cr, x, y);
  return 0;
}

/* canvas:arc(xc, yc, radius, angle1, angle2), angles in radians */
static int m_arc (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3), r = checkfinite(L, 4);
  double a1 = checkfinite(L, 5), a2 = checkfinite(L, 6);
  luaL_argcheck(L, r >= 0, 4, "radius must be >= 0");
  cairo_new_sub_path(c->cr);
  cairo_arc(c->cr, x, y, r, a1, a2);
  return 0;
}

static int m_circle (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3), r = checkfinite(L, 4);
  luaL_argcheck(L, r >= 0, 4, "radius must be >= 0");
  cairo_new_sub_path(c->cr);
  cairo_arc(c->cr, x, y, r, 0, 2 * PI);
  return 0;
}

static int m_close_path (lua_State *L) {
  cairo_close_path(checkcanvas(L, 1)->cr);
  return 0;
}

/* canvas:fill([preserve]) keeps the path for a stroke when preserve */
static int m_fill (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  if (lua_toboolean(L, 2)) cairo_fill_preserve(c->cr);
  else cairo_fill(c->cr);
  return 0;
}

static int m_stroke (lua_State *L) {
  cairo_stroke(checkcanvas(L, 1)->cr);
  return 0;
}

static int m_line_width (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double w = checkfinite(L, 2);
  luaL_argcheck(L, w >= 0, 2, "width must be >= 0");
  cairo_set_line_width(c->cr, w);
  return 0;
}

/* canvas:font(size [, bold]): DejaVu Sans, which `make deps` installs */
static int m_font (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double size = checkfinite(L, 2);
  luaL_argcheck(L, size > 0 && size < 1000, 2, "font size out of range");
  qkv_set_font(c->cr, lua_toboolean(L, 3));
  cairo_set_font_size(c->cr, size);
  return 0;
}

/* canvas:text_extents(s) -> width, height, x_bearing, y_bearing, x_advance */
static int m_text_extents (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  const char *s = checkutf8(L, 2);
  cairo_text_extents_t e;
  cairo_text_extents(c->cr, s, &e);
  lua_pushnumber(L, e.width);
  lua_pushnumber(L, e.height);
  lua_pushnumber(L, e.x_bearing);
  lua_pushnumber(L, e.y_bearing);
  lua_pushnumber(L, e.x_advance);
  return 5;
}

/* canvas:show_text(s) at the current point (the baseline's left end) */
static int m_show_text (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  cairo_show_text(c->cr, checkutf8(L, 2));
  return 0;
}

static int m_save (lua_State *L) {
  cairo_save(checkcanvas(L, 1)->cr);
  return 0;
}

static int m_restore (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  /* an unmatched restore would put the context in an error state */
  cairo_status_t st = cairo_status(c->cr);
  cairo_restore(c->cr);
  if (st == CAIRO_STATUS_SUCCESS && cairo_status(c->cr) != st)
    return luaL_error(L, "restore: %s", cairo_status_to_string(cairo_status(c->cr)));
  return 0;
}

static int m_translate (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3);
  cairo_translate(c->cr, x, y);
  return 0;
}

static int m_rotate (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  cairo_rotate(c->cr, checkfinite(L, 2));
  return 0;
}

/* canvas:antialias(bool): off gives crisp one-pixel lines and cell edges */
static int m_antialias (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  cairo_set_antialias(c->cr, lua_toboolean(L, 2) ? CAIRO_ANTIALIAS_DEFAULT
                                                 : CAIRO_ANTIALIAS_NONE);
  return 0;
}

/*
** canvas:image(x, y, cols, rows, cw, ch, rgb): paints a cols x rows picture
** given as 3 bytes (R, G, B) a pixel, row after row, each pixel a cw x ch
** block with its exact colour (no smoothing). One call draws a whole
** heatmap or picture, where a rectangle a cell would cost a call a cell.
*/
static int m_image (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  double x = checkfinite(L, 2), y = checkfinite(L, 3);
  lua_Integer cols = luaL_checkinteger(L, 4), rows = luaL_checkinteger(L, 5);
  double cw = checkfinite(L, 6), ch = checkfinite(L, 7);
  size_t n;
  const unsigned char *rgb = (const unsigned char *)luaL_checklstring(L, 8, &n);
  checksize(L, 4, cols, rows);
  luaL_argcheck(L, cw > 0 && ch > 0, 6, "pixel size must be positive");
  luaL_argcheck(L, n == (size_t)(cols * rows * 3), 8, "wrong number of bytes");
  cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24,
                                                    (int)cols, (int)rows);
  if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(img);
    return luaL_error(L, "image: %s", cairo_status_to_string(CAIRO_STATUS_NO_MEMORY));
  }
  cairo_surface_flush(img);
  unsigned char *data = cairo_image_surface_get_data(img);
  int stride = cairo_image_surface_get_stride(img);
  for (lua_Integer i = 0; i < rows; i++) {
    uint32_t *row = (uint32_t *)(data + (size_t)i * stride);
    for (lua_Integer j = 0; j < cols; j++, rgb += 3)
      row[j] = (uint32_t)rgb[0] << 16 | (uint32_t)rgb[1] << 8 | rgb[2];
  }
  cairo_surface_mark_dirty(img);
  cairo_save(c->cr);
  cairo_translate(c->cr, x, y);
  cairo_scale(c->cr, cw, ch);
  cairo_set_source_surface(c->cr, img, 0, 0);
  cairo_pattern_set_filter(cairo_get_source(c->cr), CAIRO_FILTER_NEAREST);
  cairo_rectangle(c->cr, 0, 0, (double)cols, (double)rows);
  cairo_fill(c->cr);
  cairo_restore(c->cr);
  cairo_surface_destroy(img);
  return 0;
}

/* the PNG's bytes live in a userdata until they are a Lua string, so that
   a Lua error in between (memory) cannot leak them */
#define PNGBYTES "qkv.cairo.pngbytes"

static int pngbytes_gc (lua_State *L) {
  qkv_png_bytes *b = (qkv_png_bytes *)luaL_checkudata(L, 1, PNGBYTES);
  free(b->p);
  b->p = NULL;
  return 0;
}

/* the canvas at 1 as PNG bytes, pushed as a string; raises "cannot write
   'path': why" when it cannot be encoded */
static void pushpng (lua_State *L, Canvas *c, const char *path) {
  cairo_status_t st = cairo_status(c->cr);
  if (st != CAIRO_STATUS_SUCCESS)
    luaL_error(L, "cannot write '%s': %s", path, cairo_status_to_string(st));
  qkv_png_bytes *b = (qkv_png_bytes *)lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  if (luaL_newmetatable(L, PNGBYTES)) {
    lua_pushcfunction(L, pngbytes_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  const char *why = qkv_encode_png(c->surface, b);
  if (why != NULL) luaL_error(L, "cannot write '%s': %s", path, why);
  lua_pushlstring(L, (const char *)b->p, b->n);
  lua_remove(L, -2);                   /* the box: its __gc frees the bytes */
}

/*
** canvas:write_png(path); raises "cannot write 'path': why".  The file is
** written by qkv's own writer (qkv._write_file, as qkv.save writes): a
** temp file in the same folder renamed over the target, so that a failed
** write (a full disk, Ctrl-C) leaves a file of that name as it was; a
** character device or a FIFO is written in place.
*/
static int m_write_png (lua_State *L) {
  Canvas *c = checkcanvas(L, 1);
  size_t n;
  const char *path = luaL_checklstring(L, 2, &n);
  luaL_argcheck(L, strlen(path) == n, 2, "the path holds a NUL byte");
  lua_settop(L, 2);
  lua_getglobal(L, "require");                                /* 3 */
  lua_pushliteral(L, "qkv");
  lua_call(L, 1, 1);
  lua_getfield(L, 3, "_write_file");                          /* 4 */
  lua_pushvalue(L, 2);
  pushpng(L, c, path);
  lua_pushliteral(L, "write_png");
  if (lua_pcall(L, 3, 0, 0) == LUA_OK) return 0;
  /* "write_png: path: why" or "write_png: why" -> "cannot write 'path': why" */
  const char *msg = luaL_tolstring(L, -1, NULL);
  if (strncmp(msg, "write_png: ", 11) == 0) msg += 11;
  if (strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0) msg += n + 2;
  return luaL_error(L, "cannot write '%s': %s", path, msg);
}

/* un-premultiplies one ARGB32 pixel (native-endian) into RGBA bytes */
static void torgba (uint32_t p, unsigned char *out) {
  unsigned a = p >> 24, rgb[3] = {(p >> 16) & 255, (p >> 8) & 255, p & 255};
  for (int k = 0; k < 3; k++)
    out[k] = (unsigned char)(a == 0 ? 0 : (rgb[k] * 255 + a / 2) / a);
  out[3] = (unsigned char)a;
}

/*
** cairo.read_png(path) -> width, height, stride, data; data holds RGBA
** bytes, not premultiplied, row after row (stride = 4 * width), so Lua
** reads a pixel with string.byte without knowing the machine's byte order.
*/
static int c_read_png (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  cairo_surface_t *s = cairo_image_surface_create_from_png(path);
  cairo_status_t st = cairo_surface_status(s);
  if (st != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(s);
    return luaL_error(L, "cannot read '%s': %s", path, cairo_status_to_string(st));
  }
  cairo_surface_t *argb = s;
  if (cairo_image_surface_get_format(s) != CAIRO_FORMAT_ARGB32) {
    /* an RGB24 or grey PNG: paint it onto ARGB32 to read one layout */
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    argb = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
    cairo_t *cr = cairo_create(argb);
    cairo_set_source_surface(cr, s, 0, 0);
    cairo_paint(cr);
    cairo_destroy(cr);
    cairo_surface_destroy(s);
  }
  cairo_surface_flush(argb);
  int w = cairo_image_surface_get_width(argb), h = cairo_image_surface_get_height(argb);
  int stride = cairo_image_surface_get_stride(argb);
  const unsigned char *data = cairo_image_surface_get_data(argb);
  luaL_Buffer b;
  unsigned char *out = data == NULL ? NULL :
    (unsigned char *)luaL_buffinitsize(L, &b, (size_t)w * h * 4);
  if (out == NULL) {
    cairo_surface_destroy(argb);
    return luaL_error(L, "cannot read '%s': no image data", path);
  }
  for (int y = 0; y < h; y++) {
    const uint32_t *row = (const uint32_t *)(data + (size_t)y * stride);
    for (int x = 0; x < w; x++)
      torgba(row[x], out + ((size_t)y * w + x) * 4);
  }
  cairo_surface_destroy(argb);
  luaL_pushresultsize(&b, (size_t)w * h * 4);
  lua_pushinteger(L, w);
  lua_pushinteger(L, h);
  lua_pushinteger(L, (lua_Integer)w * 4);
  lua_rotate(L, -4, -1);          /* data last */
  return 4;
}

/* cairo.mkdir(path): mkdir -p; true, or nil and the reason */
static int c_mkdir (lua_State *L) {
  size_t n;
  const char *path = luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n > 0, 1, "empty path");
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, n + 1);
  memcpy(p, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char keep = p[i];
    p[i] = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      lua_pushnil(L);
      lua_pushfstring(L, "%s: %s", p, strerror(errno));
      return 2;
    }
    p[i] = keep;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: not a directory", path);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

int luaopen_qkv_cairo (lua_State *L) {
  static const luaL_Reg methods[] = {
    {"size", m_size}, {"rgb", m_rgb}, {"rect", m_rect},
    {"move_to", m_move_to}, {"line_to", m_line_to}, {"arc", m_arc},
    {"circle", m_circle}, {"close_path", m_close_path}, {"fill", m_fill},
    {"stroke", m_stroke}, {"line_width", m_line_width}, {"font", m_font},
    {"text_extents", m_text_extents}, {"show_text", m_show_text},
    {"save", m_save}, {"restore", m_restore}, {"translate", m_translate},
    {"rotate", m_rotate}, {"antialias", m_antialias}, {"image", m_image},
    {"write_png", m_write_png}, {"close", m_close}, {NULL, NULL}
  };
  static const luaL_Reg funcs[] = {
    {"new", c_new}, {"read_png", c_read_png}, {"mkdir", c_mkdir},
    {NULL, NULL}
  };
  luaL_newmetatable(L, CANVAS);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, m_close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, m_close);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
  luaL_newlib(L, funcs);
  return 1;
}
