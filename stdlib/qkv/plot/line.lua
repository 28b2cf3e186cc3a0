-- qkv.plot.line: the line plot (plot.line, and grid panels of kind
-- "line"): its arguments checked into a spec, as qkv.plot.spec does for
-- the other figures, and its terminal drawing, on a canvas of braille
-- dots (2 x 4 a character). Its PNG panel is qkv.plot.pngxy's line_plan
-- and line_draw, on the axes and legend that scatter has.
--
-- A spec: {kind = "line", series = {{points = {{x, y}, ...}, label =,
-- color = rgb}, ...}} and the titles of qkv.plot.spec's common().

local util = require "qkv.plot.util"
local cmap = require "qkv.plot.cmap"
local spec = require "qkv.plot.spec"
local term = require "qkv.plot.term"

local fail = util.fail
local L = {}

---------------------------------------------------------------- arguments

-- whether v, the first element of ys (or of x), makes it a list of series:
-- a table or a tensor of 1 or more dims is a series; a number, or a 0-D
-- tensor such as a loss kept as a tensor, is a value
local function nested(v)
  if not util.is_tensor(v) then return type(v) == "table" end
  local ok, d = pcall(function() return v:dim() end)
  return not ok or d > 0
end

-- one series' values: a 1-D tensor (leading size-1 dims dropped) or a
-- list of numbers, where a 0-D tensor (a loss) counts as its number
local function values(fname, what, v)
  if type(v) == "table" and not util.is_tensor(v) then
    local t = {}
    for i = 1, rawlen(v) do
      local e = rawget(v, i)
      if util.is_tensor(e) then
        local where = what .. "[" .. i .. "]"
        util.checkopen(fname, where, e)
        if e:dim() ~= 0 then
          fail("%s: %s must be a number or a 0-D tensor, got a %d-D tensor %s", fname,
            where, e:dim(), util.shapestr(e.shape))
        end
        e = e:item()
      end
      t[i] = e
    end
    v = t
  end
  return (util.array(fname, what, v, 1, 1))
end

-- ys: one series (a 1-D tensor, a list of numbers) or a list of them;
-- the values of each, and whether there was a list
local function serieslist(fname, ys)
  if type(ys) == "table" and not util.is_tensor(ys) and nested(rawget(ys, 1)) then
    local out = {}
    for i = 1, rawlen(ys) do out[i] = values(fname, "series " .. i, rawget(ys, i)) end
    return out, true
  end
  local ok, v = pcall(values, fname, "ys", ys)
  if ok then return {v}, false end
  if util.is_fail(v) and v.msg:find(": ys must be a 1-D tensor or a list, got a ", 1, true) and
     v.msg:find("D tensor", 1, true) then
    fail("%s; several series are a list of 1-D ones, {ys[1], ys[2], ...}", v.msg)
  end
  error(v, 0)
end

-- x: nil (1, 2, ..., n: qkv counts from 1), one list for every series,
-- or, with a list of series, a list of lists, one a series
local function xlists(fname, x, ys, many)
  local out = {}
  if x == nil then
    for k, y in ipairs(ys) do
      out[k] = {}
      for i = 1, #y do out[k][i] = i + 0.0 end
    end
    return out
  end
  local each = many and type(x) == "table" and not util.is_tensor(x) and nested(rawget(x, 1))
  if each and rawlen(x) ~= #ys then
    fail("%s: x has %d lists but there are %d series", fname, rawlen(x), #ys)
  end
  local shared = not each and values(fname, "x", x)
  for k, y in ipairs(ys) do
    local xname = each and "x[" .. k .. "]" or "x"
    out[k] = shared or values(fname, xname, rawget(x, k))
    if #out[k] ~= #y then
      fail("%s: %s has %d values but %s has %d", fname, xname, #out[k],
        many and "series " .. k or "ys", #y)
    end
  end
  return out
end

-- label: a name for one series, or a list of them, one a series
local function labels(fname, label, n)
  if label == nil then return {} end
  if type(label) == "table" then
    return util.labels(fname, "label", label, n,
      n == 1 and "there is 1 series" or ("there are %d series"):format(n))
  end
  if n > 1 then
    fail("%s: label must be a list of %d names, one a series, got a %s", fname, n, type(label))
  end
  return {util.optstr(fname, "label", label)}
end

function L.spec(fname, ys, opts)
  local s = spec.common(fname, opts, {kind = "line", series = {}})
  local lists, many = serieslist(fname, ys)
  local xs = xlists(fname, opts.x, lists, many)
  local names = labels(fname, opts.label, #lists)
  for k, y in ipairs(lists) do
    local pts = {}
    for i, v in ipairs(y) do pts[i] = {xs[k][i], v} end
    s.series[k] = {points = pts, label = names[k],
      color = cmap.hex(cmap.cycle[(k - 1) % #cmap.cycle + 1])}
  end
  return s
end

---------------------------------------------------------------- terminal

local GH = 12                -- the plot's rows: 48 dots high
-- the bit of the dot in row r (1..4 from the top), column c (1, 2) of a
-- braille character, U+2800 + the bits
local BITS = {{0x01, 0x08}, {0x02, 0x10}, {0x04, 0x20}, {0x40, 0x80}}

-- the dots between two (Bresenham's), both ends included
local function segment(set, x0, y0, x1, y1)
  local dx, dy = math.abs(x1 - x0), -math.abs(y1 - y0)
  local sx, sy = x0 < x1 and 1 or -1, y0 < y1 and 1 or -1
  local err = dx + dy
  while true do
    set(x0, y0)
    if x0 == x1 and y0 == y1 then return end
    local e2 = 2 * err
    if e2 >= dy then err, x0 = err + dy, x0 + sx end
    if e2 <= dx then err, y0 = err + dx, y0 + sy end
  end
end

-- where a value lands on the canvas of gw x GH characters: its dot's
-- column from the left and row from the top, both from 0
local function mapping(gw, xlo, xhi, ylo, yhi)
  local DW, DH = 2 * gw, 4 * GH
  return function(x) return math.floor(util.frac(x, xlo, xhi) * (DW - 1) + 0.5) end,
    function(y) return DH - 1 - math.floor(util.frac(y, ylo, yhi) * (DH - 1) + 0.5) end
end

-- the canvas: cells[r][c] = {bits, k}, k the series that drew there last
local function canvas(s, col, row)
  local cells = {}
  for r = 1, GH do cells[r] = {} end
  for k, e in ipairs(s.series) do
    local function set(x, y)
      local line, c = cells[y // 4 + 1], x // 2 + 1
      local cell = line[c] or {0}
      cell[1], cell[2] = cell[1] | BITS[y % 4 + 1][x % 2 + 1], k
      line[c] = cell
    end
    local px, py
    for _, p in ipairs(e.points) do
      if util.isfinite(p[1]) and util.isfinite(p[2]) then
        local x, y = col(p[1]), row(p[2])
        if px then segment(set, px, py, x, y) else set(x, y) end
        px, py = x, y
      else
        px = nil                      -- a gap
      end
    end
  end
  return cells
end

-- series k's mark: braille in its colour, or without colour a letter
-- (A, B, ... as scatter's) when there are several to tell apart
local function letter(k) return k <= 26 and string.char(64 + k) or "*" end

local function cellstr(s, c, color)
  if not c then return " " end
  if color then
    local rgb = s.series[c[2]].color
    return term.fg(rgb[1], rgb[2], rgb[3]) .. utf8.char(0x2800 + c[1]) .. term.RESET
  end
  return #s.series > 1 and letter(c[2]) or utf8.char(0x2800 + c[1])
end

-- the x axis's tick labels, each centred under its column unless it would
-- run into the one before; none past the plot's right end
local function xticklabels(ticks, step, col, left, gw)
  local parts, used = {}, 0
  for _, v in ipairs(ticks) do
    local t = util.tickfmt(v, step)
    local a = left + col(v) // 2 - (#t - 1) // 2
    a = math.max(0, math.min(a, left + gw - #t))
    if a >= used + (used > 0 and 1 or 0) then
      parts[#parts + 1] = string.rep(" ", a - used) .. t
      used = a + #t
    end
  end
  return table.concat(parts)
end

function L.term(s, W, color)
  local xlo, xhi = util.span(s.series, 1, 0)
  local ylo, yhi = util.span(s.series, 2, 0)
  local yt, ystep = util.ticks(ylo, yhi, 5)
  local yl, yw = {}, 1
  for i, v in ipairs(yt) do
    yl[i] = util.tickfmt(v, ystep)
    yw = math.max(yw, #yl[i])
  end
  local gw = math.max(20, math.min(W - yw - 2, 60))
  local col, row = mapping(gw, xlo, xhi, ylo, yhi)
  local cells = canvas(s, col, row)
  local at = {}                        -- row -> its tick label, the first to land there
  for i, v in ipairs(yt) do
    local r = row(v) // 4 + 1
    at[r] = at[r] or yl[i]
  end
  local pre = string.rep(" ", yw + 2)
  local lines = term.titled({}, s, color, gw, pre)
  if s.ylabel then lines[#lines + 1] = s.ylabel end
  for r = 1, GH do
    local out = {}
    for c = 1, gw do out[c] = cellstr(s, cells[r][c], color) end
    lines[#lines + 1] = term.lpad(at[r] or "", yw) .. (at[r] and " ┤" or " │") ..
      table.concat(out)
  end
  local xt, xstep = util.ticks(xlo, xhi, math.max(3, gw // 8))
  local axis = {}
  for c = 1, gw do axis[c] = "─" end
  for _, v in ipairs(xt) do axis[col(v) // 2 + 1] = "┬" end
  lines[#lines + 1] = string.rep(" ", yw + 1) .. "└" .. table.concat(axis)
  lines[#lines + 1] = xticklabels(xt, xstep, col, yw + 2, gw)
  if s.xlabel then lines[#lines + 1] = pre .. term.center(s.xlabel, gw) end
  for k, e in ipairs(s.series) do
    if e.label then
      local mark = (not color and #s.series > 1) and letter(k) or "──"
      if color then mark = term.fg(e.color[1], e.color[2], e.color[3]) .. mark .. term.RESET end
      lines[#lines + 1] = pre .. mark .. " " .. e.label
    end
  end
  return lines
end

return L
