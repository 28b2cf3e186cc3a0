-- doc/core.lua: qkv.doc entries of the qkv module's own functions: making
-- tensors, the attention primitives and the runtime (the math functions,
-- which are also tensor methods, are in doc/math.lua).

local SHAPE = "Sizes are given as numbers (qkv.zeros(2, 3)) or as one table " ..
  "(qkv.zeros{2, 3}), at most 8 of them, which may also hold PyTorch's keywords " ..
  "(its sizes under size, qkv.zeros{size = {2, 3}}, a dtype and a device, " ..
  "qkv.zeros{2, 3, dtype = \"float64\"}) and no other key; no sizes give a 0-d tensor. "

local DEVICE = "A trailing \"cpu\" or \"cuda\" (after the dtype, or alone) " ..
  "puts it on that device; else it goes to the default device (qkv.set_default_device). "

local GENERATOR = "The numbers come from qkv's counter-based generator " ..
  "(Philox 4x32-10), so qkv.seed(n) makes them the same on every machine. "

return {
  ---------------------------------------------------------------- making tensors
  {name = "qkv.tensor", sig = "qkv.tensor(t [, dtype] [, device])", group = "making tensors",
   doc = [[A new tensor from a nested table of numbers or booleans, from one
number (a 0-d tensor), or from another tensor (a copy). Numbers give
float32, integers too (PyTorch would give int64), so that
qkv.tensor{{1, 0}, {0, 1}} is ready for matmul; booleans give bool
(among numbers, float32, as PyTorch promotes them), and a tensor keeps its
dtype, unless dtype says otherwise. The shape is read down
the first items, and a ragged table is an error naming the depth; a
fractional number stored as int64 is truncated. The dtype and device come
as strings, as PyTorch's keywords in a table after t
(qkv.tensor({1, 2}, {dtype = "int64"})), or in t's outer table
(qkv.tensor{1, 2, dtype = "int64"}); any other key of t, or of a list in
it, is an error. ]] .. DEVICE .. [[As torch.tensor.]],
   example = [=[
print(qkv.tensor{{1, 2}, {3, 4}})
--> tensor([[1., 2.],
-->         [3., 4.]])
print(qkv.tensor({1, 2}, "int64"))   --> tensor([1, 2])]=]},

  {name = "qkv.zeros", sig = "qkv.zeros(d1, d2, ... [, dtype] [, device])", group = "making tensors",
   doc = [[A tensor of zeros with the given sizes. ]] .. SHAPE .. [[A trailing
string is the dtype, float32 by default: qkv.zeros(2, 3, "int64"), or the
dtype and device come as PyTorch's keywords in a table,
qkv.zeros(2, 3, {dtype = "int64", device = "cpu"}). ]] .. DEVICE .. [[A size
that is not a non-negative integer is an error naming the argument. As
torch.zeros.]],
   example = [=[print(qkv.zeros(2, 3).shape, qkv.zeros{2, 3}.shape)   --> (2, 3)	(2, 3)]=]},

  {name = "qkv.ones", sig = "qkv.ones(d1, d2, ... [, dtype] [, device])", group = "making tensors",
   doc = [[A tensor of ones with the given sizes. ]] .. SHAPE .. [[A trailing
string is the dtype, float32 by default: qkv.ones(2, 2, "bool") is all
true, as is qkv.ones(2, 2, {dtype = "bool"}) with PyTorch's keyword. ]] .. DEVICE .. [[A size that is not a non-negative integer is an error naming the
argument. As torch.ones.]]},

  {name = "qkv.full", sig = "qkv.full(shape, v [, dtype] [, device])", group = "making tensors",
   doc = [[A tensor of the given shape with every element v. shape is a
table of sizes or one size, and v a number or a boolean. The dtype is
float32 unless given (torch.full takes it from v instead), as a string, in
an options table after v (qkv.full(3, 1, {dtype = "int64"})) or in the
shape table, which may hold its sizes under size too, as for qkv.zeros. A v that is not
a number or boolean is an error on argument #2, and so is a v an int64
tensor cannot hold (NaN, inf, beyond 2^63). ]] .. DEVICE .. [[As torch.full.]],
   example = [=[print(qkv.full({2, 2}, 7))
--> tensor([[7., 7.],
-->         [7., 7.]])]=]},

  {name = "qkv.eye", sig = "qkv.eye(n [, m] [, dtype] [, device])", group = "making tensors",
   doc = [[The n × m identity matrix: ones on the main diagonal, zeros
elsewhere. m defaults to n, and the dtype to float32 (or {dtype = ...}, as
for qkv.zeros). Sizes must be
non-negative integers. ]] .. DEVICE .. [[As torch.eye.]]},

  {name = "qkv.arange", sig = "qkv.arange([a,] b [, step] [, dtype] [, device])", group = "making tensors",
   doc = [[The 1-D tensor a, a + step, a + 2 step, ... up to but not
including b. a defaults to 0 and step to 1; a negative step counts down.
The values are computed in float64 and stored as float32 unless dtype says
otherwise (torch.arange gives int64 for integer arguments); for int64 and
int32 a, b and step are truncated toward zero and everything is computed in
integers, exact past 2^53, as PyTorch's int64 arange; an int32 value out of
range is an error. A zero or non-finite step, a non-finite bound, or a step
that goes away from b is an error; the dtype and device may also come as
PyTorch's keywords, qkv.arange(5, {dtype = "int64"}). ]] .. DEVICE .. [[As torch.arange.]],
   example = [=[print(qkv.arange(3), qkv.arange(0, 1, 0.25))
--> tensor([0., 1., 2.])	tensor([0.0000, 0.2500, 0.5000, 0.7500])]=]},

  {name = "qkv.rand", sig = "qkv.rand(d1, d2, ... [, dtype] [, device])", group = "making tensors",
   doc = [[A tensor of random numbers uniform in [0, 1), shaped as for
qkv.zeros (and the dtype and device given as for it). ]] .. GENERATOR .. [[The dtype is float32 or float64; another
one is an error. ]] .. DEVICE .. [[The GPU draws the same numbers as the CPU. As torch.rand, though
the draws differ from PyTorch's.]]},

  {name = "qkv.randn", sig = "qkv.randn(d1, d2, ... [, dtype] [, device])", group = "making tensors",
   doc = [[A tensor of standard normal random numbers (mean 0, variance 1),
shaped as for qkv.zeros (and the dtype and device given as for it). ]] .. GENERATOR .. [[They are Box-Muller on the
generator's output; on the GPU they are the CPU's within an ulp for
float32 and four for float64 (its log, sin and cos are the GPU's own). The dtype is float32 or float64;
another one is an error. ]] .. DEVICE .. [[As torch.randn, though the draws differ from PyTorch's.]],
   example = [=[qkv.seed(42)
local a = qkv.randn(2, 3)
qkv.seed(42)
print(qkv.randn(2, 3):eq(a):sum():item())   --> 6]=]},

  {name = "qkv.seed", sig = "qkv.seed(n)", group = "making tensors",
   doc = [[Seeds the generator behind qkv.rand, qkv.randn and the qkv.nn
modules' initial weights with the integer n. A seed gives the same numbers
on every machine. The default seed is PyTorch's, 67280421310721. Returns
nothing; an n that is not an integer is an error. As torch.manual_seed.]]},

  {name = "qkv.initial_seed", sig = "qkv.initial_seed()", group = "making tensors",
   doc = [[The seed of the generator: the last one given to qkv.seed, or
the default 67280421310721. It is an integer. As torch.initial_seed.]]},

  {name = "qkv.cat", sig = "qkv.cat(list [, dim])", group = "making tensors",
   doc = [[Concatenates a list of tensors along dim (default 1, or
PyTorch's keyword in a table: qkv.cat(list, {dim = 2})). They must
have the same number of dims and equal sizes in every dim but dim; the
result's dtype is their promoted one (float32 with float64 gives float64).
An empty list, an item that is not a tensor, more than 1024 tensors or
sizes that disagree are errors naming the tensor. As torch.cat.]],
   example = [=[print(qkv.cat({qkv.ones(1, 2), qkv.zeros(1, 2)}))
--> tensor([[1., 1.],
-->         [0., 0.]])]=]},

  {name = "qkv.stack", sig = "qkv.stack(list [, dim])", group = "making tensors",
   doc = [[Stacks a list of tensors of one shape along a new dim at position
dim (default 1, or {dim = 2} as PyTorch's keyword): n tensors of shape (a, b) give (n, a, b). Shapes must be
equal, and dtypes promote as for qkv.cat. An empty list or a tensor of
another shape is an error naming it. As torch.stack.]],
   example = [=[print(qkv.stack({qkv.ones(2), qkv.zeros(2)}, 2))
--> tensor([[1., 0.],
-->         [1., 0.]])]=]},

  ---------------------------------------------------------------- attention
  {name = "qkv.project", sig = "qkv.project(x, W [, b])", group = "attention",
   doc = [[The linear projection x W + b, as in Q = X W_Q. x is (..., d_in),
W is (d_in, d_out) and b, when given, (d_out,); the result is
(..., d_out). x, W and b must share one float dtype. Sizes that disagree
are an error naming both shapes: project: x is (2, 3) but W is (4, 2):
d_in 3 ≠ 4. A float16 or bfloat16 product that runs as float32 sums
(the CPU's, without bfloat16 products of its own) takes b before its one
rounding, as PyTorch's addmm. PyTorch's F.linear(x, W.T, b): W here is the
transpose of nn.Linear's weight.]],
   example = [=[print(qkv.project(qkv.ones(1, 2), qkv.tensor{{1, 2}, {3, 4}}, qkv.tensor{0, 1}))
--> tensor([[4., 7.]])]=]},

  {name = "qkv.scores", sig = "qkv.scores(Q, K [, opts])", group = "attention",
   doc = [[The attention scores Q Kᵀ · scale, where scale is 1/sqrt(d_k)
unless opts.scale gives another number. Q is (..., n_q, d_k) and K
(..., n_k, d_k), their batch dims broadcast, and the result is
(..., n_q, n_k). Kᵀ is a view handed to BLAS with its transpose flag,
never copied. Q and K must share a float dtype, and an unknown option is an
error (scores: unknown option 'scal'). As Q @ K.transpose(-2, -1) /
math.sqrt(d_k) in PyTorch.]],
   see = {"qkv.mask", "qkv.softmax", "qkv.attention"}},

  {name = "qkv.mask", sig = "qkv.mask(S, m [, fill])", group = "attention",
   doc = [[A copy of the scores S with fill (default -inf) where the mask m
is false or 0. m is bool, an integer dtype (nonzero keeps) or a float one
holding 0 and 1 alone (other values, as in PyTorch's additive mask that
S + m applies, or 0 alone, are an error), and broadcasts to S:
a padding mask (B, 1, n), a causal one (n_q, n_k) or a per-head one
(B, H, n_q, n_k). It may add leading dims to the result (a (1, 1, n)
mask on (n_q, n) scores gives (1, n_q, n)), never change the last two.
The fill is -inf, not -1e9, so that qkv.softmax gives
exact zeros there. A mask that does not broadcast is an error with both
shapes, and so is a fill S's dtype cannot hold (the default -inf with an
int64 S). As S.masked_fill(~m, float('-inf')) in PyTorch.]],
   see = {"qkv.causal", "qkv.padding", "Tensor:masked_fill"}},

  {name = "qkv.causal", sig = "qkv.causal(n_q [, n_k])", group = "attention",
   doc = [[A bool (n_q, n_k) mask, true where query i may see key j:
j <= i + (n_k - n_q). n_k defaults to n_q, which gives the lower triangle.
When n_k > n_q the diagonal aligns to the end, as when decoding with a
cache of n_k - n_q earlier tokens, so the last query sees every key.
Lengths must be non-negative integers. It is made on the default device,
by that device (ones, then their triangle: nothing is copied from the
host). As torch.ones(n_q, n_k).tril(n_k - n_q).bool().]],
   example = [=[print(qkv.causal(2, 4))
--> tensor([[ True,  True,  True, False],
-->         [ True,  True,  True,  True]])]=]},

  {name = "qkv.padding", sig = "qkv.padding(lengths [, n])", group = "attention",
   doc = [[A bool (#lengths, 1, n) mask, true for the first lengths[b]
tokens of sequence b. lengths is a list of non-negative integers or a 1-D
tensor; n defaults to the longest length, and a length over n is an error.
The (B, 1, n) shape broadcasts against (B, n_q, n) scores, and
qkv.nn.MultiHeadAttention adds the head dim itself. It is made on the
default device, by that device, from the lengths alone. PyTorch spells it
torch.arange(n) < lengths[:, None, None].]],
   example = [=[print(qkv.padding({1, 3}))
--> tensor([[[ True, False, False]],
-->
-->         [[ True,  True,  True]]])]=]},

  {name = "qkv.softmax", sig = "qkv.softmax(x [, dim])", group = "attention",
   also = "x:softmax([dim])", also_group = "attention",
   doc = [[Softmax along dim (default -1, the last):
exp(x - max) / sum(exp(x - max)). The maximum is subtracted first, so any
finite input (even ±1e30) gives a finite result, and a row that is all -inf
gives zeros rather than NaN (PyTorch gives NaN). The result has x's shape;
float dtypes stay, int64 and bool give float32. PyTorch's keywords come as
a table, x:softmax{dim = -1, dtype = "float64"} (dtype converts x first),
and a dim out of range is an error. As torch.softmax(x, dim).]],
   example = [=[print(qkv.softmax(qkv.tensor{1, 2, 3}))
--> tensor([0.0900, 0.2447, 0.6652])]=]},

  {name = "qkv.gelu", sig = "qkv.gelu(x)", group = "attention",
   also = "x:gelu()", also_group = "attention",
   doc = [[The exact GELU, x Φ(x) = x/2 (1 + erf(x/√2)), elementwise. The
result has x's shape; float dtypes stay, int64 and bool give float32. It
is the activation of qkv.nn.GELU and of qkv.align's MLP form. As
torch.nn.functional.gelu(x) with approximate='none'.]],
   example = [=[print(qkv.gelu(qkv.tensor{-1, 0, 1}))
--> tensor([-0.1587,  0.0000,  0.8413])]=]},

  {name = "qkv.heads", sig = "qkv.heads(x, h)", group = "attention",
   doc = [[Splits the last dim into h heads: (..., n, d) becomes
(..., h, n, d/h), a view that shares x's storage. x needs at least 2 dims,
and d must be divisible by h, else the error names d, h and x's shape.
qkv.merge is its inverse. As x.view(..., n, h, d // h).transpose(-3, -2)
in PyTorch.]],
   example = [=[print(qkv.heads(qkv.randn(1, 10, 512), 8).shape)   --> (1, 8, 10, 64)]=]},

  {name = "qkv.merge", sig = "qkv.merge(x)", group = "attention",
   doc = [[Joins the heads again: (..., h, n, d_h) becomes (..., n, h d_h),
the inverse of qkv.heads. The result is a view when the layout allows it
(as right after qkv.heads), else a copy. x needs at least 3 dims. As
x.transpose(-3, -2).reshape(..., n, h * d_h) in PyTorch.]]},

  {name = "qkv.align", sig = "qkv.align(x, W [, b])", group = "attention",
   doc = [[Token alignment from d_vision to d_text: linear, x W + b as
qkv.project, or with a table {W1, b1, W2, b2} an MLP, Linear, GELU (erf),
Linear. x is (..., d_vision) and the result
(..., d_text); in the MLP form W1 is (d_vision, d_hidden) and W2
(d_hidden, d_text). Shape and dtype errors are qkv.project's, named align,
and an MLP table without 4 tensors is an error. qkv.nn.TokenAligner holds
the weights and calls it.]]},

  {name = "qkv.attention", sig = "qkv.attention(Q, K, V [, opts])", group = "attention",
   doc = [[Scaled dot-product attention: returns out = softmax(Q Kᵀ · scale,
masked) V and the weights. Q is (..., n_q, d_k), K (..., n_k, d_k) and V
(..., n_k, d_v), with batch dims that broadcast, so K and V may lack Q's
leading dims; out is (..., n_q, d_v) and the weights (..., n_q, n_k).
opts: mask (a tensor, true = may attend, as for qkv.mask: a float mask
holds 0 and 1 alone, PyTorch's additive one being an error that points to
m:eq(0) or F.scaled_dot_product_attention; its leading dims join the
result's), key_padding_mask (PyTorch's: a bool (..., n_k)
tensor, true = padding), causal (a boolean, as qkv.causal(n_q, n_k): the
diagonal aligned to the last key), is_causal (PyTorch's: aligned to the
first key, query i sees keys j <= i, as torch.ones(n_q, n_k).tril(); the
same as causal when n_q = n_k, and an error beside causal = true when
not), scale (default 1/sqrt(d_k)) and weights (default true). With
weights = false a fused kernel (tiled, online softmax) returns only out and
never holds the n_q × n_k matrix. score_mod, mask_mod and block_mask take
attention's variants as Lua functions of the score and the 1-based indices
(qkv.variants, docs/variants.md), and enable_gqa = true takes K and V with
H_kv heads dividing Q's H (dim -3), query head h using key/value head
ceil(h / (H / H_kv)), as PyTorch's enable_gqa, with no copy of K and V
(docs/decoder.md). An unknown option is an error naming the
closest known one (PyTorch's attn_mask points to mask and its polarity),
and so are shapes that disagree; PyTorch's F.scaled_dot_product_attention
returns only out.]],
   example = [=[local X = qkv.tensor{{1, 0}, {0, 1}}
local out, w = qkv.attention(X, X, X, {scale = 1})
print(w)
--> tensor([[0.7311, 0.2689],
-->         [0.2689, 0.7311]])]=]},

  {name = "qkv.cosine_similarity", sig = "qkv.cosine_similarity(a, b [, dim [, eps]])",
   group = "attention",
   also = "qkv.nn.cosine_similarity(a, b [, dim [, eps]])", also_group = "functions",
   doc = [[The cosine similarity along dim, PyTorch 2's: the sum of
a / max(|a|, eps) times b / max(|b|, eps), with eps 1e-8 by default. dim defaults to -1, the last, where PyTorch's default
is its dim 1. a and b broadcast, so text tokens (4, 1, d) against image
patches (1, 9, d) give the (4, 9) table, and the result has the broadcast
shape without dim. Arguments that are not tensors are an error naming
them. As torch.nn.functional.cosine_similarity.]],
   example = [=[print(qkv.cosine_similarity(qkv.randn(4, 1, 16), qkv.randn(1, 9, 16)).shape)
--> (4, 9)]=]},

  ---------------------------------------------------------------- runtime
  {name = "qkv.clock", sig = "qkv.clock()", group = "runtime",
   doc = [[A monotonic wall clock in seconds, a float with sub-microsecond
resolution, for timing a script. Only differences mean anything:
local t = qkv.clock(); ...; print(qkv.clock() - t). It never goes back when
the system's time is set. As time.perf_counter in Python.]]},

  {name = "qkv.memory", sig = "qkv.memory()", group = "runtime",
   doc = [[The number of bytes held by the storages of live tensors, in host
and GPU memory together (qkv.cuda.memory() has the GPU's alone). Tensor
storage is counted towards Lua's garbage collector, so the number falls
again when temporaries are collected; call collectgarbage() first for the
live figure. Views share their storage and add nothing. A tensor of at most
1 KiB of data (a 16 x 16 float32) keeps it inside its Lua object: its
bytes count in collectgarbage("count") instead, not here.]]},

  {name = "qkv.is_tensor", sig = "qkv.is_tensor(v)", group = "runtime",
   doc = [[True when v is a qkv tensor, false for anything else. A tensor
closed by <close> is still a tensor, though using it is an error. As
torch.is_tensor.]]},

  {name = "qkv.cuda_available", sig = "qkv.cuda_available()", group = "runtime",
   doc = [[True when qkv has a CUDA backend with a GPU to run on; else false
and why not (no build/qkv_cuda.so because make found no nvcc, no CUDA
driver, no device). The first call loads the backend (a shared object
built from vm/cuda/ when nvcc is found) with dlopen, so that a script that
never asks for the GPU never pays for cudart and cuBLAS. Also
qkv.cuda.is_available. As torch.cuda.is_available.]],
   example = [=[local ok, why = qkv.cuda_available()
print(type(ok))   --> boolean]=]},

  {name = "qkv.set_default_device", sig = "qkv.set_default_device(device)", group = "runtime",
   doc = [[Where new tensors go: "cpu" (the start) or "cuda". qkv.tensor,
zeros, ones, full, eye, arange, rand, randn, causal, padding and the
loaders (qkv.load, load_safetensors) then make their tensors there.
`qkv --device cuda` and `qkv test --device cuda` set it. Setting it does
not load the GPU backend: the first tensor made there does, and is an
error saying why when the GPU cannot be used. A name other than "cpu" or
"cuda" is an error. As torch.set_default_device.]],
   example = [=[qkv.set_default_device("cpu")
print(qkv.default_device())   --> cpu]=]},

  {name = "qkv.set_num_threads", sig = "qkv.set_num_threads(n)", group = "runtime",
   doc = [[The host threads the CPU kernels use from now on, n an integer
from 1 to 256. At start it is $QKV_NUM_THREADS, else $OMP_NUM_THREADS, else
the CPUs this process may run on; on a machine another program keeps busy, 1
thread is about as fast as all of them (bench/RESULTS.md). A loop is cut into
chunks that whichever thread is running takes, so a thread the system has
descheduled holds up little; idle threads spin for 4 µs, yield the CPU for
200 µs, then sleep. Small work (under 32K elements, or a product of under a
million multiply-adds) runs on the calling thread alone, and BLAS runs
single-threaded inside qkv's own threads. As torch.set_num_threads.]],
   example = [=[local n = qkv.get_num_threads()
qkv.set_num_threads(1)
print(qkv.get_num_threads())   --> 1
qkv.set_num_threads(n)
print(pcall(qkv.set_num_threads, 0))   --> false	set_num_threads: n must be in [1, 256], got 0]=]},

  {name = "qkv.get_num_threads", sig = "qkv.get_num_threads()", group = "runtime",
   doc = [[The host threads the CPU kernels may use, an integer of at
least 1. It starts as $QKV_NUM_THREADS, else $OMP_NUM_THREADS, else the CPUs
this process may run on, and qkv.set_num_threads changes it. As
torch.get_num_threads.]]},

  {name = "qkv.default_device", sig = "qkv.default_device()", group = "runtime",
   doc = [[The device new tensors go to: "cpu" or "cuda" (see
qkv.set_default_device). It is "cpu" at start. As torch.get_default_device.]]},

  {name = "qkv.cuda.is_available", sig = "qkv.cuda.is_available()", group = "device",
   doc = [[The same function as qkv.cuda_available: true when a GPU can be
used, else false and why not. It loads the CUDA backend on its first call.
As torch.cuda.is_available.]]},

  {name = "qkv.cuda.memory", sig = "qkv.cuda.memory()", group = "device",
   doc = [[The GPU's memory, in bytes, as a table: allocated (held by
tensors), cached (freed blocks kept by qkv's caching allocator for reuse),
peak (the most allocated at once), free and total (the device's, as
cudaMemGetInfo says). An error when the GPU cannot be used. As
torch.cuda.memory_allocated and memory_reserved.]]},

  {name = "qkv.cuda.synchronize", sig = "qkv.cuda.synchronize()", group = "device",
   doc = [[Waits until every GPU kernel launched so far has finished, and
raises the error of any that failed. Copies to the host and item() already
wait. As torch.cuda.synchronize.]]},

  {name = "qkv.cuda.empty_cache", sig = "qkv.cuda.empty_cache()", group = "device",
   doc = [[Gives the cached free blocks back to the driver (cached becomes
0 in qkv.cuda.memory()). Tensors in use keep their memory. As
torch.cuda.empty_cache.]]},

  {name = "qkv.cuda.device_name", sig = "qkv.cuda.device_name()", group = "device",
   doc = [[The GPU's name, as "NVIDIA H100 80GB HBM3". qkv uses the first
GPU the driver lists. As torch.cuda.get_device_name.]]},

  {name = "qkv.cuda.allow_tf32", sig = "qkv.cuda.allow_tf32([on])", group = "device",
   doc = [[Whether float32 products on the GPU may use TF32 tensor cores
(10-bit mantissas, much faster, about 1e-3 relative error). Off by default,
so the GPU's float32 results match the CPU's to rounding. Returns the
setting before; a boolean argument sets it: true is the float32 matmul
precision "high", false "highest" (qkv.set_float32_matmul_precision). As
torch.backends.cuda.matmul.allow_tf32.]]},

  {name = "qkv.cuda.attention_backend", sig = "qkv.cuda.attention_backend([path])", group = "device",
   doc = [[Which path the last fused attention on the GPU (forward or
backward) ran: "cudnn" (cuDNN's fused attention, for float16 and bfloat16
without a mask, where the plugin was built with cuDNN's headers and finds
libcudnn), "mma" (qkv's tensor-core kernels, float16 and bfloat16 at head
size 64 or 128), "wgmma" (the Hopper forward of the same, on wgmma: taken
only when forced, on a GPU of compute capability 9.0, until it has been
measured on one; its backward and variants are mma's), "fp32" (the CUDA-core kernels: float32, float64, and the
halves they compute in float32), "mods-jit" or "mods" (a forward with
score_mod/mask_mod/block_mask: the program compiled as code at run time
with NVRTC, or interpreted where NVRTC is absent or QKV_CUDA_JIT=0), or
"none" before the first. A path
("cudnn", "wgmma", "mma", "fp32", or "auto" for the first that runs each call, the
default) forces the following calls', and one that cannot take a call
fails it; QKV_CUDA_ATTENTION=path in the environment sets it at start. As
PyTorch's sdpa_kernel context chooses the backend.]]},

  {name = "qkv.cuda.Event", sig = "qkv.cuda.Event([{enable_timing = true}])", group = "timing",
   doc = [[A new CUDA event: a mark that event:record() puts in the GPU's work
queue, behind every kernel launched so far. Two recorded events time the
work between them on the GPU's own clock, without the host's launch and
wake-up times that qkv.clock() around qkv.cuda.synchronize() adds. Events
are timed by default (enable_timing = false makes one that only orders
and waits); the collector frees them. As torch.cuda.Event, whose
enable_timing defaults to false.]],
   see = {"Event:elapsed_time"}},

  {name = "Event:record", sig = "event:record()", group = "event methods",
   doc = [[Puts the event's mark in the GPU's queue, after every kernel
launched so far, and returns the event. Recording it again moves the mark.
The call does not wait for the GPU. As torch.cuda.Event.record.]]},

  {name = "Event:synchronize", sig = "event:synchronize()", group = "event methods",
   doc = [[Waits until the GPU has passed the event's mark, and raises the
error of a kernel before it that failed. An event never recorded returns
at once. As torch.cuda.Event.synchronize.]]},

  {name = "Event:query", sig = "event:query()", group = "event methods",
   doc = [[Whether the GPU has passed the event's mark, without waiting.
It is true for an event never recorded. As torch.cuda.Event.query.]]},

  {name = "Event:elapsed_time", sig = "event:elapsed_time(stop)", group = "event methods",
   doc = [[The milliseconds on the GPU's clock from this event's mark to
stop's, waiting until the GPU has passed stop. Both must be recorded and
made with timing (the default), else it is an error. The resolution is
about half a microsecond. As torch.cuda.Event.elapsed_time, which needs
its caller to wait for stop first.]]},
}
