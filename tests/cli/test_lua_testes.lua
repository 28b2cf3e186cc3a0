-- test_lua_testes.lua: qkv replaces lua, so Lua 5.4.4's own test suite
-- (tests/peers/lua-5.4.4/, the testes/ folder at tag v5.4.4, vendored
-- unchanged) gives under build/qkv what it gives under stock lua5.4, file
-- by file: the exit status, the error line when there is one, and the last
-- three lines of the output, their digits masked (dates, pids, random
-- seeds and timings differ from run to run). main.lua tests the stand-alone interpreter itself
-- (options, LUA_INIT, LUA_PATH, `arg`, the REPL, Ctrl-C) and attrib.lua
-- `require`, the C libraries included.
--
-- `make` copies the folder to build/lua-testes/ (attrib.lua writes into
-- its libs/) and builds the C libraries attrib.lua loads there. Each file
-- runs from that folder as Lua's own instructions say, `lua -e"_U=true"
-- file` (all.lua is their portable run of the whole suite: with _U it
-- sets _soft and _port; a file run alone runs all its tests, the Linux
-- ones too), with an empty pipe as standard input (files.lua checks that
-- stdin cannot seek), in a session of its own whose leftovers are killed
-- after it (main.lua's Ctrl-C test leaves a script spinning when it fails).
--
-- Both interpreters run through the same small wrapper, which starts the
-- interpreter as "$0" (main.lua runs itself as arg[-k]) and 0.3 s late when
-- its output is a pipe: main.lua's Ctrl-C test reads the pid that the
-- shell's `echo $!` writes and then the script's first line from one pipe,
-- and an interpreter that starts faster than the shell echoes makes
-- main.lua fail under load, stock lua5.4 most of all.
local lu = require "luaunit"

local shell = dofile("tests/helpers/shell.lua")
local quote, sh = shell.quote, shell.sh

local EXE = arg and arg[-1] or "build/qkv"
local ROOT = (sh("pwd"):gsub("\n$", ""))
local QKV = EXE:sub(1, 1) == "/" and EXE or ROOT .. "/" .. EXE
local TESTES = (QKV:match("(.*)/") or ".") .. "/lua-testes"

-- every file runs but these
local LEFT_OUT = {
  ["heavy.lua"] = "it allocates until memory runs out, never run by all.lua either",
}
local FILES = {}
for f in sh("ls " .. quote(ROOT .. "/tests/peers/lua-5.4.4/testes")):gmatch("([%w_]+%.lua)\n") do
  if not LEFT_OUT[f] then FILES[#FILES + 1] = f end
end

local LIMIT = 40   -- seconds for one file under one interpreter (errors.lua: 6)

-- what Debian 12's lua5.4 (5.4.4) gives in build/lua-testes, as run()
-- reads it; qkv is held to it where lua5.4 is not installed, and lua5.4's
-- exit statuses to it where it is. `LUA_TESTES_PIN=1 build/qkv
-- tests/cli/test_lua_testes.lua` prints it again from lua5.4.
local PINNED = {
  ["all.lua"] = {status = 0, err = nil,
    tail = {"final OK !!!", ".>>> closing state <<<", ""}},
  ["api.lua"] = {status = 0, err = nil,
    tail = {"", " >>> testC not active: skipping API tests <<<", ""}},
  ["attrib.lua"] = {status = 0, err = nil,
    tail = {"testing assignments, logical operators, and constructors", "+", "OK"}},
  ["big.lua"] = {status = 1, err = "attempt to yield from outside a coroutine",
    tail = {"\9[C]: in function 'coroutine.yield'",
            "\9big.lua:#: in main chunk",
            "\9[C]: in ?"}},
  ["bitwise.lua"] = {status = 0, err = nil,
    tail = {"+", "+", "OK"}},
  ["bwcoercion.lua"] = {status = 0, err = nil,
    tail = {""}},
  ["calls.lua"] = {status = 0, err = nil,
    tail = {"+", "testing binary chunks", "OK"}},
  ["closure.lua"] = {status = 0, err = nil,
    tail = {"testing closures", "+", "OK"}},
  ["code.lua"] = {status = 0, err = nil,
    tail = {"", " >>> testC not active: skipping opcode tests <<<", ""}},
  ["constructs.lua"] = {status = 0, err = nil,
    tail = {"+", "+", "OK"}},
  ["coroutine.lua"] = {status = 0, err = nil,
    tail = {" >>> testC not active: skipping coroutine API tests <<<", "", "OK"}},
  ["cstack.lua"] = {status = 0, err = nil,
    tail = {"final count: \9#", "OK", "."}},
  ["db.lua"] = {status = 0, err = nil,
    tail = {"testing traceback sizes",
            "testing debug functions on chunk without debug info",
            "OK"}},
  ["errors.lua"] = {status = 0, err = nil,
    tail = {"testing tokens in error messages", "+", "OK"}},
  ["events.lua"] = {status = 0, err = nil,
    tail = {"+", "+", "OK"}},
  ["files.lua"] = {status = 0, err = nil,
    tail = {"  #-byte time_t", "test done on #/#/#, at #:#:#", "Lua #.#"}},
  ["gc.lua"] = {status = 0, err = nil,
    tail = {"OK", ">>> closing state <<<", ""}},
  ["gengc.lua"] = {status = 0, err = nil,
    tail = {" >>> testC not active: skipping some generational tests <<<", "", "OK"}},
  ["goto.lua"] = {status = 0, err = nil,
    tail = {"OK"}},
  ["literals.lua"] = {status = 0, err = nil,
    tail = {" >>> pt_BR locale not available: skipping decimal point tests <<<", "", "OK"}},
  ["locals.lua"] = {status = 0, err = nil,
    tail = {"to-be-closed variables in coroutines", ".OK", "."}},
  ["main.lua"] = {status = 0, err = nil,
    tail = {"(if test fails now, it may leave a Lua script running in background, pid #)",
            "done (with # kills)",
            "OK"}},
  ["math.lua"] = {status = 0, err = nil,
    tail = {"float random range in # calls: [#.#, #.#]",
            "integer random range in # calls: [minint + #ppm, maxint - #ppm]",
            "OK"}},
  ["nextvar.lua"] = {status = 0, err = nil,
    tail = {"+", "testing floats in numeric for", "OK"}},
  ["pm.lua"] = {status = 0, err = nil,
    tail = {"+", "big strings", "OK"}},
  ["sort.lua"] = {status = 0, err = nil,
    tail = {"Invert-sorting other # elements in #.# msec., with # comparisons",
            "sorting # equal elements in #.# msec.",
            "OK"}},
  ["strings.lua"] = {status = 0, err = nil,
    tail = {" >>> testC not active: skipping 'pushfstring' tests <<<", "", "OK"}},
  ["tpack.lua"] = {status = 0, err = nil,
    tail = {"testing pack/unpack of strings", "testing alignment", "OK"}},
  ["tracegc.lua"] = {status = 0, err = nil,
    tail = {""}},
  ["utf8.lua"] = {status = 0, err = nil,
    tail = {"testing UTF-# library", "ok"}},
  ["vararg.lua"] = {status = 0, err = nil,
    tail = {"+", "+", "OK"}},
  ["verybig.lua"] = {status = 0, err = nil,
    tail = {"testing large programs (>#k)", "+", "OK"}},
}

-- the output's last n lines, digits masked
local function tail(out, n)
  local lines = {}
  for line in (out:gsub("\n$", "") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local last = {}
  for i = math.max(1, #lines - n + 1), #lines do last[#last + 1] = (lines[i]:gsub("%d+", "#")) end
  return last
end

local TMP
local WRAPPERS = {}

local function have(cmd) return select(2, sh("command -v " .. cmd)) == 0 end

-- <TMP>/<name>/lua, which runs interp as itself
local function wrapper(name, interp)
  local dir = TMP .. "/" .. name
  sh("mkdir -p " .. quote(dir))
  local path = dir .. "/lua"
  shell.write(path, "#!/bin/bash\n[ -p /dev/stdout ] && " .. quote(WRAPPERS.sleep) .. " 0.3\n"
                    .. "exec -a \"$0\" " .. quote(interp) .. " \"$@\"\n")
  sh("chmod +x " .. quote(path))
  return path
end

-- what the file gives under the wrapper: {status =, err =, tail =}, and
-- the whole output
local function run(lua, file)
  local out, pgid = TMP .. "/out", TMP .. "/pgid"
  local session = "setsid -w bash -c 'echo $$ > \"$0\"; exec timeout %d \"$@\"' %s"
  local cmd = ("cd %s && : | " .. session .. " %s -e_U=true %s > %s 2>&1; echo $?"):format(
    quote(TESTES), LIMIT, quote(pgid), quote(lua), quote(file), quote(out))
  local status = tonumber((sh(cmd)))
  local pid = tonumber(shell.read(pgid) or "")
  if pid then sh("kill -KILL -- -" .. pid .. " 2>/dev/null") end
  local text = (shell.read(out) or ""):gsub((lua:gsub("%p", "%%%0")), "lua")
  return {status = status, err = text:match("\nlua: ([^\n]*)") or text:match("^lua: ([^\n]*)"),
          tail = tail(text, 3)}, text
end

-- lua5.4's own outcome, or the pinned one when it is not installed
local function stock(file)
  if not WRAPPERS.stock then return PINNED[file] end
  local want = run(WRAPPERS.stock, file)
  lu.assertEquals(want.status, PINNED[file].status,
                  "lua5.4 exits with another status than the pinned one for " .. file)
  return want
end

TestLuaTestes = {}

function TestLuaTestes.setUp()
  if qkv.default_device() == "cuda" then
    lu.skip("the testes run no tensors: the first pass (on the CPU) ran them")
  end
  for _, cmd in ipairs{"bash", "setsid", "timeout", "sleep"} do
    if not have(cmd) then lu.skip(cmd .. " is not installed; the runs need it") end
  end
  if not io.open(TESTES .. "/libs/lib1.so") then
    lu.skip(TESTES .. "/ is not there: `make` copies tests/peers/lua-5.4.4/testes there")
  end
  if TMP then return end
  TMP = shell.tmpdir()
  WRAPPERS.sleep = (sh("command -v sleep"):gsub("\n$", ""))
  WRAPPERS.qkv = wrapper("qkv", QKV)
  if have("lua5.4") then
    WRAPPERS.stock = wrapper("stock", (sh("command -v lua5.4"):gsub("\n$", "")))
  end
end

-- every file has a pinned outcome, and the pinned files are the files
function TestLuaTestes:testPinnedCoversEveryFile()
  local names = {}
  for name in pairs(PINNED) do names[#names + 1] = name end
  table.sort(names)
  lu.assertEquals(names, FILES)
  lu.assertTrue(#FILES >= 30, #FILES .. " files")
end

-- main.lua and attrib.lua pass (as under lua5.4), the rest as lua5.4 does
for _, file in ipairs(FILES) do
  TestLuaTestes["test_" .. file:gsub("%.lua$", "")] = function()
    local want = stock(file)
    local got, text = run(WRAPPERS.qkv, file)
    lu.assertEquals(got, want, file .. " under qkv:\n" .. text:sub(-3000))
    if file == "main.lua" or file == "attrib.lua" then
      lu.assertEquals({got.status, got.tail[#got.tail]}, {0, "OK"}, file)
    end
  end
end

-- LUA_TESTES_PIN=1: lua5.4's outcomes as PINNED's source
local function pin()
  TestLuaTestes.setUp()
  assert(WRAPPERS.stock, "lua5.4 is not installed")
  for _, file in ipairs(FILES) do
    local r = run(WRAPPERS.stock, file)
    local lines = {}
    for i, l in ipairs(r.tail) do lines[i] = ("%q"):format(l) end
    local list = table.concat(lines, ", ")
    if #list > 80 then list = table.concat(lines, ",\n            ") end
    print(("  [%q] = {status = %d, err = %s,\n    tail = {%s}},"):format(
      file, r.status, r.err and ("%q"):format(r.err) or "nil", list))
  end
end

local code = os.getenv("LUA_TESTES_PIN") and (pin() or 0) or lu.LuaUnit.run()
if TMP then sh("rm -rf " .. quote(TMP)) end
os.exit(code, true)
