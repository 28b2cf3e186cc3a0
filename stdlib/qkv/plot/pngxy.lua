-- qkv.plot.pngxy: the PNG panels with x/y axes, hist and scatter, drawn as
-- seaborn's "ticks" style: a left and a bottom spine, outward ticks, no grid.
-- Planned and drawn like the matrices of qkv.plot.png.

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

-- lo and hi widened by `frac` of the span, kept finite
local BIG = 1.7976931348623157e308      -- the largest double
local function widen(lo, hi, frac)
  local m = hi - lo < math.huge and (hi - lo) * frac or (hi / 2 - lo / 2) * 2 * frac
  return math.max(lo - m, -BIG), math.min(hi + m, BIG)
end

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
  local lo, hi = widen(s.edges[1], s.edges[#s.edges], 0.03)   -- the bars clear the spine
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

-- the finite range of coordinate k over all series, with a margin
local function span(series, k)
  local lo, hi, any = util.xyrange(series, k)
  if not any then return 0, 1 end
  -- one value: ±1, or an eighth of it when ±1 would not change it (1e30)
  if lo == hi then
    local d = math.max(1, math.abs(lo) / 8)
    return math.max(lo - d, -BIG), math.min(hi + d, BIG)
  end
  return widen(lo, hi, 0.08)
end

function X.scatter_plan(_, s, ingrid)
  local lw = 0
  for _, e in ipairs(s.series) do
    if e.label then lw = math.max(lw, P.advance(e.label, FS.label)) end
  end
  local xlo, xhi = span(s.series, 1)
  local ylo, yhi = span(s.series, 2)
  local p = axesplan(s, ingrid, xlo, xhi, ylo, yhi,
    lw > 0 and math.ceil(lw + 44 + PAD) or nil)
  p.legend = lw > 0
  return p
end

local function dot(cv, x, y, c)
  cv:circle(x, y, 5.5)
  cv:rgb(1, 1, 1)
  cv:fill()
  cv:circle(x, y, 4.5)
  cv:rgb(c[1], c[2], c[3])
  cv:fill()
end

function X.scatter_draw(cv, s, p, ox, oy)
  local x0, y0 = axesdraw(cv, s, p, ox, oy)
  local points = {}
  for k, e in ipairs(s.series) do
    points[k] = {}
    for i, q in ipairs(e.points) do
      if util.isfinite(q[1]) and util.isfinite(q[2]) then
        local x, y = px(p, x0, q[1]), py(p, y0, q[2])
        dot(cv, x, y, e.color)
        points[k][i] = {x = math.floor(x), y = math.floor(y)}
      else
        points[k][i] = false
      end
    end
  end
  -- names after every dot, so that no dot covers a name
  for k, e in ipairs(s.series) do
    for i, q in ipairs(points[k]) do
      if q and e.names then P.text(cv, e.names[i], q.x + 8, q.y - 6, FS.tick, 0, "c") end
    end
  end
  if p.legend then
    local lx, ly = x0 + p.pw + 20, y0 + 8
    for _, e in ipairs(s.series) do
      if e.label then
        dot(cv, lx, ly, e.color)
        P.text(cv, e.label, lx + 12, ly, FS.label, 0, "c")
        ly = ly + FS.label + 10
      end
    end
  end
  return {x0 = x0, y0 = y0, pw = p.pw, ph = p.ph, points = points}
end

return X
