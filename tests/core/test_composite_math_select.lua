-- test_composite_math_select.lua: PyTorch's functions that qkv composes of
-- its ops (issue 30; stdlib/qkv/composite/, qkv.composite) that compute
-- and select: norm, scatter, argsort, repeat_interleave, roll, flip,
-- outer, allclose; and how they load (on first use, REPL completion).
-- Values against PyTorch's (tests/fixtures/composite/torch_composite.lua,
-- written by torch_composite.py), each as a function and as a method, with
-- negative dims. The shapes and factories are
-- test_composite_shapes_factories.lua's, the errors test_composite_errors.lua's.
local lu = require "luaunit"
local F = dofile("tests/fixtures/composite/torch_composite.lua")
local H = dofile("tests/helpers/composite_ref.lua")
local T, same = H.T, H.same
local fails = dofile("tests/helpers/attn_ref.lua").fails

---------------------------------------------------------------- norm

TestNorm = {}

function TestNorm:testAsPyTorch()
  for k, c in ipairs(F.norm) do
    local x = T(c.x)
    same(x:norm(c.p, c.dim, c.keepdim), c.want, "norm " .. k)
    same(qkv.norm(x, c.p, c.dim, c.keepdim), c.want, "qkv.norm " .. k)
    -- PyTorch's keywords (issue 46: x:norm(2, {dim = -1}) was |x|)
    same(x:norm(c.p, {dim = c.dim, keepdim = c.keepdim}), c.want, "norm keywords " .. k)
    same(x:norm{p = c.p, dim = c.dim, keepdim = c.keepdim}, c.want, "norm{} " .. k)
  end
end

-- dim = {} is every dim, as PyTorch's dim=[] (issue 46: it was |x|
-- elementwise); keepdim keeps them all as 1
function TestNorm:testEmptyDimsAreAll()
  local x = qkv.tensor({{3, -4}, {0, 12}}, "float64")
  lu.assertEquals(x:norm(2, {}):item(), 13)
  lu.assertEquals(x:norm(1, {}, true):tolist(), {{19}})
  lu.assertEquals(x:norm(2, {dim = {}}):item(), 13)
  lu.assertEquals(x:norm{}:item(), 13)
  lu.assertEquals(x:norm(2, {dim = -1}):tolist(), {5, 12})
  lu.assertEquals(x:norm(2, {dim = 1, keepdim = true}):tolist(), {{3, math.sqrt(160)}})
  lu.assertEquals(x:norm(2, -1, false, "float32").dtype, "float32")
  lu.assertEquals(qkv.norm(x:float(), 2, {dtype = "float64"}):item(), 13)
end

function TestNorm:testPIsAnyNumber()
  local x = qkv.tensor({3, -4}, "float64")
  lu.assertEquals(x:norm():item(), 5)
  lu.assertEquals(x:norm(1):item(), 7)
  lu.assertEquals(x:norm(math.huge):item(), 4)
  lu.assertEquals(x:norm(-math.huge):item(), 3)
  lu.assertEquals(x:norm(0):item(), 2)
  lu.assertAlmostEquals(x:norm(3):item(), (27 + 64) ^ (1 / 3), 1e-12)
  lu.assertEquals(x:norm("fro"):item(), 5)
end

-- a negative p: the sum of |x|^p is 0 only where every |x| is inf, and its
-- root is then inf (torch.tensor([inf, inf]).norm(-1) is inf, where qkv
-- gave 0); an empty dim has no identity and is an error for p < 0 and
-- ±inf, as PyTorch's ("cannot compute the -1 norm on an empty tensor"),
-- where qkv gave 0 for p < 0
function TestNorm:testNegativePAndEmpty()
  local inf = math.huge
  lu.assertEquals(qkv.tensor{inf, inf}:norm(-1):item(), inf)
  lu.assertEquals(qkv.tensor{{inf, inf}, {1, 1}}:norm(-2, 2):tolist()[1], inf)
  lu.assertEquals(qkv.tensor({0, 1, 4}, "float64"):norm(-1):item(), 0)       -- torch: 0
  lu.assertEquals(qkv.tensor({1, 4}, "float64"):norm(-0.5):item(), 4 / 9)    -- torch: 0.4444
  lu.assertEquals(qkv.tensor({0, 1, 4}, "float64"):norm(0.5):item(), 9)      -- torch: 9
  fails("norm: cannot compute the -1 norm over an empty dim of x (0,) (it has no identity)",
        qkv.norm, qkv.zeros(0), -1)
  fails("norm: cannot compute the -0.5 norm over an empty dim of x (2, 0) (it has no identity)",
        qkv.norm, qkv.zeros(2, 0), -0.5, 2)
  fails("norm: cannot compute the inf norm over an empty dim of x (0,) (it has no identity)",
        qkv.norm, qkv.zeros(0), inf)
  fails("norm: cannot compute the -inf norm over an empty dim of x (2, 0) (it has no identity)",
        qkv.norm, qkv.zeros(2, 0), -inf, {2})
  -- a dim that is not empty reduces as usual, also when x is empty:
  -- torch.zeros(2, 0).norm(-1, dim=0) and zeros(0, 3).norm(inf, dim=1) are tensor([])
  lu.assertEquals(qkv.zeros(2, 0):norm(-1, 1).shape, {0})
  lu.assertEquals(qkv.zeros(0, 3):norm(inf, 2).shape, {0})
  lu.assertEquals(qkv.zeros(0):norm(0.5):item(), 0)                          -- torch: 0
end

---------------------------------------------------------------- scatter

TestScatter = {}

function TestScatter:testAsPyTorch()
  for k, c in ipairs(F.scatter) do
    local x, index = T(c.x), T(c.index)
    local src = c.src and T(c.src) or c.value
    local before = x:clone()
    same(x:scatter(c.dim, index, src), c.want, "scatter " .. k)
    same(qkv.scatter(x, c.dim, index, src), c.want, "qkv.scatter " .. k)
    qkv.test.assertTensorEqual(x, before)                  -- scatter leaves x
    local y = x:clone()
    lu.assertTrue(rawequal(y:scatter_(c.dim, index, src), y), "scatter_ returns x")
    same(y, c.want, "scatter_ " .. k)
  end
end

-- reduce = "add" or "multiply": every write combines with the target,
-- repeated ones too, a value as well as a tensor; bool adds with or and
-- multiplies with and (issue 46: reduce was ignored)
function TestScatter:testReduceAsPyTorch()
  for k, c in ipairs(F.scatter_reduce) do
    local x, index = T(c.x), T(c.index)
    local src = c.src and T(c.src) or c.value
    local what = "scatter " .. c.reduce .. " " .. k
    same(x:scatter(c.dim, index, src, c.reduce), c.want, what)
    same(qkv.scatter(x, c.dim, index, src, {reduce = c.reduce}), c.want, what .. " keyword")
    same(x:scatter{dim = c.dim, index = index, [c.src and "src" or "value"] = src,
                   reduce = c.reduce}, c.want, what .. " keywords")
    local y = x:clone()
    lu.assertTrue(rawequal(y:scatter_(c.dim, index, src, c.reduce), y), "scatter_ returns x")
    same(y, c.want, "scatter_ " .. what)
  end
end

-- with reduce = "add" the gradient is g to x everywhere and g's gathered
-- values to src; "multiply" has none (nor has PyTorch's)
function TestScatter:testReduceGradients()
  require "qkv.autograd"
  local x = qkv.tensor({{1, 2, 3}, {4, 5, 6}}, "float64"):requires_grad_()
  local src = qkv.tensor({{1, 1, 1}, {1, 1, 1}}, "float64"):requires_grad_()
  local index = qkv.tensor({{1, 1, 2}, {1, 2, 2}}, "int64")
  local g = qkv.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")
  local out = x:scatter(1, index, src, "add")
  lu.assertEquals(out:detach():tolist(), {{3, 3, 3}, {4, 6, 8}})
  local loss = (out * g):sum()
  loss:backward()
  lu.assertEquals(x.grad:tolist(), g:tolist())
  lu.assertEquals(src.grad:tolist(), {{1, 2, 6}, {1, 5, 6}})
  fails("scatter: reduce = \"multiply\" has no gradient", x.scatter, x, 1, index, src,
        "multiply")
  lu.assertEquals(qkv.no_grad(x.scatter, x, 1, index, 2, "multiply"):tolist(),
                  {{4, 4, 3}, {4, 10, 24}})
end

-- repeated targets: the last write along dim wins, as PyTorch's CPU
-- kernel does (it leaves the order unspecified; qkv makes it so everywhere)
function TestScatter:testLastWriteWins()
  local x = qkv.zeros(1, 3)
  local index = qkv.tensor({{2, 2, 2, 1, 2}}, "int64")
  local y = x:scatter(2, index, qkv.tensor{{10, 20, 30, 40, 50}})
  lu.assertEquals(y:tolist(), {{40, 50, 0}})
  -- infinities and NaN are written as they are
  y = x:scatter(2, qkv.tensor({{1, 1, 3}}, "int64"), qkv.tensor{{0 / 0, math.huge, -math.huge}})
  lu.assertEquals(y:tolist(), {{math.huge, 0, -math.huge}})
  -- float16 and bool go through the same writes
  local h = qkv.zeros(2, 2, "float16"):scatter(1, qkv.tensor({{2, 2}, {2, 1}}, "int64"),
                                                qkv.tensor({{1, 2}, {3, 4}}, "float16"))
  lu.assertEquals({h.dtype, h:tolist()}, {"float16", {{0, 4}, {3, 2}}})
  local b = qkv.zeros(3, "bool"):scatter(1, qkv.tensor({3, 1, 3}, "int64"), qkv.tensor{true, true, false})
  lu.assertEquals(b:tolist(), {true, false, false})
end

function TestScatter:testScatterIntoAView()
  local base = qkv.zeros(3, 3)
  local col = base:select(2, 2)                       -- a strided view
  col:scatter_(1, qkv.tensor({3, 1}, "int64"), qkv.tensor{5, 6})
  lu.assertEquals(base:tolist(), {{0, 6, 0}, {0, 0, 0}, {0, 5, 0}})
end

---------------------------------------------------------------- selection

TestSelection = {}

function TestSelection:testArgsortAsPyTorch()
  for k, c in ipairs(F.argsort) do
    local x = T(c.x)
    same(x:argsort(c.dim, c.descending), c.want, "argsort " .. k)
    same(qkv.argsort(x, c.dim, c.descending), c.want, "qkv.argsort " .. k)
  end
  lu.assertEquals(qkv.tensor(3):argsort():item(), 1)
end

function TestSelection:testRepeatInterleaveAsPyTorch()
  for k, c in ipairs(F.repeat_interleave) do
    local x = T(c.x)
    local r = c.repeats or qkv.tensor(c.repeats_tensor, "int64")
    same(x:repeat_interleave(r, c.dim), c.want, "repeat_interleave " .. k)
    same(qkv.repeat_interleave(x, r, c.dim), c.want, "qkv.repeat_interleave " .. k)
    if c.repeats_tensor then   -- a Lua list of repeats too
      same(x:repeat_interleave(c.repeats_tensor, c.dim), c.want, "repeat_interleave list " .. k)
    end
  end
end

function TestSelection:testRollAsPyTorch()
  for k, c in ipairs(F.roll) do
    local x = T(c.x)
    same(x:roll(c.shifts, c.dims), c.want, "roll " .. k)
    same(qkv.roll(x, c.shifts, c.dims), c.want, "qkv.roll " .. k)
  end
end

function TestSelection:testFlipAsPyTorch()
  for k, c in ipairs(F.flip) do
    local x = T(c.x)
    same(x:flip(c.dims), c.want, "flip " .. k)
    same(qkv.flip(x, c.dims), c.want, "qkv.flip " .. k)
    same(x:flip(table.unpack(c.dims)), c.want, "flip " .. k .. " as arguments")
    -- PyTorch's keyword (issue 46: x:flip{dims = {1}} was x)
    same(x:flip{dims = c.dims}, c.want, "flip{dims} " .. k)
    same(qkv.flip(x, {dims = c.dims}), c.want, "qkv.flip{dims} " .. k)
  end
end

-- every staple takes PyTorch's keywords in an options table, last
function TestSelection:testKeywords()
  local x = qkv.arange(12.0):view(3, 4)
  local eq = qkv.test.assertTensorEqual
  eq(x:flatten{start_dim = 1, end_dim = 2}, x:flatten(1, 2))
  eq(x:unflatten{dim = 2, sizes = {2, 2}}, x:unflatten(2, {2, 2}))
  eq(x:unflatten(2, {sizes = {2, -1}}), x:unflatten(2, {2, 2}))
  eq(select(2, x:chunk{chunks = 2, dim = 2}), select(2, x:chunk(2, 2)))
  eq(select(2, x:split(3, {dim = 2})), select(2, x:split(3, 2)))
  eq(select(2, x:split{split_size_or_sections = {1, 3}, dim = -1}), x:narrow(2, 2, 3))
  eq(select(2, x:split{split_size = 1}), x:narrow(1, 2, 1))
  eq(x:argsort{dim = 1, descending = true, stable = true}, x:argsort(1, true))
  eq(x:argsort{}, x:argsort())
  eq(x:roll{shifts = {1, -1}, dims = {1, 2}}, x:roll({1, -1}, {1, 2}))
  eq(x:roll(1, {dims = 2}), x:roll(1, 2))
  eq(x:repeat_interleave{repeats = 2, dim = 1}, x:repeat_interleave(2, 1))
  eq(qkv.outer(x[1], {vec2 = x[2]}), qkv.outer(x[1], x[2]))
  lu.assertTrue(qkv.allclose(qkv.ones(2), qkv.ones(2) + 1e-3, {rtol = 1e-2}))
  lu.assertFalse(qkv.allclose(qkv.ones(2), qkv.ones(2) + 1e-3, {atol = 0}))
  lu.assertTrue(x:allclose{other = x:clone(), equal_nan = true})
end

function TestSelection:testResultsAreCopies()
  local x = qkv.arange(4)
  for _, y in ipairs{x:flip(1), x:roll(0), x:roll(4, 1), x:flip({})} do
    y[1] = 99
    lu.assertEquals(x:tolist(), {0, 1, 2, 3})
  end
end

---------------------------------------------------------------- products, comparisons

TestCompare = {}

function TestCompare:testOuterAsPyTorch()
  for k, c in ipairs(F.outer) do
    local a, b = T(c.a), T(c.b)
    same(qkv.outer(a, b), c.want, "outer " .. k)
    same(a:outer(b), c.want, "a:outer " .. k)
  end
end

function TestCompare:testAllcloseAsPyTorch()
  for k, c in ipairs(F.allclose) do
    local a, b = T(c.a), T(c.b)
    lu.assertEquals(qkv.allclose(a, b, c.rtol, c.atol, c.equal_nan), c.want, "allclose " .. k)
    lu.assertEquals(a:allclose(b, c.rtol, c.atol, c.equal_nan), c.want, "a:allclose " .. k)
  end
end

---------------------------------------------------------------- loading

-- the composite functions load on first use: a qkv function of theirs, or a method the
-- C ones lack (then x:flaten's error suggests flatten); the REPL completes them
TestLoading = {}

local EXE = arg and arg[-1] or "build/qkv"
local sh = dofile("tests/helpers/shell.lua")

function TestLoading:testOnFirstUse()
  local out = sh.exe(EXE, "-e", "print(package.loaded['qkv.composite'] == nil) " ..
    "print(qkv.ones(2, 3):flatten().shape, package.loaded['qkv.composite'] ~= nil)")
  lu.assertEquals(out, "true\n(6,)\ttrue\n")
  out = sh.exe(EXE, "-e", "print(qkv.linspace(0, 1, 2), qkv.ones(2):half().dtype)")
  lu.assertEquals(out, "tensor([0., 1.])\tfloat16\n")
  local code
  out, code = sh.exe(EXE, "-e", "qkv.ones(2):flaten()")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "a tensor has no field 'flaten' (did you mean 'flatten'?)")
end

function TestLoading:testReplCompletes()
  _G.composite_x = qkv.ones(2)
  local repl = require "qkv.repl"
  lu.assertEquals(repl._complete("composite_x:repeat_i"), {"composite_x:repeat_interleave"})
  lu.assertEquals(repl._complete("qkv.zeros_l"), {"qkv.zeros_like"})
  _G.composite_x = nil
end
