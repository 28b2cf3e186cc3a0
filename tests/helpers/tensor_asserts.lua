-- tensor_asserts.lua: what tests/core/test_tensor_making.lua and
-- test_tensor_views_copies.lua share: float32 rounding of a Lua number,
-- exact deep equality of nested tables, and assertions on x:tolist() and
-- x.shape.
--
--   local H = dofile("tests/helpers/tensor_asserts.lua")
local lu = require "luaunit"

-- float32 rounding of a Lua number, independent of qkv
local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- deep equality of nested tables, exact (math.type checked when asked)
local function same(a, b, strict_int)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then
    if a ~= a and b ~= b then return true end            -- NaN == NaN here
    if strict_int and math.type(a) ~= math.type(b) then return false end
    return a == b
  end
  if #a ~= #b then return false end
  for i = 1, #a do if not same(a[i], b[i], strict_int) then return false end end
  return true
end

local function assertList(x, expected, strict_int)
  local got = x:tolist()
  if not same(got, expected, strict_int) then
    lu.fail(string.format("tolist mismatch:\n got      %s\n expected %s",
      lu.prettystr(got), lu.prettystr(expected)))
  end
end

local function assertShape(x, shape)
  lu.assertEquals(tostring(x.shape), tostring(setmetatable(shape, getmetatable(x.shape))))
  lu.assertTrue(x.shape == shape)
end

return {f32 = f32, same = same, assertList = assertList, assertShape = assertShape}
