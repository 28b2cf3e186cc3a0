/*
** jit_check.c -- the kernels that the GPU compiles at run time, compiled
** here with NVRTC where no GPU is: each X.cu in a folder (the texts the
** host simulation compiled and kept, build/cudasim/jit/) through the
** real plugin's NVRTC step (qkv_cu_jit_check in vm/cuda/jit.cu), for the
** architectures given, so that a text NVRTC refuses is found before a GPU
** runs it:
**
**   build/jit_check build/qkv_cuda.so build/cudasim/jit 80 90
**
** Prints a line a text and architecture; exit 0 when all compile, 1 when
** one does not (its log printed), 2 when it cannot check (no plugin, no
** NVRTC, no text), saying why.
*/
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp (const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) == (size_t)n) s[n] = 0;
  else { free(s); s = NULL; }
  fclose(f);
  return s;
}

int main (int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: jit_check PLUGIN FOLDER SM...\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  int (*check)(const char *, int, char *, size_t) = NULL;
  if (h) *(void **)&check = dlsym(h, "qkv_cu_jit_check");
  if (check == NULL) {
    printf("jit_check: skipped: %s has no NVRTC step (%s)\n", argv[1], h ? "no qkv_cu_jit_check" : dlerror());
    return 2;
  }
  DIR *d = opendir(argv[2]);
  if (d == NULL) {
    printf("jit_check: skipped: no folder %s\n", argv[2]);
    return 2;
  }
  static char log[1 << 16];
  int texts = 0, bad = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t n = strlen(e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 3, ".cu") != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[2], e->d_name);
    char *src = slurp(path);
    if (src == NULL) continue;
    texts++;
    for (int a = 3; a < argc; a++) {
      int r = check(src, atoi(argv[a]), log, sizeof log);
      if (r == 2) {
        printf("jit_check: skipped: %s\n", log);
        return 2;
      }
      printf("%s %s sm_%s\n", r == 0 ? "ok  " : "FAIL", e->d_name, argv[a]);
      if (r) {
        printf("%s\n", log);
        bad++;
      }
    }
    free(src);
  }
  closedir(d);
  if (texts == 0) {
    printf("jit_check: skipped: no .cu in %s\n", argv[2]);
    return 2;
  }
  printf("jit_check: %d texts, %d failed\n", texts, bad);
  return bad ? 1 : 0;
}
