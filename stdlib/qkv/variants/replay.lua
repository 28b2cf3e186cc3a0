-- variants/replay.lua: a traced mod evaluated on whole tensors, for the
-- paths that hold the n_q x n_k scores anyway (weights = true, and devices
-- without the fused variants): each node becomes the tensor op of the same
-- name over the scores, with b and h broadcast over the batch dims, i down
-- the queries and j along the keys. Index arithmetic runs in float64
-- (exact far past any length), the score in its own dtype; autograd
-- records every op, so gradients reach q, k, v and the captured tensors.

local qkv = require "qkv"

local M = {}

local function istensor(x) return qkv.is_tensor(x) end

-- Lua's value of op on numbers (vm/common/mods.h's formulas)
local NUM = {
  neg = function(a) return -a end, exp = math.exp, log = math.log,
  tanh = function(a)
    local e = math.exp(-2 * math.abs(a))
    return (a < 0 and -1 or 1) * (1 - e) / (1 + e)
  end,
  abs = math.abs, sqrt = math.sqrt, sigmoid = function(a) return 1 / (1 + math.exp(-a)) end,
  sin = math.sin, cos = math.cos, relu = function(a) return a > 0 and a or 0 end,
  add = function(a, b) return a + b end, sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end, div = function(a, b) return a / b end,
  pow = function(a, b) return a ^ b end, idiv = function(a, b) return math.floor(a / b) end,
  mod = function(a, b) return math.fmod(a, b) ~= 0 and (a - math.floor(a / b) * b) or 0 end,
  minimum = math.min, maximum = math.max,
}

-- floor of a float64 tensor with finite elements
local function floor(x)
  local t = x:long():double()
  return qkv.where(t:gt(x), t - 1, t)
end

local CMP = {lt = "gt", le = "ge", gt = "lt", ge = "le", eq = "eq", ne = "ne"}

local function binary(op, a, b)
  if not istensor(a) and not istensor(b) then
    if CMP[op] then
      local r = op == "lt" and a < b or op == "le" and a <= b or op == "gt" and a > b or
                op == "ge" and a >= b or op == "eq" and a == b or a ~= b
      return r
    end
    if op == "and" then return a and b end
    if op == "or" then return a or b end
    return NUM[op](a, b)
  end
  if CMP[op] then
    if istensor(a) then return a[op](a, b) end
    return b[CMP[op]](b, a)
  end
  if op == "and" or op == "or" then
    if not istensor(a) then a, b = b, a end
    if type(b) == "boolean" then
      if op == "and" then return b and a or qkv.zeros_like(a, {dtype = "bool"}) end
      return b and qkv.ones_like(a, {dtype = "bool"}) or a
    end
    return op == "and" and qkv.logical_and(a, b) or qkv.logical_or(a, b)
  end
  if op == "add" then return a + b elseif op == "sub" then return a - b
  elseif op == "mul" then return a * b elseif op == "div" then return a / b
  elseif op == "pow" then return qkv.pow(a, b)
  elseif op == "idiv" then return floor(a / b)
  elseif op == "mod" then return a - floor(a / b) * b
  elseif op == "minimum" then return qkv.minimum(istensor(a) and a or b, istensor(a) and b or a)
  elseif op == "maximum" then return qkv.maximum(istensor(a) and a or b, istensor(a) and b or a)
  end
  error("replay: no op " .. op)
end

-- t[idx...] for index tensors (or numbers), each checked: an integer in
-- 1..size of its dim, else an error naming the mod
local function load(fname, mod, t, idx)
  local shape, flat, stride = nil, nil, 1
  for d = #idx, 1, -1 do
    local k = idx[d]
    if not istensor(k) then k = qkv.tensor(k, "float64") end
    local n = t:size(d)
    local bad = k:lt(1):logical_or(k:gt(n)):logical_or(k:ne(k))
    if not bad:any():item() then
      local finite = k:detach()
      bad = finite:ne(floor(finite))
    end
    if bad:any():item() then
      local at = bad:reshape(bad:numel()):long():argmax():item()
      local v = k:detach():reshape(k:numel())[at]
      error(string.format("%s: %s: index %d of the captured tensor %s is %s, not an integer in 1..%d",
                          fname, mod, d, tostring(t.shape), tostring(v), n), 0)
    end
    local part = (k - 1) * stride
    flat = flat and flat + part or part
    stride = stride * n
  end
  shape = flat.shape
  local rows = t:reshape(t:numel())               -- a view where t allows one
  local picked = qkv.index_select(rows, 1, flat:long():reshape(flat:numel()) + 1)
  return picked:reshape(table.unpack(shape)):double()
end

-- the values of the nodes reachable from roots, given the leaves
function M.run(T, roots, leaves, fname)
  local val = {}
  local function eval(x)
    local v = val[x]
    if v ~= nil then return v end
    local a = x.args
    if x.op == "const" then
      if x.kind == "bool" then v = x.k ~= 0 else v = x.k end
    elseif leaves[x.op] ~= nil then v = leaves[x.op]
    elseif x.op == "load" then
      local idx = {}
      for d, y in ipairs(a) do idx[d] = eval(y) end
      v = load(fname, T.capmod[x.cap] or "a mod", T.caps[x.cap], idx)
    elseif x.op == "not" then
      local u = eval(a[1])
      v = istensor(u) and u:logical_not() or not u
    elseif x.op == "where" then
      local c, p, q = eval(a[1]), eval(a[2]), eval(a[3])
      if not istensor(c) then v = c and p or q
      else
        if not istensor(p) and not istensor(q) then p = qkv.full_like(c, p, {dtype = type(p) == "boolean" and "bool" or "float64"}) end
        if type(p) == "boolean" or type(q) == "boolean" then
          if not istensor(p) then p = qkv.full_like(c, p, {dtype = "bool"}) end
          if not istensor(q) then q = qkv.full_like(c, q, {dtype = "bool"}) end
        end
        v = qkv.where(c, p, q)
      end
    elseif #a == 1 then
      local u = eval(a[1])
      v = istensor(u) and u[x.op](u) or NUM[x.op](u)
    else
      v = binary(x.op, eval(a[1]), eval(a[2]))
    end
    val[x] = v
    return v
  end
  local out = {}
  for n, r in pairs(roots) do out[n] = eval(r) end
  return out
end

-- the leaves for scores S (..., n_q, n_k) of a call whose output has the
-- batch dims `batch` (a list): b, h as (batch..., 1, 1), i as (n_q, 1),
-- j as (1, n_k), all float64 on S's device, score S itself
function M.leaves(S, batch, nq, nk)
  local dev = S.device
  local L = {score = S}
  L.i = qkv.arange(1, nq + 1, "float64", dev):reshape(nq, 1)
  L.j = qkv.arange(1, nk + 1, "float64", dev):reshape(1, nk)
  local nb = #batch
  if nb == 0 then L.b, L.h = 1, 1 return L end
  local count = 1
  for _, n in ipairs(batch) do count = count * n end
  local shape = {}
  for d, n in ipairs(batch) do shape[d] = n end
  shape[nb + 1], shape[nb + 2] = 1, 1
  local H = batch[nb]
  local flat = qkv.arange(0, count, "float64", dev):reshape(table.unpack(shape))
  L.h = flat - floor(flat / H) * H + 1
  L.b = floor(flat / H) + 1
  return L
end

return M
