/*
** nearest.h -- which known name a misspelt one is nearest to, header
** only: the one rule behind every "did you mean" of qkv, shared by the
** bindings (bindings/laux.c: options tables, the names of qkv's tables)
** and the command line (vm/cli: qkv's own long options), so that a slip
** reads the same in a script and on the command line.  Plain C11 string
** code (C++ too), calling no qkv code.
*/
#ifndef QKV_NEAREST_H
#define QKV_NEAREST_H

#include <ctype.h>
#include <string.h>

/* the edit distance between a and b, for names under 32: Levenshtein's
   with a swap of two neighbours as one edit (optimal string alignment),
   so that 'maks' is one edit from 'mask'; 99 for longer names */
static inline int qkv_edit_distance (const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  int d[33][33];
  if (na > 32 || nb > 32) return 99;
  for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[na][nb];
}

/* whether a and b differ in the case of their ASCII letters alone */
static inline int qkv_same_but_case (const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
  return *a == *b;
}

/*
** Whether name is near enough to k to suggest, and nearer than *best
** edits (then *best becomes its distance): one edit per four letters of
** k, at least one and fewer than k has, so that a short name is suggested
** only for one slip ('half' is two edits from 'all': nothing), a long one
** for two ('softmaxxx').  A slip of case alone ('Adamw' for 'AdamW') is
** nearer than any other.
*/
static inline int qkv_nearer (const char *k, const char *name, int *best) {
  int d = qkv_same_but_case(k, name) ? 0 : qkv_edit_distance(k, name);
  int len = (int)strlen(k), reach = len / 4 > 1 ? len / 4 : 1;
  if (d >= *best || d > reach || d >= len) return 0;
  *best = d;
  return 1;
}

/* the name of names (NULL-ended) nearest to k within 2 edits, the first
   of two as near; NULL when none is near enough */
static inline const char *qkv_nearest (const char *k, const char *const *names) {
  const char *found = NULL;
  int best = 3;
  for (int i = 0; names[i]; i++)
    if (qkv_nearer(k, names[i], &best)) found = names[i];
  return found;
}

#endif
