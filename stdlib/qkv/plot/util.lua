-- qkv.plot.util: what the front end and both renderers of qkv.plot share:
-- argument errors, turning tensors and tables into plain matrices, number
-- formatting, axis ticks and block averaging.

local M = {}

local qkv = package.loaded.qkv or require "qkv"

M.MAXVALUES = 1 << 24

-- Errors raised with M.fail are tagged, so that the public functions can
-- re-raise them at the caller's level (the message then points at the
-- script, not at plot/init.lua) while real bugs keep their own location.
local Fail = {__tostring = function(e) return e.msg end}

function M.fail(fmt, ...)
  error(setmetatable({msg = string.format(fmt, ...)}, Fail), 0)
end

function M.is_fail(e) return getmetatable(e) == Fail end

-- wraps a public function: its argument errors come from the caller's line
function M.api(f)
  return function(...)
    local res = table.pack(pcall(f, ...))
    if res[1] then return table.unpack(res, 2, res.n) end
    if M.is_fail(res[2]) then error(res[2].msg, 2) end
    error(res[2], 0)
  end
end

function M.is_tensor(x) return qkv.is_tensor(x) end

-- a closed tensor (local x <close>) raises on any use: say so, naming fname
local function checkopen(fname, what, x)
  if not pcall(function() return x.ndim end) then
    M.fail("%s: %s is a closed tensor", fname, what)
  end
end
M.checkopen = checkopen

-- "(2, 3, 4)"
function M.shapestr(sizes)
  local t = {}
  for i, s in ipairs(sizes) do t[i] = tostring(s) end
  return "(" .. table.concat(t, ", ") .. (#t == 1 and ",)" or ")")
end

local function tsizes(x)
  local s = {}
  for d = 1, x:dim() do s[d] = x:size(d) end
  return s
end

-- a value of a tensor or table as a number (bools count as 0/1)
local function num(v)
  if type(v) == "number" then return v + 0.0 end
  if type(v) == "boolean" then return v and 1.0 or 0.0 end
  return nil
end

-- a nested table's sizes, read down its first elements (8 levels at most)
local function tablesizes(t)
  local sizes, node = {}, t
  while type(node) == "table" and #sizes < 8 do
    sizes[#sizes + 1] = rawlen(node)
    if rawlen(node) == 0 then break end
    node = rawget(node, 1)
  end
  return sizes
end

-- what keeps t from being a rectangular table of numbers of these sizes
local function tableerror(x, sizes, d, where)
  if d > #sizes then
    if num(x) == nil then return "a table with a " .. type(x) .. " at " .. where end
    return nil
  end
  if type(x) ~= "table" then return "a table with a " .. type(x) .. " at " .. where end
  if rawlen(x) ~= sizes[d] then
    local first = where:gsub("%[%d+%]$", "[1]")
    return string.format("a ragged table (%s has %d values but %s has %d)",
      where, rawlen(x), first, sizes[d])
  end
  for i = 1, rawlen(x) do
    local e = tableerror(rawget(x, i), sizes, d + 1, where .. "[" .. i .. "]")
    if e then return e end
  end
end

-- Converts w (a tensor or nested table) to plain Lua: leading size-1 dims
-- are squeezed while there are more than `maxdim`; returns the values as
-- nested tables of numbers and the sizes. `what` names it in errors.
function M.array(fname, what, w, mindim, maxdim)
  local expect = mindim == maxdim and mindim .. "-D" or mindim .. "-D or " .. maxdim .. "-D"
  local tbl = maxdim == 1 and "a list" or "a nested table"
  if M.is_tensor(w) then
    checkopen(fname, what, w)
    while w:dim() > maxdim and w:size(1) == 1 do w = w:select(1, 1) end
    local s = tsizes(w)
    if #s < mindim or #s > maxdim then
      M.fail("%s: %s must be a %s tensor or %s, got a %d-D tensor %s",
        fname, what, expect, tbl, #s, M.shapestr(s))
    end
    for _, n in ipairs(s) do
      if n == 0 then M.fail("%s: %s %s is empty", fname, what, M.shapestr(s)) end
    end
    -- Lua tables of more values would take gigabytes: average it first
    if w:numel() > M.MAXVALUES then
      M.fail("%s: %s %s has %d values, more than the %d a plot takes", fname, what,
        M.shapestr(s), w:numel(), M.MAXVALUES)
    end
    local v = w:tolist()
    -- floats: bools count 0/1, and int64's Lua integers would wrap around
    -- in hi - lo (math.maxinteger - math.mininteger is -1)
    if w.dtype ~= "float32" and w.dtype ~= "float64" then v = M.map(v, num) end
    return v, s
  elseif type(w) == "table" then
    local s = tablesizes(w)
    while #s > maxdim and s[1] == 1 do w = rawget(w, 1); table.remove(s, 1) end
    if s[#s] == 0 then M.fail("%s: %s %s is empty", fname, what, M.shapestr(s)) end
    local err = tableerror(w, s, 1, what)
    if not err and (#s < mindim or #s > maxdim) then
      err = "a " .. #s .. "-D table " .. M.shapestr(s)
    end
    if err then
      M.fail("%s: %s must be a %s tensor or %s of numbers, got %s",
        fname, what, expect, tbl, err)
    end
    return M.map(w, num), s
  end
  M.fail("%s: %s must be a %s tensor or %s, got a %s", fname, what,
    expect, tbl, type(w))
end

-- applies f to every leaf of a nested table, returning a fresh copy
function M.map(t, f)
  if type(t) ~= "table" then return f(t) end
  local r = {}
  for i = 1, rawlen(t) do r[i] = M.map(rawget(t, i), f) end
  return r
end

-- every value of x (a tensor of any shape or a list, nested or not)
function M.flat(fname, what, x)
  local out = {}
  local function walk(t, depth)      -- raw reads: no metamethod runs
    if depth > 8 then M.fail("%s: %s nests deeper than 8 levels (or holds itself)", fname, what) end
    for i = 1, rawlen(t) do
      local v = rawget(t, i)
      if type(v) == "table" and not M.is_tensor(v) then walk(v, depth + 1)
      else
        local n = num(v)
        if n == nil then
          M.fail("%s: %s must hold numbers, got a %s", fname, what, type(v))
        end
        out[#out + 1] = n
      end
    end
  end
  if M.is_tensor(x) then
    checkopen(fname, what, x)
    -- as for a heatmap: a Lua list of more would take gigabytes
    if x:numel() > M.MAXVALUES then
      M.fail("%s: %s %s has %d values, more than the %d a plot takes", fname, what,
        M.shapestr(tsizes(x)), x:numel(), M.MAXVALUES)
    end
    if x:numel() > 0 then walk(x:reshape(x:numel()):tolist(), 1) end
  elseif type(x) == "table" then walk(x, 1)
  else
    M.fail("%s: %s must be a tensor or a list of numbers, got a %s", fname, what, type(x))
  end
  return out
end

function M.isfinite(v) return v == v and v ~= math.huge and v ~= -math.huge end

-- the finite range of coordinate k over the points of all scatter series,
-- and true; 0, 1, false when there is no finite value
function M.xyrange(series, k)
  local lo, hi = math.huge, -math.huge
  for _, e in ipairs(series) do
    for _, p in ipairs(e.points) do
      if M.isfinite(p[k]) then lo, hi = math.min(lo, p[k]), math.max(hi, p[k]) end
    end
  end
  if lo > hi then return 0, 1, false end
  return lo, hi, true
end

-- lo and hi widened by `frac` of the span, kept finite (an axis may span
-- more than the largest double, from -1e308 to 1e308)
local BIG = 1.7976931348623157e308      -- the largest double
function M.widen(lo, hi, frac)
  -- (2 * frac) first: the halves' span times 2 overflows, and inf * 0 is NaN
  local m = hi - lo < math.huge and (hi - lo) * frac or (hi / 2 - lo / 2) * (2 * frac)
  return math.max(lo - m, -BIG), math.min(hi + m, BIG)
end

-- the finite range of coordinate k over the points of all series, widened
-- by `frac` of it; 0, 1 when there is none, and one value v gives v ± 1
-- (or ± an eighth of it when 1 would not change it, as for 1e30)
function M.span(series, k, frac)
  local lo, hi, any = M.xyrange(series, k)
  if not any then return 0, 1 end
  if lo == hi then
    local d = math.max(1, math.abs(lo) / 8)
    return math.max(lo - d, -BIG), math.min(hi + d, BIG)
  end
  return M.widen(lo, hi, frac)
end

-- where v lies from lo (0) to hi (1); in halves when hi - lo overflows
-- (from -1e308 to 1e308), not always, since halves of denormals are 0
function M.frac(v, lo, hi)
  local w = hi - lo
  if w < math.huge then return (v - lo) / w end
  return (v / 2 - lo / 2) / (hi / 2 - lo / 2)
end

-- min and max of the finite values of a matrix; nil when there are none
function M.range(rows)
  local lo, hi = math.huge, -math.huge
  for _, row in ipairs(rows) do
    for _, v in ipairs(row) do
      if M.isfinite(v) then
        if v < lo then lo = v end
        if v > hi then hi = v end
      end
    end
  end
  if lo > hi then return nil end
  return lo, hi
end

-- a cell's text: the format, or nan/inf spelled out (C's %f gives -nan)
function M.cellfmt(fmt, v)
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  local s = string.format(fmt, v)
  if s:match("^%-0[.0]*$") then s = s:sub(2) end   -- no "-0.00"
  return s
end

-- nice tick values (1, 2, 2.5, 5 x 10^k apart) inside [lo, hi], about n
-- of them; the two ends alone when no step between them is a double (a
-- span of a few denormals)
function M.ticks(lo, hi, n)
  if not (M.isfinite(lo) and M.isfinite(hi)) or hi <= lo then return {lo}, 1 end
  local k = math.max(n - 1, 1)
  local raw = (hi - lo) / k
  if raw == math.huge then raw = (hi / 2 - lo / 2) / k * 2 end  -- from -1e308 to 1e308
  local p = 10 ^ math.floor(math.log(raw, 10))
  if not (p > 0 and p < math.huge) then return {lo, hi}, hi - lo end
  local step = p * 10
  for _, m in ipairs{1, 2, 2.5, 5, 10} do
    if m * p >= raw * 0.999 then step = m * p; break end
  end
  if step == math.huge then return {lo, hi}, hi - lo end
  -- the first at or above lo, less a millionth of a step (lo - eps would
  -- overflow at -1.8e308); hi + eps may be inf
  local t, eps = {}, step * 1e-6
  local v = math.ceil(lo / step - 1e-6) * step
  while v <= hi + eps and v < math.huge and #t < 50 do
    if v > -math.huge then t[#t + 1] = math.abs(v) < eps and 0 or v end
    v = v + step
  end
  return t, step
end

-- a tick label: as many decimals as the step needs, %g when extreme
function M.tickfmt(v, step)
  if not step or not (step > 0) then          -- one value: its own scale
    step = v ~= 0 and v == v and math.abs(v) or 1
  end
  if v ~= v or v == math.huge or v == -math.huge then return M.cellfmt("%g", v) end
  local a = math.max(math.abs(v), step)
  if a >= 1e5 or a < 1e-3 then
    return (string.format("%.3g", v):gsub("^%-0$", "0"))
  end
  local d = math.max(0, -math.floor(math.log(step, 10) + 1e-9))
  if step * 10 ^ d % 1 > 1e-6 then d = d + 1 end      -- 2.5 x 10^k
  return (string.format("%." .. math.min(d, 6) .. "f", v):gsub("^%-(0[.0]*)$", "%1"))
end

-- averages a matrix in blocks of fr x fc (NaNs are skipped; a block of
-- NaNs stays NaN); for pictures too large for the screen or the canvas
function M.downsample(rows, fr, fc)
  if fr == 1 and fc == 1 then return rows end
  local nr, nc, out = #rows, #rows[1], {}
  for i = 1, math.ceil(nr / fr) do
    local row = {}
    for j = 1, math.ceil(nc / fc) do
      local s, n = 0, 0
      for a = (i - 1) * fr + 1, math.min(i * fr, nr) do
        local src = rows[a]
        for b = (j - 1) * fc + 1, math.min(j * fc, nc) do
          local v = src[b]
          if v == v then s, n = s + v, n + 1 end
        end
      end
      row[j] = n > 0 and s / n or 0 / 0
    end
    out[i] = row
  end
  return out
end

-- the same for an (H, W, 3) picture
function M.downsample_rgb(px, f)
  if f == 1 then return px end
  local chans = {}
  for c = 1, 3 do
    local m = {}
    for i, row in ipairs(px) do
      m[i] = {}
      for j, p in ipairs(row) do m[i][j] = p[c] end
    end
    chans[c] = M.downsample(m, f, f)
  end
  local out = {}
  for i = 1, #chans[1] do
    out[i] = {}
    for j = 1, #chans[1][1] do
      out[i][j] = {chans[1][i][j], chans[2][i][j], chans[3][i][j]}
    end
  end
  return out
end

-- a label list option: nil, or a list of exactly n strings
function M.labels(fname, name, t, n, what)
  if t == nil then return nil end
  if type(t) ~= "table" then
    M.fail("%s: %s must be a list of strings, got a %s", fname, name, type(t))
  end
  if #t ~= n then
    M.fail("%s: %s has %d names but %s", fname, name, #t, what)
  end
  local out = {}
  for i = 1, n do out[i] = M.text(t[i]) end
  return out
end

-- any value as text that is valid UTF-8 and one line (cairo refuses less)
function M.text(v)
  local s = tostring(v):gsub("[%c]", " ")
  if utf8.len(s) then return s end
  return (s:gsub("[\128-\255]", "?"))
end

-- an optional string option
function M.optstr(fname, name, v)
  if v == nil then return nil end
  if type(v) ~= "string" and type(v) ~= "number" then
    M.fail("%s: %s must be a string, got a %s", fname, name, type(v))
  end
  return M.text(v)
end

-- an optional text option that may span lines: nil or a list of lines,
-- cut at each newline as matplotlib's titles are
function M.optlines(fname, name, v)
  if v == nil then return nil end
  M.optstr(fname, name, v)
  local lines = {}
  for l in (tostring(v) .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = M.text(l) end
  return lines
end

function M.optbool(fname, name, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then
    M.fail("%s: %s must be true or false, got %s", fname, name, tostring(v))
  end
  return v
end

-- an option that takes one of a few numbers, such as a rotation
function M.optchoice(fname, name, v, choices, default)
  if v == nil then return default end
  for _, c in ipairs(choices) do
    if v == c then return c end
  end
  local t = {}
  for i, c in ipairs(choices) do t[i] = tostring(c) end
  M.fail("%s: %s must be %s, got %s", fname, name, table.concat(t, ", ", 1, #t - 1)
    .. " or " .. t[#t], tostring(v))
end

function M.optnum(fname, name, v)
  if v == nil then return nil end
  if type(v) ~= "number" or not M.isfinite(v) then
    M.fail("%s: %s must be a finite number, got %s", fname, name, tostring(v))
  end
  return v
end

return M
