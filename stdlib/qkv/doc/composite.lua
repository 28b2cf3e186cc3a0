-- doc/composite.lua: qkv.doc entries of PyTorch's staple functions that
-- qkv composes of its ops (issue 30; stdlib/qkv/composite/): shapes, the
-- *_like and x:new_* factories, randint, randperm, linspace, logspace, manual_seed,
-- norm, scatter, argsort, repeat_interleave, roll, flip, half, bfloat16,
-- outer, allclose.

local DIMS = "Dims are 1-based, and a negative one counts from the end. "

-- the functions that take PyTorch's keywords (composite/init.lua's KEYWORDS)
local KW = "PyTorch's keywords may come as a table in the last argument, " ..
  "named as PyTorch names the arguments; an unknown one is an error. "

-- a record that is both a method and a function of qkv (x [, p ...] when
-- every argument is optional)
local function both(name, args, group, qgroup, doc, example)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(" .. args .. ")", group = group,
    also = "qkv." .. name .. "(x" .. (args:sub(1, 1) == "[" and " [, " .. args:sub(2)
                                       or ", " .. args) .. ")",
    also_group = qgroup, doc = doc, example = example}
end

local function like(name, what, extra, example)
  return {name = "qkv." .. name, sig = "qkv." .. name .. "(x" .. extra .. " [, opts])",
    group = "making tensors",
    doc = "A tensor of x's shape, dtype and device " .. what .. ". The options " ..
      "{dtype =, device =} change the dtype and the device. As torch." .. name .. ".",
    example = example}
end

local function new(name, what, extra, example)
  return {name = "Tensor:" .. name, sig = "x:" .. name .. "(size" .. extra .. " [, opts])",
    group = "copies and devices",
    doc = "A new tensor of the given size " .. (extra == "" and
      "(a list of sizes, or the sizes as arguments: x:" .. name .. "(2, 3)) " or
      "(a list of sizes, or one size) ") .. what ..
      ", with x's dtype and device. The options {dtype =, device =} change them; " ..
      "the list may hold them too, and its sizes under size instead of as items, " ..
      (extra == "" and "x:" .. name .. "{size = {2, 3}, dtype = \"int64\"}"
                    or "x:" .. name .. "({size = {2, 3}, dtype = \"int64\"}" .. extra .. ")") ..
      "; another key is an error. " ..
      "As torch.Tensor." .. name .. ".",
    example = example}
end

return {
  both("flatten", "[start_dim [, end_dim]]", "views", "making tensors",
    [[x with dims start_dim to end_dim (default: all of them) joined into
one, a view when x's layout allows (as reshape). ]] .. DIMS .. KW .. [[A 0-d x
gives a 1-D tensor of one element. As torch.flatten.]],
    [=[print(qkv.ones(2, 3, 4):flatten(2).shape)   --> (2, 12)]=]),
  both("unflatten", "dim, sizes", "views", "making tensors",
    [[x with dim split into several of the given sizes, whose product must
be its size; one of them may be -1, inferred. ]] .. DIMS .. KW .. [[A view when
x's layout allows. As torch.unflatten.]],
    [=[print(qkv.ones(2, 12):unflatten(-1, {3, -1}).shape)   --> (2, 3, 4)]=]),
  both("chunk", "chunks [, dim]", "views", "making tensors",
    [[x cut along dim (default 1) into at most chunks pieces of ceil(n /
chunks) elements, the last one smaller, returned as that many values
(local q, k, v = y:chunk(3, -1)). ]] .. DIMS .. KW .. [[The pieces are views of
x. As torch.chunk; an empty dim gives chunks empty pieces, as there.]],
    [=[local a, b, c = qkv.arange(5):chunk(3)
print(a, b, c)   --> tensor([0., 1.])	tensor([2., 3.])	tensor([4.])]=]),
  both("split", "split_size [, dim]", "views", "making tensors",
    [[x cut along dim (default 1) into pieces of split_size elements (the
last one smaller), or of the sizes in a list, which must add up to the
dim's size. The pieces are views of x, returned as that many values. ]] ..
    DIMS .. KW .. [[(split_size is also split_size_or_sections.) As torch.split.]],
    [=[print(qkv.arange(5):split({1, 4}))   --> tensor([0.])	tensor([1., 2., 3., 4.])]=]),

  like("zeros_like", "filled with zeros", "",
    [=[print(qkv.zeros_like(qkv.ones(2, "int64")))   --> tensor([0, 0])]=]),
  like("ones_like", "filled with ones", "",
    [=[print(qkv.ones_like(qkv.zeros(2), {dtype = "float64"}))   --> tensor([1., 1.], dtype=float64)]=]),
  like("full_like", "filled with value (a number or a boolean, stored as qkv.full " ..
    "stores it)", ", value",
    [=[print(qkv.full_like(qkv.zeros(2), 7))   --> tensor([7., 7.])]=]),
  like("empty_like", "filled with zeros (qkv hands out no uninitialised memory)", "",
    [=[print(qkv.empty_like(qkv.ones(2)))   --> tensor([0., 0.])]=]),
  like("rand_like", "filled from qkv.rand's uniform [0, 1) (a float dtype is needed)", "",
    [=[print(qkv.rand_like(qkv.ones(2, 3)).shape)   --> (2, 3)]=]),
  like("randn_like", "filled from qkv.randn's standard normal (a float dtype is needed)", "",
    [=[print(qkv.randn_like(qkv.ones(2, "float64")).dtype)   --> float64]=]),

  new("new_zeros", "filled with zeros", "",
    [=[print(qkv.ones(1, "int32"):new_zeros({2}))   --> tensor([0, 0], dtype=int32)]=]),
  new("new_ones", "filled with ones", "",
    [=[print(qkv.ones(1, "float64"):new_ones(2))   --> tensor([1., 1.], dtype=float64)]=]),
  new("new_empty", "filled with zeros (qkv hands out no uninitialised memory)", "",
    [=[print(qkv.ones(1):new_empty({1, 2}))   --> tensor([[0., 0.]])]=]),
  new("new_full", "filled with value", ", value",
    [=[print(qkv.ones(1, "int64"):new_full({3}, 4))   --> tensor([4, 4, 4])]=]),

  {name = "qkv.randint", sig = "qkv.randint([low,] high, size [, opts])", group = "making tensors",
   doc = [[Random integers in [low, high) (low defaults to 0), int64, of the
given size (a list of sizes, or one size). They are floor(u * (high - low))
+ low for u qkv.rand's float64 uniforms, so qkv.manual_seed (qkv.seed)
makes them repeatable, on the CPU and the GPU alike; high - low may be at
most 2^53. The options {dtype =, device =} give another dtype (whose range
must hold the values) or device; the size list may hold them too, and its
sizes under size, as PyTorch's keyword: qkv.randint(0, 5, {size = {3}}).
As torch.randint.]],
   example = [=[qkv.manual_seed(0)
local r = qkv.randint(1, 7, {1000})
print(r.dtype, r:min():item(), r:max():item())   --> int64	1	6]=]},
  {name = "qkv.randperm", sig = "qkv.randperm(n [, opts])", group = "making tensors",
   doc = [[The integers 1 to n in a random order, int64: 1-based, as qkv's
indices, so x:index_select(1, qkv.randperm(x:size(1))) shuffles the rows
of x. The order is the one that sorts n float64 uniforms of qkv.rand, drawn
on the CPU, so qkv.manual_seed (qkv.seed) repeats it, on every device. The
options {dtype =, device =} give another dtype that holds 1 to n exactly
(int32, or a float dtype) or another device. As torch.randperm, whose
values run from 0 to n - 1.]],
   example = [=[qkv.manual_seed(0)
print(qkv.randperm(5))   --> tensor([5, 1, 4, 2, 3])]=]},
  {name = "qkv.linspace", sig = "qkv.linspace(start, end, steps [, opts])", group = "making tensors",
   doc = [[steps evenly spaced values from start to end, both included; one
step gives start alone and zero steps an empty tensor. They are computed in
float64 as PyTorch places them (from start for the first half, from end
for the rest) and rounded once into the dtype, float32 unless the options
{dtype =, device =} say otherwise. As torch.linspace.]],
   example = [=[print(qkv.linspace(-1, 1, 5))   --> tensor([-1.0000, -0.5000,  0.0000,  0.5000,  1.0000])]=]},
  {name = "qkv.logspace", sig = "qkv.logspace(start, end, steps [, base [, opts]])",
   group = "making tensors",
   doc = [[base (default 10) to the power of qkv.linspace(start, end, steps):
steps values from base^start to base^end, evenly spaced on a log scale.
They are computed in float64 and rounded once into the dtype, float32
unless the options {dtype =, device =} say otherwise. As torch.logspace.]],
   example = [=[print(qkv.logspace(0, 2, 3))   --> tensor([  1.,  10., 100.])]=]},
  {name = "qkv.manual_seed", sig = "qkv.manual_seed(seed)", group = "making tensors",
   doc = [[Seeds qkv's generator: PyTorch's name for qkv.seed. The same seed
gives the same rand, randn, randint, dropout and *_like numbers again, on
the CPU and the GPU alike. As torch.manual_seed, but it returns nothing.]],
   example = [=[qkv.manual_seed(1)
local a = qkv.randint(0, 100, {3})
qkv.manual_seed(1)
print(qkv.randint(0, 100, {3}):eq(a):all():item())   --> true]=]},

  both("norm", "[p [, dim [, keepdim [, dtype]]]]", "reductions", "math",
    [[The vector p-norm of x, (sum |x|^p)^(1/p), over dim (a dim or a list
of dims) or over all of it (no dim, or an empty list, as PyTorch's
dim=[]); keepdim keeps the reduced dims as size 1; with dtype, x is
converted to it first. ]] .. KW .. [[(x:norm(2, {dim = -1})). p
defaults to 2 ('fro' is 2 too); math.huge and -math.huge give the largest
and smallest |x|, 0 the count of nonzero elements, and any other number its
norm ('nuc' is not supported; an empty dim has no ±inf or negative
norm, no identity, and is an error, as in PyTorch). x must be a float tensor;
float16 and bfloat16 are computed in float32. Differentiable, with a zero
gradient where the norm is 0 and, for p < 1, where x is 0; the ±inf norms
split their gradient evenly among the elements whose |x| reaches them, as
torch.norm.]],
    [=[print(qkv.tensor{3, -4}:norm(), qkv.tensor{3, -4}:norm(1))   --> tensor(5.)	tensor(7.)]=]),

  both("scatter", "dim, index, src [, reduce]", "selection and indexing",
    "selection and indexing",
    [[A copy of x with src written at index along dim: for each position
of the int64 tensor index, the element there names (1-based) the place
along dim that the element of src at the same position goes to. src is a
tensor of x's dtype, at least index's size (its first elements are used),
or a number written everywhere index points. When index names one place
more than once, the last write along dim wins, as PyTorch's CPU kernel
does (PyTorch leaves it unspecified). With reduce = "add" every write is
added to its place instead (repeated places and a number src too), and
with "multiply" multiplied (for bool: or, and). ]] .. KW .. [[(src is also
value.) Differentiable in x and src, reduce = "add" too ("multiply" has no
gradient, as in PyTorch); as torch.scatter.]],
    [=[local idx = qkv.tensor({{3, 1, 3}}, "int64")
print(qkv.zeros(1, 3):scatter(2, idx, qkv.tensor{{1, 2, 3}}))   --> tensor([[2., 0., 3.]])]=]),
  {name = "Tensor:scatter_", sig = "x:scatter_(dim, index, src [, reduce])", group = "in place",
   doc = [[x:scatter(dim, index, src [, reduce]) written into x, which it
returns: src (a tensor of x's dtype or a number) goes to the 1-based places
along dim that the int64 index names. When index names one place more than
once, the last write along dim wins; with reduce = "add" or "multiply"
every write combines with the place instead. ]] .. KW .. [[As
torch.Tensor.scatter_.]],
   example = [=[local x = qkv.zeros(4)
x:scatter_(1, qkv.tensor({4, 2}, "int64"), 1)
print(x)   --> tensor([0., 1., 0., 1.])]=]},

  both("argsort", "[dim [, descending [, stable]]]", "selection and indexing",
    "selection and indexing",
    [[The 1-based int64 positions that sort x along dim (default the last),
in ascending order or descending when descending is true: the indices of
x:sort(dim, descending). The sort is stable, so equal elements keep their
order, as torch.argsort with stable = true (stable, a boolean, changes
nothing). ]] .. DIMS .. KW,
    [=[print(qkv.tensor{30, 10, 20}:argsort())   --> tensor([2, 3, 1])]=]),
  both("repeat_interleave", "repeats [, dim]", "selection and indexing",
    "selection and indexing",
    [[Each element of x repeated along dim, repeats times: repeats is a
number, or a list or int64 tensor of one count per element along dim. With
no dim x is flattened first and the result is 1-D. ]] .. DIMS .. KW .. [[As
torch.repeat_interleave; differentiable.]],
    [=[print(qkv.tensor{1, 2}:repeat_interleave({2, 3}))   --> tensor([1., 1., 2., 2., 2.])]=]),
  both("roll", "shifts [, dims]", "selection and indexing", "selection and indexing",
    [[x shifted along dims by shifts, the elements that leave one end
coming back at the other: shifts and dims are numbers or lists of as many
(a dim may appear twice, its shifts adding up). With no dims x is rolled
as if flattened. ]] .. DIMS .. KW .. [[As torch.roll; differentiable.]],
    [=[print(qkv.arange(4):roll(1))   --> tensor([3., 0., 1., 2.])]=]),
  both("flip", "dims", "selection and indexing", "selection and indexing",
    [[A copy of x reversed along each of dims, a dim or a list of distinct
dims (x:flip(1, 2) also works; PyTorch's keyword too, x:flip{dims = {1}}).
]] .. DIMS .. [[As torch.flip; differentiable.]],
    [=[print(qkv.tensor{{1, 2}, {3, 4}}:flip({1, 2}))
--> tensor([[4., 3.],
-->         [2., 1.]])]=]),

  {name = "Tensor:half", sig = "x:half()", group = "copies and devices",
   doc = [[x as float16, rounded to nearest even (x itself when it already
is): x:to("float16"). Values beyond float16's range become infinities.
Differentiable; as torch.Tensor.half.]],
   example = [=[print(qkv.tensor{1 / 3, 70000}:half())   --> tensor([0.3333,    inf], dtype=float16)]=]},
  {name = "Tensor:bfloat16", sig = "x:bfloat16()", group = "copies and devices",
   doc = [[x as bfloat16, rounded to nearest even (x itself when it already
is): x:to("bfloat16"). bfloat16 keeps float32's range with 8 bits of
precision. Differentiable; as torch.Tensor.bfloat16.]],
   example = [=[print(qkv.tensor{1 / 3}:bfloat16())   --> tensor([0.3340], dtype=bfloat16)]=]},

  {name = "Tensor:outer", sig = "x:outer(y)", group = "math",
   also = "qkv.outer(x, y)", also_group = "math",
   doc = [[The outer product of the 1-D tensors x and y: the (n, m) tensor
of x[i] * y[j]. Their dtypes promote as for *, and a tensor that is not
1-D is an error. y may come as PyTorch's keyword, {vec2 = y}.
Differentiable; as torch.outer.]],
   example = [=[print(qkv.outer(qkv.tensor{1, 2}, qkv.tensor{3, 4}))
--> tensor([[3., 4.],
-->         [6., 8.]])]=]},
  {name = "Tensor:allclose", sig = "x:allclose(y [, rtol [, atol [, equal_nan]]])",
   group = "math", also = "qkv.allclose(x, y [, rtol [, atol [, equal_nan]]])",
   also_group = "math",
   doc = [[Whether |x - y| <= atol + rtol * |y| holds everywhere, x and y
broadcast, as a Lua boolean; rtol defaults to 1e-5 and atol to 1e-8, as
PyTorch's. An infinity is close only to itself, and NaN to nothing unless
equal_nan is true. x and y must have one dtype and one device, as in
torch.allclose. ]] .. KW .. [[(qkv.allclose(x, y, {rtol = 1e-3}); y is other.)]],
   example = [=[print(qkv.ones(2):allclose(qkv.ones(2) + 1e-6))   --> true]=]},
}
