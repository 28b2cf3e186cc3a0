/*
** range.h -- the message of QKV_ERANGE (range.c), for ops.c: after a
** conversion of src into the integer dtype `to` failed, or before one of
** the value v would, the message that qkv_strerror gives, naming the first
** element that does not fit.
*/
#ifndef QKV_RANGE_H
#define QKV_RANGE_H

#include "../core/qkv.h"

void qkv_op_range(const qkv_tensor *src, qkv_dtype to);
void qkv_op_range_value(double v, qkv_dtype to);
const char *qkv_op_range_message(void);

#endif
