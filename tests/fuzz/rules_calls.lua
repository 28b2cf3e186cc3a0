-- rules_calls.lua: the draws of tests/fuzz/rules.lua about the objects of
-- the Lua library and the way their methods are called:
--
--   schedulers  qkv.optim.lr_scheduler's classes given a misspelt option,
--               a bad value (NaN, negative, a string, inf, 0 where a count
--               must be positive), a lambda that returns one, bad
--               milestones, an optimizer whose lr is not a number (set
--               before the making or before a step), or a method called
--               with '.' (sched.step()): each must raise naming the
--               option, the argument or the method
--   dotcall     a method called with '.' instead of ':' (opt.step(),
--               sched.step(), handle.remove(), work.wait(), tok.encode(s),
--               ddp.forward(x), m.parameters(), x.sum()): an object's must
--               raise, and every error names the method (or says how to
--               call it, as stdlib/qkv/methods.lua does), never "attempt to
--               index a nil value" from inside the library
--
--   R.setup(qkv)
--   R.schedulers_applies(e), R.schedulers(e, self, args, n) -> self, n, marks, hooks
--   R.dotcall_applies(e), R.dotcall(e, self, args, n)        (the same)
-- The objects are made through the entry's fn (an --extra fake's too).

local V = require "values"
local P = require "params"
local C = require "check"

local R = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance

local function optimizer()
  local l = {}
  for i = 1, random(1, 2) do l[i] = V.tensor("float32", {random(1, 3)}, "contiguous"):requires_grad_() end
  return qkv.optim.SGD(l, {lr = 0.1})
end

-- values no lr, factor or count can be
local NAN, INF = 0 / 0, math.huge
local BAD = {nan = NAN, negative = -0.5, string = "0.1", inf = INF, boolean = true, table = {}}
local BAD_NAMES = {"nan", "negative", "string", "inf", "boolean", "table"}
local function bad_number()
  local k = pick(BAD_NAMES)
  return BAD[k], k
end
-- a count: also 0 and a fraction
local function bad_count()
  if chance(0.3) then return pick{0, 2.5, -1}, "not a positive integer" end
  return bad_number()
end

---------------------------------------------------------------- schedulers

-- obj.method(...), written so: Lua names the method in its messages as
-- it does at a script's line
local DOT = {}
local function dot(method)
  DOT[method] = DOT[method] or assert(load("local obj = ...; return obj." .. method .. "(select(2, ...))",
                                           "=(dot-call)"))
  return DOT[method]
end

local LR = "qkv.optim.lr_scheduler."
-- each class: its arguments after the optimizer, its options, and the
-- values each option or argument cannot take
local SCHED = {
  StepLR = {args = function() return {random(1, 3)} end, opts = {"gamma"},
            bad = {step_size = {1, bad_count}, gamma = {"opts", bad_number}}},
  CosineAnnealingLR = {args = function() return {random(1, 10)} end, opts = {"eta_min"},
                       bad = {T_max = {1, bad_count}, eta_min = {"opts", bad_number}}},
  LinearLR = {args = function() return {} end, opts = {"start_factor", "end_factor", "total_iters"},
              bad = {start_factor = {"opts", function()
                       if chance(0.3) then return pick{0, 1.5}, "outside (0, 1]" end
                       return bad_number()
                     end},
                     end_factor = {"opts", function()
                       if chance(0.3) then return 1.5, "above 1" end
                       return bad_number()
                     end},
                     total_iters = {"opts", bad_count}}},
  LambdaLR = {args = function() return {function() return 1 end} end, opts = {},
              bad = {lr_lambda = {1, function()
                local v, what = bad_number()
                if chance(0.3) then return pick{3, "f", {}}, "not a function" end
                return function() return v end, "a function that returns a " .. what
              end}}},
  SequentialLR = {args = nil, opts = {}, bad = {milestones = {2, function()
                    return pick{{0}, {NAN}, {"2"}, {1.5}, {}, {2, 3}, {-1}}, "bad milestones"
                  end}}},
}
-- SequentialLR: two schedulers of the optimizer and one milestone
SCHED.SequentialLR.args = function(opt)
  local S = qkv.optim.lr_scheduler
  return {{S.StepLR(opt, 2), S.LinearLR(opt)}, {pick{1, 2, 3}}}
end
local SCHED_NAMES = {}
for k in pairs(SCHED) do SCHED_NAMES[#SCHED_NAMES + 1] = LR .. k end

local function sched_class(e) return e.name:sub(1, #LR) == LR and SCHED[e.name:sub(#LR + 1)] end

function R.schedulers_applies(e) return sched_class(e) and true or false end

local function misspell(key)
  local i = random(#key)
  return key:sub(1, i - 1) .. key:sub(i + 1)
end

function R.schedulers(e, self, args)
  local cls, short = sched_class(e), e.name:sub(#LR + 1)
  local opt = optimizer()
  local list = cls.args(opt)
  for i, v in ipairs(list) do args[i + 1] = v end
  args[1] = opt
  local n = 1 + #list
  local at_opts = n + 1
  local r = random(5)
  local want, text                   -- what the error must name
  if r == 1 and #cls.opts > 0 then
    local key = misspell(pick(cls.opts))
    args[at_opts], n = {[key] = 0.5}, at_opts
    want, text = key, "the unknown option '" .. key .. "'"
  elseif r <= 2 then
    local names = {}
    for k in pairs(cls.bad) do names[#names + 1] = k end
    table.sort(names)
    local name = pick(names)
    local where, make = cls.bad[name][1], cls.bad[name][2]
    local v, what = make()
    if where == "opts" then args[at_opts], n = {[name] = v}, at_opts
    else args[where + 1] = v end
    want, text = name, name .. " = " .. V.describe(v) .. " (" .. what .. ")"
  elseif r == 3 then                 -- opt.lr set to a non-number before the making
    local v = pick{"0.1", true, {}, qkv.tensor(0.1)}
    opt.lr = v
    want, text = "lr", "an optimizer whose lr is " .. V.describe(v)
  else
    -- made well, then opt.lr set to a non-number and a step, or a
    -- method called with '.'
    local f, v = e.fn, pick{"0.1", true, {}, qkv.tensor(0.1)}
    local dot_name = r == 5 and pick{"step", "get_last_lr"}
    local accept = {short, "step", dot_name}
    text = dot_name and "sched." .. dot_name .. "()" or "opt.lr = " .. V.describe(v) .. "; sched:step()"
    return self, n, {[0] = text}, {
      desc = short .. "(...):" .. (dot_name and dot_name .. " with '.'" or "step after opt.lr = " .. V.describe(v)),
      accept = accept,
      call = function(...)
        local s = f(...)
        if dot_name then return dot(dot_name)(s) end
        opt.lr = v
        return s:step()
      end,
      post_error = function(err)
        local why = C.internal(err, accept)
        if why then return text .. ": " .. why end
        if not dot_name and not err:find("lr", 1, true) then return text .. ": the error does not name lr: " .. err end
      end}
  end
  return self, n, {[0] = text}, {
    post_error = function(err)
      local why = C.internal(err, {short})
      if why then return text .. ": " .. why end
      if type(err) == "string" and not err:find(want, 1, true) then
        return text .. ": the error does not name " .. want .. ": " .. err
      end
    end}
end

---------------------------------------------------------------- dotcall

-- the objects whose methods the fuzzer does not call itself, by the entry
-- that makes them: make(fn) and {method = its arguments (a maker)}
local function none() return {} end
local function tensor1() return {V.tensor("float32", {2}, "contiguous")} end
local OBJECTS = {
  ["qkv.optim.SGD"] = {make = function(f) return f(optimizer().params, {lr = 0.1}) end,
                       methods = {step = none, zero_grad = none, state_dict = none,
                                  load_state_dict = none}},
  ["Tensor:register_post_accumulate_grad_hook"] = {
    make = function(f) return f(V.tensor("float32", {2}, "contiguous"):requires_grad_(), function() end) end,
    methods = {remove = none}},
  ["qkv.dist.all_reduce"] = {make = function(f) return f(V.tensor("float32", {2}), "sum", {async_op = true}) end,
                             methods = {wait = none, is_completed = none}},
  ["qkv.dist.broadcast"] = {make = function(f) return f(V.tensor("float32", {2}), 0, {async_op = true}) end,
                            methods = {wait = none, is_completed = none}},
  ["qkv.dist.barrier"] = {make = function(f) return f({async_op = true}) end,
                          methods = {wait = none, is_completed = none}},
  ["qkv.dist.DDP"] = {make = function(f) return f(qkv.nn.Linear(2, 2)) end,
                      methods = {forward = tensor1, parameters = none, eval = none, to = function()
                        return {"float64"}
                      end, state_dict = none}},
  ["qkv.wordpiece.load"] = {make = function(f) return f("vocab.txt") end,
                            methods = {tokenize = function() return {"the cats"} end,
                                       encode = function() return {"the cat"} end,
                                       decode = function() return {{1, 2}} end}},
}
OBJECTS["qkv.optim.Adam"], OBJECTS["qkv.optim.AdamW"] = OBJECTS["qkv.optim.SGD"], OBJECTS["qkv.optim.SGD"]
for _, name in ipairs(SCHED_NAMES) do
  local cls = SCHED[name:sub(#LR + 1)]
  OBJECTS[name] = {make = function(f)
    local opt = optimizer()
    return f(opt, table.unpack(cls.args(opt)))
  end, methods = {step = none, get_last_lr = none}}
end

function R.dotcall_applies(e)
  if e.as then return OBJECTS[e.name] ~= nil end
  if OBJECTS[e.name] then return true end
  -- a tensor's or a module's method, in a quarter of the draws: the
  -- other rules and the valid calls keep the rest
  return (e.kind == "tensor" or e.kind == "module") and chance(0.25)
end

local function sorted_keys(t)
  local l = {}
  for k in pairs(t) do l[#l + 1] = k end
  table.sort(l)
  return l
end

function R.dotcall(e, self, args, n)
  local obj = OBJECTS[e.name]
  if obj then
    local method = pick(sorted_keys(obj.methods))
    local list = chance(0.5) and obj.methods[method]() or {}
    for i = 1, #list do args[i] = list[i] end
    n = #list
    local f, accept = e.fn, {method, e.short}
    local text = "obj." .. method .. "(...) of " .. e.short .. "'s object"
    return self, n, {[0] = "a method called with '.'"}, {
      desc = e.short .. "(...)." .. method,
      accept = accept,
      call = function(...) return dot(method)(obj.make(f), ...) end,
      post_error = function(err)
        local why = C.internal(err, accept)
        return why and text .. ": " .. why
      end}
  end
  -- x.method(args): self left out (a fake's fn in its place)
  local f = e.fn and {[e.method] = e.fn} or self
  local accept = {table.unpack(e.accept)}
  local mt = getmetatable(self)
  if e.kind == "module" and type(mt) == "table" then accept[#accept + 1] = rawget(mt, "__name") end
  local text = (e.kind == "module" and "m." or "x.") .. e.method .. "(...)"
  return self, n, e.kind == "module" and {[0] = "a module's method called with '.'"} or {}, {
    desc = text,
    accept = accept,
    call = function(...) return dot(e.method)(f, ...) end,
    post_error = function(err)
      local why = C.internal(err, accept)
      return why and text .. ": " .. why
    end}
end

function R.setup(q) qkv = q end

return R
