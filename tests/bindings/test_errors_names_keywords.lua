-- test_errors_names_keywords.lua: a name that qkv, a library or a tensor
-- does not have is an error at the script's line naming the nearest name;
-- an argument past those a function takes is an error; an options table
-- as the last argument holds PyTorch's keywords, and every key it holds is
-- understood or an error naming the closest (docs/tensors.md, "Errors").
-- Bad argument values are test_errors_arguments.lua's.
local lu = require "luaunit"

local function M(r, c) return qkv.ones(r, c) end
-- PyTorch's dim 0 (test_errors_arguments.lua's TestFromOne), in a keyword
local DIM0 = "dim 0 out of range [-2, 2]: qkv counts dims from 1, so PyTorch's dim 0 is dim 1 here"

---------------------------------------------------------------- names

-- reading a name that qkv, a library table or a tensor does not have is an
-- error at the script's line naming the nearest name, not a nil that fails
-- later as "attempt to call a nil value"
TestMissingNames = {}

local HERE = "test_errors_names_keywords%.lua:%d+: "

-- f() fails at this file's line with exactly `want` after the place
local function missing(want, f)
  local ok, msg = pcall(f)
  lu.assertFalse(ok, want)
  lu.assertEquals(type(msg), "string")
  local place, rest = msg:match("^(.-" .. HERE .. ")(.*)$")
  lu.assertNotNil(place, msg)
  lu.assertEquals(rest, want)
  return msg
end

-- a function both qkv and the tensor methods hold (sum) has one name in
-- argument errors where the call site gives none (through pcall, or
-- autograd's rules): Lua finds it by walking package.loaded, whose order
-- changes from process to process, so each run is a fresh process
-- an argument past those a function takes is an error, never ignored:
-- PyTorch's F.gelu(x, approximate = "tanh") would else give the erf form
function TestMissingNames:testExtraArgumentsAreErrors()
  local x = qkv.tensor{-1, 0, 2}
  local F = qkv.nn.functional
  for _, c in ipairs{{qkv.gelu, "gelu", {approximate = "tanh"}, "table"},
                     {F.gelu, "gelu", {approximate = "tanh"}, "table"},
                     {qkv.relu, "relu", 1, "number"}, {qkv.exp, "exp", "x", "string"}} do
    local ok, msg = pcall(c[1], x, c[3])
    lu.assertFalse(ok)
    lu.assertEquals(msg, c[2] .. ": takes 1 argument, got 2 (argument #2 is a " .. c[4] .. ")")
  end
  -- and so where x requires grad: autograd's rule took x alone, so
  -- F.gelu(x, "tanh") gave the exact gelu(1) = 0.8413447 for PyTorch's
  -- tanh 0.8411920, silently
  local xg = qkv.tensor({1.0}, "float64"):requires_grad_()
  for _, c in ipairs{{F.gelu, "gelu", "tanh", "string"}, {F.silu, "silu", true, "boolean"},
                     {qkv.exp, "exp", "x", "string"}} do
    local ok, msg = pcall(c[1], xg, c[3])
    lu.assertFalse(ok, c[2])
    lu.assertEquals(msg, c[2] .. ": takes 1 argument, got 2 (argument #2 is a " .. c[4] .. ")")
  end
  lu.assertEquals((-xg):tolist(), {-1})
  -- softmax and log_softmax take dim alone: PyTorch's x.softmax(1, torch.float64) as
  -- x:softmax(2, "float64") gave float32 (0.2689414 at {1, 2}, 0.26894142136999510 in
  -- float64) where it is dtype's option, x:softmax{dim = 2, dtype = "float64"}
  local r = qkv.tensor{{1, 2}}
  for _, name in ipairs{"softmax", "log_softmax"} do
    for _, g in ipairs{false, true} do
      local y = g and r:clone():requires_grad_() or r
      local ok, msg = pcall(qkv[name], y, 2, "float64")
      lu.assertFalse(ok, name)
      lu.assertEquals(msg, name .. ": takes 2 arguments, got 3 (argument #3 is a string)")
    end
    lu.assertEquals(r[name](r, 2, {dtype = "float64"}).dtype, "float64")
    lu.assertEquals(r[name](r, 2, nil).dtype, "float32")
  end
  -- the reductions and cumsum likewise: x:sum(2, false, "float64") and
  -- x:cumsum(2, "float64") gave float32 sums, dtype's option ignored as a
  -- positional (PyTorch's dtype is keyword-only), and var's a fifth
  for _, c in ipairs{{"sum", {2, false, "float64"}, 3}, {"mean", {2, false, "float64"}, 3},
                     {"max", {2, false, 1}, 3}, {"min", {2, false, 1}, 3},
                     {"argmax", {2, false, 1}, 3}, {"argmin", {2, false, 1}, 3},
                     {"var", {2, false, 0, 1}, 4}, {"std", {2, false, 0, 1}, 4},
                     {"cumsum", {2, "float64"}, 2}} do
    local ok, msg = pcall(r[c[1]], r, table.unpack(c[2]))
    lu.assertFalse(ok, c[1])
    lu.assertStrContains(msg, ("%s: takes %d arguments, got %d"):format(c[1], c[3], c[3] + 1))
  end
  lu.assertEquals(r:sum(2, false, {dtype = "float64"}).dtype, "float64")
  lu.assertEquals(r:cumsum(2, {dtype = "float64"}):tolist(), {{1, 3}})
  lu.assertEquals(r:var(2, false, 0):tolist(), {0.25})
  lu.assertEquals(qkv.gelu(xg, nil):size(1), 1)
  -- trailing nils are no arguments, and unary minus still works
  lu.assertEquals(qkv.relu(x, nil):tolist(), {0, 0, 2})
  lu.assertEquals((-x):tolist(), {1, 0, -2})
  lu.assertEquals(x:gelu():size(1), 3)
end

function TestMissingNames:testArgumentErrorNamesAreStable()
  local S = dofile("tests/helpers/shell.lua")
  local code = "local x = qkv.ones(2) io.write(select(2, pcall(x.sum, x, 3)))"
  for _ = 1, 8 do
    local out = S.exe(arg[-1], "-e", code)
    lu.assertEquals(out, "bad argument #2 to 'qkv.sum' (dim 3 out of range [-1, 1])")
  end
  -- a method the module lacks is named as a method
  local out = S.exe(arg[-1], "-e", "local x = qkv.ones(2) io.write(select(2, pcall(x.view, x, 'a')))")
  lu.assertEquals(out, "bad argument #2 to 'qkv.Tensor.view' (size expected, got string)")
end

function TestMissingNames:testQkv()
  local x = M(2, 3)
  missing("qkv has no function 'softmaxx' (did you mean 'softmax'?)",
          function() return qkv.softmaxx(x) end)
  missing("qkv has no function 'bucketize' (help(qkv) lists what it has)",
          function() return qkv.bucketize(5) end)
  missing("qkv has no function 'sofmax' (did you mean 'softmax'?)", function() return qkv.sofmax end)
  -- a lazily loaded library's name is suggested too
  missing("qkv has no function 'einsun' (did you mean 'einsum'?)", function() return qkv.einsun end)
  -- one slip per four letters: 'sofmx' is two from softmax, too far for 5 letters
  missing("qkv has no function 'sofmx' (help(qkv) lists what it has)", function() return qkv.sofmx end)
  missing("qkv has no function 'log_sofmaxx' (did you mean 'log_softmax'?)",
          function() return qkv.log_sofmaxx end)
  -- what is there still reads, lazy names load, and internal or non-string
  -- keys stay nil for the code that probes them
  lu.assertEquals(type(qkv.softmax), "function")
  lu.assertEquals(type(qkv.einsum), "function")
  lu.assertEquals(qkv.float16, "float16")
  lu.assertNil(qkv._no_such_hook)
  lu.assertNil(qkv[1])
  lu.assertNil(rawget(qkv, "softmaxx"))
  lu.assertTrue(pcall(function() return qkv.Tensor end))
end

function TestMissingNames:testLibraries()
  missing("qkv.plot has no function 'bar' (help(qkv.plot) lists what it has)",
          function() return qkv.plot.bar({1, 2, 3}) end)
  missing("qkv.plot has no function 'heatmpa' (did you mean 'heatmap'?)",
          function() return qkv.plot.heatmpa end)
  missing("qkv.nn has no class or function 'Linaer' (did you mean 'Linear'?)",
          function() return qkv.nn.Linaer(2, 3) end)
  missing("qkv.nn has no class or function 'Conv2d' (help(qkv.nn) lists what it has)",
          function() return qkv.nn.Conv2d end)
  missing("qkv.optim has no class or function 'SDG' (did you mean 'SGD'?)",
          function() return qkv.optim.SDG end)
  missing("qkv.optim has no class or function 'Adamw' (did you mean 'AdamW'?)",
          function() return qkv.optim.Adamw end)
  lu.assertEquals(type(qkv.plot.heatmap), "function")
  lu.assertEquals(tostring(qkv.nn.Linear(2, 3).weight.shape), "(3, 2)")
  lu.assertEquals(type(qkv.optim.Adam), "function")
  lu.assertNil(qkv.plot._no_such_hook)
  lu.assertNil(qkv.nn._no_such_hook)
  -- help names the namespace that the message sends the reader to
  lu.assertStrContains(require("qkv.doc").text(qkv.optim), "qkv.optim")
end

function TestMissingNames:testTensor()
  local x = M(2, 3)
  -- PyTorch's dtype shorthands: those qkv has convert ('half' is not
  -- taken for a slip of 'all'), those it lacks say what to use
  lu.assertEquals(x:half().dtype, "float16")
  lu.assertEquals(x:bfloat16().dtype, "bfloat16")
  lu.assertEquals(x:long().dtype, "int64")
  local msg = missing("index: a tensor has no field 'short' (qkv has no int16: x:int() converts "
                      .. "to int32)", function() return x:short() end)
  lu.assertNotStrContains(msg, "'sort'")
  missing("index: a tensor has no field 'byte' (qkv has no uint8: x:int() converts to int32, "
          .. "x:bool() to bool)", function() return x:byte() end)
  -- a slip of case alone is the nearest name
  missing("index: a tensor has no field 'Sum' (did you mean 'sum'?)", function() return x:Sum() end)
  missing("index: a tensor has no field 'maen' (did you mean 'mean'?)", function() return x:maen() end)
  missing("index: a tensor has no field 'sofmx'", function() return x:sofmx() end)
  missing("index: a tensor has no field '_versoin' (did you mean '_version'?)",
          function() return x._versoin end)
  lu.assertEquals(x:to("float16").dtype, "float16")
end

---------------------------------------------------------------- PyTorch's keywords

-- x:sum{dim = 1, keepdim = true}: an options table as the last argument
-- holds what PyTorch passes as keywords
TestKeywords = {}

local X = qkv.tensor{{1, 2, 3}, {4, 5, 6}}

local function same(a, b) qkv.test.assertTensorEqual(a, b) end

function TestKeywords:testReductions()
  same(X:sum{dim = 1}, X:sum(1))
  same(X:sum{dim = 2, keepdim = true}, X:sum(2, true))
  same(X:sum(2, {keepdim = true}), X:sum(2, true))
  same(qkv.sum(X, {dim = -1}), X:sum(2))
  same(X:sum{}, X:sum())
  same(X:sum{dtype = "float64"}, X:double():sum())
  same(X:mean{dim = 1, dtype = qkv.float64}, X:double():mean(1))
  for _, name in ipairs{"mean", "var", "std", "argmax", "argmin"} do
    same(X[name](X, {dim = 2, keepdim = true}), X[name](X, 2, true))
  end
  for _, name in ipairs{"max", "min"} do
    local v, i = X[name](X, {dim = 1})
    local v1, i1 = X[name](X, 1)
    same(v, v1)
    same(i, i1)
  end
  same(X:gt(2):any{dim = 2}, X:gt(2):any(2))
  same(X:gt(2):all{dim = 1, keepdim = true}, X:gt(2):all(1, true))
  same(X:cumsum{dim = 2}, X:cumsum(2))
  lu.assertEquals(X:cumsum{dim = 1, dtype = "float64"}.dtype, "float64")
end

function TestKeywords:testSoftmaxCatStack()
  same(X:softmax{dim = -1}, X:softmax(-1))
  same(X:softmax{dim = 1}, X:softmax(1))
  same(X:log_softmax{dim = 1}, X:log_softmax(1))
  same(qkv.softmax(X, {dim = 2, dtype = "float64"}), X:double():softmax(2))
  same(qkv.cat({X, X}, {dim = 2}), qkv.cat({X, X}, 2))
  same(qkv.stack({X, X}, {dim = 3}), qkv.stack({X, X}, 3))
  same(qkv.cat({X, X}, {}), qkv.cat({X, X}))
end

function TestKeywords:testFactories()
  same(qkv.zeros(2, 3, {dtype = "float64"}), qkv.zeros(2, 3, "float64"))
  same(qkv.ones({2, 3}, {dtype = "int64", device = "cpu"}), qkv.ones({2, 3}, "int64", "cpu"))
  lu.assertEquals(qkv.randn(4, {dtype = qkv.float64}).dtype, "float64")
  lu.assertEquals(qkv.rand(2, 2, {}).dtype, "float32")
  lu.assertEquals(qkv.eye(2, {dtype = "int32"}):tolist(), {{1, 0}, {0, 1}})
  missing("bad argument #2 to 'zeros' (unknown option 'dtyp' (did you mean 'dtype'?))",
          function() return qkv.zeros(2, {dtyp = "float64"}) end)
  missing("bad argument #3 to 'ones' (unknown option 'requires_grad')",
          function() return qkv.ones(2, 2, {requires_grad = true}) end)
  missing('bad argument #2 to \'zeros\' (option \'device\' must be "cpu" or "cuda", got tpu)',
          function() return qkv.zeros(2, {device = "tpu"}) end)
  missing("bad argument #2 to 'zeros' (option 'dtype' must be a dtype name (float32, float64, "
          .. "float16, bfloat16, int64, int32, bool), got number)",
          function() return qkv.zeros(2, {dtype = 3}) end)
  missing("bad argument #2 to 'zeros' (unknown option 1 (options are named: {key = value}))",
          function() return qkv.zeros(2, {3}) end)
end

function TestKeywords:testErrors()
  missing("sum: unknown option 'dims' (did you mean 'dim'?)", function() return X:sum{dims = 1} end)
  missing("softmax: unknown option 'keepdim'", function() return X:softmax{dim = 1, keepdim = true} end)
  missing("max: unknown option 'dtype'", function() return X:max{dtype = "float64"} end)
  missing("cat: unknown option 'axis' (did you mean 'dim'?)", function() return qkv.cat({X, X}, {axis = 1}) end)
  missing("sum: dim is given twice, as an argument and as an option",
          function() return X:sum(1, {dim = 2}) end)
  missing("sum: 3 arguments before the options table, at most 2",
          function() return X:sum(1, true, 3, {}) end)
  missing("sum: option 'dtype' must be a dtype name (float32, float64, float16, bfloat16, int64, "
          .. "int32, bool), got float8", function() return X:sum{dtype = "float8"} end)
  missing("bad argument #1 to 'sum' (" .. DIM0 .. ")", function() return X:sum{dim = 0} end)
  -- an integer dtype for mean and softmax, which PyTorch refuses
  -- (torch.tensor([1.5, 2.5]).mean(dtype=torch.int64): "mean(): could not
  -- infer output dtype ... Got: Long"; softmax: not implemented for
  -- 'Long'), where qkv gave the float32 mean of the truncated [1, 2], 1.5
  local F = "option 'dtype' must be a floating-point dtype (float32, float64, float16, " ..
            "bfloat16), got "
  missing("mean: " .. F .. "int64", function() return qkv.tensor{1.5, 2.5}:mean{dtype = "int64"} end)
  missing("softmax: " .. F .. "int32", function() return X:softmax{dim = 1, dtype = "int32"} end)
  missing("log_softmax: " .. F .. "bool", function() return X:log_softmax{dtype = "bool"} end)
end

-- every key of a shape, list or options table is understood or an error
-- naming the function and the closest key (issue 46: they were ignored)
function TestKeywords:testShapeTables()
  missing("bad argument #1 to 'zeros' (unknown key 'dtyp' in the shape (did you mean 'dtype'?))",
          function() return qkv.zeros{2, 3, dtyp = "float64"} end)
  missing("bad argument #1 to 'ones' (unknown key 'x' in the shape (it takes its items, "
          .. "'size', 'dtype' and 'device'))", function() return qkv.ones{2, x = 3} end)
  missing("bad argument #1 to 'rand' (the shape has key 4 past its 1 item (a nil in the list?))",
          function() return qkv.rand{2, [4] = 3} end)
  missing("bad argument #1 to 'randn' (unknown key 'sizes' in the shape (did you mean 'size'?))",
          function() return qkv.randn{sizes = {2}} end)
  missing("bad argument #1 to 'eye' (unknown key 'size' in the shape (it takes its items, "
          .. "'dtype' and 'device'))", function() return qkv.eye{3, size = 3} end)
  missing("bad argument #1 to 'zeros' (the sizes are given twice, as items and as 'size')",
          function() return qkv.zeros{2, size = {2}} end)
  missing("bad argument #1 to 'zeros' ('size' must be a table of sizes, got number)",
          function() return qkv.zeros{size = 2} end)
  missing("bad argument #1 to 'zeros' (unknown key 'n' in 'size' (it holds its 1 item only))",
          function() return qkv.zeros{size = {2, n = 1}} end)
  missing("bad argument #2 to 'zeros' (the dtype is given twice)",
          function() return qkv.zeros({2, dtype = "int64"}, {dtype = "int32"}) end)
  missing("bad argument #2 to 'ones' (the dtype is given twice)",
          function() return qkv.ones({2, dtype = "int64"}, "int64") end)
  missing("bad argument #1 to 'zeros' (option 'dtype' must be a dtype name (float32, float64, "
          .. "float16, bfloat16, int64, int32, bool), got float8)",
          function() return qkv.zeros{2, dtype = "float8"} end)
  missing("bad argument #1 to 'full' (unknown key 'fill_value' in the shape (it takes its "
          .. "items, 'size', 'dtype' and 'device'))",
          function() return qkv.full({2, fill_value = 1}, 1) end)
  missing("bad argument #1 to 'view' (unknown key 'shape' in the shape (it takes its items "
          .. "and 'size'))", function() return qkv.arange(6):view{shape = {2, 3}} end)
  missing("bad argument #1 to 'reshape' (unknown key 'size' in the shape (it takes its items "
          .. "and 'shape'))", function() return qkv.arange(6):reshape{size = {2, 3}} end)
  missing("bad argument #1 to 'expand' (unknown key 'dtype' in the shape (it takes its items "
          .. "and 'size'))", function() return qkv.ones(1):expand{2, dtype = "int64"} end)
  missing("permute: unknown key 'dim' in the dims (did you mean 'dims'?)",
          function() return X:permute{2, 1, dim = 1} end)
  missing("permute: the dims are given twice, as items and as 'dims'",
          function() return X:permute{2, 1, dims = {2, 1}} end)
  missing("permute: takes 2 arguments, got 3 (argument #3 is a string)",
          function() return X:permute({2, 1}, "x") end)
end

function TestKeywords:testExtraArgumentsAfterTheDtype()
  missing("bad argument #5 to 'zeros' (size, dtype or device expected, got string)",
          function() return qkv.zeros(2, 3, "float64", "cpu", "x") end)
  missing("bad argument #5 to 'full' (dtype or device expected, got number)",
          function() return qkv.full(2, 7, "int64", "cpu", 5) end)
  missing("bad argument #5 to 'arange' (dtype or device expected, got number)",
          function() return qkv.arange(0, 5, "int64", "cpu", 1) end)
  missing("bad argument #3 to 'tensor' (dtype or device expected, got number)",
          function() return qkv.tensor({1}, "int64", 1) end)
  missing("bad argument #2 to 'arange' (unknown option 'dtyp' (did you mean 'dtype'?))",
          function() return qkv.arange(5, {dtyp = "int64"}) end)
end

function TestKeywords:testListsHoldTheirItemsOnly()
  local x = qkv.arange(6):view(2, 3)
  missing("cat: unknown key 'dim' in the list of tensors (it holds its 2 items only)",
          function() return qkv.cat{x, x, dim = 2} end)
  missing("stack: the list of tensors has key 4 past its 2 items (a nil in the list?)",
          function() return qkv.stack{x, x, [4] = x} end)
  missing("tensor: unknown key 'x' in a list at depth 2 (it holds its 2 items only)",
          function() return qkv.tensor{{1, 2}, {3, 4, x = 1}} end)
  missing("bad argument #1 to 'tensor' (unknown key 'dtyp' in the table (did you mean "
          .. "'dtype'?))", function() return qkv.tensor{1, 2, dtyp = "int64"} end)
  missing("index: unknown key 'foo' in the index table (it holds its 1 item only)",
          function() return x[{1, foo = 2}] end)
  missing("index: unknown key 'x' in a range {i, j} of the index table (it holds its 2 items "
          .. "only)", function() x[{1, {2, 3, x = 1}}] = 0 end)
  missing("layer_norm: unknown key 'eps' in normalized_shape (it holds its 1 item only)",
          function() return qkv.layer_norm(x, {3, eps = 1}) end)
  missing("align: unknown key 'bias' in the weights (it holds its 4 items only)",
          function() return qkv.align(x, {x, x, x, x, bias = x}) end)
  missing("padding: unknown key 'n' in the lengths (it holds its 2 items only)",
          function() return qkv.padding({1, 2, n = 2}, 3) end)
  missing("grad: unknown key 'x' in inputs (it holds its 1 item only)",
          function() return qkv.grad(function(a) return a:sum() end, {x:double(), x = 1}) end)
  missing("grad: input 2 is a nil, not a tensor",
          function() return qkv.grad(function(a) return a:sum() end, {x:double(), nil, x}) end)
end

-- a method's options table holds PyTorch's names of its arguments, and
-- nothing else: x:sort(1, {descending = false}) sorted descending, and
-- x:add(y, {alpha = 2}) or qkv.dropout(x, 0.5, {training = false}) ignored
-- their keys (issue 46)
function TestKeywords:testMethodsTakeTheirKeywords()
  local x = qkv.tensor{{3, 1, 2}, {0, 5, 4}}
  same(x:sort(2, {descending = false}), x:sort(2))
  same(select(2, x:sort{dim = 1, descending = true}), select(2, x:sort(1, true)))
  same(x:topk(1, 2, {largest = false}), x:topk(1, 2, false))
  same(x:topk{k = 2}, x:topk(2))
  same(x:tril{diagonal = -1}, x:tril(-1))
  same(x:clamp{min = 1}, x:clamp(1))
  same(x:clamp(1, {max = 3}), x:clamp(1, 3))
  same(x:squeeze{dim = 1}, x:squeeze(1))
  same(x:unsqueeze{dim = -1}, x:unsqueeze(-1))
  same(x:transpose{dim0 = 1, dim1 = 2}, x:t())
  same(x:narrow{dim = 2, start = 2, length = 2}, x:narrow(2, 2, 2))
  same(x:select(1, {index = 2}), x[2])
  local i31 = qkv.tensor({3, 1}, "int64")
  same(x:index_select(2, {index = i31}), x:index_select(2, i31))
  lu.assertEquals(x:size{dim = 2}, 3)
  same(x:add{other = 1}, x + 1)
  same(x:pow{exponent = 2}, x * x)
  same(x:clone{}, x)
  for _, to in ipairs{{"cpu", {dtype = "float64"}}, {{dtype = "float64", device = "cpu"}},
                      {"cpu", "float64"}, {"float64", "cpu"}} do
    local y = x:to(table.unpack(to))
    lu.assertEquals({y.dtype, y.device}, {"float64", "cpu"})
  end
  lu.assertTrue(rawequal(x:to{device = x.device}, x))
  local d = qkv.ones(100)
  same(qkv.dropout(d, 0.5, {training = false}), d)
  same(qkv.dropout(d, {p = 0}), d)
  same(qkv.layer_norm(x, 3, {eps = 1e-3}), qkv.layer_norm(x, 3, nil, nil, 1e-3))
end

function TestKeywords:testMethodsRefuseWhatTheyDoNotTake()
  local x = qkv.tensor{{3, 1, 2}, {0, 5, 4}}
  local I = qkv.tensor({1}, "int64")
  missing("add: unknown option 'alpha'", function() return x:add(1, {alpha = 2}) end)
  missing("sub_: unknown option 'alpha'", function() return x:clone():sub_(1, {alpha = 2}) end)
  missing("div: unknown option 'rounding_mode'",
          function() return x:div(2, {rounding_mode = "floor"}) end)
  missing("index_add_: unknown option 'alpha'",
          function() return x:clone():index_add_(1, I, x:narrow(1, 1, 1), {alpha = 2}) end)
  missing("sort: unknown option 'stable'", function() return x:sort(1, {stable = true}) end)
  missing("topk: unknown option 'sorted'", function() return x:topk(1, {sorted = false}) end)
  missing("clone: unknown option 'memory_format'",
          function() return x:clone{memory_format = "contiguous"} end)
  missing("float: takes 1 argument, got 2 (argument #2 is a number)",
          function() return x:float(1) end)
  missing("eq: takes 2 arguments, got 3 (argument #3 is a number)", function() return x:eq(1, 2) end)
  missing("clamp: unknown option 'mn' (did you mean 'min'?)", function() return x:clamp{mn = 0} end)
  missing("bad argument #2 to 'to' (the dtype is given twice)",
          function() return x:to("float64", {dtype = "int64"}) end)
  missing("bad argument #2 to 'to' (the dtype is given twice)",
          function() return x:to("float64", "int64") end)
  missing("dropout: unknown option 'trainig' (did you mean 'training'?)",
          function() return qkv.dropout(x, 0.5, {trainig = false}) end)
  missing("layer_norm: unknown option 'epsilon'",
          function() return qkv.layer_norm(x, 3, {epsilon = 1e-3}) end)
  missing("half: takes 1 argument, got 2 (argument #2 is a number)", function() return x:half(1) end)
  missing("norm: takes 5 arguments, got 6 (argument #6 is a number)",
          function() return x:norm(2, 1, false, "float64", 5) end)
  missing("zeros_like: takes 2 arguments, got 3 (argument #3 is a number)",
          function() return qkv.zeros_like(x, {}, 3) end)
  missing("flip: dims come as one list or as numbers, got a table and 1 more argument",
          function() return x:flip({1}, {2}) end)
  missing("embedding: unknown option 'padding_idx'",
          function() return qkv.embedding(I, qkv.ones(3, 2), {padding_idx = 1}) end)
  missing("seed: takes 1 argument, got 2 (argument #2 is a table)",
          function() return qkv.seed(1, {}) end)
  -- nothing is written or read: the check comes first
  local path = os.tmpname()
  missing("save: takes 2 arguments, got 3 (argument #3 is a table)",
          function() return qkv.save(path, x, {}) end)
  missing("load: takes 1 argument, got 2 (argument #2 is a table)",
          function() return qkv.load(path, {mmap = true}) end)
  missing("savez: takes 2 arguments, got 3 (argument #3 is a table)",
          function() return qkv.savez(path, {x = x}, {compress = true}) end)
  missing("save_safetensors: takes 3 arguments, got 4 (argument #4 is a table)",
          function() return qkv.save_safetensors(path, {x = x}, nil, {}) end)
  os.remove(path)
  -- autograd: create_graph and retain_graph would be ignored
  local w = qkv.ones(2, "float64"):requires_grad_()
  missing("backward: takes 2 arguments, got 3 (argument #3 is a table)",
          function() (w * 2):sum():backward(nil, {create_graph = true}) end)
  missing("grad: takes 3 arguments, got 4 (argument #4 is a table)",
          function() return qkv.grad(function(a) return a:sum() end, {w}, nil, {}) end)
  missing("requires_grad_: takes 2 arguments, got 3 (argument #3 is a table)",
          function() return qkv.ones(2):requires_grad_(true, {}) end)
end

function TestKeywords:testAutogradSeesPositions()
  local x = qkv.tensor({{1, 2}, {3, 4}}, "float64"):requires_grad_()
  x:sum{dim = 2, keepdim = true}:sum():backward()
  lu.assertEquals(x.grad:tolist(), {{1, 1}, {1, 1}})
  x.grad = nil
  local y = x:softmax{dim = 1}
  lu.assertEquals(tostring(y.grad_fn), "<SoftmaxBackward0>")
  qkv.test.assertClose(y, x:detach():softmax(1))
end

os.exit(lu.LuaUnit.run(), true)
