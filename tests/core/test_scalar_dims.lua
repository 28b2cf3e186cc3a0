-- test_scalar_dims.lua: a 0-d tensor's dim. PyTorch lets a scalar have
-- dims 0 and -1 (qkv's 1 and -1) for the ops that take a dim (reductions,
-- softmax, cumsum, sort, gather, scatter, ...), each giving a 0-d tensor
-- from its one element, and refuses 1 and -2 (qkv's 2 and -2); size,
-- select and narrow take none. The values are PyTorch 2's for
-- torch.tensor(-2.5) with the same calls (indices 1-based here), and the
-- gradients its autograd's, in float64.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

TestScalarDims = {}

local function I(v) return qkv.tensor(v, "int64") end

-- each case: the call with dim d, and what it returns (numbers: 0-d values)
local CASES = {
  {"sum", function(x, d) return x:sum(d) end, {-2.5}},
  {"sum keepdim", function(x, d) return x:sum(d, true) end, {-2.5}},
  {"mean", function(x, d) return x:mean(d) end, {-2.5}},
  {"max", function(x, d) return x:max(d) end, {-2.5, 1}},
  {"min keepdim", function(x, d) return x:min(d, true) end, {-2.5, 1}},
  {"argmax", function(x, d) return x:argmax(d) end, {1}},
  {"argmin", function(x, d) return x:argmin(d) end, {1}},
  {"var", function(x, d) return x:var(d) end, {0 / 0}},         -- n - 1 = 0: nan
  {"std correction 0", function(x, d) return x:std(d, false, 0) end, {0}},
  {"any", function(x, d) return x:ne(0):any(d) end, {true}},
  {"all", function(x, d) return x:eq(0):all(d) end, {false}},
  {"softmax", function(x, d) return x:softmax(d) end, {1}},
  {"qkv.softmax", function(x, d) return qkv.softmax(x, d) end, {1}},
  {"log_softmax", function(x, d) return x:log_softmax(d) end, {0}},
  {"cumsum", function(x, d) return x:cumsum(d) end, {-2.5}},
  {"sort", function(x, d) return x:sort(d) end, {-2.5, 1}},
  {"topk", function(x, d) return x:topk(1, d) end, {-2.5, 1}},
  {"argsort", function(x, d) return x:argsort(d) end, {1}},
  {"norm", function(x, d) return x:norm(2, d) end, {2.5}},
  {"flip", function(x, d) return x:flip(d) end, {-2.5}},
  {"transpose", function(x, d) return x:transpose(d, -1) end, {-2.5}},
  {"squeeze", function(x, d) return x:squeeze(d) end, {-2.5}},
  {"gather", function(x, d) return x:gather(d, I(1)) end, {-2.5}},
  {"scatter_add_", function(x, d) return x:clone():scatter_add_(d, I(1), qkv.tensor(5, x.dtype)) end, {2.5}},
  {"scatter", function(x, d) return x:scatter(d, I(1), qkv.tensor(5, x.dtype)) end, {5}},
  {"scatter add", function(x, d) return x:scatter(d, I(1), qkv.tensor(5, x.dtype), "add") end, {2.5}},
  {"scatter multiply", function(x, d) return x:scatter(d, I(1), 2, "multiply") end, {-5}},
}

function TestScalarDims:testDimOneAndMinusOne()
  local x = qkv.tensor(-2.5)
  for _, c in ipairs(CASES) do
    for _, d in ipairs{1, -1} do
      local what = c[1] .. " dim " .. d
      local out = table.pack(c[2](x, d))
      lu.assertEquals(out.n, #c[3], what)
      for k, want in ipairs(c[3]) do
        lu.assertEquals(out[k]:dim(), 0, what .. ": a 0-d result")
        local got = out[k]:item()
        if want ~= want then lu.assertNotEquals(got, got, what)
        else lu.assertEquals(got, want, what) end
      end
    end
  end
  lu.assertEquals(x:item(), -2.5)                                -- scatter_add_ wrote a clone
end

function TestScalarDims:testDimTwoIsOutOfRange()
  local x = qkv.tensor(-2.5)
  for _, c in ipairs(CASES) do
    for _, d in ipairs{2, -2} do
      fails(" " .. d .. " out of range [-1, 1]", c[2], x, d)
    end
  end
  -- what PyTorch refuses of a 0-d tensor whatever the dim
  fails("a 0-d tensor has no dims", x.size, x, 1)
  fails("a 0-d tensor has no dims", x.select, x, 1, 1)
  fails("a 0-d tensor has no dims", x.narrow, x, 1, 1, 1)
  fails("index 2 is out of range for dim 1 of size 1", x.gather, x, 1, I(2))
end

-- the gradients through dim 1 of a 0-d tensor (PyTorch's, float64)
function TestScalarDims:testGradients()
  local want = {sum = 1, mean = 1, max = 1, ["min keepdim"] = 1, softmax = 0,
                log_softmax = 0, cumsum = 1, norm = -1, flip = 1, transpose = 1,
                squeeze = 1, gather = 1, sort = 1, topk = 1, ["scatter add"] = 1}
  for _, c in ipairs(CASES) do
    if want[c[1]] then
      local g = qkv.grad(function(v) return (c[2](v, 1)):sum() end,
                         {qkv.tensor(-2.5, "float64")})[1]
      lu.assertEquals(g.shape, qkv.tensor(0).shape, c[1])
      lu.assertEquals(g:item(), want[c[1]], c[1])
    end
  end
  local g = qkv.grad(function(v) return v:var(-1) end, {qkv.tensor(-2.5, "float64")})[1]
  lu.assertNotEquals(g:item(), g:item())                         -- nan, as PyTorch's
end
