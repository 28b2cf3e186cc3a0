-- test_plot_line.lua: qkv.plot.line. The terminal text of small fixed
-- inputs is compared whole (braille dots, ticks, legend); PNGs are read
-- back with plot.read_png and the series' colours looked for at the
-- pixels the layout names, and the white of a gap between them; every
-- argument error names the function and the argument.
local lu = require "luaunit"
local H = dofile("tests/helpers/plot_helpers.lua")
local plot, nan = H.plot, H.nan
local tmp, fails, hex, count, lines = H.tmp, H.fails, H.hex, H.count, H.lines

local BLUE, ORANGE = "#1f77b4", "#ff7f0e"      -- the first two of the palette

-- within tol a channel of the hex colour h
local function near(h, tol)
  local r0, g0, b0 = hex(h)
  return function(r, g, b)
    return math.abs(r - r0) <= tol and math.abs(g - g0) <= tol and math.abs(b - b0) <= tol
  end
end

local function white(r, g, b) return r > 250 and g > 250 and b > 250 end

-- how many pixels of colour h within d pixels of (x, y)
local function around(img, x, y, h, d)
  return count(img, x - d, y - d, x + d, y + d, near(h, 40))
end

---------------------------------------------------------------- terminal

TestLineTerm = {}

function TestLineTerm:testOneSeriesExactly()
  local text = plot.line({1, 3, 2}, {title = "t", color = false, out = false, width = 30})
  lu.assertEquals(text, table.concat({
    "                 t",
    "3.0 ┤           ⢀⠎⠢⡀",
    "    │          ⢀⠎  ⠈⠢⡀",
    "    │         ⢀⠎     ⠈⠢⡀",
    "2.5 ┤        ⢀⠎        ⠈⠑⢄",
    "    │       ⢠⠃            ⠑⢄",
    "2.0 ┤      ⢠⠃               ⠑⢄",
    "    │     ⢠⠃",
    "    │    ⢠⠃",
    "1.5 ┤   ⡰⠁",
    "    │  ⡰⠁",
    "    │ ⡰⠁",
    "1.0 ┤⡰⠁",
    "    └┬───────────┬───────────┬",
    "     1           2           3", ""}, "\n"))
end

-- without colour, several series are letters; x per series, a legend
function TestLineTerm:testSeveralSeriesExactly()
  local text = plot.line({{0, 2}, {2, 0}}, {x = {{1, 3}, {2, 4}}, label = {"up", "down"},
    xlabel = "step", ylabel = "loss", color = false, out = false, width = 30})
  lu.assertEquals(text, table.concat({
    "loss",
    "2.0 ┤        BB     AA",
    "    │         BB   AA",
    "    │           BBA",
    "1.5 ┤           ABB",
    "    │          AA BB",
    "1.0 ┤        AA     BB",
    "    │       AA       BB",
    "    │     AA           BB",
    "0.5 ┤    AA             BB",
    "    │   AA               BB",
    "    │ AA                   BB",
    "0.0 ┤AA                     BB",
    "    └────────┬───────────────┬",
    "             2               4",
    "               step",
    "     A up",
    "     B down", ""}, "\n"))
end

function TestLineTerm:testColourIsTheSeriesOwn()
  local text = plot.line({{1, 2}, {2, 1}}, {label = {"a", "b"}, color = true, out = false})
  local blue, orange = "\27[38;2;31;119;180m", "\27[38;2;255;127;14m"
  lu.assertStrContains(text, "1.00 ┤" .. blue .. "⣀")      -- series 1 starts at the bottom
  lu.assertStrContains(text, "2.00 ┤" .. orange .. "⠉")    -- series 2 at the top
  lu.assertStrContains(text, blue .. "──\27[0m a")
  lu.assertStrContains(text, orange .. "──\27[0m b")
  lu.assertNotStrContains(text, "A")                -- colour tells them apart, not letters
  -- one series without colour is braille, not a letter
  text = plot.line({1, 2}, {color = false, out = false})
  lu.assertNotStrContains(text, "\27")
  lu.assertNotNil(text:find("\226[\160-\163][\128-\191]"), "braille, U+2800 to U+28FF")
  lu.assertNotStrContains(text, "A")
end

-- the plot rows' characters from column a to b (1-based, after the axis)
local function columns(text, a, b)
  local out = {}
  for _, l in ipairs(lines(text)) do
    local at = l:find("┤", 1, true) or l:find("│", 1, true)
    if at then
      local body = l:sub(at + #"┤")
      local chars = {}
      for _, c in utf8.codes(body) do chars[#chars + 1] = utf8.char(c) end
      out[#out + 1] = table.concat(chars, "", a, math.min(b, #chars))
    end
  end
  return table.concat(out)
end

-- x = 2 and x = 4 fall at dot columns 12 and 35 of 48 (or 37 of 50, as
-- the tick labels take 4 columns or 3): characters 8 to 17 lie between them
function TestLineTerm:testNonFiniteIsAGap()
  local o = {color = false, out = false, width = 30}
  local whole = columns(plot.line({1, 2, 3, 2, 1}, o), 8, 17)
  lu.assertTrue(whole:find("[\226]") ~= nil, "the whole line crosses the middle")
  for _, bad in ipairs{nan, math.huge, -math.huge} do
    local gap = columns(plot.line({1, 2, bad, 2, 1}, o), 8, 17)
    lu.assertEquals(gap:gsub(" ", ""), "", tostring(bad))
  end
  -- a non-finite x is a gap too
  local gap = columns(plot.line({1, 2, 3, 2, 1}, {x = {1, 2, nan, 4, 5}, color = false,
    out = false, width = 30}), 8, 17)
  lu.assertEquals(gap:gsub(" ", ""), "")
end

-- x defaults to 1..n; a given x is where the ticks are
function TestLineTerm:testXDefaultsToOneBased()
  local function xticks(text)
    local l = lines(text)
    return l[#l]:gsub("^%s+", ""):gsub("%s+", " ")
  end
  lu.assertEquals(xticks(plot.line({5, 6, 5, 7}, {color = false, out = false, width = 60})),
    "1 2 3 4")
  lu.assertEquals(xticks(plot.line(qkv.tensor{5, 6, 5, 7}, {x = qkv.tensor{0, 10, 20, 30},
    color = false, out = false, width = 60})), "0 10 20 30")
  -- the default is x = {1, ..., n}, to the character
  local a = plot.line({5, 6, 5, 7}, {color = false, out = false})
  lu.assertEquals(plot.line({5, 6, 5, 7}, {x = {1, 2, 3, 4}, color = false, out = false}), a)
  lu.assertNotEquals(plot.line({5, 6, 5, 7}, {x = {1, 2, 4, 8}, color = false, out = false}), a)
end

-- a tensor, a list, a (1, n) tensor and a list of 0-D tensors (losses) are one series
function TestLineTerm:testInputsThatAreOneSeries()
  local o = {color = false, out = false, width = 40}
  local want = plot.line({0.5, 0.25, 0.2}, o)
  lu.assertEquals(plot.line(qkv.tensor{0.5, 0.25, 0.2}, o), want)
  lu.assertEquals(plot.line(qkv.tensor{{0.5, 0.25, 0.2}}, o), want)
  lu.assertEquals(plot.line({qkv.tensor(0.5), qkv.tensor(0.25), qkv.tensor(0.2)}, o), want)
  lu.assertEquals(plot.line({qkv.tensor{0.5, 0.25, 0.2}}, o), want)    -- a list of one
  lu.assertEquals(plot.line(qkv.tensor({0.5, 0.25, 0.2}, "float64"), o), want)
end

function TestLineTerm:testFitsTheWidth()
  local ys = {}
  for i = 1, 1000 do ys[i] = math.sin(i / 50) * 1e4 end
  for _, w in ipairs{20, 40, 80, 200} do
    local text = plot.line(ys, {color = true, out = false, width = w, title = "sine",
      label = "s", xlabel = "i"})
    for _, l in ipairs(lines(text)) do
      local visible = l:gsub("\27%[[%d;]*m", "")
      lu.assertTrue(utf8.len(visible) <= math.max(w, 30), w .. ": " .. visible)
    end
  end
end

---------------------------------------------------------------- PNG

TestLinePNG = {}

function TestLinePNG:testColoursLegendAndLayout()
  local f = tmp("line.png")
  local L = plot.line({{1, 4, 2, 3}, qkv.tensor{3, 1, 2, 4}}, {title = "loss",
    label = {"train", "valid"}, xlabel = "step", ylabel = "loss", file = f})
  local img = plot.read_png(f)
  lu.assertEquals({img.width, img.height}, {L.width, L.height})
  lu.assertEquals(L.file, f)
  for k, h in ipairs{BLUE, ORANGE} do
    lu.assertEquals(#L.points[k], 4)
    for i, q in ipairs(L.points[k]) do
      lu.assertTrue(around(img, q.x, q.y, h, 2) > 0, "series " .. k .. " point " .. i)
    end
  end
  -- x = 1..4 left to right, equally apart; y = 4 above y = 1
  local p = L.points[1]
  lu.assertTrue(p[1].x < p[2].x and p[2].x < p[3].x and p[3].x < p[4].x)
  lu.assertTrue(math.abs((p[2].x - p[1].x) - (p[4].x - p[3].x)) <= 1)
  lu.assertTrue(p[2].y < p[1].y)
  lu.assertEquals(p[1].x, L.points[2][1].x)
  -- the segment between points is drawn: its middle has the colour
  local mx, my = (p[1].x + p[2].x) // 2, (p[1].y + p[2].y) // 2
  lu.assertTrue(around(img, mx, my, BLUE, 2) > 0, "the line between points 1 and 2")
  -- the legend, right of the plot area, has a key of each colour
  local right = L.x0 + L.pw + 4
  lu.assertTrue(count(img, right, L.y0, L.width - 1, L.y0 + 40, near(BLUE, 40)) >= 10)
  lu.assertTrue(count(img, right, L.y0, L.width - 1, L.y0 + 40, near(ORANGE, 40)) >= 10)
  -- no legend without labels: the figure is narrower
  local bare = plot.line({{1, 4, 2, 3}, {3, 1, 2, 4}}, {file = tmp("bare.png")})
  lu.assertTrue(bare.width < L.width)
end

function TestLinePNG:testGapAndIsolatedPoints()
  local f = tmp("gap.png")
  local L = plot.line({1, 2, nan, 2, 1, math.huge, 3}, {file = f})
  local img = plot.read_png(f)
  local p = L.points[1]
  lu.assertEquals({p[3], p[6]}, {false, false})
  -- between points 2 and 4 nothing is drawn; between 1 and 2 the line is
  local y = (p[2].y + p[4].y) // 2
  lu.assertEquals(count(img, p[2].x + 4, y - 3, p[4].x - 4, y + 3, near(BLUE, 60)), 0)
  lu.assertTrue(count(img, p[2].x + 4, y - 3, p[4].x - 4, y + 3, white) > 0)
  lu.assertTrue(around(img, (p[1].x + p[2].x) // 2, (p[1].y + p[2].y) // 2, BLUE, 2) > 0)
  -- point 7 has no finite neighbour: a dot, not nothing (matplotlib draws none)
  lu.assertTrue(around(img, p[7].x, p[7].y, BLUE, 1) >= 4, "an isolated point")
  -- a series of one point, and one of only NaNs, draw without error
  local one = plot.line({5}, {file = tmp("one.png")})
  lu.assertTrue(around(plot.read_png(one.file), one.points[1][1].x, one.points[1][1].y,
    BLUE, 1) >= 4)
  local none = plot.line({nan, nan}, {file = tmp("none.png")})
  lu.assertEquals(none.points[1], {false, false})
end

-- the same figure from a tensor as from a list; more series than the palette
function TestLinePNG:testTensorsAndManySeries()
  local a = plot.line({0.5, 0.25, 0.125}, {file = tmp("l1.png")})
  local b = plot.line(qkv.tensor{0.5, 0.25, 0.125}, {file = tmp("l2.png")})
  lu.assertEquals(a.points, b.points)
  local many = {}
  for k = 1, 12 do many[k] = {k, k + 1} end
  local L = plot.line(many, {file = tmp("many.png")})
  local img = plot.read_png(L.file)
  -- series 11 takes the first colour again, series 10 the palette's last
  lu.assertTrue(around(img, L.points[11][1].x, L.points[11][1].y, BLUE, 2) > 0)
  lu.assertTrue(around(img, L.points[10][2].x, L.points[10][2].y, "#17becf", 2) > 0)
end

function TestLinePNG:testGridPanel()
  local panels = {{{1, 3, 2}, {kind = "line", title = "loss", label = "train"}},
    {{{1, 2}, {3, 4}}, {title = "heat"}}}
  local L = plot.grid(panels, {file = tmp("gridline.png")})
  lu.assertEquals(#L.panels[1].points[1], 3)
  local img = plot.read_png(L.file)
  local q = L.panels[1].points[1][2]
  lu.assertTrue(around(img, q.x, q.y, BLUE, 2) > 0)
  local text = plot.grid(panels, {color = false, out = false, width = 200})
  lu.assertStrContains(text, "── train")
  lu.assertStrContains(text, "1.0 ┤⡠⠒⠁")
  lu.assertStrContains(text, "heat")
  fails({"grid: panel 1: line: unknown option 'bins'"}, plot.grid,
    {{{1, 2}, {kind = "line", bins = 3}}})
end

---------------------------------------------------------------- extreme spans

-- spans wider than the largest double (-1e308 to 1e308: hi - lo is inf),
-- the largest double itself, one value, spans of a few denormals
TestLineSpans = {}

local MAX = 1.7976931348623157e308

function TestLineSpans:testOverflowingSpanInTheTerminal()
  local text = plot.line({-1e308, 1e308, 0}, {color = false, out = false, width = 30})
  lu.assertEquals(text, table.concat({
    " 1e+308 ┤          ⡜⠢⡀",
    "        │         ⡜  ⠑⢄",
    "        │        ⡸     ⠑⢄",
    " 5e+307 ┤       ⡰⠁      ⠈⠢⡀",
    "        │      ⢰⠁         ⠈⠢⡀",
    "      0 ┤     ⢠⠃            ⠑⢄",
    "        │    ⢠⠃",
    "        │   ⢀⠇",
    "-5e+307 ┤  ⢀⠎",
    "        │  ⡎",
    "        │ ⡜",
    "-1e+308 ┤⡜",
    "        └┬─────────┬─────────┬",
    "         1         2         3",
  }, "\n") .. "\n")
  -- x from the least double to the largest: the ends are the ticks
  local t = lines(plot.line({1, 2, 3}, {x = {-MAX, 0, MAX}, color = false, out = false,
    width = 30}))
  lu.assertStrMatches(t[#t], "%s*%-1%.8e%+308%s+1%.8e%+308")
end

-- the PNG of such a span has the points where they belong and tick labels
-- left of the plot (before, no tick fitted a span that overflows)
function TestLineSpans:testOverflowingSpanInAPNG()
  local f = tmp("span.png")
  local L = plot.line({-1e308, 1e308, 0}, {file = f})
  local p = L.points[1]
  lu.assertTrue(p[1].y > p[3].y and p[3].y > p[2].y)
  lu.assertTrue(math.abs(p[3].y - (L.y0 + L.ph / 2)) <= 1, "0 halfway up")
  local img = plot.read_png(f)
  local ink = count(img, 0, L.y0, L.x0 - 12, L.y0 + L.ph, function(r, g, b)
    return r < 128 and g < 128 and b < 128
  end)
  lu.assertTrue(ink > 20, "tick labels left of the plot")
  -- one value, the least double: drawn, at a finite pixel
  local one = plot.line({-MAX}, {file = tmp("min.png")})
  lu.assertTrue(one.points[1][1].y >= one.y0 and one.points[1][1].y <= one.y0 + one.ph)
end

-- every plot function, in the terminal (with and without colour) and as a
-- PNG, on spans that overflow, non-finite values and denormals: a figure,
-- or an error naming the function (hist's "cannot make n finite-sized
-- bins", as numpy's)
function TestLineSpans:testEveryFunctionDrawsOrNamesItself()
  local inf = math.huge
  local sets = {{-1e308, 1e308, 0}, {MAX, MAX}, {-MAX}, {-MAX, MAX}, {inf, -inf, nan, 1},
    {nan, nan}, {-inf, inf}, {5e-324, 0, 1e-323}, {1e300, 1e300}, {-MAX, 0, MAX, nan}}
  local modes = {{out = false, color = false}, {out = false, color = true},
    {file = tmp("sweep.png")}}
  local function with(mode, extra)
    local o = {}
    for k, v in pairs(mode) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end
  local bad = {}
  local function try(fname, what, f)
    local ok, e = pcall(f)
    if not ok and not tostring(e):find(fname .. ": ", 1, true) then
      bad[#bad + 1] = what .. ": " .. tostring(e)
    end
  end
  for si, d in ipairs(sets) do
    local pts, xs, mat = {}, {}, {d, d}
    for i, v in ipairs(d) do pts[i], xs[i] = {v, d[#d + 1 - i]}, i end
    for mi, mode in ipairs(modes) do
      local what = ("set %d, mode %d"):format(si, mi)
      try("line", what, function() return plot.line(d, with(mode)) end)
      try("line", what .. " x", function() return plot.line(xs, with(mode, {x = d})) end)
      try("line", what .. " two", function() return plot.line({d, {1, 2}}, with(mode)) end)
      try("scatter", what, function() return plot.scatter({{pts}}, with(mode)) end)
      try("hist", what, function() return plot.hist(d, with(mode)) end)
      try("heatmap", what, function() return plot.heatmap(mat, with(mode)) end)
      try("image", what, function() return plot.image(qkv.tensor(mat, "float64"), with(mode)) end)
      try("grid", what, function()
        return plot.grid({{d, {kind = "line"}}, {mat, {}}, {mat, {kind = "image"}},
          {{pts}, {kind = "scatter"}}}, with(mode))
      end)
    end
  end
  lu.assertEquals(bad, {})
end

---------------------------------------------------------------- errors

TestLineErrors = {}

function TestLineErrors:testSeries()
  fails({"line: ys (0,) is empty"}, plot.line, {})
  fails({"line: ys (0,) is empty"}, plot.line, qkv.zeros(0))
  fails({"line: series 2 (0,) is empty"}, plot.line, {{1, 2}, {}})
  fails({"line: ys must be a 1-D tensor or a list, got a 2-D tensor (3, 4); several series "
    .. "are a list of 1-D ones"}, plot.line, qkv.ones(3, 4))
  fails({"line: ys must be a 1-D tensor or a list, got a string"}, plot.line, "x")
  fails({"line: ys must be a 1-D tensor or a list of numbers, got a table with a string at ys[2]"},
    plot.line, {1, "a"})
  fails({"line: ys[2] must be a number or a 0-D tensor, got a 1-D tensor (2,)"}, plot.line,
    {qkv.tensor(1), qkv.ones(2)})
  fails({"line: series 2 must be a 1-D tensor or a list, got a number"}, plot.line, {{1, 2}, 3})
  local closed do local t <close> = qkv.ones(2); closed = t end
  fails({"line: ys is a closed tensor"}, plot.line, closed)
  fails({"line: series 1 is a closed tensor"}, plot.line, {closed})
  fails({"line: ys[2] is a closed tensor"}, plot.line, {1, closed})
end

function TestLineErrors:testXAndLabel()
  fails({"line: x has 3 values but ys has 2"}, plot.line, {1, 2}, {x = {1, 2, 3}})
  fails({"line: x has 2 values but series 2 has 3"}, plot.line, {{1, 2}, {1, 2, 3}},
    {x = {1, 2}})
  fails({"line: x has 1 lists but there are 2 series"}, plot.line, {{1, 2}, {1, 2, 3}},
    {x = {{1, 2}}})
  fails({"line: x[2] has 2 values but series 2 has 3"}, plot.line, {{1, 2}, {1, 2, 3}},
    {x = {{1, 2}, {1, 2}}})
  fails({"line: x must be a 1-D tensor or a list, got a string"}, plot.line, {1, 2}, {x = "a"})
  fails({"line: label must be a list of 2 names, one a series, got a string"}, plot.line,
    {{1, 2}, {1, 2, 3}}, {label = "a"})
  fails({"line: label has 1 names but there are 2 series"}, plot.line, {{1, 2}, {1}},
    {label = {"a"}})
  fails({"line: label has 2 names but there is 1 series"}, plot.line, {1, 2},
    {label = {"a", "b"}})
  fails({"line: unknown option 'lable' (did you mean 'label'?)"}, plot.line, {1, 2},
    {lable = "a"})
  fails({"line: unknown option 'linewidth'"}, plot.line, {1, 2}, {linewidth = 2})
  fails({"line: title must be a string, got a table"}, plot.line, {1, 2}, {title = {}})
  fails({"line: cannot write 'no/such/dir/l.png'"}, plot.line, {1, 2},
    {file = "no/such/dir/l.png"})
  local ok, msg = pcall(function() plot.line({}) end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_plot_line.lua:")      -- the caller's line
end

H.finish(lu.LuaUnit.run())
