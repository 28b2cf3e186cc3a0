/*
** ops.h -- what ops.c and ops_nn.c share (not public): the op entry
** check, the operands' conversion and expansion, and the compute dtype.
*/
#ifndef QKV_OPS_H
#define QKV_OPS_H

#include "../core/qkv.h"
#include "../core/backend.h"

/* the backend of out, with a and b (may be NULL) on its device, none of
   them closed, the flag not set; NULL with *err otherwise */
const qkv_backend *qkv_op_backend(const qkv_tensor *out, const qkv_tensor *a,
                                  const qkv_tensor *b, int *err);
/* a contiguous copy of src in dtype dt, in a storage the caller releases */
int qkv_op_convert(qkv_tensor *dst, const qkv_tensor *src, qkv_dtype dt);
/* src expanded to like's shape in dtype dt: a view, or a converted copy
   released through *tmp */
int qkv_op_operand(qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *src,
                   const qkv_tensor *like, qkv_dtype dt);
/* as qkv_op_operand for an op writing out, reading an input that overlaps
   out (and is not out) whole first */
int qkv_op_input(qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *src,
                 const qkv_tensor *out, qkv_dtype dt);
/* whether two elements of t are one element of memory (a stride-0 dim) */
int qkv_op_self_overlapping(const qkv_tensor *t);
/* a contiguous tensor of t's shape in dtype dt, in a new storage */
int qkv_op_fresh(qkv_tensor *dst, const qkv_tensor *t, qkv_dtype dt);
/* x itself when contiguous in dtype dt, else a copy released through *tmp */
int qkv_op_contiguous_as(qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *x,
                         qkv_dtype dt);
/* *use: out, or a tensor in out's compute dtype that qkv_op_done converts
   into out and releases (the error it returns is err's, or the copy's) */
int qkv_op_computed(qkv_tensor *out, qkv_tensor *tmp, qkv_tensor **use);
int qkv_op_done(int err, const qkv_backend *be, qkv_tensor *out, qkv_tensor *use);
/* a 0-d CPU operand of an op on device d, copied there into buf (*x then
   points at buf); qkv_op_unlift releases that copy */
int qkv_op_lift(const qkv_tensor **x, qkv_tensor *buf, qkv_device d);
void qkv_op_unlift(const qkv_tensor *x, qkv_tensor *buf);

/* out = alpha a @ b on be, a and b already checked: their batch dims
   expanded to out's (ops.c; for matmul.c) */
int qkv_op_matmul(const qkv_backend *be, qkv_tensor *out, const qkv_tensor *a,
                  const qkv_tensor *b, double alpha);

#endif
