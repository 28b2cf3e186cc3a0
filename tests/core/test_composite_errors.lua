-- test_composite_errors.lua: every bad argument to PyTorch's functions
-- that qkv composes of its ops (issue 30; stdlib/qkv/composite/; their
-- values are test_composite_shapes_factories.lua's and
-- test_composite_math_select.lua's) is an error naming the function, at
-- the line of the script that called.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails

---------------------------------------------------------------- errors

TestErrors = {}

function TestErrors:testShapes()
  local x = qkv.ones(2, 3, 4)
  fails({"flatten: start_dim 3 comes after end_dim 1", "(2, 3, 4)"}, x.flatten, x, 3, 1)
  fails("flatten: start_dim 4 out of range [-3, 3] for x of shape (2, 3, 4)", x.flatten, x, 4)
  fails("flatten: end_dim must be an integer, got 2.5", qkv.flatten, x, 1, 2.5)
  fails("flatten: x must be a tensor, got number", qkv.flatten, 3)
  fails("unflatten: sizes {5, -1} cannot make dim 2 of size 3", x.unflatten, x, 2, {5, -1})
  fails("unflatten: sizes {2, 2} multiply to 4, but dim 2 of x (2, 3, 4) is 3", x.unflatten, x, -2, {2, 2})
  fails("unflatten: sizes has more than one -1", x.unflatten, x, 1, {-1, -1})
  fails("unflatten: sizes is empty", x.unflatten, x, 1, {})
  fails("unflatten: sizes must be a list of integers, got number", x.unflatten, x, 1, 2)
  fails("chunk: chunks must be positive, got 0", x.chunk, x, 0)
  fails("chunk: dim -4 out of range [-3, 3]", x.chunk, x, 2, -4)
  fails("chunk: chunks must be an integer, got 1.5", x.chunk, x, 1.5)
end

function TestErrors:testSplit()
  local x = qkv.ones(2, 3, 4)
  fails("split: split_sizes {1, 1} add up to 2, but dim 2 of x (2, 3, 4) is 3", x.split, x, {1, 1}, 2)
  fails("split: split_size must be positive, got 0", x.split, x, 0)
  fails("split: split_size must be positive, got -1", x.split, x, -1)
  fails("split: split_sizes[2] is -1", x.split, x, {3, -1}, 2)
  fails("split: split_size must be an integer or a list of integers, got string", x.split, x, "2")
end

function TestErrors:testFactories()
  local x = qkv.ones(2)
  fails("zeros_like: unknown option 'dtpye' (did you mean 'dtype'?)", qkv.zeros_like, x, {dtpye = "int64"})
  fails("ones_like: unknown dtype 'float8'", qkv.ones_like, x, {dtype = "float8"})
  fails("full_like: unknown device 'gpu' (cpu, cuda)", qkv.full_like, x, 1, {device = "gpu"})
  fails("full_like: fill_value must be a number or a boolean, got nil", qkv.full_like, x)
  fails("empty_like: options must be a table, got string", qkv.empty_like, x, "int64")
  fails("randn_like: random tensors are floats, and x is int64", qkv.randn_like, qkv.ones(2, "int64"))
  fails("rand_like: x must be a tensor, got table", qkv.rand_like, {1, 2})
  fails("new_zeros: size[2] must be an integer, got 2.5", x.new_zeros, x, {1, 2.5})
  fails("new_ones: size: size 1 is negative (-1)", x.new_ones, x, -1)
  fails("new_zeros: size 2 must be an integer, got string", x.new_zeros, x, 2, "3", {})
  fails("new_zeros: size[2] must be an integer, got 1.5", x.new_zeros, x, 2, 1.5)
  fails("new_full: fill_value must be a number or a boolean, got table", x.new_full, x, {2}, {})
  fails("randint: low 3 must be less than high 3", qkv.randint, 3, 3, {2})
  fails("randint: high must be an integer, got 2.5", qkv.randint, 0, 2.5, {2})
  fails("randint: size is missing", qkv.randint, 0, 5)
  fails("randint: high - low must be at most 2^53", qkv.randint, math.mininteger, math.maxinteger, {1})
  fails("randint: [0, 3000000000) does not fit in int32", qkv.randint, 0, 3000000000, {1}, {dtype = "int32"})
  fails("linspace: steps must be non-negative, got -1", qkv.linspace, 0, 1, -1)
  fails("linspace: steps must be an integer, got 2.5", qkv.linspace, 0, 1, 2.5)
  fails("linspace: end must be a number, got string", qkv.linspace, 0, "1", 2)
  fails("logspace: base must be a number, got string", qkv.logspace, 0, 1, 2, "e")
  fails("manual_seed: seed must be an integer, got 1.5", qkv.manual_seed, 1.5)
end

function TestErrors:testNorm()
  local x = qkv.ones(2, 3)
  fails("norm: x must be a float tensor, got int64 (convert it with x:float())", qkv.norm, qkv.ones(2, "int64"))
  fails("norm: p = 'nuc' (the nuclear norm) is not supported", x.norm, x, "nuc")
  fails("norm: p must be a number, math.huge, -math.huge or 'fro', got 'l2'", x.norm, x, "l2")
  fails("norm: p must be a number, math.huge, -math.huge or 'fro', got nan", x.norm, x, 0 / 0)
  fails("norm: dim 3 out of range [-2, 2] for x of shape (2, 3)", x.norm, x, 2, 3)
  fails("norm: dim names dim 1 twice", x.norm, x, 2, {1, -2})
  fails("norm: keepdim must be a boolean, got number", x.norm, x, 2, 1, 1)
  fails("norm: unknown option 'dims' (did you mean 'dim'?)", x.norm, x, 2, {dims = -1})
  fails("norm: unknown option 'keep_dim' (did you mean 'keepdim'?)", x.norm, x, {keep_dim = true})
  fails("norm: dim is given twice, as an argument and as an option", x.norm, x, 2, 1, {dim = 2})
  fails("norm: unknown key 'keepdim' in dim", x.norm, x, 2, {1, keepdim = true})
  fails("norm: dtype must be a floating-point dtype, got int64", x.norm, x, {dtype = "int64"})
  fails("norm: 5 arguments before the options table, at most 4", x.norm, x, 2, 1, true,
        "float64", 1, {})
end

-- a table a staple takes holds what it knows and nothing else: a list its
-- items, options their names (issue 46)
function TestErrors:testTablesHoldNothingElse()
  local x = qkv.ones(2, 3)
  fails("flip: unknown option 'dim' (did you mean 'dims'?)", x.flip, x, {dim = {1}})
  fails("flip: unknown key 'dims' in dims (it holds its 1 item only)", x.flip, x, {1, dims = 1})
  fails("flip: dims has key 3 past its 1 item", x.flip, x, {1, [3] = 2})
  fails("unflatten: unknown key 'x' in sizes (it holds its 2 items only)",
        x.unflatten, x, 2, {3, 1, x = 1})
  fails("split: unknown key 'dim' in split_sizes", x.split, x, {1, 1, dim = 1})
  fails("roll: unknown key 'n' in shifts", x.roll, x, {1, n = 1}, {1})
  fails("roll: unknown option 'dim' (did you mean 'dims'?)", x.roll, x, {shifts = 1, dim = 1})
  fails("repeat_interleave: unknown key 'dim' in repeats", x.repeat_interleave, x, {1, 2, dim = 1})
  fails("argsort: unknown option 'decending' (did you mean 'descending'?)", x.argsort, x,
        {decending = true})
  fails("argsort: stable must be a boolean, got number", x.argsort, x, {stable = 1})
  fails("allclose: unknown option 'tol'", qkv.allclose, x, x, {tol = 1})
  fails("chunk: chunks is given twice, as an argument and as an option", x.chunk, x, 2,
        {chunks = 2})
  fails("new_zeros: unknown key 'dtyp' in size (did you mean 'dtype'?)", x.new_zeros, x,
        {2, dtyp = "int64"})
  fails("new_zeros: the sizes are given twice, as items and as 'size'", x.new_zeros, x,
        {2, size = {2}})
  fails("new_zeros: 'size' must be a table of sizes, got number", x.new_zeros, x, {size = 2})
  fails("new_zeros: the dtype is given twice", x.new_zeros, x, {2, dtype = "int64"},
        {dtype = "int32"})
  fails("new_zeros: takes size and options, got 1 more argument", x.new_zeros, x, {2}, {}, 3)
  fails("new_full: takes size, fill_value and options, got 1 more argument", x.new_full, x,
        {2}, 1, {}, 3)
  fails("new_ones: unknown key 'x' in 'size'", x.new_ones, x, {size = {2, x = 1}})
  fails("new_ones: unknown dtype 'float8'", x.new_ones, x, {2, dtype = "float8"})
  fails("randint: unknown key 'sizes' in size (did you mean 'size'?)", qkv.randint, 0, 5,
        {sizes = {3}})
  fails("randint: the device is given twice", qkv.randint, 0, 5, {3, device = "cpu"},
        {device = "cpu"})
end

function TestErrors:testScatter()
  local x = qkv.zeros(3, 4)
  local I = function(t) return qkv.tensor(t, "int64") end
  fails("scatter: index 5 is out of range for dim 2 of size 4", x.scatter, x, 2, I{{5}}, 1)
  fails("scatter: index must be an int64 tensor, got float32", x.scatter, x, 2, qkv.ones(1, 1), 1)
  fails("scatter: index (1,) must have as many dims as x (3, 4)", x.scatter, x, 2, I{1}, 1)
  fails("scatter: src is float64 but x is float32; convert src with src:to(\"float32\")",
        x.scatter, x, 2, I{{1}}, qkv.ones(1, 1, "float64"))
  fails("scatter: index (1, 2) must be no larger than x (3, 4) apart from dim 2 and no larger than src (1, 1)",
        qkv.scatter, x, 2, I{{1, 2}}, qkv.ones(1, 1))
  fails("scatter: index (4, 1) must be no larger than x (3, 4) apart from dim 2",
        qkv.scatter, x, 2, I{{1}, {1}, {1}, {1}}, 1)
  fails("scatter: src must be a tensor, got string", x.scatter, x, 2, I{{1}}, "1")
  fails("scatter_: dim 3 out of range [-2, 2]", x.scatter_, x, 3, I{{1}}, 1)
  fails('scatter: reduce must be "add" or "multiply", got \'mean\'', x.scatter, x, 2, I{{1}}, 1,
        "mean")
  fails('scatter_: reduce must be "add" or "multiply", got number', x.scatter_, x, 2, I{{1}}, 1,
        3)
  fails("scatter: unknown option 'reduc' (did you mean 'reduce'?)", x.scatter, x, 2, I{{1}},
        1, {reduc = "add"})
  fails("scatter: value is given twice, as 'src' and as 'value'", x.scatter, x,
        {dim = 2, index = I{{1}}, src = qkv.ones(1, 1), value = 1})
  fails("scatter: index 5 is out of range for dim 2 of size 4", x.scatter, x, 2, I{{5}}, 1,
        "multiply")
  -- a failed scatter_ leaves x as it was
  lu.assertEquals(x:sum():item(), 0)
end

function TestErrors:testSelection()
  local x = qkv.ones(2, 3)
  fails("argsort: descending must be a boolean, got number", x.argsort, x, 1, 1)
  fails("argsort: dim 3 out of range [-2, 2]", x.argsort, x, 3)
  fails("flip: dims names dim 2 twice", x.flip, x, {2, -1})
  fails("flip: dims is missing", x.flip, x)
  fails("flip: dims[1] must be an integer, got 0.5", x.flip, x, {0.5})
  fails("roll: shifts and dims must be as many, got 2 and 1", x.roll, x, {1, 2}, 1)
  fails("roll: with no dims, shifts must be one integer, got 2 of them", x.roll, x, {1, 2})
  fails("roll: shifts is missing", x.roll, x)
  fails("roll: dims 3 out of range [-2, 2] for x of shape (2, 3)", x.roll, x, 1, 3)
  fails("repeat_interleave: repeats must be non-negative, got -1", x.repeat_interleave, x, -1)
  fails("repeat_interleave: repeats has 2 values but dim 2 of x (2, 3) has 3",
        x.repeat_interleave, x, qkv.tensor({1, 2}, "int64"), 2)
  fails("repeat_interleave: repeats must be non-negative, got -2",
        x.repeat_interleave, x, {1, -2}, 1)
  fails("repeat_interleave: repeats must be an int64 tensor, got float32",
        x.repeat_interleave, x, qkv.ones(2), 1)
  fails("repeat_interleave: repeats must be an integer, got 1.5", x.repeat_interleave, x, 1.5)
end

function TestErrors:testProducts()
  fails("outer: a and b must be 1-D, got (2, 2) and (2,)", qkv.outer, qkv.ones(2, 2), qkv.ones(2))
  fails("outer: b must be a tensor, got number", qkv.outer, qkv.ones(2), 2)
  local a = qkv.ones(2)
  fails("allclose: a is float32 but b is float64; convert one", qkv.allclose, a, qkv.ones(2, "float64"))
  fails("allclose: a (2,) and b (3,) do not broadcast", a.allclose, a, qkv.ones(3))
  fails("allclose: rtol must be a non-negative number, got -1", qkv.allclose, a, a, -1)
  fails("allclose: equal_nan must be a boolean, got number", qkv.allclose, a, a, 0, 0, 1)
end

-- errors point at the line of the script that called
function TestErrors:testErrorsAtTheCallersLine()
  local ok, err = pcall(function() return qkv.ones(2):chunk(0) end)
  lu.assertFalse(ok)
  lu.assertStrMatches(err, ".*test_composite_errors%.lua:%d+: chunk: chunks must be positive, got 0")
end
