-- equal.lua: equality of values that are or hold tensors, for qkv.test's
-- assertTensorEqual and for LuaUnit's own assertions, which patch(lu)
-- teaches tensors. LuaUnit compares userdata with ==, which for tensors is
-- identity, so that assertEquals(qkv.ones(2), qkv.ones(2)) failed with two
-- identical printouts; patched, it compares shape, dtype and values, says
-- where they first differ, and points float comparisons to assertClose.
-- Values without tensors still go to LuaUnit's own functions, whose
-- messages stay byte for byte LuaUnit's (suites, LuaUnit's own among them,
-- compare them): the hint is only for failures where a tensor is involved.

local qkv = require "qkv"

local M = {}

---------------------------------------------------------------- formatting

-- "(2, 3)" as qkv prints shapes, or "number"
function M.shapestr(x)
  return type(x) == "number" and "number" or tostring(x.shape)
end

function M.sameshape(a, b)
  if a:dim() ~= b:dim() then return false end
  for d = 1, a:dim() do
    if a:size(d) ~= b:size(d) then return false end
  end
  return true
end

-- the 1-based index, as qkv indexes, of element k (1-based) of x flattened
function M.unravel(shape, k)
  local idx, rest = {}, k - 1
  for d = #shape, 1, -1 do
    idx[d] = rest % shape[d] + 1
    rest = rest // shape[d]
  end
  return "[" .. table.concat(idx, ", ") .. "]"
end

function M.num(x, digits)
  if x ~= x then return "nan" end
  return ("%." .. digits .. "g"):format(x)
end

-- two numbers printed with as many digits as it takes to tell them apart
function M.pair(a, b)
  local fa, fb
  for digits = 6, 17 do
    fa, fb = M.num(a, digits), M.num(b, digits)
    if fa ~= fb or a ~= a or a == b then break end
  end
  return fa, fb
end

---------------------------------------------------------------- tensors

local FLOAT = {float32 = true, float64 = true}

--[[
Why tensors a and b are not equal, or nil when they are: the same shape,
the same dtype and every element equal in that dtype (int64 stays exact
past 2^53), NaN equal to NaN so that a tensor equals its copy. na and nb
name them in the message ("a", "b"). The second result is true when the
difference is in the values of a float dtype.
]]
function M.tensors(a, b, na, nb)
  na, nb = na or "a", nb or "b"
  if not M.sameshape(a, b) then
    return ("shapes %s and %s differ"):format(M.shapestr(a), M.shapestr(b))
  end
  if a.dtype ~= b.dtype then return ("dtypes %s and %s differ"):format(a.dtype, b.dtype) end
  local differ = a:ne(b)
  local bothnan = a:ne(a):masked_fill(b:eq(b), 0)
  differ = differ:masked_fill(bothnan, 0)
  local bad = differ:sum():item()
  if bad == 0 then return nil end
  local k = differ:reshape(-1):argmax():item()
  local va, vb = a:reshape(-1)[k], b:reshape(-1)[k]
  local where = a:dim() > 0 and " at " .. M.unravel(a.shape, k) or ""
  return ("%d of %d elements differ; the first%s (%s = %s, %s = %s)")
         :format(bad, a:numel(), where, na, tostring(va), nb, tostring(vb)), FLOAT[a.dtype]
end

---------------------------------------------------------------- any values

local function holds(v, seen)
  if qkv.is_tensor(v) then return true end
  if type(v) ~= "table" or seen[v] then return false end
  seen[v] = true
  for _, x in pairs(v) do
    if holds(x, seen) then return true end
  end
  return false
end

-- whether v is a tensor or a table that holds one as a value, at any depth
function M.holds_tensor(v) return holds(v, {}) end

local function show(v)
  return type(v) == "string" and ("%q"):format(v) or tostring(v)
end

local function keystr(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") and "." .. k
         or "[" .. (type(k) == "string" and ("%q"):format(k) or tostring(k)) .. "]"
end

-- why actual and expected differ (where: the path to them), or nil
local function diff(a, b, where, seen)
  local at = where == "" and "" or "at " .. where .. ": "
  local ta, tb = qkv.is_tensor(a), qkv.is_tensor(b)
  if ta and tb then
    local d, float = M.tensors(a, b, "actual", "expected")
    return d and at .. d, float
  elseif ta or tb then
    return at .. (ta and "a tensor where a %s was expected" or "a %s where a tensor was expected")
                 :format(type(ta and b or a))
  elseif type(a) ~= "table" or type(b) ~= "table" then
    if a == b then return nil end
    return at .. ("%s where %s was expected"):format(show(a), show(b)),
           math.type(a) == "float" or math.type(b) == "float"
  end
  if seen[a] == b then return nil end    -- a cycle met in both: as LuaUnit
  seen[a] = b
  for k, v in pairs(a) do
    local d, float = diff(v, b[k], where .. keystr(k), seen)
    if d then return d, float end
  end
  for k in pairs(b) do
    if a[k] == nil then return "at " .. where .. keystr(k) .. ": nil where a value was expected" end
  end
  seen[a] = nil
  return nil
end

-- why actual and expected (tensors, tables holding them, anything) differ,
-- or nil; the second result says that a float value differs
function M.difference(actual, expected) return diff(actual, expected, "", {}) end

---------------------------------------------------------------- LuaUnit

local HINT = "for floats, qkv.test.assertClose(actual, expected [, {rtol = 1e-5, "
             .. "atol = 1e-8}]) compares within a tolerance"

-- "name: value", the value on lines of its own when it has several
local function pretty(lu, name, v)
  local s = qkv.is_tensor(v) and tostring(v) or lu.prettystr(v)
  return name .. (s:find("\n") and ":\n" or ": ") .. s
end

-- a LuaUnit failure at the test's line (the caller of the assertion)
local function fail(lu, msg, extra)
  if type(extra) == "string" and #extra > 0 then msg = extra .. "\n" .. msg end
  error(lu.FAILURE_PREFIX .. msg, 3 + lu.STRIP_EXTRA_ENTRIES_IN_STACK_TRACE)
end

local patched = setmetatable({}, {__mode = "k"})

-- teaches lu.assertEquals, assertNotEquals, assertAlmostEquals,
-- assertTableContains, assertNotTableContains and assertItemsEquals (and
-- their snake_case aliases) tensors; once per LuaUnit module
function M.patch(lu)
  if patched[lu] then return end
  patched[lu] = true
  local equals, notequals, almost = lu.assertEquals, lu.assertNotEquals, lu.assertAlmostEquals

  local function holds2(a, b) return holds(a, {}) or holds(b, {}) end

  function lu.assertEquals(actual, expected, extra, deep)
    if not holds2(actual, expected) then
      return equals(actual, expected, extra, deep)
    end
    local d, float = M.difference(actual, expected)
    if d then
      if not lu.ORDER_ACTUAL_EXPECTED then actual, expected = expected, actual end
      fail(lu, ("%s\n%s\n%s%s"):format(pretty(lu, "expected", expected), pretty(lu, "actual", actual),
                                       d, float and "\n" .. HINT or ""), extra)
    end
  end

  function lu.assertNotEquals(actual, expected, extra)
    if not holds2(actual, expected) then
      return notequals(actual, expected, extra)
    end
    if not M.difference(actual, expected) then
      fail(lu, pretty(lu, "Received the not expected value", actual), extra)
    end
  end

  -- tensors: |actual - expected| <= margin elementwise, as assertClose
  -- with rtol 0 and atol the margin
  function lu.assertAlmostEquals(actual, expected, margin, extra)
    if not (qkv.is_tensor(actual) or qkv.is_tensor(expected)) then
      return almost(actual, expected, margin, extra)
    end
    return qkv.test.assertClose(actual, expected, {rtol = 0, atol = margin or lu.EPS})
  end

  -- t holds an element equal to v (tensors by shape, dtype and values):
  -- LuaUnit's own compare tensors by identity, so that a table holding an
  -- equal tensor passed assertNotTableContains
  local contains, notcontains = lu.assertTableContains, lu.assertNotTableContains
  local function holds_equal(t, v)
    for _, x in pairs(t) do
      if not M.difference(x, v) then return true end
    end
    return false
  end
  function lu.assertTableContains(t, v, extra)
    if type(t) ~= "table" or not holds2(t, v) then return contains(t, v, extra) end
    if not holds_equal(t, v) then
      fail(lu, ("%s\n%s"):format(pretty(lu, "Could not find expected value", v),
                                 pretty(lu, "in table", t)), extra)
    end
  end
  function lu.assertNotTableContains(t, v, extra)
    if type(t) ~= "table" or not holds2(t, v) then return notcontains(t, v, extra) end
    if holds_equal(t, v) then
      fail(lu, ("%s\n%s"):format(pretty(lu, "Found unexpected value", v), pretty(lu, "in table", t)),
           extra)
    end
  end

  -- the values of two tables the same, keys aside (each value of one
  -- equal to one of the other, as LuaUnit's), tensors by shape, dtype and
  -- values: LuaUnit's own compared them by identity, failing two tables
  -- of equal tensors; a tensor given itself compares as assertEquals
  local items = lu.assertItemsEquals
  local function within(a, b)
    for _, x in pairs(a) do
      if not holds_equal(b, x) then return false end
    end
    return true
  end
  function lu.assertItemsEquals(actual, expected, extra)
    if not holds2(actual, expected) then return items(actual, expected, extra) end
    local same
    if type(actual) == "table" and type(expected) == "table" then
      same = within(actual, expected) and within(expected, actual)
    else
      same = not M.difference(actual, expected)
    end
    if not same then
      fail(lu, ("Content of the tables are not identical:\n%s\n%s"):format(
             pretty(lu, "Expected", expected), pretty(lu, "Actual", actual)), extra)
    end
  end

  lu.assert_equals, lu.assert_not_equals = lu.assertEquals, lu.assertNotEquals
  lu.assert_items_equals = lu.assertItemsEquals
  lu.assert_almost_equals = lu.assertAlmostEquals
  lu.assert_table_contains, lu.assert_not_table_contains =
    lu.assertTableContains, lu.assertNotTableContains
end

return M
