-- qkv.plot: heatmaps, histograms, pictures, scatter and line plots, drawn
-- in the terminal (24-bit colour, or plain text) or written as PNG files
-- (cairo).
--
-- Matrices are 2-D qkv tensors (leading size-1 dims are squeezed, so a
-- (1, n, m) weight tensor works) or nested tables of numbers; any dtype.
-- Every function draws in the terminal unless opts.file names a PNG.
-- In the terminal the text goes to io.stdout and nothing is returned (so the
-- REPL does not print it twice); with opts.out = false the text is returned
-- instead. With a file the result is the figure's layout, in pixels, so that
-- a test can find what was drawn where.
--
--   plot.heatmap(w, opts) -> nothing | text | layout {file, width, height, x0, y0, cw, ch}
--     opts: title (a "\n" starts a new line), title_color (hex), xlabels,
--     ylabels (a name a column / row), xlabel, ylabel, ylabel_rotation (90,
--     or 0 for a level row name), xticks, yticks (false: no tick marks or
--     names), xrotation (0, 45 or 90; default: 45 when the names do not
--     fit), annotate (true: "%.2f", false, or a format such as "%.3f";
--     default: true up to 12 x 12), cell_labels (a matrix of strings the
--     shape of w, drawn small under each value), cmap (viridis, blues,
--     ylorrd, ylgnbu, mako, coolwarm, greys, or a list of 2+ hex colours),
--     vmin, vmax (default: the data's range), colorbar (default true),
--     cbar_label, file.
--     Terminal only: color (true / false; default: when stdout is a
--     terminal and neither NO_COLOR nor TERM=dumb says no), width (columns;
--     default the terminal's, else $COLUMNS, else 80), out. The terminal
--     ignores ylabel_rotation and xrotation.
--     (x0, y0) is the top-left pixel of cell (1, 1), cw x ch a cell's size.
--   plot.grid(panels, opts) -> text | layout with panels = {layout, ...}
--     panels: a list of {w, panel_opts}; panel_opts.kind = "heatmap"
--     (default), "hist", "image", "line" or "scatter" with that function's
--     opts but file and the terminal ones; a heatmap panel has a colour bar
--     unless colorbar = false, an image panel only with colorbar = true.
--     In a PNG, long panel titles wrap to the panel's width and the plots
--     of a row (a column) line up.
--     opts: rows, cols (default one row), title (lines as heatmap's), file,
--     and the terminal ones.
--   plot.hist(x, opts) -> counts, edges, text | layout
--     x: a tensor of any shape or a list of numbers; opts: bins (30),
--     range {lo, hi}, title, title_color, xlabel, ylabel, ylabel_rotation,
--     color (hex, "#3498db"), alpha (0..1, the bars over the white; PNG
--     only), file, and the terminal ones.
--     Non-finite values are not counted; edges has bins + 1 entries.
--   plot.image(m, opts) -> text | layout {..., x0, y0, cw, ch}
--     m: a 2-D matrix of any size drawn with a colour map (coolwarm, centred
--     on 0, when the data has both signs, else viridis), or an (H, W, 3)
--     picture of RGB values in [0, 1]; opts: title, title_color, xlabel,
--     ylabel, ylabel_rotation, xticks, yticks, cmap, vmin, vmax, colorbar,
--     cbar_label, file, and the terminal ones.
--   plot.scatter(series, opts) -> text | layout with points[s][i] = {x=, y=}
--     series: a list of {points, label=, color=, names={...}}, points an
--     (n, 2) tensor or a list of {x, y} (one bare points list works too);
--     opts: title, title_color, xlabel, ylabel, ylabel_rotation, file, and
--     the terminal ones.
--   plot.line(ys, opts) -> text | layout with points[s][i] = {x=, y=} or false
--     ys: one series (a 1-D tensor, or a list of numbers or 0-D tensors)
--     or a list of them; opts: x (default 1..n; one list, or with a list
--     of series a list of lists), label (a name, or a list of one a
--     series: the legend), title, title_color, xlabel, ylabel,
--     ylabel_rotation, file, and the terminal ones. A point that is not
--     finite is a gap in its line (false in the layout). In the terminal
--     the lines are braille dots, in colour or, without it, letters A, B,
--     ... for several series.
--   plot.out(name) -> ($QKV_OUT or "out") .. "/" .. name, the folder made
--   plot.colormap(cmap, t) -> r, g, b in [0, 1] (t clamped, NaN: grey)
--   plot.read_png(path) -> {width, height, pixel = function(x, y) -> r, g, b, a}
--     (0..255; x, y from 0 at the top left)
--
-- Bad arguments raise errors that name the function and the argument, and
-- an option that the function does not take is refused (a typo would
-- otherwise pass silently):
--   heatmap: xlabels has 3 names but w (4, 4) has 4 columns
--   heatmap: unknown option 'anotate'
-- Annotations are black on cells whose relative luminance is over 0.408,
-- else white (seaborn's rule).

local util = require "qkv.plot.util"
local cmap = require "qkv.plot.cmap"
local spec = require "qkv.plot.spec"

local qkv = package.loaded.qkv or require "qkv"
local fail = util.fail

local plot = {}

-- Whether to draw in colour when opts.color does not say: only on a
-- terminal that does not refuse it. getenv and isatty are arguments so
-- that the tests can play every environment.
function plot._color_default(getenv, isatty)
  getenv = getenv or os.getenv
  isatty = isatty or function() return qkv._isatty(1) end
  local no = getenv("NO_COLOR")
  if no ~= nil and no ~= "" then return false end
  if getenv("TERM") == "dumb" then return false end
  return isatty() == true
end

function plot._termwidth()
  local cols = qkv._termsize(1)
  if cols then return cols end
  cols = tonumber(os.getenv("COLUMNS") or "")
  if cols and cols >= 20 then return math.floor(math.min(cols, 10000)) end
  return 80
end

local function checkopts(fname, opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    fail("%s: opts must be a table, got a %s", fname, type(opts))
  end
  -- the known options, each read once (a table whose __index changes its
  -- answers is checked and drawn on what it said)
  opts = spec.checkkeys(fname, opts, fname)
  local file, width = opts.file, opts.width
  if file ~= nil and type(file) ~= "string" then
    fail("%s: file must be a path string, got a %s", fname, type(file))
  end
  if file and file:find("\0", 1, true) then   -- C would write the path before it
    fail("%s: file %q has a NUL byte", fname, file)
  end
  -- at most 10000 columns: a bar of 2^53 of them is no string Lua can make
  if width ~= nil and (math.type(width) ~= "integer" or width < 20 or width > 10000) then
    fail("%s: width must be an integer from 20 to 10000, got %s", fname, tostring(width))
  end
  return opts
end

-- the terminal side of every function: render, then write or return the text
local function show(fname, specs, opts)
  local color = opts.color   -- hist's color may be its bars' hex colour
  if type(color) ~= "boolean" then color = plot._color_default() end
  local width = opts.width or plot._termwidth()
  local term = require "qkv.plot.term"   -- loaded only for the terminal
  local text = term.render(specs, {color = color and true or false, width = width,
    title = opts.grid and opts.title or nil, cols = opts.cols, grid = opts.grid})
  if opts.out == false then return text end
  io.stdout:write(text)
  io.stdout:flush()
end

-- plot._display(fname, specs, opts), when a host sets it (the Jupyter
-- kernel), shows a figure that has no file instead of the terminal
local function draw(fname, specs, opts)
  if not opts.file and plot._display and opts.out ~= false then
    return plot._display(fname, specs, opts)
  end
  if opts.file then
    local png = require "qkv.plot.png"   -- cairo is loaded only here
    return png.figure(fname, specs, opts)
  end
  return show(fname, specs, opts)
end

-- heatmap, image, scatter and line: one panel of their kind, drawn
local function figure(kind)
  return util.api(function(data, opts)
    opts = checkopts(kind, opts)
    return draw(kind, {spec[kind](kind, data, opts)}, opts)
  end)
end
plot.heatmap, plot.image = figure("heatmap"), figure("image")

plot.hist = util.api(function(x, opts)
  opts = checkopts("hist", opts)
  local s = spec.hist("hist", x, opts)
  return s.counts, s.edges, draw("hist", {s}, opts)
end)

plot.scatter, plot.line = figure("scatter"), figure("line")

plot.grid = util.api(function(panels, opts)
  opts = checkopts("grid", opts)
  if type(panels) ~= "table" or #panels == 0 then
    fail("grid: panels must be a non-empty list of {w, opts}, got %s",
      type(panels) == "table" and "an empty table" or "a " .. type(panels))
  end
  local specs = {}
  for i, p in ipairs(panels) do specs[i] = spec.panel(i, p) end
  local n = #specs
  local rows, cols = opts.rows, opts.cols
  for _, k in ipairs{"rows", "cols"} do
    local v = opts[k]
    if v ~= nil and (math.type(v) ~= "integer" or v < 1) then
      fail("grid: %s must be a positive integer, got %s", k, tostring(v))
    end
  end
  if not cols then cols = rows and math.ceil(n / rows) or n end
  if not rows then rows = math.ceil(n / cols) end
  if rows * cols < n then
    fail("grid: %d panels do not fit in rows = %d x cols = %d", n, rows, cols)
  end
  local o = setmetatable({rows = rows, cols = cols, grid = true}, {__index = opts})
  o.title = util.optlines("grid", "title", opts.title)
  return draw("grid", specs, o)
end)

function plot.out(name)
  if type(name) ~= "string" or name == "" then
    error("out: name must be a non-empty string, got " .. tostring(name), 2)
  end
  local path = (os.getenv("QKV_OUT") or "out") .. "/" .. name
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    local ok, err = require("qkv.cairo").mkdir(dir)
    if not ok then error("out: cannot make the folder " .. err, 2) end
  end
  return path
end

function plot.colormap(c, t)
  local map, err = cmap.resolve(c)
  if not map then error("colormap: " .. err, 2) end
  if type(t) ~= "number" then
    error("colormap: t must be a number, got a " .. type(t), 2)
  end
  return cmap.eval(map, t)
end

function plot.read_png(path)
  if type(path) ~= "string" then
    error("read_png: path must be a string, got a " .. type(path), 2)
  end
  local ok, w, h, stride, data = pcall(require("qkv.cairo").read_png, path)
  if not ok then error("read_png: " .. tostring(w), 2) end
  return {width = w, height = h, pixel = function(x, y)
    local xi, yi = math.tointeger(x), math.tointeger(y)
    if not xi or not yi or xi < 0 or yi < 0 or xi >= w or yi >= h then
      error(string.format("read_png: pixel (%s, %s) is outside the %d x %d picture",
        tostring(x), tostring(y), w, h), 2)
    end
    return data:byte(yi * stride + xi * 4 + 1, yi * stride + xi * 4 + 4)
  end}
end

return qkv._strict(plot, "qkv.plot")
