/*
** backend.c -- the CPU backend's table and its place in
** the core's registry.
*/
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

const qkv_backend qkv_cpu_backend = {
  .name = "cpu",
  .alloc = qkv_cpu_alloc,
  .free = qkv_cpu_free,
  .copy = qkv_cpu_copy,
  .fill = qkv_cpu_fill,
  .binary = qkv_cpu_binary,
  .unary = qkv_cpu_unary,
  .reduce = qkv_cpu_reduce,
  .matmul = qkv_cpu_matmul,
  .masked_fill = qkv_cpu_masked_fill,
  .random = qkv_cpu_random,
  .softmax = qkv_cpu_softmax,
  .attention = qkv_cpu_attention,
  .where = qkv_cpu_where,
  .gather = qkv_cpu_gather,
  .sort = qkv_cpu_sort,
  .attention_backward = qkv_cpu_attention_backward,
  .attention_backward_rows = 1,
  .attention_backward_groups = 1,
  .elementwise_halves = 1,
  .reduce_halves = 1,
  .attention_mods = qkv_cpu_attention_mods,
  .attention_mods_backward = qkv_cpu_attention_mods_backward,
  .attention_blocks = qkv_cpu_attention_blocks,
  .scatter_add = qkv_cpu_scatter_add,
  .softmax_backward = qkv_cpu_softmax_backward,
  .log_softmax = qkv_cpu_log_softmax,
  .layer_norm = qkv_cpu_layer_norm,
  .layer_norm_backward = qkv_cpu_layer_norm_backward,
  .cumsum = qkv_cpu_cumsum,
  .tri = qkv_cpu_tri,
  .adam = qkv_cpu_adam,
  .rms_norm = qkv_cpu_rms_norm,
  .rms_norm_backward = qkv_cpu_rms_norm_backward,
  .split_products = qkv_cpu_split_products,
};

/*
** Into the core's registry as the library loads (the executable, qkv.so
** under any Lua), before anything can ask for a storage: the core names no
** backend, and no embedder has an open call to remember.
*/
__attribute__((constructor)) static void register_cpu (void) {
  qkv_backend_register(QKV_CPU, &qkv_cpu_backend);
}
