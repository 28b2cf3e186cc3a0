-- gen_api.lua: the API reference (docs/api.md), generated from the
-- docstring registry (stdlib/qkv/doc/): one line per function, grouped by
-- namespace, with its signature and the first sentence of its description.
--
--   build/qkv tests/tools/gen_api.lua           prints the block
--   build/qkv tests/tools/gen_api.lua --write   puts it in docs/api.md between
--                                         <!-- api:begin --> and <!-- api:end -->
--
-- tests/project/test_doc.lua loads this file (dofile) for M.block and M.current,
-- and checks that docs/api.md holds what M.block makes now.

local doc = require "qkv.doc"

local M = {}

M.BEGIN, M.END = "<!-- api:begin -->", "<!-- api:end -->"

-- docs/api.md beside this file's folder, wherever qkv was started from
local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "tests/tools/gen_api.lua"
M.NAME = "docs/api.md"
M.PATH = (here:match("^(.*)/[^/]*$") or ".") .. "/../../" .. M.NAME

-- markdown would read a * as emphasis
local function escape(s) return (s:gsub("%*", "\\*")) end

-- the text between the markers, blank lines around it
function M.block()
  local out = {""}
  for _, ns in ipairs(doc.namespaces()) do
    for _, g in ipairs(ns.groups) do
      if #g.entries > 0 then
        local title = #ns.groups > 1 and ns.title .. ": " .. g.name or ns.title
        out[#out + 1] = "## " .. title
        out[#out + 1] = ""
        for _, e in ipairs(g.entries) do
          out[#out + 1] = "- `" .. e.sig .. "` — " .. escape(doc.first_sentence(e.doc))
        end
        out[#out + 1] = ""
      end
    end
  end
  return table.concat(out, "\n") .. "\n"
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

-- the file's text, and where the block between the markers starts and
-- ends in it (nil when the markers are missing)
function M.current(path)
  local text = read(path or M.PATH)
  local b = text:find(M.BEGIN, 1, true)
  local e = b and text:find(M.END, b, true)
  if not e then return text end
  local first = b + #M.BEGIN + 1            -- after the marker's newline
  return text, first, e - 1
end

function M.write(path)
  path = path or M.PATH
  local text, first, last = M.current(path)
  if not first then
    error("gen_api: " .. path .. " has no " .. M.BEGIN .. " ... " .. M.END .. " markers", 0)
  end
  local new = text:sub(1, first - 1) .. M.block() .. text:sub(last + 1)
  if new == text then return false end
  local f = assert(io.open(path, "wb"))
  f:write(new)
  f:close()
  return true
end

if arg and arg[0] and arg[0]:match("gen_api%.lua$") then
  if arg[1] == "--write" then
    print(M.write() and "gen_api: " .. M.NAME .. " updated" or "gen_api: " .. M.NAME .. " is up to date")
  elseif arg[1] == nil then
    io.write(M.block(), "\n")
  else
    io.stderr:write("usage: qkv tests/tools/gen_api.lua [--write]\n")
    os.exit(2)
  end
end

return M
