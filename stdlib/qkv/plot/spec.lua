-- qkv.plot.spec: checks a plot's arguments and turns them into a spec, a
-- plain table that both renderers (terminal and PNG) draw from. Every
-- argument error of qkv.plot is raised here, before anything is drawn.

local util = require "qkv.plot.util"
local cmap = require "qkv.plot.cmap"

local fail, shapestr = util.fail, util.shapestr
local S = {}

-- The options each function takes. A key outside its lists is refused, as
-- matplotlib refuses an unknown keyword, so that a typo cannot pass
-- silently; a grid's panels take their kind's lists and `kind`.
local COMMON = {"title", "title_color", "xlabel", "ylabel", "ylabel_rotation"}
local MATRIX = {"cmap", "vmin", "vmax", "colorbar", "cbar_label", "xticks", "yticks"}
S.OPTIONS = {
  heatmap = {COMMON, MATRIX, {"xlabels", "ylabels", "xrotation", "annotate", "cell_labels"}},
  image = {COMMON, MATRIX},
  hist = {COMMON, {"bins", "range", "color", "alpha"}},
  scatter = {COMMON},
  line = {COMMON, {"x", "label"}},
  grid = {{"rows", "cols", "title"}},
}
-- the figure's own: where and how it is drawn, not what
S.FIGURE = {"file", "color", "width", "out"}

function S.checkkeys(fname, opts, kind, inpanel)
  local known = {inpanel and "kind" or nil}
  for _, list in ipairs(S.OPTIONS[kind]) do table.move(list, 1, #list, #known + 1, known) end
  if not inpanel then table.move(S.FIGURE, 1, #S.FIGURE, #known + 1, known) end
  -- the known options, each read once into a plain table that is drawn
  -- from: a table whose __index changes its answers is drawn as it answered
  local msg, snap = require("qkv")._checkopts(fname, opts, known)
  if msg then fail("%s", msg) end
  return snap
end

local function getmap(fname, c, default)
  local map, err = cmap.resolve(c == nil and default or c)
  if not map then fail("%s: %s", fname, err) end
  return map
end

-- vmin, vmax from opts or the data; equal ends are left to the renderers
local function limits(fname, opts, lo, hi)
  local vmin = util.optnum(fname, "vmin", opts.vmin)
  local vmax = util.optnum(fname, "vmax", opts.vmax)
  lo, hi = lo or 0, hi or 1
  vmin = vmin or (vmax and math.min(lo, vmax) or lo)
  vmax = vmax or math.max(hi, vmin)
  if vmin > vmax then
    fail("%s: vmin (%g) is greater than vmax (%g)", fname, vmin, vmax)
  end
  return vmin, vmax
end

local function annotation(fname, a, nr, nc)
  if a == nil then a = nr <= 12 and nc <= 12 end
  if a == true then return "%.2f" end
  if a == false then return nil end
  if type(a) ~= "string" or not pcall(string.format, a, 1.5)
     or not a:find("%%[-+ #0]*%d*%.?%d*[aAeEfgG]") then
    fail("%s: annotate must be true, false or a format such as '%%.3f', got %s",
      fname, tostring(a))
  end
  return a
end

local function checkcolor(fname, name, c, default)
  if c == nil and default == nil then return nil end
  local rgb = cmap.hex(c == nil and default or c)
  if not rgb then
    fail("%s: %s must be a hex colour like '#3498db', got %s", fname, name, tostring(c))
  end
  return rgb
end

local function common(fname, opts, s)
  s.title = util.optlines(fname, "title", opts.title)
  s.title_color = checkcolor(fname, "title_color", opts.title_color)
  s.xlabel = util.optstr(fname, "xlabel", opts.xlabel)
  s.ylabel = util.optstr(fname, "ylabel", opts.ylabel)
  s.ylabel_rotation = util.optchoice(fname, "ylabel_rotation", opts.ylabel_rotation,
    {90, 0}, 90)
  return s
end
S.common = common           -- for qkv.plot.line

-- what heatmap and image share: ticks and the colour bar
local function matrixopts(fname, opts, s, colorbar)
  s.xticks = util.optbool(fname, "xticks", opts.xticks, true)
  s.yticks = util.optbool(fname, "yticks", opts.yticks, true)
  s.colorbar = util.optbool(fname, "colorbar", opts.colorbar, colorbar)
  s.cbar_label = util.optstr(fname, "cbar_label", opts.cbar_label)
  return s
end

-- cell_labels: a matrix of strings the shape of w
local function celllabels(fname, t, sz)
  if t == nil then return nil end
  if type(t) ~= "table" then
    fail("%s: cell_labels must be a matrix of strings, got a %s", fname, type(t))
  end
  if #t ~= sz[1] then
    fail("%s: cell_labels has %d rows but w %s has %d", fname, #t, shapestr(sz), sz[1])
  end
  local out = {}
  for i = 1, sz[1] do
    out[i] = util.labels(fname, "cell_labels[" .. i .. "]", t[i], sz[2],
      string.format("w %s has %d columns", shapestr(sz), sz[2]))
  end
  return out
end

-- seaborn draws a colour bar beside every heatmap, in a grid too
function S.heatmap(fname, w, opts)
  local rows, sz = util.array(fname, "w", w, 2, 2)
  local nr, nc = sz[1], sz[2]
  local s = common(fname, opts, {kind = "heatmap", rows = rows, nr = nr, nc = nc})
  s.xlabels = util.labels(fname, "xlabels", opts.xlabels, nc,
    string.format("w %s has %d columns", shapestr(sz), nc))
  s.ylabels = util.labels(fname, "ylabels", opts.ylabels, nr,
    string.format("w %s has %d rows", shapestr(sz), nr))
  s.annotate = annotation(fname, opts.annotate, nr, nc)
  s.map = getmap(fname, opts.cmap, "viridis")
  s.vmin, s.vmax = limits(fname, opts, util.range(rows))
  s.xrotation = util.optchoice(fname, "xrotation", opts.xrotation, {0, 45, 90})
  s.cell_labels = celllabels(fname, opts.cell_labels, sz)
  return matrixopts(fname, opts, s, true)
end

-- rgb pictures: components clamped to [0, 1], NaN as the map's grey
local function rgbclean(px)
  for _, row in ipairs(px) do
    for _, p in ipairs(row) do
      for c = 1, 3 do
        local v = p[c]
        p[c] = v ~= v and cmap.nan[c] or v < 0 and 0 or v > 1 and 1 or v
      end
    end
  end
  return px
end

-- a grid's pictures have no colour bar unless asked, as imshow's
function S.image(fname, m, opts, ingrid)
  local v, sz = util.array(fname, "m", m, 2, 3)
  local s = matrixopts(fname, opts, common(fname, opts, {kind = "image"}), not ingrid)
  if #sz == 3 and sz[3] ~= 3 and sz[1] == 1 then   -- (1, n, m): a matrix
    v, sz = v[1], {sz[2], sz[3]}
  end
  if #sz == 3 then
    if sz[3] ~= 3 then
      fail("%s: m must be a 2-D matrix or an (H, W, 3) RGB picture, got %s",
        fname, shapestr(sz))
    end
    s.rgb, s.nr, s.nc, s.colorbar = rgbclean(v), sz[1], sz[2], false
    return s
  end
  s.rows, s.nr, s.nc = v, sz[1], sz[2]
  local lo, hi = util.range(v)
  local diverging = lo and lo < 0 and hi > 0
  s.map = getmap(fname, opts.cmap, diverging and "coolwarm" or "viridis")
  local c = opts.cmap
  if diverging and (c == nil or c == "coolwarm") and opts.vmin == nil and opts.vmax == nil then
    local a = math.max(-lo, hi)
    lo, hi = -a, a
  end
  s.vmin, s.vmax = limits(fname, opts, lo, hi)
  return s
end

local function checkbins(fname, bins)
  if bins == nil then return 30 end
  local b = math.tointeger(bins)
  if type(bins) ~= "number" or not b or b < 1 then
    fail("%s: bins must be a positive integer, got %s", fname, tostring(bins))
  end
  if b > 10000 then fail("%s: bins must be at most 10000, got %d", fname, b) end
  return b
end

local function checkrange(fname, r, xs)
  if r == nil then
    local lo, hi = math.huge, -math.huge
    for _, v in ipairs(xs) do
      if util.isfinite(v) then lo, hi = math.min(lo, v), math.max(hi, v) end
    end
    if lo > hi then return 0, 1 end
    if lo == hi then return lo - 0.5, hi + 0.5 end
    return lo, hi
  end
  if type(r) ~= "table" or type(r[1]) ~= "number" or type(r[2]) ~= "number"
     or not util.isfinite(r[1]) or not util.isfinite(r[2]) or r[1] >= r[2] then
    fail("%s: range must be {lo, hi} with finite lo < hi, got %s", fname,
      type(r) == "table" and "{" .. tostring(r[1]) .. ", " .. tostring(r[2]) .. "}"
      or tostring(r))
  end
  return r[1], r[2]
end

-- counts as numpy.histogram: bins of equal width, each [lo, hi) but the
-- last [lo, hi]; values outside the range and non-finite ones not counted
function S.hist(fname, x, opts)
  local xs = util.flat(fname, "x", x)
  local bins = checkbins(fname, opts.bins)
  local lo, hi = checkrange(fname, opts.range, xs)
  -- numpy's "Too many bins for data range": bins whose width is 0 or not
  -- finite in floating point (values near 1e308, or all one huge value)
  local w = (hi - lo) / bins
  if not (w > 0 and w < math.huge) or lo + w == lo or hi - w == hi then
    fail("%s: cannot make %d finite-sized bins in the range [%s, %s]", fname, bins,
         util.isfinite(lo) and ("%.17g"):format(lo) or tostring(lo),
         util.isfinite(hi) and ("%.17g"):format(hi) or tostring(hi))
  end
  local counts, edges = {}, {}
  for i = 1, bins do counts[i] = 0 end
  -- lo + i * w, as numpy's linspace: (hi - lo) * i overflows near ±1e308
  for i = 0, bins do edges[i + 1] = lo + i * w end
  edges[bins + 1] = hi
  for _, v in ipairs(xs) do
    if v >= lo and v <= hi then          -- false for NaN
      local i = math.floor((v - lo) / (hi - lo) * bins) + 1
      if i > bins then i = bins end
      -- the division may land one bin off near an edge: trust the edges
      if v < edges[i] then i = i - 1 elseif v >= edges[i + 1] and i < bins then i = i + 1 end
      counts[i] = counts[i] + 1
    end
  end
  local s = common(fname, opts, {kind = "hist", counts = counts, edges = edges,
    bins = bins, n = #xs})
  -- a boolean color is the terminal's colour switch, as for every plot
  local c = opts.color
  s.color = checkcolor(fname, "color", type(c) ~= "boolean" and c or nil, "#3498db")
  s.alpha = util.optnum(fname, "alpha", opts.alpha) or 1
  if s.alpha < 0 or s.alpha > 1 then
    fail("%s: alpha must be in [0, 1], got %g", fname, s.alpha)
  end
  return s
end

-- one series' points as a list of {x, y}
local function points(fname, i, p)
  local v, sz = util.array(fname, "series " .. i .. " points", p, 2, 2)
  if sz[2] ~= 2 then
    fail("%s: series %d points must be (n, 2), got %s", fname, i, shapestr(sz))
  end
  return v
end

-- a list of series, or one bare list of points / (n, 2) tensor, read raw
-- (no metamethod of the user's tables runs; a library table such as
-- qkv.nn, which refuses a name it lacks, is a table without series)
local function serieslist(fname, series)
  if util.is_tensor(series) then return {{series}} end
  local n = type(series) == "table" and rawlen(series) or 0
  if n == 0 then
    fail("%s: series must be a non-empty list of {points, label=, color=, names=}, got %s",
      fname, type(series) == "table" and "an empty table" or "a " .. type(series))
  end
  local first = rawget(series, 1)
  if type(first) == "table" and not util.is_tensor(first) and type(rawget(first, 1)) == "number" then
    return {{series}}
  end
  local list = {}
  for i = 1, n do list[i] = rawget(series, i) end
  return list
end

-- series i, {points, label=, color=, names=} (or {points = ...}), copied
-- raw; any other key is an error naming the nearest, as an option's is
local SERIES_KEYS = {"points", "label", "color", "names"}
local function series_entry(fname, i, e)
  if type(e) ~= "table" or util.is_tensor(e) then
    fail("%s: series %d must be a table {points, label=, color=, names=}, got a %s",
      fname, i, util.is_tensor(e) and "tensor" or type(e))
  end
  local t = {}
  for k, v in next, e do
    local known = k == 1
    for _, n in ipairs(SERIES_KEYS) do known = known or k == n end
    if not known then
      local near = type(k) == "string" and require("qkv")._nearest(k, SERIES_KEYS)
      fail("%s: series %d: unknown key '%s'%s (it takes {points, label=, color=, names=})", fname, i,
        tostring(k), near and " (did you mean '" .. near .. "'?)" or "")
    end
    t[k] = v
  end
  if t[1] ~= nil and t.points ~= nil then
    fail("%s: series %d gives its points twice, as its item and as points", fname, i)
  end
  return t
end

function S.scatter(fname, series, opts)
  local s = common(fname, opts, {kind = "scatter", series = {}})
  local list = serieslist(fname, series)
  for i = 1, #list do
    local e = series_entry(fname, i, list[i])
    local pts = points(fname, i, e[1] or e.points)
    local names = util.labels(fname, "series " .. i .. " names", e.names, #pts,
      string.format("it has %d points", #pts))
    s.series[i] = {points = pts, names = names,
      label = util.optstr(fname, "series " .. i .. " label", e.label),
      color = checkcolor(fname, "series " .. i .. " color", e.color,
        cmap.cycle[(i - 1) % #cmap.cycle + 1])}
  end
  return s
end

-- the line plot's checks are in qkv.plot.line, with its terminal drawing
function S.line(...) return require("qkv.plot.line").spec(...) end

-- a panel of plot.grid: {w, opts} with opts.kind choosing the function
function S.panel(i, p)
  if type(p) ~= "table" or util.is_tensor(p) then
    fail("grid: panel %d must be a table {w, opts}, got a %s", i,
      util.is_tensor(p) and "tensor" or type(p))
  end
  local opts = rawget(p, 2) or {}         -- read raw, as every user table
  if type(opts) ~= "table" then
    fail("grid: panel %d opts must be a table, got a %s", i, type(opts))
  end
  if rawget(opts, "file") ~= nil then
    fail("grid: panel %d has a file; give the file to grid", i)
  end
  local kind = rawget(opts, "kind") or "heatmap"
  if kind ~= "heatmap" and kind ~= "image" and kind ~= "hist" and kind ~= "scatter"
     and kind ~= "line" then
    fail("grid: panel %d has unknown kind '%s' (heatmap, hist, image, line, scatter)", i,
      tostring(kind))
  end
  local fname = "grid: panel " .. i .. ": " .. kind
  opts = S.checkkeys(fname, opts, kind, true)
  opts.kind = kind
  return S[kind](fname, rawget(p, 1), opts, true)
end

return S
