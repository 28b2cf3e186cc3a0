-- doc/plot.lua: qkv.doc entries of qkv.plot. The full list of each
-- function's options is in the header of stdlib/qkv/plot/init.lua; these say
-- what a user needs at the prompt.

local WHERE = "Without opts.file it draws in the terminal (24-bit colour, or " ..
  "plain text when stdout is not a terminal, NO_COLOR is set or TERM=dumb; " ..
  "opts.color decides) and returns nothing, or with opts.out = false " ..
  "returns the text instead of writing it; with opts.file it writes a PNG " ..
  "through cairo and returns the layout in pixels. "

local STRICT = "An option the function does not take is an error " ..
  "(heatmap: unknown option 'anotate'), so a typo cannot pass silently. "

return {
  ---------------------------------------------------------------- figures
  {name = "qkv.plot.heatmap", sig = "qkv.plot.heatmap(w [, opts])", group = "figures",
   doc = [[Draws the matrix w as a heatmap with its values in the cells,
labels, a title and a colour bar, as seaborn's heatmap. w is a 2-D tensor
(leading size-1 dims are dropped, so a (1, n, m) weight tensor works) or a
nested table of numbers. opts: title, xlabels, ylabels (a name per column,
row), xlabel, ylabel, annotate (true, false or a format such as "%.3f";
default on up to 12 × 12), cmap ("viridis", "blues", "ylorrd", "ylgnbu",
"mako", "coolwarm", "greys" or a list of hex colours), vmin, vmax,
colorbar, cbar_label, cell_labels, xticks, yticks, xrotation, file and
more. ]] .. WHERE .. STRICT .. [[Labels that do not match the matrix are an
error with both counts.]],
   example = [=[local w = qkv.tensor{{0.1, 0.9}, {0.5, 0.5}}
print(qkv.plot.heatmap(w, {xlabels = {"a", "b"}, ylabels = {"a", "b"}, color = false, out = false}))
-->        a     b
--> a   0.10  0.90
--> b   0.50  0.50]=]},

  {name = "qkv.plot.grid", sig = "qkv.plot.grid(panels [, opts])", group = "figures",
   doc = [[Draws several plots side by side as subplots. panels is a list of
{w, panel_opts}, each a heatmap unless panel_opts.kind is "hist", "image",
"line" or "scatter", with that function's options. opts: rows, cols (default one
row), title, file, and the terminal ones (color, width, out). ]] .. WHERE ..
[[Panels that do not fit in rows × cols are an error.]]},

  {name = "qkv.plot.hist", sig = "qkv.plot.hist(x [, opts])", group = "figures",
   doc = [[A histogram of the values of x, a tensor of any shape or a list of
numbers. It returns the counts and the edges, then what the other figures
return. opts: bins
(30), range {lo, hi} (default the data's), title, xlabel, ylabel, color (a
hex colour for the bars), alpha (PNG only) and file. Values that are not
finite are not counted, and edges has bins + 1 entries. ]] .. WHERE ..
[[As matplotlib's hist.]]},

  {name = "qkv.plot.image", sig = "qkv.plot.image(m [, opts])", group = "figures",
   doc = [[Shows a matrix of any size as an image, or an (H, W, 3) RGB
picture with values in [0, 1], as matplotlib's imshow. A matrix with both
signs gets coolwarm centred on 0, else viridis, unless opts.cmap says;
opts also take title, xlabel, ylabel, vmin, vmax, colorbar, cbar_label and
file. In the terminal each character holds two pixel rows. ]] .. WHERE},

  {name = "qkv.plot.scatter", sig = "qkv.plot.scatter(series [, opts])", group = "figures",
   doc = [[Plots 2-D points. series is a list of {points, label=, color=,
names={...}} (another key is an error), where points is an (n, 2) tensor
or a list of {x, y}; one bare list of points works too. opts: title, xlabel, ylabel and file.
]] .. WHERE .. [[A PNG's layout has points[s][i] = {x=, y=}, the pixel of
each point.]]},

  {name = "qkv.plot.line", sig = "qkv.plot.line(ys [, opts])", group = "figures",
   doc = [[Plots one or more series as lines, for loss curves, as
matplotlib's plot: ys is one series (a 1-D tensor, or a list of numbers or
of 0-D tensors such as losses) or a list of them. opts: x (default 1, 2,
..., n; one list for every series, or a list of them, one a series),
label (a name, or a list of them, one a series: the legend), title,
xlabel, ylabel and file. A value that is not finite leaves a gap in its
line, as in matplotlib (a point with no finite neighbour is a dot); an
empty series, or an x whose length is not its series', is an error. In the
terminal the lines are braille dots, a colour a series, or without colour
letters A, B, ... when there are several. ]] .. WHERE .. [[A PNG's layout
has points[s][i] = {x=, y=}, the pixel of each point (false for a
gap).]],
   example = [=[local losses = {0.9, 0.5, 0.3, 0.2, 0.15}
print(qkv.plot.line(losses, {label = "train", color = false, out = false, width = 36}))
-->     │⠱⡀
--> 0.8 ┤ ⠑⡄
-->     │  ⠘⢄
-->     │   ⠈⢆
--> 0.6 ┤     ⢣
-->     │      ⠱⡀
-->     │       ⠑⢄⡀
--> 0.4 ┤         ⠈⠢⡀
-->     │           ⠈⠑⢄
-->     │              ⠉⠢⢄⡀
-->     │                 ⠈⠉⠒⠤⢄⡀
--> 0.2 ┤                      ⠈⠉⠑⠒⠒⠤⠤⢄⣀
-->     └───────┬───────────────┬───────
-->             2               4
-->      ── train]=]},

  ---------------------------------------------------------------- helpers
  {name = "qkv.plot.out", sig = "qkv.plot.out(name)", group = "helpers",
   doc = [[The path for a figure file: $QKV_OUT/name, or out/name when
QKV_OUT is not set. The folder is made when missing, so
qkv.plot.heatmap(w, {file = qkv.plot.out("w.png")}) just works. A name
that is not a non-empty string is an error.]]},

  {name = "qkv.plot.colormap", sig = "qkv.plot.colormap(cmap, t)", group = "helpers",
   doc = [[The colour of the colour map cmap at t in [0, 1], as three
numbers r, g, b in [0, 1]. cmap is a name ("viridis", "blues", "ylorrd",
"ylgnbu", "mako", "coolwarm", "greys") or a list of hex colours; t is
clamped to [0, 1] and NaN gives grey. An unknown map is an error.]],
   example = [=[print(qkv.plot.colormap("greys", 1))   --> 0.0	0.0	0.0]=]},

  {name = "qkv.plot.read_png", sig = "qkv.plot.read_png(path)", group = "helpers",
   doc = [[Reads a PNG file, so that a test can check what was drawn. It
returns {width, height, pixel}, where pixel(x, y) gives r, g, b, a in 0..255 with
x and y from 0 at the top left. The layout that a figure written with opts.file
returns says where to look. A pixel
outside the picture, or a file that cannot be read as a PNG, is an
error.]]},
}
