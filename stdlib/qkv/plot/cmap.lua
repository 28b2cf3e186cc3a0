-- qkv.plot.cmap: colour maps for qkv.plot, and the colour arithmetic that
-- the terminal and PNG renderers share (hex parsing, luminance, contrast).
--
-- Each named map is 17 anchor colours, sampled at t = 0, 1/16, ..., 1 from
-- matplotlib's map of that name (seaborn's for mako), and interpolated
-- linearly in sRGB: within a few levels of 255 of the original everywhere,
-- and equal to it at both ends.

local M = {}

M.maps = {
  viridis = {"#440154", "#48186a", "#472d7b", "#424086", "#3b528b", "#33638d",
    "#2c728e", "#26828e", "#21918c", "#1fa088", "#28ae80", "#3fbc73",
    "#5ec962", "#84d44b", "#addc30", "#d8e219", "#fde725"},
  blues = {"#f7fbff", "#eaf3fb", "#deebf7", "#d2e3f3", "#c6dbef", "#b2d2e8",
    "#9dcae1", "#84bcdb", "#6aaed6", "#56a0ce", "#4191c6", "#3181bd",
    "#2070b4", "#1460a8", "#08509b", "#084082", "#08306b"},
  ylorrd = {"#ffffcc", "#fff6b6", "#ffeda0", "#fee38b", "#fed976", "#fec561",
    "#feb24c", "#fd9f44", "#fd8c3c", "#fc6c33", "#fc4d2a", "#ef3323",
    "#e2191c", "#cf0c21", "#bb0026", "#9d0026", "#800026"},
  ylgnbu = {"#ffffd9", "#f6fbc5", "#edf8b1", "#daf0b3", "#c6e9b4", "#a2dbb8",
    "#7ecdbb", "#5fc1c0", "#40b5c4", "#2ea3c2", "#1d90c0", "#2076b3",
    "#225da8", "#24489d", "#243392", "#162874", "#081d58"},
  mako = {"#0b0405", "#1c101c", "#2b1c35", "#37284f", "#3e356b", "#414387",
    "#3b5698", "#36699f", "#357ba3", "#348da7", "#359fab", "#3cb1ad",
    "#4bc2ad", "#6ad2ad", "#99ddb6", "#c0e9cc", "#def5e5"},
  coolwarm = {"#3b4cc0", "#4e68d8", "#6282ea", "#779af7", "#8db0fe", "#a3c2fe",
    "#b9d0f9", "#ccd9ed", "#dddcdc", "#ecd3c5", "#f5c4ac", "#f7b093",
    "#f4987a", "#eb7d62", "#dd5f4b", "#ca3b37", "#b40426"},
  greys = {"#ffffff", "#f7f7f7", "#f0f0f0", "#e4e4e4", "#d9d9d9", "#cbcbcb",
    "#bdbdbd", "#a9a9a9", "#959595", "#848484", "#727272", "#626262",
    "#515151", "#3a3a3a", "#242424", "#111111", "#000000"},
}

-- the order in which error messages list them
M.names = {"viridis", "blues", "ylorrd", "ylgnbu", "mako", "coolwarm", "greys"}

-- a NaN (or a missing value) is drawn in this grey, whatever the map
M.nan = {0.6, 0.6, 0.6}

-- "#rgb" or "#rrggbb" -> {r, g, b} in [0, 1]; nil when it is not one
function M.hex(s)
  if type(s) ~= "string" then return nil end
  local h = s:match("^#(%x+)$")
  if h and #h == 3 then h = h:gsub(".", "%0%0") end
  if not h or #h ~= 6 then return nil end
  return {tonumber(h:sub(1, 2), 16) / 255, tonumber(h:sub(3, 4), 16) / 255,
          tonumber(h:sub(5, 6), 16) / 255}
end

local cache = {}

-- a name or a list of 2+ hex colours -> a map (a list of {r, g, b});
-- nil and a reason when it is neither
function M.resolve(c)
  if type(c) == "string" then
    local key = c:lower()
    if cache[key] then return cache[key] end
    if not M.maps[key] then
      return nil, string.format("unknown cmap '%s' (%s, or a list of hex colours)",
        c, table.concat(M.names, ", "))
    end
    local map = {}
    for i, h in ipairs(M.maps[key]) do map[i] = M.hex(h) end
    cache[key] = map
    return map
  elseif type(c) == "table" then
    local n = rawlen(c)       -- read raw: no metamethod runs
    if n < 2 then
      return nil, string.format("a cmap list needs 2 or more colours, got %d", n)
    end
    local map = {}
    for i = 1, n do           -- not ipairs: {nil, "#fff", "#000"} has #c == 3
      local h = rawget(c, i)
      map[i] = M.hex(h)
      if not map[i] then
        return nil, string.format("cmap colour %d is not a hex colour like '#3498db': %s",
          i, tostring(h))
      end
    end
    return map
  end
  return nil, "cmap must be a name or a list of hex colours, got a " .. type(c)
end

-- map, t -> r, g, b: t clamped to [0, 1], a NaN gives M.nan
function M.eval(map, t)
  if t ~= t then return M.nan[1], M.nan[2], M.nan[3] end
  t = t < 0 and 0 or t > 1 and 1 or t
  local n = #map - 1
  local i = math.min(math.floor(t * n), n - 1)
  local f = t * n - i
  local a, b = map[i + 1], map[i + 2]
  return a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f, a[3] + (b[3] - a[3]) * f
end

-- WCAG's relative luminance of an sRGB colour
function M.luminance(r, g, b)
  local function lin(c)
    return c <= 0.03928 and c / 12.92 or ((c + 0.055) / 1.055) ^ 2.4
  end
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
end

-- whether the text on a cell of this colour is black rather than white:
-- seaborn's rule for heatmap annotations. (Equal contrast ratios would
-- put the line at 0.179, which gives black on mid reds and teals.)
function M.dark_text(r, g, b)
  return M.luminance(r, g, b) > 0.408
end

-- a component in [0, 1] -> an integer 0..255 (the terminal's rounding)
function M.byte(c)
  if c ~= c then return 128 end
  local v = math.floor(c * 255 + 0.5)
  return v < 0 and 0 or v > 255 and 255 or v
end

-- the default colours of scatter series (matplotlib's cycle)
M.cycle = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

return M
