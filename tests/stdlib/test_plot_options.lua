-- test_plot_options.lua: qkv.plot's finer options (multi-line titles,
-- colour-bar labels, ticks, rotation, title colours, cell labels, seaborn's
-- annotation colour rule, terminal widths, grids, unknown options, alpha),
-- checked in read-back PNG pixels and in terminal text.
local lu = require "luaunit"
local H = dofile("tests/helpers/plot_helpers.lua")
local plot, cairo, EXE, nan, TMP = H.plot, H.cairo, H.EXE, H.nan, H.TMP
local tmp, quote, fails, to255, hex = H.tmp, H.quote, H.fails, H.to255, H.hex
local assertPixel, count, centre, lines = H.assertPixel, H.count, H.centre, H.lines

local RAMP = {{0, 0.25, 0.5}, {0.75, 1, 0.5}}
local W3 = {{0.1, 0.5, 0.4}, {0.3, 0.3, 0.4}, {0.9, 0.05, 0.05}}
local TOKS = {"the", "cat", "sat"}
TestOptions = {}

local WHITE = "\27[38;2;255;255;255m"
local function dark(r, g, b) return r + g + b < 300 end

-- the box that the dark pixels of the region take: width, height
local function inkbox(img, x0, y0, x1, y1)
  local a, b, c, d = math.huge, -1, math.huge, -1
  for y = math.max(0, y0), math.min(img.height - 1, y1) do
    for x = math.max(0, x0), math.min(img.width - 1, x1) do
      if dark(img.pixel(x, y)) then
        a, b, c, d = math.min(a, x), math.max(b, x), math.min(c, y), math.max(d, y)
      end
    end
  end
  return b - a + 1, d - c + 1
end

function TestOptions:testTitleLinesPng()
  local one = plot.heatmap(RAMP, {title = "Top row", annotate = false, file = tmp("t1.png")})
  local two = plot.heatmap(RAMP, {title = "Top row\nNext row", annotate = false,
    file = tmp("t2.png")})
  lu.assertTrue(two.y0 >= one.y0 + 14, "room for the second line")
  -- two bands of ink above the cells, not one (no letter with a dot)
  local img, bands, inked = plot.read_png(two.file), 0, false
  for y = 0, two.y0 - 1 do
    local ink = count(img, 0, y, two.x0 + 3 * two.cw, y, dark) > 0   -- not the bar's 1.00
    if ink and not inked then bands = bands + 1 end
    inked = ink
  end
  lu.assertEquals(bands, 2)
  local g1 = plot.grid({{RAMP}}, {title = "Top", file = tmp("gt1.png")})
  local g2 = plot.grid({{RAMP}}, {title = "Top\nBelow", file = tmp("gt2.png")})
  lu.assertTrue(g2.panels[1].y0 >= g1.panels[1].y0 + 16)
end

function TestOptions:testTitleLinesTerminal()
  local l = lines(plot.heatmap(W3, {title = "Figure A\nVariance ≈ 434.7", color = false,
    out = false}))
  lu.assertStrMatches(l[1], "%s*Figure A")
  lu.assertStrMatches(l[2], "%s*Variance ≈ 434%.7")
  l = lines(plot.grid({{W3, {title = "a\nb"}}}, {title = "Top\nBelow", color = false,
    out = false, width = 100}))
  lu.assertEquals({l[1], l[2]}, {"Top", "Below"})
  lu.assertStrMatches(l[3], "%s*a")
  lu.assertStrMatches(l[4], "%s*b")
end

function TestOptions:testGridWrapsTitlesAndAlignsPlots()
  local long = "A title far longer than the small panel it sits on, which used to widen it"
  local bare = plot.grid({{RAMP}, {RAMP}}, {file = tmp("w0.png")})
  local L = plot.grid({{RAMP, {title = long}}, {RAMP, {title = "short"}}}, {file = tmp("w1.png")})
  lu.assertEquals(L.width, bare.width)
  lu.assertTrue(L.panels[1].y0 - bare.panels[1].y0 >= 44, "two lines or more")
  lu.assertEquals(L.panels[1].y0, L.panels[2].y0)      -- a row's plots start level
  local C = plot.grid({{RAMP, {ylabel = "a", ylabel_rotation = 0}},
    {RAMP, {ylabel = "a much longer name", ylabel_rotation = 0}}}, {cols = 1, file = tmp("w2.png")})
  lu.assertEquals(C.panels[1].x0, C.panels[2].x0)      -- and a column's at one x
end

function TestOptions:testColorbarLabel()
  local a = plot.heatmap(RAMP, {annotate = false, file = tmp("cb0.png")})
  local b = plot.heatmap(RAMP, {annotate = false, cbar_label = "Attention Weight",
    file = tmp("cb1.png")})
  lu.assertTrue(b.width > a.width)
  local w, h = inkbox(plot.read_png(b.file), a.width - 6, 0, b.width - 1, b.height - 1)
  lu.assertTrue(h > 60 and w < 16, "upright text beside the bar")
  local l = lines(plot.heatmap(W3, {cbar_label = "Attention Weight", color = true, out = false}))
  lu.assertStrContains(l[#l], "48;2;")
  lu.assertStrMatches(l[#l], ".*  Attention Weight")
  l = lines(plot.heatmap(W3, {cbar_label = "Weight", annotate = false, color = false, out = false}))
  lu.assertStrMatches(l[#l], ".*░▒▓█.*  Weight")
end

function TestOptions:testNoTicks()
  local f = tmp("noticks.png")
  local L = plot.heatmap(W3, {xlabels = TOKS, ylabels = TOKS, xticks = false, yticks = false,
    colorbar = false, file = f})
  local img = plot.read_png(f)
  lu.assertEquals(count(img, 0, 0, L.x0 - 1, img.height - 1, dark), 0, "nothing at the left")
  lu.assertEquals(count(img, 0, L.y0 + 3 * L.ch, img.width - 1, img.height - 1, dark), 0,
    "nothing below")
  local with = plot.heatmap(W3, {xlabels = TOKS, ylabels = TOKS, colorbar = false,
    file = tmp("ticks.png")})
  lu.assertTrue(with.x0 > L.x0 and with.height > L.height)
  local text = plot.heatmap(W3, {xlabels = TOKS, ylabels = {"one", "two", "six"},
    xticks = false, yticks = false, color = false, out = false})
  for _, s in ipairs{"the", "cat", "sat", "one", "two", "six"} do
    lu.assertNotStrContains(text, s)
  end
  lu.assertStrContains(text, "0.90")
end

function TestOptions:testXRotation()
  local function height(names, r)
    return plot.heatmap(W3, {xlabels = names, xrotation = r, colorbar = false,
      file = tmp("rot.png")}).height
  end
  local long = {"the first token", "the second token", "the third token"}
  local h0, h45, h90 = height(long, 0), height(long, 45), height(long, 90)
  lu.assertTrue(h0 < h45 and h45 < h90)
  lu.assertEquals(height(long), h45)                 -- long names turn by themselves
  lu.assertTrue(height(TOKS, 45) > height(TOKS))     -- short ones only when asked
  fails({"heatmap: xrotation must be 0, 45 or 90, got 30"}, plot.heatmap, W3, {xrotation = 30})
end

function TestOptions:testTitleColor()
  local f = tmp("tc.png")
  local L = plot.heatmap(RAMP, {title = "Red title", title_color = "#e74c3c", annotate = false,
    file = f})
  local red = count(plot.read_png(f), 0, 0, L.width - 1, L.y0 - 4,
    function(r, g, b) return r > 180 and g < 120 and b < 110 end)
  lu.assertTrue(red > 20)
  local text = plot.heatmap(W3, {title = "T", title_color = "#e74c3c", color = true, out = false})
  lu.assertStrContains(text, "\27[1m\27[38;2;231;76;60m")
  fails({"heatmap: title_color must be a hex colour"}, plot.heatmap, W3, {title_color = "red"})
end

function TestOptions:testCellLabels()
  local m, names = {{0.1, 0.9}, {0.5, 0.3}}, {{"sky-L", "sky-R"}, {"gnd-L", "gnd-R"}}
  local A = plot.heatmap(m, {cmap = {"#e6e6e6", "#3498db"}, file = tmp("cl0.png")})
  local B = plot.heatmap(m, {cmap = {"#e6e6e6", "#3498db"}, cell_labels = names,
    file = tmp("cl1.png")})
  -- ink unlike the cell's colour in the lower part of each cell, below the value
  local function under(L, i, j)
    local img, x, y = plot.read_png(L.file), centre(L, i, j)
    local r0, g0, b0 = img.pixel(math.floor(x - L.cw * 0.45), math.floor(y))
    return count(img, x - L.cw * 0.4, y + L.ch * 0.22, x + L.cw * 0.4, y + L.ch * 0.48,
      function(r, g, b) return math.abs(r - r0) + math.abs(g - g0) + math.abs(b - b0) > 60 end)
  end
  for i = 1, 2 do
    for j = 1, 2 do
      lu.assertEquals(under(A, i, j), 0)
      lu.assertTrue(under(B, i, j) > 5, "a label in cell " .. i .. "," .. j)
    end
  end
  local l = lines(plot.heatmap(m, {cell_labels = names, color = false, out = false}))
  for k, line in ipairs(l) do
    if line:find("0.10", 1, true) then lu.assertStrMatches(l[k + 1], "%s*sky%-L%s+sky%-R") end
  end
  fails({"heatmap: cell_labels has 1 rows but w (2, 2) has 2"}, plot.heatmap, m,
    {cell_labels = {{"a", "b"}}})
  fails({"heatmap: cell_labels[2] has 1 names but w (2, 2) has 2 columns"}, plot.heatmap, m,
    {cell_labels = {{"a", "b"}, {"c"}}})
end

-- seaborn's rule, relative luminance > 0.408: black text; 0.179 (equal
-- contrast ratios) put black on viridis's middle and YlOrRd's reds
function TestOptions:testAnnotationTextBySeabornsRule()
  local text = plot.heatmap({{0, 0.5, 1}}, {cmap = "viridis", color = true, out = false})
  lu.assertStrContains(text, WHITE .. " 0.50")
  text = plot.heatmap({{0, 0.6, 1}}, {cmap = "ylorrd", color = true, out = false})
  lu.assertStrContains(text, "\27[38;2;0;0;0m 0.00")
  lu.assertStrContains(text, WHITE .. " 0.60")
  lu.assertStrContains(text, WHITE .. " 1.00")
  local L = plot.heatmap({{0, 0.6, 1}}, {cmap = "ylorrd", file = tmp("contrast.png")})
  local img, x, y = plot.read_png(L.file), centre(L, 1, 2)
  local box = function(pred) return count(img, x - L.cw / 3, y - L.ch / 4, x + L.cw / 3,
    y + L.ch / 4, pred) end
  lu.assertTrue(box(function(r, g, b) return r > 240 and g > 240 and b > 240 end) > 5)
  lu.assertEquals(box(function(r, g, b) return r < 60 and g < 60 and b < 60 end), 0)
end

function TestOptions:testTerminalCellsFitTheNames()
  local names = {"catches", "frisbee", "Token 12345"}
  for _, a in ipairs{false, true} do
    local text = plot.heatmap(W3, {xlabels = names, annotate = a, color = false, out = false,
      width = 80})
    for _, n in ipairs(names) do lu.assertStrContains(text, n) end
    lu.assertNotStrContains(text, "…")
  end
  local many = {}
  for j = 1, 9 do many[j] = "a long name " .. j end
  local text = plot.heatmap(qkv.ones(2, 9), {xlabels = many, color = false, out = false,
    width = 60})
  lu.assertStrContains(text, "…")                    -- cut only when they do not fit
  for _, l in ipairs(lines(text)) do lu.assertTrue(utf8.len(l) <= 60, l) end
end

function TestOptions:testLevelYLabel()
  local function box(rot)
    local L = plot.heatmap(RAMP, {ylabel = "a row name", ylabel_rotation = rot, yticks = false,
      annotate = false, colorbar = false, file = tmp("yl.png")})
    return inkbox(plot.read_png(L.file), 0, 0, L.x0 - 1, L.height - 1)
  end
  local w, h = box(nil)
  lu.assertTrue(h > 2 * w, "upright by default")
  w, h = box(0)
  lu.assertTrue(w > 3 * h, "level")
  fails({"heatmap: ylabel_rotation must be 90 or 0, got 45"}, plot.heatmap, W3,
    {ylabel_rotation = 45})
end

function TestOptions:testGridHeatmapsHaveColourBars()
  local L = plot.grid({{RAMP, {vmin = 0, vmax = 1}}, {RAMP, {colorbar = false}},
    {RAMP, {kind = "image"}}}, {cols = 1, file = tmp("gcb.png")})
  local img = plot.read_png(L.file)
  local function bar(p) return p.x0 + p.cols * p.cw + 24, p.y0 + p.rows * p.ch / 2 end
  local x, y = bar(L.panels[1])
  local r, g, b = to255(plot.colormap("viridis", 0.5))
  assertPixel(img, x, y, r, g, b, 3, "a colour bar by default")
  x, y = bar(L.panels[2])
  assertPixel(img, x, y, 255, 255, 255, 0, "none when asked")
  x, y = bar(L.panels[3])
  assertPixel(img, x, y, 255, 255, 255, 0, "none for a picture, as imshow's")
end

function TestOptions:testUnknownOptionsAreRefused()
  fails({"heatmap: unknown option 'anotate'"}, plot.heatmap, W3, {anotate = true})
  fails({"image: unknown option 'annotate'"}, plot.image, W3, {annotate = true})
  fails({"hist: unknown option 'bin'"}, plot.hist, {1, 2}, {bin = 3})
  fails({"scatter: unknown option 'names'"}, plot.scatter, {{0, 0}}, {names = {"a"}})
  fails({"grid: unknown option 'row'"}, plot.grid, {{W3}}, {row = 1})
  fails({"grid: panel 2: hist: unknown option 'annotate'"}, plot.grid,
    {{W3}, {{1, 2}, {kind = "hist", annotate = true}}})
  fails({"grid: panel 1: heatmap: unknown option 'width'"}, plot.grid, {{W3, {width = 80}}})
  fails({"heatmap: unknown option 'anotate' (did you mean 'annotate'?)"}, plot.heatmap, W3, {anotate = true})
  fails({"hist: unknown option 'bns' (did you mean 'bins'?)"}, plot.hist, {1, 2}, {bns = 3})
  -- a scatter series takes {points, label=, color=, names=}: another key
  -- was ignored (a legend without its label)
  fails({"scatter: series 1: unknown key 'lable' (did you mean 'label'?)"}, plot.scatter,
    {{{{0, 0}, {1, 1}}, lable = "a"}})
  fails({"scatter: series 2: unknown key 'colour'"}, plot.scatter,
    {{{{0, 0}}}, {points = {{1, 1}}, colour = "#ff0000"}})
  fails({"scatter: series 1 gives its points twice"}, plot.scatter, {{{{0, 0}}, points = {{1, 1}}}})
  -- seed 11 call 379234 (issue 46's runs): a table of the library, which
  -- refuses a name it lacks, as a series or a panel's options raised
  -- "qkv.nn has no class or function 'points'", naming neither scatter nor
  -- grid; user tables are read raw
  fails({"scatter: series 1: unknown key '"}, plot.scatter, {qkv.nn})
  fails({"grid: panel 1: heatmap: unknown option '"}, plot.grid, {{W3, qkv.nn}})
  -- a path with a NUL byte would write the part before it
  fails({"heatmap: file", "has a NUL byte"}, plot.heatmap, W3, {file = tmp("a\0b.png")})
  lu.assertNil(io.open(tmp("a"), "r"))
  -- every option of the header comment is known
  local common = {title = "t\nu", title_color = "#123456", xlabel = "x", ylabel = "y",
    ylabel_rotation = 0}
  local function with(t)
    local o = {}
    for k, v in pairs(common) do o[k] = v end
    for k, v in pairs(t) do o[k] = v end
    return o
  end
  local matrix = {cmap = "blues", vmin = 0, vmax = 1, colorbar = true, cbar_label = "c",
    xticks = true, yticks = true}
  local hm = with(matrix)
  hm.xlabels, hm.ylabels, hm.xrotation, hm.annotate = TOKS, TOKS, 90, "%.1f"
  hm.cell_labels = {TOKS, TOKS, TOKS}
  local panels = {{W3, hm}, {W3, with(matrix)}, {{1, 2}, with{bins = 2, range = {0, 3},
    color = "#3498db", alpha = 0.5}}, {{{0, 0}}, with{}}}
  panels[2][2].kind, panels[3][2].kind, panels[4][2].kind = "image", "hist", "scatter"
  for _, o in ipairs{{file = tmp("all.png")}, {color = false, width = 100, out = false}} do
    plot.grid(panels, {rows = 2, cols = 2, title = "all", file = o.file, color = o.color,
      width = o.width, out = o.out})
    plot.heatmap(W3, with{file = o.file, color = o.color, width = o.width, out = o.out})
  end
end

function TestOptions:testHistAlpha()
  local f = tmp("alpha.png")
  local _, _, L = plot.hist({1, 1, 2}, {bins = 2, color = "#e74c3c", alpha = 0.7, file = f})
  local b = L.bars[1]
  local function mix(c) return math.floor(c * 0.7 + 255 * 0.3 + 0.5) end
  assertPixel(plot.read_png(f), b.x + b.w / 2, b.y + b.h / 2, mix(0xe7), mix(0x4c), mix(0x3c),
    2, "a bar at alpha 0.7, over the white")
  fails({"hist: alpha must be in [0, 1], got 1.5"}, plot.hist, {1}, {alpha = 1.5})
end

---------------------------------------------------------------- the C module

H.finish(lu.LuaUnit.run())
