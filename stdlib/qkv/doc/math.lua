-- doc/math.lua: qkv.doc entries of the math that is both a tensor method
-- and a function of qkv (x:sum(2) is qkv.sum(x, 2)): arithmetic,
-- elementwise functions, comparisons, reductions, matmul and masked_fill.
-- Each record makes two entries, Tensor:name and qkv.name (its `also`).

local PROMOTE = "dtypes promote as in PyTorch: bool < int64 < float32 < " ..
  "float64, a Lua number does not widen a float tensor, an integer tensor " ..
  "with a fractional number gives float32, and bools count as int64 in " ..
  "arithmetic. "

-- x op y with broadcasting; `what` says what it computes
local function binary(name, what, extra, torch)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(y)", group = "math",
    also = "qkv." .. name .. "(x, y)", also_group = "math",
    doc = what .. ", elementwise, with x and y broadcast as in NumPy. " ..
      "Either may be a number (qkv." .. name .. "(2, x) works), but not " ..
      "both. " .. extra .. "Shapes that do not broadcast are an error: " ..
      name .. ": shapes (2, 3) and (4,) do not broadcast. As " .. torch .. "."}
end

local function compare(name, op, torch)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(y)", group = "math",
    also = "qkv." .. name .. "(x, y)", also_group = "math",
    doc = "A bool tensor, true where x " .. op .. " y elementwise, with x " ..
      "and y broadcast; y may be a number. The operands are compared in " ..
      "their promoted dtype. Shapes that do not broadcast are an error. " ..
      "As " .. torch .. "."}
end

-- f(x) elementwise; integral inputs give float32
local function unary(name, what, extra, torch)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "()", group = "math",
    also = "qkv." .. name .. "(x)", also_group = "math",
    doc = what .. ", elementwise. The result has x's shape; float dtypes " ..
      "stay, int64 and bool give float32. " .. extra .. "As " .. torch .. "."}
end

local KEEP = "With no dim it reduces every element to a 0-d tensor " ..
  "(x:sum():item() gives the number); with a dim it removes that dim, or " ..
  "keeps it as size 1 when keepdim is true, also as PyTorch's keywords in " ..
  "a table: x:" .. "%s{dim = 2, keepdim = true}. "

local function reduction(name, what, dtype, extra, torch, more)
  local args = "[dim [, keepdim" .. (more and " [, " .. more .. "]]]" or "]]")
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(" .. args .. ")",
    group = "reductions",
    also = "qkv." .. name .. "(x [, " .. args:sub(2) .. ")", also_group = "math",
    doc = what .. ". " .. KEEP:format(name) .. dtype .. extra .. "As " .. torch .. "."}
end

-- var and std's correction, PyTorch's keyword
local CORRECTION = "correction (default 1) is PyTorch's: the divisor is " ..
  "max(0, n - correction), so x:%s{dim = 2, correction = 0} divides by n " ..
  "(NumPy's ddof = 0), and n <= correction gives inf (NaN where every " ..
  "element is the same); PyTorch's older unbiased = false is " ..
  "correction = 0. "

local entries = {
  binary("add", "x + y", "Also the + operator. " .. PROMOTE, "torch.add"),
  binary("sub", "x - y", "Also the - operator; dtypes promote as for x:add. ", "torch.sub"),
  binary("mul", "x * y", "Also the * operator, which is elementwise too " ..
    "(the matrix product is x:matmul(y)); dtypes promote as for x:add. ", "torch.mul"),
  binary("div", "x / y", "Also the / operator. Integers divide as floats " ..
    "and give float32, other dtypes promote as for x:add. ", "torch.div (true division)"),
  binary("pow", "x to the power y", "Also the ^ operator; dtypes promote " ..
    "as for x:add. ", "torch.pow"),
  binary("maximum", "The larger of x and y", "x:max(y) with a tensor y " ..
    "is the same; dtypes promote as for x:add. ", "torch.maximum"),
  binary("minimum", "The smaller of x and y", "x:min(y) with a tensor y " ..
    "is the same; dtypes promote as for x:add. ", "torch.minimum"),
  binary("logaddexp", "log(e^x + e^y)", "Computed as max(x, y) + " ..
    "log1p(e^-|x - y|), which neither overflows nor loses the smaller " ..
    "term: qkv.logaddexp(1000, x) is 1000 + log1p(e^(x - 1000)), and two " ..
    "-inf give -inf. Integers and bools give float32, other dtypes " ..
    "promote as for x:add. ", "torch.logaddexp"),

  compare("eq", "==", "torch.eq; Lua's == between two tensors stays " ..
    "identity, as for any userdata, so compare values with x:eq(y)"),
  compare("ne", "~=", "torch.ne"),
  compare("lt", "<", "torch.lt; Lua's < is not defined on tensors"),
  compare("le", "<=", "torch.le"),
  compare("gt", ">", "torch.gt"),
  compare("ge", ">=", "torch.ge"),

  {name = "Tensor:neg", sig = "x:neg()", group = "math",
   also = "qkv.neg(x)", also_group = "math",
   doc = [[-x, elementwise; also the unary - operator. The result has x's
shape and dtype, except that bool gives int64. As torch.neg.]]},
  {name = "Tensor:abs", sig = "x:abs()", group = "math",
   also = "qkv.abs(x)", also_group = "math",
   doc = [[|x|, elementwise. The result has x's shape and dtype, except that
bool gives int64. As torch.abs.]]},
  unary("exp", "e to the power x", "", "torch.exp"),
  unary("log", "The natural logarithm of x", "log(0) is -inf and the log " ..
    "of a negative number NaN, as values rather than errors. ", "torch.log"),
  unary("sqrt", "The square root of x", "The root of a negative number " ..
    "is NaN, a value rather than an error. ", "torch.sqrt"),
  unary("tanh", "The hyperbolic tangent of x", "", "torch.tanh"),
  (function(r)
    r.example = [=[print(qkv.tensor{-1, 0, 1}:sigmoid())
--> tensor([0.2689, 0.5000, 0.7311])]=]
    return r
  end)(unary("sigmoid", "The logistic sigmoid of x, 1 / (1 + e^-x)",
             "It saturates to 0 and 1 without NaN at either end. ", "torch.sigmoid")),
  unary("silu", "The SiLU (swish) of x, x * sigmoid(x)", "", "torch.nn.functional.silu"),
  unary("sin", "The sine of x (radians)", "", "torch.sin"),
  unary("cos", "The cosine of x (radians)", "", "torch.cos"),
  {name = "Tensor:relu", sig = "x:relu()", group = "math", also = "qkv.relu(x)",
   also_group = "math",
   doc = [[max(x, 0), elementwise. float and int64 tensors keep their dtype
(bool gives int64), and NaN stays NaN. As torch.relu.]],
   example = [=[print(qkv.tensor{-1, 0.5}:relu())   --> tensor([0.0000, 0.5000])]=]},
  {name = "Tensor:log_softmax", sig = "x:log_softmax([dim])", group = "math",
   also = "qkv.log_softmax(x [, dim])", also_group = "math",
   doc = [[The log of softmax along dim (default the last), computed stably
as x - max - log(sum(exp(x - max))) with the sum in double: any finite
input gives a finite result. PyTorch's keywords come as a table,
x:log_softmax{dim = 1, dtype = "float64"}. A row that is all -inf gives -inf (the log of
qkv.softmax's zeros), and a NaN makes its row NaN. Integral tensors give
float32. As torch.log_softmax.]],
   example = [=[print(qkv.tensor{0, 0}:log_softmax())   --> tensor([-0.6931, -0.6931])]=]},

  {name = "Tensor:cumsum", sig = "x:cumsum(dim)", group = "reductions",
   also = "qkv.cumsum(x, dim)", also_group = "math",
   doc = [[The running sums of x along dim (1-based; negative counts from
the end): element i along dim is the sum of elements 1 to i. The result
has x's shape. float32 sums in float64 before it is rounded, on the CPU
and the GPU alike; int64 sums exactly (wrapping on overflow), and the other
integer dtypes and bool give int64. Differentiable, and PyTorch's keywords
come as a table: x:cumsum{dim = 1, dtype = "float64"}, whose dtype converts
x first and is the result's dtype (an int32 one wraps). As torch.cumsum.]],
   example = [=[print(qkv.tensor{1, 2, 3}:cumsum(1))   --> tensor([1., 3., 6.])]=]},
  reduction("sum", "The sum of the elements", "Sums of float32 accumulate " ..
    "in float64; bool and int32 give int64 and other dtypes stay, unless " ..
    "the option dtype converts x first (x:sum{dtype = \"float64\"}): then " ..
    "the result has that dtype, an int32 sum wrapping as PyTorch's. ", "",
    "torch.sum"),
  reduction("mean", "The mean of the elements", "float32 accumulates in " ..
    "float64; int64 and bool give float32, and the option dtype (a float " ..
    "one) converts x first. ", "", "torch.mean"),
  reduction("max", "The largest element",
    "Along a dim it returns two tensors, the values and their 1-based int64 " ..
    "indices. ", "With a tensor y instead of a dim, x:max(y) is " ..
    "x:maximum(y); an empty dim is an error. ", "torch.max, with indices from 1"),
  reduction("min", "The smallest element",
    "Along a dim it returns two tensors, the values and their 1-based int64 " ..
    "indices. ", "With a tensor y instead of a dim, x:min(y) is " ..
    "x:minimum(y); an empty dim is an error. ", "torch.min, with indices from 1"),
  reduction("var", "The variance of the elements, unbiased (dividing by " ..
    "n - 1) unless correction says otherwise", "int64 and bool give float32. ",
    CORRECTION:format("var"), "torch.var", "correction"),
  reduction("std", "The standard deviation of the elements, unbiased " ..
    "(dividing by n - 1) unless correction says otherwise",
    "int64 and bool give float32. ", CORRECTION:format("std"), "torch.std",
    "correction"),
  reduction("argmax", "The 1-based index of the largest element, as int64",
    "With no dim the index is into the flattened tensor. ", "The first " ..
    "of equal maxima wins; an empty dim is an error. ", "torch.argmax plus 1"),
  reduction("argmin", "The 1-based index of the smallest element, as int64",
    "With no dim the index is into the flattened tensor. ", "The first " ..
    "of equal minima wins; an empty dim is an error. ", "torch.argmin plus 1"),

  {name = "Tensor:matmul", sig = "x:matmul(y)", group = "math",
   also = "qkv.matmul(x, y)", also_group = "math",
   doc = [[The matrix product of x and y, batched over the leading dims with
broadcasting: (..., n, k) by (..., k, m) gives (..., n, m). 1-D operands
are as in PyTorch: a vector on the left is a row and on the right a column,
and that dim is dropped from the result. Both must be float32 or both
float64; mixing them is an error, as in PyTorch, and int64 or bool is
refused. Transposed views go to BLAS (sgemm, dgemm) with its transpose
flag, without a copy. Inner dims that differ are an error: matmul:
(2, 3) @ (4, 5): inner dims 3 and 4 differ. As torch.matmul.]],
   example = [=[local x = qkv.tensor{{1, 0, 1}, {0, 2, 0}}
print(x:matmul(qkv.tensor{{0.5, 0.5}, {0.6405, 0.3595}, {1, 0}}))
--> tensor([[1.5000, 0.5000],
-->         [1.2810, 0.7190]])]=]},

  {name = "qkv.einsum", sig = "qkv.einsum(spec, ...)", group = "math",
   doc = [[The Einstein summation of the operands as spec writes it: one
letter (a-z, A-Z) per dim of each operand, the terms separated by commas,
then optionally -> and the output's letters (spaces allowed), so that
"bhqd,bhkd->bhqk" is Q K^T for every batch and head and "bhqk,bhkd->bhqd"
is W V. Letters missing from the output are summed over, a letter repeated
in one operand takes its diagonal ("ii->i"; "ii->" is the trace), and
without -> the output has the letters that appear once, in alphabetical
order (capitals first). "..." stands for the dims no letter names,
broadcast across operands as batch dims ("...ij,...jk"): first in an
implicit output, summed when an explicit one leaves it out; a letter's
sizes must agree across operands or be 1 (broadcast). Each pair of operands
is permuted and reshaped for one batched matmul (BLAS), or an elementwise
product when nothing is contracted, and more than two are contracted left
to right; the operands are float32 or float64, all of one dtype (int64 and
bool are refused, as matmul refuses them), and the result is a new
contiguous tensor of at most 8 dims, as is every intermediate one. Errors
name the operand and the letter: einsum: subscript 'k' is 4 in operand 1
but 5 in operand 2. As torch.einsum.]],
   example = [=[local A = qkv.tensor{{1, 2}, {3, 4}}
print(qkv.einsum("ij,jk->ik", A, A))
--> tensor([[ 7., 10.],
-->         [15., 22.]])
print(qkv.einsum("ii", A))   --> tensor(5.)]=]},

  {name = "Tensor:masked_fill", sig = "x:masked_fill(mask, v)", group = "math",
   also = "qkv.masked_fill(x, mask, v)", also_group = "math",
   doc = [[A copy of x with v where mask is true or nonzero; a mask may have
any dtype, where PyTorch insists on bool. mask broadcasts to x's shape (not
the other way round) and v is a number or a boolean, stored in x's dtype;
a v an int64 x cannot hold (NaN, inf, beyond 2^63) is an error, where
PyTorch wraps or clamps. Note the sense: qkv.mask fills where its mask is false. A mask that does
not broadcast is an error with both shapes. As torch.masked_fill.]],
   example = [=[print(qkv.ones(2, 2):masked_fill(qkv.eye(2), 0))
--> tensor([[0., 1.],
-->         [1., 0.]])]=]},
}

-- examples of entries made by the helpers above
local EXAMPLES = {
  ["Tensor:cos"] = [=[print(qkv.tensor{0, math.pi}:cos())
--> tensor([ 1., -1.])]=],
  ["Tensor:silu"] = [=[print(qkv.tensor{-1, 0, 1}:silu())
--> tensor([-0.2689,  0.0000,  0.7311])]=],
  ["Tensor:sin"] = [=[print(qkv.tensor{0, math.pi / 2}:sin())
--> tensor([0., 1.])]=],
}
for _, e in ipairs(entries) do e.example = e.example or EXAMPLES[e.name] end

return entries
