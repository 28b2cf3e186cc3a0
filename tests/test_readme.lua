-- test_readme.lua: every ```lua block of README.md runs, and prints what
-- its `-->` comments say (whitespace runs compare equal, so a tab that
-- print puts between values may be written as spaces).
local lu = require "luaunit"

local exe = arg and arg[-1] or "build/qkv"
local root = (exe:match("(.*)/build/[^/]*$") or ".") .. "/"

local function blocks()
  local f = assert(io.open(root .. "README.md"))
  local text = f:read("a")
  f:close()
  local list = {}
  for code in text:gmatch("```lua\n(.-)```") do list[#list + 1] = code end
  return list
end

-- the output a block promises: the text after each `-->`, in order
local function expected(code)
  local lines = {}
  for line in code:gmatch("[^\n]*") do
    local out = line:match("%-%->%s?(.*)$")
    if out then lines[#lines + 1] = out end
  end
  return lines
end

local function squash(s) return (s:gsub("%s+", " "):gsub("%s+$", "")) end

local function run(code)
  local printed = {}
  local env = setmetatable({print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    for line in (table.concat(t, "\t", 1, t.n) .. "\n"):gmatch("([^\n]*)\n") do
      printed[#printed + 1] = line
    end
  end}, {__index = _G})
  local chunk = assert(load(code, "=README", "t", env))
  chunk()
  return printed
end

TestReadme = {}

function TestReadme:testBlocksRunAndPrintWhatTheySay()
  local list = blocks()
  lu.assertTrue(#list >= 5, "README has its examples")
  for i, code in ipairs(list) do
    local want, got = expected(code), run(code)
    if #want > 0 then
      lu.assertEquals(#got, #want, "block " .. i .. " prints " .. #got .. " lines")
      for k = 1, #want do
        lu.assertEquals(squash(got[k]), squash(want[k]), "block " .. i .. " line " .. k)
      end
    end
  end
end

os.exit(lu.LuaUnit.run(), true)
