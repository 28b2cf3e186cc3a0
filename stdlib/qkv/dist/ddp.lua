-- dist/ddp.lua: qkv.dist.DDP(module [, opts]), data-parallel training as
-- PyTorch's DistributedDataParallel does it. Wrapping broadcasts rank 0's
-- parameters to every rank. The wrapper is a qkv.nn Module whose one child,
-- "module", is the wrapped module, as PyTorch's: called, it runs the
-- module's forward, and every Module method (train, eval, to, double,
-- parameters, state_dict, load, zero_grad) reaches the wrapped module, so
-- an optimizer over the wrapper steps the tensors the forward uses; other
-- fields read through to the module (ddp.weight is ddp.module.weight), while its own
-- methods and assignments to its fields go through ddp.module. Each rank
-- runs its own slice of the batch; during loss:backward() the gradients are summed
-- across ranks in buckets (parameters in reverse order, as backward reaches
-- them, up to bucket_cap_mb each), a bucket's all_reduce started as soon as
-- its last gradient is in and every bucket before it has started (the same
-- order on every rank), while backward goes on; backward waits for them
-- all before it returns, with every .grad the mean over the ranks.
--
--   opts.bucket_cap_mb   a bucket's size in MB (default 25, as PyTorch's)
--
-- A parameter no rank gave a gradient in a backward keeps its .grad; one
-- that some ranks gave none counts zeros for them. The module may be moved
-- or converted after wrapping (ddp:to(...), ddp:double()): each forward
-- finds the parameters it holds now and hooks the new tensors.

local qkv = require "qkv"
local D = require "qkv.dist"
local nnm = require "qkv.nn.module"
local methods = require "qkv.methods"
local SOURCE = debug.getinfo(1, "S").source

local M = {}

D._library(SOURCE)
local fail = D._fail

-- the class: a Module (its methods, through the metatable), whose child
-- "module" is kept as _module, so that an assignment to it is seen
local DDP = setmetatable({}, {__index = nnm.Module})
DDP.__name = "DDP"
DDP.__call = function(self, ...) return self:forward(...) end
DDP.__tostring = function(self) return self:repr("") end

-- ddp.k: the wrapped module for "module", a method of DDP or Module, else
-- the wrapped module's field; a method of the wrapped module's own class
-- (a ModuleList's append) would run on the wrapper, so it is an error
DDP.__index = function(self, k)
  if k == "module" then return rawget(self, "_module") end
  local v = DDP[k]
  if v ~= nil then return v end
  local m = rawget(self, "_module")
  v = m[k]
  if type(v) == "function" and rawget(m, k) == nil then
    fail("DDP: %s is a method of the wrapped %s: call ddp.module:%s()", tostring(k),
         getmetatable(m).__name, tostring(k))
  end
  return v
end

-- ddp.k = v: the wrapped module is fixed; a field it has is set on it
-- (ddp.weight = t would leave ddp.module.weight as it was); anything else is the
-- wrapper's own, as a Module's
DDP.__newindex = function(self, k, v)
  if k == "module" then fail("DDP: 'module' is the wrapped module: wrap another with qkv.dist.DDP") end
  local m = rawget(self, "_module")
  if type(k) == "string" and k:sub(1, 1) ~= "_" and m[k] ~= nil then
    fail("DDP: ddp.%s = ... would not reach the wrapped module, whose %s it reads: set ddp.module.%s",
         k, k, k)
  end
  nnm.set_slot(self, k, v)
end

-- the buckets: same dtype and device, reverse parameter order, each up to
-- cap bytes (a bigger parameter has one of its own)
local function buckets(params, cap)
  local list, cur, bytes = {}, nil, 0
  for i = #params, 1, -1 do
    local p = params[i]
    local b = p:numel() * p:element_size()
    if cur == nil or cur.dtype ~= p.dtype or cur.device ~= p.device or bytes + b > cap then
      cur = {params = {}, dtype = p.dtype, device = p.device, ready = 0}
      list[#list + 1] = cur
      bytes = 0
    end
    cur.params[#cur.params + 1] = p
    bytes = bytes + b
  end
  return list
end

-- one flat tensor of the bucket's gradients (zeros for a missing one),
-- then one number per parameter: 1 where this rank had its gradient
local function flatten(b)
  local parts = {}
  for i, p in ipairs(b.params) do
    local g = p.grad
    parts[i] = g and g:reshape(-1) or qkv.zeros({p:numel()}, p.dtype, p.device)
  end
  local had = {}
  for i, p in ipairs(b.params) do had[i] = p.grad and 1 or 0 end
  parts[#parts + 1] = qkv.tensor(had, b.dtype):to(b.device)
  return qkv.cat(parts, 1)
end

local function launch(self, b)
  b.launched = true
  b.flat = flatten(b)
  b.work = D.all_reduce(b.flat, "sum", {async_op = true})
  -- MPI moves a started collective along only when called: look at the
  -- others now and then, so that they finish while backward goes on
  for _, o in ipairs(self._buckets) do
    if o.work and o ~= b then o.work:is_completed() end
  end
end

-- every bucket reduced and written back as the mean, at backward's end
local function finish(self)
  local n = D.world_size()
  for _, b in ipairs(self._buckets) do
    if not b.launched then launch(self, b) end
  end
  for _, b in ipairs(self._buckets) do
    b.work:wait()
    local flat, at, k = b.flat, 1, #b.params
    local had = flat:narrow(1, flat:numel() - k + 1, k):tolist()
    for i, p in ipairs(b.params) do
      local m = p:numel()
      if had[i] > 0 then
        p.grad = (flat:narrow(1, at, m) / n):view(p.shape):contiguous()
      end
      at = at + m
    end
    b.launched, b.ready, b.work, b.flat = false, 0, nil, nil
  end
  self._queued = false
end

local function hook(self, b)
  return function()
    if not self._queued then
      self._queued = true
      require("qkv.autograd").queue_callback(function() finish(self) end)
    end
    b.ready = b.ready + 1
    -- in bucket order only, as PyTorch's reducer: each rank's k-th
    -- all_reduce must be every rank's k-th bucket, and ranks whose backward
    -- reaches the buckets in another order (a layer one rank did not use,
    -- control flow that depends on the data) summed one bucket's gradients
    -- with another's of the same size
    for _, o in ipairs(self._buckets) do
      if not o.launched then
        if o.ready < #o.params then break end
        launch(self, o)
      end
    end
  end
end

-- the reducing hooks on the parameters the module holds now: made at the
-- wrapping, and again at a forward after they were replaced (ddp:to(...)),
-- the old ones taken off. A world of one reduces nothing: no hooks
local function hook_params(self)
  if D.world_size() == 1 then return end
  local params = {}
  for i, p in ipairs(self._module:parameters()) do params[i] = p end
  local now = rawget(self, "_hooked")
  if now and #now == #params then
    local same = true
    for i, p in ipairs(params) do same = same and rawequal(p, now[i]) end
    if same then return end
  end
  for _, h in ipairs(rawget(self, "_handles")) do h:remove() end
  local handles = {}
  rawset(self, "_buckets", buckets(params, rawget(self, "_cap")))
  for _, b in ipairs(self._buckets) do
    for _, p in ipairs(b.params) do
      handles[#handles + 1] = p:register_post_accumulate_grad_hook(hook(self, b))
    end
  end
  rawset(self, "_handles", handles)
  rawset(self, "_hooked", params)
end

-- ddp(...): the wrapped module's forward, on the tensors it holds now
function DDP:forward(...)
  hook_params(self)
  return self._module(...)
end

function DDP:extra() return "" end

methods.guard(DDP, "ddp", "DDP")          -- ddp.forward(x) says so

function M.DDP(module, opts)
  if not nnm.is_module(module) then
    fail("dist.DDP: bad argument #1 (a qkv.nn module expected, got %s)", type(module))
  end
  if opts ~= nil and type(opts) ~= "table" then
    fail("dist.DDP: options must be a table, got %s", type(opts))
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "bucket_cap_mb" then
      fail("dist.DDP: unknown option '%s' (it has bucket_cap_mb)", tostring(k))
    end
  end
  local cap = opts.bucket_cap_mb == nil and 25 or opts.bucket_cap_mb
  if type(cap) ~= "number" or cap <= 0 or cap ~= cap then
    fail("dist.DDP: option 'bucket_cap_mb' must be a positive number, got %s", tostring(cap))
  end
  -- the world first, so that a missing Open MPI is an error naming DDP
  local started, why = pcall(D.init)
  if not started then fail("dist.DDP: %s", tostring(why):gsub("^.-dist%.init: ", "")) end
  local params = module:parameters()
  local self = setmetatable({_module = module, _params = {}, _children = {"module"},
                             training = module.training, _buckets = {}, _handles = {},
                             _cap = cap * 1024 * 1024}, DDP)
  qkv.no_grad(function()
    for _, p in ipairs(params) do D.broadcast(p, 0) end
  end)
  hook_params(self)
  return self
end

return M
