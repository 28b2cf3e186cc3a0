-- check.lua: the API fuzzer's judge of one call's outcome.
--
--   C.setup(qkv)
--   C.outcome(entry, accept, given, ok, ...) -> "ok" | "error" | "fail"
--                                    or "finding", what is wrong
--   C.internal(err, accept)          why an error is one from inside the
--                                    library, or nil (the rules' check)
-- where ok, ... is what pcall returned, accept the names the error may
-- give and given the arguments. An error must be a non-empty string naming the function (one of
-- accept, as a whole word); qkv.test's LuaUnit failures and skips are
-- "fail", by design. A success must return well-formed values: every
-- tensor (also inside returned tables) has a known dtype and device, ndim
-- 0..8, a shape of non-negative integers whose product is numel and whose
-- nonzero sizes multiply within int64, strides >= 0, prints, and (up to
-- BIG elements) its contiguous copy sums. NaN is a fine result.
--   C.op_result(entry, v)            for an op of the list (qkv._ops(),
--                                    vm/common/ops.h: qkv.add, x:add, the
--                                    + operator), what is wrong with its
--                                    result's dtype, or nil: bool for a
--                                    comparison, a float for a float op,
--                                    no bool for the others

local C = {}

local qkv, DTYPES, OPS
local FLOATS = {float32 = true, float64 = true, float16 = true, bfloat16 = true}
local BIG = 1 << 16          -- elements beyond which a result is not summed
local lu_prefixes = {}

function C.setup(q)
  qkv = q
  DTYPES = {}
  for k, v in pairs(qkv) do
    if type(k) == "string" and v == k then DTYPES[k] = true end
  end
  local ok, lu = pcall(require, "luaunit")
  if ok then lu_prefixes = {lu.FAILURE_PREFIX, lu.SKIP_PREFIX} end
  OPS = {}
  for _, op in ipairs(qkv._ops()) do
    if op.public then
      OPS["qkv." .. op.name], OPS["Tensor:" .. op.name], OPS["Tensor.__" .. op.name] = op, op, op
    end
  end
end

function C.op_result(entry, v)
  local op = OPS[entry.name]
  if not op or not qkv.is_tensor(v) then return nil end
  local ok, dt = pcall(function() return v.dtype end)
  if not ok then return nil end
  if op.result == "bool" then
    if dt ~= "bool" then return "gave " .. dt .. ": " .. op.name .. "'s row (vm/common/ops.h) gives bool" end
  elseif op.takes == "float" then
    if not FLOATS[dt] then return "gave " .. dt .. ": " .. op.name .. "'s row (vm/common/ops.h) gives a float" end
  elseif dt == "bool" then
    return "gave bool: " .. op.name .. "'s row (vm/common/ops.h) lifts bool to int64"
  end
  return nil
end

local function names(msg, accept)
  for _, n in ipairs(accept) do
    if msg:find("%f[%w_]" .. n:gsub("%p", "%%%0") .. "%f[^%w_]") then return true end
  end
  return false
end

local function is_luaunit(msg)
  for _, p in ipairs(lu_prefixes) do
    if msg:find(p, 1, true) then return true end
  end
  return false
end

-- what is wrong with error value err, or nil
function C.check_error(accept, err, luaunit)
  if type(err) ~= "string" then
    local mt = getmetatable(err)
    local text = type(mt) == "table" and mt.__tostring and " (" .. tostring(err) .. ")" or ""
    return "raised a " .. type(err) .. text .. ", not a string"
  end
  if luaunit and is_luaunit(err) then return nil, "fail" end
  if err:match("^%s*$") then return "raised an empty message" end
  if err:find("(null)", 1, true) then return "message prints a NULL: " .. err end
  if not names(err, accept) then
    return "message does not name '" .. accept[1] .. "': " .. err
  end
  return nil, "error"
end

-- what shows that error err came from inside the library rather than
-- from its checks, or nil: a position in the library's own files (not the
-- caller's line), an error of Lua's own ("attempt to index a nil value",
-- "stack overflow"), or a bad argument to an op the caller did not call
-- (none of accept)
function C.internal(err, accept)
  if type(err) ~= "string" then return nil end
  local pos = err:match("(stdlib/qkv/[%w_/]+%.lua:%d+):") or err:match("(qkv/[%w_/]+%.lua:%d+):")
  if pos then return "raised inside the library (" .. pos .. "): " .. err end
  local lua = err:match("attempt to %a+ [^\n]*") or err:match("[%w ]*stack overflow")
  if lua then return "an error of Lua's from inside the library (" .. lua .. "): " .. err end
  local op = err:match("bad argument #%d+ to '([^']*)'")
  if op and not names(op:match("([%w_]+)$") or op, accept) then
    return "an error of an op it calls ('" .. op .. "'): " .. err
  end
  return nil
end

-- what is wrong with tensor x, or nil
local function check_tensor(x)
  local ok, why = pcall(function()
    local dt, dev, nd = x.dtype, x.device, x.ndim
    if not DTYPES[dt] then return "dtype " .. tostring(dt) end
    if dev ~= "cpu" and dev ~= "cuda" then return "device " .. tostring(dev) end
    if math.type(nd) ~= "integer" or nd < 0 or nd > 8 or x:dim() ~= nd then
      return "ndim " .. tostring(nd)
    end
    local shape, st = x.shape, x:stride()
    if #shape ~= nd or #st ~= nd then return "shape/stride length vs ndim " .. nd end
    local n = 1
    for i = 1, nd do
      local s = shape[i]
      if math.type(s) ~= "integer" or s < 0 then return "size " .. tostring(s) end
      if math.type(st[i]) ~= "integer" then return "stride " .. tostring(st[i]) end
      if s == 0 then n = 0 end
    end
    for i = 1, nd do             -- sizes whose product overflows are wrong
      local s = shape[i]
      if n ~= 0 and n > math.maxinteger // s then return "numel overflows int64" end
      n = n == 0 and 0 or n * s
    end
    -- so are nonzero sizes whose product overflows (another size being 0:
    -- the strides are such products) and negative strides, which no view
    -- makes: they are strides that wrapped around
    local nz = 1
    for i = 1, nd do
      if st[i] < 0 then return "stride " .. st[i] .. " is negative" end
      local s = shape[i]
      if s > 0 then
        if nz > math.maxinteger // s then return "nonzero sizes overflow int64" end
        nz = nz * s
      end
    end
    if x:numel() ~= n then
      return ("numel %d but the shape %s gives %d"):format(x:numel(), tostring(shape), n)
    end
    local text = tostring(x)
    if type(text) ~= "string" or not text:find("^tensor%(") then
      return "prints as " .. tostring(text)
    end
    if n <= BIG then
      local s = x:contiguous():sum()
      if not qkv.is_tensor(s) or s:numel() ~= 1 then return "sum is not one value" end
    end
  end)
  if not ok then return "checking it raised: " .. tostring(why) end
  return why
end

-- what is wrong with a returned value (tensors inside tables too), or nil
local function check_value(v, depth)
  if qkv.is_tensor(v) then return check_tensor(v) end
  if type(v) == "table" and depth < 3 and getmetatable(v) ~= getmetatable(qkv) then
    local count = 0
    for k, x in next, v do
      count = count + 1
      if count > 64 then break end
      local why = check_value(x, depth + 1)
      if why then return "[" .. tostring(k) .. "] " .. why end
    end
  end
  return nil
end

-- "ok" | "error" | "fail", or "finding" and what is wrong; `given` lists
-- the arguments: one returned as it came (Identity's forward) is not judged
function C.outcome(entry, accept, given, ok, ...)
  if not ok then
    local why, kind = C.check_error(accept, (...), entry.luaunit)
    if why then return "finding", why end
    return kind
  end
  for i = 1, select("#", ...) do
    local v, passed = (select(i, ...)), false
    for _, g in pairs(given) do passed = passed or rawequal(v, g) end
    local why = not passed and check_value(v, 0)
    if why then return "finding", "result " .. i .. ": " .. why end
  end
  return "ok"
end

-- the outcome once a call's hostile arguments (tests/fuzz/hostile.lua)
-- are counted: an error holding one of the texts `allow` (raised by its
-- own proxies, or Lua's for a length they gave that is not an integer)
-- need not name the function; a success is a finding when `must` gives a
-- reason the call has to raise (a NUL in a path, a number its integer
-- target cannot hold, a list holding itself)
function C.judge(kind, why, ok, err, allow, must)
  if ok and must then return "finding", "returned, but " .. must .. " must be an error" end
  if not ok and kind == "finding" and type(err) == "string" then
    for _, a in ipairs(allow or {}) do
      if err:find(a, 1, true) then return "error" end
    end
  end
  return kind, why
end

return C
