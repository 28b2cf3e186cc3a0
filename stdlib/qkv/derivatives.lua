-- derivatives.lua: the backward rule of each differentiable op of qkv, and
-- the wrapping that records them (qkv.autograd installs it once). A rule
-- is rule(orig, args...): it calls the C op `orig`, then records a node
-- whose backward(g) returns the gradient of each tensor input, reduced to
-- that input's shape where it was broadcast. Backward runs with grad mode
-- off, so the rules use the plain ops.

local qkv = require "qkv"
local is_tensor = qkv.is_tensor

local D = {}
local A                                   -- qkv.autograd, at install
local R = {}                              -- name -> rule

-- g summed down to x's shape (the inverse of broadcasting), x a tensor or
-- a list of sizes; nil for a number
local function sum_to(g, x)
  local shape = is_tensor(x) and x.shape or type(x) == "table" and x or nil
  if not shape then return nil end
  for _ = 1, g:dim() - #shape do g = g:sum(1) end
  for i = 1, #shape do
    if shape[i] == 1 and g:size(i) ~= 1 then g = g:sum(i, true) end
  end
  return g
end

D.sum_to = sum_to

local function rec(name, y, inputs, backward, saved)
  return A.record(name, y, inputs, backward, saved)
end

local function dimof(x, d) return d < 0 and x:dim() + 1 + d or d end

---------------------------------------------------------------- arithmetic

R.add = function(f, a, b)
  return rec("AddBackward", f(a, b), {a, b}, function(g) return sum_to(g, a), sum_to(g, b) end)
end
R.sub = function(f, a, b)
  return rec("SubBackward", f(a, b), {a, b}, function(g) return sum_to(g, a), sum_to(-g, b) end)
end
R.mul = function(f, a, b)
  return rec("MulBackward", f(a, b), {a, b}, function(g)
    return sum_to(g * b, a), sum_to(g * a, b)
  end, {a, b})
end
R.div = function(f, a, b)
  return rec("DivBackward", f(a, b), {a, b}, function(g)
    return sum_to(g / b, a), is_tensor(b) and sum_to(-g * a / (b * b), b) or nil
  end, {a, b})
end
-- pow, as PyTorch's pow_backward_self and pow_backward_exponent: a's
-- gradient is 0 where b == 0 (x^0 is 1, flat, where b a^(b-1) at a = 0 is
-- 0 * inf = NaN), b's is 0 where a == 0 and b >= 0 (0^b is flat there,
-- where y log(a) is 0 * -inf = NaN, or 1 * -inf at b = 0)
R.pow = function(f, a, b)
  local y = f(a, b)
  return rec("PowBackward", y, {a, b}, function(g)
    local ga, gb
    if is_tensor(a) then
      if b == 0 then ga = qkv.zeros(a.shape, g.dtype, g.device)
      else
        ga = g * b * qkv.pow(a, b - 1)
        if is_tensor(b) then ga = qkv.where(qkv.eq(b, 0), 0.0, ga) end
        ga = sum_to(ga, a)
      end
    end
    if is_tensor(b) then
      gb = g * y * (is_tensor(a) and qkv.log(a) or math.log(a))
      if is_tensor(a) then
        gb = qkv.where(qkv.eq(a, 0):logical_and(qkv.ge(b, 0)), 0.0, gb)
      elseif a == 0 then
        gb = qkv.where(qkv.ge(b, 0), 0.0, gb)
      end
      gb = sum_to(gb, b)
    end
    return ga or nil, gb or nil
  end, {a, b, y})
end
-- maximum and minimum: the gradient goes to the operand picked, halved
-- between them where they tie, and whole to both where either is NaN (the
-- NaN came from one of them), as PyTorch's rules: maximum(1, 1) gives 0.5
-- to each, maximum(NaN, 1) gives 1 to each
local function extremum_rule(name, lose)
  return function(f, a, b)
    return rec(name, f(a, b), {a, b}, function(g)
      local split = qkv.where(qkv.eq(a, b), g / 2, g)
      return sum_to(split:masked_fill(lose(a, b), 0), a), sum_to(split:masked_fill(lose(b, a), 0), b)
    end, {a, b})
  end
end
R.maximum = extremum_rule("MaximumBackward", qkv.lt)
R.minimum = extremum_rule("MinimumBackward", qkv.gt)
-- d/da log(e^a + e^b) = e^a / (e^a + e^b) = sigmoid(a - b), and d/db
-- sigmoid(b - a)
R.logaddexp = function(f, a, b)
  return rec("LogaddexpBackward", f(a, b), {a, b}, function(g)
    local d = qkv.sub(a, b)
    return sum_to(g * d:sigmoid(), a), sum_to(g * (-d):sigmoid(), b)
  end, {a, b})
end
R.neg = function(f, a)
  return rec("NegBackward", f(a), {a}, function(g) return -g end)
end

---------------------------------------------------------------- unary math

-- name -> gradient factor from x and y
local UNARY = {
  exp = {"ExpBackward", function(_, y) return y end},
  log = {"LogBackward", function(x) return 1 / x end},
  sqrt = {"SqrtBackward", function(_, y) return 0.5 / y end},
  abs = {"AbsBackward", function(x) return x:gt(0):to(x.dtype) - x:lt(0):to(x.dtype) end},
  tanh = {"TanhBackward", function(_, y) return 1 - y * y end},
  sigmoid = {"SigmoidBackward", function(_, y) return y * (1 - y) end},
  relu = {"ReluBackward", function(x) return x:gt(0):to(x.dtype) end},
  silu = {"SiluBackward", function(x)
    local s = x:sigmoid()
    return s * (1 + x * (1 - s))
  end},
  sin = {"SinBackward", function(x) return x:cos() end},
  cos = {"CosBackward", function(x) return -x:sin() end},
}

for name, u in pairs(UNARY) do
  R[name] = function(f, x)
    local y = f(x)
    return rec(u[1], y, {x}, function(g) return g * u[2](x, y) end, {x, y})
  end
end

-- d/dx x Phi(x) = Phi(x) + x phi(x), times g in one pass (qkv._gelu_backward);
-- the halves through float32
R.gelu = function(f, x)
  return rec("GeluBackward", f(x), {x}, function(g)
    local wx = (x.dtype == "float64" or x.dtype == "float32") and x or x:float()
    return qkv._gelu_backward(wx, g:to(wx.dtype)):to(x.dtype)
  end, {x})
end

---------------------------------------------------------------- reductions

-- g (reduced over dim, or over all) made x's shape again
local function expand_back(g, x, dim, keep)
  if dim == nil then return g:expand(table.unpack(x.shape)) end
  if not keep then g = g:unsqueeze(dim) end
  return g:expand(table.unpack(x.shape))
end

-- the dim a reduction's gradient goes back along: none for a 0-d x, whose
-- dim 1 (or -1) reduces all of it (PyTorch's scalar dim)
local function along(x, dim) return dim and x:dim() > 0 and dimof(x, dim) or nil end

R.sum = function(f, x, dim, keep)
  return rec("SumBackward", f(x, dim, keep), {x}, function(g)
    return expand_back(g, x, along(x, dim), keep):contiguous()
  end)
end
R.mean = function(f, x, dim, keep)
  local y = f(x, dim, keep)                 -- first: it checks the arguments
  dim = along(x, dim)
  local n = dim and x:size(dim) or x:numel()
  return rec("MeanBackward", y, {x}, function(g)
    return expand_back(g, x, dim and dimof(x, dim), keep) / n
  end)
end
-- var and std over max(0, n - correction), PyTorch's (1 unless given)
local function var_rule(name, std)
  return function(f, x, dim, keep, correction)
    local y = f(x, dim, keep, correction)
    dim = along(x, dim)
    local n = dim and x:size(dim) or x:numel()
    local div = math.max(0, n - (correction or 1))
    return rec(name, y, {x}, function(g)
      local d = dim and dimof(x, dim)
      local mean = d and x:mean(d, true) or x:mean()
      if not std and not d and div == 0 then
        -- var over all with no degrees of freedom: PyTorch's rule gives
        -- inf (unsigned) where x is off the mean and NaN on it
        return qkv.where(x:eq(mean), 0 / 0, math.huge):to(x.dtype) * g
      end
      -- std: PyTorch's rule gives 0 where the spread is 0 (0 / 0 there)
      local gy = std and (g / y):masked_fill(y:eq(0), 0) or g
      local c = std and 1 / div or 2 / div
      return expand_back(gy, x, d, keep) * (x - mean) * c
    end, {x, y})
  end
end
R.var = var_rule("VarBackward", false)
R.std = var_rule("StdBackward", true)

-- max/min along a dim (values and positions): the gradient goes to the
-- position the op picked. Over all (no dim) it is split evenly among the
-- elements equal to the result, or among the NaNs when the result is NaN,
-- as PyTorch's evenly_distribute_backward: {1, 3, 3}:max() gives {0, 0.5,
-- 0.5}
local function pick_rule(name)
  return function(f, x, dim, keep)
    if is_tensor(dim) then return R[name == "MaxBackward" and "maximum" or "minimum"](f, x, dim) end
    if dim == nil then
      local y = f(x)
      return rec(name, y, {x}, function(g)
        local v = y:item()
        local hit = v ~= v and x:ne(x) or x:eq(y)
        local n = hit:sum():item()
        return qkv.where(hit, g / n, 0):to(x.dtype)
      end, {x, y})
    end
    local v, i = f(x, dim, keep)
    rec(name, v, {x}, function(g)
      if x:dim() == 0 then return g end
      local d = dimof(x, dim)
      local idx = keep and i or i:unsqueeze(d)
      local gg = keep and g or g:unsqueeze(d)
      local n = x:size(d)
      local shape = {}
      for k = 1, x:dim() do shape[k] = k == d and n or 1 end
      local pos = qkv.arange(1, n + 1, "int64", x.device):view(table.unpack(shape))
      return qkv.where(pos:eq(idx), gg, 0):to(x.dtype)
    end)
    return v, i
  end
end
R.max = pick_rule("MaxBackward")
R.min = pick_rule("MinBackward")

---------------------------------------------------------------- products

-- matmul with PyTorch's 1-D rules: the operands as matrices, the gradient
-- of each summed over broadcast batch dims and shaped back
local function matmul_grads(a, b, g)
  local a2 = a:dim() == 1 and a:unsqueeze(1) or a
  local b2 = b:dim() == 1 and b:unsqueeze(2) or b
  -- b's axis first: a dot product's gradient is 0-d, whose unsqueeze(-2)
  -- fails; (1,) then takes it
  local g2 = g
  if b:dim() == 1 then g2 = g2:unsqueeze(-1) end
  if a:dim() == 1 then g2 = g2:unsqueeze(-2) end
  local ga = sum_to(g2:matmul(b2.mT), a2):reshape(table.unpack(a.shape))
  local gb = sum_to(a2.mT:matmul(g2), b2):reshape(table.unpack(b.shape))
  return ga, gb
end

for _, name in ipairs{"matmul", "mm", "bmm"} do
  R[name] = function(f, a, b)
    local label = name == "matmul" and "MmBackward" or name:sub(1, 1):upper() .. name:sub(2) .. "Backward"
    return rec(label, f(a, b), {a, b},
               function(g) return matmul_grads(a, b, g) end, {a, b})
  end
end

R.scores = function(f, Q, K, opts)
  local y = f(Q, K, opts)                   -- first: it checks the arguments
  local scale = opts and opts.scale or 1 / math.sqrt(Q:size(-1))
  return rec("ScoresBackward", y, {Q, K}, function(g)
    return sum_to(g:matmul(K) * scale, Q), sum_to(g.mT:matmul(Q) * scale, K)
  end, {Q, K})
end

R.project = function(f, x, W, b)
  -- PyTorch's names: x @ W is MmBackward, with a bias AddmmBackward
  return rec(b and "AddmmBackward" or "MmBackward", f(x, W, b), {x, W, b}, function(g)
    local d_in, d_out = W:size(1), W:size(2)
    local x2, g2 = x:reshape(-1, d_in), g:reshape(-1, d_out)
    return g:matmul(W:t()), x2:t():matmul(g2), b and g2:sum(1) or nil
  end, {x, W})
end

---------------------------------------------------------------- views

local function simple_view(name, back)
  return function(f, x, ...)
    local args = table.pack(...)
    return rec(name, f(x, ...), {x}, function(g) return back(g, x, table.unpack(args, 1, args.n)) end)
  end
end

R.t = simple_view("TBackward", function(g) return g:t() end)
R.transpose = simple_view("TransposeBackward", function(g, _, a, b) return g:transpose(a, b) end)
R.permute = simple_view("PermuteBackward", function(g, _, ...)
  local p = type((...)) == "table" and (...) or {...}
  p = rawget(p, "dims") or p          -- PyTorch's keyword, x:permute{dims = {...}}
  local inv = {}
  for i, d in ipairs(p) do inv[d < 0 and #p + 1 + d or d] = i end
  return g:permute(table.unpack(inv))
end)
local function reshape_back(g, x) return g:reshape(table.unpack(x.shape)) end
R.view = simple_view("ViewBackward", reshape_back)
R.reshape = simple_view("ReshapeBackward", reshape_back)
R.contiguous = simple_view("CloneBackward", function(g) return g end)
R.clone = simple_view("CloneBackward", function(g) return g end)
R.unsqueeze = simple_view("UnsqueezeBackward", function(g, x, d) return g:reshape(table.unpack(x.shape)) end)
R.squeeze = simple_view("SqueezeBackward", reshape_back)
R.expand = simple_view("ExpandBackward", function(g, x) return sum_to(g, x) end)
R.narrow = simple_view("NarrowBackward", function(g, x, d, start, len)
  local out = qkv.zeros(x.shape, g.dtype, g.device)
  out:narrow(d, start, len):copy_(g)
  return out
end)
R.select = simple_view("SelectBackward", function(g, x, d, i)
  local out = qkv.zeros(x.shape, g.dtype, g.device)
  out:select(d, i):copy_(g)
  return out
end)
-- a copy to an integer or bool dtype is not differentiable: it records
-- nothing and does not require grad, as PyTorch's, where it was recorded
-- and its gradient went back through the integer dtype (the gradient g
-- cast to int64 and on to x: (x:to("int64"):to("float64") * x):sum() at
-- x = {1.5, 2.7} gave x.grad {2, 4}, PyTorch {1, 2})
local TRACKABLE = {float16 = true, bfloat16 = true, float32 = true, float64 = true}
local function to_rule(f, x, ...)
  local y = f(x, ...)
  if rawequal(y, x) or not TRACKABLE[y.dtype] then return y end
  return rec("ToCopyBackward", y, {x}, function(g) return g:to(x.dtype) end)
end
R.float, R.double, R.to = to_rule, to_rule, to_rule

-- x[i] and x[{...}]: the gradient lands in the same place of zeros. One
-- element (x[i] of a 1-D x) is a Lua number, which carries no gradient:
-- with x tracked it is an error, where the graph was cut without a word
-- (x * x[1] gave x's gradient without the path through x[1])
function D.index(f, x, k)
  local y = f(x, k)
  if not is_tensor(y) then
    local where = type(k) == "number" and string.format("x[%d]", k) or "x[{...}]"
    error(string.format("index: %s is one element, a Lua number, and x requires grad: a "
      .. "number carries no gradient; x:select(1, i) (or x[{{i, i}}]) keeps it in the "
      .. "graph, x:detach()[i] or qkv.no_grad reads the value", where),
      require("qkv.caller")(debug.getinfo(1, "S").source, true))
  end
  return rec("IndexBackward", y, {x}, function(g)
    local out = qkv.zeros(x.shape, g.dtype, g.device)
    out[k] = g
    return out
  end)
end

R.cat = function(f, list, dim)
  local y = f(list, dim)
  local d = dimof(list[1], dim or 1)
  return rec("CatBackward", y, list, function(g)
    local gs, at = {}, 1
    for i, x in ipairs(list) do
      gs[i] = g:narrow(d, at, x:size(d))
      at = at + x:size(d)
    end
    return table.unpack(gs, 1, #list)
  end)
end
R.stack = function(f, list, dim)
  local y = f(list, dim)
  local d = dim and (dim < 0 and y:dim() + 1 + dim or dim) or 1
  return rec("StackBackward", y, list, function(g)
    local gs = {}
    for i = 1, #list do gs[i] = g:select(d, i) end
    return table.unpack(gs, 1, #list)
  end)
end

---------------------------------------------------------------- masks, selection

R.masked_fill = function(f, x, m, v)
  return rec("MaskedFillBackward", f(x, m, v), {x}, function(g) return g:masked_fill(m, 0) end)
end
R.mask = function(f, S, m, fill)
  return rec("MaskBackward", f(S, m, fill), {S}, function(g)
    return sum_to(g:masked_fill(m:eq(0), 0), S)
  end)
end
-- the triangle keeps or zeroes each element, and so its gradient
R.tril = function(f, x, k)
  return rec("TrilBackward", f(x, k), {x}, function(g) return g:tril(k) end)
end
R.triu = function(f, x, k)
  return rec("TriuBackward", f(x, k), {x}, function(g) return g:triu(k) end)
end
R.where = function(f, c, a, b)
  return rec("WhereBackward", f(c, a, b), {nil, a, b}, function(g)
    return nil, sum_to(g:masked_fill(c:logical_not(), 0), a), sum_to(g:masked_fill(c, 0), b)
  end)
end
-- clamp, as PyTorch's rules. Number bounds: the gradient goes to x where
-- lo <= x <= hi. One tensor bound alone is maximum(x, lo) or minimum(x,
-- hi), whose rule it takes (halved at a tie, whole to both at a NaN). Both
-- bounds with a tensor among them (clamp_backward_min_max): x's where
-- neither x < lo nor x > hi, lo's where x < lo <= hi, hi's where x > hi >=
-- lo or hi < lo. A tensor bound that requires grad gets its gradient
-- (summed back to its shape), where it got none.
local clamp_max_of = extremum_rule("ClampBackward", qkv.lt)   -- max(x, lo)
local clamp_min_of = extremum_rule("ClampBackward", qkv.gt)   -- min(x, hi)
R.clamp = function(f, x, lo, hi)
  local tlo, thi = is_tensor(lo), is_tensor(hi)
  if tlo and hi == nil then return clamp_max_of(function(a, b) return f(a, b, nil) end, x, lo) end
  if thi and lo == nil then return clamp_min_of(function(a, b) return f(a, nil, b) end, x, hi) end
  local y = f(x, lo, hi)
  if not (tlo or thi) then
    return rec("ClampBackward", y, {x}, function(g)
      local keep = qkv.ones(x.shape, "bool", x.device)
      if lo ~= nil then keep = keep:logical_and(qkv.ge(x, lo)) end
      if hi ~= nil then keep = keep:logical_and(qkv.le(x, hi)) end
      return g:masked_fill(keep:logical_not(), 0)
    end, {x})
  end
  return rec("ClampBackward", y, {x, tlo and lo or nil, thi and hi or nil}, function(g)
    local L = tlo and lo or qkv.full(x.shape, lo, x.dtype, x.device)
    local H = thi and hi or qkv.full(x.shape, hi, x.dtype, x.device)
    local zero = qkv.zeros({}, g.dtype, g.device)
    local gx = qkv.where(qkv.lt(x, L):logical_or(qkv.gt(x, H)), zero, g)
    local glo = tlo and sum_to(qkv.where(qkv.lt(x, L):logical_and(qkv.le(L, H)), g, zero), lo)
    local ghi = thi and sum_to(qkv.where(qkv.le(L, H):logical_and(qkv.gt(x, H))
                                         :logical_or(qkv.lt(H, L)), g, zero), hi)
    return sum_to(gx, x), glo or nil, ghi or nil
  end, {x, lo, hi})
end

-- reads along positions: their gradients add back where they read
R.gather = function(f, x, dim, idx)
  return rec("GatherBackward", f(x, dim, idx), {x}, function(g)
    return qkv.zeros(x.shape, g.dtype, g.device):scatter_add_(dim, idx, g)
  end)
end
-- sort and topk: each value's gradient back to the position it came from
-- (PyTorch's SortBackward, TopkBackward); the positions take none. dim is
-- the argument after the first `skip` ones (topk's k)
local function gather_back(name, skip)
  return function(f, x, ...)
    local v, i = f(x, ...)
    local dim = select(skip + 1, ...)
    rec(name, v, {x}, function(g)
      if x:dim() == 0 then return g end
      return qkv.zeros(x.shape, g.dtype, g.device):scatter_add_(dimof(x, dim or -1), i, g)
    end)
    return v, i
  end
end
R.sort = gather_back("SortBackward", 0)
R.topk = gather_back("TopkBackward", 1)
R.index_select = function(f, x, dim, idx)
  return rec("IndexSelectBackward", f(x, dim, idx), {x}, function(g)
    return qkv.zeros(x.shape, g.dtype, g.device):index_add_(dim, idx, g)
  end)
end
R.embedding = function(f, ids, W)
  return rec("EmbeddingBackward", f(ids, W), {nil, W}, function(g)
    local d = W:size(2)
    return nil, qkv.zeros(W.shape, g.dtype, g.device):index_add_(1, ids:reshape(-1), g:reshape(-1, d))
  end)
end

---------------------------------------------------------------- rows

R.softmax = function(f, x, dim)
  local y = f(x, dim)
  local d = dim or -1
  return rec("SoftmaxBackward", y, {x}, function(g)
    if y.dtype == "float32" or y.dtype == "float64" then      -- the backend's entry
      return qkv._softmax_backward(y, g:to(y.dtype), d)
    end
    return y * (g - (g * y):sum(d, true))
  end, {y})
end
-- the gradient of running sums is the running sums from the other end,
-- summed as such (g flipped, cumsum, flipped back, as PyTorch's), where
-- sum - cumsum + g cancels: g = {1e8, 1, 1} in float32 gave {1e8, 1, 1}
-- for {1e8 + 2, 2, 1}, and g = {inf, 1} gave NaN for {inf, 1}
R.cumsum = function(f, x, dim)
  return rec("CumsumBackward", f(x, dim), {x}, function(g)
    if g:dim() == 0 then return g end
    return g:flip(dim):cumsum(dim):flip(dim)
  end)
end
R.log_softmax = function(f, x, dim)
  local y = f(x, dim)
  local d = dim or -1
  return rec("LogSoftmaxBackward", y, {x}, function(g)
    return g - y:exp() * g:sum(d, true)
  end, {y})
end

-- layer_norm's backward in one pass over the rows (qkv._layer_norm_backward,
-- in double; the halves through float32)
function D.layer_norm(f, x, shape, w, b, eps)
  local y = f(x, shape, w, b, eps)
  local k = type(shape) == "table" and #shape or 1
  eps = eps or 1e-5
  return rec("NativeLayerNormBackward", y, {x, nil, w, b}, function(g)
    local n = 1
    for i = x:dim() - k + 1, x:dim() do n = n * x:size(i) end
    local dt = (x.dtype == "float64" or x.dtype == "float32") and x.dtype or "float32"
    local gx, gw, gb = qkv._layer_norm_backward(x:to(dt), g:to(dt), n, w and w:to(dt), eps,
                                                w ~= nil, b ~= nil)
    return gx:to(x.dtype), nil, gw and gw:reshape(table.unpack(w.shape)):to(w.dtype),
      gb and gb:reshape(table.unpack(b.shape)):to(b.dtype)
  end, {x})
end
R.layer_norm = D.layer_norm

-- rms_norm's backward in one pass over the rows (qkv._rms_norm_backward, in
-- double; the halves through float32, whose eps is their default as well)
function D.rms_norm(f, x, shape, w, eps)
  local y = f(x, shape, w, eps)
  local k = type(shape) == "table" and #shape or 1
  return rec("RmsNormBackward", y, {x, nil, w}, function(g)
    local n = 1
    for i = x:dim() - k + 1, x:dim() do n = n * x:size(i) end
    local dt = (x.dtype == "float64" or x.dtype == "float32") and x.dtype or "float32"
    local gx, gw = qkv._rms_norm_backward(x:to(dt), g:to(dt), n, w and w:to(dt), eps, w ~= nil)
    return gx:to(x.dtype), nil, gw and gw:reshape(table.unpack(w.shape)):to(w.dtype)
  end, {x})
end
R.rms_norm = D.rms_norm

---------------------------------------------------------------- attention

-- attention runs its C forward either way, and each way has a backward of
-- its own; neither composes the forward again from the primitives

-- mixed dtypes go back through float32 copies (float64 where one is); the
-- gradients come back in each input's dtype
local function wide(x) return (x.dtype == "float64" or x.dtype == "float32") and x or x:float() end
local FLOAT = {float16 = true, bfloat16 = true, float32 = true, float64 = true}

-- weights = false: the fused kernel forward, which also leaves each
-- query's log-sum-exp (lse, float32 for the halves), and a backward that
-- recomputes the scores tile by tile from it (qkv._attention_backward), as
-- FlashAttention-2's does, so neither way holds n_q x n_k. Q, K, V of one
-- dtype stay in it both ways (the halves natively where the device can: the
-- GPU's tensor cores, the CPU's float32 kernels widening each tile as they
-- read it; else the dispatch computes in float32 copies)
local function fused_attention(orig, Q, K, V, m, causal, scale)
  if m then m = qkv.ne(m, 0) end
  local out, lse
  local one = FLOAT[Q.dtype] and K.dtype == Q.dtype and V.dtype == Q.dtype
  if one then
    out, lse = qkv._attention_lse(Q, K, V, m, causal, scale)
  else
    out = orig(Q, K, V, {mask = m, causal = causal, scale = scale, weights = false})
  end
  return rec("ScaledDotProductFlashAttentionBackward", out, {Q, K, V}, function(g)
    local dq, dk, dv
    if one then
      dq, dk, dv = qkv._attention_backward(Q, K, V, out, g:to(out.dtype), m, causal, scale, lse)
    else
      dq, dk, dv = qkv._attention_backward(wide(Q), wide(K), wide(V), wide(out),
                                           wide(g:to(out.dtype)), m, causal, scale)
    end
    return sum_to(dq, Q):to(Q.dtype), sum_to(dk, K):to(K.dtype), sum_to(dv, V):to(V.dtype)
  end, {Q, K, V, out})
end

-- weights = true: the composed forward in C (out and W, one node for
-- both), and its analytic backward. With S = Q K^T * scale (masked) and
-- W = softmax(S): the gradient reaching W is g_out V^T plus W's own
-- (when W was used), dS = W (gW - rowsum(gW W)) (softmax's backward; a
-- masked or keyless place has W = 0 and so no gradient), dQ = scale dS K,
-- dK = scale dS^T Q, dV = W^T g_out, each summed back to its input's shape
local function weights_attention(orig, Q, K, V, m, causal, scale)
  local out, W = orig(Q, K, V, {mask = m, causal = causal, scale = scale})
  rec("AttentionWeightsBackward", {out, W}, {Q, K, V}, function(g_out, g_W)
    local Wf, gW = wide(W), nil
    if g_out then g_out = wide(g_out:to(out.dtype)) end
    if g_out then gW = g_out:matmul(wide(V).mT) end
    if g_W then gW = gW and gW + wide(g_W:to(W.dtype)) or wide(g_W:to(W.dtype)) end
    local dS = qkv._softmax_backward(Wf, gW, -1) * scale
    local dQ = sum_to(dS:matmul(wide(K)), Q):to(Q.dtype)
    local dK = sum_to(dS.mT:matmul(wide(Q)), K):to(K.dtype)
    local dV = g_out and sum_to(Wf.mT:matmul(g_out), V):to(V.dtype)
    return dQ, dK, dV or nil
  end, {Q, K, V, W})
  return out, W
end

-- the options checked and resolved by the binding, as attention itself
-- reads them: one mask (with key_padding_mask and PyTorch's is_causal in
-- it) and qkv's causal flag
R.attention = function(orig, Q, K, V, opts)
  local m, causal, scale, weights = qkv._attention_opts(Q, K, opts)
  if weights then return weights_attention(orig, Q, K, V, m, causal, scale) end
  return fused_attention(orig, Q, K, V, m, causal, scale)
end

---------------------------------------------------------------- compositions

-- ops whose gradient is that of the differentiable ops they are made of:
-- with grad needed they run as that composition
local C = {}

C.heads = function(_, x, h)
  local n, d = x:size(-2), x:size(-1)
  local shape = {}
  for i = 1, x:dim() - 2 do shape[i] = x:size(i) end
  shape[#shape + 1], shape[#shape + 2], shape[#shape + 3] = n, h, d // h
  return x:reshape(table.unpack(shape)):transpose(-3, -2)
end

C.merge = function(_, x)
  local h, n, dh = x:size(-3), x:size(-2), x:size(-1)
  local shape = {}
  for i = 1, x:dim() - 3 do shape[i] = x:size(i) end
  shape[#shape + 1], shape[#shape + 2] = n, h * dh
  return x:transpose(-3, -2):reshape(table.unpack(shape))
end

C.align = function(_, x, W, b)
  if type(W) == "table" and not is_tensor(W) then
    local h = qkv.project(x, W[1], W[2]):gelu()
    return qkv.project(h, W[3], W[4])
  end
  return qkv.project(x, W, b)
end

C.dropout = function(orig, x, p, training)
  p = p == nil and 0.5 or p
  if training == false or p == 0 or type(p) ~= "number" or not (p >= 0 and p <= 1) then
    return orig(x, p, training)
  end
  -- x times the mask, as the binding (and PyTorch's input * noise): a
  -- dropped inf or NaN is NaN, as PyTorch's, where masked_fill made it 0
  local keep = qkv.rand(x.shape, x.dtype, x.device):ge(p)
  return x * keep * (p < 1 and 1 / (1 - p) or 0)
end

---------------------------------------------------------------- install

-- the rules as the bindings call them (lauxgrad.c): rule(orig, args...), orig
-- being the binding itself, run here with grad mode off
function D.install(autograd)
  A = autograd
  local rules = {}
  for name, rule in pairs(R) do
    rules[name] = function(orig, ...) return rule(A.raw(orig), ...) end
  end
  rules.index = function(orig, ...) return D.index(A.raw(orig), ...) end
  for name, comp in pairs(C) do
    rules[name] = function(orig, ...) return comp(A.raw(orig), ...) end
  end
  return rules
end

return D
