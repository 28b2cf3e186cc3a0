-- doc/tensor.lua: qkv.doc entries of the tensor methods that are not math:
-- sizes and layout, values, views (which share storage) and copies. The
-- math methods, also functions of qkv, are in doc/math.lua.

local VIEW = "The result is a view: it shares x's storage, so writing one " ..
  "changes the other. "

return {
  ---------------------------------------------------------------- size and layout
  {name = "Tensor:dim", sig = "x:dim()", group = "size and layout",
   doc = [[The number of dims of x, 0 to 8, the same as x.ndim. A 0-d
tensor, such as the result of x:sum(), has 0. As torch.Tensor.dim.]]},

  {name = "Tensor:numel", sig = "x:numel()", group = "size and layout",
   doc = [[The number of elements of x, the product of its sizes (1 for a
0-d tensor). It is an integer. As torch.Tensor.numel.]]},

  {name = "Tensor:size", sig = "x:size([dim])", group = "size and layout",
   doc = [[The size of dim (negative counts from the end), or with no dim
all the sizes as x.shape gives them: a table that prints as (2, 3) and
compares with ==. A dim out of range is an error. As torch.Tensor.size.]],
   example = [=[local x = qkv.zeros(2, 3)
print(x:size(), x:size(-1), x.shape == x:size())   --> (2, 3)	3	true]=]},

  {name = "Tensor:stride", sig = "x:stride([dim])", group = "size and layout",
   doc = [[The stride of dim in elements, or with no dim all the strides as
a table like x.shape. A contiguous (2, 3) tensor has strides (3, 1) and its
transpose (1, 3). A dim out of range is an error. As
torch.Tensor.stride.]]},

  {name = "Tensor:is_contiguous", sig = "x:is_contiguous()", group = "size and layout",
   doc = [[True when x's elements lie in row-major order with no gaps, as a
new tensor's do. Views such as x:t() or x:narrow(...) may not be; then
x:contiguous() makes a copy that is. As torch.Tensor.is_contiguous.]]},

  ---------------------------------------------------------------- values
  {name = "Tensor:tolist", sig = "x:tolist()", group = "values",
   doc = [[The values of x as nested Lua tables, one level per dim: numbers
for float and int64 tensors (integers for int64), booleans for bool. A 0-d
tensor gives its one value. A GPU tensor is read through a host copy.
Tables that would take more than half the memory limit (about 16 bytes a
value, 80 a list) are an error before any is made. As torch.Tensor.tolist.]],
   example = [=[print(qkv.tensor{{1, 2}, {3, 4}}:tolist()[2][1])   --> 3.0]=]},

  {name = "Tensor:element_size", sig = "x:element_size()", group = "size and layout",
   doc = [[The bytes one element takes: 4 for float32 and int32, 8 for
float64 and int64, 2 for float16 and bfloat16, 1 for bool. x:numel() *
x:element_size() is the bytes of x's data. As
torch.Tensor.element_size.]],
   example = [=[print(qkv.ones(2, "float16"):element_size())   --> 2]=]},

  {name = "Tensor:item", sig = "x:item()", group = "values",
   doc = [[The one value of a tensor with one element, of any shape, as a
Lua number (an integer for int64) or a boolean. More or fewer elements are
an error: item: tensor of shape (2,) has 2 elements, not 1. The tensor must
be on the CPU. As torch.Tensor.item.]],
   example = [=[print(qkv.ones(2, 3):sum():item())   --> 6.0]=]},

  ---------------------------------------------------------------- views
  {name = "Tensor:t", sig = "x:t()", group = "views",
   doc = [[The transpose of a matrix, (n, m) to (m, n); a 1-D or 0-d tensor
comes back as it is. ]] .. VIEW .. [[More than 2 dims is an error that
suggests x:transpose(d1, d2). As torch.Tensor.t.]]},

  {name = "Tensor:transpose", sig = "x:transpose(d1, d2)", group = "views",
   doc = [[x with dims d1 and d2 swapped (negative dims count from the end).
]] .. VIEW .. [[A dim out of range is an error. As
torch.Tensor.transpose.]],
   example = [=[print(qkv.zeros(2, 3, 4):transpose(1, -1).shape)   --> (4, 3, 2)]=]},

  {name = "Tensor:permute", sig = "x:permute(d1, d2, ...)", group = "views",
   doc = [[x with its dims reordered: dim i of the result is dim di of x.
The dims are numbers or one table (or PyTorch's keyword, x:permute{dims =
{2, 1}}), each dim of x exactly once. ]] .. VIEW ..
[[A wrong count or a repeated dim is an error. As
torch.Tensor.permute.]]},

  {name = "Tensor:view", sig = "x:view(d1, d2, ...)", group = "views",
   doc = [[x with new sizes and the same elements, as numbers or one table
(or PyTorch's keyword, x:view{size = {2, 3}}; another key is an error);
one size may be -1, inferred from the others. ]] .. VIEW .. [[When x's
layout cannot be seen that way (x:t():view(6)) it is an error that
suggests x:reshape, as is a count of elements that differs. As
torch.Tensor.view.]],
   example = [=[print(qkv.arange(6):view(2, -1))
--> tensor([[0., 1., 2.],
-->         [3., 4., 5.]])]=]},

  {name = "Tensor:reshape", sig = "x:reshape(d1, d2, ...)", group = "views",
   doc = [[x with new sizes and the same elements, as x:view, but a copy
when x's layout cannot be viewed that way. The sizes are numbers or one
table (or PyTorch's keyword, x:reshape{shape = {2, 3}}), one of them may be
-1. A count of elements that differs is an error. As
torch.Tensor.reshape.]]},

  {name = "Tensor:narrow", sig = "x:narrow(dim, start, len)", group = "views",
   doc = [[The len items of dim from the 1-based start on (a negative start
counts from the end: -1 is the last). ]] .. VIEW .. [[A range that does
not fit is an error naming start, len and the size. As torch.narrow, with
start from 1.]],
   example = [=[print(qkv.arange(6):narrow(1, 2, 3))   --> tensor([1., 2., 3.])]=]},

  {name = "Tensor:select", sig = "x:select(dim, i)", group = "views",
   doc = [[The slice at the 1-based index i of dim, which removes dim (i may
be negative, from the end). x[i] is x:select(1, i), except that on a 1-D
tensor x[i] gives the number. ]] .. VIEW .. [[An index out of range is an
error. As torch.select, with i from 1.]]},

  {name = "Tensor:unsqueeze", sig = "x:unsqueeze(dim)", group = "views",
   doc = [[x with a new dim of size 1 at position dim, counted among the
result's dims (so -1 appends one). ]] .. VIEW .. [[More than 8 dims is an
error. As torch.Tensor.unsqueeze.]],
   example = [=[print(qkv.ones(3):unsqueeze(1).shape, qkv.ones(3):unsqueeze(-1).shape)
--> (1, 3)	(3, 1)]=]},

  {name = "Tensor:squeeze", sig = "x:squeeze([dim])", group = "views",
   doc = [[x without its dims of size 1, or with dim only that one; a dim
whose size is not 1 stays, as in PyTorch. ]] .. VIEW .. [[A dim out of
range is an error. As torch.Tensor.squeeze.]]},

  {name = "Tensor:expand", sig = "x:expand(d1, d2, ...)", group = "views",
   doc = [[x broadcast to larger sizes without copying: dims of size 1
repeat (stride 0), new leading dims may be added, and -1 keeps a size.
The sizes are numbers or one table (or x:expand{size = {2, 3}}).
]] .. VIEW .. [[Sizes that x cannot expand to are an error with both
shapes. As torch.Tensor.expand.]]},

  ---------------------------------------------------------------- copies and devices
  {name = "Tensor:contiguous", sig = "x:contiguous()", group = "copies and devices",
   doc = [[x itself when it is contiguous, else a contiguous copy with the
same values, shape and dtype. Kernels that need a row-major input call it
for you; it is for code that wants the copy on purpose. As
torch.Tensor.contiguous.]]},

  {name = "Tensor:clone", sig = "x:clone()", group = "copies and devices",
   doc = [[A contiguous copy of x with its own storage, the same shape,
dtype and values. Writing into the copy never changes x. As
torch.Tensor.clone.]]},

  {name = "Tensor:to", sig = "x:to(dtype | device)", group = "copies and devices",
   doc = [[x converted to a dtype or moved to a device, or both (x:to("cpu",
"float64"), or PyTorch's keywords x:to{dtype = "float64", device = "cpu"});
x itself when nothing changes. The dtypes are "float32", "float64", "float16",
"bfloat16", "int64", "int32" and "bool", the devices "cpu" and "cuda".
The halves round to nearest even, a float converted to int64 or int32
truncates toward zero (NaN, ±inf or a value out of the int's range is an
error naming the first one), and any nonzero number becomes true as bool.
An unknown name is an error listing the dtypes. A device move copies
(through host memory for the GPU); "cuda" is an error saying why when
qkv.cuda_available() is false. As torch.Tensor.to.]],
   example = [=[print(qkv.arange(3):to("float64"))   --> tensor([0., 1., 2.], dtype=float64)]=]},

  {name = "Tensor:cpu", sig = "x:cpu()", group = "copies and devices",
   doc = [[x on the CPU, which is x itself for a tensor already there. Same
as x:to("cpu"). As torch.Tensor.cpu.]]},

  {name = "Tensor:cuda", sig = "x:cuda()", group = "copies and devices",
   doc = [[x on the GPU, as x:to("cuda"): a copy, or x itself when it is
there already. Ops on GPU tensors run there and give the CPU's numbers
(float32 to rounding); an op mixing devices is an error naming both, but a
number (x + 1) is fine. Printing shows device='cuda'; item, tolist and
printing copy to the host. It is an error saying why (cuda: cuda is not
available: no CUDA driver, ...) when qkv.cuda_available() is false. As
torch.Tensor.cuda.]]},
}
