-- methods.lua: the check every object of the Lua library shares on its
-- methods (modules, optimizers, schedulers, hook handles, dist's Work,
-- BertModel, Tokenizer): a method called with '.' instead of ':', or on
-- something that is not its object, is an error saying so at the caller's
-- line ("step: called with '.', use opt:step()"), not "attempt to index a
-- nil value (local 'self')" from inside the library.
--
--   methods.guard(cls, recv [, what])  every public function of cls (a
--                                      name not starting with '_') checks
--                                      its self; recv names an object in
--                                      the message ("opt"), what its kind
--   methods.wrap(cls, name, f, recv [, what]) -> f, checked the same way
--   methods.is_a(v, cls)               whether v's class is cls or inherits
--                                      from it (classes chain by __index)
--   methods.open_tensor(v)             whether v is a tensor that is not
--                                      closed (local x <close> ended it: it
--                                      answers nothing but errors)
--   methods.what_arg(v)                what v is, for a bad argument's
--                                      message: its dtype and shape
--                                      ("float32 (2, 3)"), "a closed
--                                      tensor", or its type

local qkv = require "qkv"

local M = {}

function M.open_tensor(v)
  return qkv.is_tensor(v) and pcall(function() return v.dtype end)
end

-- PyTorch's autocast runs the losses in float32: their tensors widened
-- where an autocast region is open on their device (qkv.amp.autocast's
-- work, once that module is loaded; until then they pass as they are)
function M.autocast_fp32(...)
  local ac = package.loaded["qkv.amp.autocast"]
  if ac then return ac.fp32(...) end
  return ...
end

-- op's arguments cast ahead of it as autocast would (qkv.amp.autocast's
-- args), for library functions that pass the op a view of a parameter
function M.autocast_args(op, ...)
  local ac = package.loaded["qkv.amp.autocast"]
  if ac then return ac.args(op, ...) end
  return ...
end

function M.what_arg(v)
  if M.open_tensor(v) then return v.dtype .. " " .. tostring(v.shape) end
  return qkv.is_tensor(v) and "a closed tensor" or type(v)
end

function M.is_a(v, cls)
  if type(v) ~= "table" and type(v) ~= "userdata" then return false end
  local c = getmetatable(v)
  for _ = 1, 16 do
    if c == cls then return true end
    local mt = type(c) == "table" and getmetatable(c)
    c = mt and rawget(mt, "__index")
    if type(c) ~= "table" then return false end
  end
  return false
end

-- what v is, for the message: a class's __name, "a tensor", or its type
local function describe(v)
  if qkv.is_tensor(v) then return "a tensor" end
  local mt = getmetatable(v)
  local name = type(mt) == "table" and rawget(mt, "__name")
  if type(name) == "string" and type(v) == "table" then return "a " .. name end
  return "a " .. type(v)
end

function M.wrap(cls, name, f, recv, what)
  what = what or rawget(cls, "__name") or recv
  return function(self, ...)
    if not M.is_a(self, cls) then
      if self == nil then
        error(string.format("%s: called with '.', use %s:%s()", name, recv, name), 2)
      end
      error(string.format("%s: called on %s, not %s %s (called with '.'?): use %s:%s()", name,
                          describe(self), what:match("^[aeiouAEIOU]") and "an" or "a", what,
                          recv, name), 2)
    end
    return f(self, ...)
  end
end

function M.guard(cls, recv, what)
  local names = {}
  for k, f in next, cls do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and type(f) == "function" then
      names[#names + 1] = k
    end
  end
  for _, k in ipairs(names) do rawset(cls, k, M.wrap(cls, k, rawget(cls, k), recv, what)) end
  return cls
end

return M
