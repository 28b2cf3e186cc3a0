/*
** fonts.c -- DejaVu Sans for the figures, read from its file through
** FreeType.  cairo's toy font API finds fonts through fontconfig, whose
** start-up (parsing its XML configuration, reading its caches) took 5 ms
** of a script that draws one figure: a third of its run.  The faces are
** made once per process and kept (the module is linked -z nodelete, so a
** new Lua state finds them); where the file is missing, the toy API.
*/
#include <stddef.h>

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

static cairo_font_face_t *load (int bold) {
  static const char *const files[2] = {DEJAVU "DejaVuSans.ttf", DEJAVU "DejaVuSans-Bold.ttf"};
  FT_Face ft;
  if (library == NULL && FT_Init_FreeType(&library) != 0) return NULL;
  if (FT_New_Face(library, files[bold], 0, &ft) != 0) return NULL;
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
