-- doc/select.lua: qkv.doc entries of selection and indexing (where, tril,
-- triu, any, all, the logical ops, index_select, gather, embedding, sort,
-- topk), clamp, mm, bmm, the dtype shorthands and the in-place ops
-- (bindings/lselect.c).

local POS = "Positions are 1-based and int64; one out of range is an error " ..
  "naming it and the dim's size. "

-- a record that is both a method and a function of qkv
local function both(name, args, group, doc, example)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(" .. args .. ")", group = group,
    also = "qkv." .. name .. "(x" .. (args ~= "" and ", " .. args or "") .. ")",
    also_group = group, doc = doc, example = example}
end

local function logical(name, what)
  return both(name, "y", "selection and indexing",
    "A bool tensor, true where " .. what .. ", elementwise with x and y " ..
    "broadcast. Nonzero counts as true in any dtype (NaN too), so x and y " ..
    "need not be bool. As torch." .. name .. ".")
end

-- in-place op: x op= y
local function inplace(name, what, torch)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(y)", group = "in place",
    doc = what .. " in place and returns x. y (a tensor or a number) broadcasts to " ..
      "x's shape, which stays; the result keeps x's dtype, and one x cannot hold " ..
      "(a float result into int64, a number into bool) is an error, as in " ..
      "PyTorch. A write into a view writes its base; a y that overlaps x is " ..
      "read whole first; an expanded x (stride 0) is an error. As " .. torch .. "."}
end

local entries = {
  {name = "qkv.where", sig = "qkv.where(cond, a, b)", group = "selection and indexing",
   doc = [[Elements of a where the bool tensor cond is true, of b elsewhere,
with cond, a and b broadcast; a and b may be numbers, and the result's
dtype is theirs promoted. x:where(cond, y) is qkv.where(cond, x, y). In
a score_mod or mask_mod it takes the symbolic values (docs/variants.md). As
torch.where.]],
   example = [=[local x = qkv.tensor{-1, 2, -3}
print(qkv.where(x:gt(0), x, 0))   --> tensor([0., 2., 0.])]=]},
  {name = "Tensor:where", sig = "x:where(cond, y)", group = "selection and indexing",
   doc = [[x where the bool tensor cond is true, y (a tensor or a number)
elsewhere, broadcast: qkv.where(cond, x, y). The result's dtype is x's
and y's promoted. As torch.Tensor.where.]]},

  both("tril", "[k]", "selection and indexing",
    [[A new tensor of x's dtype on x's device: x with zeros above the k-th
diagonal of each matrix of its last two dims (k = 0 the main one, k > 0
above it, k < 0 below): element (..., i, j) stays when j - i <= k. k is an
integer (default 0; 1.5 is an error); x has at least 2 dims, any dtype
(bool gets false) and any layout. Differentiable. As torch.tril.]],
    [=[print(qkv.ones(2, 3):tril())
--> tensor([[1., 0., 0.],
-->         [1., 1., 0.]])]=]),
  both("triu", "[k]", "selection and indexing",
    [[A new tensor of x's dtype on x's device: x with zeros below the k-th
diagonal of each matrix of its last two dims: element (..., i, j) stays
when j - i >= k. k is an integer, default 0 (the main diagonal); x has at
least 2 dims, any dtype and any layout. Differentiable. As torch.triu.]],
    [=[print(qkv.ones(2, 3):triu(1))
--> tensor([[0., 1., 1.],
-->         [0., 0., 1.]])]=]),
  both("any", "[dim [, keepdim]]", "selection and indexing",
    [[Whether any element is nonzero (true for bool), over everything (a 0-d
bool tensor) or along dim, which goes or stays as size 1 with keepdim (also
as keywords: x:any{dim = 2, keepdim = true}). An empty tensor gives false.
As torch.any.]],
    [=[print(qkv.tensor{{0, 1}, {0, 0}}:any(2))   --> tensor([ True, False])]=]),
  both("all", "[dim [, keepdim]]", "selection and indexing",
    [[Whether every element is nonzero, over everything or along dim, as
any. An empty tensor gives true. As torch.all.]],
    [=[print(qkv.tensor{{1, 0}, {2, 3}}:all(2))
--> tensor([False,  True])]=]),
  (function(r)
    r.example = [=[local a, b = qkv.tensor{true, true, false}, qkv.tensor{1, 0, 1}
print(a:logical_and(b), a:logical_or(b))
--> tensor([ True, False, False])	tensor([True, True, True])]=]
    return r
  end)(logical("logical_and", "both x and y are nonzero")),
  logical("logical_or", "x or y is nonzero"),
  logical("logical_xor", "exactly one of x and y is nonzero"),
  both("logical_not", "", "selection and indexing",
    [[A bool tensor, true where x is zero (false, 0 or -0). It has x's
shape, whatever x's dtype. As torch.logical_not.]]),

  both("index_select", "dim, index", "selection and indexing",
    [[The slices of x along dim at the positions of the 1-D int64 tensor
index, in its order (repeats allowed): the result has x's shape with
#index at dim. ]] .. POS .. [[As torch.index_select.]],
    [=[local x = qkv.tensor{{1, 2, 3}, {4, 5, 6}}
print(x:index_select(2, qkv.tensor({3, 1}, "int64")))
--> tensor([[3., 1.],
-->         [6., 4.]])]=]),
  both("gather", "dim, index", "selection and indexing",
    [=[Values of x read along dim at the positions in index, an int64 tensor
with x's number of dims and no dim larger than x's but dim: out[i][j] =
x[i][index[i][j]] for dim 2. The result has index's shape. ]=] .. POS ..
    [[As torch.gather.]],
    [=[local x = qkv.tensor{{1, 2, 3}, {4, 5, 6}}
print(x:gather(2, qkv.tensor({{3, 1}, {2, 2}}, "int64")))
--> tensor([[3., 1.],
-->         [5., 5.]])]=]),
  {name = "qkv.embedding", sig = "qkv.embedding(ids, W)", group = "selection and indexing",
   doc = [[The rows of W (num_embeddings, dim) at the int64 ids (any shape):
the result is (ids..., dim). ]] .. POS .. [[As torch.nn.functional.embedding.]],
   example = [=[local W = qkv.tensor{{0, 0}, {1, 1}, {2, 2}}
print(qkv.embedding(qkv.tensor({3, 1}, "int64"), W))
--> tensor([[2., 2.],
-->         [0., 0.]])]=]},
  both("sort", "[dim [, descending]]", "selection and indexing",
    [[x sorted along dim (default the last), ascending or descending:
returns the values and their 1-based positions in x (int64). The sort is
stable, and NaN sorts above every number, as in PyTorch. As torch.sort.]],
    [=[local v, i = qkv.tensor{3, 1, 2}:sort()
print(v, i)   --> tensor([1., 2., 3.])	tensor([2, 3, 1])]=]),
  both("topk", "k [, dim [, largest]]", "selection and indexing",
    [[The k largest elements along dim (default the last), or the k smallest
when largest is false, sorted, and their 1-based positions. k must be
between 0 and the dim's size. As torch.topk.]],
    [=[local v, i = qkv.tensor{{3, 1, 5}, {2, 9, 0}}:topk(2)
print(v)
print(i)
--> tensor([[5., 3.],
-->         [9., 2.]])
--> tensor([[3, 1],
-->         [2, 1]])]=]),

  {name = "qkv.layer_norm", sig = "qkv.layer_norm(x, shape [, w [, b [, eps]]])",
   group = "layers",
   doc = [[x normalised over its last dims given by shape (a size or a table
of sizes, which must be x's trailing sizes): (x - mean) / sqrt(var + eps)
* w + b, with the biased variance and eps 1e-5 by default. The mean and
variance accumulate in double for float32 too, in one fused kernel. w and
b (each optional) have exactly that shape. As
torch.nn.functional.layer_norm.]],
   example = [=[print(qkv.layer_norm(qkv.tensor{{1, 3}}, 2))   --> tensor([[-1.0000,  1.0000]])]=]},
  {name = "qkv.rms_norm", sig = "qkv.rms_norm(x, shape [, weight [, eps]])",
   group = "layers",
   doc = [[x normalised by its root mean square over its last dims given by
shape (a size or a table of sizes, x's trailing sizes): x / sqrt(mean(x^2)
+ eps) * weight. eps nil is the machine epsilon of the dtype x is computed
in (float64's, else float32's: the halves are computed in float32), as
PyTorch's kernel. The mean accumulates in double, in one fused kernel;
weight (optional) has exactly that shape. As
torch.nn.functional.rms_norm.]],
   example = [=[print(qkv.rms_norm(qkv.tensor{{3, 4}}, 2))   --> tensor([[0.8485, 1.1314]])]=]},
  {name = "qkv.dropout", sig = "qkv.dropout(x [, p [, training]])", group = "layers",
   doc = [[x with each element zeroed with probability p (default 0.5) and
the rest scaled by 1 / (1 - p), while training (the default); x itself when
training is false or p is 0. The mask is qkv.rand(x.shape) >= p, drawn
from qkv's generator (Philox), so qkv.seed makes it reproducible. As
torch.nn.functional.dropout.]],
   example = [=[qkv.seed(1)
print(qkv.dropout(qkv.ones(4), 0.5), qkv.dropout(qkv.ones(2), 0.5, false))
--> tensor([2., 2., 2., 2.])	tensor([1., 1.])]=]},

  both("clamp", "[min [, max]]", "math",
    [[x with every element brought into [min, max]: max(x, min), then
min(., max). Either bound may be nil, a number or a tensor that
broadcasts; at least one must be given. NaN stays NaN. Bool tensors are an
error. As torch.clamp.]],
    [=[print(qkv.tensor{-2, 0.5, 3}:clamp(0, 1))   --> tensor([0.0000, 0.5000, 1.0000])]=]),
  both("mm", "y", "math",
    [[The matrix product of two 2-D tensors, no broadcasting: matmul's
strict form. Any other shapes are an error naming both. As torch.mm.]],
    [=[print(qkv.mm(qkv.eye(2), qkv.tensor{{1, 2}, {3, 4}}))
--> tensor([[1., 2.],
-->         [3., 4.]])]=]),
  both("bmm", "y", "math",
    [[The batched matrix product of two 3-D tensors (b, n, m) and (b, m, p),
no broadcasting. Batches that differ are an error naming both shapes. As
torch.bmm.]]),

  {name = "Tensor:float", sig = "x:float()", group = "copies and devices",
   doc = [[x as float32, as x:to("float32"). It is x itself when x already
is float32, else a copy. As torch.Tensor.float.]]},
  {name = "Tensor:double", sig = "x:double()", group = "copies and devices",
   doc = [[x as float64, as x:to("float64"). It is x itself when x already
is float64, else a copy. As torch.Tensor.double.]]},
  {name = "Tensor:long", sig = "x:long()", group = "copies and devices",
   doc = [[x as int64, as x:to("int64"). Floats truncate toward zero; NaN,
±inf and a value outside int64's range are an error naming the first such
element (PyTorch gives an undefined value). As torch.Tensor.long.]]},
  {name = "Tensor:int", sig = "x:int()", group = "copies and devices",
   doc = [[x as int32, as x:to("int32"). Floats truncate toward zero; NaN,
±inf and a value outside int32's range are an error naming the first such
element, while int64 values wrap as C's cast (and PyTorch's) does. As
torch.Tensor.int.]]},
  {name = "Tensor:bool", sig = "x:bool()", group = "copies and devices",
   doc = [[x as bool, as x:to("bool"). Nonzero (NaN too) is true. As
torch.Tensor.bool.]]},

  (function(r)
    r.example = [=[local x = qkv.ones(3)
x:narrow(1, 2, 2):add_(10)
print(x)
--> tensor([ 1., 11., 11.])]=]
    return r
  end)(inplace("add_", "Adds y to x", "torch.Tensor.add_")),
  inplace("sub_", "Subtracts y from x", "torch.Tensor.sub_"),
  inplace("mul_", "Multiplies x by y", "torch.Tensor.mul_"),
  inplace("div_", "Divides x by y (an integral x cannot hold the quotient)",
          "torch.Tensor.div_"),
  {name = "Tensor:scatter_add_", sig = "x:scatter_add_(dim, index, src)", group = "in place",
   doc = [=[Adds src into x at the positions index gives along dim, gather's
inverse: x[i][index[i][j]] += src[i][j] for dim 2, repeated positions adding
up, and returns x. index (int64, 1-based) has x's dims, none larger than
src's (only src's part that index covers is added) nor, but at dim, than
x's. float32, float64, int32 and int64. As torch.Tensor.scatter_add_.]=],
   example = [=[local x = qkv.zeros(3)
print(x:scatter_add_(1, qkv.tensor({1, 3, 1}, "int64"), qkv.tensor{1, 2, 3}))   --> tensor([4., 0., 2.])]=]},
  {name = "Tensor:index_add_", sig = "x:index_add_(dim, index, src)", group = "in place",
   doc = [[Adds the slices of src along dim into x at the positions of the
1-D int64 index (1-based), repeated positions adding up, and returns x:
index_select's inverse, and embedding's gradient. src has x's shape but
#index at dim. As torch.Tensor.index_add_.]],
   example = [=[local x = qkv.zeros(2, 2)
print(x:index_add_(1, qkv.tensor({2, 2}, "int64"), qkv.ones(2, 2)))
--> tensor([[0., 0.],
-->         [2., 2.]])]=]},

  {name = "Tensor:fill_", sig = "x:fill_(v)", group = "in place",
   doc = [[Sets every element of x to the number v and returns x. A value
x's dtype cannot hold is an error (1e300 into int64). As
torch.Tensor.fill_.]],
   example = [=[local x = qkv.zeros(2, 3)
x:narrow(2, 2, 2):fill_(7)
print(x)
--> tensor([[0., 7., 7.],
-->         [0., 7., 7.]])]=]},
  {name = "Tensor:zero_", sig = "x:zero_()", group = "in place",
   doc = [[Sets every element of x to 0 and returns x. A write into a view
writes its base. As torch.Tensor.zero_.]]},
  {name = "Tensor:copy_", sig = "x:copy_(src)", group = "in place",
   doc = [[Copies src into x (converting its dtype, broadcasting it to x's
shape) and returns x. A src that overlaps x is read whole first, as
through a temporary. A float src with a value that an integer x cannot
hold (NaN, ±inf, out of range) is an error that leaves x unchanged. As
torch.Tensor.copy_.]],
   example = [=[local x = qkv.zeros(2, 3)
x:copy_(qkv.tensor{1, 2, 3})
print(x)
--> tensor([[1., 2., 3.],
-->         [1., 2., 3.]])]=]},
  {name = "Tensor:clamp_", sig = "x:clamp_([min [, max]])", group = "in place",
   doc = [[x:clamp(min, max) written into x, which is returned. A float
bound on an integral x is an error, as the result cannot be held. As
torch.Tensor.clamp_.]]},
  {name = "Tensor:masked_fill_", sig = "x:masked_fill_(mask, v)", group = "in place",
   doc = [[Sets x to the number v where mask (broadcast to x's shape) is true
and returns x. A v x's dtype cannot hold is an error. As
torch.Tensor.masked_fill_.]]},
}

-- examples of entries made by the helpers above
local EXAMPLES = {
  ["Tensor:bmm"] = [=[print(qkv.bmm(qkv.ones(2, 1, 3), qkv.ones(2, 3, 1)).shape)
--> (2, 1, 1)]=],
  ["Tensor:bool"] = [=[print(qkv.tensor{0, 0.5}:bool())
--> tensor([False,  True])]=],
  ["Tensor:clamp_"] = [=[print(qkv.tensor{-2, 0.5, 3}:clamp_(0, 1))
--> tensor([0.0000, 0.5000, 1.0000])]=],
  ["Tensor:div_"] = [=[print(qkv.tensor{1, 2}:div_(4))
--> tensor([0.2500, 0.5000])]=],
  ["Tensor:double"] = [=[print(qkv.tensor{0.5}:double())
--> tensor([0.5000], dtype=float64)]=],
  ["Tensor:float"] = [=[print(qkv.tensor({1, 2}, "int64"):float())
--> tensor([1., 2.])]=],
  ["Tensor:logical_not"] = [=[print(qkv.tensor{0, 2}:logical_not(), ~qkv.tensor{true, false})
--> tensor([ True, False])	tensor([False,  True])]=],
  ["Tensor:logical_or"] = [=[print(qkv.tensor{true, false}:logical_or(qkv.tensor{false, false}))
--> tensor([ True, False])]=],
  ["Tensor:logical_xor"] = [=[print(qkv.tensor{1, 0}:logical_xor(qkv.tensor{1, 1}))
--> tensor([False,  True])]=],
  ["Tensor:long"] = [=[print(qkv.tensor{2.7, -2.7}:long())
--> tensor([ 2, -2])]=],
  ["Tensor:int"] = [=[print(qkv.tensor{2.7, -2.7}:int())
--> tensor([ 2, -2], dtype=int32)]=],
  ["Tensor:masked_fill_"] = [=[local x = qkv.zeros(3)
print(x:masked_fill_(qkv.tensor{true, false, true}, 7))
--> tensor([7., 0., 7.])]=],
  ["Tensor:mul_"] = [=[local x = qkv.ones(2, 2)
x[1]:mul_(3)
print(x)
--> tensor([[3., 3.],
-->         [1., 1.]])]=],
  ["Tensor:sub_"] = [=[local x = qkv.ones(2)
print(x:sub_(0.5))
--> tensor([0.5000, 0.5000])]=],
  ["Tensor:where"] = [=[local x = qkv.tensor{1, -2, 3}
print(x:where(x:gt(0), 0))
--> tensor([1., 0., 3.])]=],
  ["Tensor:zero_"] = [=[local x = qkv.ones(3)
x:narrow(1, 1, 2):zero_()
print(x)
--> tensor([0., 0., 1.])]=],
}
for _, e in ipairs(entries) do e.example = e.example or EXAMPLES[e.name] end

return entries
