-- dist_ddp.lua: qkv.dist.DDP(module [, opts]), data-parallel training as
-- PyTorch's DistributedDataParallel does it. Wrapping broadcasts rank 0's
-- parameters to every rank; the wrapper is called as the module is (and
-- reads through to it: parameters(), train(), fields). Each rank runs its
-- own slice of the batch; during loss:backward() the gradients are summed
-- across ranks in buckets (parameters in reverse order, as backward reaches
-- them, up to bucket_cap_mb each), a bucket's all_reduce started as soon as
-- its last gradient is in, while backward goes on; backward waits for them
-- all before it returns, with every .grad the mean over the ranks.
--
--   opts.bucket_cap_mb   a bucket's size in MB (default 25, as PyTorch's)
--
-- A parameter no rank gave a gradient in a backward keeps its .grad; one
-- that some ranks gave none counts zeros for them. Move or convert the
-- module (m:to(...)) before wrapping it: that makes new parameter tensors.

local qkv = require "qkv"
local D = require "qkv.dist"
local SOURCE = debug.getinfo(1, "S").source

local M = {}

D._library(SOURCE)
local fail = D._fail

local DDP = {}
DDP.__name = "qkv.dist.DDP"
DDP.__index = function(self, k)
  local v = DDP[k]
  if v ~= nil then return v end
  return rawget(self, "module")[k]
end
DDP.__call = function(self, ...) return self.module(...) end
DDP.__tostring = function(self) return "DDP(" .. tostring(self.module) .. ")" end

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
    if b.ready == #b.params and not b.launched then launch(self, b) end
  end
end

function M.DDP(module, opts)
  local has = type(module) == "table" and
              select(2, pcall(function() return module.parameters end))
  if type(has) ~= "function" then
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
  local params = {}
  for i, np in ipairs(module:parameters()) do params[i] = np[2] end
  local self = setmetatable({module = module, _buckets = {}}, DDP)
  qkv.no_grad(function()
    for _, p in ipairs(params) do D.broadcast(p, 0) end
  end)
  if D.world_size() > 1 then
    rawset(self, "_buckets", buckets(params, cap * 1024 * 1024))
    for _, b in ipairs(self._buckets) do
      for _, p in ipairs(b.params) do p:register_post_accumulate_grad_hook(hook(self, b)) end
    end
  end
  return self
end

return M
