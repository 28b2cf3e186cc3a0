-- plot_helpers.lua: what test_plot.lua and test_plot_options.lua share: a
-- temporary folder for PNGs, error and pixel assertions, cell centres.
-- H.finish(status) removes the PNGs and exits.
local lu = require "luaunit"
local plot = qkv.plot
local cairo = require "qkv.cairo"

local EXE = arg and arg[-1] or "qkv"
local nan = 0 / 0

local TMP = os.tmpname()
os.remove(TMP)
assert(cairo.mkdir(TMP))
local written = {}

local function tmp(name)
  local p = TMP .. "/" .. name
  written[#written + 1] = p
  return p
end

local quote = dofile("tests/helpers/shell.lua").quote

-- f(...) must fail with a message containing every string of subs
local fails = dofile("tests/helpers/attn_ref.lua").fails

local function to255(r, g, b)
  return math.floor(r * 255 + 0.5), math.floor(g * 255 + 0.5), math.floor(b * 255 + 0.5)
end

local function hex(h)
  return tonumber(h:sub(2, 3), 16), tonumber(h:sub(4, 5), 16), tonumber(h:sub(6, 7), 16)
end

-- the pixel at (x, y) is the colour r, g, b (0..255) within tol a channel
local function assertPixel(img, x, y, r, g, b, tol, what)
  local pr, pg, pb = img.pixel(math.floor(x), math.floor(y))
  tol = tol or 2
  if math.abs(pr - r) > tol or math.abs(pg - g) > tol or math.abs(pb - b) > tol then
    lu.fail(string.format("%s: pixel (%d, %d) is (%d, %d, %d), expected (%d, %d, %d)",
      what or "colour", x, y, pr, pg, pb, r, g, b))
  end
end

-- how many pixels of the box round (cx, cy) satisfy pred(r, g, b)
local function count(img, x0, y0, x1, y1, pred)
  local n = 0
  for y = math.max(0, math.floor(y0)), math.min(img.height - 1, math.floor(y1)) do
    for x = math.max(0, math.floor(x0)), math.min(img.width - 1, math.floor(x1)) do
      if pred(img.pixel(x, y)) then n = n + 1 end
    end
  end
  return n
end

local function centre(L, i, j)
  return L.x0 + (j - 0.5) * L.cw, L.y0 + (i - 0.5) * L.ch
end

local function lines(s)
  local t = {}
  for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

---------------------------------------------------------------- colour maps


local function finish(status)
  for _, p in ipairs(written) do os.remove(p) end
  os.remove(TMP)
  os.exit(status, true)
end

return {plot = plot, cairo = cairo, EXE = EXE, nan = nan, TMP = TMP, tmp = tmp, quote = quote,
        fails = fails, to255 = to255, hex = hex, assertPixel = assertPixel, count = count,
        centre = centre, lines = lines, finish = finish}
