/*
** lauxprint.c -- the text of a tensor, as PyTorch (1.13+) prints it with its
** default print options: torch/_tensor_str.py's _Formatter,
** get_summarized_data, _vector_str, _tensor_str_with_formatter and
** _add_suffixes, with qkv's own dtype and device names in the suffixes.
*/

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <lua.h>
#include <lauxlib.h>

#include "lauxqkv.h"

/* PyTorch's default print options (precision 4 is in the formats) */
#define THRESHOLD 1000    /* summarise tensors with more elements */
#define EDGEITEMS 3       /* indices kept at each end of a summarised dim */
#define LINEWIDTH 80
#define PREFIX "tensor("
#define INDENT ((int)sizeof(PREFIX) - 1)
#define VALSZ 400         /* "%.0f" of DBL_MAX is 309 digits */

/* how values are written: int64 and bool exactly, floats as the formatter
   decides from the nonzero finite values */
enum { FM_EXACT, FM_INT, FM_FIXED, FM_SCI };

typedef struct Fmt {
  const qkv_tensor *t;
  int summarize;
  int mode;
  int width;              /* every value is right-aligned to this */
  int64_t nfinite;        /* nonzero finite values seen ... */
  int allint;             /* ... whether all are integral ... */
  double amin, amax;      /* ... and their absolute range */
} Fmt;

typedef struct Out {
  luaL_Buffer b;
  size_t col;             /* length of the last line written so far */
} Out;


static double getf (const qkv_tensor *t, int64_t off) {
  return qkv_elem_get(t->dtype, (const char *)t->storage->data + off * (int64_t)qkv_elsize(t->dtype));
}


/* the text of one element, unpadded; returns its length */
static int fmtval (const Fmt *f, int64_t off, char *buf) {
  const void *data = f->t->storage->data;
  double v;
  switch (f->t->dtype) {
    case QKV_I64: case QKV_I32:
      snprintf(buf, VALSZ, "%" PRId64,
               qkv_elem_geti(f->t->dtype, (const char *)data + off * (int64_t)qkv_elsize(f->t->dtype)));
      return (int)strlen(buf);
    case QKV_BOOL:
      strcpy(buf, ((const uint8_t *)data)[off] ? "True" : "False");
      return (int)strlen(buf);
    default: break;
  }
  v = getf(f->t, off);
  if (isnan(v))  /* Python never shows a NaN's sign; glibc may say "-nan" */
    strcpy(buf, "nan");
  else if (isinf(v))  /* no "." after inf even in int mode */
    strcpy(buf, v < 0 ? "-inf" : "inf");
  else if (f->mode == FM_SCI)
    snprintf(buf, VALSZ, "%.4e", v);
  else if (f->mode == FM_FIXED)
    snprintf(buf, VALSZ, "%.4f", v);
  else  /* the dot tells a float tensor from an int64 one */
    snprintf(buf, VALSZ, "%.0f.", v);
  return (int)strlen(buf);
}


/*
** {======================================================
** The formatter: one width and one mode for the whole tensor
** =======================================================
*/

/* a summarised dim keeps only its first and last EDGEITEMS indices */
static int elided (const Fmt *f, int64_t n) {
  return f->summarize && n > 2 * EDGEITEMS;
}


/* pass 0 gathers the statistics, pass 1 measures widths in the final mode */
static void observe (Fmt *f, int64_t off, int pass) {
  char buf[VALSZ];
  int w;
  double v;
  if (f->mode != FM_EXACT) {
    v = getf(f->t, off);
    if (!isfinite(v) || v == 0) return;  /* they never widen the columns */
    if (pass == 0) {
      double a = fabs(v);
      f->nfinite++;
      if (a < f->amin) f->amin = a;
      if (a > f->amax) f->amax = a;
      if (v != ceil(v)) f->allint = 0;
      return;
    }
  }
  w = fmtval(f, off, buf);
  if (w > f->width) f->width = w;
}


/* visit exactly the values get_summarized_data keeps; nothing the
   formatter computes depends on their order, so no copy is needed */
static void scan (Fmt *f, int d, int64_t off, int pass) {
  const qkv_tensor *t = f->t;
  int64_t i, n;
  if (d == t->ndim) {
    observe(f, off, pass);
    return;
  }
  n = t->size[d];
  for (i = 0; i < n; i++) {
    if (elided(f, n) && i == EDGEITEMS) i = n - EDGEITEMS;
    scan(f, d + 1, off + i * t->stride[d], pass);
  }
}


static void formatter (Fmt *f, const qkv_tensor *t, int summarize) {
  int big;
  f->t = t;
  f->summarize = summarize;
  f->width = 1;
  if (!qkv_is_float(t->dtype)) {
    f->mode = FM_EXACT;
    scan(f, 0, t->offset, 1);
    return;
  }
  f->mode = FM_INT;  /* what zeros, infs and nans alone print as */
  f->nfinite = 0;
  f->allint = 1;
  f->amin = HUGE_VAL;
  f->amax = 0;
  scan(f, 0, t->offset, 0);
  if (f->nfinite == 0) return;  /* width stays 1: "0.", "inf", "nan" */
  big = f->amax / f->amin > 1000.0 || f->amax > 1.0e8;
  if (f->allint)
    f->mode = big ? FM_SCI : FM_INT;
  else
    f->mode = (big || f->amin < 1.0e-4) ? FM_SCI : FM_FIXED;
  scan(f, 0, t->offset, 1);
}

/* }====================================================== */


/*
** {======================================================
** Layout
** =======================================================
*/

static void addstr (Out *o, const char *s, size_t l) {
  size_t i = l;
  luaL_addlstring(&o->b, s, l);
  while (i > 0 && s[i - 1] != '\n') i--;
  o->col = (i > 0) ? l - i : o->col + l;
}


static void addlit (Out *o, const char *s) {
  addstr(o, s, strlen(s));
}


static void addchar (Out *o, char c) {
  luaL_addchar(&o->b, c);
  o->col = (c == '\n') ? 0 : o->col + 1;
}


static void addspaces (Out *o, int n) {
  while (n-- > 0) addchar(o, ' ');
}


static void putval (Out *o, const Fmt *f, int64_t off) {
  char buf[VALSZ];
  int l = fmtval(f, off, buf);
  addspaces(o, f->width - l);
  addstr(o, buf, (size_t)l);
}


/* before item k of a row: _vector_str packs `per` items on each line */
static void rowsep (Out *o, int64_t k, int per, int indent) {
  if (k == 0) return;
  if (k % per == 0) {
    addlit(o, ",\n");
    addspaces(o, indent + 1);
  }
  else addlit(o, ", ");
}


/* _vector_str; " ..." counts as an item when lines are filled */
static void vector (Out *o, const Fmt *f, int d, int64_t off, int indent) {
  int64_t i, k = 0, n = f->t->size[d], st = f->t->stride[d];
  int per = (LINEWIDTH - indent) / (f->width + 2);
  if (per < 1) per = 1;
  addchar(o, '[');
  for (i = 0; i < n; i++) {
    if (elided(f, n) && i == EDGEITEMS) {
      rowsep(o, k++, per, indent);
      addlit(o, " ...");
      i = n - EDGEITEMS;
    }
    rowsep(o, k++, per, indent);
    putval(o, f, off + i * st);
  }
  addchar(o, ']');
}


static void emit (Out *o, const Fmt *f, int d, int64_t off, int indent);

/* between slices of a dim with `rem` dims: one blank line per extra dim */
static void slicesep (Out *o, int64_t k, int rem, int indent) {
  if (k == 0) return;
  addchar(o, ',');
  while (rem-- > 1) addchar(o, '\n');
  addspaces(o, indent + 1);
}


/* _tensor_str_with_formatter for two or more dims */
static void slices (Out *o, const Fmt *f, int d, int64_t off, int indent) {
  int64_t i, k = 0, n = f->t->size[d], st = f->t->stride[d];
  int rem = f->t->ndim - d;
  addchar(o, '[');
  for (i = 0; i < n; i++) {
    if (elided(f, n) && i == EDGEITEMS) {
      slicesep(o, k++, rem, indent);
      addlit(o, "...");
      i = n - EDGEITEMS;
    }
    slicesep(o, k++, rem, indent);
    emit(o, f, d + 1, off + i * st, indent + 1);
  }
  addchar(o, ']');
}


static void emit (Out *o, const Fmt *f, int d, int64_t off, int indent) {
  if (f->t->ndim - d == 1) vector(o, f, d, off, indent);
  else slices(o, f, d, off, indent);
}

/* }====================================================== */


/*
** _add_suffixes: a suffix that would pass the line width starts a line of
** its own.  PyTorch's last_line_len is the real length plus 2; kept, so
** the wrapping happens at the same place.
*/
static void addsuffix (Out *o, size_t *last, const char *s) {
  size_t l = strlen(s);
  if (*last + l + 2 > LINEWIDTH) {
    addlit(o, ",\n");
    addspaces(o, INDENT);
    *last = INDENT + l;
  }
  else {
    addlit(o, ", ");
    *last += l + 2;
  }
  addstr(o, s, l);
}


static void suffixes (Out *o, const qkv_tensor *t, int64_t numel, qkv_device dev) {
  char buf[32 + 24 * QKV_MAXDIM];
  size_t last = o->col + 2;
  int i;
  if (dev != QKV_CPU) {
    snprintf(buf, sizeof(buf), "device='%s'", qkv_device_name(dev));
    addsuffix(o, &last, buf);
  }
  /* an empty tensor shows a shape that "[]" does not imply ... */
  if (numel == 0 && t->ndim != 1) {
    size_t n = (size_t)snprintf(buf, sizeof(buf), "size=(");
    for (i = 0; i < t->ndim; i++)
      n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%" PRId64,
                            i > 0 ? ", " : "", t->size[i]);
    snprintf(buf + n, sizeof(buf) - n, ")");
    addsuffix(o, &last, buf);
  }
  /* ... and any dtype but the default, as no values show it */
  if (numel == 0 ? t->dtype != QKV_F32
                 : t->dtype != QKV_F32 && t->dtype != QKV_I64 && t->dtype != QKV_BOOL) {
    snprintf(buf, sizeof(buf), "dtype=%s", qkv_dtype_name(t->dtype));
    addsuffix(o, &last, buf);
  }
}


/* a GPU tensor is printed from its host copy, with device='cuda' */
int qkvL_pushtensorstring (lua_State *L, const qkv_tensor *t) {
  Out o;
  qkv_device dev = t->storage->device;
  if (dev != QKV_CPU) t = qkvL_host(L, t, "tostring");
  int64_t numel = qkv_numel(t);
  luaL_buffinit(L, &o.b);
  o.col = 0;
  addlit(&o, PREFIX);
  if (numel == 0)
    addlit(&o, "[]");
  else {
    Fmt f;
    formatter(&f, t, numel > THRESHOLD);
    if (t->ndim == 0) putval(&o, &f, t->offset);
    else emit(&o, &f, 0, t->offset, INDENT);
  }
  suffixes(&o, t, numel, dev);
  addchar(&o, ')');
  luaL_pushresult(&o.b);
  if (dev != QKV_CPU) lua_remove(L, -2);
  return 1;
}
