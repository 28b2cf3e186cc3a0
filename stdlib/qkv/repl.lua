-- repl.lua: qkv.repl, the Lua half of the REPL (vm/cli/repl.c is the C half):
-- how results print, what Tab completes, what `?name` asks, and the
-- switch for showing each command's wall time. Only `timing` is public;
-- the C side calls the functions whose names start with '_'.

local qkv = require "qkv"

local M = {}

-- the seconds over which a command's wall time shows: at the start and
-- whenever timing is given a boolean
local DEFAULT_OVER = 0.01
local show_timing, over = true, DEFAULT_OVER

-- qkv.repl.timing([on | seconds]): show the wall time of commands over
-- 10 ms (true), none (false), or those over the seconds given
function M.timing(on)
  if math.type(on) ~= nil then
    if not (on >= 0 and on < math.huge) then
      error("timing: bad argument #1 (seconds must be finite and >= 0, got " .. tostring(on) .. ")", 2)
    end
    show_timing, over = true, on
  elseif on ~= nil then
    if type(on) ~= "boolean" then
      error("timing: bad argument #1 (boolean or seconds expected, got " .. type(on) .. ")", 2)
    end
    show_timing, over = on, DEFAULT_OVER
  end
  return show_timing
end

-- the C half's question: the milliseconds over which a time shows, or
-- false when timing is off
function M._timing() return show_timing and over * 1000 end

-- printing results ----------------------------------------------------

local MAXITEMS, MAXDEPTH = 24, 2

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

local repr

local function keyrepr(k)
  if is_ident(k) then return k end
  return "[" .. repr(k, MAXDEPTH, {}) .. "]"
end

-- the keys after the sequence part, sorted so that output is stable
local function otherkeys(t, n)
  local keys = {}
  for k in pairs(t) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys
end

local function tablerepr(t, depth, seen)
  if seen[t] then return "{<cycle>}" end
  if depth >= MAXDEPTH then return "{...}" end
  seen[t] = true
  local parts, n = {}, rawlen(t)
  for i = 1, math.min(n, MAXITEMS) do parts[#parts + 1] = repr(rawget(t, i), depth + 1, seen) end
  for _, k in ipairs(otherkeys(t, n)) do
    if #parts >= MAXITEMS then break end
    parts[#parts + 1] = keyrepr(k) .. " = " .. repr(rawget(t, k), depth + 1, seen)
  end
  local total = n
  for _ in pairs(t) do total = total + 1 end
  total = total - n
  if #parts < total then parts[#parts + 1] = "..." end
  seen[t] = nil
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- a value inside a table: strings quoted, tensors by shape only
function repr(v, depth, seen)
  if type(v) == "string" then return string.format("%q", v) end
  if qkv.is_tensor(v) then
    if depth > 0 then
      local ok, shape, dtype = pcall(function() return v.shape, v.dtype end)
      if not ok then return tostring(v) end           -- a closed tensor
      return "tensor(size=(" .. table.concat(shape, ", ") .. "), dtype=" .. dtype .. ")"
    end
    return tostring(v)
  end
  local mt = getmetatable(v)
  if type(v) == "table" and not (type(mt) == "table" and rawget(mt, "__tostring")) then
    return tablerepr(v, depth, seen)
  end
  return tostring(v)
end

-- the text the REPL prints for a command's results
function M._show(...)
  local n = select("#", ...)
  local parts, multiline = {}, false
  for i = 1, n do
    local v = select(i, ...)
    local s = type(v) == "string" and v or repr(v, 0, {})
    parts[i] = s
    if s:find("\n", 1, true) then multiline = true end
  end
  return table.concat(parts, multiline and "\n" or "\t")
end

-- qkv.display(...): shows values as a command's results show: in the
-- REPL or a script as they print, in Jupyter as display_data (the kernel
-- sets M._display)
function M._display_values(...)
  if M._display then return M._display(...) end
  io.write(M._show(...), "\n")
  io.stdout:flush()
end

-- qkv.clear_output([wait]): clears the cell's output in Jupyter (the
-- kernel sets M._clear); a terminal's output is no cell's, so elsewhere
-- it does nothing
function M._clear_output(wait)
  if wait ~= nil and type(wait) ~= "boolean" then
    error("clear_output: bad argument #1 (boolean expected, got " .. type(wait) .. ")", 2)
  end
  if M._clear then M._clear(wait == true) end
end

-- completion ---------------------------------------------------------

local keywords = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then",
  "true", "until", "while",
}

local tensor_fields = {"shape", "dtype", "device", "ndim"}

local function callable(v)
  local mt = getmetatable(v)
  return type(v) == "function" or (type(mt) == "table" and rawget(mt, "__call") ~= nil)
end

-- the names reachable from obj: its own keys, then those its metatables'
-- __index tables give (classes, tensor methods), then lazy ones
local function names(obj, methods_only)
  local out = {}
  local function add(k, v)
    if is_ident(k) and (not methods_only or callable(v)) then out[k] = true end
  end
  local function addtable(t)
    for k, v in pairs(t) do add(k, v) end
  end
  if type(obj) == "table" then addtable(obj) end
  if obj == qkv then
    for _, k in ipairs(qkv._lazy) do out[k] = true end
  elseif qkv.is_tensor(obj) then
    pcall(require, "qkv.composite")            -- the methods written in Lua
    addtable(qkv._methods)
    if not methods_only then for _, k in ipairs(tensor_fields) do out[k] = true end end
  elseif type(obj) == "string" then
    addtable(string)
  end
  local mt, hops = getmetatable(obj), 0
  while type(mt) == "table" and hops < 8 do
    local idx = rawget(mt, "__index")
    if type(idx) ~= "table" then break end
    addtable(idx)
    mt, hops = getmetatable(idx), hops + 1
  end
  return out
end

-- the value a dotted path of names leads to, without calling anything
-- but the __index metamethods on the way; nil if any step fails
local function lookup(path)
  local v = _G
  for name in path:gmatch("[^.]+") do
    if not is_ident(name) then return nil end
    local ok, r = pcall(function() return v[name] end)
    if not ok or r == nil then return nil end
    v = r
  end
  return v
end

-- qkv.repl._complete(text) -> the sorted full words that complete text
function M._complete(text)
  local prefix, sep, partial = text:match("^(.*)([.:])([%w_]*)$")
  local pool
  if prefix == nil then
    partial = text
    if not (partial == "" or is_ident(partial)) then return {} end
    pool = names(_G, false)
    for _, k in ipairs(keywords) do pool[k] = true end
    prefix, sep = "", ""
  else
    if prefix:find("[^%w_.]") or prefix == "" then return {} end
    local obj = lookup(prefix)
    if obj == nil then return {} end
    pool = names(obj, sep == ":")
  end
  local hidden = partial:sub(1, 1) ~= "_"
  local out = {}
  for k in pairs(pool) do
    if k:sub(1, #partial) == partial and not (hidden and k:sub(1, 1) == "_") then
      out[#out + 1] = prefix .. sep .. k
    end
  end
  table.sort(out)
  return out
end

-- help ---------------------------------------------------------------

-- `?expr`: help on the value of expr, or on the name when it has none
function M._help(expr)
  expr = expr:match("^%s*(.-)%s*$")
  if expr == "" then return qkv.help() end
  local f = load("return " .. expr, "=?", "t")
  if f then
    local ok, v = pcall(f)
    if ok and v ~= nil then return qkv.help(v) end
  end
  return qkv.help(expr)
end

return qkv._strict(M, "qkv.repl")
