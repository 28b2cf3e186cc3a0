-- test_keywords.lua: PyTorch's keywords on the tensor methods (issue 50):
-- var and std's correction= and the reductions' dim=, keepdim=, p=
-- against PyTorch's answers (tests/fixtures/keywords/torch_keywords.lua,
-- written by torch_keywords.py there), each keyword form equal to its
-- positional one and to qkv's function; correction's gradient; a
-- position given both ways; and the "did you mean" that names PyTorch's
-- keyword for another library's spelling of it (NumPy's axis, keepdims,
-- ddof, ord; PyTorch's old unbiased), in the C bindings' checker and the
-- Lua library's alike.
local lu = require "luaunit"
local F = dofile("tests/fixtures/keywords/torch_keywords.lua")
local H = dofile("tests/helpers/composite_ref.lua")
local fails = dofile("tests/helpers/attn_ref.lua").fails
local T, same, flat = H.T, H.same, H.flat

-- the keywords of each method, in the order of its positions
local POSITIONS = {
  var = {"dim", "keepdim", "correction"}, std = {"dim", "keepdim", "correction"},
  sum = {"dim", "keepdim"}, mean = {"dim", "keepdim"}, argmax = {"dim", "keepdim"},
  norm = {"p", "dim", "keepdim"}, cumsum = {"dim"},
}

local function describe(c)
  local kw = {}
  for k, v in pairs(c.kw) do kw[#kw + 1] = k .. " = " .. tostring(v) end
  table.sort(kw)
  return string.format("%s:%s{%s}", c.input, c.method, table.concat(kw, ", "))
end

-- a and b hold the same values (NaN where NaN), dtype and shape
local function identical(a, b, what)
  lu.assertEquals(a.dtype, b.dtype, what .. ": dtype")
  lu.assertEquals(a.shape, b.shape, what .. ": shape")
  local fa, fb = flat(a), flat(b)
  for i = 1, #fa do
    lu.assertTrue(fa[i] == fb[i] or (fa[i] ~= fa[i] and fb[i] ~= fb[i]),
                  string.format("%s: item %d is %s and %s", what, i, tostring(fa[i]), tostring(fb[i])))
  end
end

---------------------------------------------------------------- PyTorch's answers
TestAgainstTorch = {}

function TestAgainstTorch:testEveryCase()
  lu.assertTrue(#F.cases >= 25)
  local seen = {}
  for _, c in ipairs(F.cases) do
    local what, x = describe(c), T(F.inputs[c.input])
    seen[c.method] = true
    local got = x[c.method](x, c.kw)
    same(got, c.want, what)     -- bfloat16 too: rounded once, as PyTorch's
    -- the positions, and qkv's function, give the same
    local pos = {}
    for i, k in ipairs(POSITIONS[c.method]) do pos[i] = c.kw[k] end
    identical(x[c.method](x, table.unpack(pos, 1, #POSITIONS[c.method])), got, what .. " positional")
    identical(qkv[c.method](x, c.kw), got, what .. " as qkv." .. c.method)
  end
  for m in pairs(POSITIONS) do lu.assertTrue(seen[m], m) end
end

-- the fixture's var cases move with correction: a correction ignored
-- would fail them
function TestAgainstTorch:testTheFixtureDependsOnCorrection()
  local x = T(F.inputs.x)
  lu.assertNotEquals(x:var(2):tolist(), x:var{dim = 2, correction = 0}:tolist())
  lu.assertNotEquals(x:std():item(), x:std{correction = 0}:item())
  lu.assertEquals(x:var{dim = 2, correction = 1}:tolist(), x:var(2):tolist())
end

---------------------------------------------------------------- keyword forms
TestForms = {}

-- every reduction that takes dim and keepdim, by keywords, mixed with
-- positions, and as qkv's function: what the positions give
function TestForms:testReductions()
  local x = qkv.tensor({{3, -1, 4}, {1, 5, -9}}, "float64")
  for _, m in ipairs{"sum", "mean", "max", "min", "var", "std", "argmax", "argmin"} do
    for _, dim in ipairs{1, 2, -1} do
      for _, keep in ipairs{false, true} do
        local what = string.format("%s dim %d keepdim %s", m, dim, tostring(keep))
        local a1, a2 = x[m](x, dim, keep)
        local b1, b2 = x[m](x, {dim = dim, keepdim = keep})
        local c1, c2 = x[m](x, dim, {keepdim = keep})
        local d1, d2 = qkv[m](x, {keepdim = keep, dim = dim})
        for _, r in ipairs{{b1, b2}, {c1, c2}, {d1, d2}} do
          identical(r[1], a1, what)
          if a2 then identical(r[2], a2, what .. " indices") end
        end
      end
    end
  end
  local b = qkv.tensor{{true, false}, {true, true}}
  identical(b:any{dim = 2, keepdim = true}, b:any(2, true), "any")
  identical(b:all{dim = 1}, b:all(1), "all")
  identical(x:softmax{dim = 1}, x:softmax(1), "softmax")
  identical(x:log_softmax{dim = -1}, x:log_softmax(-1), "log_softmax")
end

-- correction's gradient: sum of squares over max(0, n - correction)
function TestForms:testCorrectionGradient()
  qkv.seed(5)
  local x = qkv.randn(3, 4, "float64")
  for _, f in ipairs{
    function(v) return v:var{correction = 0} end,
    function(v) return v:var{dim = 2, keepdim = true, correction = 2} end,
    function(v) return v:std{dim = 1, correction = 0.5} end,
    function(v) return v:std(-1, false, 0) end,
  } do
    local ok, err = pcall(qkv.test.gradcheck, f, {x})
    lu.assertTrue(ok, tostring(err))
  end
  -- d/dx of sum((x - mean)^2) / n at x = {1, 2, 6}: 2 (x - 3) / 3
  local p = qkv.tensor({1, 2, 6}, "float64"):requires_grad_()
  p:var{correction = 0}:backward()
  qkv.test.assertClose(p.grad, qkv.tensor({-4 / 3, -2 / 3, 2}, "float64"))
end

---------------------------------------------------------------- errors
TestErrors = {}

function TestErrors:testGivenTwiceOrWrong()
  local x = qkv.ones(2, 3)
  fails("var: dim is given twice, as an argument and as an option", x.var, x, 1, {dim = 2})
  fails("std: correction is given twice, as an argument and as an option",
        x.std, x, 1, false, 0, {correction = 0})
  fails("sum: keepdim is given twice, as an argument and as an option", x.sum, x, 1, true, {keepdim = true})
  fails("var: correction must be a number, got string", x.var, x, {correction = "0"})
  fails("std: correction must be a number, got boolean", x.std, x, {dim = 1, correction = false})
  fails("var: correction must be a number, got nan", x.var, x, 1, false, 0 / 0)
end

-- NumPy's spellings name PyTorch's keyword, where the function takes it
function TestErrors:testOtherLibrariesSpellings()
  local x = qkv.ones(2, 3)
  fails("sum: unknown option 'axis' (did you mean 'dim'?)", x.sum, x, {axis = 1})
  fails("mean: unknown option 'keepdims' (did you mean 'keepdim'?)", x.mean, x, {dim = 1, keepdims = true})
  fails("max: unknown option 'axis' (did you mean 'dim'?)", qkv.max, x, {axis = -1})
  fails("var: unknown option 'ddof' (did you mean 'correction'?)", x.var, x, {ddof = 0})
  fails("std: unknown option 'ddof' (did you mean 'correction'?)", x.std, x, {dim = 1, ddof = 1})
  fails("var: unknown option 'unbiased' (qkv's is 'correction': unbiased = false is correction = 0)",
        x.var, x, {unbiased = false})
  fails("cat: unknown option 'axis' (did you mean 'dim'?)", qkv.cat, {x, x}, {axis = 1})
  fails("softmax: unknown option 'axis' (did you mean 'dim'?)", x.softmax, x, {axis = -1})
  -- the Lua library's functions go through the same checker
  fails("norm: unknown option 'ord' (did you mean 'p'?)", x.norm, x, {ord = 2})
  fails("norm: unknown option 'axis' (did you mean 'dim'?)", x.norm, x, {axis = 1})
  fails("flip: unknown option 'axis' (did you mean 'dims'?)", x.flip, x, {axis = {1}})
  fails("roll: unknown option 'axes' (did you mean 'dims'?)", x.roll, x, 1, {axes = 1})
  fails("Softmax: unknown option 'axis' (did you mean 'dim'?)", qkv.nn.Softmax, {axis = -1})
  lu.assertEquals(qkv._nearest("axis", {"keepdim", "dim"}), "dim")
  lu.assertEquals(qkv._nearest("keepdims", {"dim", "keepdim"}), "keepdim")
  -- where the function takes no such keyword, none is named
  fails("cumsum: unknown option 'keepdims'", x.cumsum, x, {dim = 1, keepdims = true})
  local ok, msg = pcall(x.cumsum, x, {dim = 1, keepdims = true})
  lu.assertFalse(ok)
  lu.assertNil(msg:find("did you mean", 1, true), msg)
end

os.exit(lu.LuaUnit.run(), true)
