-- registry.lua: what the API fuzzer calls, generated from the live module
-- tables so that a new function is fuzzed without editing the fuzzer.
--
-- The names come from require("qkv.doc").public() (every public function:
-- qkv.x, Tensor:x, qkv.nn.X, Module:x, qkv.plot.x, qkv.test.x, qkv.repl.x)
-- and the tensor metatable's operators (Tensor.__add, ...). Each becomes
--   {name, short, kind = "function" | "tensor" | "module" | "meta",
--    fn (functions and operators) or method (called on self),
--    params = {{name, opt}, ...} from the docstring's signature,
--    accept = {names an error may give for it}, luaunit = bool}

local R = {}

-- left out, with the reason (nothing needs to be yet)
R.EXCLUDE = {
  -- methods of an optimizer object, which the fuzzer has no draw for; the
  -- constructors (qkv.optim.SGD, Adam) are fuzzed
  ["Optimizer:step"] = "an optimizer's method",
  ["Optimizer:zero_grad"] = "an optimizer's method",
  ["Optimizer:state_dict"] = "an optimizer's method",
  ["Optimizer:load_state_dict"] = "an optimizer's method",
  -- a scheduler's likewise (the qkv.optim.lr_scheduler constructors are fuzzed)
  ["LRScheduler:step"] = "a scheduler's method",
  ["LRScheduler:get_last_lr"] = "a scheduler's method",
  ["LRScheduler:state_dict"] = "a scheduler's method",
  ["LRScheduler:load_state_dict"] = "a scheduler's method",
  -- a loss scaler's likewise (qkv.amp.GradScaler, which makes one, is fuzzed)
  ["GradScaler:scale"] = "a scaler's method",
  ["GradScaler:unscale_"] = "a scaler's method",
  ["GradScaler:step"] = "a scaler's method",
  ["GradScaler:update"] = "a scaler's method",
  ["GradScaler:get_scale"] = "a scaler's method",
  ["GradScaler:is_enabled"] = "a scaler's method",
  ["GradScaler:get_growth_factor"] = "a scaler's method",
  ["GradScaler:set_growth_factor"] = "a scaler's method",
  ["GradScaler:get_backoff_factor"] = "a scaler's method",
  ["GradScaler:set_backoff_factor"] = "a scaler's method",
  ["GradScaler:get_growth_interval"] = "a scaler's method",
  ["GradScaler:set_growth_interval"] = "a scaler's method",
  ["GradScaler:state_dict"] = "a scaler's method",
  ["GradScaler:load_state_dict"] = "a scaler's method",
  -- a loaded model's methods: the fuzzer has no model to call them on
  -- (qkv.bert.load is fuzzed with its paths)
  ["BertModel:encode"] = "a model's method",
  ["BertModel:embed"] = "a model's method",
  ["BertModel:forward"] = "a model's method",
  ["BertModel:pool"] = "a model's method",
  -- a tokenizer's methods likewise (qkv.wordpiece.load is fuzzed)
  ["Tokenizer:tokenize"] = "a tokenizer's method",
  ["Tokenizer:encode"] = "a tokenizer's method",
  ["Tokenizer:decode"] = "a tokenizer's method",
  -- a CUDA event's methods: there is no event without a GPU (qkv.cuda.Event
  -- is fuzzed, and says why not)
  ["Event:record"] = "an event's method",
  ["Event:synchronize"] = "an event's method",
  ["Event:query"] = "an event's method",
  ["Event:elapsed_time"] = "an event's method",
  -- a block mask's methods: the fuzzer has no block mask to call them on
  -- (qkv.block_mask, which makes one, is fuzzed)
  ["BlockMask:density"] = "a block mask's method",
  ["BlockMask:to_dense"] = "a block mask's method",
}

-- the tensor metatable's operators, reached as scripts reach them (through
-- the operator, so that Lua names the metamethod in messages); __gc is
-- __close under another name
local META = {
  __add = {function(x, y) return x + y end, "x", "y"},
  __sub = {function(x, y) return x - y end, "x", "y"},
  __mul = {function(x, y) return x * y end, "x", "y"},
  __div = {function(x, y) return x / y end, "x", "y"},
  __pow = {function(x, y) return x ^ y end, "x", "y"},
  __unm = {function(x) return -x end, "x"},
  __bnot = {function(x) return ~x end, "x"},
  __len = {function(x) return #x end, "x"},
  __tostring = {function(x) return tostring(x) end, "x"},
  __index = {function(x, k) return x[k] end, "x", "k"},
  __newindex = {function(x, k, v) x[k] = v end, "x", "i", "v"},
  __close = {function(x) local c <close> = x end, "x"},
}
-- names an operator's error may give besides its own without the "__"
local META_ALIAS = {__unm = {"neg"}, __newindex = {"index"}, __bnot = {"logical_not"}}

-- "qkv.max(x [, dim [, keepdim]])" -> {{name = "x"}, {name = "dim", opt = true}, ...}
function R.params(sig)
  local inner = sig and sig:match("%((.*)%)") or ""
  local params, depth, cur = {}, 0, {}
  local function flush()
    local name = table.concat(cur):match("^%s*(.-)%s*$")
    if name ~= "" then params[#params + 1] = {name = name, opt = depth > 0} end
    cur = {}
  end
  for c in inner:gmatch(".") do
    if c == "[" then flush(); depth = depth + 1
    elseif c == "]" then flush(); depth = depth - 1
    elseif c == "," then flush()
    else cur[#cur + 1] = c end
  end
  flush()
  return params
end

local function short_of(name)
  return name:match("[%.:]([%w_]+)$") or name
end

function R.build(qkv)
  local doc = require "qkv.doc"
  local entries = doc.entries()
  local methods = qkv._methods
  local nn = qkv.nn
  local list = {}
  for _, name in ipairs(doc.public()) do
    if not R.EXCLUDE[name] then
      local e = {name = name, short = short_of(name),
                 params = R.params(entries[name] and entries[name].sig)}
      local ns, key = name:match("^(.-)[:.]([%w_]+)$")
      if ns == "Tensor" then
        e.kind, e.method, e.fn = "tensor", key, methods[key]
      elseif ns == "Module" then
        e.kind, e.method = "module", key
      else
        local t = qkv
        for part in ns:gmatch("[^.]+") do if part ~= "qkv" then t = t[part] end end
        e.kind, e.fn = "function", t[key]
        e.luaunit = ns == "qkv.test"
      end
      list[#list + 1] = e
    end
  end
  local mt = getmetatable(qkv.ones(1))
  local ops = {}
  for k in pairs(META) do if type(mt[k]) == "function" then ops[#ops + 1] = k end end
  table.sort(ops)
  for _, k in ipairs(ops) do
    local params = {}
    for i = 2, #META[k] do params[i - 1] = {name = META[k][i]} end
    list[#list + 1] = {name = "Tensor." .. k, short = k:sub(3), kind = "meta",
                       fn = META[k][1], params = params, binary = #params == 2}
  end
  -- an error may give any name of the same function (qkv.add is x:add)
  local byfn = {}
  for _, e in ipairs(list) do
    if e.fn then byfn[e.fn] = byfn[e.fn] or {}; table.insert(byfn[e.fn], e.short) end
  end
  for _, e in ipairs(list) do
    e.accept = {e.short}
    for _, a in ipairs(e.fn and byfn[e.fn] or {}) do e.accept[#e.accept + 1] = a end
    for _, a in ipairs(META_ALIAS["__" .. e.short] or {}) do e.accept[#e.accept + 1] = a end
  end
  -- constructors for the modules the fuzzer passes around
  local makers = {}
  for _, e in ipairs(list) do
    if e.name:match("^qkv%.nn%.%u") then makers[#makers + 1] = e end
  end
  return list, makers, nn
end

return R
