-- params.lua: valid-looking arguments for the API fuzzer
-- (tests/fuzz/fuzz_api.lua), so that calls get past the argument checks
-- into the kernels.
--
--   P.setup(qkv, option_names)  after values.lua's V.setup; option_names
--                          are more known option names (qkv.plot's)
--   P.begin_call()         a family for the call: sizes that agree (B, n,
--                          m, d = h * dh, e) and a float dtype
--   P.current()            that family
--   P.param(name, F, fname, self, args)  a value for a parameter named as
--                          in the docstrings' signatures (Q, K, V, x, W, b,
--                          dim, opts, path, ...); any value for a name not
--                          known here
--   P.module(F)            a module made by a constructor of P.MODULES
--   P.module_with(F, method)  one whose class has the method (append)
--   P.OPTIONS              generators by option name (mask, causal, ...)

local V = require "values"

local P = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance
local CUR         -- the family of the call being made

---------------------------------------------------------------- families

-- sizes that agree, so that calls get past the argument checks
function P.family()
  local h, dh = pick{1, 2, 4}, pick{1, 2, 3}
  local F = {B = pick{1, 2, 3}, n = pick{1, 2, 3, 5}, m = pick{1, 2, 4},
             h = h, dh = dh, d = h * dh, e = pick{1, 2, 3, h * dh},
             dtype = chance(0.75) and "float32" or "float64"}
  if chance(0.08) then F.n = 0 end          -- 0 tokens
  if chance(0.05) then F.m = 0 end
  return F
end

-- the family of the call about to be made (option tables' masks use it)
function P.begin_call()
  CUR = P.family()
  return CUR
end

function P.current() return CUR end

-- a float tensor of the family's dtype, sometimes a non-contiguous view
local function ftensor(F, shape)
  return V.tensor(F.dtype, shape, chance(0.25) and pick(V.LAYOUT_NAMES) or "contiguous")
end

local function batched(F, s)
  if chance(0.5) then table.insert(s, 1, F.B) end
  return s
end

local function xshape(F)
  return pick{{F.n, F.d}, {F.B, F.n, F.d}, {F.B, F.h, F.n, F.dh}, {F.d}, {F.n, F.m}}
end

local function bool_mask(F)
  local r = random(4)
  if r == 1 then return qkv.causal(F.n, F.m) end
  if r == 2 then
    local len = {}
    for i = 1, F.B do len[i] = random(0, F.m) end
    return qkv.padding(len, F.m)
  end
  if r == 3 then return V.tensor("bool", batched(F, {F.n, F.m})) end
  return V.tensor("bool", {F.B, 1, F.n, F.m})
end

local function nested_numbers(shape)
  local function build(d)
    if d > #shape then return random() * 2 - 1 end
    local t = {}
    for i = 1, shape[d] do t[i] = build(d + 1) end
    return t
  end
  return build(1)
end

-- sizes with the same number of elements as x (for view and reshape)
local function same_numel(x)
  local n = x:numel()
  local r = random(4)
  if r == 1 then return {-1} end
  if r == 2 then return {n} end
  if r == 3 and n > 0 then
    for k = math.min(n, 4), 1, -1 do
      if n % k == 0 then return {k, -1} end
    end
  end
  local s = {}
  for i, v in ipairs(x.shape) do s[i] = v end
  return s
end

-- sizes x can expand to: its size-1 dims grown, maybe a new leading dim
local function expand_sizes(x)
  local s = {}
  for i, v in ipairs(x.shape) do s[i] = (v == 1 and chance(0.5)) and random(2, 3) or v end
  if #s < 8 and chance(0.3) then table.insert(s, 1, random(1, 3)) end
  if #s > 0 and chance(0.2) then s[random(#s)] = -1 end
  return s
end

local function permutation(n)
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do local j = random(i); p[i], p[j] = p[j], p[i] end
  return p
end

local function dim_of(self)
  local nd = (qkv.is_tensor(self) and self:dim()) or 3
  if nd == 0 then return pick{1, -1} end
  return random(1, nd) * (chance(0.3) and -1 or 1)
end

-- a tensor that is not closed
local function open(x)
  return qkv.is_tensor(x) and pcall(function() return x.ndim end)
end

-- a mask for x: bool, of x's shape with some dims 1, or a family mask
local function mask_for(F, x)
  if not open(x) or chance(0.3) then return bool_mask(F) end
  local s = {}
  for i, v in ipairs(x.shape) do s[i] = chance(0.3) and 1 or v end
  while #s > 0 and chance(0.2) do table.remove(s, 1) end
  return V.tensor(chance(0.8) and "bool" or pick(V.DTYPES), s)
end

-- valid-looking values by the parameter names of the docstrings; a name
-- not listed gets any value
local PARAMS = {
  Q = function(F) return ftensor(F, batched(F, {F.n, F.d})) end,
  K = function(F) return ftensor(F, batched(F, {F.m, F.d})) end,
  V = function(F) return ftensor(F, batched(F, {F.m, F.e})) end,
  S = function(F) return ftensor(F, batched(F, {F.n, F.m})) end,
  x = function(F, fname)
    if fname and fname:match("save") then return V.tensor() end
    return ftensor(F, xshape(F))
  end,
  y = function(F, fname, self, args)
    local x = self or args[1]
    if fname:match("matmul") and open(x) and x:dim() > 0 and chance(0.8) then
      return ftensor(F, chance(0.5) and {x:size(-1), F.e} or batched(F, {x:size(-1), F.m}))
    end
    return chance(0.3) and V.any_float() or ftensor(F, xshape(F))
  end,
  a = function(F, fname)
    if fname:match("arange") then return pick{0, 1, -2, 0.5} end
    return ftensor(F, {F.n, F.d})
  end,
  b = function(F, fname, _, args)
    if fname:match("arange") then return pick{3, 5, 1.5, 0} end
    if fname:match("project") or fname:match("align") then return ftensor(F, {F.e}) end
    if fname:match("assert") and open(args[1]) and chance(0.6) then
      local c = args[1]:clone()
      return (chance(0.5) or c.dtype == "bool") and c or c + 1e-7
    end
    return ftensor(F, pick{{F.n, F.d}, {F.d}, {F.m, 1, F.d}})
  end,
  W = function(F) return ftensor(F, {F.d, F.e}) end,
  w = function(F) return chance(0.8) and ftensor(F, {F.n, F.m}) or nested_numbers({F.n, F.m}) end,
  m = function(F, fname, self, args)
    if fname:match("plot") then return ftensor(F, chance(0.8) and {F.n, F.m} or {F.n, F.m, 3}) end
    if fname:match("mask") then return mask_for(F, self or args[1]) end
    return F.m
  end,
  mask = function(F, _, self, args) return mask_for(F, self or args[1]) end,
  metadata = function() return pick{{format = "pt"}, {}, {k = 1}, {"x"}} end,
  tensors = function(F)
    local t = {}
    for i = 1, random(0, 3) do
      t[pick{"a", "b", "w", "x.y", "arr_0", "c" .. i}] = chance(0.5) and ftensor(F, xshape(F)) or V.tensor()
    end
    return t
  end,
  t = function(F, fname)
    if fname:match("colormap") then return random() end
    return nested_numbers(xshape(F))
  end,
  list = function(F)
    local l, s = {}, xshape(F)
    for i = 1, random(1, 3) do l[i] = ftensor(F, s) end
    return l
  end,
  lengths = function(F)
    local l = {}
    for i = 1, F.B do l[i] = random(0, F.n) end
    return l
  end,
  shape = function(F, _, _, args)
    if qkv.is_tensor(args[1]) and chance(0.5) then return args[1].shape end
    return {F.n, F.d}
  end,
  n = function(F) return F.n end, n_q = function(F) return F.n end,
  n_k = function(F) return F.m end, h = function(F) return F.h end,
  d_in = function(F) return F.d end, d_out = function(F) return F.e end,
  d_model = function(F) return F.d end, d_k = function(F) return F.dh end,
  nhead = function(F) return F.h end,
  -- scaled_dot_product_attention's, as Q, K, V; F.linear's (out, in) weight
  query = function(F) return ftensor(F, batched(F, {F.n, F.d})) end,
  key = function(F) return ftensor(F, batched(F, {F.m, F.d})) end,
  value = function(F) return ftensor(F, batched(F, {F.m, F.e})) end,
  input = function(F, fname)
    if not fname:match("linear") then return V.any(1) end
    return ftensor(F, batched(F, {F.n, F.d}))
  end,
  weight = function(F) return ftensor(F, {F.e, F.d}) end,
  bias = function(F) return ftensor(F, {F.e}) end,
  -- ModuleList's
  module = function() return P.module(P.family()) end,
  modules = function()
    local l = {}
    for i = 1, random(0, 3) do l[i] = P.module(P.family()) end
    return l
  end,
  index = function(_, fname)
    if not fname:match("insert") then return V.any(1) end
    return pick{1, 2, -1, 0, 5}
  end,
  d_vision = function(F) return F.e end, d_text = function(F) return F.d end,
  -- the decoder's modules (SwiGLU, KVCache)
  hidden = function(F) return F.e end, batch = function() return random(1, 2) end,
  heads = function(F) return F.h end, max_len = function(F) return F.n + random(0, 3) end,
  head_dim = function(F) return F.dh end,
  dim = function(_, _, self) return dim_of(self) end,
  keepdim = function() return chance(0.5) end,
  start = function() return random(1, 2) end,
  len = function() return random(0, 1) end,
  i = function() return random(1, 2) end,
  k = function() return pick{1, 2, -1, "shape", "dtype", "ndim", "sum", "nope"} end,
  step = function() return pick{1, 2, 0.5, -1} end,
  dtype = function() return pick(V.DTYPES) end,
  ["dtype | device"] = function() return chance(0.7) and pick(V.DTYPES) or pick{"cpu", "cuda"} end,
  v = function() return pick{0, 1, -math.huge, 0.5} end,
  fill = function() return pick{-math.huge, -1e9, 0} end,
  eps = function() return pick{1e-8, 0, 1} end,
  opts = function() return V.option_table(1) end,
  method = function() return pick{"linear", "mlp", "identity"} end,
  cmap = function() return pick{"viridis", "blues", "coolwarm", "mako", {"#000000", "#ffffff"}} end,
  name = function() return pick{"fig.png", "sub/fig.png", "x.npy"} end,
  path = function(_, fname)
    local read = not fname:match("save")
    if fname:match("png") then return pick{"o.png", V.TMP .. "/p.png", "in.png", "cut.png", "in.npy"} end
    if fname:match("safetensors") then
      return read and pick{"in.safetensors", "cut.safetensors", "flip.safetensors", "in.npy"}
                  or pick{"a.safetensors", V.TMP .. "/s.safetensors"}
    end
    if fname:match("z$") then
      return read and pick{"a.npz", "in.npz", "cut.npz", "flip.npz", "in.npy"} or pick{"a.npz", V.TMP .. "/z.npz"}
    end
    if read then return pick{"x.npy", "in.npy", "cut.npy", "flip.npy", "empty.npy", "in.png"} end
    return pick{V.TMP .. "/f.npy", "x.npy", "a.npy"}
  end,
  panels = function(F)
    local p = {}
    for i = 1, random(1, 3) do
      p[i] = {ftensor(F, {F.n, F.m}), chance(0.5) and {title = "p" .. i} or nil}
    end
    return p
  end,
  series = function(F) return {{ftensor(F, {F.n, 2}), label = "s"}} end,
  -- plot.line: a series (a 1-D tensor or a list, maybe with a NaN) or a list of them
  ys = function(F)
    local function one()
      if chance(0.5) then return ftensor(F, {F.n}) end
      local l = nested_numbers({F.n})
      if F.n > 0 and chance(0.3) then l[random(F.n)] = pick{0 / 0, math.huge} end
      return l
    end
    if chance(0.6) then return one() end
    local l = {}
    for i = 1, random(1, 3) do l[i] = one() end
    return l
  end,
  on = function() return chance(0.5) end,
  src = function(_, _, self)
    if type(self) == "table" and self.state_dict and chance(0.7) then return self:state_dict() end
    return P.module(P.family())
  end,
  ["..."] = function(F) return ftensor(F, batched(F, {F.n, F.d})) end,
}
PARAMS.d1 = function(F, fname, self)
  if fname:match("permute") and qkv.is_tensor(self) then return permutation(self:dim()) end
  if fname:match("transpose") then return dim_of(self) end
  if fname:match("view") or fname:match("reshape") then return same_numel(self) end
  if fname:match("expand") then return expand_sizes(self) end
  return {F.n, F.d}
end
PARAMS.d2 = PARAMS.dim
PARAMS.m1 = function() return P.module(P.family()) end
PARAMS.m2 = PARAMS.m1

-- the optimizers' and schedulers' (their calls got past no check without
-- them): parameters as a list of tensors, a module or its pairs; an
-- optimizer; the schedulers' counts, lambda and list of the optimizer's
local function leaf(F) return ftensor(F, {F.n, F.d}):detach():requires_grad_() end
PARAMS.params = function(F)
  local r = random(3)
  if r == 1 then
    local l = {}
    for i = 1, random(1, 3) do l[i] = leaf(F) end
    return l
  end
  local m = P.module(F)
  if r == 2 then return m end
  local pairs_of = {}
  for name, t in m:named_parameters() do pairs_of[#pairs_of + 1] = {name, t} end
  return pairs_of
end
PARAMS.opt = function(F)
  local ok, o = pcall(function() return qkv.optim.SGD({leaf(F)}, {lr = pick{0.1, 1e-3}}) end)
  return ok and o or V.any(1)
end
PARAMS.step_size = function() return pick{1, 2, 3} end
PARAMS.T_max = function() return pick{1, 5, 10} end
PARAMS.lr_lambda = function() return pick{function(e) return 0.9 ^ e end, function() return 1 end} end
PARAMS.schedulers = function(_, _, _, args)
  local ok, l = pcall(function()
    local S = qkv.optim.lr_scheduler
    return {S.StepLR(args[1], 2), S.LinearLR(args[1])}
  end)
  return ok and l or V.any(1)
end
PARAMS.milestones = function() return {pick{1, 2, 4}} end
PARAMS.max_norm = function() return pick{1, 0.5, 10} end
PARAMS.norm_type = function() return pick{2, 1, math.huge} end
PARAMS.mode = function() return chance(0.5) end
PARAMS.device_or_dtype = function() return pick{"float64", "float32", "cpu"} end

function P.param(name, F, fname, self, args)
  local g = PARAMS[name]
  if g == nil then return V.any(1) end
  return g(F, fname, self, args)
end

P.MODULES = {}     -- {make = function(F) -> module}, filled by the registry

-- a module that has the method (ModuleList's append), or any module
function P.module_with(F, method)
  local m = P.module(F)
  -- (a module without it says so: reading a field it lacks is an error)
  local function has(x)
    local ok, f = pcall(function() return x[method] end)
    return ok and type(f) == "function"
  end
  if has(m) then return m end
  local makers = {}
  for i, make in ipairs(P.MODULES) do makers[i] = make end
  for i = #makers, 2, -1 do local j = random(i); makers[i], makers[j] = makers[j], makers[i] end
  for _, make in ipairs(makers) do
    for _ = 1, 16 do                -- a draw of its arguments may fail (an option it lacks)
      local ok, m = pcall(make, F)
      if ok and type(m) == "table" and has(m) then return m end
      if ok then break end
    end
  end
  return P.module(F)
end

-- a module built from the family (by a constructor from the registry)
function P.module(F)
  for _ = 1, 4 do
    local make = pick(P.MODULES)
    if make == nil then break end
    local ok, m = pcall(make, F)
    if ok and type(m) == "table" then return m end
  end
  return qkv.nn.Linear(F.d, F.e)
end

---------------------------------------------------------------- options

-- value generators for option keys (mask, causal, file, title, ...), used
-- by option tables; a key without one gets any value
local function option_values()
  return {
    mask = function() return bool_mask(CUR) end,
    causal = function() return chance(0.5) end,
    scale = function() return pick{0.5, 1, 0, 0 / 0, math.huge, -1} end,
    weights = function() return chance(0.5) end,
    bias = function() return chance(0.5) end,
    dtype = function() return pick(V.DTYPES) end,
    rtol = function() return pick{1e-5, 0, 1, -1} end,
    atol = function() return pick{1e-8, 0, 1, 0 / 0} end,
    file = function() return pick{"o.png", V.TMP .. "/p.png", "fig.png", "sub/q.png", "/nonexistent/dir/x.png"} end,
    title = function() return pick{"t", "a\nb", "", string.rep("w", 300)} end,
    annotate = function() return pick{true, false, "%.1f", "%d", "%s", "%q"} end,
    cmap = function() return pick{"viridis", "blues", "nope", {"#000000"}, {"#000000", "#ffffff"}} end,
    vmin = function() return pick{0, -1, 0 / 0, math.huge} end,
    vmax = function() return pick{1, 0, -math.huge} end,
    xlabels = function() local l = {} for i = 1, random(0, 5) do l[i] = "c" .. i end return l end,
    ylabels = function() local l = {} for i = 1, random(0, 5) do l[i] = "r" .. i end return l end,
    bins = function() return pick{1, 5, 0, -1, 2.5} end,
    range = function() return pick{{0, 1}, {1, 0}, {0 / 0, 1}, {}} end,
    color = function() return pick{true, false, "#3498db", "red"} end,
    alpha = function() return pick{0, 0.5, 1, 2} end,
    rows = function() return pick{1, 2, 0} end,
    cols = function() return pick{1, 2, 0, 100} end,
    out = function() return false end,
    width = function() return pick{20, 80, 1, 0} end,
    kind = function() return pick{"heatmap", "hist", "image", "scatter", "line", "pie"} end,
    x = function() return chance(0.5) and nested_numbers({CUR.n}) or qkv.arange(CUR.n) end,
    label = function() return pick{"loss", {"a"}, {"a", "b"}, {}, 3} end,
    xrotation = function() return pick{0, 45, 90, 30} end,
    ylabel_rotation = function() return pick{0, 90} end,
    colorbar = function() return chance(0.5) end,
  }
end

function P.setup(q, option_names)
  qkv = q
  P.OPTIONS = option_values()
  local names = {}
  for k in pairs(P.OPTIONS) do names[#names + 1] = k end
  for _, k in ipairs(option_names or {}) do
    if not P.OPTIONS[k] then names[#names + 1] = k; P.OPTIONS[k] = false end
  end
  table.sort(names)
  V.OPTIONS, V.OPTION_NAMES = P.OPTIONS, names
  V.make_module = function() return P.module(P.family()) end
end

return P
