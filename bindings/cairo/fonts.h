/*
** fonts.h -- DejaVu Sans for the figures.
*/
#ifndef QKV_FONTS_H
#define QKV_FONTS_H

#include <cairo.h>

/* makes cr draw text in DejaVu Sans, bold or not */
void qkv_set_font (cairo_t *cr, int bold);

#endif
