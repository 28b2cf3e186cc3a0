-- test_readme.lua: every ```lua block of README.md and of each chapter in
-- docs/ (tests/helpers/documents.lua lists them) runs, and prints what its `-->`
-- comments say (whitespace runs compare equal, so a tab that print puts
-- between values may be written as spaces). The documents stand alone: no
-- path leads out of the repository, every file they name is in it, every
-- link reaches a file and a heading, the README's contents link every
-- chapter, and the README names the seed documents by their titles.
local lu = require "luaunit"
-- the documents' blocks print CPU tensors, also under --device cuda
qkv.set_default_device("cpu")
local shell = dofile("tests/helpers/shell.lua")
local documents = dofile("tests/helpers/documents.lua")

local exe = arg and arg[-1] or "build/qkv"
local root = (exe:match("(.*)/build/[^/]*$") or ".") .. "/"

-- every ```lua block of every document, each with its name: "docs/x.md block 2"
local function blocks()
  local list = {}
  for _, d in ipairs(documents.all(root)) do
    local i = 0
    for code in d.text:gmatch("```lua\n(.-)```") do
      i = i + 1
      list[#list + 1] = {name = d.path .. " block " .. i, code = code}
    end
  end
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

local function run(code, name)
  local printed = {}
  local env = setmetatable({print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    for line in (table.concat(t, "\t", 1, t.n) .. "\n"):gmatch("([^\n]*)\n") do
      printed[#printed + 1] = line
    end
  end}, {__index = _G})
  local chunk = assert(load(code, "=" .. name, "t", env))
  chunk()
  return printed
end

TestReadme = {}

-- a block that starts with this comment runs only where `make model` has
-- fetched the real model (testModelBlocks), and is skipped elsewhere
local NEEDS_MODEL = "^%-%- needs the model"
local MODEL = (os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2") .. "/model.safetensors"

-- a block that starts with this comment needs a real GPU: the suite that
-- checks it there runs it (docs/cuda.md's: tests/backends/test_cudnn.lua)
local ON_A_GPU = "^%-%- on a GPU"

local function check_blocks(model)
  local n = 0
  for _, b in ipairs(blocks()) do
    if (b.code:find(NEEDS_MODEL) ~= nil) == model and not b.code:find(ON_A_GPU) then
      n = n + 1
      local want, got = expected(b.code), run(b.code, b.name)
      if #want > 0 then
        lu.assertEquals(#got, #want, b.name .. " prints " .. #got .. " lines")
        for k = 1, #want do
          lu.assertEquals(squash(got[k]), squash(want[k]), b.name .. " line " .. k)
        end
      end
    end
  end
  return n
end

function TestReadme:testBlocksRunAndPrintWhatTheySay()
  lu.assertTrue(check_blocks(false) >= 25, "the documents have their examples")
end

function TestReadme:testModelBlocks()
  if not io.open(MODEL) then lu.skip("the real model is not fetched (`make model`)") end
  lu.assertTrue(check_blocks(true) >= 1, "the documents have an example with the model")
end

-- the documents are README.md and every docs/*.md, whatever their names
function TestReadme:testEveryChapterIsADocument()
  local list = documents.list(root)
  lu.assertEquals(list[1], "README.md")
  local out = shell.sh("ls " .. shell.quote(root .. "docs"))
  local n = 0
  for name in out:gmatch("([^\n]+%.md)\n") do
    lu.assertStrContains(table.concat(list, " "), "docs/" .. name)
    n = n + 1
  end
  lu.assertEquals(#list, n + 1)
  lu.assertTrue(n >= 10, n .. " chapters")
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

-- the folder of a markdown file, relative to the root ("" or "docs/")
local function folder(path)
  return path:sub(#root + 1):match("^(.*/)") or ""
end

-- a path written in the file at `path`, resolved against its folder:
-- the path from the root, or nil when it climbs above the root
local function resolve(path, ref)
  local parts = {}
  for p in (folder(path) .. ref):gmatch("[^/]+") do
    if p == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif p ~= "." then
      parts[#parts + 1] = p
    end
  end
  return table.concat(parts, "/")
end

-- a path with `..` in it (docs/x.md may say ../README.md) stays inside
function TestStandsAlone:testNoPathLeadsOutside()
  local files = markdown()
  lu.assertTrue(#files >= 3, "found the markdown files")
  for _, path in ipairs(files) do
    local text = shell.read(path)
    local n = 0
    for line in text:gmatch("[^\n]*") do
      n = n + 1
      for ref in line:gmatch("[^%s%(%)%[%]`'\"<>]*%.%./[^%s%(%)%[%]`'\"<>]*") do
        lu.assertNotNil(resolve(path, ref), path .. ":" .. n .. " leads out of the repository: " .. line)
      end
    end
  end
  lu.assertNil(resolve(root .. "docs/x.md", "../../x"))
  lu.assertEquals(resolve(root .. "docs/x.md", "../README.md"), "README.md")
end

-- a heading's anchor as GitHub makes it: lower case, punctuation dropped,
-- spaces as hyphens, "-1", "-2" after a repeated one
local function anchors(text)
  local set, seen, fenced = {}, {}, false
  for line in text:gmatch("[^\n]*") do
    if line:match("^```") then fenced = not fenced end
    local title = not fenced and line:match("^#+%s+(.-)%s*$")
    if title then
      local a = title:lower():gsub("[^%w%s%-_\128-\255]", ""):gsub("%s", "-")
      if seen[a] then
        seen[a] = seen[a] + 1
        a = a .. "-" .. seen[a]
      else
        seen[a] = 0
      end
      set[a] = true
    end
  end
  return set
end

-- every relative link, [text](path#anchor), names a file of the repository
-- and, with an anchor, one of that file's headings
function TestStandsAlone:testLinksReachFilesAndHeadings()
  local checked = 0
  for _, path in ipairs(markdown()) do
    local text = shell.read(path)
    for target in text:gmatch("%]%(([^%)%s]+)%)") do
      if not target:match("^%a+:") then
        local file, anchor = target:match("^([^#]*)#?(.*)$")
        local where = file == "" and path:sub(#root + 1) or resolve(path, file)
        lu.assertNotNil(where, path .. " links outside the repository: " .. target)
        local body = shell.read(root .. where)
        lu.assertNotNil(body, path .. " links to " .. target .. ", which is not in the repository")
        if anchor ~= "" then
          lu.assertTrue(anchors(body)[anchor], path .. " links to " .. target ..
                        ", but " .. where .. " has no heading with that anchor")
        end
        checked = checked + 1
      end
    end
  end
  lu.assertTrue(checked >= 40, "checked " .. checked .. " links")
  local a = anchors("# A: b, c\n## `x.y` and z\n```\n# not a heading\n```\n## A: b, c\n")
  lu.assertEquals(a, {["a-b-c"] = true, ["xy-and-z"] = true, ["a-b-c-1"] = true})
end

-- the README's contents link every chapter, and every chapter links back
function TestStandsAlone:testContentsLinkEveryChapter()
  local readme = shell.read(root .. "README.md")
  for _, path in ipairs(documents.list(root)) do
    if path ~= "README.md" then
      lu.assertStrContains(readme, "](" .. path .. ")", false, "README.md links " .. path)
      lu.assertStrContains(shell.read(root .. path), "](../README.md", false,
                           path .. " links back to README.md")
    end
  end
end

-- `scripts/x.lua`, `tests/...`: the files a document names exist (globs
-- and NNN placeholders aside)
-- the folders tests/README.md names from tests/
local TESTS_DIRS = {core = true, backends = true, autograd = true, cli = true, project = true,
                    helpers = true, tools = true, fixtures = true, fuzz = true, peers = true}

function TestStandsAlone:testNamedFilesExist()
  local dirs = {scripts = true, tests = true, bench = true, stdlib = true, vm = true, bindings = true,
                docs = true}
  local checked = 0
  for _, path in ipairs(markdown()) do
    for ref in shell.read(path):gmatch("`([^`%s]+)`") do
      local top = ref:match("^(%w+)/")
      local file = ref:gsub(":%d+$", "")
      local here = path:match("/tests/README%.md$") and TESTS_DIRS[top]
      if top and (dirs[top] or here) and not file:find("[*]") and not file:find("NNN") then
        -- from the root, or from the document's own folder (tests/README.md
        -- names bindings/test_npy.lua, which is tests/bindings/test_npy.lua)
        local f = io.open(root .. file) or io.open((path:match("^(.*/)") or "") .. file)
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
  -- ours: tests/<layer>/test_*.lua (peers/ holds others' suites)
  local out = shell.sh("cd " .. shell.quote(root .. "tests") .. " && ls */test_*.lua")
  local n = 0
  for name in out:gmatch("([%w_]+/test_[%w_]+%.lua)\n") do
    if not name:match("^peers/") then
      lu.assertStrContains(text, "`" .. name .. "`", false, "tests/README.md lists " .. name)
      n = n + 1
    end
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
