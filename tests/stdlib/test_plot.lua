-- test_plot.lua: qkv.plot. PNGs are read back with plot.read_png and their
-- pixels checked against plot.colormap; terminal output is searched for
-- the escapes, labels and values it must hold; every argument error names
-- the function and the argument. PNGs go to a temporary folder, removed
-- at the end.
local lu = require "luaunit"
local H = dofile("tests/helpers/plot_helpers.lua")
local plot, cairo, EXE, nan, TMP = H.plot, H.cairo, H.EXE, H.nan, H.TMP
local tmp, quote, fails, to255, hex = H.tmp, H.quote, H.fails, H.to255, H.hex
local assertPixel, count, centre, lines = H.assertPixel, H.count, H.centre, H.lines
TestColormap = {}

function TestColormap:testEndpointsAreMatplotlibs()
  local ends = {
    viridis = {"#440154", "#fde725"}, coolwarm = {"#3b4cc0", "#b40426"},
    blues = {"#f7fbff", "#08306b"}, greys = {"#ffffff", "#000000"},
    ylorrd = {"#ffffcc", "#800026"}, ylgnbu = {"#ffffd9", "#081d58"},
    mako = {"#0b0405", "#def5e5"},
  }
  for name, e in pairs(ends) do
    for k, t in ipairs{0, 1} do
      local r, g, b = to255(plot.colormap(name, t))
      local er, eg, eb = hex(e[k])
      lu.assertEquals({r, g, b}, {er, eg, eb}, name .. " at " .. t)
    end
  end
  local r, g, b = to255(plot.colormap("viridis", 0.5))
  lu.assertEquals({r, g, b}, {hex("#21918c")})
end

function TestColormap:testSequentialMapsAreMonotone()
  local function lum(name, t)
    local r, g, b = plot.colormap(name, t)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
  end
  local rising = {viridis = true, mako = true}
  for _, name in ipairs{"viridis", "mako", "blues", "greys", "ylorrd", "ylgnbu"} do
    for k = 1, 64 do
      local a, b = lum(name, (k - 1) / 64), lum(name, k / 64)
      if rising[name] then lu.assertTrue(b > a, name .. " at " .. k)
      else lu.assertTrue(b < a, name .. " at " .. k) end
    end
  end
end

function TestColormap:testClampNanAndCustom()
  lu.assertEquals({plot.colormap("viridis", -3)}, {plot.colormap("viridis", 0)})
  lu.assertEquals({plot.colormap("viridis", 7)}, {plot.colormap("viridis", 1)})
  local r, g, b = plot.colormap("viridis", nan)
  lu.assertTrue(r == g and g == b, "NaN is a grey")
  r, g, b = to255(plot.colormap({"#000000", "#ff8000"}, 0.5))
  lu.assertEquals({r, g, b}, {128, 64, 0})
  r, g, b = to255(plot.colormap("coolwarm", 0.5))
  lu.assertTrue(math.abs(r - 221) <= 2 and math.abs(g - 221) <= 3 and math.abs(b - 221) <= 3)
end

---------------------------------------------------------------- PNG heatmaps

TestHeatmapPNG = {}

local RAMP = {{0, 0.25, 0.5}, {0.75, 1, 0.5}}

function TestHeatmapPNG:checkCells(cm, name)
  local f = tmp(name)
  local L = plot.heatmap(qkv.tensor(RAMP), {cmap = cm, vmin = 0, vmax = 1,
    annotate = false, title = "ramp", file = f})
  local img = plot.read_png(f)
  lu.assertEquals(L.file, f)
  lu.assertEquals({img.width, img.height}, {L.width, L.height})
  for i, row in ipairs(RAMP) do
    for j, v in ipairs(row) do
      local x, y = centre(L, i, j)
      local r, g, b = to255(plot.colormap(cm, v))
      assertPixel(img, x, y, r, g, b, 2, name .. " cell " .. i .. "," .. j)
    end
  end
  return L, img
end

function TestHeatmapPNG:testViridisCells()
  self:checkCells("viridis", "viridis.png")
end

function TestHeatmapPNG:testCustomTwoColourCells()
  self:checkCells({"#e6e6e6", "#3498db"}, "custom.png")
end

function TestHeatmapPNG:testTitleBandHasInk()
  local L, img = self:checkCells("blues", "title.png")
  local ink = count(img, 0, 0, img.width - 1, L.y0 - 4,
    function(r, g, b) return r + g + b < 300 end)
  lu.assertTrue(ink > 20, "the title band holds text")
  local f = tmp("notitle.png")
  local L2 = plot.heatmap(RAMP, {annotate = false, file = f})
  local img2 = plot.read_png(f)
  lu.assertEquals(count(img2, 0, 0, img2.width - 1, L2.y0 - 6,
    function(r, g, b) return r + g + b < 300 end), 0)
end

function TestHeatmapPNG:testAnnotationsContrast()
  local f = tmp("annot.png")
  local L = plot.heatmap({{0, 1}, {1, 0}}, {file = f, cmap = "viridis"})
  local img = plot.read_png(f)
  local function box(i, j, pred)
    local x, y = centre(L, i, j)
    return count(img, x - L.cw / 3, y - L.ch / 4, x + L.cw / 3, y + L.ch / 4, pred)
  end
  local white = function(r, g, b) return r > 200 and g > 200 and b > 200 end
  local black = function(r, g, b) return r < 60 and g < 60 and b < 60 end
  lu.assertTrue(box(1, 1, white) > 5, "white text on dark purple")
  lu.assertEquals(box(1, 1, black), 0)
  lu.assertTrue(box(1, 2, black) > 5, "black text on yellow")
  lu.assertEquals(box(1, 2, white), 0)
end

function TestHeatmapPNG:testSqueezesAndLabels()
  local f = tmp("labels.png")
  local w = qkv.softmax(qkv.randn(1, 5, 5), -1)
  local toks = {"a", "long token", "c", "d", "e"}
  local L = plot.heatmap(w, {file = f, xlabels = toks, ylabels = toks, xlabel = "keys",
    ylabel = "queries", title = "t"})
  lu.assertEquals({L.rows, L.cols}, {5, 5})
  local img = plot.read_png(f)
  -- the rotated labels and the axis title sit below the grid
  local below = count(img, L.x0, L.y0 + 5 * L.ch + 4, L.x0 + 5 * L.cw, img.height - 1,
    function(r, g, b) return r + g + b < 300 end)
  lu.assertTrue(below > 50)
end

function TestHeatmapPNG:testNanCellIsGrey()
  local f = tmp("nan.png")
  local L = plot.heatmap({{0, nan}, {1, 0.5}}, {file = f, annotate = false})
  local img = plot.read_png(f)
  local x, y = centre(L, 1, 2)
  local r, g, b = to255(plot.colormap("viridis", nan))
  assertPixel(img, x, y, r, g, b, 2, "NaN cell")
end

---------------------------------------------------------------- grid

TestGrid = {}

function TestGrid:testSizeGrowsWithColsAndRows()
  local a, b = qkv.tensor{{0, 1}, {1, 0}}, qkv.tensor{{0.2, 0.4}, {0.6, 0.8}}
  local panels = {{a, {title = "a"}}, {b, {title = "b", cmap = "blues", vmin = 0, vmax = 1}}}
  local one = plot.grid({panels[1]}, {file = tmp("g1.png")})
  local wide = plot.grid(panels, {cols = 2, title = "two", file = tmp("g2.png")})
  local tall = plot.grid(panels, {rows = 2, file = tmp("g3.png")})
  lu.assertTrue(wide.width > one.width)
  lu.assertTrue(tall.height > one.height)
  lu.assertEquals(#wide.panels, 2)
  local img = plot.read_png(wide.file)
  lu.assertEquals({img.width, img.height}, {wide.width, wide.height})
  for p, m in ipairs{{{0, 1}, {1, 0}}, {{0.2, 0.4}, {0.6, 0.8}}} do
    local L = wide.panels[p]
    for i = 1, 2 do
      for j = 1, 2 do
        local x, y = centre(L, i, j)
        local cm = p == 1 and "viridis" or "blues"
        local r, g, b = to255(plot.colormap(cm, m[i][j]))
        -- the value sits at the centre: look at a corner of the cell
        assertPixel(img, x - L.cw * 0.4, y - L.ch * 0.4, r, g, b, 2, "panel " .. p)
      end
    end
  end
end

function TestGrid:testMixedKindsAndTerminal()
  local panels = {{{{1, 2}, {3, 4}}, {title = "heat"}},
    {{1, 2, 2, 3, 3, 3}, {kind = "hist", bins = 3, title = "hist"}},
    {{{0, 0.5}, {0.5, 1}}, {kind = "image", title = "img"}},
    {{{{{0, 0}, {1, 1}}, label = "s"}}, {kind = "scatter", title = "sc"}}}
  local L = plot.grid(panels, {cols = 2, file = tmp("mixed.png")})
  lu.assertEquals(#L.panels, 4)
  lu.assertEquals(#L.panels[2].bars, 3)
  local text = plot.grid(panels, {title = "overall", color = false, out = false, width = 200})
  lu.assertStrContains(text, "overall")
  for _, t in ipairs{"heat", "hist", "img", "sc"} do lu.assertStrContains(text, t) end
  lu.assertEquals(lines(text)[1], "overall")
end

---------------------------------------------------------------- hist

TestHist = {}

local DATA = {0.1, 0.2, 0.2, 0.5, 0.9, 1.0, 1.5, 2.0, -1.0, 3.25, nan, math.huge}

function TestHist:testCountsAgainstALoop()
  local counts, edges = plot.hist(DATA, {bins = 5, out = false})
  lu.assertEquals(#counts, 5)
  lu.assertEquals(#edges, 6)
  lu.assertEquals(edges[1], -1.0)
  lu.assertEquals(edges[6], 3.25)
  local want = {0, 0, 0, 0, 0}
  for _, v in ipairs(DATA) do
    if v == v and v ~= math.huge then
      for i = 1, 5 do
        if v >= edges[i] and (v < edges[i + 1] or (i == 5 and v == edges[6])) then
          want[i] = want[i] + 1
        end
      end
    end
  end
  lu.assertEquals(counts, want)
  local sum = 0
  for _, c in ipairs(counts) do sum = sum + c end
  lu.assertEquals(sum, 10)                  -- the finite values
end

function TestHist:testTensorRangeAndDefaults()
  qkv.seed(3)
  local x = qkv.randn(4, 250)
  local counts, edges = plot.hist(x, {out = false})
  lu.assertEquals(#counts, 30)
  local sum = 0
  for _, c in ipairs(counts) do sum = sum + c end
  lu.assertEquals(sum, 1000)
  counts, edges = plot.hist(x, {range = {0, 1}, bins = 4, out = false})
  lu.assertEquals(edges, {0, 0.25, 0.5, 0.75, 1})
  local inside = x:ge(0):to("int64"):mul(x:le(1):to("int64")):sum():item()
  sum = 0
  for _, c in ipairs(counts) do sum = sum + c end
  lu.assertEquals(sum, inside)
end

function TestHist:testPngAndTerminal()
  local f = tmp("hist.png")
  local _, _, L = plot.hist(DATA, {bins = 7, title = "h", xlabel = "v", file = f,
    color = "#e74c3c"})
  local img = plot.read_png(f)
  lu.assertEquals({img.width, img.height}, {L.width, L.height})
  local b = L.bars[1]                       -- the first bin holds -1.0
  assertPixel(img, b.x + b.w / 2, b.y + b.h / 2, 0xe7, 0x4c, 0x3c, 2, "bar")
  local _, _, text = plot.hist(DATA, {bins = 7, color = false, out = false})
  local n = 0
  for _, l in ipairs(lines(text)) do if l:match("^%s*%[") then n = n + 1 end end
  lu.assertEquals(n, 7)
  lu.assertStrContains(text, "█")
  lu.assertNotStrContains(text, "\27")
end

---------------------------------------------------------------- terminal heatmap

TestHeatmapTerm = {}

local W3 = {{0.1, 0.5, 0.4}, {0.3, 0.3, 0.4}, {0.9, 0.05, 0.05}}
local TOKS = {"the", "cat", "sat"}

function TestHeatmapTerm:testColour()
  local text = plot.heatmap(qkv.tensor(W3), {title = "Weights", xlabels = TOKS,
    ylabels = {"one", "two", "six"}, color = true, out = false})
  local r, g, b = to255(plot.colormap("viridis", (0.5 - 0.05) / (0.9 - 0.05)))
  lu.assertStrContains(text, string.format("48;2;%d;%d;%dm", r, g, b))
  for _, s in ipairs{"Weights", "the", "cat", "sat", "one", "two", "six", "0.50", "0.05"} do
    lu.assertStrContains(text, s)
  end
  -- white on the dark 0.05 cells, black on the yellow 0.90
  r, g, b = to255(plot.colormap("viridis", 0))
  lu.assertStrContains(text, string.format("48;2;%d;%d;%dm\27[38;2;255;255;255m 0.05", r, g, b))
  lu.assertStrContains(text, "\27[38;2;0;0;0m 0.90")
end

function TestHeatmapTerm:testPlain()
  local text = plot.heatmap(W3, {xlabels = TOKS, ylabels = TOKS, title = "T",
    color = false, out = false})
  lu.assertNotStrContains(text, "\27")
  for _, s in ipairs{"T", "the", "cat", "sat", "0.10", "0.90", "0.05"} do
    lu.assertStrContains(text, s)
  end
  local shaded = plot.heatmap(W3, {annotate = false, color = false, out = false})
  lu.assertNotStrContains(shaded, "\27")
  lu.assertStrContains(shaded, "█")
  lu.assertStrContains(shaded, "░")
  lu.assertNotStrContains(shaded, "0.10")
end

function TestHeatmapTerm:testAnnotateFormat()
  local text = plot.heatmap(W3, {annotate = "%.3f", color = false, out = false})
  lu.assertStrContains(text, "0.050")
  text = plot.heatmap(qkv.ones(13, 13), {color = false, out = false})
  lu.assertNotStrContains(text, "1.00")     -- more than 12 columns: no values
end

function TestHeatmapTerm:testColorDefault()
  local function env(t) return function(k) return t[k] end end
  local yes, no = function() return true end, function() return false end
  lu.assertTrue(plot._color_default(env{TERM = "xterm-256color"}, yes))
  lu.assertFalse(plot._color_default(env{TERM = "xterm"}, no))
  lu.assertFalse(plot._color_default(env{NO_COLOR = "1", TERM = "xterm"}, yes))
  lu.assertTrue(plot._color_default(env{NO_COLOR = "", TERM = "xterm"}, yes))
  lu.assertFalse(plot._color_default(env{TERM = "dumb"}, yes))
end

function TestHeatmapTerm:testFitsTheWidth()
  qkv.seed(1)
  local text = plot.heatmap(qkv.randn(200, 300), {color = true, out = false, width = 80})
  for _, l in ipairs(lines(text)) do
    local visible = l:gsub("\27%[[%d;]*m", "")
    lu.assertTrue(utf8.len(visible) <= 80, "line wider than 80: " .. visible)
  end
  lu.assertTrue(#lines(text) <= 70)
  lu.assertStrContains(text, "averaged")
end

function TestHeatmapTerm:testWritesToStdoutUnlessOutFalse()
  for _, call in ipairs{{"heatmap({{1, 2}}", "2.00"}, {"line({1, 2}", "2.00 ┤"}} do
    local cmd = quote(EXE) .. " -e " .. quote(
      'local s = qkv.plot.' .. call[1] .. ', {title = "T", color = false}) ' ..
      'local t = qkv.plot.' .. call[1] .. ', {title = "T", color = false, out = false}) ' ..
      'io.write("|", tostring(s), "|", #t)')
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    -- drawn: nothing returned (the REPL prints nothing twice); out = false: the text
    local body, n = out:match("^(.*)|nil|(%d+)$")
    lu.assertNotNil(body, out)
    lu.assertEquals(#body, tonumber(n))
    lu.assertStrContains(body, call[2])
  end
end

-- help(qkv.plot) and each figure's entry say what the test above checks
function TestHeatmapTerm:testHelpSaysWhatTheTerminalReturns()
  local doc = require "qkv.doc"
  local function flat(s) return (s:gsub("%s+", " ")) end
  local intro = flat(doc.text(plot))
  lu.assertStrContains(intro, "draw in the terminal")
  lu.assertStrContains(intro, "and return nothing, so that the REPL does not print a figure twice; "
                       .. "with opts.out = false they return the text instead of writing it")
  lu.assertNotStrContains(intro, "return the text;")
  for _, name in ipairs{"heatmap", "grid", "hist", "image", "scatter", "line"} do
    local text = flat(doc.text("qkv.plot." .. name))
    lu.assertStrContains(text, "returns nothing, or with opts.out = false returns the text", name)
  end
end

function TestHeatmapTerm:testTerminalNeverLoadsCairo()
  local cmd = quote(EXE) .. " -e " .. quote(
    'qkv.plot.heatmap({{1, 2}}, {out = false, color = true}) ' ..
    'qkv.plot.hist({1, 2}, {out = false}) ' ..
    'qkv.plot.line({1, 2}, {out = false}) ' ..
    'io.write(tostring(package.loaded["qkv.cairo"] == nil))')
  local p = io.popen(cmd)
  lu.assertEquals(p:read("a"), "true")
  p:close()
end

---------------------------------------------------------------- image

TestImage = {}

function TestImage:testRgbRoundTrip()
  local px = {}
  for i = 1, 6 do
    px[i] = {}
    for j = 1, 9 do px[i][j] = {(i - 1) / 5, (j - 1) / 8, 0.25} end
  end
  local f = tmp("rgb.png")
  local L = plot.image(qkv.tensor(px), {file = f, title = "rgb"})
  local img = plot.read_png(f)
  lu.assertEquals({img.width, img.height}, {L.width, L.height})
  for _, ij in ipairs{{1, 1}, {6, 9}, {3, 4}, {5, 2}} do
    local i, j = ij[1], ij[2]
    local x, y = centre(L, i, j)
    local r, g, b = to255(px[i][j][1], px[i][j][2], px[i][j][3])
    assertPixel(img, x, y, r, g, b, 1, "pixel " .. i .. "," .. j)
  end
end

function TestImage:testMatrixDefaultsAndTerminal()
  local m = {{-2, 0, 1}, {1, 2, -1}}
  local f = tmp("img.png")
  local L = plot.image(m, {file = f})
  local img = plot.read_png(f)
  -- both signs: coolwarm centred on 0, so -2 is its blue end, 1 three quarters
  local x, y = centre(L, 1, 1)
  assertPixel(img, x, y, 0x3b, 0x4c, 0xc0, 2, "-2")
  x, y = centre(L, 1, 3)
  local r, g, b = to255(plot.colormap("coolwarm", 0.75))
  assertPixel(img, x, y, r, g, b, 2, "1")
  local text = plot.image(qkv.randn(8, 10), {color = true, out = false})
  lu.assertStrContains(text, "▀")
  lu.assertEquals(#lines(text), 4 + 1)       -- 8 rows in 4 lines, a colour bar
  text = plot.image(qkv.randn(9, 300), {color = false, out = false, width = 80})
  lu.assertNotStrContains(text, "\27")
  lu.assertStrContains(text, "averaged")
end

---------------------------------------------------------------- scatter

TestScatter = {}

function TestScatter:testPngDots()
  local f = tmp("scatter.png")
  local L = plot.scatter({
    {qkv.tensor{{0, 0}, {1, 2}, {2, 1}}, label = "words", color = "#d62728",
      names = {"king", "queen", "man"}},
    {{{0.5, 1.5}, {1.5, 0.5}}, label = "patches"}}, {title = "s", file = f})
  local img = plot.read_png(f)
  lu.assertEquals({img.width, img.height}, {L.width, L.height})
  local q = L.points[1][2]
  assertPixel(img, q.x, q.y, 0xd6, 0x27, 0x28, 3, "a red dot")
  q = L.points[2][1]
  assertPixel(img, q.x, q.y, hex("#ff7f0e"))  -- the second default colour
  -- queen (1, 2) is above and right of king (0, 0)
  lu.assertTrue(L.points[1][2].x > L.points[1][1].x)
  lu.assertTrue(L.points[1][2].y < L.points[1][1].y)
end

function TestScatter:testTerminal()
  local text = plot.scatter({{{{0, 0}, {1, 1}}, label = "first", names = {"p", "q"}},
    {{{0.5, 0.2}}, label = "second"}}, {title = "sc", color = false, out = false})
  lu.assertNotStrContains(text, "\27")
  for _, s in ipairs{"sc", "A", "B", "first", "second"} do lu.assertStrContains(text, s) end
  lu.assertStrContains(text, "A p")
  -- a bare list of points is one series
  text = plot.scatter({{0, 0}, {3, 4}}, {color = true, out = false})
  lu.assertStrContains(text, "A")
  lu.assertStrContains(text, "\27[38;2;31;119;180m")
end

---------------------------------------------------------------- errors

TestErrors = {}

function TestErrors:testShapes()
  fails({"heatmap: xlabels has 3 names but w (4, 4) has 4 columns"},
    plot.heatmap, qkv.ones(4, 4), {xlabels = {"a", "b", "c"}})
  fails({"heatmap: ylabels has 1 names but w (4, 4) has 4 rows"},
    plot.heatmap, qkv.ones(4, 4), {ylabels = {"a"}})
  fails({"heatmap: w must be a 2-D tensor or a nested table, got a 3-D tensor (2, 3, 4)"},
    plot.heatmap, qkv.ones(2, 3, 4))
  fails({"heatmap: w", "ragged"}, plot.heatmap, {{1, 2}, {3}})
  fails({"heatmap: w", "string"}, plot.heatmap, {{1, "x"}})
  fails({"heatmap: w", "empty"}, plot.heatmap, qkv.zeros(0, 3))
  fails({"heatmap: w", "empty"}, plot.heatmap, {})
  fails({"heatmap: w", "got a string"}, plot.heatmap, "w")
  fails({"image: m", "(2, 3, 4)"}, plot.image, qkv.ones(2, 3, 4))
  fails({"scatter: series 1 points must be (n, 2), got (3, 3)"}, plot.scatter,
    {{qkv.ones(3, 3)}})
  fails({"scatter: series 1 names has 1 names"}, plot.scatter,
    {{{{0, 0}, {1, 1}}, names = {"a"}}})
end

function TestErrors:testSqueezesLeadingOnesOfTables()
  local text = plot.heatmap({{{0.25, 0.5}, {0.75, 1}}}, {color = false, out = false})
  lu.assertStrContains(text, "0.75")
  fails({"heatmap: w", "3-D table (2, 1, 1)"}, plot.heatmap, {{{1}}, {{2}}})
  fails({"heatmap: w (4097, 4097) has 16785409 values"}, plot.heatmap, qkv.zeros(4097, 4097))
end

function TestErrors:testOptions()
  fails({"heatmap: unknown cmap 'foo' (viridis, blues,"}, plot.heatmap, {{1}}, {cmap = "foo"})
  fails({"heatmap: cmap colour 2"}, plot.heatmap, {{1}}, {cmap = {"#000000", "red"}})
  fails({"hist: bins must be a positive integer, got 0"}, plot.hist, {1, 2}, {bins = 0})
  fails({"hist: bins must be a positive integer, got 2.5"}, plot.hist, {1, 2}, {bins = 2.5})
  fails({"hist: range"}, plot.hist, {1, 2}, {range = {2, 1}})
  fails({"hist: color"}, plot.hist, {1, 2}, {color = "blue"})
  fails({"heatmap: annotate"}, plot.heatmap, {{1}}, {annotate = "%d"})
  fails({"heatmap: vmin"}, plot.heatmap, {{1}}, {vmin = 2, vmax = 1})
  fails({"heatmap: vmin"}, plot.heatmap, {{1}}, {vmin = nan})
  fails({"grid: panel 2", "unknown kind"}, plot.grid, {{{{1}}}, {{{1}}, {kind = "pie"}}})
  fails({"grid: panel 1: heatmap: xlabels"}, plot.grid, {{{{1}}, {xlabels = {"a", "b"}}}})
  fails({"grid: 3 panels do not fit"}, plot.grid, {{{{1}}}, {{{1}}}, {{{1}}}},
    {rows = 1, cols = 2})
  fails({"colormap: unknown cmap"}, plot.colormap, "nope", 0.5)
end

function TestErrors:testUnwritableFileNamesIt()
  fails({"heatmap: cannot write 'no/such/dir/x.png': "}, plot.heatmap, {{1}},
    {file = "no/such/dir/x.png"})
  fails({"hist: cannot write '/nonexistent-dir/h.png'"}, plot.hist, {1},
    {file = "/nonexistent-dir/h.png"})
  fails({"read_png: cannot read"}, plot.read_png, TMP .. "/missing.png")
end

function TestErrors:testMessageHasNoPlotLuaPrefix()
  local ok, msg = pcall(function() plot.hist({1}, {bins = -1}) end)
  lu.assertFalse(ok)
  lu.assertNotStrContains(msg, "qkv/plot")
  lu.assertStrContains(msg, "test_plot.lua:")   -- the caller's line
end

function TestErrors:testHugeAndOddInputsDoNotCrash()
  fails({"heatmap: w (5000, 2) is too large"}, plot.heatmap, qkv.zeros(5000, 2),
    {file = tmp("never.png")})
  local text = plot.heatmap({{nan, math.huge}, {-math.huge, 1}}, {color = true, out = false})
  lu.assertStrContains(text, "nan")
  lu.assertStrContains(text, "inf")
  local L = plot.heatmap({{5, 5}, {5, 5}}, {file = tmp("const.png")})
  lu.assertEquals(L.rows, 2)
  plot.heatmap(qkv.tensor({{true, false}}), {out = false})
  plot.heatmap(qkv.tensor({{1, 2}}, "int64"), {out = false})
  plot.heatmap({{1, 2}}, {title = "bad \255 utf8", file = tmp("utf8.png")})
end

---------------------------------------------------------------- options

TestCairo = {}

function TestCairo:testCanvas()
  local cv = cairo.new(8, 4)
  lu.assertEquals({cv:size()}, {8, 4})
  cv:rgb(1, 0, 0)
  cv:rect(0, 0, 4, 4)
  cv:fill()
  local f = tmp("canvas.png")
  cv:write_png(f)
  cv:close()
  cv:close()                                -- safe twice
  fails({"closed"}, cv.rect, cv, 0, 0, 1, 1)
  local img = plot.read_png(f)
  lu.assertEquals({img.pixel(1, 1)}, {255, 0, 0, 255})
  lu.assertEquals({img.pixel(6, 1)}, {255, 255, 255, 255})
  fails({"outside"}, img.pixel, 8, 0)
end

function TestCairo:testRefusals()
  fails({"too large"}, cairo.new, 30000, 30000)
  fails({"width"}, cairo.new, 0, 10)
  local cv <close> = cairo.new(2, 2)
  fails({"finite"}, cv.rect, cv, 0, 0, nan, 1)
  fails({"UTF-8"}, cv.show_text, cv, "\255")
  fails({"wrong number of bytes"}, cv.image, cv, 0, 0, 2, 2, 1, 1, "abc")
end

function TestCairo:testOutAndMkdir()
  local dir = TMP .. "/a/b"
  lu.assertTrue(cairo.mkdir(dir))
  lu.assertTrue(cairo.mkdir(dir))           -- already there
  local cmd = "QKV_OUT=" .. quote(TMP .. "/o") .. " " .. quote(EXE) .. " -e " ..
    quote('io.write(qkv.plot.out("x.png"))')
  local p = io.popen(cmd)
  lu.assertEquals(p:read("a"), TMP .. "/o/x.png")
  p:close()
  lu.assertTrue(cairo.mkdir(TMP .. "/o"))   -- it exists now
  os.remove(TMP .. "/o")
  os.remove(TMP .. "/a/b")
  os.remove(TMP .. "/a")
end

H.finish(lu.LuaUnit.run())
