-- checkpoint.lua: qkv.save(path, t) and qkv.load(path) of a table: a
-- checkpoint, as torch.save / torch.load of a dict (a model's state_dict,
-- an optimizer's, the epoch, the loss...). bindings/lio.c hands a table
-- to save and a file that is not a .npy to load here.
--
-- The file is a safetensors file (qkv.save_safetensors), so that any
-- safetensors reader sees its tensors: each tensor once (a tensor the
-- table holds twice is one entry, and comes back as one tensor held
-- twice, as torch.save keeps sharing), named "0", "1", ...; the table's
-- shape -- its keys, nesting, numbers (integers and floats apart),
-- booleans, strings, and where each tensor goes -- is JSON in the
-- header's __metadata__ under "qkv.checkpoint". Every value is data:
-- loading runs no code of the file's (torch.load's weights_only=True).
-- Tensors are written from a CPU copy and read back as
-- qkv.load_safetensors makes them (on the default device).

local qkv = require "qkv"
local json = require "qkv.json"
local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local M = {}
local KEY = "qkv.checkpoint"
local DEPTH = 64                 -- tables within tables, at most

local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

-- a string as JSON holds it: itself when it is UTF-8 without NUL, else
-- its bytes in hex
local function str(s)
  if utf8.len(s) and not s:find("%z") then return {"s", s} end
  return {"x", (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))}
end

local function where(path)
  local parts = {}
  for i, k in ipairs(path) do parts[i] = "[" .. (type(k) == "string" and string.format("%q", k) or tostring(k)) .. "]" end
  return "t" .. table.concat(parts)
end

-- value v at path as a node of the skeleton; its tensors into tensors
local function node(v, path, seen, tensors, names)
  local ty = type(v)
  if qkv.is_tensor(v) then
    if not pcall(function() return v.ndim end) then fail("save: %s is a closed tensor", where(path)) end
    local name = names[v]
    if not name then
      name = tostring(#tensors)
      names[v] = name
      tensors[#tensors + 1] = {name, v}
    end
    return {"t", name}
  elseif ty == "number" then
    if math.type(v) == "integer" then return {"i", tostring(v)} end
    return {"f", v ~= v and "nan" or v == math.huge and "inf" or v == -math.huge and "-inf"
                 or string.format("%.17g", v)}
  elseif ty == "boolean" then return {"b", v}
  elseif ty == "string" then return str(v)
  elseif ty == "table" then
    local mt = getmetatable(v)
    if mt ~= nil then
      local what = type(mt) == "table" and rawget(mt, "__name")
      fail("save: %s is %s, not a plain table: save its state_dict()", where(path),
           what and "a " .. tostring(what) or "a table with a metatable")
    end
    if seen[v] then fail("save: %s holds a table that holds it (a cycle)", where(path)) end
    if #path >= DEPTH then fail("save: %s: tables nested over %d deep", where(path), DEPTH) end
    seen[v] = true
    local entries = {}
    for k, x in next, v do
      local kt = type(k)
      if kt ~= "string" and kt ~= "number" and kt ~= "boolean" then
        fail("save: %s has a key that is a %s: keys are strings, numbers and booleans", where(path), kt)
      end
      path[#path + 1] = k
      entries[#entries + 1] = {node(k, path, seen, tensors, names), node(x, path, seen, tensors, names)}
      path[#path] = nil
    end
    seen[v] = nil
    -- sorted by the key's encoding: the same table gives the same bytes
    for _, e in ipairs(entries) do e.sort = json.encode(e[1]) end
    table.sort(entries, function(a, b) return a.sort < b.sort end)
    local out = {"m"}
    for _, e in ipairs(entries) do out[#out + 1] = {e[1], e[2]} end
    return out
  end
  fail("save: %s is a %s: a checkpoint holds tables, tensors, numbers, booleans and strings",
       where(path), ty)
end

function M.save(path, t)
  local tensors, names = {}, {}
  local skel = node(t, {}, {}, tensors, names)
  local named = {}
  for _, e in ipairs(tensors) do
    local x = e[2]
    named[e[1]] = x.device == "cpu" and x or x:cpu()
  end
  local ok, err = pcall(qkv.save_safetensors, path, named, {[KEY] = json.encode(skel), format = "qkv"})
  if not ok then fail("%s", (tostring(err):gsub("^save_safetensors", "save"))) end
end

-- the value of node x of the checkpoint at path (depth d), checked: what
-- the file says is data, and anything unexpected is an error naming it
local function value(x, tensors, path, d)
  local function bad(why) fail("load: %s: not a qkv checkpoint: %s", path, why) end
  if type(x) ~= "table" or type(x[1]) ~= "string" then bad("a value is not a tagged list") end
  local tag, a = x[1], x[2]
  if tag == "m" then
    if d >= DEPTH then bad("tables nested over " .. DEPTH .. " deep") end
    local t = {}
    for n = 2, #x do
      local e = x[n]
      if type(e) ~= "table" or #e ~= 2 then bad("a table entry is not a key and a value") end
      local k = value(e[1], tensors, path, d + 1)
      if type(k) ~= "string" and type(k) ~= "number" and type(k) ~= "boolean" then bad("a key is a " .. type(k)) end
      if k ~= k then bad("a key is NaN") end
      if t[k] ~= nil then bad("a key is there twice") end
      t[k] = value(e[2], tensors, path, d + 1)
    end
    return t
  end
  if #x ~= 2 then bad("a value's list is not a tag and one datum") end
  if tag == "t" then
    local v = type(a) == "string" and tensors[a]
    if not v then bad("it names a tensor " .. tostring(a) .. " that the file lacks") end
    return v
  elseif tag == "i" then
    local v = type(a) == "string" and math.tointeger(tonumber(a))
    if not v or tostring(v) ~= a then bad("an integer is not one") end
    return v
  elseif tag == "f" then
    if a == "nan" then return 0 / 0 elseif a == "inf" then return math.huge
    elseif a == "-inf" then return -math.huge end
    local v = type(a) == "string" and tonumber(a)
    if not v then bad("a float is not one") end
    -- "-0" reads as the integer 0, and -0.0 + 0.0 is 0.0: a float as read
    if math.type(v) == "integer" then v = tonumber(a .. ".0") or v + 0.0 end
    return v
  elseif tag == "b" then
    if type(a) ~= "boolean" then bad("a boolean is not one") end
    return a
  elseif tag == "s" then
    if type(a) ~= "string" then bad("a string is not one") end
    return a
  elseif tag == "x" then
    if type(a) ~= "string" or #a % 2 ~= 0 or a:find("[^0-9a-f]") then bad("a hex string is not one") end
    return (a:gsub("..", function(h) return string.char(tonumber(h, 16)) end))
  end
  bad("an unknown tag " .. string.format("%q", tag))
end

function M.load(path)
  local ok, tensors, meta = pcall(qkv.load_safetensors, path)
  if not ok then
    fail("load: %s: neither a .npy file nor a qkv checkpoint (%s)", path,
         (tostring(tensors):gsub("^load_safetensors: ", "")))
  end
  local text = meta[KEY]
  if text == nil then
    fail("load: %s: a safetensors file, not a qkv checkpoint: qkv.load_safetensors reads it", path)
  end
  local okj, skel = pcall(json.decode, text, path)
  if not okj then fail("load: %s: not a qkv checkpoint: its structure is not JSON", path) end
  local t = value(skel, tensors, path, 0)
  -- every tensor of the file is somewhere in the table
  return t
end

return M
