/*
** fonts.c -- DejaVu Sans for the figures, read from its file through
** FreeType.  cairo's toy font API finds fonts through fontconfig, whose
** start-up (parsing its XML configuration, reading its caches) took 5 ms
** of a script that draws one figure: a third of its run.  The faces are
** made once per process and kept (the module is linked -z nodelete, so a
** new Lua state finds them).  The files are Debian's, else those in a
** fonts/ folder beside this module (make gpu-bundle puts them there);
** where neither is, the toy API.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cairo-ft.h>
#include <ft2build.h>
#include FT_FREETYPE_H

#include "fonts.h"

#define DEJAVU "/usr/share/fonts/truetype/dejavu/"

static FT_Library library;
static cairo_font_face_t *faces[2];
static int tried[2];

static const cairo_user_data_key_t face_key;

static void done_face (void *face) { FT_Done_Face((FT_Face)face); }

/* the face from Debian's file, else from fonts/ beside this module */
static int open_face (const char *name, FT_Face *ft) {
  char path[PATH_MAX];
  Dl_info info;
  snprintf(path, sizeof path, "%s%s", DEJAVU, name);
  if (FT_New_Face(library, path, 0, ft) == 0) return 0;
  if (!dladdr((void *)open_face, &info) || info.dli_fname == NULL) return -1;
  const char *slash = strrchr(info.dli_fname, '/');
  int n = slash ? (int)(slash - info.dli_fname) : 1;
  snprintf(path, sizeof path, "%.*s/fonts/%s", n, slash ? info.dli_fname : ".", name);
  return FT_New_Face(library, path, 0, ft) == 0 ? 0 : -1;
}

static cairo_font_face_t *load (int bold) {
  static const char *const files[2] = {"DejaVuSans.ttf", "DejaVuSans-Bold.ttf"};
  FT_Face ft;
  if (library == NULL && FT_Init_FreeType(&library) != 0) return NULL;
  if (open_face(files[bold], &ft) != 0) return NULL;
  cairo_font_face_t *face = cairo_ft_font_face_create_for_ft_face(ft, 0);
  if (cairo_font_face_set_user_data(face, &face_key, ft, done_face) != CAIRO_STATUS_SUCCESS) {
    cairo_font_face_destroy(face);
    FT_Done_Face(ft);
    return NULL;
  }
  return face;
}

void qkv_set_font (cairo_t *cr, int bold) {
  bold = bold != 0;
  if (!tried[bold]) {
    tried[bold] = 1;
    faces[bold] = load(bold);
  }
  if (faces[bold] != NULL)
    cairo_set_font_face(cr, faces[bold]);
  else
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
}
