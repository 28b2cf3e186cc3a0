/*
** mods_gen.cu -- a score_mod/mask_mod program (common/mods.h) as CUDA
** code: the evaluator qkv_mods_gen of mods_kernels.cuh for that one
** program, after the text of jit_kernels.cuh (the kernels' headers,
** which hold mods_kernels.cuh), and the kernels for it under extern "C"
** names, for jit.cu to compile: qkv_jit_tiled, the forward in
** attention.cu's tiled kernel at the tiles it would take, and the
** backward's qkv_jit_scores and qkv_jit_grads, all for the call's dtype;
** or, for bfloat16 and float16, qkv_jit_mma and qkv_jit_mma_bwd, the
** forward and the backward in the tensor-core kernels (the forward at the
** tiles mods.cu gives), one text for both directions.
**
** Each instruction becomes one line writing its value, val[v] = ...: the
** op a constant, so that qkv_mod_apply's switch folds to the formula (the
** formulas stay in mods.h alone), and every index of val a constant, so
** that the compiler keeps the values in registers; for float32 and the
** halves the score's exp, tanh and sigmoid in float32, as the CPU's
** float32 kernels (the rest, index arithmetic above all, in float64).
** Each line runs only
** where an output asked for (want) needs it, and the lines that read
** neither j nor the score run once per key block (js false), as the
** interpreter's.  Constants are written as the bits of their doubles:
** exact, infinities and NaNs included.
*/
#include <stdarg.h>
#include <stdio.h>

#include <string>

#include "mods.cuh"

/* the text of jit_kernels.cuh and what it includes (embed.py) */
extern const char qkv_cu_mods_text[];

static void line (std::string &s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line (std::string &s, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s += buf;
  s += '\n';
}

/* the lines of the instructions that read j (js) or do not; fl not
   NULL: the values that read the score (qkv_mod_float_values) take exp,
   tanh and sigmoid in float32 */
static void body (std::string &s, const qkv_mod_prog *G, bool js, const uint8_t *fl) {
  for (int v = 0; v < G->n; v++) {
    const qkv_mod_ins &x = G->ins[v];
    if (G->need[v] == 0 || ((G->dep[v] & QKV_MOD_DEP_J) != 0) != js) continue;
    std::string r;
    char buf[160];
    switch (x.op) {
      case QKV_MOD_SCORE: case QKV_MOD_B: case QKV_MOD_H: case QKV_MOD_I: case QKV_MOD_J:
        snprintf(buf, sizeof buf, "qkv_mods_leaf(%d, e)", x.op);
        r = buf;
        break;
      case QKV_MOD_CONST: {
        unsigned long long u;
        memcpy(&u, &x.k, 8);
        snprintf(buf, sizeof buf, "__longlong_as_double(0x%016llxLL) /* %.17g */", u, x.k);
        r = buf;
        break;
      }
      case QKV_MOD_LOAD: {
        r = "qkv_mods_load(M, " + std::to_string(v) + ", " + std::to_string(x.a) + ", ix, " +
            std::to_string(x.c) + ")";
        std::string ix;
        for (int d = 0; d < x.c; d++) ix += (d ? ", val[" : "val[") + std::to_string(G->args[x.b + d]) + "]";
        line(s, "    if (want & %d) { const double ix[%d] = {%s};", G->need[v], x.c > 0 ? x.c : 1,
             x.c > 0 ? ix.c_str() : "0");
        line(s, "      val[%d] = %s; }", v, r.c_str());
        continue;
      }
      case QKV_MOD_EXP: case QKV_MOD_TANH: case QKV_MOD_SIGMOID:
        if (fl && fl[v]) {
          snprintf(buf, sizeof buf, "qkv_mods_apply_f(%d, val[%d])", x.op, x.a);
          r = buf;
          break;
        }
        [[fallthrough]];
      default: {
        int ar = qkv_mod_arity(x.op);
        snprintf(buf, sizeof buf, "qkv_mod_apply(%d, val[%d], val[%d], val[%d])", x.op, x.a,
                 ar >= 2 ? x.b : x.a, ar >= 3 ? x.c : x.a);
        r = buf;
      }
    }
    line(s, "    if (want & %d) val[%d] = %s;", G->need[v], v, r.c_str());
  }
}

int qkv_cu_mods_source (const qkv_mod_prog *G, qkv_dtype dt, const qkv_cu_tiles &t,
                        const qkv_cu_mma_tiles *mma, std::string *out) {
  std::string &s = *out;
  uint8_t fl[QKV_MOD_MAXINS];
  qkv_mod_float_values(G, fl);
  const uint8_t *f32 = dt == QKV_F64 ? NULL : fl;
  s = qkv_cu_mods_text;
  line(s, "#line 1 \"(the program's code, vm/cuda/mods_gen.cu)\"");
  line(s, "struct qkv_mods_gen {");
  line(s, "  static const bool MODS = true;");
  /* score + a bias: the derivative by the score is 1, nothing to take */
  double dk;
  line(s, "  static const bool DSCORE_ONE = %s;",
       qkv_mod_dscore_const(G, &dk) && dk == 1 ? "true" : "false");
  line(s, "  static const int NV = %d;", G->n > 0 ? G->n : 1);
  line(s, "  __device__ static __forceinline__ void run (qkv_attn_mods *M, double *val, int want,");
  line(s, "                                              bool js, const qkv_mod_pair &e) {");
  line(s, "    (void)M; (void)e;");
  line(s, "    if (!js) {");
  body(s, G, false, f32);
  line(s, "    } else {");
  body(s, G, true, f32);
  line(s, "    }");
  line(s, "  }");
  line(s, "  __device__ static __forceinline__ bool has (const qkv_attn_mods *, int o) {");
  std::string has;
  for (int o = 0; o < QKV_MOD_NOUT; o++)
    if (G->out[o] >= 0) has += " || o == " + std::to_string(o);
  line(s, "    return false%s;", has.c_str());
  line(s, "  }");
  line(s, "  __device__ static __forceinline__ double get (const qkv_attn_mods *, const double *val,");
  line(s, "                                                int o) {");
  for (int o = 0; o < QKV_MOD_NOUT; o++)
    if (G->out[o] >= 0) line(s, "    if (o == %d) return val[%d];", o, G->out[o]);
  line(s, "    return 0;");
  line(s, "  }");
  line(s, "  __device__ static __forceinline__ void grads (qkv_attn_mods *M, const double *val,");
  line(s, "                                                double g) {");
  line(s, "    (void)M; (void)val; (void)g;");
  for (int o = QKV_MOD_OUT_DLOAD; o < QKV_MOD_NOUT; o++) {
    if (G->out[o] < 0) continue;
    const qkv_mod_ins &l = G->ins[G->dload[o]];
    std::string ix;
    for (int d = 0; d < l.c; d++) ix += (d ? ", val[" : "val[") + std::to_string(G->args[l.b + d]) + "]";
    line(s, "    { const double ix[%d] = {%s};", l.c > 0 ? l.c : 1, l.c > 0 ? ix.c_str() : "0");
    line(s, "      qkv_mods_grad_add(M, %d, ix, %d, g * val[%d]); }", l.a, l.c, G->out[o]);
  }
  line(s, "  }");
  line(s, "};");
  if (mma) {                        /* the tensor cores' forward and backward */
    line(s, "extern \"C\" __global__ void __launch_bounds__(QKV_MMA_NT, 2) qkv_jit_mma (qkv_mods_args A) {");
    line(s, "  QKV_DYNAMIC_SMEM(smem);");
    line(s, "  qkv_attn_mma<%d, %d, %d, %d, true, qkv_mods_gen>(A.P, A.M, 1, smem);", mma->dt,
         mma->d, mma->mt, mma->bk);
    line(s, "}");
    line(s, "extern \"C\" __global__ void __launch_bounds__(QKV_MMA_NT) qkv_jit_mma_bwd (qkv_mods_args A) {");
    line(s, "  QKV_DYNAMIC_SMEM(smem);");
    line(s, "  const qkv_mma_grads G = {A.lse, A.delta, A.dqacc};");
    line(s, "  qkv_attn_mma_bwd<%d, %d, qkv_mma_bwd_bq(%d), qkv_mods_gen>(A.P, A.M, G, smem);",
         mma->dt, mma->d, mma->d);
    line(s, "}");
    return QKV_OK;
  }
  /* the kernels, for the call's dtype and the forward's tiles */
  const char *T = dt == QKV_F64 ? "double" : "float";
  line(s, "extern \"C\" __global__ void __launch_bounds__(QKV_ATTN_NT) qkv_jit_tiled (qkv_mods_args A) {");
  line(s, "  QKV_DYNAMIC_SMEM(smem);");
  line(s, "  qkv_attn_tiled<%s, %d, %d, %s, qkv_mods_gen>(A.P, A.M, smem);", T, t.bq, t.bk,
       t.staged ? "true" : "false");
  line(s, "}");
  line(s, "extern \"C\" __global__ void qkv_jit_scores (qkv_mods_args A) {");
  line(s, "  qkv_mods_scores<%s, qkv_mods_gen>(A);", T);
  line(s, "}");
  line(s, "extern \"C\" __global__ void qkv_jit_grads (qkv_mods_args A) {");
  line(s, "  qkv_mods_grads<%s, qkv_mods_gen>(A);", T);
  line(s, "}");
  return QKV_OK;
}
