-- variants/trace.lua: score_mod and mask_mod traced into programs.
--
-- A mod is called once with symbolic arguments (score, b, h, i, j); what
-- it does to them builds a graph of nodes, which compile() turns into the
-- program of vm/common/mods.h (its op codes come from qkv._mod_ops(), so
-- they live in C alone). A node is a number or a boolean; arithmetic
-- takes numbers, & | ~ take booleans, :lt ... :ne make booleans. A Lua
-- comparison (<, <=, ==) of symbolic values cannot stay symbolic in Lua
-- 5.4, so it is an error that names the method; an `if`, `and`, `or` or
-- `not` on a symbolic boolean cannot be seen at all, but it leaves the
-- boolean out of the result, which is an error too. The derivatives the
-- backward needs (by the score, by each loaded value of a tensor that
-- requires grad) are nodes of the same graph, made here by the chain rule.

local qkv = require "qkv"

local M = {}
local OPS = qkv._mod_ops()             -- name -> code, from vm/common/mods.h

local Sym = {}
local methods = {}
Sym.__index = methods
Sym.__name = "qkv.symbolic"

-- the trace being built: its nodes (hash-consed), the mod's name for
-- messages, the booleans made while tracing, the captured tensors
local active

local function issym(x) return getmetatable(x) == Sym end
M.issym = issym

local function fail(fmt, ...)
  local where = active and (active.fname .. ": " .. active.mod .. ": ") or ""
  error(where .. string.format(fmt, ...), 3)
end

local function node(op, kind, args, k, extra)
  local T = active
  if not T then error("a symbolic value was used outside the trace of its mod", 3) end
  local key = op .. ":" .. kind .. ":" .. (k and string.format("%.17g", k) or "")
  for _, a in ipairs(args) do key = key .. ":" .. a.id end
  if extra then key = key .. ":cap" .. extra end
  local n = T.nodes[key]
  if n then return n end
  n = setmetatable({op = op, kind = kind, args = args, k = k, cap = extra, id = #T.list + 1,
                    trace = T}, Sym)
  T.nodes[key] = n
  T.list[#T.list + 1] = n
  if kind == "bool" and op ~= "const" then T.bools[#T.bools + 1] = n end
  return n
end

local function const(x)
  if type(x) == "boolean" then return node("const", "bool", {}, x and 1 or 0) end
  return node("const", "num", {}, x)
end

-- x as a node of `kind` for op `what`
local function lift(x, kind, what)
  if issym(x) then
    if not active then error("a symbolic value was used outside the trace of its mod", 3) end
    if x.trace ~= active then fail("a symbolic value of another trace was used") end
    if x.kind ~= kind then
      if kind == "num" then
        fail("%s of a boolean value (a comparison); make it a number with qkv.where(c, 1, 0)", what)
      end
      fail("%s of a number; it takes booleans (comparisons such as j:le(i))", what)
    end
    return x
  end
  if kind == "num" and math.type(x) then return const(x) end
  if kind == "bool" and type(x) == "boolean" then return const(x) end
  fail("%s of a %s; it takes a symbolic %s or a %s", what, type(x),
       kind == "num" and "number" or "boolean", kind == "num" and "number" or "boolean")
end

local function arith(op, sym)
  return function(a, b) return node(op, "num", {lift(a, "num", sym), lift(b, "num", sym)}) end
end
Sym.__add, Sym.__sub, Sym.__mul = arith("add", "+"), arith("sub", "-"), arith("mul", "*")
Sym.__div, Sym.__pow = arith("div", "/"), arith("pow", "^")
Sym.__idiv, Sym.__mod = arith("idiv", "//"), arith("mod", "%")
Sym.__unm = function(a) return node("neg", "num", {lift(a, "num", "unary -")}) end
Sym.__band = function(a, b) return node("and", "bool", {lift(a, "bool", "&"), lift(b, "bool", "&")}) end
Sym.__bor = function(a, b) return node("or", "bool", {lift(a, "bool", "|"), lift(b, "bool", "|")}) end
Sym.__bnot = function(a) return node("not", "bool", {lift(a, "bool", "~")}) end
Sym.__bxor = function() fail("~ between two values is xor, which symbolic booleans do not have; use (a | b) & ~(a & b)") end
Sym.__shl = function() fail("<< is not defined for symbolic values") end
Sym.__shr = function() fail(">> is not defined for symbolic values") end
Sym.__concat = function() fail(".. is not defined for symbolic values") end
Sym.__call = function() fail("a symbolic value cannot be called") end
Sym.__len = function() fail("# is not defined for symbolic values") end
Sym.__newindex = function() fail("a symbolic value has no fields to set") end
Sym.__close = nil
Sym.__lt = function()
  fail("a Lua comparison (< or >) of a symbolic value gives a plain boolean, once, while tracing; use x:lt(y) or x:gt(y)")
end
Sym.__le = function()
  fail("a Lua comparison (<= or >=) of a symbolic value gives a plain boolean, once, while tracing; use x:le(y) or x:ge(y)")
end
Sym.__eq = function()
  fail("a Lua comparison (== or ~=) of symbolic values gives a plain boolean, once, while tracing; use x:eq(y) or x:ne(y)")
end

local NAMES = {lt = "<", le = "<=", gt = ">", ge = ">=", eq = "==", ne = "~="}
for name in pairs(NAMES) do
  methods[name] = function(a, b)
    return node(name, "bool", {lift(a, "num", ":" .. name), lift(b, "num", ":" .. name)})
  end
end
for _, name in ipairs{"exp", "log", "tanh", "abs", "sqrt", "sigmoid", "sin", "cos", "relu", "neg"} do
  methods[name] = function(a, ...)
    if select("#", ...) > 0 then fail(":%s takes no arguments", name) end
    return node(name, "num", {lift(a, "num", ":" .. name)})
  end
end
function methods.minimum(a, b) return node("minimum", "num", {lift(a, "num", ":minimum"), lift(b, "num", ":minimum")}) end
function methods.maximum(a, b) return node("maximum", "num", {lift(a, "num", ":maximum"), lift(b, "num", ":maximum")}) end
function methods.clamp(a, lo, hi)
  local x = lift(a, "num", ":clamp")
  if lo ~= nil then x = methods.maximum(x, lo) end
  if hi ~= nil then x = methods.minimum(x, hi) end
  return x
end
function methods.logical_and(a, b) return Sym.__band(a, b) end
function methods.logical_or(a, b) return Sym.__bor(a, b) end
function methods.logical_not(a) return Sym.__bnot(a) end

-- qkv.where(c, x, y) on symbolic values (variants/init.lua routes it here)
function M.where(c, x, y)
  c = lift(c, "bool", "where's condition")
  local kind = (issym(x) and x.kind) or (issym(y) and y.kind) or (type(x) == "boolean" and "bool") or "num"
  return node("where", kind, {c, lift(x, kind, "where"), lift(y, kind, "where")})
end

-- t[k] or t[{k1, k2, ...}] with symbolic indices: a load of the captured t
function M.index(t, key)
  local idx = type(key) == "table" and not issym(key) and key or {key}
  if #idx ~= t:dim() then
    fail("a captured tensor %s takes %d indices, got %d", tostring(t.shape), t:dim(), #idx)
  end
  local T = active
  local c = T.capindex[t]
  if not c then
    c = #T.caps + 1
    if c > 8 then fail("more than 8 captured tensors") end
    T.caps[c], T.capindex[t], T.capmod[c] = t, c, T.mod
  end
  local args = {}
  for d, k in ipairs(idx) do args[d] = lift(k, "num", "an index") end
  return node("load", "num", args, nil, c)
end
Sym.__qkv_index = M.index

function Sym.__tostring(x)
  local a = x.args
  if x.op == "const" then return x.kind == "bool" and tostring(x.k ~= 0) or string.format("%.17g", x.k) end
  if #a == 0 then return x.op end
  local parts = {}
  for n, y in ipairs(a) do parts[n] = tostring(y) end
  if x.op == "load" then return "captured" .. x.cap .. "[" .. table.concat(parts, ", ") .. "]" end
  return x.op .. "(" .. table.concat(parts, ", ") .. ")"
end

-------------------------------------------------------------- tracing

-- a new trace: the symbols of both mods are its leaves
function M.new(fname, device)
  local T = {nodes = {}, list = {}, bools = {}, caps = {}, capindex = {}, capmod = {},
             fname = fname, device = device or "cpu"}
  local saved = active
  active = T
  T.score, T.b, T.h = node("score", "num", {}), node("b", "num", {}), node("h", "num", {})
  T.i, T.j = node("i", "num", {}), node("j", "num", {})
  active = saved
  return T
end

local PARAMS = {score_mod = "(score, b, h, i, j)", mask_mod = "(b, h, i, j)"}

-- the nodes reachable from root
local function reach(root, seen)
  local stack = {root}
  while #stack > 0 do
    local x = table.remove(stack)
    if not seen[x] then
      seen[x] = true
      for _, a in ipairs(x.args) do stack[#stack + 1] = a end
    end
  end
  return seen
end

-- f traced as `mod` ("score_mod" or "mask_mod") into T; returns its node
function M.trace(T, mod, f)
  local fname = T.fname
  if type(f) ~= "function" then
    error(string.format("%s: %s must be a function %s, got %s", fname, mod, PARAMS[mod],
                        type(f)), 3)
  end
  local info = debug.getinfo(f, "u")
  local want = mod == "score_mod" and 5 or 4
  if info.what ~= "C" and not info.isvararg and info.nparams ~= want then
    error(string.format("%s: %s takes %s, %d parameters; the function given takes %d%s", fname,
                        mod, PARAMS[mod], want, info.nparams,
                        want == 5 and info.nparams == 4 and " (a mask_mod?)" or
                        want == 4 and info.nparams == 5 and " (a score_mod?)" or ""), 3)
  end
  local saved = active
  active = T
  T.mod = mod
  local first = #T.bools
  local ok, r
  if mod == "score_mod" then ok, r = pcall(f, T.score, T.b, T.h, T.i, T.j)
  else ok, r = pcall(f, T.b, T.h, T.i, T.j) end
  active = saved
  if not ok then error(r, 0) end
  local where = fname .. ": " .. mod .. ": "
  if mod == "mask_mod" then
    if type(r) == "boolean" then
      error(where .. "returned a Lua boolean (" .. tostring(r) .. "), not a symbolic one: ==, ~=, " ..
            "not, and, or on symbolic values give plain booleans while tracing; use :eq, :ne, ~, &, |", 3)
    end
    if not issym(r) or r.kind ~= "bool" then
      error(where .. "must return a symbolic boolean (such as j:le(i)), got " ..
            (issym(r) and "a number" or type(r)), 3)
    end
  else
    active = T
    if math.type(r) then r = const(r) end
    active = saved
    if not issym(r) or r.kind ~= "num" then
      error(where .. "must return a number or a symbolic number, got " ..
            (issym(r) and "a boolean" or type(r)), 3)
    end
  end
  if r.trace ~= T then error(where .. "returned a symbolic value of another trace", 3) end
  local seen = reach(r, {})
  for n = first + 1, #T.bools do
    local c = T.bools[n]
    if not seen[c] then
      error(where .. "the boolean " .. tostring(c) .. " was made but does not reach the result: " ..
            "an if, and, or, not on a symbolic value runs once while tracing; use qkv.where(c, x, y), " ..
            "&, |, ~", 3)
    end
  end
  return r
end

-- the device of the call being traced (where its captured tensors must be)
function M.device() return active and active.device or "cpu" end

-- a & b for two mask nodes of T, outside any mod
function M.both(T, a, b)
  local saved = active
  active = T
  local r = a & b
  active = saved
  return r
end

-- whether root reads the leaf (T.b, T.h ...)
function M.reads(root, leaf) return reach(root, {})[leaf] == true end

-------------------------------------------------------------- derivatives

local ZERO = {}
-- d(x)/d(target) as a node, or nil for 0, memoised in memo
local function deriv(T, x, target, memo)
  if rawequal(x, target) then return const(1) end
  local m = memo[x]
  if m ~= nil then return not rawequal(m, ZERO) and m or nil end
  local a, b, c = x.args[1], x.args[2], x.args[3]
  local op, r = x.op, nil
  local function d(y) return deriv(T, y, target, memo) end
  local function add(u, v) if not u then return v end if not v then return u end return u + v end
  local function mul(u, v) if not u or not v then return nil end return u * v end
  if op == "add" then r = add(d(a), d(b))
  elseif op == "sub" then local db = d(b) r = add(d(a), db and -db)
  elseif op == "mul" then r = add(mul(d(a), b), mul(a, d(b)))
  elseif op == "div" then local db = d(b) r = add(d(a) and d(a) / b, db and -(x / b) * db)
  elseif op == "neg" then local da = d(a) r = da and -da
  elseif op == "pow" then
    local da, db = d(a), d(b)
    r = add(mul(da, b * a ^ (b - 1)), mul(db, x * methods.log(a)))
  elseif op == "exp" then r = mul(d(a), x)
  elseif op == "log" then r = d(a) and d(a) / a
  elseif op == "tanh" then r = mul(d(a), 1 - x * x)
  elseif op == "abs" then r = mul(d(a), M.where(a:lt(0), -1, M.where(a:gt(0), 1, 0)))
  elseif op == "sqrt" then r = d(a) and d(a) / (2 * x)
  elseif op == "sigmoid" then r = mul(d(a), x * (1 - x))
  elseif op == "sin" then r = mul(d(a), methods.cos(a))
  elseif op == "cos" then r = mul(d(a), -methods.sin(a))
  elseif op == "relu" then r = mul(d(a), M.where(a:gt(0), 1, 0))
  elseif op == "mod" then local db = d(b) r = add(d(a), db and -(a // b) * db)
  elseif op == "minimum" or op == "maximum" then
    local da, db = d(a), d(b)
    local first = op == "minimum" and a:lt(b) or a:gt(b)
    local second = op == "minimum" and a:gt(b) or a:lt(b)
    if da or db then
      local za, zb = da or const(0), db or const(0)
      r = M.where(first, za, M.where(second, zb, (za + zb) / 2))
    end
  elseif op == "where" then
    local db, dc = d(b), d(c)
    if db or dc then r = M.where(a, db or const(0), dc or const(0)) end
  end
  -- idiv, comparisons, loads, leaves: 0 (nothing flows through them)
  memo[x] = r or ZERO
  return r
end

-------------------------------------------------------------- compiling

-- the program of a trace for the nodes score (a number node or nil), mask
-- (a boolean node or nil) and, when grads, the derivatives the backward
-- needs: by the score, and by each load of a captured tensor for which
-- wants(t) is true. Returns the program (a string of instructions), its
-- index arguments (a string), the outputs (a list of QKV_MOD_NOUT
-- integers, -1 for none), the LOAD each derivative output is by, the
-- captured tensors, and the loads' tensors per derivative output.
function M.compile(T, score, mask, grads, wants)
  local saved = active
  active = T
  local roots = {score or false, false, mask or false}
  local dloads = {}
  if grads and score then
    roots[2] = deriv(T, score, T.score, {}) or const(0)
    local loads = {}
    for _, x in ipairs(T.list) do
      if x.op == "load" and wants(T.caps[x.cap]) and reach(score, {})[x] then loads[#loads + 1] = x end
    end
    if #loads > 8 then
      active = saved
      error(T.fname .. ": score_mod: more than 8 loads of tensors that require grad", 3)
    end
    for n, l in ipairs(loads) do
      roots[3 + n] = deriv(T, score, l, {}) or const(0)
      dloads[n] = l
    end
  end
  active = saved
  -- the nodes in an order where each comes after what it reads
  local order, index = {}, {}
  local function visit(x)
    if index[x] then return end
    for _, a in ipairs(x.args) do visit(a) end
    order[#order + 1] = x
    index[x] = #order - 1
  end
  for n = 1, 3 + #dloads do if roots[n] then visit(roots[n]) end end
  for _, l in ipairs(dloads) do visit(l) end
  if #order > 256 then error(T.fname .. ": the mods make more than 256 operations", 3) end
  local ins, args = {}, {}
  for n, x in ipairs(order) do
    local a, b, c, k = 0, 0, 0, x.k or 0
    if x.op == "load" then
      a, b, c = x.cap - 1, #args, #x.args
      for _, y in ipairs(x.args) do args[#args + 1] = string.pack("<i4", index[y]) end
    else
      a = x.args[1] and index[x.args[1]] or 0
      b = x.args[2] and index[x.args[2]] or 0
      c = x.args[3] and index[x.args[3]] or 0
    end
    ins[n] = string.pack("<i4i4i4i4d", OPS[x.op], a, b, c, k)
  end
  if #args > 64 then error(T.fname .. ": the mods' loads take more than 64 indices", 3) end
  local out, by = {}, {}
  for n = 1, 11 do
    out[n] = roots[n] and index[roots[n]] or -1
    by[n] = n > 3 and dloads[n - 3] and index[dloads[n - 3]] or -1
  end
  local gcaps = {}
  for n, l in ipairs(dloads) do gcaps[n] = l.cap end
  return table.concat(ins), table.concat(args), out, by, T.caps, gcaps
end

return M
