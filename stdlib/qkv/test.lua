-- test.lua: qkv.test, tensor assertions for LuaUnit suites.
--
-- assertClose, assertShape, assertTensorEqual and skipUnlessCuda; every
-- other name is LuaUnit's (`local t = qkv.test; t.assertEquals(...)`),
-- whose assertEquals, assertNotEquals and assertAlmostEquals compare
-- tensors once this is loaded (qkv.equal; in the qkv executable, require
-- "luaunit" loads it).
-- A failed assertion is a LuaUnit failure; a bad argument (a string where a
-- tensor goes, an unknown option) is an ordinary error naming the function
-- and the argument, so that a broken test shows as an error, not a failure.

local qkv = require "qkv"
local lu = require "luaunit"
local equal = require "qkv.equal"

-- LuaUnit's assertEquals and assertNotEquals compare tensors from now on
equal.patch(lu)

local M = setmetatable({}, {__index = lu})

local INF = math.huge

---------------------------------------------------------------- helpers

local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

-- an argument error pointing at the line that called the assertion
local function argerror(fname, n, msg)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, msg), caller(SOURCE, false))
end

-- a LuaUnit failure pointing at the test's line; called by the assertion itself
local function failure(msg)
  error(lu.FAILURE_PREFIX .. msg, 3 + lu.STRIP_EXTRA_ENTRIES_IN_STACK_TRACE)
end

-- a closed tensor (local x <close>) is a bad argument, not a failure
local function checkopen(fname, n, x)
  if not pcall(function() return x.ndim end) then argerror(fname, n, "tensor was closed") end
end

local shapestr, sameshape, unravel = equal.shapestr, equal.sameshape, equal.unravel
local num, pair = equal.num, equal.pair

---------------------------------------------------------------- assertClose

-- opts (argument n of fname), nil or a table of the known keys; else an
-- argument error with qkv._checkopts's words ("unknown option 'rtl' (did
-- you mean 'rtol'?)")
local function checkopts(fname, n, opts, known)
  local msg, snap = qkv._checkopts(fname, opts, known)
  if msg then argerror(fname, n, msg:sub(#fname + 3)) end
  return snap
end

local function closeopts(opts)
  if opts == nil then return 1e-5, 1e-8 end
  opts = checkopts("assertClose", 3, opts, {"rtol", "atol"})
  local rtol, atol = opts.rtol or 1e-5, opts.atol or 1e-8
  for name, v in pairs{rtol = rtol, atol = atol} do
    if type(v) ~= "number" or not (v >= 0) then
      argerror("assertClose", 3, name .. " must be a non-negative number, got " .. tostring(v))
    end
  end
  return rtol, atol
end

-- a, b as float64 tensors of one shape (a number takes the other's shape)
local function operands(a, b)
  local ta, tb = qkv.is_tensor(a), qkv.is_tensor(b)
  if not ta and type(a) ~= "number" then
    argerror("assertClose", 1, "tensor or number expected, got " .. type(a))
  end
  if not tb and type(b) ~= "number" then
    argerror("assertClose", 2, "tensor or number expected, got " .. type(b))
  end
  local shape = ta and a.shape or tb and b.shape or {}
  local function f64(x)
    if type(x) == "number" then return qkv.full(shape, x, "float64") end
    return x:to("float64")
  end
  return f64(a), f64(b)
end

--[[
Elementwise |a - b| <= atol + rtol * |b|, as numpy.isclose with b the
expected value. Equal values always pass (so do equal infinities, whose
difference is NaN); a non-finite b passes only when a equals it; NaN
passes nowhere. Returns the bool tensor of passing elements and |a - b|.
]]
local function isclose(A, B, rtol, atol)
  local eq = A:eq(B)
  local diff = (A - B):abs():masked_fill(eq, 0)
  local absb = B:abs()
  local tol = (absb * rtol + atol):masked_fill(absb:eq(INF), 0)
  return diff:le(tol), diff
end

-- assertClose(a, b [, {rtol = 1e-5, atol = 1e-8}])
function M.assertClose(a, b, opts)
  local rtol, atol = closeopts(opts)
  if qkv.is_tensor(a) then checkopen("assertClose", 1, a) end
  if qkv.is_tensor(b) then checkopen("assertClose", 2, b) end
  if qkv.is_tensor(a) and qkv.is_tensor(b) and not sameshape(a, b) then
    failure(("assertClose: shapes %s and %s differ"):format(shapestr(a), shapestr(b)))
  end
  local A, B = operands(a, b)
  local ok, diff = isclose(A, B, rtol, atol)
  local n = A:numel()
  local bad = n - ok:sum():item()
  if bad == 0 then return end
  -- the worst violation: the largest difference, NaN counting as largest
  local rank = diff:masked_fill(ok, -1)
  rank = rank:masked_fill(rank:ne(rank), INF)
  local k = rank:reshape(-1):argmax():item()
  local va, vb = A:reshape(-1)[k], B:reshape(-1)[k]
  local where = A:dim() > 0 and " at " .. unravel(A.shape, k) or ""
  local sa, sb = pair(va, vb)
  failure(("assertClose: %d of %d elements differ; max abs difference %s%s (a = %s, b = %s); "
           .. "shapes %s and %s; rtol %g, atol %g")
          :format(bad, n, num(diff:reshape(-1)[k], 6), where, sa, sb, shapestr(a), shapestr(b), rtol, atol))
end

---------------------------------------------------------------- the others

-- assertShape(x, {3, 4}): the shape is a table of sizes (or another x.shape)
function M.assertShape(x, shape)
  if not qkv.is_tensor(x) then
    argerror("assertShape", 1, "tensor expected, got " .. type(x))
  end
  checkopen("assertShape", 1, x)
  if type(shape) ~= "table" then
    argerror("assertShape", 2, "table of sizes expected, got " .. type(shape))
  end
  local count = rawlen(shape)  -- read raw: a proxy's metamethods do not run
  local bad = qkv._checklist("", shape, "the shape")  -- sizes and nothing else
  if bad then argerror("assertShape", 2, bad) end
  local want, same = {}, count == x:dim()
  for i = 1, count do         -- as many as the length says, as `same` counted
    local n = math.tointeger(rawget(shape, i))
    if n == nil then argerror("assertShape", 2, "size " .. i .. " is not an integer") end
    want[i] = tostring(n)
    if same and x:size(i) ~= n then same = false end
  end
  if not same then
    failure(("assertShape: expected shape (%s), got %s")
            :format(table.concat(want, ", "), shapestr(x)))
  end
end

-- assertTensorEqual(a, b): same shape, same dtype, every element equal,
-- NaN equal to NaN (a tensor equals its own copy)
function M.assertTensorEqual(a, b)
  if not qkv.is_tensor(a) then
    argerror("assertTensorEqual", 1, "tensor expected, got " .. type(a))
  end
  if not qkv.is_tensor(b) then
    argerror("assertTensorEqual", 2, "tensor expected, got " .. type(b))
  end
  checkopen("assertTensorEqual", 1, a)
  checkopen("assertTensorEqual", 2, b)
  local why = equal.tensors(a, b)
  if why then failure("assertTensorEqual: " .. why) end
end

-- skipUnlessCuda(): the rest of the test needs a GPU
-- gradcheck(f, inputs [, {eps, atol, rtol}]): the gradients qkv.autograd
-- computes for f at the float64 tensors inputs against central finite
-- differences, as torch.autograd.gradcheck: with v a fixed random tensor of
-- the output's shape, the gradient of sum(f(inputs...) * v) checked element
-- by element, |analytic - numeric| <= atol + rtol * |numeric|. Returns true
-- or fails naming the input and element.
function M.gradcheck(f, inputs, opts)
  if type(f) ~= "function" then argerror("gradcheck", 1, "function expected, got " .. type(f)) end
  if type(inputs) ~= "table" then argerror("gradcheck", 2, "list of tensors expected, got " .. type(inputs)) end
  local bad = qkv._checklist("", inputs, "inputs")   -- tensors and nothing else
  if bad then argerror("gradcheck", 2, bad) end
  opts = checkopts("gradcheck", 3, opts, {"eps", "atol", "rtol"})
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  for name, v in pairs{eps = eps, atol = atol, rtol = rtol} do
    if type(v) ~= "number" or not (v >= 0) or (name == "eps" and v == 0) then
      argerror("gradcheck", 3, name .. " must be a " .. (name == "eps" and "positive" or "non-negative")
               .. " number, got " .. tostring(v))
    end
  end
  -- no input: nothing to check, which passed (PyTorch's gradcheck refuses it)
  if #inputs == 0 then argerror("gradcheck", 2, "no input tensor to check the gradient of") end
  for i = 1, #inputs do          -- a nil among them is an error, not the list's end
    local x = inputs[i]
    if qkv.is_tensor(x) then checkopen("gradcheck", 2, x) end
    if not qkv.is_tensor(x) or x.dtype ~= "float64" then
      argerror("gradcheck", 2, "input " .. i .. " must be a float64 tensor")
    end
  end
  local y0 = qkv.no_grad(f, table.unpack(inputs))
  if not qkv.is_tensor(y0) then argerror("gradcheck", 1, "f must return a tensor, got " .. type(y0)) end
  local v = qkv.rand(y0.shape, "float64") + 0.5
  local function loss(...) return (f(...) * v):sum() end
  local analytic = qkv.grad(loss, inputs)
  for i, x in ipairs(inputs) do  -- (the engine checks a gradient's shape too)
    if analytic[i] ~= nil and analytic[i].shape ~= x.shape then
      failure(("gradcheck: input %d is %s but its gradient is %s"):format(i, tostring(x.shape),
                                                                         tostring(analytic[i].shape)))
    end
  end
  local xs = {}
  for i, x in ipairs(inputs) do xs[i] = x:detach():contiguous():clone() end   -- written below
  for i, x in ipairs(xs) do
    local flat, ga = x:view(-1), analytic[i]:contiguous():view(-1)
    for j = 1, flat:numel() do
      local keep = flat[j]
      flat[j] = keep + eps
      local up = qkv.no_grad(loss, table.unpack(xs)):item()
      flat[j] = keep - eps
      local down = qkv.no_grad(loss, table.unpack(xs)):item()
      flat[j] = keep
      local num, ana = (up - down) / (2 * eps), ga[j]
      if not (math.abs(ana - num) <= atol + rtol * math.abs(num)) then
        failure(("gradcheck: input %d, element %d: analytic %.10g, numeric %.10g")
                :format(i, j, ana, num))
      end
    end
  end
  return true
end

function M.skipUnlessCuda()
  local ok, why = qkv.cuda_available()
  if not ok then lu.skip("needs CUDA (qkv.cuda_available() is false: " .. why .. ")") end
end

-- a name neither this table nor LuaUnit has is an error naming the nearest
-- of both (qkv._strict's: "qkv.test has no function 'assertEqual' (did you
-- mean 'assertEquals'?)"), not nil; LuaUnit's names still read through
local names = {}
for k in pairs(lu) do names[k] = true end
for k in pairs(M) do names[k] = true end
local refuse = getmetatable(qkv._strict(names, "qkv.test")).__index
getmetatable(M).__index = function(_, k)
  local v = lu[k]
  if v ~= nil then return v end
  return refuse(names, k)
end

return M
