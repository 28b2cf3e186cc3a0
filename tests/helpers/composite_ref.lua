-- composite_ref.lua: what the composite suites that compare with PyTorch
-- share (tests/core/test_composite_shapes_factories.lua,
-- test_composite_math_select.lua): a fixture array of
-- tests/fixtures/composite/torch_composite.lua as a tensor, and the
-- assertion that a result is the fixture's (dtype, shape, values).
--
--   local H = dofile("tests/helpers/composite_ref.lua")
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

local TOL = {float64 = 1e-12, float32 = 2e-6, float16 = 0, bfloat16 = 0}

-- a fixture array as a tensor of its dtype (on the default device)
local function T(a)
  if #a.shape == 0 then return qkv.tensor(a.data[1], a.dtype) end
  if #a.data == 0 then return qkv.zeros(a.shape, a.dtype) end
  return qkv.tensor(a.data, a.dtype):reshape(table.unpack(a.shape))
end

local function flat(x)
  if x:dim() == 0 then return {x:item()} end
  return R.flatten(x:tolist())
end

-- got matches the fixture array: dtype, shape, values (NaN where NaN,
-- the same infinities, within the dtype's tolerance relative to the value)
local function same(got, want, what)
  lu.assertTrue(qkv.is_tensor(got), what .. ": not a tensor")
  lu.assertEquals(got.dtype, want.dtype, what .. ": dtype")
  lu.assertEquals(got.shape, want.shape, what .. ": shape")
  local g, tol = flat(got), TOL[want.dtype] or 0
  for i, w in ipairs(want.data) do
    local v = g[i]
    if type(w) == "number" and w ~= w then
      lu.assertTrue(v ~= v, what .. ": item " .. i .. " should be nan, got " .. tostring(v))
    elseif type(w) ~= "number" or w == math.huge or w == -math.huge or tol == 0 then
      lu.assertEquals(v, w, what .. ": item " .. i)
    else
      lu.assertTrue(math.abs(v - w) <= tol * math.max(1, math.abs(w)),
                    string.format("%s: item %d is %.17g, PyTorch %.17g", what, i, v, w))
    end
  end
end

local function same_pieces(got, want, what)
  lu.assertEquals(#got, #want, what .. ": pieces")
  for i, w in ipairs(want) do same(got[i], w, what .. " piece " .. i) end
end

return {TOL = TOL, T = T, flat = flat, same = same, same_pieces = same_pieces}
