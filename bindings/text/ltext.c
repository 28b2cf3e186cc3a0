/*
** ltext.c -- the module qkv.text: Unicode text as BERT's tokenizers see
** it, through Debian's libutf8proc (normalisation, case, categories).
** Loaded only by what tokenises (qkv.wordpiece), so that no other script
** pays for it.
**   text.bert_words(s [, lower [, strip_accents]]) -> {word, ...}
** is BERT's normaliser and pre-tokenizer as the tokenizers package runs
** them (BertNormalizer, BertPreTokenizer): control characters, NUL and
** U+FFFD dropped, whitespace split, CJK ideographs and punctuation (ASCII's
** and every Unicode P* category) made words of their own, the text
** lower-cased a character at a time when lower (default true) and its
** accents stripped (NFD, then every Mn mark dropped) when strip_accents
** (default: lower).  Text whose accents stay is NFC-normalised, as
** transformers' BertTokenizer does (the tokenizers package leaves it as it
** comes).  Invalid UTF-8 is an error.
*/
#include <string.h>

#include <utf8proc.h>

#include <lua.h>
#include <lauxlib.h>

LUALIB_API int luaopen_qkv_text (lua_State *L);

typedef utf8proc_int32_t cp_t;

/* the tokenizers package's table, whose seventh range starts at U+2B920
   (BERT's Python: U+2B820) */
static int is_cjk (cp_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* BERT's: tab, newline and return count as whitespace, not control */
static int is_space (cp_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return 1;
  utf8proc_category_t k = utf8proc_category(c);
  /* Zs for BERT; Zl and Zp because Python's split() then splits there */
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* the characters dropped: Cc, Cf, Cs, Co; not Cn (unassigned), which the
   tokenizers package keeps (it becomes part of a word, most often [UNK]),
   where BERT's Python drops every C category */
static int is_control (cp_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
         k == UTF8PROC_CATEGORY_CO;
}

static int is_punct (cp_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return 1;
  utf8proc_category_t k = utf8proc_category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* the first invalid byte of s, 1-based, or 0 */
static size_t bad_utf8 (const char *s, size_t n) {
  const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
  for (size_t i = 0; i < n;) {
    cp_t c;
    utf8proc_ssize_t k = utf8proc_iterate(u + i, (utf8proc_ssize_t)(n - i), &c);
    if (k <= 0) return i + 1;
    i += (size_t)k;
  }
  return 0;
}

/* the words being made: bytes of UTF-8, and where the current one began */
typedef struct Words { lua_State *L; char *buf; size_t n, start; lua_Integer count; } Words;

static void end_word (Words *w) {
  if (w->n > w->start) {
    lua_pushlstring(w->L, w->buf + w->start, w->n - w->start);
    lua_rawseti(w->L, -2, ++w->count);
  }
  w->start = w->n;
}

static void add (Words *w, cp_t c) {
  w->n += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)w->buf + w->n);
}

/* the lower case of c, a character at a time as the tokenizers package
   does it (no final sigma), and U+0130 as an i and a combining dot */
static void add_lower (Words *w, cp_t c) {
  if (c == 0x130) { add(w, 'i'); add(w, 0x307); return; }
  add(w, utf8proc_tolower(c));
}

static int ccc (cp_t c) { return utf8proc_get_property(c)->combining_class; }

/* a[0..n) sorted by canonical combining class, stably, with tmp's room
   for n code points: a short run by insertion, a long one by counting
   (time linear in n) */
static void sort_marks (cp_t *a, size_t n, cp_t *tmp) {
  if (n <= 16) {
    for (size_t i = 1; i < n; i++) {
      cp_t c = a[i];
      size_t j = i;
      for (; j > 0 && ccc(a[j - 1]) > ccc(c); j--) a[j] = a[j - 1];
      a[j] = c;
    }
    return;
  }
  size_t count[257] = {0};
  for (size_t i = 0; i < n; i++) count[ccc(a[i]) + 1]++;
  for (int c = 1; c <= 256; c++) count[c] += count[c - 1];
  for (size_t i = 0; i < n; i++) tmp[count[ccc(a[i])]++] = a[i];
  memcpy(a, tmp, n * sizeof *a);
}

/*
** u[0..len) decomposed into a (room for n code points, as
** utf8proc_decompose counted them): what utf8proc_decompose gives, but
** with each run of combining marks put in canonical order by a stable
** sort of our own, where utf8proc's swaps neighbours and takes time
** quadratic in a run's length ("a" and 20000 pairs of marks took 2.8 s).
*/
static void decompose (lua_State *L, const utf8proc_uint8_t *u, size_t len, cp_t *a,
                       utf8proc_ssize_t n, utf8proc_option_t opt) {
  utf8proc_ssize_t w = 0;
  size_t run = 0, longest = 0;
  for (size_t i = 0; i < len;) {
    cp_t c;
    int bound = 0;
    i += (size_t)utf8proc_iterate(u + i, (utf8proc_ssize_t)(len - i), &c);
    utf8proc_ssize_t k = utf8proc_decompose_char(c, a + w, n - w, opt, &bound);
    if (k < 0 || k > n - w)
      luaL_error(L, "bert_words: %s", k < 0 ? utf8proc_errmsg(k) : "the decomposition grew");
    for (utf8proc_ssize_t j = w; j < w + k; j++) {
      run = ccc(a[j]) ? run + 1 : 0;
      if (run > longest) longest = run;
    }
    w += k;
  }
  if (w != n) luaL_error(L, "bert_words: the decomposition shrank");
  if (longest < 2) return;
  cp_t *tmp = lua_newuserdatauv(L, longest * sizeof *tmp, 0);
  for (utf8proc_ssize_t i = 0; i < n;) {
    utf8proc_ssize_t j = i;
    while (j < n && ccc(a[j])) j++;
    if (j - i > 1) sort_marks(a + i, (size_t)(j - i), tmp);
    i = j > i ? j : i + 1;
  }
  lua_pop(L, 1);
}

static int bert_words (lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int lower = lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2);
  int strip = lua_isnoneornil(L, 3) ? lower : lua_toboolean(L, 3);
  size_t bad = bad_utf8(s, len);
  if (bad) return luaL_error(L, "bert_words: the text is not valid UTF-8 (at byte %d)", (int)bad);
  utf8proc_option_t opt = UTF8PROC_DECOMPOSE | UTF8PROC_STABLE;
  const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
  utf8proc_ssize_t n = utf8proc_decompose(u, (utf8proc_ssize_t)len, NULL, 0, opt);
  if (n < 0) return luaL_error(L, "bert_words: %s", utf8proc_errmsg(n));
  /* room for the decomposition, then for its UTF-8 (Python's lower case
     of U+0130 is two code points) */
  cp_t *a = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *a, 0);
  decompose(L, u, len, a, n, opt);
  if (!strip && n > 0) n = utf8proc_normalize_utf32(a, n, UTF8PROC_COMPOSE | UTF8PROC_STABLE);
  if (n < 0) return luaL_error(L, "bert_words: %s", utf8proc_errmsg(n));
  Words w = {L, lua_newuserdatauv(L, (size_t)n * 8 + 1, 0), 0, 0, 0};
  lua_newtable(L);
  for (utf8proc_ssize_t i = 0; i < n; i++) {
    cp_t c = a[i];
    if (c == 0 || c == 0xFFFD || (is_control(c) && !is_space(c))) continue;
    if (is_space(c)) end_word(&w);
    else if (is_cjk(c) || is_punct(c)) {
      end_word(&w);
      add(&w, lower ? utf8proc_tolower(c) : c);
      end_word(&w);
    } else if (strip && utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue;
    else if (lower) add_lower(&w, c);
    else add(&w, c);
  }
  end_word(&w);
  return 1;
}

LUALIB_API int luaopen_qkv_text (lua_State *L) {
  lua_newtable(L);
  lua_pushcfunction(L, bert_words);
  lua_setfield(L, -2, "bert_words");
  lua_pushstring(L, utf8proc_unicode_version());
  lua_setfield(L, -2, "unicode_version");
  return 1;
}
