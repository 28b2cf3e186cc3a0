-- kernel/history.lua: the qkv kernel's answer to history_request, as
-- IPython's HistoryManager answers it (ipykernel's do_history): `tail`
-- gives the last n cells, `range` the cells start <= line < stop of a
-- session, `search` the cells whose code matches a glob (SQLite's GLOB:
-- * ? [...] [^...], case-sensitive, the whole code), `unique` keeping one
-- cell per code (its latest) and `n` the last n matches. The kernel keeps
-- one session, its own, numbered 1 (0 asks for the current one too); the
-- entries are {n, code, output text or nil}, oldest first.

local M = {}

M.SESSION = 1

-- a Lua pattern of a glob's class [...] from the text after '[', and
-- where it ends; nil when the '[' is not closed (then it is literal)
local function class(glob, i)
  local j, out = i, {"["}
  if glob:sub(j, j) == "^" or glob:sub(j, j) == "!" then out[2], j = "^", j + 1 end
  local first = true
  while j <= #glob do
    local c = glob:sub(j, j)
    if c == "]" and not first then
      out[#out + 1] = "]"
      return table.concat(out), j
    end
    out[#out + 1] = (c == "-" and not first) and c or c:gsub("%W", "%%%0")
    first, j = false, j + 1
  end
  return nil
end

-- the anchored Lua pattern that matches what glob matches
function M.glob(glob)
  local out, i = {"^"}, 1
  while i <= #glob do
    local c = glob:sub(i, i)
    if c == "*" then
      out[#out + 1] = ".*"
    elseif c == "?" then
      out[#out + 1] = utf8.charpattern          -- one character, not one byte
    elseif c == "[" and class(glob, i + 1) then
      local p, j = class(glob, i + 1)
      out[#out + 1], i = p, j
    else
      out[#out + 1] = c:gsub("%W", "%%%0")
    end
    i = i + 1
  end
  out[#out + 1] = "$"
  return table.concat(out)
end

-- the last n of list (all of it when n is not a count)
local function last(list, n)
  n = math.tointeger(n)
  if not n or n < 0 or n >= #list then return list end
  return table.move(list, #list - n + 1, #list, 1, {})
end

local function search(history, c)
  local pat = M.glob(type(c.pattern) == "string" and c.pattern or "*")
  local found = {}
  for _, h in ipairs(history) do
    if h[2]:find(pat) then found[#found + 1] = h end
  end
  if c.unique == true then
    local latest, kept = {}, {}
    for i, h in ipairs(found) do latest[h[2]] = i end
    for i, h in ipairs(found) do
      if latest[h[2]] == i then kept[#kept + 1] = h end
    end
    found = kept
  end
  return last(found, c.n)
end

local function range(history, c)
  local session = math.tointeger(c.session) or 0
  if session ~= 0 and session ~= M.SESSION then return {} end
  local start, stop = tonumber(c.start) or 0, tonumber(c.stop)
  local out = {}
  for _, h in ipairs(history) do
    if h[1] >= start and (stop == nil or h[1] < stop) then out[#out + 1] = h end
  end
  return out
end

-- the entries that the request's content asks for
function M.query(history, c)
  if c.hist_access_type == "range" then return range(history, c) end
  if c.hist_access_type == "search" then return search(history, c) end
  return last(history, c.n)
end

return M
