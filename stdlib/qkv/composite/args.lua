-- composite/args.lua: what the composite functions (composite/*.lua)
-- share: their errors, which name the public function at the script's
-- line, PyTorch's keywords as positions, and the checks of their
-- arguments (dims 1-based and negative from the end, as the bindings'
-- qkvL_checkdim; integers that are integers; lists read raw, at most so
-- many items and nothing but their items; shapes and factories' options,
-- as the bindings read them).

local qkv = require "qkv"
local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local is_tensor = qkv.is_tensor
local MAXRET = 1000000          -- Lua's stack: the most values one call returns

---------------------------------------------------------------- errors

-- an error of the function being run, with no position: api() names the
-- function and points at the script's line
local function fail(fmt, ...) error(string.format(fmt, ...), 0) end

-- f as the public function fname: its errors, and those of the ops it
-- calls, read "fname: ..." at the line of the script that called it
local function api(fname, f)
  local prefix = fname .. ": "
  return function(...)
    local r = table.pack(pcall(f, ...))
    if r[1] then return table.unpack(r, 2, r.n) end
    local err = r[2]
    if type(err) ~= "string" then error(err, 0) end
    err = err:gsub("^[^\n]-:%d+: ", "", 1)        -- where an op raised it
    if err:sub(1, #prefix) ~= prefix then err = prefix .. err end
    error(err, caller(SOURCE, true))
  end
end

local function shape_of(x) return tostring(x.shape) end

-- a message of qkv._checkopts or qkv._checklist, raised as is
local function raise(msg) error(msg, 0) end

-- whether v is a table of options: named keys and no items (a list, with
-- or without other keys, is read as a list, which says what is wrong); an
-- empty table is an empty list where a list may stand (`list`), else no
-- options
local function is_opts(v, list)
  if type(v) ~= "table" or is_tensor(v) or rawlen(v) > 0 then return false end
  if next(v) == nil then return not list end
  for k in next, v do
    if type(k) == "string" then return true end
  end
  return false
end

-- PyTorch's keywords as positions, as the bindings' qkvL_keywords: when
-- the last argument (trailing nils aside), at position first or after, is
-- a table of options, its keys name positions from first on (names[i]
-- is position first + i - 1; a list of names there are one position's
-- aliases, as scatter's src and value; names.lists, the names of those
-- that take a list), so that x:flip{dims = {1}} is x:flip({1}) and
-- x:norm(2, {dim = -1}) is x:norm(2, -1).  A key not named, or a position
-- given both ways, is an error naming fname.  Returns the arguments as
-- positions.
local function keywords(fname, names, first, ...)
  local args = table.pack(...)
  local n = args.n
  while n > 0 and args[n] == nil do n = n - 1 end
  local here = names[n - first + 1]
  if n < first or not is_opts(args[n], names.lists and names.lists[here]) then
    return table.unpack(args, 1, args.n)
  end
  local all, at = {}, {}
  for i, nm in ipairs(names) do
    for _, a in ipairs(type(nm) == "table" and nm or {nm}) do
      all[#all + 1], at[a] = a, first + i - 1
    end
  end
  local msg, o = qkv._checkopts(fname, args[n], all)
  if msg then raise(msg) end
  if n - first > #names then
    fail("%s: %d arguments before the options table, at most %d", fname, n - first, #names)
  end
  args[n] = nil
  local from = {}
  for _, a in ipairs(all) do
    local p = at[a]
    if o[a] ~= nil then
      if args[p] ~= nil then
        fail("%s: %s is given twice, %s", fname, a,
             from[p] and "as '" .. from[p] .. "' and as '" .. a .. "'"
                     or "as an argument and as an option")
      end
      args[p], from[p] = o[a], a
    end
  end
  return table.unpack(args, 1, first + #names - 1)
end

---------------------------------------------------------------- arguments

local function tensor_arg(v, what)
  if not is_tensor(v) then fail("%s must be a tensor, got %s", what, type(v)) end
  -- (one that local x <close> ended: "new_zeros: x is a closed tensor",
  -- not index's "tensor was closed" from inside the function)
  if not pcall(function() return v.ndim end) then fail("%s is a closed tensor", what) end
  return v
end

-- an integer (a float with an integer value too), or an error naming what
local function int_arg(v, what)
  local i = type(v) == "number" and math.tointeger(v) or nil
  if i == nil then
    fail("%s must be an integer, got %s", what, type(v) == "number" and tostring(v) or type(v))
  end
  return i
end

local function bool_arg(v, what, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then fail("%s must be a boolean, got %s", what, type(v)) end
  return v
end

-- dim d (1-based, negative from the end) of an n-dim x, as 1..n
local function dim_arg(d, what, x, n)
  n = n or x:dim()
  d = int_arg(d, what)
  local p = d < 0 and d + n + 1 or d
  if p < 1 or p > n then
    if n == 0 then fail("%s %d: a 0-d tensor has no dims", what, d) end
    fail("%s %d out of range [%d, %d] for x of shape %s", what, d, -n, n, shape_of(x))
  end
  return p
end

-- the integers of a plain list (or of a qkv.Size), read raw, at most max;
-- a key that is not an item (nor a name of known) is an error
local function int_list(t, what, max, known)
  local n = rawlen(t)
  if n > max then fail("%s has %d items, at most %d", what, n, max) end
  local bad = qkv._checklist("", t, what, known)
  if bad then raise(bad) end
  local out = {}
  for i = 1, n do out[i] = int_arg(rawget(t, i), what .. "[" .. i .. "]") end
  return out
end

-- an integer or a list of them
local function ints_arg(v, what, max)
  if type(v) == "table" and not is_tensor(v) then return int_list(v, what, max) end
  if type(v) ~= "number" then
    fail("%s must be an integer or a list of integers, got %s", what, type(v))
  end
  return {int_arg(v, what)}
end

-- dims as a list of distinct 1..n; a 0-d x takes 1 and -1, as PyTorch
-- wraps a scalar's dims (norm's and flip's)
local function dims_arg(v, what, x)
  local ds, seen = ints_arg(v, what, 8), {}
  for i, d in ipairs(ds) do
    ds[i] = dim_arg(d, what, x, math.max(x:dim(), 1))
    if seen[ds[i]] then fail("%s names dim %d twice", what, ds[i]) end
    seen[ds[i]] = true
  end
  return ds
end

local DTYPES = {}
for _, d in ipairs{"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"} do
  DTYPES[d] = true
end
local FLOATS = {float32 = true, float64 = true, float16 = true, bfloat16 = true}

-- the dtype and device of o (a table read already), checked
local function dtype_device(o)
  if o.dtype ~= nil and (type(o.dtype) ~= "string" or not DTYPES[o.dtype]) then
    fail("unknown dtype %s (float32, float64, float16, bfloat16, int64, int32, bool)",
         type(o.dtype) == "string" and "'" .. o.dtype .. "'" or "of type " .. type(o.dtype))
  end
  if o.device ~= nil and o.device ~= "cpu" and o.device ~= "cuda" then
    fail("unknown device %s (cpu, cuda)",
         type(o.device) == "string" and "'" .. o.device .. "'" or "of type " .. type(o.device))
  end
  return o.dtype, o.device
end

-- the options {dtype =, device =} of a factory, checked; dtype and device
-- default to those given, and to those its shape held (held, from
-- shape_arg), which the options may not give again
local function factory_opts(fname, opts, dtype, device, held)
  local msg, o = qkv._checkopts(fname, opts, {"dtype", "device"})
  if msg then error(msg:sub(#fname + 3), 0) end
  local dt, dev = dtype_device(o)
  held = held or {}
  for k, v in pairs{dtype = dt, device = dev} do
    if held[k] ~= nil and v ~= nil then fail("the %s is given twice", k) end
  end
  return dt or held.dtype or dtype, dev or held.device or device
end

-- a shape: a list of sizes (or a qkv.Size), or one size.  With `keys` (a
-- factory's), the list may hold PyTorch's keywords, as the bindings'
-- shapes do: its sizes under `size` instead of as items
-- (qkv.randint(0, 5, {size = {3}})), a dtype and a device
-- (x:new_zeros{2, 3, dtype = "int64"}).  Returns the sizes and a table of
-- the dtype and device it held.
local function shape_arg(v, what, keys)
  local held, known = {}, nil
  if type(v) == "table" and not is_tensor(v) and keys then
    known = {"size", "dtype", "device"}
    local bad = qkv._checklist("", v, what, known)
    if bad then raise(bad) end
    held.dtype, held.device = dtype_device{dtype = rawget(v, "dtype"),
                                           device = rawget(v, "device")}
    local size = rawget(v, "size")
    if size ~= nil then
      if rawlen(v) > 0 then fail("the sizes are given twice, as items and as 'size'") end
      if type(size) ~= "table" or is_tensor(size) then
        fail("'size' must be a table of sizes, got %s", type(size))
      end
      v, what, known = size, "'size'", nil
    end
  end
  local s = type(v) == "table" and not is_tensor(v) and int_list(v, what, 8, known)
            or {int_arg(v, what)}
  for i, n in ipairs(s) do
    if n < 0 then fail("%s: size %d is negative (%d)", what, i, n) end
  end
  return s, held
end


---------------------------------------------------------------- other

-- x's sizes as a plain list
local function sizes(x)
  local s = {}
  for i = 1, x:dim() do s[i] = x:size(i) end
  return s
end

local function number_arg(v, what)
  if type(v) ~= "number" then fail("%s must be a number, got %s", what, type(v)) end
  return v
end

-- qkv.autograd where it is loaded, grad mode is on and one of ... is
-- tracked (a composite op then records its own rule), else nil
local function autograd_on(...)
  local A = package.loaded["qkv.autograd"]
  return A and A.enabled() and A.any(...) and A or nil
end

return {
  MAXRET = MAXRET,
  fail = fail,
  api = api,
  keywords = keywords,
  shape_of = shape_of,
  tensor_arg = tensor_arg,
  int_arg = int_arg,
  bool_arg = bool_arg,
  dim_arg = dim_arg,
  int_list = int_list,
  ints_arg = ints_arg,
  dims_arg = dims_arg,
  DTYPES = DTYPES,
  FLOATS = FLOATS,
  factory_opts = factory_opts,
  shape_arg = shape_arg,
  sizes = sizes,
  number_arg = number_arg,
  autograd_on = autograd_on,
}
