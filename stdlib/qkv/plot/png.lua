-- qkv.plot.png: draws specs (see qkv.plot.spec) into PNG files with the
-- qkv.cairo canvas, in the manner of seaborn: no frame round a heatmap, tick
-- labels in dark grey, a colour bar on the right. Every panel is planned
-- first (sizes measured with a scratch canvas), then drawn at its place, so
-- that a grid can size its cells before it draws anything. This file does
-- the figure, text and matrices (heatmap, image); qkv.plot.pngxy does the
-- panels with x/y axes (hist, scatter).

local cairo = require "qkv.cairo"
local util = require "qkv.plot.util"
local cmap = require "qkv.plot.cmap"

local P = {}

P.PAD = 12
P.FS = {tick = 11, label = 12, title = 14, annot = 12}
P.INK = {0.15, 0.15, 0.15}
local PAD, FS = P.PAD, P.FS
local SIN45 = math.sqrt(0.5)
-- the lines of a title are 1.3 times its size apart
local function lead(size) return math.ceil(size * 1.3) end

local function clamp(v, lo, hi) return v < lo and lo or v > hi and hi or v end
local MAXSIDE = 4096          -- heatmap cells a side; plot.image averages

local meter
-- text extents at a size: width, height, x_bearing, y_bearing, x_advance
function P.extents(s, size, bold)
  meter = meter or cairo.new(1, 1)
  meter:font(size, bold)
  return meter:text_extents(s)
end

function P.advance(s, size, bold)
  local _, _, _, _, adv = P.extents(s, size, bold)
  return adv
end

-- Draws s with its anchor at (x, y): ha is the anchor's fraction of the
-- advance (0 left, 0.5 centre, 1 right); va "c" puts the middle of a
-- capital on y, "t" its top, "b" the baseline. o: bold, rot (radians),
-- rgb. Vertical placement comes from the font size, not the string, so
-- that labels with and without descenders line up.
function P.text(cv, s, x, y, size, ha, va, o)
  o = o or {}
  cv:font(size, o.bold)
  local _, _, _, _, adv = cv:text_extents(s)
  local dy = va == "t" and size * 0.73 or va == "b" and 0 or size * 0.365
  local c = o.rgb or P.INK
  cv:save()
  cv:translate(x, y)
  if o.rot then cv:rotate(o.rot) end
  cv:rgb(c[1], c[2], c[3])
  cv:move_to(-adv * ha, dy)
  cv:show_text(s)
  cv:restore()
end

-- a 1-pixel tick mark or axis line, crisp because it is pixel-aligned
function P.hline(cv, x, y, w)
  cv:rgb(P.INK[1], P.INK[2], P.INK[3])
  cv:rect(math.floor(x), math.floor(y), math.max(1, math.floor(w + 0.5)), 1)
  cv:fill()
end

function P.vline(cv, x, y, h)
  cv:rgb(P.INK[1], P.INK[2], P.INK[3])
  cv:rect(math.floor(x), math.floor(y), 1, math.max(1, math.floor(h + 0.5)))
  cv:fill()
end

-- s cut at spaces into lines at most `room` pixels wide (a longer word
-- keeps a line of its own)
function P.wrap(s, size, bold, room)
  if P.advance(s, size, bold) <= room then return {s} end
  local lines, cur = {}, nil
  for word in s:gmatch("%S+") do
    local try = cur and cur .. " " .. word or word
    if cur and P.advance(try, size, bold) > room then
      lines[#lines + 1], cur = cur, word
    else
      cur = try
    end
  end
  lines[#lines + 1] = cur or ""
  return lines
end

-- Plans a panel's title once p.w is known: its lines are wrapped to the
-- panel in a grid, where a wide title would push its neighbours away;
-- alone, the panel widens to the title instead. Returns the height of
-- the band above the plot.
function P.titleplan(s, p, ingrid)
  if not s.title then return 0 end
  p.tlines = {}
  for _, l in ipairs(s.title) do
    for _, w in ipairs(ingrid and P.wrap(l, FS.title, true, p.w - 2 * PAD) or {l}) do
      p.tlines[#p.tlines + 1] = w
      p.w = math.max(p.w, math.ceil(P.advance(w, FS.title, true) + 2 * PAD))
    end
  end
  return (#p.tlines - 1) * lead(FS.title) + FS.title + 12
end

-- a panel's title lines, centred on cx but kept inside the panel
function P.title(cv, s, p, ox, oy, cx)
  for k, l in ipairs(p.tlines or {}) do
    local w = P.advance(l, FS.title, true)
    local x = clamp(cx, ox + PAD + w / 2, ox + p.w - PAD - w / 2)
    P.text(cv, l, x, oy + PAD + FS.title * 0.5 + (k - 1) * lead(FS.title), FS.title, 0.5, "c",
      {bold = true, rgb = s.title_color})
  end
end

-- the room an axis title takes left of the tick labels: upright (90, the
-- default) or level (0, for row names as in a grid of rows)
function P.ylabelroom(s)
  if not s.ylabel then return 0 end
  if s.ylabel_rotation == 0 then return math.ceil(P.advance(s.ylabel, FS.label)) + 10 end
  return FS.label + 8
end

-- the axis title, level ones ending 10 pixels left of the tick labels
-- (at x0 - p.yw) so that the names of a grid's rows line up
function P.ylabel(cv, s, p, ox, cy)
  if not s.ylabel then return end
  if s.ylabel_rotation == 0 then
    P.text(cv, s.ylabel, ox + p.x0 - p.yw - 10, cy, FS.label, 1, "c")
  else
    P.text(cv, s.ylabel, ox + PAD + FS.label * 0.5, cy, FS.label, 0.5, "c",
      {rot = -math.pi / 2})
  end
end

local function norm(s, v)
  if s.vmax == s.vmin then return v == v and 0.5 or v end
  return util.frac(v, s.vmin, s.vmax)
end

-- a matrix's colours as the RGB bytes canvas:image takes
local function matrixbytes(s, rows)
  local out = {}
  for i, row in ipairs(rows) do
    local line = {}
    for j, v in ipairs(row) do
      local r, g, b = cmap.eval(s.map, norm(s, v))
      line[j] = string.char(cmap.byte(r), cmap.byte(g), cmap.byte(b))
    end
    out[i] = table.concat(line)
  end
  return table.concat(out)
end

local function rgbbytes(px)
  local out = {}
  for i, row in ipairs(px) do
    local line = {}
    for j, p in ipairs(row) do
      line[j] = string.char(cmap.byte(p[1]), cmap.byte(p[2]), cmap.byte(p[3]))
    end
    out[i] = table.concat(line)
  end
  return table.concat(out)
end

-- which of n ticks, `cell` pixels apart, get a label `need` pixels wide:
-- every one, or every 2nd, 5th, 10th, ...; index labels at multiples
local function tickset(n, cell, need, named)
  local k, step, p = math.max(1, math.ceil(need / cell)), 1, 1
  while step < k do
    for _, m in ipairs{2, 5, 10} do
      step = m * p
      if step >= k then break end
    end
    p = p * 10
  end
  local shown = {}
  if step == 1 then
    for j = 1, n do shown[j] = j end
  elseif named then                  -- the first name, then every step-th
    for j = 1, n, step do shown[#shown + 1] = j end
  else                               -- 1 when there is room, then multiples
    if step - 1 >= k then shown[1] = 1 end
    for j = step, n, step do shown[#shown + 1] = j end
  end
  return shown
end

local function names(labels, n, f)
  if labels then return labels end
  local t = {}
  for j = 1, n do t[j] = tostring((j - 1) * f + 1) end
  return t
end

-- the colour bar's labelled values: 3 to 5 nice ones inside [vmin, vmax]
local function cbticks(s)
  if s.vmax == s.vmin then return {s.vmin}, 1 end
  local t, step = util.ticks(s.vmin, s.vmax, 5)
  if #t < 3 then t, step = util.ticks(s.vmin, s.vmax, 4) end
  if #t < 2 then t, step = {s.vmin, s.vmax}, s.vmax - s.vmin end
  return t, step
end

-- cell size and what is drawn at what size, for heatmap and image
local function matrixcells(fname, s, p)
  if s.kind == "heatmap" then
    if s.nr > MAXSIDE or s.nc > MAXSIDE then
      util.fail("%s: w (%d, %d) is too large for a PNG heatmap (at most %d a side); "
        .. "plot.image averages it", fname, s.nr, s.nc, MAXSIDE)
    end
    local c = clamp(math.floor(math.min(560 / s.nc, 440 / s.nr)), 1, 72)
    if s.annotate then      -- asked-for values get cells they can be read in
      local wmax = 0
      for _, row in ipairs(s.rows) do
        for _, v in ipairs(row) do wmax = math.max(wmax, #util.cellfmt(s.annotate, v)) end
      end
      local need = math.ceil(math.max(P.advance(string.rep("0", wmax), 9) + 6, 22))
      if need * math.max(s.nr, s.nc) <= MAXSIDE then c = math.max(c, need) end
    end
    p.rows, p.cw, p.ch, p.f = s.rows, c, c, 1
    return
  end
  p.f = math.ceil(math.max(s.nr, s.nc) / 1024)   -- a picture, not a poster
  if s.rgb then
    p.rgb = util.downsample_rgb(s.rgb, p.f)
    p.nr, p.nc = #p.rgb, #p.rgb[1]
    local c = clamp(math.floor(math.min(512 / p.nc, 512 / p.nr)), 1, 32)
    p.cw, p.ch = c, c
  else
    p.rows = util.downsample(s.rows, p.f, p.f)
    p.nr, p.nc = #p.rows, #p.rows[1]
    p.cw = clamp(math.floor(600 / p.nc), 1, 32)
    p.ch = clamp(math.floor(400 / p.nr), 1, 32)
  end
end

-- the annotations' font size: at most FS.annot, fitting the widest value
local function annotsize(s, p)
  if s.kind ~= "heatmap" or not s.annotate then return nil end
  local wmax, size = 0, math.min(FS.annot, p.ch * 0.42)
  p.texts = {}
  for i, row in ipairs(s.rows) do
    p.texts[i] = {}
    for j, v in ipairs(row) do
      local t = util.cellfmt(s.annotate, v)
      p.texts[i][j] = t
      wmax = math.max(wmax, #t)
    end
  end
  local w = P.advance(string.rep("0", wmax), size)
  if w > p.cw - 6 then size = size * (p.cw - 6) / w end
  return size >= 6 and size or nil
end

-- the cell labels' font size: small, below the value, fitting the widest
local function subsize(s, p)
  if not s.cell_labels then return nil end
  local size, w = math.min(FS.annot * 0.65, p.ch * 0.18), 0
  for _, row in ipairs(s.cell_labels) do
    for _, t in ipairs(row) do w = math.max(w, P.advance(t, size)) end
  end
  if w > p.cw - 6 then size = size * (p.cw - 6) / w end
  return size >= 5 and size or nil
end

-- the x tick labels: which are shown, their angle, and the height they
-- take below the cells; `hang` is how far left of the cells they reach
local function xtickplan(s, p)
  if not s.xticks then p.xshow, p.xrot = {}, 0; return 4, 0 end
  local xw = 0
  for _, n in ipairs(p.xnames) do xw = math.max(xw, P.advance(n, FS.tick)) end
  p.xrot = s.xrotation or (s.xlabels ~= nil and xw > p.cw - 4) and 45 or 0
  p.xshow = tickset(p.nc, p.cw, p.xrot ~= 0 and FS.tick * 1.8 or xw + 8, s.xlabels ~= nil)
  local xh, hang = FS.tick + 8, 0
  for _, j in ipairs(p.xrot ~= 0 and p.xshow or {}) do
    local a = P.advance(p.xnames[j], FS.tick)
    if p.xrot == 90 then
      xh = math.max(xh, a + 14)
    else
      xh = math.max(xh, a * SIN45 + FS.tick + 8)
      hang = math.max(hang, a * SIN45 + FS.tick * 0.5 - (j - 0.5) * p.cw)
    end
  end
  return xh, hang
end

function P.matrix_plan(fname, s, ingrid)
  local p = {nr = s.nr, nc = s.nc}
  matrixcells(fname, s, p)
  p.annot = annotsize(s, p)
  p.sub = subsize(s, p)
  p.xnames, p.ynames = names(s.xlabels, p.nc, p.f), names(s.ylabels, p.nr, p.f)
  local xh, hang = xtickplan(s, p)
  p.yshow = s.yticks and tickset(p.nr, p.ch, FS.tick + 3, s.ylabels ~= nil) or {}
  p.yw = s.yticks and 8 or 4
  for _, i in ipairs(p.yshow) do p.yw = math.max(p.yw, P.advance(p.ynames[i], FS.tick) + 8) end
  p.x0 = math.ceil(math.max(PAD + P.ylabelroom(s) + p.yw, PAD + hang))
  p.xh = xh
  local gw, gh = p.nc * p.cw, p.nr * p.ch
  local right = PAD
  if s.colorbar then
    p.cbt, p.cbstep = cbticks(s)
    p.cbw = 0
    for _, v in ipairs(p.cbt) do
      p.cbw = math.max(p.cbw, P.advance(util.tickfmt(v, p.cbstep), FS.tick))
    end
    right = 16 + 16 + 7 + p.cbw + PAD + (s.cbar_label and FS.label + 8 or 0)
  end
  p.w = math.ceil(p.x0 + gw + right)
  p.y0 = PAD + P.titleplan(s, p, ingrid)
  p.h = math.ceil(p.y0 + gh + xh + (s.xlabel and FS.label + 8 or 0) + PAD)
  return p
end

local function colorbar(cv, s, p, x, y, h)
  local n = math.max(1, math.floor(h))
  local col = {}
  for k = 1, n do
    local r, g, b = cmap.eval(s.map, 1 - (k - 0.5) / n)
    col[k] = string.char(cmap.byte(r), cmap.byte(g), cmap.byte(b))
  end
  cv:image(x, y, 1, n, 16, 1, table.concat(col))
  for _, v in ipairs(p.cbt) do
    local ty = y + n * (1 - norm(s, v))
    ty = clamp(ty, y, y + n - 1)
    P.hline(cv, x + 16, ty, 4)
    P.text(cv, util.tickfmt(v, p.cbstep), x + 23, ty, FS.tick, 0, "c")
  end
  if s.cbar_label then      -- upright, beside the tick labels, as matplotlib's
    P.text(cv, s.cbar_label, x + 23 + p.cbw + 8 + FS.label * 0.5, y + n / 2, FS.label,
      0.5, "c", {rot = -math.pi / 2})
  end
end

-- the values on the cells, black or white for contrast with each cell,
-- and the cell labels below them in a grey that reads on it too
local function annotate(cv, s, p, x0, y0)
  for i = 1, p.nr do
    for j = 1, p.nc do
      local r, g, b = cmap.eval(s.map, norm(s, s.rows[i][j]))
      local dark = cmap.dark_text(r, g, b)
      local x, y = x0 + (j - 0.5) * p.cw, y0 + (i - 0.5) * p.ch
      if p.annot then
        P.text(cv, p.texts[i][j], x, y, p.annot, 0.5, "c", {rgb = dark and {0, 0, 0} or {1, 1, 1}})
      end
      if p.sub then
        P.text(cv, s.cell_labels[i][j], x, y + 0.35 * p.ch, p.sub, 0.5, "c",
          {rgb = dark and {0.35, 0.35, 0.35} or {0.8, 0.8, 0.8}})
      end
    end
  end
end

local function xticklabels(cv, p, x0, y)
  for _, j in ipairs(p.xshow) do
    local x = x0 + (j - 0.5) * p.cw
    if p.xnames[j] ~= "" then P.vline(cv, x, y, 3) end
    if p.xrot == 45 then
      P.text(cv, p.xnames[j], x + 2, y + 9, FS.tick, 1, "c", {rot = -math.pi / 4})
    elseif p.xrot == 90 then    -- read upwards, ending at the tick
      P.text(cv, p.xnames[j], x, y + 6, FS.tick, 1, "c", {rot = -math.pi / 2})
    else
      P.text(cv, p.xnames[j], x, y + 6, FS.tick, 0.5, "t")
    end
  end
end

local function matrixlabels(cv, s, p, ox, x0, y0)
  local gw, gh = p.nc * p.cw, p.nr * p.ch
  xticklabels(cv, p, x0, y0 + gh)
  for _, i in ipairs(p.yshow) do
    local y = y0 + (i - 0.5) * p.ch
    if p.ynames[i] ~= "" then P.hline(cv, x0 - 3, y, 3) end
    P.text(cv, p.ynames[i], x0 - 6, y, FS.tick, 1, "c")
  end
  if s.xlabel then
    P.text(cv, s.xlabel, x0 + gw / 2, y0 + gh + p.xh, FS.label, 0.5, "t")
  end
  P.ylabel(cv, s, p, ox, y0 + gh / 2)
end

function P.matrix_draw(cv, s, p, ox, oy)
  local x0, y0 = ox + p.x0, oy + p.y0
  local bytes = p.rgb and rgbbytes(p.rgb) or matrixbytes(s, p.rows)
  cv:image(x0, y0, p.nc, p.nr, p.cw, p.ch, bytes)
  if p.annot or p.sub then annotate(cv, s, p, x0, y0) end
  matrixlabels(cv, s, p, ox, x0, y0)
  if s.colorbar then colorbar(cv, s, p, x0 + p.nc * p.cw + 16, y0, p.nr * p.ch) end
  P.title(cv, s, p, ox, oy, x0 + p.nc * p.cw / 2)
  return {x0 = x0, y0 = y0, cw = p.cw, ch = p.ch, rows = p.nr, cols = p.nc}
end

local function kind(s)
  if s.kind == "heatmap" or s.kind == "image" then return P.matrix_plan, P.matrix_draw end
  local xy = require "qkv.plot.pngxy"
  return xy[s.kind .. "_plan"], xy[s.kind .. "_draw"]
end

-- where each panel goes: one alone, or a grid whose columns are as wide
-- as their widest panel and rows as tall as their tallest. The plots of a
-- row start at one height and those of a column at one x, however many
-- lines their titles take and however wide their tick labels are.
local function arrange(fname, specs, o)
  local plans = {}
  for i, s in ipairs(specs) do
    local plan = kind(s)
    plans[i] = plan(fname, s, o.grid)
  end
  if not o.grid then return plans, plans[1].w, plans[1].h end
  local cols = o.cols or #specs
  local rows = o.rows or math.ceil(#specs / cols)
  local cw, rh, top, left = {}, {}, {}, {}
  for c = 1, cols do cw[c], left[c] = 0, 0 end
  for r = 1, rows do rh[r], top[r] = 0, 0 end
  for i, p in ipairs(plans) do
    local r, c = (i - 1) // cols + 1, (i - 1) % cols + 1
    top[r], left[c] = math.max(top[r], p.y0), math.max(left[c], p.x0)
  end
  for i, p in ipairs(plans) do
    local r, c = (i - 1) // cols + 1, (i - 1) % cols + 1
    p.drop, p.shift = top[r] - p.y0, left[c] - p.x0
    cw[c], rh[r] = math.max(cw[c], p.w + p.shift), math.max(rh[r], p.h + p.drop)
  end
  local xs, ys = {0}, {o.title and PAD + (#o.title - 1) * lead(FS.title + 2) + FS.title + 8 or 0}
  for c = 1, cols do xs[c + 1] = xs[c] + cw[c] end
  for r = 1, rows do ys[r + 1] = ys[r] + rh[r] end
  for i, p in ipairs(plans) do
    local r, c = (i - 1) // cols + 1, (i - 1) % cols + 1
    p.ox, p.oy = xs[c] + p.shift, ys[r] + p.drop
  end
  local w = xs[cols + 1]
  for _, l in ipairs(o.title or {}) do
    w = math.max(w, math.ceil(P.advance(l, FS.title + 2, true) + 2 * PAD))
  end
  return plans, w, ys[rows + 1]
end

-- draws the specs into o.file; the layout of the one panel, or of the grid
function P.figure(fname, specs, o)
  local plans, w, h = arrange(fname, specs, o)
  local ok, cv = pcall(cairo.new, w, h)
  if not ok then util.fail("%s: %s", fname, tostring(cv)) end
  local layouts = {}
  for i, s in ipairs(specs) do
    local _, draw = kind(s)
    layouts[i] = draw(cv, s, plans[i], plans[i].ox or 0, plans[i].oy or 0)
  end
  for k, l in ipairs(o.grid and o.title or {}) do
    P.text(cv, l, w / 2, PAD + (FS.title + 2) * 0.5 + (k - 1) * lead(FS.title + 2),
      FS.title + 2, 0.5, "c", {bold = true})
  end
  local wrote, err = pcall(cv.write_png, cv, o.file)
  cv:close()
  if not wrote then util.fail("%s: %s", fname, tostring(err)) end
  local layout = o.grid and {panels = layouts} or layouts[1]
  layout.file, layout.width, layout.height = o.file, w, h
  return layout
end

return P
