-- test_readme.lua: every ```lua block of README.md runs, and prints what
-- its `-->` comments say (whitespace runs compare equal, so a tab that
-- print puts between values may be written as spaces). The documents stand
-- alone: no path leads out of the repository, every file they name is in
-- it, and the README names the seed documents by their titles.
local lu = require "luaunit"
-- the README's blocks print CPU tensors, also under --device cuda
qkv.set_default_device("cpu")
local shell = dofile("tests/shell.lua")

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

-- a block that starts with this comment runs only where `make model` has
-- fetched the real model (testModelBlocks), and is skipped elsewhere
local NEEDS_MODEL = "^%-%- needs the model"
local MODEL = (os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2") .. "/model.safetensors"

local function check_blocks(model)
  local n = 0
  for i, code in ipairs(blocks()) do
    if (code:find(NEEDS_MODEL) ~= nil) == model then
      n = n + 1
      local want, got = expected(code), run(code)
      if #want > 0 then
        lu.assertEquals(#got, #want, "block " .. i .. " prints " .. #got .. " lines")
        for k = 1, #want do
          lu.assertEquals(squash(got[k]), squash(want[k]), "block " .. i .. " line " .. k)
        end
      end
    end
  end
  return n
end

function TestReadme:testBlocksRunAndPrintWhatTheySay()
  lu.assertTrue(check_blocks(false) >= 5, "README has its examples")
end

function TestReadme:testModelBlocks()
  if not io.open(MODEL) then lu.skip("the real model is not fetched (`make model`)") end
  lu.assertTrue(check_blocks(true) >= 1, "README has an example with the model")
end

-- the repository's markdown files (not build or output folders)
local function markdown()
  local out = shell.sh("find " .. shell.quote(root) .. " -name '*.md' -not -path '*/.git/*' "
                       .. "-not -path '*/build*' -not -path '*/out/*' | sort")
  local list = {}
  for path in out:gmatch("[^\n]+") do list[#list + 1] = path end
  return list
end

TestStandsAlone = {}

function TestStandsAlone:testNoPathLeadsOutside()
  local files = markdown()
  lu.assertTrue(#files >= 3, "found the markdown files")
  for _, path in ipairs(files) do
    local text = shell.read(path)
    local n = 0
    for line in text:gmatch("[^\n]*") do
      n = n + 1
      lu.assertNil(line:find("%.%./"), path .. ":" .. n .. " leads out of the repository: " .. line)
    end
  end
end

-- `scripts/x.lua`, `tests/...`: the files a document names exist (globs
-- and NNN placeholders aside)
function TestStandsAlone:testNamedFilesExist()
  local dirs = {scripts = true, tests = true, bench = true, stdlib = true, vm = true, bindings = true}
  local checked = 0
  for _, path in ipairs(markdown()) do
    for ref in shell.read(path):gmatch("`([^`%s]+)`") do
      local top = ref:match("^(%w+)/")
      local file = ref:gsub(":%d+$", "")
      if top and dirs[top] and not file:find("[*]") and not file:find("NNN") then
        local f = io.open(root .. file)
        lu.assertNotNil(f, path .. " names " .. ref .. ", which is not in the repository")
        f:close()
        checked = checked + 1
      end
    end
  end
  lu.assertTrue(checked >= 20, "checked " .. checked .. " names")
end

-- tests/README.md says what each suite needs: it lists every suite
function TestStandsAlone:testEverySuiteInTestsReadme()
  local text = shell.read(root .. "tests/README.md")
  lu.assertNotNil(text, "tests/README.md")
  local out = shell.sh("ls " .. shell.quote(root .. "tests"))
  local n = 0
  for name in out:gmatch("(test_[%w_]+%.lua)\n") do
    lu.assertStrContains(text, "`" .. name .. "`", false, "tests/README.md lists " .. name)
    n = n + 1
  end
  lu.assertTrue(n >= 20, n .. " suites")
end

function TestStandsAlone:testSeedDocumentsByTitle()
  local text = shell.read(root .. "README.md")
  for _, title in ipairs{
      '000 "Self-Attention and Cross-Attention from Scratch"',
      '001 "Components of Neural Networks"',
      '002 "Implementation and Analysis of Scaled Dot-Product Attention"',
      '003 "Token Alignment and Multi-Head Cross-Attention"',
      '004 "Self Attention & Cross Attention"'} do
    lu.assertStrContains(text, title)
  end
end

os.exit(lu.LuaUnit.run(), true)
