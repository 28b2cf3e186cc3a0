-- test_peer_luaunit.lua: a peer's suite that no one here wrote. LuaUnit's
-- own unit tests (tests/peers/luaunit/, its tag LUAUNIT_V3_4, vendored
-- unchanged) pass under qkv with the counts stock lua5.4 gives them, under
-- `qkv test` and run alone. They run LuaUnit inside their tests, with
-- failures on purpose; the runner counts only a file's outermost runs
-- (test_nested_runs.lua checks that on its own).
local lu = require "luaunit"

local EXE = arg and arg[-1] or "build/qkv"
local PEER = "tests/peers/luaunit"

local shell = dofile("tests/helpers/shell.lua")
local quote = shell.quote

-- what stock lua5.4 reports for the pinned suite (checked below when
-- lua5.4 is installed)
local PINNED = {tests = 206, successes = 206, failures = 0, errors = 0, skipped = 0}

local function lastline(out) return out:match("([^\n]*)\n?$") end

-- the executable as a path that still works from the peer's folder
local function exe_from_anywhere()
  if EXE:sub(1, 1) == "/" or not EXE:find("/", 1, true) then return EXE end
  return (shell.sh("pwd"):gsub("\n$", "")) .. "/" .. EXE
end

-- runs the words in the peer's folder, as its own run_unit_tests.lua
-- expects; returns the output (stdout and stderr) and the exit status
local function inpeer(...)
  local words = {}
  for i, w in ipairs{...} do words[i] = quote(w) end
  return shell.sh("cd " .. quote(PEER) .. " && " .. table.concat(words, " "))
end

-- the counts of LuaUnit's last "Ran N tests in ..." line
local function luaunit_counts(out)
  local line
  for l in out:gmatch("Ran %d+ tests[^\n]*") do line = l end
  if not line then return nil end
  local function n(pat) return tonumber(line:match("(%d+) " .. pat)) or 0 end
  return {tests = n("tests"), successes = n("success"), failures = n("failure"),
          errors = n("error"), skipped = n("skipped")}
end

-- the closing line `qkv test` prints for these counts
local function closing(c)
  local line = ("%d passed, %d failed"):format(c.successes, c.failures + c.errors)
  return c.skipped > 0 and line .. (", %d skipped"):format(c.skipped) or line
end

local function have_lua54()
  return select(2, shell.sh("command -v lua5.4")) == 0
end

-- stock lua5.4's counts when it is installed, else the pinned ones
local reference
local function stock()
  if reference then return reference end
  reference = PINNED
  if have_lua54() then
    local out, code = inpeer("lua5.4", "run_unit_tests.lua")
    lu.assertEquals(code, 0, out)
    reference = luaunit_counts(out)
  end
  return reference
end


TestPeerLuaUnit = {}

-- the suite is the one for the LuaUnit that qkv loads (Debian's lua-unit)
function TestPeerLuaUnit:testLuaUnitIsThePinnedVersion()
  lu.assertEquals(lu.VERSION, "3.4", "tests/peers/luaunit/ holds LuaUnit 3.4's suite; "
                  .. "vendor the suite of the LuaUnit installed")
end

function TestPeerLuaUnit:testStockLua()
  if not have_lua54() then lu.skip("lua5.4 is not installed") end
  lu.assertEquals(stock(), PINNED)
end

-- the runner script and the suite file, each run as `qkv <args...> file`,
-- give stock Lua's counts and qkv's closing line for them
local function gives_stocks_counts(...)
  local want, args = stock(), table.pack(...)
  for _, file in ipairs{"run_unit_tests.lua", "test/test_luaunit.lua"} do
    args[args.n + 1] = file
    local out, code = inpeer(exe_from_anywhere(), table.unpack(args, 1, args.n + 1))
    lu.assertEquals(luaunit_counts(out), want, file .. ":\n" .. out)
    lu.assertEquals(lastline(out), closing(want), file)
    lu.assertEquals(code, 0, file)
  end
end

-- `qkv test` on its runner script, and on the suite file by itself
function TestPeerLuaUnit:testUnderQkvTest() gives_stocks_counts("test") end

-- each run alone, as a script
function TestPeerLuaUnit:testRunDirectly() gives_stocks_counts() end

-- `qkv test tests/` finds the suite too (test/test_luaunit.lua), and it
-- counts as it does alone
function TestPeerLuaUnit:testFoundInTests()
  local out, code, last = shell.exe(EXE, "test", "tests/peers")
  lu.assertEquals(shell.ran(out), {PEER .. "/test/test_luaunit.lua"})
  lu.assertEquals(luaunit_counts(out), stock(), out)
  lu.assertEquals({code, last}, {0, closing(stock())})
end

os.exit(lu.LuaUnit.run(), true)
