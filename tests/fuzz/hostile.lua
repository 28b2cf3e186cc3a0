-- hostile.lua: the API fuzzer's hostile arguments (tests/fuzz/fuzz_api.lua),
-- the classes of issue 14: tables whose metamethods close a tensor of the
-- call, collect garbage or lie; cyclic and over-deep tables; overlapping
-- and stride-0 destinations; numbers an integer target cannot hold; paths
-- and npz names with a NUL.
--
--   H.setup(qkv, libs, rules)  after values.lua's V.setup; libs: the Lua
--                          libraries get proxies and cyclic tables too;
--                          rules: tests/fuzz/rules.lua, set up, or nil
--   H.begin(e)             before making the arguments of a call of e
--   H.any(depth)           one hostile value (values.lua's V.any draws it)
--   H.rewrite(e, self, args, n, names)  -> self, n, marks: maybe makes one
--                          argument of a valid-looking call hostile (args
--                          is changed in place; names are the parameter
--                          names of args); marks = {[index] = reason} for
--                          the arguments that oblige the call to raise
--   H.arm(self, args, n)   the call's tensors, which proxies may close
--   H.allowed()            texts an error of this call may hold instead of
--                          the function's name: its proxies raised it
--   H.post(...), H.post_error(err)  after the call returned (its results)
--                          or raised: what is wrong, or nil; either may be nil
--   H.rule                 the rules.lua class the call was drawn for, or nil
--   H.call, H.accept, H.desc  a rule's own call in place of the entry's
--                          (pcall(H.call, args...)), the names its error
--                          may give, the text that shows it (or nil)
--   H.drop_rule()          forgets the rule's hooks (an argument replaced)
--   H.describe(v)          a short text for a proxy, or nil
--
-- Every choice is drawn when a value is made, none while the call runs, so
-- a replayed call meets the same reads in the same order.

local V = require "values"

local H = {}

local qkv
local random = math.random
local pick, chance = V.pick, V.chance

H.RAISED = "hostile proxy raised at read"     -- the error a proxy raises
H.BAD_LEN = "object length is not an integer" -- Lua's, for a __len that lies so

local victims = setmetatable({}, {__mode = "v"})   -- weak: drops may free them
local allowed = {}
local proxies = setmetatable({}, {__mode = "k"})   -- proxy -> {real, plan text}
local tame, hostile_libs = false, false            -- see H.begin
local rules                                        -- see H.setup

---------------------------------------------------------------- numbers

-- numbers that are not integers int64 holds, and its limits (which a size,
-- dim or index cannot be either, but which are valid int64 values)
H.NOT_INT = {0 / 0, math.huge, -math.huge, 1e300, -1e300, 2 ^ 63, -(2 ^ 63) - 2048,
             2 ^ 64, 2.5, -0.5}
H.LIMITS = {math.maxinteger, math.mininteger}

-- v is a number with no int64 value (2.5 has one: toward 0, as PyTorch)
function H.no_int64(v)
  return math.type(v) == "float" and not (v >= -2 ^ 63 and v < 2 ^ 63)
end

-- v is a number that is not an integer in int64's range
function H.not_int(v)
  return type(v) == "number" and math.tointeger(v) == nil
end

local function bad_int()
  if chance(0.85) then return pick(H.NOT_INT) end
  return pick(H.LIMITS)
end

---------------------------------------------------------------- proxies

local function close(x)
  pcall(function() getmetatable(x).__close(x) end)
end

-- what a proxy does at its reads, all drawn now
local function plan()
  local p = {}
  if chance(0.5) then p.close_at, p.victim = random(1, 6), random(1, 8) end
  if chance(0.4) then p.collect = true end
  if chance(0.2) then p.fresh = true end             -- tensors come back as copies
  if chance(0.15) then p.drop_at = random(1, 6) end  -- the real table empties
  if chance(0.25) then p.lie_every, p.alt = random(2, 3), V.any(2) end
  if chance(0.3) then
    p.lens = {}
    for i = 1, random(1, 4) do
      p.lens[i] = chance(0.7) and random(-1, 9) or
                  pick{1 << 40, math.maxinteger, "2", 1.5, 0 / 0, "x", true}
    end
  end
  if chance(0.05) then p.raise_at = random(1, 6) end
  return p
end

local function plan_text(p)
  local t = {}
  if p.close_at then t[#t + 1] = "closes a tensor at read " .. p.close_at end
  if p.collect then t[#t + 1] = "collects" end
  if p.fresh then t[#t + 1] = "copies" end
  if p.drop_at then t[#t + 1] = "empties at read " .. p.drop_at end
  if p.lie_every then t[#t + 1] = "lies every " .. p.lie_every end
  if p.lens then
    local l = {}
    for i, v in ipairs(p.lens) do l[i] = V.describe(v) end
    t[#t + 1] = "# = " .. table.concat(l, "/")
  end
  if p.raise_at then t[#t + 1] = "raises at read " .. p.raise_at end
  return table.concat(t, ", ")
end

local function shallow(t)
  local c = {}
  for k, v in next, t do c[k] = v end
  return c
end

-- a table that reads a copy of `real` (which may be qkv.nn: its drop must
-- not empty that) through __index, __len and __pairs, doing what its plan
-- says at each read
function H.proxy(real)
  real = shallow(real)
  local p, reads, nlen = plan(), 0, 0
  if p.raise_at then allowed[#allowed + 1] = H.RAISED end
  if p.lens then allowed[#allowed + 1] = H.BAD_LEN end
  local function hook()
    reads = reads + 1
    if p.collect then collectgarbage() end
    if reads == p.close_at and #victims > 0 then close(victims[(p.victim - 1) % #victims + 1]) end
    if reads == p.drop_at then
      for k in next, real do real[k] = nil end
      collectgarbage()
    end
    if reads == p.raise_at then error(H.RAISED .. " " .. reads, 0) end
  end
  local function get(k)
    local v = real[k]
    if p.lie_every and reads % p.lie_every == 0 then v = p.alt end
    if p.fresh and qkv.is_tensor(v) then
      local ok, c = pcall(function() return v:clone() end)
      if ok then v = c end
    end
    return v
  end
  local proxy = setmetatable({}, {
    __name = "hostile",
    __index = function(_, k) hook(); return get(k) end,
    __len = function()
      hook()
      if not p.lens then return #real end
      nlen = nlen % #p.lens + 1
      return p.lens[nlen]
    end,
    __pairs = function()
      local k
      return function()
        hook()
        k = next(real, k)
        if k == nil then return nil end
        return k, get(k)
      end, nil, nil
    end,
  })
  proxies[proxy] = {real = real, text = plan_text(p)}
  return proxy
end

function H.describe(v)
  local pr = proxies[v]
  if not pr then return nil end
  return "hostile(" .. pr.text .. ") " .. V.describe(pr.real, 1)
end

---------------------------------------------------------------- tables

-- a table holding itself, directly or through one or two others
function H.cyclic(base)
  local t = base or {1, 2}
  local r = random(4)
  if r == 1 then t[#t + 1] = t
  elseif r == 2 then t[1] = t
  elseif r == 3 then t[#t + 1] = {t}
  else t[#t + 1] = {{1, t}} end
  return t
end

-- nested deeper than qkv.tensor's 8 levels
function H.deep(levels)
  local t = {1, 2}
  for _ = 2, levels or random(9, 64) do t = {t} end
  return t
end

-- a table whose every item is itself, through __index: endless nesting
local function endless()
  local t
  t = setmetatable({}, {__index = function() return t end, __len = function() return 2 end})
  proxies[t] = {real = {}, text = "every item is itself"}
  return t
end

---------------------------------------------------------------- any

-- strings with a NUL for paths and names: "in.npy\0x" names a file that
-- exists up to the NUL
local function nul_path()
  return pick{"a\0b.npy", "in.npy\0x", "x.npy\0", "\0", V.TMP .. "/n\0ul.npz", "in.npz\0.npz",
              "fig.png\0x.png", "in.png\0"}
end

function H.any(depth)
  local r = random(tame and 2 or 6)
  if r == 1 then return pick(H.NOT_INT) end
  if r == 2 then return nul_path() end
  if r == 3 then return H.cyclic() end
  if r == 4 then return chance(0.5) and H.deep() or endless() end
  local real = (depth or 0) < 2 and V.any(2) or {1, 2}
  if type(real) ~= "table" or getmetatable(real) ~= nil then real = {real, V.tensor()} end
  return H.proxy(real)
end

---------------------------------------------------------------- rewrites

-- parameters that are integers: sizes, dims, indices, counts
local INT = {dim = true, d1 = true, d2 = true, start = true, len = true, i = true,
             k = true, n = true, n_q = true, n_k = true, h = true, d_in = true,
             d_out = true, d_model = true, d_k = true, d_vision = true, d_text = true,
             num_embeddings = true}
-- parameters that are lists of integers
local INT_LIST = {shape = true, lengths = true, d1 = true}
-- where `start` is a number, not a position: the ranges' first value
local REAL_START = {["qkv.linspace"] = true, ["qkv.logspace"] = true}

local function plain(t) return type(t) == "table" and getmetatable(t) == nil end

-- a plain list's items, read raw: `#` of a proxy may say 2^40 (and its
-- reads close tensors), so a proxy is never copied here
local function copy(t)
  local c = {}
  for i = 1, math.min(rawlen(t), 64) do c[i] = rawget(t, i) end
  return c
end

local function indices(names, n, want)
  local found = {}
  -- past an optional argument left out, names and positions part
  for i = 1, math.min(n, (names.gap or n + 1) - 1) do
    if names[i] and want(names[i], i) then found[#found + 1] = i end
  end
  return found
end

-- a number an integer target cannot hold, in place of a size, dim or index
local function rewrite_int(e, self, args, n, names)
  local at = indices(names, n, function(name, i)
    if REAL_START[e.name] and name == "start" then return false end
    return INT[name] or (name == "m" and e.name:match("eye")) or
           (INT_LIST[name] and plain(args[i]))
  end)
  if #at == 0 then return nil end
  local i, v = pick(at), bad_int()
  if type(args[i]) == "table" then
    local l = copy(args[i])
    l[random(#l + 1)] = v
    args[i] = l
  else
    args[i] = v
  end
  if H.not_int(v) then return i, "a size, dim or index is " .. V.describe(v) end
end

-- the int64 writes: the target made int64 and the value one it cannot hold
local function as_int64(x)
  local ok, y = pcall(function() return x:to("int64") end)
  return ok and y or qkv.zeros(2, 3, "int64")
end

local INT64 = {
  ["Tensor.__newindex"] = function(self, args) args[1] = as_int64(args[1]); return self, 3 end,
  ["Tensor:masked_fill"] = function(self) return as_int64(self), 2 end,
  ["Tensor:masked_fill_"] = function(self) return as_int64(self), 2 end,
  ["Tensor:fill_"] = function(self) return as_int64(self), 1 end,
  ["qkv.masked_fill"] = function(self, args) args[1] = as_int64(args[1]); return self, 3 end,
  ["qkv.mask"] = function(self, args) args[1] = as_int64(args[1]); return self, 3 end,
  ["qkv.full"] = function(self, args) args[3] = "int64"; return self, 2 end,
}

local function rewrite_int64(e, self, args, n)
  local f = INT64[e.name]
  local v = pick(H.NOT_INT)
  if e.name == "qkv.tensor" and H.no_int64(v) then
    args[1], args[2] = {{1, 2}, {3, v}}, "int64"
    return self, math.max(n, 2), {[1] = "an int64 tensor of " .. V.describe(v)}
  end
  if not f or not H.no_int64(v) then return self, n, nil end
  local i
  self, i = f(self, args)
  args[i] = v
  return self, math.max(n, i, e.name == "qkv.full" and 3 or 0),
         {[i] = "an int64 target is given " .. V.describe(v)}
end

-- a NUL in the path of save, load, savez, loadz (or of an --extra entry
-- with paths = true) or in an npz entry name
local FILES = {["qkv.save"] = true, ["qkv.load"] = true, ["qkv.savez"] = true, ["qkv.loadz"] = true,
               ["qkv.save_safetensors"] = true, ["qkv.load_safetensors"] = true}

local function rewrite_nul(e, self, args, n, names)
  if e.name == "qkv.savez" and plain(args[2]) and chance(0.4) then
    args[2] = shallow(args[2])
    args[2]["x\0y"] = V.tensor()
    return 2, "an npz entry name holds a NUL"
  end
  local at = indices(names, n, function(name) return name == "path" or name == "name" end)
  if #at == 0 then return nil end
  local i = pick(at)
  args[i] = nul_path()
  if FILES[e.name] or e.paths then return i, "the path holds a NUL" end
end

-- a table argument replaced by a proxy of it, by one holding itself, or
-- (qkv.tensor's) by one nested too deep
local LISTS = {t = true, list = true, shape = true, lengths = true, d1 = true, tensors = true,
               W = true}

local function rewrite_table(e, self, args, n, names)
  local at = indices(names, n, function(_, i) return plain(args[i]) end)
  if #at == 0 then return nil end
  local i = pick(at)
  local r = random(3)
  args[i] = shallow(args[i])                        -- never a module's table
  if r == 1 then args[i] = H.proxy(args[i]); return nil end
  if e.name == "qkv.tensor" and i == 1 and r == 2 then
    args[i] = H.deep()
    return i, "a table nested deeper than 8 levels"
  end
  if LISTS[names[i]] and #args[i] > 0 then
    args[i] = H.cyclic(args[i])
    return i, "a list holding itself"
  end
  local k = next(args[i])
  if k ~= nil then args[i][k] = args[i] end         -- an option, a name: itself
end

-- writes into a destination that overlaps the source (views of one base,
-- a transpose of it) or whose elements share memory (expand: stride 0):
-- x[i] = v and the in-place methods (x:copy_(y), x:add_(y), x:fill_(v), ...)
local function same(a, b)
  if type(a) == "table" then
    for k = 1, #a do if not same(a[k], b[k]) then return false end end
    return #a == #b
  end
  return a == b or (a ~= a and b ~= b)
end

local function clone(v)
  if not qkv.is_tensor(v) then return v end     -- a proxy's reads are the call's
  local ok, c = pcall(function() return v:clone() end)
  return ok and c or v
end

-- x (c, c) and a source that overlaps it: a row, a column or one element
local function overlapping(dtype, c)
  local base = V.tensor(dtype, {c + 1, c}, "contiguous")
  local x = chance(0.5) and base:narrow(1, random(1, 2), c) or base:narrow(1, 1, c):t()
  local src = pick{base:select(1, random(1, c + 1)), base:narrow(1, 1, c):t():select(1, random(1, c)),
                   base:select(2, random(1, c)):narrow(1, random(1, 2), c)}
  if chance(0.3) then src = src:narrow(1, 1, 1) end     -- broadcast
  if chance(0.3) then src = base:narrow(1, 2, c) end    -- the whole of x, shifted
  return x, src
end

-- after a write that returned: x holds what the same write into copies gives
local function check_after(x, write)
  local ok, want = pcall(function()
    local w = x:clone()
    write(w)
    return w:tolist()
  end)
  if not ok then return end
  H.post = function()
    if not same(x:tolist(), want) then return "a write over its own storage gave another value" end
  end
end

-- the in-place methods whose first argument is a tensor source
local SOURCE = {copy_ = true, add_ = true, sub_ = true, mul_ = true, div_ = true}

local function rewrite_dest(e, self, args, n)
  local dtype, c = pick(V.DTYPES), random(2, 5)
  local x, src, shared
  local expanded = chance(0.3)
  if expanded then                                      -- stride 0
    x = V.tensor(dtype, chance(0.5) and {c, 1} or {1, c}, "contiguous"):expand(c, c)
    src = chance(0.5) and V.tensor(dtype, {c}) or random(-3, 3)
    shared = "a destination whose elements share memory"
  else
    x, src = overlapping(dtype, c)
  end
  if e.name == "Tensor.__newindex" then
    local i = random(1, c)
    args[1], args[2], args[3] = x, i, src
    if shared and x:stride(2) ~= 0 then shared = nil end  -- row i is one element per place
    -- (a clone of a stride-0 x is not one: only there is its value known)
    if not expanded then check_after(x, function(w) w[i] = clone(src) end) end
    return nil, 3, {[1] = shared}
  end
  if SOURCE[e.method] then args[1], n = src, math.max(n, 1) end
  if not shared then
    local copies = {}
    for k = 1, n do copies[k] = clone(args[k]) end
    check_after(x, function(w) w[e.method](w, table.unpack(copies, 1, n)) end)
  end
  return x, n, {[0] = shared}
end

-- maybe one hostile argument; the marks say which ones oblige an error
function H.rewrite(e, self, args, n, names)
  local r, marks = random(), {}
  local i, why
  if (e.name == "Tensor.__newindex" or (e.kind == "tensor" and e.method:match("_$")
                                          and e.method ~= "requires_grad_"))   -- writes no data
     and chance(0.25) then
    self, n, marks = rewrite_dest(e, self, args, n)
  elseif r < 0.05 then i, why = rewrite_int(e, self, args, n, names)
  elseif r < 0.08 then self, n, marks = rewrite_int64(e, self, args, n); marks = marks or {}
  elseif r < 0.10 then i, why = rewrite_nul(e, self, args, n, names)
  elseif r < 0.17 and not tame then i, why = rewrite_table(e, self, args, n, names)
  elseif r < 0.40 and rules then
    local s, m, mk, hooks, class = rules.rewrite(e, self, args, n, names)
    if class then
      self, n, marks, H.rule = s, m, mk, class
      H.post, H.post_error = hooks.post, hooks.post_error
      H.call, H.accept, H.desc = hooks.call, hooks.accept, hooks.desc
      for _, a in ipairs(hooks.allow or {}) do allowed[#allowed + 1] = a end
    end
  end
  if i and why then marks[i] = why end
  return self, n, marks
end

-- the call's tensors, arguments and items of its tables (proxies' too)
function H.arm(self, args, n)
  for k in pairs(victims) do victims[k] = nil end
  local function add(v)
    if qkv.is_tensor(v) then victims[#victims + 1] = v end
  end
  local function scan(v)
    add(v)
    local t = proxies[v] and proxies[v].real or (plain(v) and v)
    if t then
      for _, x in next, t do add(x) end
    end
  end
  scan(self)
  for i = 1, n do scan(args[i]) end
end

function H.allowed() return allowed end

function H.drop_rule()
  H.post, H.post_error, H.rule, H.call, H.accept, H.desc = nil, nil, nil, nil, nil, nil
end

-- the functions written in Lua: they read user tables once and raw, as
-- the bindings do, and get proxies and cyclic tables unless the run says
-- --tame-libs
local LIBRARIES = {"^qkv%.plot%.", "^qkv%.nn%.", "^Module:", "^qkv%.test%.", "^qkv%.repl%."}

-- before each call of entry e: its proxies (V.any's too) count from here
function H.begin(e)
  allowed, tame = {}, false
  H.drop_rule()
  if hostile_libs then return end
  for _, pat in ipairs(LIBRARIES) do
    if e.name:match(pat) then tame = true end
  end
end

function H.setup(q, libs, rules_module)
  qkv, hostile_libs, rules = q, libs, rules_module
  V.hostile = H.any
  V.describe_hook = H.describe
end

return H
