-- qkv.plot.term: draws specs (see qkv.plot.spec) as text for the terminal:
-- 24-bit colour escapes (ESC[48;2;R;G;Bm) or, without colour, plain
-- characters only. Each renderer returns a list of lines, which
-- T.render lays out (panels side by side when they fit) and joins.

local util = require "qkv.plot.util"
local cmap = require "qkv.plot.cmap"

local T = {}

local RESET = "\27[0m"
local BLACK, WHITE = "\27[38;2;0;0;0m", "\27[38;2;255;255;255m"
local SHADES = {"░", "▒", "▓", "█"}
local MAXROWS = 60         -- matrix rows drawn before averaging rows

local function bg(r, g, b)
  return string.format("\27[48;2;%d;%d;%dm", cmap.byte(r), cmap.byte(g), cmap.byte(b))
end

local function fg(r, g, b)
  return string.format("\27[38;2;%d;%d;%dm", cmap.byte(r), cmap.byte(g), cmap.byte(b))
end

-- the columns a line takes on screen (escapes take none)
local function width(s)
  s = s:gsub("\27%[[%d;]*m", "")
  return utf8.len(s) or #s
end
T.width = width

-- s (no escapes) cut to n columns, with … where it was cut
local function trunc(s, n)
  local len = utf8.len(s) or #s
  if len <= n then return s end
  if n <= 0 then return "" end
  if n == 1 then return s:sub(1, utf8.offset(s, 2) - 1) end
  return s:sub(1, utf8.offset(s, n) - 1) .. "…"
end

local function rpad(s, n) return s .. string.rep(" ", n - width(s)) end
local function lpad(s, n) return string.rep(" ", n - width(s)) .. s end

local function center(s, n)
  s = trunc(s, n)
  local l = (n - width(s)) // 2
  return string.rep(" ", l) .. s .. string.rep(" ", n - width(s) - l)
end

-- the title's lines, bold (and in its colour) in colour, centred over
-- `gw` columns after `pre` when given and every line fits
local function titled(lines, s, color, gw, pre)
  for _, t in ipairs(s.title or {}) do
    if gw and width(t) > gw then gw = nil end
  end
  for _, t in ipairs(s.title or {}) do
    local l = gw and pre .. center(t, gw) or t
    if color then
      local c = s.title_color
      l = "\27[1m" .. (c and fg(c[1], c[2], c[3]) or "") .. l .. RESET
    end
    lines[#lines + 1] = l
  end
  return lines
end

local function norm(s, v)
  if s.vmax == s.vmin then return v == v and 0.5 or v end
  return util.frac(v, s.vmin, s.vmax)
end

local function shade(t)
  if t ~= t then return "?" end
  return SHADES[math.max(1, math.min(4, math.floor(t * 4) + 1))]
end

-- names at column positions: each centred on its column (of width cw),
-- or flush right as numbers in a table are, unless it would run into the
-- previous one, which then wins
local function ruler(names, cw, trim, right)
  local line, used = {}, 0
  for j, name in ipairs(names) do
    local s = trim and trunc(name, math.max(cw - 1, 1)) or name
    local n = width(s)
    local at = right and j * cw - n or (j - 1) * cw + (cw - n) // 2
    if at < 0 then at = 0 end
    if at >= used + (used > 0 and 1 or 0) then
      line[#line + 1] = string.rep(" ", at - used) .. s
      used = at + n
    end
  end
  return table.concat(line), used
end

local function indices(n, first, step)
  local t = {}
  for i = 1, n do t[i] = tostring(first + (i - 1) * step) end
  return t
end

-- the colour bar line: vmin, a gradient, vmax, and its label
local function colorbar(s, indent, room)
  local lo, hi = util.tickfmt(s.vmin, s.vmax - s.vmin), util.tickfmt(s.vmax, s.vmax - s.vmin)
  local n = math.max(10, math.min(40, room - #lo - #hi - 2))
  local cells = {}
  for k = 1, n do
    cells[k] = bg(cmap.eval(s.map, (k - 0.5) / n)) .. " "
  end
  return string.rep(" ", indent) .. lo .. " " .. table.concat(cells) .. RESET .. " " .. hi ..
    (s.cbar_label and "  " .. s.cbar_label or "")
end

local function widest(t, w)
  for _, l in ipairs(t or {}) do w = math.max(w, width(l)) end
  return w
end

-- How a matrix fits: cell width, the values' text, averaging factors.
-- Cells widen to the longest column name or cell label (+ 1 for a gap)
-- as long as the table fits in `room`; names are cut only when it does not.
local function fitmatrix(s, room, color)
  local fmt, nr, nc = s.annotate, s.nr, s.nc
  local lw = s.xticks and widest(s.xlabels, 0) or 0
  for _, row in ipairs(s.cell_labels or {}) do lw = widest(row, lw) end
  if fmt and nr <= MAXROWS then
    local tw = 1
    for _, row in ipairs(s.rows) do
      for _, v in ipairs(row) do tw = math.max(tw, #util.cellfmt(fmt, v)) end
    end
    local cw = math.min(math.max(tw + 2, lw + 1), room // nc)
    if cw >= tw + 1 then return cw, fmt, 1, 1 end
  end
  local cw = math.min(math.max(color and 2 or 1, lw + 1), room // nc)
  local fr = math.ceil(nr / MAXROWS)
  if cw >= 1 then return cw, nil, fr, 1 end
  return 1, nil, fr, math.ceil(nc / room)
end

local function cellstr(s, v, cw, fmt, color)
  if color then
    local r, g, b = cmap.eval(s.map, norm(s, v))
    local out = bg(r, g, b)
    if not fmt then return out .. string.rep(" ", cw) end
    return out .. (cmap.dark_text(r, g, b) and BLACK or WHITE) .. center(util.cellfmt(fmt, v), cw)
  end
  if fmt then return lpad(util.cellfmt(fmt, v), cw) end
  return string.rep(shade(norm(s, v)), cw)
end

-- the line of cell labels under a row of cells, grey on each cell's colour
local function sublabels(s, i, cw, fmt, color)
  local cells = {}
  for j, l in ipairs(s.cell_labels[i]) do
    l = trunc(l, cw - 1)
    if color then
      local r, g, b = cmap.eval(s.map, norm(s, s.rows[i][j]))
      local grey = cmap.dark_text(r, g, b) and 0.35 or 0.8
      cells[j] = bg(r, g, b) .. fg(grey, grey, grey) .. center(l, cw)
    else
      cells[j] = fmt and lpad(l, cw) or center(l, cw)
    end
  end
  return table.concat(cells) .. (color and RESET or "")
end

local function every(t, f)
  local o = {}
  for i = 1, #t, f do o[#o + 1] = t[i] end
  return o
end

function T.heatmap(s, W, color)
  local ylabels = s.yticks and (s.ylabels or indices(s.nr, 1, 1)) or {}
  local lw = math.min(widest(ylabels, s.ylabel and width(s.ylabel) or 0), 16)
  local pre = lw > 0 and string.rep(" ", lw + 1) or ""
  local cw, fmt, fr, fc = fitmatrix(s, math.max(W - #pre, 10), color)
  local rows, xlabels, note = s.rows, s.xlabels or indices(s.nc, 1, 1), nil
  if fr > 1 or fc > 1 then
    rows = util.downsample(rows, fr, fc)
    note = string.format("(%d x %d averaged in blocks of %d x %d)", s.nr, s.nc, fr, fc)
    ylabels, xlabels = every(ylabels, fr), every(xlabels, fc)
  end
  local gw = #rows[1] * cw
  local lines = titled({}, s, color, gw, pre)
  if s.xlabel then lines[#lines + 1] = pre .. center(s.xlabel, gw) end
  local head = lw > 0 and rpad(trunc(s.ylabel or "", lw), lw) .. " " or ""
  if s.xticks then
    lines[#lines + 1] = head .. ruler(xlabels, cw, s.xlabels ~= nil, fmt and not color)
  elseif s.ylabel then
    lines[#lines + 1] = head
  end
  for i, row in ipairs(rows) do
    local cells = {}
    for j, v in ipairs(row) do cells[j] = cellstr(s, v, cw, fmt, color) end
    local left = lw > 0 and lpad(trunc(ylabels[i] or "", lw), lw) .. " " or ""
    lines[#lines + 1] = left .. table.concat(cells) .. (color and RESET or "")
    if s.cell_labels and not note then
      lines[#lines + 1] = pre .. sublabels(s, i, cw, fmt, color)
    end
  end
  if s.colorbar and color then
    lines[#lines + 1] = colorbar(s, #pre, math.max(gw, 24))
  elseif s.colorbar and not fmt then
    lines[#lines + 1] = pre .. table.concat(SHADES) .. "  " .. util.tickfmt(s.vmin,
      s.vmax - s.vmin) .. " .. " .. util.tickfmt(s.vmax, s.vmax - s.vmin) ..
      (s.cbar_label and "  " .. s.cbar_label or "")
  end
  if note then lines[#lines + 1] = note end
  return lines
end

-- pictures: two pixel rows a line, upper half block over the lower one
function T.image(s, W, color)
  local f = math.max(1, math.ceil(s.nc / (W - 1)), math.ceil(s.nr / (2 * MAXROWS)))
  -- each pixel as {r, g, b, t}: t is how dark a plain character shows it
  local px
  if s.rgb then
    px = util.downsample_rgb(s.rgb, f)
    for _, row in ipairs(px) do
      for _, p in ipairs(row) do p[4] = cmap.luminance(p[1], p[2], p[3]) ^ (1 / 2.2) end
    end
  else
    px = {}
    for i, row in ipairs(util.downsample(s.rows, f, f)) do
      px[i] = {}
      for j, v in ipairs(row) do
        local t = norm(s, v)
        local r, g, b = cmap.eval(s.map, t)
        px[i][j] = {r, g, b, t}
      end
    end
  end
  local lines = titled({}, s, color)
  for i = 1, #px, 2 do
    local top, bot, cells = px[i], px[i + 1], {}
    for j, p in ipairs(top) do
      if color then
        cells[j] = fg(p[1], p[2], p[3]) .. (bot and bg(bot[j][1], bot[j][2], bot[j][3])
          or "\27[49m") .. "▀"
      else
        local t = bot and (p[4] + bot[j][4]) / 2 or p[4]
        local k = t == t and math.floor(t * 5) or 0
        cells[j] = k <= 0 and " " or SHADES[math.min(k, 4)]
      end
    end
    lines[#lines + 1] = table.concat(cells) .. (color and RESET or "")
  end
  if s.xlabel or s.ylabel then
    lines[#lines + 1] = (s.ylabel and "rows: " .. s.ylabel .. "  " or "") ..
      (s.xlabel and "columns: " .. s.xlabel or "")
  end
  if s.colorbar and color and not s.rgb then
    lines[#lines + 1] = colorbar(s, 0, math.min(#px[1], W))
  end
  if f > 1 then
    lines[#lines + 1] = string.format("(%d x %d averaged in blocks of %d x %d)", s.nr,
      s.nc, f, f)
  end
  return lines
end

local EIGHTHS = {"▏", "▎", "▍", "▌", "▋", "▊", "▉"}

-- a bar of v / top of n columns, in eighths of a column
local function bar(v, top, n)
  local e = top > 0 and math.floor(v / top * n * 8 + 0.5) or 0
  local s = string.rep("█", e // 8)
  if e % 8 > 0 then s = s .. EIGHTHS[e % 8] end
  return s
end

function T.hist(s, W, color)
  local step = (s.edges[#s.edges] - s.edges[1]) / s.bins
  local labels, lw, top, cwid = {}, 0, 0, 1
  for i = 1, s.bins do
    labels[i] = "[" .. util.tickfmt(s.edges[i], step) .. ", " ..
      util.tickfmt(s.edges[i + 1], step) .. (i == s.bins and "]" or ")")
    lw = math.max(lw, #labels[i])
    top = math.max(top, s.counts[i])
    cwid = math.max(cwid, #tostring(s.counts[i]))
  end
  local n = math.max(10, W - lw - cwid - 4)
  local lines = titled({}, s, color)
  if s.xlabel or s.ylabel then
    lines[#lines + 1] = rpad(trunc(s.xlabel or "", lw), lw) .. " │ " .. (s.ylabel or "count")
  end
  local on = color and fg(s.color[1], s.color[2], s.color[3]) or ""
  for i = 1, s.bins do
    local b = bar(s.counts[i], top, n)
    lines[#lines + 1] = lpad(labels[i], lw) .. " │" .. on .. b .. (color and RESET or "") ..
      " " .. s.counts[i]
  end
  return lines
end

-- where a value lands on an axis of n cells
local function cell(v, lo, hi, n)
  if hi == lo then return (n + 1) // 2 end
  return math.floor(util.frac(v, lo, hi) * (n - 1) + 0.5) + 1
end

-- markers first, then names where they find room (never over a marker)
local function scattergrid(s, gw, gh, xlo, xhi, ylo, yhi)
  local grid = {}
  for r = 1, gh do grid[r] = {} end
  local placed = {}
  for k, e in ipairs(s.series) do
    local mark = k <= 26 and string.char(64 + k) or "*"
    for i, p in ipairs(e.points) do
      if util.isfinite(p[1]) and util.isfinite(p[2]) then
        local c, r = cell(p[1], xlo, xhi, gw), gh + 1 - cell(p[2], ylo, yhi, gh)
        grid[r][c] = {mark, k}
        if e.names then placed[#placed + 1] = {r, c, e.names[i], k} end
      end
    end
  end
  -- a name takes the cells a..a+n-1 when they and a space round it are free
  local function free(r, a, n)
    if a < 1 or a + n - 1 > gw then return false end
    for x = math.max(a - 1, 1), math.min(a + n, gw) do
      if grid[r][x] then return false end
    end
    return true
  end
  for _, p in ipairs(placed) do
    local r, c, name = p[1], p[2], p[3]
    local n = utf8.len(name) or #name
    local a = free(r, c + 2, n) and c + 2 or free(r, c - n - 1, n) and c - n - 1
    if a then
      for _, ch in utf8.codes(name) do grid[r][a] = {utf8.char(ch), p[4], true}; a = a + 1 end
    end
  end
  return grid
end

function T.scatter(s, W, color)
  local xlo, xhi = util.xyrange(s.series, 1)
  local ylo, yhi = util.xyrange(s.series, 2)
  local ys = {util.tickfmt(yhi, yhi - ylo), util.tickfmt(ylo, yhi - ylo)}
  local yw = math.max(#ys[1], #ys[2])
  local gw, gh = math.max(20, math.min(60, W - yw - 3)), 20
  local grid = scattergrid(s, gw, gh, xlo, xhi, ylo, yhi)
  local lines = titled({}, s, color)
  if s.ylabel then lines[#lines + 1] = s.ylabel end
  for r = 1, gh do
    local row = {}
    for c = 1, gw do
      local g = grid[r][c]
      if not g then row[c] = " "
      elseif color and not g[3] then
        local rgb = s.series[g[2]].color
        row[c] = fg(rgb[1], rgb[2], rgb[3]) .. "\27[1m" .. g[1] .. RESET
      else row[c] = g[1] end
    end
    local y = r == 1 and ys[1] or r == gh and ys[2] or ""
    lines[#lines + 1] = lpad(y, yw) .. " │" .. table.concat(row)
  end
  lines[#lines + 1] = string.rep(" ", yw) .. " └" .. string.rep("─", gw)
  local xl, xh = util.tickfmt(xlo, xhi - xlo), util.tickfmt(xhi, xhi - xlo)
  local mid = s.xlabel and center(s.xlabel, math.max(gw - #xl - #xh, 0)) or
    string.rep(" ", math.max(gw - #xl - #xh, 0))
  lines[#lines + 1] = string.rep(" ", yw + 2) .. xl .. mid .. xh
  for k, e in ipairs(s.series) do
    if e.label then
      local mark = k <= 26 and string.char(64 + k) or "*"
      if color then mark = fg(e.color[1], e.color[2], e.color[3]) .. "\27[1m" .. mark .. RESET end
      lines[#lines + 1] = string.rep(" ", yw + 2) .. mark .. " " .. e.label
    end
  end
  return lines
end

-- the line plot draws with qkv.plot.line, which shares these
function T.line(s, W, color) return require("qkv.plot.line").term(s, W, color) end
T.lpad, T.center, T.titled, T.fg, T.RESET = lpad, center, titled, fg, RESET

-- panels side by side, up to `cols` a row, when they fit in W
local function pack(blocks, W, cols)
  local out, row, used = {}, {}, 0
  local function flush()
    if #row == 0 then return end
    local h = 0
    for _, b in ipairs(row) do h = math.max(h, #b.lines) end
    for i = 1, h do
      local parts = {}
      for k, b in ipairs(row) do
        local l = b.lines[i] or ""
        parts[k] = k < #row and rpad(l, b.w) or l
      end
      out[#out + 1] = table.concat(parts, "   ")
    end
    out[#out + 1] = ""
    row, used = {}, 0
  end
  for _, b in ipairs(blocks) do
    local need = used + (#row > 0 and 3 or 0) + b.w
    if #row > 0 and (need > W or #row >= cols) then flush() end
    row[#row + 1] = b
    used = used + (#row > 1 and 3 or 0) + b.w
  end
  flush()
  if out[#out] == "" then out[#out] = nil end
  return out
end

-- specs -> the text, a line a row, ending with a newline
function T.render(specs, o)
  local blocks = {}
  for i, s in ipairs(specs) do
    local lines = T[s.kind](s, o.width, o.color)
    local w = 0
    for _, l in ipairs(lines) do w = math.max(w, width(l)) end
    blocks[i] = {lines = lines, w = w}
  end
  local lines = #blocks == 1 and blocks[1].lines or pack(blocks, o.width, o.cols or #blocks)
  for k, t in ipairs(o.title or {}) do
    table.insert(lines, k, o.color and "\27[1m" .. t .. RESET or t)
  end
  for i, l in ipairs(lines) do lines[i] = l:gsub(" +$", "") end
  return table.concat(lines, "\n") .. "\n"
end

return T
