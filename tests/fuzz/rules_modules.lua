-- rules_modules.lua: the draws of tests/fuzz/rules.lua about qkv.nn's
-- modules once a script changed them, and qkv.dist.DDP's wrapper:
--
--   modules  a module changed by an assignment (m.bias = nil, m.weight =
--            a tensor of another shape or dtype or a number, m[i] = a
--            module, a non-module or nil in a Sequential or ModuleList,
--            in range, past its end or negative, m.extra = a module, a
--            module or a tensor held twice, a module inside itself), then
--            one of its methods (parameters, nparams, to, double,
--            state_dict, train, eval, forward): each
--            works with a value the change accounts for (every tensor
--            listed once, parameters() the tensors of named_parameters()
--            in its order, each name once, nparams the count of what
--            parameters lists, the
--            forward of a Linear x weight^T + bias with the weight and
--            bias it holds now, weight (d_out, d_in) as PyTorch's) or
--            raises naming the method or the class, never from inside
--            the library; an assignment PyTorch refuses (past the end, not
--            a module, a number for a parameter) raises, or the method does
--   ddp      qkv.dist.DDP(m) in the fuzzer's world of one: ddp:eval() and
--            train() reach the wrapped module and every module in it,
--            ddp:to("float64") and double() convert its tensors,
--            ddp:parameters() lists the tensors of ddp.module:parameters(),
--            in the order of ddp.module:named_parameters(),
--            state_dict names them "module.<name>", and an optimizer over
--            the wrapper steps the tensors the forward uses
--
--   R.setup(qkv)
--   R.modules_applies(e), R.modules(e, self, args, n) -> self, n, marks, hooks
--   R.ddp_applies(e), R.ddp(e, self, args, n)       (the same)
-- The call is the rule's own (hooks.call): the change, then the method,
-- through the entry's fn when it has one (an --extra fake's).

local V = require "values"
local P = require "params"
local C = require "check"

local R = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance

---------------------------------------------------------------- helpers

-- the tensors of m:parameters(), or nil and the error
local function params(m)
  local ok, l = pcall(function() return m:parameters() end)
  if not ok then return nil, l end
  return l
end

-- {name, tensor} pairs of m:named_parameters(), or nil and the error
local function named(m)
  local ok, l = pcall(function()
    local out = {}
    for name, t in m:named_parameters() do out[#out + 1] = {name, t} end
    return out
  end)
  if not ok then return nil, l end
  return l
end

-- what is wrong with a parameters() list: not tensors, a tensor twice
-- (named by names, tensor -> name, where it has it)
local function listed_once(l, names)
  if type(l) ~= "table" then return "parameters() gave a " .. type(l) end
  local seen = {}
  for i, t in ipairs(l) do
    if not qkv.is_tensor(t) then return "parameters()[" .. i .. "] is not a tensor" end
    if seen[t] then
      return "parameters() lists a tensor twice ([" .. seen[t] .. "], [" .. i .. "]"
             .. (names[t] and ", " .. names[t] or "") .. ")"
    end
    seen[t] = i
  end
end

-- what is wrong with named_parameters()' pairs: not {name, tensor}, a
-- tensor or a name twice
local function named_once(l)
  local seen, names = {}, {}
  for i, p in ipairs(l) do
    if type(p[1]) ~= "string" or not qkv.is_tensor(p[2]) then
      return "named_parameters()'s " .. i .. "th is not a name and a tensor"
    end
    if seen[p[2]] then return "named_parameters() lists a tensor twice (" .. seen[p[2]] .. ", " .. p[1] .. ")" end
    if names[p[1]] then return "named_parameters() lists the name " .. p[1] .. " twice" end
    seen[p[2]], names[p[1]] = p[1], true
  end
end

local function tensor_set(l)
  local s = {}
  for _, p in ipairs(l) do s[p[2]] = p[1] end
  return s
end

-- the list of lists of a 2-D tensor, or a 1-D tensor's list
local function list_of(t) return t:to("float64"):tolist() end

-- y = x weight^T + bias over lists, in float64 (x (n, d_in), weight
-- (d_out, d_in) as PyTorch's, bias (d_out))
local function affine(x, weight, bias)
  local y = {}
  for i, row in ipairs(x) do
    local out = {}
    for j = 1, #weight do
      local s = bias and bias[j] or 0
      for k = 1, #row do s = s + row[k] * weight[j][k] end
      out[j] = s
    end
    y[i] = out
  end
  return y
end

-- the numbers of a nested list, in order
local function flat(l, out)
  out = out or {}
  if type(l) ~= "table" then out[#out + 1] = l; return out end
  for _, v in ipairs(l) do flat(v, out) end
  return out
end

-- what differs between two nested lists of numbers, within rel (a
-- float32's rounding by default)
local function close(got, want, rel)
  got, want, rel = flat(got), flat(want), rel or 1e-4
  if #got ~= #want then return "got " .. #got .. " values, want " .. #want end
  for i = 1, #want do
    local g, w = got[i], want[i]
    if not (g == w or math.abs(g - w) <= rel * (1 + math.abs(w)) or (g ~= g and w ~= w)) then
      return ("value %d is %.9g, want %.9g"):format(i, g, w)
    end
  end
end

local REL = {float16 = 4e-3, bfloat16 = 3e-2}

---------------------------------------------------------------- modules

-- the modules drawn, by class
local BUILD = {
  Linear = function(F) return qkv.nn.Linear(F.d, F.e, chance(0.2) and {bias = false} or nil) end,
  LayerNorm = function(F) return qkv.nn.LayerNorm(F.d) end,
  Sequential = function(F)
    return qkv.nn.Sequential(qkv.nn.Linear(F.d, F.e), qkv.nn.ReLU(), qkv.nn.Linear(F.e, F.d))
  end,
  ModuleList = function(F) return qkv.nn.ModuleList{qkv.nn.Linear(F.d, F.d), qkv.nn.LayerNorm(F.d)} end,
  MultiHeadAttention = function(F) return qkv.nn.MultiHeadAttention(F.d, F.h) end,
}
local KINDS = {"Linear", "LayerNorm", "Sequential", "ModuleList", "MultiHeadAttention"}
local CONTAINER = {Sequential = true, ModuleList = true}
-- the classes whose every parameter the draw knows (the expected set)
local KNOWN = {Linear = true, LayerNorm = true, Sequential = true, ModuleList = true}

-- the methods the rule calls after the change
local METHODS = {"parameters", "nparams", "state_dict", "to", "double", "train", "eval", "forward"}

local function new_module(F)
  local r = random(3)
  if r == 1 then return qkv.nn.Linear(F.d, F.d) end
  return r == 2 and qkv.nn.ReLU() or qkv.nn.LayerNorm(F.d)
end

-- a value no parameter or position can take
local function not_module(F)
  return pick{3, "weight", true, {}, V.tensor("float32", {F.d}), function() end}
end

-- the changes: each draws its assignment on module m of kind `kind`
-- (own: its own parameter names) and returns a text, the assignment, and
-- what it does: {removed = name, set = {name, tensor}, child = {key,
-- module}, cycle = true, refused = why PyTorch refuses it}
local CHANGES = {
  remove = function(m, kind, own)
    if #own == 0 then return end
    local k = pick(own)
    return "m." .. k .. " = nil", function() m[k] = nil end, {removed = k}
  end,
  reshape = function(m, kind, own)
    if #own == 0 then return end
    local k = pick(own)
    local s = m[k].shape
    local shape = {}
    for i = 1, #s do shape[i] = s[i] end
    local i = random(#shape)
    shape[i] = shape[i] + random(1, 2)
    local t = V.tensor(m[k].dtype, shape, "contiguous")
    return "m." .. k .. " = a tensor of another shape", function() m[k] = t end, {set = {k, t}}
  end,
  retype = function(m, kind, own)
    if #own == 0 then return end
    local k = pick(own)
    local dt = pick{m[k].dtype == "float64" and "float32" or "float64", "int64", "float16"}
    local t = V.tensor(dt, {table.unpack(m[k].shape)}, "contiguous")
    return "m." .. k .. " = a " .. dt .. " tensor", function() m[k] = t end, {set = {k, t}}
  end,
  number = function(m, kind, own)
    if #own == 0 then return end
    local k, v = pick(own), pick{3, 0.5, "weight", true}
    return "m." .. k .. " = " .. V.describe(v), function() m[k] = v end,
           {refused = "a parameter set to a " .. type(v)}
  end,
  index = function(m, kind, own, F)
    if not CONTAINER[kind] then return end
    local n = #m
    local r = random(6)
    local i = r <= 2 and random(n) or r == 3 and -random(n) or r == 4 and pick{n + 1, n + 3}
              or r == 5 and pick{0, -n - 1} or random(n)
    local v, what = new_module(F), "a module"
    if r == 6 then
      if chance(0.3) then v = nil else v = not_module(F) end
      what = v == nil and "nil" or V.describe(v)
    end
    local text = "m[" .. i .. "] = " .. what
    local effect = {child = {i < 0 and n + 1 + i or i, v}}
    if r == 4 or r == 5 then effect = {refused = "a position past the end or 0"}
    elseif r == 6 then effect = {refused = "a container given " .. (v == nil and "a hole" or "a non-module")} end
    return text, function() m[i] = v end, effect
  end,
  extra = function(m, kind, own, F)
    local c = new_module(F)
    return "m.extra = a " .. getmetatable(c).__name, function() m.extra = c end, {child = {"extra", c}}
  end,
  -- a module or a tensor held in two places: listed and counted once
  tie = function(m, kind, own, F)
    if CONTAINER[kind] then
      return "m[2] = m[1]", function() m[2] = m[1] end, {child = {2, m[1]}}
    end
    if #own == 0 then return end
    local k, c = pick(own), qkv.nn.Linear(F.d, F.d)
    return "m.extra = a Linear whose weight is m." .. k, function() c.weight = m[k]; m.extra = c end,
           {child = {"extra", c}}
  end,
  cycle = function(m, kind, own)
    if CONTAINER[kind] and chance(0.5) then
      local i = random(#m)
      return "m[" .. i .. "] = m", function() m[i] = m end, {cycle = true}
    end
    if CONTAINER[kind] then
      return "m[1].inner = m", function() m[1].inner = m end, {cycle = true}
    end
    return "m.extra = m", function() m.extra = m end, {cycle = true}
  end,
}
local CHANGE_NAMES = {"remove", "reshape", "retype", "number", "index", "extra", "tie", "cycle"}

-- the checks of each method's success: what is wrong, or nil
local function check_params(m, tensors, st)
  -- the names are named_parameters': its tensors are parameters()', in order
  local l, err = named(m)
  local why = listed_once(tensors, l and tensor_set(l) or {})
  if why then return why end
  if not l then return "parameters() returned but named_parameters() raised: " .. tostring(err) end
  if #l ~= #tensors then
    return "parameters() lists " .. #tensors .. " tensors, named_parameters() " .. #l
  end
  for i, p in ipairs(l) do
    if not rawequal(tensors[i], p[2]) then
      return "parameters()[" .. i .. "] is not named_parameters()'s " .. tostring(p[1])
    end
  end
  why = named_once(l)
  if why then return why end
  local ef, set = st.effect, tensor_set(l)
  if ef.removed then
    for _, p in ipairs(l) do
      if p[1] == ef.removed then return "m." .. ef.removed .. " = nil, but parameters() lists it" end
    end
  end
  if ef.set and set[ef.set[2]] ~= ef.set[1] then
    return "m." .. ef.set[1] .. " = t, but parameters() does not list t as " .. ef.set[1]
  end
  if not KNOWN[st.kind] or ef.cycle then return nil end
  -- the tensors it must list: its own, and each child's
  local want = {}
  for _, k in ipairs(st.own) do
    local t = rawget(m, k)
    if t ~= nil then want[t] = k end
  end
  local kids = {}
  if CONTAINER[st.kind] then for i = 1, #m do kids[#kids + 1] = m[i] end end
  if ef.child and ef.child[1] == "extra" and not st.failed then kids[#kids + 1] = ef.child[2] end
  for _, c in ipairs(kids) do
    for _, p in ipairs(named(c) or {}) do want[p[2]] = p[1] end
  end
  for t, name in pairs(want) do
    if not set[t] then return "parameters() leaves out " .. name end
  end
  for t, name in pairs(set) do
    if not want[t] then return "parameters() lists " .. name .. ", which the module no longer holds" end
  end
end

-- every module m holds, from the changes the draw made: m, its positions
-- and the module put in
local function known_modules(m, st)
  local list = {m}
  if CONTAINER[st.kind] then for i = 1, #m do list[#list + 1] = m[i] end end
  local ef = st.effect
  if ef.child and ef.child[1] == "extra" and not st.failed then list[#list + 1] = ef.child[2] end
  return list
end

local CHECK = {
  parameters = function(m, st, l) return check_params(m, l, st) end,
  nparams = function(m, st, n)
    local l, err = params(m)
    if not l then return "nparams() returned but parameters() raised: " .. tostring(err) end
    local sum = 0
    for _, t in ipairs(l) do sum = sum + t:numel() end
    if n ~= sum then return "nparams() is " .. tostring(n) .. " but parameters() holds " .. sum end
  end,
  state_dict = function(m, st, d)
    if type(d) ~= "table" then return "state_dict() gave a " .. type(d) end
    local l, err = named(m)
    if not l then return "state_dict() returned but named_parameters() raised: " .. tostring(err) end
    for _, p in ipairs(l) do
      if not rawequal(d[p[1]], p[2]) then return "state_dict() has not named_parameters()' " .. p[1] end
    end
  end,
  to = function(m, st, r)
    if not rawequal(r, m) then return "m:to() did not return m" end
    local l, err = named(m)
    if not l then return "m:to() returned but named_parameters() raised: " .. tostring(err) end
    if st.changed and #l ~= #st.changed then
      return "m:to() made " .. #l .. " parameters of " .. #st.changed
    end
    for _, p in ipairs(l) do
      if p[2].dtype ~= "float64" then return "after m:to(\"float64\"), " .. p[1] .. " is " .. p[2].dtype end
    end
  end,
  train = function(m, st, r)
    if not rawequal(r, m) then return "m:" .. st.method .. "() did not return m" end
    for _, x in ipairs(known_modules(m, st)) do
      if rawget(x, "training") ~= st.mode then
        return "after m:" .. st.method .. "(), a " .. getmetatable(x).__name .. "'s training is "
               .. tostring(rawget(x, "training"))
      end
    end
  end,
  forward = function(m, st, y)
    if st.kind ~= "Linear" or st.failed then return nil end
    local bias = rawget(m, "bias")
    local want = affine(list_of(st.x), list_of(rawget(m, "weight")), bias and list_of(bias))
    local why = close(list_of(y), want, REL[y.dtype])
    if why then return "m(x) is not x weight^T + bias of the weight and bias it holds: " .. why end
  end,
}
CHECK.double, CHECK.eval = CHECK.to, CHECK.train

local MODULE_METHODS = {}
for _, k in ipairs(METHODS) do MODULE_METHODS["Module:" .. k] = k end

function R.modules_applies(e) return MODULE_METHODS[e.name] ~= nil end

function R.modules(e, self, args)
  local F = P.current()
  local method = MODULE_METHODS[e.name]
  local kind = pick(KINDS)
  local m = BUILD[kind](F)
  local own = {}
  for name in m:named_parameters() do
    if not name:find(".", 1, true) then own[#own + 1] = name end
  end
  local text, change, effect
  for _ = 1, 8 do
    text, change, effect = CHANGES[pick(CHANGE_NAMES)](m, kind, own, F)
    if text then break end
  end
  if not text then text, change, effect = "m.extra = m", function() m.extra = m end, {cycle = true} end
  local st = {kind = kind, own = own, effect = effect, method = method, mode = method ~= "eval"}
  local n = 0
  if method == "to" then args[1], n = "float64", 1
  elseif method == "train" then
    if chance(0.5) then args[1], n = chance(0.5), 1 end
    st.mode = n == 0 or args[1]
  elseif method == "forward" then
    st.x = qkv.randn(math.max(F.n, 1), F.d)
    args[1], n = st.x, 1
  end
  local f, called = e.fn, method == "forward" and chance(0.5)     -- m(x) or m:forward(x)
  local accept = {kind, "index", table.unpack(e.accept)}
  return m, n, {}, {
    desc = text .. "; m:" .. method,
    accept = accept,
    call = function(...)
      local ok, err = pcall(change)
      st.failed, st.change_error = not ok, err
      st.changed = params(m)
      if f then return f(m, ...) end
      if called then return m(...) end
      return m[method](m, ...)
    end,
    post = function(r)
      local why = st.failed and (C.check_error(accept, st.change_error) or C.internal(st.change_error, accept))
      if why then return "the assignment's error " .. why .. " (" .. text .. ")" end
      if effect.refused and not st.failed and not (method == "train" or method == "eval") then
        return "an assignment PyTorch refuses (" .. effect.refused .. ") was taken and m:" .. method
               .. " returned (" .. text .. ")"
      end
      why = CHECK[method](m, st, r)
      return why and why .. " (after " .. text .. ")"
    end,
    post_error = function(err)
      local why = C.internal(err, accept)
                  or st.failed and (C.check_error(accept, st.change_error) or C.internal(st.change_error, accept))
      return why and "m:" .. method .. ": " .. why .. " (after " .. text .. ")"
    end}
end

---------------------------------------------------------------- ddp

-- a module to wrap, and the modules inside it
local function ddp_module(F)
  local r = random(3)
  if r == 1 then return qkv.nn.Linear(F.d, F.d), {} end
  local a, d, b = qkv.nn.Linear(F.d, F.d), qkv.nn.Dropout(0.5), qkv.nn.Linear(F.d, F.d)
  if r == 2 then return qkv.nn.Sequential(a, d, b), {a, d, b} end
  local inner = qkv.nn.Sequential(a, d)
  return qkv.nn.Sequential(inner, qkv.nn.ReLU(), b), {inner, a, d, b}
end

-- the scenarios: what each calls on the wrapper, and what it checks
local DDP = {
  eval = {call = function(ddp) return ddp:eval() end, check = function(ddp, st)
    if ddp.module.training ~= false then return "ddp:eval() left ddp.module.training true" end
    for _, x in ipairs(st.inner) do
      if rawget(x, "training") ~= false then
        return "ddp:eval() left a " .. getmetatable(x).__name .. " inside the module in training"
      end
    end
  end},
  train = {call = function(ddp) ddp:eval(); return ddp:train() end, check = function(ddp, st)
    for _, x in ipairs{ddp, ddp.module, table.unpack(st.inner)} do
      if rawget(x, "training") ~= true then return "ddp:eval(); ddp:train() left a module in eval" end
    end
  end},
  to = {call = function(ddp, st)
    if st.convert then return ddp:double() end
    return ddp:to("float64")
  end, check = function(ddp)
    for _, p in ipairs(named(ddp.module)) do
      if p[2].dtype ~= "float64" then return "ddp:to(\"float64\") left the module's " .. p[1] .. " " .. p[2].dtype end
    end
  end},
  parameters = {call = function(ddp) return ddp:parameters() end, check = function(ddp, st, l)
    local inner, names = ddp.module:parameters(), named(ddp.module) or {}
    if type(l) ~= "table" or #l ~= #inner then return "ddp:parameters() has not the module's count" end
    for i, t in ipairs(inner) do
      if not rawequal(l[i], t) then
        return "ddp:parameters()[" .. i .. "] is not the module's " .. (names[i] and names[i][1] or "[" .. i .. "]")
      end
    end
  end},
  state_dict = {call = function(ddp) return ddp:state_dict() end, check = function(ddp, st, d)
    for name, t in pairs(ddp.module:state_dict()) do
      if not rawequal(d["module." .. name], t) then return "ddp:state_dict() has not module." .. name end
    end
  end},
  -- an optimizer over the wrapper, maybe after a conversion, steps the
  -- tensors the forward uses: each moves by -lr * grad (SGD)
  step = {call = function(ddp, st)
    if st.convert then ddp:double() end
    local x = qkv.randn(2, st.d, ddp.module:parameters()[1].dtype)
    ddp:eval()
    local opt = qkv.optim.SGD(ddp, {lr = 0.5})
    ddp(x):sum():backward()
    st.old, st.grads = {}, {}
    for i, p in ipairs(named(ddp.module)) do
      st.old[i], st.grads[i] = flat(list_of(p[2])), p[2].grad and flat(list_of(p[2].grad))
    end
    return opt:step()
  end, check = function(ddp, st)
    for i, p in ipairs(named(ddp.module)) do
      local g, want = st.grads[i], {}
      if g then
        for k, w in ipairs(st.old[i]) do want[k] = w - 0.5 * g[k] end
        local why = close(list_of(p[2]), want)
        if why then return "an SGD over the wrapper did not step the module's " .. p[1] .. ": " .. why end
      end
    end
  end},
}
local DDP_NAMES = {"eval", "train", "to", "parameters", "state_dict", "step"}

function R.ddp_applies(e) return e.name == "qkv.dist.DDP" end

function R.ddp(e, self, args)
  local F = P.current()
  local d = math.max(F.d, 1)
  local m, inner = ddp_module({d = d})
  local name = pick(DDP_NAMES)
  local sc, st = DDP[name], {inner = inner, d = d, convert = chance(0.5)}
  args[1] = m
  local accept = {"DDP", "eval", "train", "to", "double", "parameters", "state_dict", "step",
                  "backward", "SGD", "forward", "Sequential", "Linear"}
  return self, 1, {}, {
    desc = "DDP(m):" .. name,
    accept = accept,
    call = function(module)
      local ddp = e.fn(module)
      st.result = table.pack(sc.call(ddp, st))
      st.ddp = ddp
      return table.unpack(st.result, 1, st.result.n)
    end,
    post = function()
      return sc.check(st.ddp, st, st.result[1])
    end,
    post_error = function(err) return C.internal(err, accept) end}
end

function R.setup(q) qkv = q end

return R
