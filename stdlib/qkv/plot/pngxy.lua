-- qkv.plot.pngxy: the PNG panels with x/y axes, hist, scatter and line, drawn as
-- seaborn's "ticks" style: a left and a bottom spine, outward ticks, no grid.
-- Planned and drawn like the matrices of qkv.plot.png. The line plot's
-- panel is here too (the rest of it is in qkv.plot.line).

local util = require "qkv.plot.util"
local P = require "qkv.plot.png"

local PAD, FS = P.PAD, P.FS
local X = {}

local PW, PH = 480, 320        -- the plot area, in pixels

local function ticklabels(lo, hi)
  local t, step = util.ticks(lo, hi, 7)
  local labels = {}
  for i, v in ipairs(t) do labels[i] = util.tickfmt(v, step) end
  return t, labels
end

-- margins round a plot area with these ticks, axis titles and title
local function axesplan(s, ingrid, xlo, xhi, ylo, yhi, right)
  local p = {xlo = xlo, xhi = xhi, ylo = ylo, yhi = yhi, pw = PW, ph = PH}
  p.xt, p.xl = ticklabels(xlo, xhi)
  p.yt, p.yl = ticklabels(ylo, yhi)
  local yw = 0
  for _, l in ipairs(p.yl) do yw = math.max(yw, P.advance(l, FS.tick)) end
  p.yw = yw + 10
  p.x0 = math.ceil(PAD + P.ylabelroom(s) + p.yw)
  p.w = p.x0 + PW + math.max(PAD + 10, right or 0)
  p.y0 = PAD + P.titleplan(s, p, ingrid)
  p.h = p.y0 + PH + FS.tick + 12 + (s.xlabel and FS.label + 8 or 0) + PAD
  return p
end

-- data -> pixel, inside the plot area placed at (x0, y0); an axis may
-- span more than the largest double (from -1e308 to 1e308)
local function px(p, x0, x) return x0 + util.frac(x, p.xlo, p.xhi) * p.pw end
local function py(p, y0, y) return y0 + p.ph - util.frac(y, p.ylo, p.yhi) * p.ph end

local function axesdraw(cv, s, p, ox, oy)
  local x0, y0 = ox + p.x0, oy + p.y0
  P.vline(cv, x0 - 1, y0, p.ph + 1)
  P.hline(cv, x0 - 1, y0 + p.ph, p.pw + 1)
  for i, v in ipairs(p.xt) do
    local x = px(p, x0, v)
    P.vline(cv, x, y0 + p.ph, 5)
    P.text(cv, p.xl[i], x, y0 + p.ph + 8, FS.tick, 0.5, "t")
  end
  for i, v in ipairs(p.yt) do
    local y = py(p, y0, v)
    P.hline(cv, x0 - 6, y, 5)
    P.text(cv, p.yl[i], x0 - 9, y, FS.tick, 1, "c")
  end
  if s.xlabel then
    P.text(cv, s.xlabel, x0 + p.pw / 2, y0 + p.ph + FS.tick + 14, FS.label, 0.5, "t")
  end
  P.ylabel(cv, s, p, ox, y0 + p.ph / 2)
  P.title(cv, s, p, ox, oy, x0 + p.pw / 2)
  return x0, y0
end

function X.hist_plan(_, s, ingrid)
  local top = 0
  for _, c in ipairs(s.counts) do top = math.max(top, c) end
  local lo, hi = util.widen(s.edges[1], s.edges[#s.edges], 0.03)   -- the bars clear the spine
  return axesplan(s, ingrid, lo, hi, 0, math.max(top, 1) * 1.05)
end

function X.hist_draw(cv, s, p, ox, oy)
  local x0, y0 = ox + p.x0, oy + p.y0
  local bars, c = {}, s.color
  local gap = p.pw / s.bins >= 4 and 1 or 0        -- seaborn's white edges
  cv:antialias(false)
  for i, n in ipairs(s.counts) do
    local xa = math.floor(px(p, x0, s.edges[i]) + 0.5)
    local xb = math.floor(px(p, x0, s.edges[i + 1]) + 0.5)
    local yt = math.floor(py(p, y0, n) + 0.5)
    local b = {x = xa, y = yt, w = math.max(1, xb - xa - gap), h = y0 + p.ph - yt}
    if n > 0 and b.h > 0 then
      cv:rgb(c[1], c[2], c[3], s.alpha)    -- over the white, as matplotlib's alpha
      cv:rect(b.x, b.y, b.w, b.h)
      cv:fill()
    end
    bars[i] = b
  end
  cv:antialias(true)
  axesdraw(cv, s, p, ox, oy)
  return {x0 = x0, y0 = y0, pw = p.pw, ph = p.ph, bars = bars}
end

-- the plan of a panel whose series (scatter's, line's) have points
-- {x, y}: axes round their finite range and, right of the plot, room for
-- a legend of their labels
local function seriesplan(s, ingrid)
  local lw = 0
  for _, e in ipairs(s.series) do
    if e.label then lw = math.max(lw, P.advance(e.label, FS.label)) end
  end
  local xlo, xhi = util.span(s.series, 1, 0.08)
  local ylo, yhi = util.span(s.series, 2, 0.08)
  local p = axesplan(s, ingrid, xlo, xhi, ylo, yhi,
    lw > 0 and math.ceil(lw + 44 + PAD) or nil)
  p.legend = lw > 0
  return p
end

-- the legend right of the plot: key(cv, x, y, rgb) draws a series' mark
-- centred on (x, y), its label follows
local function legend(cv, s, p, x0, y0, key)
  if not p.legend then return end
  local lx, ly = x0 + p.pw + 20, y0 + 8
  for _, e in ipairs(s.series) do
    if e.label then
      key(cv, lx, ly, e.color)
      P.text(cv, e.label, lx + 12, ly, FS.label, 0, "c")
      ly = ly + FS.label + 10
    end
  end
end

function X.scatter_plan(_, s, ingrid) return seriesplan(s, ingrid) end

local function dot(cv, x, y, c)
  cv:circle(x, y, 5.5)
  cv:rgb(1, 1, 1)
  cv:fill()
  cv:circle(x, y, 4.5)
  cv:rgb(c[1], c[2], c[3])
  cv:fill()
end

-- each point's pixel, {x, y} unrounded; false where it is not finite
local function pixels(s, p, x0, y0)
  local out = {}
  for k, e in ipairs(s.series) do
    out[k] = {}
    for i, q in ipairs(e.points) do
      local ok = util.isfinite(q[1]) and util.isfinite(q[2])
      out[k][i] = ok and {px(p, x0, q[1]), py(p, y0, q[2])}
    end
  end
  return out
end

-- the layout's points: whole pixels {x=, y=}, or false
local function laid(pix)
  local out = {}
  for k, l in ipairs(pix) do
    out[k] = {}
    for i, q in ipairs(l) do out[k][i] = q and {x = math.floor(q[1]), y = math.floor(q[2])} end
  end
  return out
end

function X.scatter_draw(cv, s, p, ox, oy)
  local x0, y0 = axesdraw(cv, s, p, ox, oy)
  local pix = pixels(s, p, x0, y0)
  for k, e in ipairs(s.series) do
    for _, q in ipairs(pix[k]) do
      if q then dot(cv, q[1], q[2], e.color) end
    end
  end
  local points = laid(pix)
  -- names after every dot, so that no dot covers a name
  for k, e in ipairs(s.series) do
    for i, q in ipairs(points[k]) do
      if q and e.names then P.text(cv, e.names[i], q.x + 8, q.y - 6, FS.tick, 0, "c") end
    end
  end
  legend(cv, s, p, x0, y0, dot)
  return {x0 = x0, y0 = y0, pw = p.pw, ph = p.ph, points = points}
end

function X.line_plan(_, s, ingrid) return seriesplan(s, ingrid) end

local LW = 2             -- a line's width (matplotlib's 1.5 points at 100 dpi)

local function segment(cv, x, y, c)
  cv:rgb(c[1], c[2], c[3])
  cv:line_width(LW)
  cv:move_to(x - 8, y)
  cv:line_to(x + 8, y)
  cv:stroke()
end

-- each series a path through its finite points, in order; a point that is
-- not finite breaks it (a gap, as matplotlib's), and a finite point with
-- no finite neighbour is a dot twice the line's width across
function X.line_draw(cv, s, p, ox, oy)
  local x0, y0 = axesdraw(cv, s, p, ox, oy)
  local pix = pixels(s, p, x0, y0)
  for k, e in ipairs(s.series) do
    local l, c = pix[k], e.color
    cv:rgb(c[1], c[2], c[3])
    cv:line_width(LW)
    for i, q in ipairs(l) do
      if q and l[i - 1] then cv:line_to(q[1], q[2])
      elseif q then cv:move_to(q[1], q[2]) end
    end
    cv:stroke()
    for i, q in ipairs(l) do
      if q and not l[i - 1] and not l[i + 1] then
        cv:circle(q[1], q[2], LW)
        cv:fill()
      end
    end
  end
  legend(cv, s, p, x0, y0, segment)
  return {x0 = x0, y0 = y0, pw = p.pw, ph = p.ph, points = laid(pix)}
end

return X
