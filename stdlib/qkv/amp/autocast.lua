-- amp/autocast.lua: qkv.autocast, PyTorch's torch.autocast. Inside an
-- autocast region, each op on the region's device runs in the dtype
-- PyTorch's autocast gives it there: the products (matmul, mm, bmm,
-- project and F.linear, scores, attention and
-- F.scaled_dot_product_attention, align) in the region's low dtype
-- (bfloat16 on the CPU by default, float16 on the GPU), the losses in
-- float32, and on the GPU also what PyTorch's CUDA list runs in float32
-- (softmax, log_softmax, layer_norm, exp, log, sum, cumsum, ...). Other
-- ops run in their inputs' dtype. Only float32, float16 and bfloat16
-- inputs are cast (float64 never is, as PyTorch).
--
--   qkv.autocast({device_type = "cpu", dtype = "bfloat16"}, f, ...) -> f(...)'s results
--   local ac <close> = qkv.autocast{device_type = "cpu"}   -- to the block's end
--   qkv.is_autocast_enabled([device_type]) -> boolean
--   qkv.get_autocast_dtype(device_type) -> "bfloat16" or "float16"
--
-- The casts are ops like any other (x:to(dtype)), so autograd records
-- them: a product's backward runs in the dtype its forward ran in, and the
-- gradients reach float32 parameters in float32 (master weights).
-- Regions belong to a coroutine, as grad mode does: a coroutine without a
-- region of its own sees the main thread's. The hook that hands each op
-- here is the bindings' autograd hook (bindings/lauxgrad.c), so this
-- module loads qkv.autograd first.

local qkv = require "qkv"
require "qkv.autograd"
local caller = require "qkv.caller"
local open = require("qkv.methods").open_tensor

local SOURCE = debug.getinfo(1, "S").source
local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

local M = {}

-- what each op runs in, per device: "low" (the region's dtype) or "fp32".
-- CPU: PyTorch's lower-precision list (products, attention); its float32
-- list holds no op qkv has as a binding but the losses (M.fp32 below).
-- CUDA: the same products, and its float32 list's ops that qkv has.
local LOW = {"matmul", "mm", "bmm", "project", "scores", "attention", "align"}
local CUDA_FP32 = {"softmax", "log_softmax", "layer_norm", "exp", "log", "log1p", "log2",
                   "log10", "expm1", "pow", "reciprocal", "rsqrt", "sinh", "cosh", "tan",
                   "acos", "asin", "erfinv", "sum", "prod", "cumsum", "cumprod", "norm",
                   "softplus"}
local POLICY = {cpu = {}, cuda = {}}
for _, op in ipairs(LOW) do POLICY.cpu[op], POLICY.cuda[op] = "low", "low" end
for _, op in ipairs(CUDA_FP32) do POLICY.cuda[op] = "fp32" end
M.POLICY = POLICY

local DEFAULT = {cpu = "bfloat16", cuda = "float16"}      -- torch.get_autocast_dtype's
local LOWS = {bfloat16 = true, float16 = true}
local ELIGIBLE = {float32 = true, bfloat16 = true, float16 = true}

-- thread (MAIN for the main one) -> its open regions, innermost last:
-- {cpu = dtype|false, cuda = ...}
local regions = setmetatable({}, {__mode = "k"})
local MAIN = {}

local function running()
  local co, main = coroutine.running()
  return main and MAIN or co
end

-- the running coroutine's innermost region, else the main thread's
local function current()
  local r = regions[running()]
  if r == nil or #r == 0 then r = regions[MAIN] end
  return r and r[#r]
end

-- PyTorch's cast cache: within the outermost region (cleared when it
-- closes), a float32 leaf that requires grad (a parameter) is cast to the
-- low dtype once, and its later uses share that cast, autograd's node and
-- all, where the innermost region has cache_enabled (the default). An
-- entry holds the parameter's version, so a write into it (an optimizer's
-- step inside the region) casts it again, and one cache serves each grad
-- mode (a cast made under no_grad has no node to share); a cast whose
-- node a backward has freed is made again. Weak keys: a
-- parameter collected takes its entry along.
local caches = {[true] = setmetatable({}, {__mode = "k"}), [false] = setmetatable({}, {__mode = "k"})}
local depth = 0                       -- regions open, in every coroutine

-- x in dtype `to`; a transposed view of a contiguous tensor (a Linear's
-- weight as project takes it, W:t()) cast as that tensor and seen
-- transposed again, as PyTorch's to() keeps a dense tensor's strides: a
-- contiguous pass, where the transposed copy took 10x as long (MiniLM)
local function to_dtype(x, to)
  if x:dim() >= 2 and not x:is_contiguous() then
    local t = x:transpose(-1, -2)
    if t:is_contiguous() then return t:to(to):transpose(-1, -2) end
  end
  return x:to(to)
end

local function cached_to(x, to)
  if to == "float32" or x.dtype ~= "float32" or not x.requires_grad or not x.is_leaf then
    return to_dtype(x, to)
  end
  local cache, v = caches[qkv.is_grad_enabled()], x:_version()
  local e = cache[x]
  -- (a backward frees the cast's node: a later forward casts again)
  local node = e and e.y.grad_fn
  if e and e.version == v and e.to == to and not (node and node.freed) then return e.y end
  local y = to_dtype(x, to)
  cache[x] = {version = v, to = to, y = y}
  return y
end

-- the casts of an op's tensor arguments to `to`; nil when none changes
local function cast(to, n, cache, ...)
  local args, changed = {...}, false
  for i = 1, n do
    local x = args[i]
    if open(x) and ELIGIBLE[x.dtype] and x.dtype ~= to then
      args[i], changed = cache and cached_to(x, to) or to_dtype(x, to), true
    end
  end
  return changed and args or nil
end

-- the low dtype of the region open here on the device of an op's
-- arguments (its first open tensor's), and that device; nil when none is
local function region_of(n, ...)
  local r = current()
  if not r then return nil end
  for i = 1, n do
    local x = select(i, ...)
    if open(x) then return r[x.device] or nil, x.device end
  end
end

-- the n arguments of op `name` cast as the region open here says; nil
-- when none changes
local function cast_args(name, n, ...)
  local low, dev = region_of(n, ...)
  local kind = low and POLICY[dev][name]
  if not kind then return nil end
  return cast(kind == "low" and low or "float32", n, current().cache, ...)
end

-- the bindings' hook (lauxgrad.c): false, or true and the op's results
-- on its cast arguments
local function hook(name, op, ...)
  local n = select("#", ...)
  local args = cast_args(name, n, ...)
  if not args then return false end
  return true, qkv._autocast_call(op, table.unpack(args, 1, n))
end
qkv._autocast(hook)

-- op's arguments cast ahead of the op, for a library function that hands
-- the op a view of a parameter (F.linear's weight:t()): the parameter
-- itself is cast, so that its cast is the one cached
function M.args(name, ...)
  local n = select("#", ...)
  local args = cast_args(name, n, ...)
  if not args then return ... end
  return table.unpack(args, 1, n)
end

-- a library function that PyTorch's autocast runs in float32 (the losses):
-- its tensor arguments widened where a region is open on their device
function M.fp32(...)
  local n = select("#", ...)
  if not region_of(n, ...) then return ... end
  local args = cast("float32", n, false, ...)
  if not args then return ... end
  return table.unpack(args, 1, n)
end

-- the region an options table asks for: {cpu = dtype|false, cuda = ...},
-- the enclosing region's other device kept
local function region(opts)
  local msg, o = qkv._checkopts("autocast", opts, {"device_type", "dtype", "enabled", "cache_enabled"},
                                {"enabled", "cache_enabled"})
  if msg then error(msg, caller(SOURCE, true)) end
  local dev = o.device_type
  if dev == nil then fail("autocast: device_type is required ('cpu' or 'cuda'), as torch.autocast's") end
  if DEFAULT[dev] == nil then
    fail("autocast: device_type must be 'cpu' or 'cuda', got %s", tostring(dev))
  end
  local dt = o.dtype == nil and DEFAULT[dev] or o.dtype
  if not LOWS[dt] then
    fail("autocast: dtype must be 'bfloat16' or 'float16', got %s%s", tostring(dt),
         dt == "float32" and " (for float32 throughout, enabled = false)" or "")
  end
  local outer, r = current(), {}
  for d in pairs(DEFAULT) do r[d] = outer and outer[d] or false end
  r[dev] = o.enabled ~= false and dt
  r.cache = o.cache_enabled ~= false
  return r
end

local function push(r)
  local co = running()
  regions[co] = regions[co] or {}
  table.insert(regions[co], r)
  depth = depth + 1
  qkv._autocast(1)
end

local function pop(r)
  local list = regions[running()]
  for i = list and #list or 0, 1, -1 do
    if list[i] == r then
      table.remove(list, i)
      depth = depth - 1
      if depth == 0 then
        for _, c in pairs(caches) do for k in pairs(c) do c[k] = nil end end
      end
      qkv._autocast(-1)
      return
    end
  end
end

local Region = {__name = "autocast"}
Region.__index = function(_, k) fail("autocast: a region has no field '%s'", tostring(k)) end
Region.__close = function(self) pop(rawget(self, "r")) end
Region.__tostring = function(self)
  local r = rawget(self, "r")
  return string.format("autocast(cpu = %s, cuda = %s)", tostring(r.cpu), tostring(r.cuda))
end

-- qkv.autocast(opts, f, ...) -> f(...)'s results, f run inside the region;
-- qkv.autocast(opts) -> a region open until it is closed (<close>)
function M.autocast(opts, f, ...)
  local r = region(opts)
  if f == nil then
    if select("#", ...) > 0 then fail("autocast: arguments after a missing function") end
    push(r)
    return setmetatable({r = r}, Region)
  end
  if type(f) ~= "function" then
    fail("autocast: bad argument #2 (function expected, got %s)", type(f))
  end
  push(r)
  local res = table.pack(pcall(f, ...))
  pop(r)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

function M.is_autocast_enabled(dev)
  if dev ~= nil and DEFAULT[dev] == nil then
    fail("is_autocast_enabled: device_type must be 'cpu' or 'cuda', got %s", tostring(dev))
  end
  local r = current()
  return r ~= nil and r[dev or "cuda"] ~= false     -- PyTorch's default asks about CUDA
end

function M.get_autocast_dtype(dev)
  if DEFAULT[dev] == nil then
    fail("get_autocast_dtype: device_type must be 'cpu' or 'cuda', got %s", tostring(dev))
  end
  local r = current()
  return r and r[dev] or DEFAULT[dev]
end

return M
