-- test_tour.lua: README's "A ten-minute tour", run as a reader runs it,
-- from the text of README.md (so that an edit of the tour is tested as
-- written): the REPL session typed line by line gives the lines printed
-- under it; step 2's commands (-e, --help, --version, a pipe, stock Lua
-- with the module, the padding-mask script and the example block); step
-- 4's suite saved as test_attention_rows.lua and run by `qkv test`; step
-- 5's `make notebook` and nbconvert line where the peers' venv is (else
-- skipped, saying so). Step 3's block runs in test_readme.lua with every
-- document's Lua blocks.
local lu = require "luaunit"
local shell = dofile("tests/helpers/shell.lua")
local quote, sh = shell.quote, shell.sh

local EXE = arg and arg[-1] or "build/qkv"
if not EXE:match("^/") then EXE = (shell.sh("pwd"):gsub("\n$", "")) .. "/" .. EXE end
local ROOT = "./"
local TMP = shell.tmpdir()
local _ <close> = setmetatable({}, {__close = function() os.execute("rm -rf " .. quote(TMP)) end})

local function readme()
  local f = assert(io.open(ROOT .. "README.md"))
  local s = f:read("a")
  f:close()
  local a = s:find("\n## A ten%-minute tour\n")
  assert(a, "README.md has no tour")
  local b = s:find("\n## ", a + 5)
  return s:sub(a, b)
end
local TOUR = readme()

-- the tour's step n, up to the next step
local function step(n)
  local a = TOUR:find("\n### " .. n .. "%. ")
  assert(a, "the tour has no step " .. n)
  local b = TOUR:find("\n### ", a + 5) or #TOUR
  return TOUR:sub(a, b)
end

-- the indented lines of a text (a markdown code block by indentation),
-- block by block, each line without its 4 spaces
local function blocks(text)
  local out, cur = {}, nil
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^    ") then
      cur = cur or {}
      cur[#cur + 1] = line:sub(5)
    elseif line ~= "" and cur then
      out[#out + 1] = cur
      cur = nil
    end
  end
  if cur then out[#out + 1] = cur end
  return out
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

TestTour = {}

-- the session as printed: what follows "> " and ">> " typed, the rest
-- (up to "...", which elides the help text) what the REPL prints
function TestTour:testTheReplSession()
  local b = blocks(step(1))[1]
  lu.assertEquals(b[1], "$ build/qkv")
  local typed, want = {}, {}
  for i = 2, #b do
    if b[i] == "..." then break end
    want[#want + 1] = b[i]
    local line = b[i]:match("^>>? (.*)$")
    if line then typed[#typed + 1] = line end
  end
  lu.assertTrue(#typed >= 5 and #want >= 10, "the session is there")
  -- with standard input a pipe, -i runs the REPL as it runs on a terminal
  write(TMP .. "/typed", table.concat(typed, "\n") .. "\n")
  local out, code = sh(quote(EXE) .. " -i /dev/null < " .. quote(TMP .. "/typed"))
  lu.assertEquals(code, 0, out)
  local got = {}
  for line in out:gmatch("([^\n]*)\n") do got[#got + 1] = line end
  for i, line in ipairs(want) do
    lu.assertEquals(got[i], line, "line " .. i .. " of the session")
  end
end

-- each command of step 2, as printed (build/qkv is the executable here)
function TestTour:testTheScriptCommands()
  local text = step(2)
  local cmds = blocks(text)[1]
  lu.assertStrContains(cmds[2], "build/qkv -e 'print(qkv.ones(2, 2))'")
  local function run(cmd) return sh(cmd:gsub("build/qkv", quote(EXE))) end
  local out, code = run(cmds[2])
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "tensor([[1., 1.],\n        [1., 1.]])\n")
  for _, flag in ipairs{"--help", "--version"} do
    out, code = run("build/qkv " .. flag)
    lu.assertEquals(code, 0, flag .. ": " .. out)
  end
  lu.assertStrContains(cmds[4], "| build/qkv")
  out, code = run(cmds[4])
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "tensor([[1., 0.],\n        [0., 1.]])\n")
  -- stock Lua with the module: where lua5.4 is (its line as printed)
  local lua = blocks(text)[2][1]
  lu.assertStrContains(lua, "lua5.4 -e")
  if sh("command -v lua5.4"):match("lua5.4") then
    out, code = sh(lua)
    lu.assertEquals(code, 0, out)
    lu.assertEquals(out, "tensor([[1., 1.],\n        [1., 1.]])\n")
  end
  -- the padding-mask example and the script it comes from, figures in a
  -- folder of the test's (QKV_OUT)
  local example = table.concat(blocks(text)[3], "\n")
  write(TMP .. "/padding.lua", example .. "\n")
  out, code = sh("QKV_OUT=" .. quote(TMP) .. " " .. quote(EXE) .. " " .. quote(TMP .. "/padding.lua"))
  lu.assertEquals(code, 0, out)
  lu.assertNotNil(io.open(TMP .. "/padding.png"), "the example wrote its figure")
  lu.assertStrContains(text, "`build/qkv scripts/002_padding_mask.lua`")
  out, code = sh("QKV_OUT=" .. quote(TMP) .. " " .. quote(EXE) .. " scripts/002_padding_mask.lua")
  lu.assertEquals(code, 0, out)
end

-- step 4's suite, saved under the name the tour gives it, run as it says
function TestTour:testTheSuite()
  local text = step(4)
  local code_block = text:match("\n```\n(.-)\n```\n")
  lu.assertNotNil(code_block, "step 4 has its suite")
  lu.assertStrContains(text, "`build/qkv test test_attention_rows.lua` runs it")
  write(TMP .. "/test_attention_rows.lua", code_block .. "\n")
  local out, code = sh("cd " .. quote(TMP) .. " && " .. quote(EXE) .. " test test_attention_rows.lua")
  lu.assertEquals(code, 0, out)
  -- its GPU test runs where there is one, and is skipped elsewhere
  local passed = tonumber(out:match("(%d+) passed, 0 failed"))
  lu.assertTrue(passed ~= nil and passed >= 1, out)
end

-- step 5: `make notebook` and the nbconvert line, as printed; they need
-- Jupyter in the peers' venv (make peers), which make test tries to make
function TestTour:testTheNotebook()
  local b = blocks(step(5))[1]
  lu.assertEquals(b[1]:match("^(%S+ %S+)"), "make notebook")
  if not io.open("build/pyref/bin/jupyter") then
    lu.skip("no build/pyref/bin/jupyter (make peers could not install Jupyter here)")
  end
  local html = "build/002_scaled_dot_product.html"
  os.remove(html)
  local out, code = sh("make --no-print-directory notebook")
  lu.assertEquals(code, 0, out)
  lu.assertNotNil(io.open(html), "make notebook wrote " .. html .. ":\n" .. out)
  os.remove(html)
  out, code = sh(b[2])
  lu.assertEquals(code, 0, out)
  local f = assert(io.open(html), "the nbconvert line wrote " .. html)
  local page = f:read("a")
  f:close()
  lu.assertStrContains(page, "tensor([[")            -- a cell's output, run by the kernel
end

os.exit(lu.LuaUnit.run(), true)
