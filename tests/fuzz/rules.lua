-- rules.lua: the API fuzzer's draws for the rules of issue 28 ("no silent
-- wrong value"), each a call that one rule obliges to raise, or whose
-- success must give a value the rule fixes:
--
--   options     an options table with a misspelt known key or a PyTorch
--               name the function does not know: must raise
--   duplicates  qkv.optim.SGD / Adam / AdamW given one parameter twice: must raise
--   grad        p.grad = v: a number, string, table, boolean or a tensor
--               of another shape, dtype or device must raise naming grad;
--               nil or a tensor like p must succeed and read back
--   convert     float -> int64 / int32 (to, long, copy_, qkv.tensor) of
--               NaN, ±inf or out of range must raise; in range, a success
--               gives the values truncated toward 0
--   crc         qkv.loadz of an npz whose bytes do not match its CRC
--   nul         a tensor name with a NUL, saved or loaded as safetensors
--   sizes       shapes whose nonzero sizes overflow int64 (view, reshape,
--               expand, zeros, full, heads) and indices at the int64 limits
--               (gather, index_select, embedding, scatter_add_, index_add_)
--   shapes      a key of a shape or options table that is a keyword
--               (dtype, size, dims, reduce, ...) or not one: understood
--               (rules_shapes.lua)
--   modules     a module changed by assignment, then a method of it
--   ddp         qkv.dist.DDP's wrapper in a world of one (rules_modules.lua)
--   schedulers  the lr schedulers' bad options, values and optimizers
--   dotcall     a method called with '.' (rules_calls.lua)
-- (rules_data.lua draws convert, crc, nul and sizes, and writes their files)
--
--   S.setup(qkv, plot_spec, enabled)  enabled: class name -> true
--   S.rewrite(e, self, args, n, names) -> self, n, marks, hooks, class
--       or nothing when no enabled class has a draw for e. marks are
--       hostile.lua's ({[i] = why a success is wrong}); hooks.post(),
--       hooks.post_error(err) say what is wrong after a success or an
--       error (or nil); hooks.allow: texts an error may hold in place of
--       the function's name; hooks.call: a function called with the
--       arguments in place of the entry (the rule's own call), with
--       hooks.accept the names its error may give and hooks.desc its text
--   S.CLASSES              the class names, in order
--   S.OPTIONS              function name -> {keys = the options it knows}
--   S.misspell(key, known) a key one letter off, not in the set known
-- An entry with a field `as` (an --extra fake) is drawn as the function
-- that field names.
--
-- Every choice is drawn here, from math.random, before the call.

local V = require "values"
local P = require "params"
local D = require "rules_data"
local RS = require "rules_shapes"
local RM = require "rules_modules"
local RC = require "rules_calls"

local S = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance
local enabled = {}

S.CLASSES = {"options", "duplicates", "grad", "convert", "crc", "nul", "sizes",
             "shapes", "modules", "ddp", "schedulers", "dotcall"}

-- a float tensor that requires grad
local function param(shape)
  local x = V.tensor(chance(0.7) and "float32" or "float64", shape or V.shape(16), "contiguous")
  return x:requires_grad_()
end

local function params_list()
  local l = {}
  for i = 1, random(1, 3) do l[i] = param() end
  return l
end

-- an optimizer, for the schedulers
local function optimizer() return qkv.optim.SGD(params_list(), {lr = 0.1}) end

---------------------------------------------------------------- options

-- the keys each function knows (the plots' come from qkv.plot.spec), and
-- arguments before the options that get it past its other checks
local ATTN = {"mask", "causal", "is_causal", "scale", "weights", "key_padding_mask", "score_mod",
              "mask_mod", "block_mask"}
local function dims(F) return {F.d, F.dh} end
local function heads(F) return {F.d, F.h} end
local OPTIONS = {
  ["qkv.attention"] = {keys = {"enable_gqa", table.unpack(ATTN)}},
  ["qkv.rope"] = {keys = {"base", "interleaved"}, args = function(F)
    return {V.tensor(F.dtype, {F.n, 4}), 1}
  end},
  ["qkv.nn.RotaryEmbedding"] = {keys = {"base", "max_len", "interleaved"},
                                args = function() return {4} end},
  ["qkv.multinomial"] = {keys = {"replacement"}, args = function(F)
    return {V.tensor("float32", {F.n, F.d}):abs(), 1}
  end},
  ["qkv.sample"] = {keys = {"temperature", "top_k", "top_p"}},
  ["qkv.nn.SwiGLU"] = {keys = {"bias", "dtype", "device"}, args = function(F) return {F.d, F.d} end},
  ["qkv.nn.KVCache"] = {keys = {"dtype", "device"}, args = function(F) return {1, 1, F.n, F.d} end},
  ["qkv.scores"] = {keys = {"scale"}},
  ["qkv.nn.Linear"] = {keys = {"dtype", "bias", "device"}},
  ["qkv.nn.LayerNorm"] = {keys = {"dtype", "eps", "elementwise_affine", "bias", "device"}},
  ["qkv.nn.RMSNorm"] = {keys = {"dtype", "eps", "elementwise_affine", "device"}},
  ["qkv.nn.Embedding"] = {keys = {"dtype", "device"}, args = function(F) return {F.n + 1, F.d} end},
  ["qkv.nn.SelfAttention"] = {keys = {"bias", "dtype", "device"}, at = 3, args = dims},
  ["qkv.nn.CrossAttention"] = {keys = {"bias", "dtype", "device"}, at = 3, args = dims},
  ["qkv.nn.MultiHeadAttention"] = {keys = {"bias", "dtype", "device"}, at = 3, args = heads},
  ["qkv.nn.MultiHeadCrossAttention"] = {keys = {"bias", "dtype", "device"}, at = 3, args = heads},
  ["qkv.nn.TokenAligner"] = {keys = {"dtype", "device"}, args = function(F) return {F.e, F.d, "linear"} end},
  ["qkv.nn.AlignedCrossAttention"] = {keys = {"dtype", "device"},
                                      args = function(F) return {F.e, F.d, F.h, "mlp"} end},
  ["qkv.nn.TransformerEncoderLayer"] = {keys = {"dim_feedforward", "dropout", "activation",
                                                "layer_norm_eps", "batch_first", "norm_first", "bias",
                                                "dtype", "device"},
                                        args = heads},
  ["qkv.nn.functional.scaled_dot_product_attention"] = {
    keys = {"attn_mask", "is_causal", "scale", "dropout_p", "enable_gqa"}, args = function(F)
      return {V.tensor(F.dtype, {F.n, F.d}), V.tensor(F.dtype, {F.m, F.d}), V.tensor(F.dtype, {F.m, F.e})}
    end},
  ["qkv.optim.SGD"] = {keys = {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"},
                       args = function() return {params_list()} end},
  ["qkv.optim.Adam"] = {keys = {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize",
                                 "decoupled_weight_decay"},
                        args = function() return {params_list()} end},
  ["qkv.optim.AdamW"] = {keys = {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"},
                         args = function() return {params_list()} end},
  ["qkv.optim.lr_scheduler.StepLR"] = {keys = {"gamma", "step_size"},
                                       args = function() return {optimizer(), 2} end},
  ["qkv.optim.lr_scheduler.CosineAnnealingLR"] = {keys = {"eta_min", "T_max"},
                                                  args = function() return {optimizer(), 10} end},
  ["qkv.optim.lr_scheduler.LinearLR"] = {keys = {"start_factor", "end_factor", "total_iters"},
                                         args = function() return {optimizer()} end},
  ["qkv.nn.clip_grad_norm_"] = {keys = {"norm_type", "error_if_nonfinite"},
                                args = function() return {params_list(), 1, 2} end},
  ["Module:named_parameters"] = {keys = {"prefix", "recurse"}},
  ["qkv.test.assertClose"] = {keys = {"rtol", "atol"}},
  ["qkv.test.gradcheck"] = {keys = {"eps", "atol", "rtol"}, args = function()
    return {function(x) return (x * x):sum() end, {qkv.randn(3, "float64"):requires_grad_()}}
  end},
  ["qkv.wordpiece.load"] = {keys = {"lower", "max_length", "strip_accents"},
                            args = function() return {"vocab.txt"} end},
  -- the attention modules' forward: Module:forward draws one of them
  ["Module:forward"] = {keys = ATTN},
  ["qkv.autocast"] = {keys = {"device_type", "dtype", "enabled", "cache_enabled"}},
}
-- qkv.dist in the fuzzer's world of one: the collectives take
-- {async_op}, the attentions split across ranks qkv.attention's three
local function nd(F) return V.tensor(F.dtype, {F.n, F.d}) end
local DIST = {
  barrier = function() return {} end, all_gather = function(F) return {nd(F)} end,
  all_reduce = function(F) return {nd(F), "sum"} end,
  reduce_scatter = function(F) return {nd(F), "max"} end,
  broadcast = function(F) return {nd(F), 0} end,
  all_to_all = function(F) return {nd(F), 1, 2} end,
  send = function(F) return {nd(F), 0, 0} end, recv = function(F) return {nd(F), 0, 0} end,
}
for name, args in pairs(DIST) do OPTIONS["qkv.dist." .. name] = {keys = {"async_op"}, args = args} end
local function qkv3(F)
  return {V.tensor("float64", {F.h, F.n, F.d}), V.tensor("float64", {F.h, F.m, F.d}),
          V.tensor("float64", {F.h, F.m, F.e})}
end
OPTIONS["qkv.dist.ring_attention"] = {keys = {"causal", "mask", "scale"}, args = qkv3}
OPTIONS["qkv.dist.ulysses_attention"] = {keys = {"causal", "mask", "scale"}, args = qkv3}
-- the staples' factories (stdlib/qkv/composite/factories.lua): PyTorch's dtype and
-- device keywords
local FACTORY = {"dtype", "device"}
local function like(F) return {V.tensor(F.dtype, {F.n, F.d})} end
for _, name in ipairs{"zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"} do
  OPTIONS["qkv." .. name] = {keys = FACTORY, args = like}
end
OPTIONS["qkv.full_like"] = {keys = FACTORY, args = function(F) return {like(F)[1], 2} end}
OPTIONS["qkv.randint"] = {keys = FACTORY, args = function(F) return {0, 5, {F.n, F.d}} end}
OPTIONS["qkv.randperm"] = {keys = FACTORY, args = function(F) return {F.n} end}
OPTIONS["qkv.linspace"] = {keys = FACTORY, args = function(F) return {0, 1, F.n} end}
OPTIONS["qkv.logspace"] = {keys = FACTORY, args = function(F) return {0, 1, F.n, 2} end}
for _, name in ipairs{"new_zeros", "new_ones", "new_empty"} do
  OPTIONS["Tensor:" .. name] = {keys = FACTORY, args = function(F) return {{F.n, F.d}} end}
end
OPTIONS["Tensor:new_full"] = {keys = FACTORY, args = function(F) return {{F.n, F.d}, 3} end}
-- the losses (stdlib/qkv/nn/loss.lua): logits and classes 1, and the
-- modules' options; qkv.data's loader, on a dataset of rows
local CE, NLL = {"weight", "ignore_index", "reduction", "label_smoothing"}, {"weight", "ignore_index", "reduction"}
local function logits(F) return {V.tensor(F.dtype, {F.n, F.d}), qkv.ones({F.n}, "int64")} end
OPTIONS["qkv.nn.cross_entropy"] = {keys = CE, args = logits}
OPTIONS["qkv.nn.nll_loss"] = {keys = NLL, args = logits}
OPTIONS["qkv.nn.CrossEntropyLoss"] = {keys = CE, args = function() return {} end}
OPTIONS["qkv.nn.NLLLoss"] = {keys = NLL, args = function() return {} end}
OPTIONS["qkv.nn.MSELoss"] = {keys = {"reduction"}, args = function() return {} end}
OPTIONS["qkv.data.DataLoader"] = {keys = {"batch_size", "shuffle", "drop_last", "generator"}, args = function(F)
  return {qkv.data.TensorDataset(V.tensor(F.dtype, {F.n, F.d}))}
end}
OPTIONS["qkv.amp.GradScaler"] = {keys = {"device", "init_scale", "growth_factor", "backoff_factor",
                                         "growth_interval", "enabled"},
                                 args = function() return {} end}
-- attention's variants (stdlib/qkv/variants/): a block mask of a causal
-- mask, the library's makers
OPTIONS["qkv.block_mask"] = {keys = {"block"}, args = function(F)
  return {qkv.variants.causal(), 1, 1, F.n, F.n}
end}
OPTIONS["qkv.variants.sliding_window"] = {keys = {"causal"}, args = function() return {3} end}
local BUCKETS = {"num_buckets", "max_distance", "bidirectional"}
OPTIONS["qkv.variants.t5_bias"] = {keys = BUCKETS, args = function(F)
  return {V.tensor("float32", {F.h, 8})}
end}
OPTIONS["qkv.variants.relative_buckets"] = {keys = BUCKETS, args = function() return {0} end}

-- names PyTorch's counterparts take that the qkv function does not know,
-- by the function's name
local TORCH = {
  {"attention", {"attn_mask", "dropout_p", "need_weights", "average_attn_weights"}},
  {"scores", {"attn_mask", "dropout_p", "enable_gqa"}},
  {"forward", {"attn_mask", "need_weights", "average_attn_weights", "is_causal"}},
  {"optim", {"foreach", "capturable", "differentiable", "fused", "nesterov", "amsgrad"}},
  {"Loss$", {"size_average", "reduce"}}, {"_loss$", {"size_average", "reduce"}},
  {"nn%.", {"device", "padding_idx", "max_norm", "batch_first", "kdim", "dropout", "bias"}},
  {"plot", {"figsize", "dpi", "xlim", "ylim", "label", "linewidth"}},
  {"test", {"equal_nan", "check_dtype", "nondet_tol", "msg"}},
  {"wordpiece", {"do_lower_case", "model_max_length", "tokenize_chinese_chars"}},
  {"data%.", {"num_workers", "collate_fn", "sampler", "pin_memory", "persistent_workers"}},
  {"", {"attn_mask", "inplace"}},
}

local function torch_names(fname)
  for _, t in ipairs(TORCH) do
    if fname:find(t[1]) then return t[2] end
  end
end

-- a key that differs from `key` by a dropped, doubled or swapped letter
-- and is not known
local function misspell(key, known)
  for _ = 1, 8 do
    local i, r, k = random(#key), random(3), nil
    if r == 1 and #key > 1 then k = key:sub(1, i - 1) .. key:sub(i + 1)
    elseif r == 2 then k = key:sub(1, i) .. key:sub(i)
    elseif #key > 1 then
      i = math.min(i, #key - 1)
      k = key:sub(1, i - 1) .. key:sub(i + 1, i + 1) .. key:sub(i, i) .. key:sub(i + 2)
    end
    if k and k ~= "" and not known[k] then return k end
  end
  return key .. "_x"
end

-- an options table: maybe a known key with a value that suits it, and an
-- unknown one: a known key misspelt (with a value that suits that key) or
-- a name PyTorch takes; returns the table and the unknown key
local function bad_options(fname, keys)
  local t, known, torch = {}, {}, {}
  for _, k in ipairs(keys) do known[k] = true end
  for _, k in ipairs(torch_names(fname)) do
    if not known[k] then torch[#torch + 1] = k end
  end
  if #keys > 0 and chance(0.4) then
    local k = pick(keys)
    if P.OPTIONS[k] then t[k] = P.OPTIONS[k]() end
  end
  local key, model
  if #keys == 0 or chance(0.25) then key = pick(torch)
  else
    model = pick(keys)
    key = misspell(model, known)
  end
  local v = model and P.OPTIONS[model] and P.OPTIONS[model]()
  if v == nil then v = true end
  t[key] = v
  return t, key
end

-- the attention modules and the arguments of their forward
local FORWARD = {
  function(F) return qkv.nn.SelfAttention(F.d, F.dh), {V.tensor(F.dtype, {F.n, F.d})} end,
  function(F)
    return qkv.nn.CrossAttention(F.d, F.dh), {V.tensor(F.dtype, {F.n, F.d}), V.tensor(F.dtype, {F.m, F.d})}
  end,
  function(F)
    local m = qkv.nn.MultiHeadAttention(F.d, F.h)
    if chance(0.5) then return m, {V.tensor(F.dtype, {F.B, F.n, F.d})} end
    local kv = V.tensor(F.dtype, {F.m, F.d})
    return m, {V.tensor(F.dtype, {F.n, F.d}), kv, kv}
  end,
  function(F)
    return qkv.nn.MultiHeadCrossAttention(F.d, F.h),
           {V.tensor(F.dtype, {F.n, F.d}), V.tensor(F.dtype, {F.m, F.d})}
  end,
  function(F)
    return qkv.nn.AlignedCrossAttention(F.e, F.d, F.h),
           {V.tensor("float32", {F.n, F.d}), V.tensor("float32", {F.m, F.e})}
  end,
}

-- where e takes its options: the parameter named opts or options
local function options_at(e)
  local spec = OPTIONS[e.name]
  if spec and spec.at then return spec.at end
  for i, p in ipairs(e.params) do
    if p.name == "opts" or p.name == "options" then return i end
  end
end

local function options_applies(e)
  return e.name == "Module:forward" or options_at(e) ~= nil
end

local function draw_options(e, self, args, n, names)
  local F = P.current()
  local spec = OPTIONS[e.name] or {keys = {}}
  local at = options_at(e)
  if e.name == "Module:forward" then
    local list
    self, list = pick(FORWARD)(F)
    for i = 1, #list do args[i] = list[i] end
    at = #list + 1
  elseif spec.args then
    local list = spec.args(F)
    for i = 1, #list do args[i] = list[i] end
  end
  for i = n + 1, at - 1 do               -- options left out of the valid call
    if args[i] == nil and e.params[i] then
      args[i] = P.param(e.params[i].name, F, e.name, self, args)
    end
  end
  local t, key = bad_options(e.name, spec.keys)
  args[at] = t
  local want = "unknown option '" .. key .. "'"
  return self, at, {[at] = "the " .. want}, {
    post_error = function(err)
      if type(err) == "string" and err:find("unknown option", 1, true)
         and not err:find(want, 1, true) then
        return "an error for the " .. want .. " names another: " .. err
      end
    end}
end

---------------------------------------------------------------- duplicates

local function draw_duplicates(e, self, args, n)
  local F = P.current()
  local p, q = param(), param()
  local r, list = random(5), nil
  if r == 1 then list = {p, p}
  elseif r == 2 then list = {p, q, p}
  elseif r == 3 then list = {{"a", p}, {"b", p}}
  elseif r == 4 then list = {q, {"w", p}, p}
  else
    -- a module's {name, tensor} pairs (named_parameters'), a pair or its
    -- tensor again
    list = {}
    for name, t in qkv.nn.Linear(F.d, F.e):named_parameters() do list[#list + 1] = {name, t} end
    local k = random(#list)
    list[#list + 1] = chance(0.5) and list[k] or list[k][2]
  end
  args[1] = list
  if chance(0.5) then args[2] = nil; n = 1
  else args[2] = {lr = pick{0.1, 0.01}}; n = 2 end
  return self, n, {[1] = "a parameter listed twice"}
end

---------------------------------------------------------------- grad

-- values p.grad cannot take: each with what it is
local function bad_grad(p)
  local shape, dt = p.shape, p.dtype
  local r = random(7)
  if r == 1 then return pick{1, 0.5, 0 / 0}, "a number" end
  if r == 2 then return pick{"x", "grad", ""}, "a string" end
  if r == 3 then return pick{{}, {1, 2}, {p}}, "a table" end
  if r == 4 then return true, "a boolean" end
  if r == 5 then
    local s = {table.unpack(shape)}
    if #s > 0 and (#s == 8 or chance(0.7)) then
      local i = random(#s)
      s[i] = s[i] + random(1, 2)
    else
      s[#s + 1] = 2
    end
    return V.tensor(dt, s), "a tensor of another shape"
  end
  if r == 6 then
    local other = pick{dt == "float32" and "float64" or "float32", "int64", "bool", "float16"}
    return V.tensor(other, shape), "a tensor of another dtype"
  end
  local ok, y = pcall(function() return qkv.zeros(shape, dt):cuda() end)
  if ok then return y, "a tensor on another device" end
  return V.tensor("int64", shape), "a tensor of another dtype"
end

local function listed(x)
  local ok, l = pcall(function() return x:tolist() end)
  return ok and l or "<unreadable>"
end

local function equal(a, b)
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false end
    for i = 1, #a do if not equal(a[i], b[i]) then return false end end
    return true
  end
  return a == b or (a ~= a and b ~= b)
end

-- p.grad as a list of values, or nil, or a text saying it is unreadable
local function grad_of(p)
  local ok, g = pcall(function() return p.grad end)
  if not ok then return "<raised: " .. tostring(g) .. ">" end
  if g == nil then return nil end
  return listed(g)
end

local function draw_grad(e, self, args)
  local p = param(V.shape(16))
  local before = nil
  if chance(0.3) then                     -- a grad already there
    local g0 = V.tensor(p.dtype, p.shape)
    if pcall(function() p.grad = g0 end) then before = grad_of(p) end
  end
  args[1], args[2] = p, "grad"
  if chance(0.6) then
    local v, what = bad_grad(p)
    args[3] = v
    return self, 3, {[3] = "p.grad = " .. what}, {
      allow = {"grad"},
      post_error = function(err)
        if type(err) ~= "string" or not err:find("grad", 1, true) then
          return "the error for p.grad = " .. what .. " does not name grad: " .. tostring(err)
        end
        if not equal(grad_of(p), before) then return "p.grad = " .. what .. " raised but changed p.grad" end
      end}
  end
  -- nil, or a tensor like p (maybe a view of another layout)
  local g
  if chance(0.7) then g = V.tensor(p.dtype, p.shape, pick{"contiguous", "transpose", "narrow"}) end
  args[3] = g
  local want = g and listed(g)
  return self, 3, {}, {
    allow = {"grad"},
    post_error = function(err)
      return "p.grad = " .. (g and "a tensor of p's shape, dtype and device" or "nil")
             .. " raised: " .. tostring(err)
    end,
    post = function()
      if not equal(grad_of(p), want) then return "p.grad does not read back what was assigned" end
    end}
end

---------------------------------------------------------------- classes

local CLASS = {
  options = {applies = options_applies, draw = draw_options},
  duplicates = {applies = function(e)
                  return e.name == "qkv.optim.SGD" or e.name == "qkv.optim.Adam" or e.name == "qkv.optim.AdamW"
                end,
                draw = draw_duplicates},
  grad = {applies = function(e) return e.name == "Tensor.__newindex" end, draw = draw_grad},
  convert = {applies = D.convert_applies, draw = D.convert},
  crc = {applies = function(e) return e.name == "qkv.loadz" end, draw = D.crc},
  nul = {applies = D.nul_applies, draw = D.nul},
  sizes = {applies = D.sizes_applies, draw = D.sizes},
  shapes = {applies = RS.shapes_applies, draw = RS.shapes},
  modules = {applies = RM.modules_applies, draw = RM.modules},
  ddp = {applies = RM.ddp_applies, draw = RM.ddp},
  schedulers = {applies = RC.schedulers_applies, draw = RC.schedulers},
  dotcall = {applies = RC.dotcall_applies, draw = RC.dotcall},
}

function S.rewrite(e, self, args, n, names)
  -- an --extra entry drawn as the function it names (tests/fuzz/fakes_rules.lua)
  if e.as then e = setmetatable({name = e.as}, {__index = e}) end
  local fit = {}
  for _, c in ipairs(S.CLASSES) do
    if enabled[c] and CLASS[c].applies(e) then fit[#fit + 1] = c end
  end
  if #fit == 0 then return nil end
  local c = pick(fit)
  local marks, hooks
  self, n, marks, hooks = CLASS[c].draw(e, self, args, n, names)
  return self, n, marks or {}, hooks or {}, c
end

function S.setup(q, plot_spec, on)
  qkv, enabled = q, on or {}
  D.setup(q)
  RS.setup(q)
  RM.setup(q)
  RC.setup(q)
  for kind, lists in pairs(plot_spec and plot_spec.OPTIONS or {}) do
    local keys = {}
    for _, list in ipairs(lists) do for _, k in ipairs(list) do keys[#keys + 1] = k end end
    for _, k in ipairs(plot_spec.FIGURE or {}) do keys[#keys + 1] = k end
    OPTIONS["qkv.plot." .. kind] = {keys = keys}
  end
end

S.OPTIONS, S.misspell = OPTIONS, misspell

return S
