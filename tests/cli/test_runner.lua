-- test_runner.lua: `qkv test`, run as a user runs it (the real binary
-- through io.popen) on the suites in tests/fixtures/runner/: the summary
-- line's exact counts, the exit status, -p/-x, TAP, JUnit XML (checked by a
-- small XML parser written here), bad usage, discovery and Ctrl-C
-- (tests/cli/test_isolation.lua: a file's own process, a crash, --timeout).
local lu = require "luaunit"

local EXE = arg and arg[-1] or "build/qkv"
local FIX = "tests/fixtures/runner"

local shell = dofile("tests/helpers/shell.lua")
local quote = shell.quote

-- runs `qkv <args>`; returns the output (stdout and stderr), the exit
-- status and the last line
local function direct(...) return shell.exe(EXE, ...) end

-- `qkv test <args>`
local function run(...) return direct("test", ...) end

local ran, tmpdir, writefile = shell.ran, shell.tmpdir, shell.write

local function f(name) return FIX .. "/" .. name end


---------------------------------------------------------------- counts

TestRunnerCounts = {}

-- the fixture folder: 3+1+1+5+1+2+2+2 passed; 2 failing assertions, 1
-- error, 1 syntax error, 1 error at load, 1 exit status 3; 1 skipped
function TestRunnerCounts:testFixtureFolder()
  local out, code, last = run(FIX)
  lu.assertEquals(last, "17 passed, 6 failed, 1 skipped")
  lu.assertEquals(code, 1)
  lu.assertEquals(ran(out), {
    f"test_error.lua", f"test_exit.lua", f"test_exitcode.lua", f"test_fail.lua",
    f"test_leak_a.lua", f"test_leak_b.lua", f"test_pass.lua", f"test_plain.lua",
    f"test_syntax.lua", f"test_toplevel.lua"})
end

function TestRunnerCounts:testSingleFiles()
  local cases = {
    {"test_pass.lua", "3 passed, 0 failed, 1 skipped", 0},
    {"test_fail.lua", "1 passed, 2 failed", 1},
    {"test_error.lua", "1 passed, 1 failed", 1},
    {"test_syntax.lua", "0 passed, 1 failed", 1},
    {"test_exit.lua", "5 passed, 0 failed", 0},
    {"test_exitcode.lua", "1 passed, 1 failed", 1},
    {"test_plain.lua", "2 passed, 0 failed", 0},
    {"test_toplevel.lua", "0 passed, 1 failed", 1},
  }
  for _, c in ipairs(cases) do
    local out, code, last = run(f(c[1]))
    lu.assertEquals(last, c[2], c[1])
    lu.assertEquals(code, c[3], c[1])
    lu.assertEquals(ran(out), {f(c[1])})
  end
end

-- each file runs once, whatever leads to it: links that loop back up
-- (sub/up -> .., a second one beside it) ran it once per path, 2^depth
-- times with two; a file given as dir/x.lua, dir/./x.lua and through its
-- folder runs once
function TestRunnerCounts:testEachFileOnce()
  local d = tmpdir()
  writefile(d .. "/test_once.lua", "function testOnce() end\n")
  os.execute("mkdir -p " .. shell.quote(d .. "/sub") .. " && ln -s .. " .. shell.quote(d .. "/sub/up")
             .. " && ln -s .. " .. shell.quote(d .. "/sub/up2"))
  local out, code, last = run(d)
  lu.assertEquals({code, last}, {0, "1 passed, 0 failed"}, out)
  out, code, last = run(d .. "/test_once.lua", d .. "/./test_once.lua", d)
  lu.assertEquals({code, last}, {0, "1 passed, 0 failed"}, out)
  os.execute("rm -rf " .. shell.quote(d))
end

function TestRunnerCounts:testProblemsArePrinted()
  local out = run(f"test_syntax.lua")
  lu.assertStrContains(out, "cannot load the suite: " .. f"test_syntax.lua:5:")
  out = run(f"test_toplevel.lua")
  lu.assertStrContains(out, "error outside any test: " .. f"test_toplevel.lua:8: no data at top level")
  lu.assertNotStrContains(out, "Ran 1 tests")      -- its test never ran
  out = run(f"test_exitcode.lua")
  lu.assertStrContains(out, "the suite exited with status 3 after its tests")
  out = run(f"test_exit.lua")
  lu.assertNotStrContains(out, "went on after os.exit")
  lu.assertStrContains(out, "Ran 5 tests")         -- LuaUnit's own output
end

-- each file gets a fresh state and the start-up generator, in either order
function TestRunnerCounts:testNoLeaksEitherOrder()
  for _, order in ipairs{{"a", "b"}, {"b", "a"}} do
    local a, b = f("test_leak_" .. order[1] .. ".lua"), f("test_leak_" .. order[2] .. ".lua")
    local out, code, last = run(a, b)
    lu.assertEquals(last, "4 passed, 0 failed")
    lu.assertEquals(code, 0)
    lu.assertEquals(ran(out), {a, b})
  end
end

function TestRunnerCounts:testArgTable()
  local out = run(f"test_plain.lua", "-p", "Plain", "-v")
  lu.assertStrContains(out, ("ARGS [%s] [%s] [-p Plain -v]"):format(EXE, f"test_plain.lua"))
end

function TestRunnerCounts:testPatterns()
  local cases = {
    -- TestPass.* (3 + 1 skipped) and the two testPasses
    {{"-p", "Pass"}, "5 passed, 3 failed, 1 skipped"},
    {{"-x", "Pass"}, "12 passed, 6 failed"},
    {{"-p", "Leak", "-p", "Plain"}, "6 passed, 3 failed"},
    {{"-x", "Pass", "-x", "Exit"}, "6 passed, 6 failed"},
  }
  for _, c in ipairs(cases) do
    local _, _, last = run(FIX, table.unpack(c[1]))
    lu.assertEquals(last, c[2], table.concat(c[1], " "))
  end
end

-- -p/-x that leave no test: exit status 5 (pytest's for no test
-- collected) and a message saying so, where it was 0 as if all passed; a
-- suite that fails to load still makes it 1
function TestRunnerCounts:testNoTestMatchedIsStatus5()
  local out, code = run(f"test_pass.lua", "-p", "NO_SUCH_TEST")
  lu.assertEquals(code, 5)
  lu.assertStrContains(out, "0 passed, 0 failed\n")
  lu.assertStrContains(out, "test: no test matched -p NO_SUCH_TEST")
  out, code = run(f"test_pass.lua", "-x", ".", "-p", "One")
  lu.assertEquals(code, 5)
  lu.assertStrContains(out, "test: no test matched -p One -x .")
  local _, code2 = run(FIX, "-p", "NO_SUCH_TEST")          -- test_syntax.lua fails to load
  lu.assertEquals(code2, 1)
  _, code2 = run(f"test_pass.lua", "-p", "One")
  lu.assertEquals(code2, 0)
end

function TestRunnerCounts:testVerbose()
  local out, code = run(f"test_pass.lua", "-v")
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "TestPass.testOne ... Ok")
end

function TestRunnerCounts:testTap()
  local out, code, last = run(f"test_pass.lua", f"test_fail.lua", "-o", "tap")
  lu.assertEquals(code, 1)
  lu.assertEquals(last, "4 passed, 2 failed, 1 skipped")
  local plans, ok, notok = {}, 0, 0
  for line in out:gmatch("[^\n]+") do
    if line:match("^1%.%.%d+$") then plans[#plans + 1] = line end
    if line:match("^ok%s+%d+") then ok = ok + 1 end
    if line:match("^not ok%s+%d+") then notok = notok + 1 end
  end
  lu.assertEquals(plans, {"1..4", "1..3"})
  lu.assertEquals(ok, 5)      -- 3 passing and 1 skipped, then 1
  lu.assertEquals(notok, 2)
end

---------------------------------------------------------------- JUnit

-- a small XML checker: well-formed, one root, balanced tags, quoted and
-- unique attributes, known entities only; returns the root element as
-- {name=, attrs=, children=} with entities decoded, or nil and why
local ENT = {amp = "&", lt = "<", gt = ">", quot = '"', apos = "'"}

local function decode(s)
  if s:gsub("&[%w#]+;", ""):find("&", 1, true) then return nil, "bare & in " .. s end
  local bad
  local r = s:gsub("&([%w#]+);", function(e)
    local n = e:match("^#(%d+)$") or (e:match("^#x%x+$") and tonumber(e:sub(3), 16))
    if ENT[e] then return ENT[e] elseif n then return utf8.char(tonumber(n)) end
    bad = e
  end)
  if bad then return nil, "unknown entity &" .. bad .. ";" end
  return r
end

local function attrs(text)
  local t = {}
  local rest = text:gsub('%s+([%a_:][%w_:%.%-]*)%s*=%s*(["\'])(.-)%2', function(k, _, v)
    if t[k] then t.__dup = k end
    if v:find("<", 1, true) then t.__lt = k end
    t[k] = v
    return ""
  end)
  if t.__dup then return nil, "attribute " .. t.__dup .. " twice" end
  if t.__lt then return nil, "< in attribute " .. t.__lt end
  if rest:match("%S") then return nil, "unquoted or malformed attributes: " .. rest end
  for k, v in pairs(t) do
    local d, err = decode(v)
    if not d then return nil, err end
    t[k] = d
  end
  return t
end

local function parsexml(s)
  if s:find("[%z\1-\8\11\12\14-\31]") then return nil, "a control character" end
  local pos = (s:match("^<%?xml[^?]*%?>()")) or 1
  local stack, root = {{children = {}}}, nil
  while pos <= #s do
    local lt = s:find("<", pos, true)
    local text = s:sub(pos, (lt or #s + 1) - 1)
    if text:match("%S") then
      if #stack == 1 then return nil, "text outside the root" end
      if text:find("]]>", 1, true) then return nil, "]]> in text" end
      local ok, err = decode(text)
      if not ok then return nil, err end
    end
    if not lt then break end
    if s:sub(lt, lt + 8) == "<![CDATA[" then
      local e = s:find("]]>", lt, true)
      if not e then return nil, "unclosed CDATA" end
      pos = e + 3
    elseif s:sub(lt, lt + 3) == "<!--" then
      local e = s:find("-->", lt, true)
      if not e then return nil, "unclosed comment" end
      pos = e + 3
    else
      local close, name, body, selfclose, e =
        s:match("^<(/?)([%a_:][%w_:%.%-]*)([^<>]-)(/?)>()", lt)
      if not name then return nil, "bad tag at " .. lt end
      if close == "/" then
        local top = table.remove(stack)
        if #stack == 0 or top.name ~= name or body:match("%S") then
          return nil, "</" .. name .. "> does not close <" .. tostring(top.name) .. ">"
        end
      else
        local a, err = attrs(body)
        if not a then return nil, err end
        local el = {name = name, attrs = a, children = {}}
        local parent = stack[#stack]
        if #stack == 1 then
          if root then return nil, "two roots" end
          root = el
        end
        parent.children[#parent.children + 1] = el
        if selfclose == "" then stack[#stack + 1] = el end
      end
      pos = e
    end
  end
  if #stack ~= 1 then return nil, "unclosed <" .. stack[#stack].name .. ">" end
  if not root then return nil, "no root element" end
  return root
end

local function children(el, name)
  local t = {}
  for _, c in ipairs(el.children) do if c.name == name then t[#t + 1] = c end end
  return t
end

TestRunnerJUnit = {}

function TestRunnerJUnit:testCheckerRejectsBadXml()
  for _, bad in ipairs{"<a><b></a></b>", "<a x=1></a>", "<a>&nbsp;</a>", "<a>&</a>",
                       "<a x='1' x='2'/>", "<a></a><b/>", "<a>", "<a x='<'/>",
                       "<a>\27</a>", "<a><![CDATA[x]]>]]></a>"} do
    lu.assertNil(parsexml(bad), bad)
  end
  lu.assertNotNil(parsexml('<?xml version="1.0"?><a x="&lt;&#10;"><![CDATA[<&]]><b/></a>'))
end

function TestRunnerJUnit:testFixtureFolder()
  local base = os.tmpname()
  local xml = base .. ".xml"
  local out, code, last = run(FIX, "-o", "junit", "-n", xml)
  os.remove(base)
  lu.assertEquals(code, 1)
  lu.assertEquals(last, "17 passed, 6 failed, 1 skipped")
  local h = assert(io.open(xml))
  local text = h:read("a")
  h:close()
  os.remove(xml)
  local root, err = parsexml(text)
  lu.assertNotNil(root, err)
  lu.assertEquals(root.name, "testsuites")
  local suites = children(root, "testsuite")
  lu.assertEquals(#suites, 10)
  -- per file: tests, failures, errors, skipped (attributes and elements)
  local want = {
    ["test_error.lua"] = {2, 0, 1, 0}, ["test_exit.lua"] = {5, 0, 0, 0},
    ["test_exitcode.lua"] = {2, 0, 1, 0}, ["test_fail.lua"] = {3, 2, 0, 0},
    ["test_leak_a.lua"] = {2, 0, 0, 0}, ["test_leak_b.lua"] = {2, 0, 0, 0},
    ["test_pass.lua"] = {4, 0, 0, 1}, ["test_plain.lua"] = {2, 0, 0, 0},
    ["test_syntax.lua"] = {1, 0, 1, 0}, ["test_toplevel.lua"] = {1, 0, 1, 0},
  }
  for _, s in ipairs(suites) do
    local name = s.attrs.name:match("[^/]*$")
    local w = want[name]
    lu.assertNotNil(w, s.attrs.name)
    lu.assertEquals(s.attrs.name, f(name))
    local got = {tonumber(s.attrs.tests), tonumber(s.attrs.failures),
                 tonumber(s.attrs.errors), tonumber(s.attrs.skipped)}
    lu.assertEquals(got, w, name)
    local n = {0, 0, 0, 0}
    for _, case in ipairs(children(s, "testcase")) do
      n[1] = n[1] + 1
      n[2] = n[2] + #children(case, "failure")
      n[3] = n[3] + #children(case, "error")
      n[4] = n[4] + #children(case, "skipped")
    end
    lu.assertEquals(n, w, name .. " elements")
  end
  -- the message that needed escaping comes back intact
  lu.assertStrContains(text, "&lt;a &amp; &quot;b&quot;&gt;")
  lu.assertStrContains(out, "# XML output to")
end

function TestRunnerJUnit:testNameGetsXml()
  local base = os.tmpname()
  local _, code = run(f"test_pass.lua", "-o", "junit", "-n", base)
  lu.assertEquals(code, 0)
  local h = io.open(base .. ".xml")
  lu.assertNotNil(h, "written as " .. base .. ".xml, as LuaUnit names it")
  local root = parsexml(h:read("a"))
  h:close()
  os.remove(base)
  os.remove(base .. ".xml")
  lu.assertEquals(#children(children(root, "testsuite")[1], "testcase"), 4)
end

-- a file whose process crashed: the test it was in is an errored
-- testcase, the one before it passed (tests/cli/test_isolation.lua has the rest)
local CRASH = FIX .. "/fixtures/isolation/test_1_crash.lua"

function TestRunnerJUnit:testCrashedTestIsAnError()
  local base = os.tmpname()
  local xml = base .. ".xml"
  local _, code, last = run(CRASH, "-o", "junit", "-n", xml)
  os.remove(base)
  lu.assertEquals({code, last}, {1, "1 passed, 1 failed"})
  local h = assert(io.open(xml))
  local root = assert(parsexml(h:read("a")))
  h:close()
  os.remove(xml)
  local suite = children(root, "testsuite")[1]
  lu.assertEquals({suite.attrs.tests, suite.attrs.errors}, {"2", "1"})
  local cases = children(suite, "testcase")
  lu.assertEquals(cases[1].attrs.name, "TestCrash.testA")
  lu.assertEquals(cases[2].attrs.name, "TestCrash.testB")
  lu.assertStrContains(children(cases[2], "error")[1].attrs.message,
                       CRASH .. ": TestCrash.testB: the process ")
end

---------------------------------------------------------------- time

-- "Ran N tests in X seconds" and each test's JUnit time are the time that
-- passed, not the process's CPU time (LuaUnit's os.clock): a test that
-- waits 0.5 s on a child process reads at least that, in qkv test, alone
-- and in the XML. Only a lower bound: the machine may be busy. Inside the
-- tests os.clock stays the CPU clock.
TestRunnerTime = {}

function TestRunnerTime:testElapsedNotCpuTime()
  local d = tmpdir()
  local suite, xml = d .. "/test_waits.lua", d .. "/waits.xml"
  writefile(suite, table.concat({
    'local lu = require "luaunit"',
    'TestWaits = {}',
    'function TestWaits:testWaits() lu.assertTrue(os.execute("sleep 0.5")) end',
    'function TestWaits:testClock() lu.assertNotIs(os.clock, require("qkv").clock) end',
  }, "\n") .. "\n")
  for _, args in ipairs({{"test", suite}, {suite}, {"test", "-o", "junit", "-n", xml, suite}}) do
    local out, code = direct(table.unpack(args))
    lu.assertEquals(code, 0, out)
    local secs = tonumber(out:match("Ran 2 tests in ([%d.]+) seconds"))
    lu.assertNotNil(secs, out)
    lu.assertTrue(secs >= 0.5, table.concat(args, " ") .. ": " .. out)
  end
  local h = assert(io.open(xml))
  local root = assert(parsexml(h:read("a")))
  h:close()
  local times = {}
  for _, case in ipairs(children(children(root, "testsuite")[1], "testcase")) do
    times[case.attrs.name] = tonumber(case.attrs.time)
  end
  lu.assertTrue(times["TestWaits.testWaits"] >= 0.5, tostring(times["TestWaits.testWaits"]))
  lu.assertNotNil(times["TestWaits.testClock"])
  os.remove(suite)
  os.remove(xml)
  os.remove(d)
end

---------------------------------------------------------------- usage

TestRunnerUsage = {}

function TestRunnerUsage:testBadUsageExits2()
  local cases = {
    {{"-z"}, "unknown option '-z'"},
    {{FIX, "--timout", "5"}, "unknown option '--timout' (did you mean '--timeout'?)"},
    {{FIX, "--devic", "cpu"}, "unknown option '--devic' (did you mean '--device'?)"},
    {{FIX, "-timeout", "5"}, "unknown option '-timeout' (did you mean '--timeout'?)"},
    {{FIX, "--timeout=5"}, "unknown option '--timeout=5' (did you mean '--timeout'?)"},
    {{FIX, "--verbos"}, "unknown option '--verbos' (did you mean '--verbose'?)"},
    {{FIX, "--patern", "x"}, "unknown option '--patern' (did you mean '--pattern'?)"},
    {{FIX, "--frobnicate"}, "unknown option '--frobnicate'\n"},
    {{FIX, "-o", "junit"}, "a file name must be given with -n"},
    {{FIX, "-o", "xml"}, "'xml' is not text, tap or junit"},
    {{FIX, "-p"}, "option '-p' needs a value"},
    {{FIX, "--device", "tpu"}, "'tpu' is not cpu or cuda"},
    {{FIX, "--timeout"}, "option '--timeout' needs a value"},
    {{FIX, "--timeout", "-1"}, "--timeout: '-1' is not a number of seconds (0 for no limit)"},
    {{FIX, "--timeout", "soon"}, "--timeout: 'soon' is not a number of seconds"},
    {{FIX, "--timeout", "inf"}, "--timeout: 'inf' is not a number of seconds"},
    {{FIX, "--timeout", "nan"}, "--timeout: 'nan' is not a number of seconds"},
  }
  -- without a GPU, --device cuda says why (no plugin, no driver, no device)
  local gpu, why = qkv.cuda_available()
  if not gpu then cases[#cases + 1] = {{FIX, "--device", "cuda"}, "--device cuda: " .. why} end
  for _, c in ipairs(cases) do
    local out, code = run(table.unpack(c[1]))
    lu.assertEquals(code, 2, table.concat(c[1], " "))
    lu.assertStrContains(out, c[2])
    lu.assertNil(out:match("== "), "nothing ran")
  end
  local out = run("-z")
  lu.assertStrContains(out, "usage: ")
end

function TestRunnerUsage:testMissingPath()
  local out, code = run(FIX, FIX .. "/no_such_dir")
  lu.assertEquals(code, 2)
  lu.assertStrContains(out, FIX .. "/no_such_dir")
  lu.assertNil(out:match("== "))
end

function TestRunnerUsage:testDeviceCpuAndHelp()
  local _, code, last = run(f"test_plain.lua", "--device", "cpu")
  lu.assertEquals(code, 0)
  lu.assertEquals(last, "2 passed, 0 failed")
  local out
  out, code = run("-h")
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "usage: ")
  lu.assertStrContains(out, "--timeout        seconds a test may run (default 60; 0: no limit)")
end

function TestRunnerUsage:testNoSuites()
  local d = tmpdir()
  local out, code = run(d)
  os.remove(d)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "no test_*.lua found in " .. d)
end

---------------------------------------------------------------- discovery

TestRunnerDiscovery = {}

-- a tree whose files hold 1, 2, 4, ... plain tests, so a count names them
function TestRunnerDiscovery:setUp()
  local d = tmpdir()
  self.dir = d
  local files = {
    {"test_top.lua", 1}, {"sub/test_sub.lua", 2}, {"sub/deeper/test_deep.lua", 4},
    {"fixtures/test_fx.lua", 8}, {".hidden/test_dot.lua", 16},
    {"build-x/test_build.lua", 32}, {"helper.lua", 64}, {"sub/test_x.txt", 128},
  }
  for _, file in ipairs(files) do
    local dir = (d .. "/" .. file[1]):match("(.*)/")
    assert(os.execute("mkdir -p " .. quote(dir)))
    writefile(d .. "/" .. file[1], ("for i = 1, %d do _G['test' .. i] = function() end end\n")
      :format(file[2]))
  end
end

function TestRunnerDiscovery:tearDown()
  os.execute("rm -rf " .. quote(self.dir))
end

function TestRunnerDiscovery:testDescendingSkipsFixturesHiddenBuild()
  local d = self.dir
  local out, code, last = run(d)
  lu.assertEquals(code, 0)
  lu.assertEquals(last, "7 passed, 0 failed")
  lu.assertEquals(ran(out), {d .. "/sub/deeper/test_deep.lua", d .. "/sub/test_sub.lua",
                             d .. "/test_top.lua"})
end

function TestRunnerDiscovery:testGivenPathsAreAlwaysSearched()
  local d = self.dir
  local cases = {{d .. "/fixtures", "8 passed"}, {d .. "/.hidden", "16 passed"},
                 {d .. "/build-x", "32 passed"}, {d .. "/helper.lua", "64 passed"}}
  for _, c in ipairs(cases) do
    local _, _, last = run(c[1])
    lu.assertEquals(last, c[2] .. ", 0 failed")
  end
  -- a file named twice (once inside a folder) runs once
  local _, _, last = run(d, d .. "/sub/test_sub.lua")
  lu.assertEquals(last, "7 passed, 0 failed")
end

-- from tests/ (a pattern that selects no test, so nothing recurses)
function TestRunnerDiscovery:testTestsFolderSkipsFixtures()
  local out, code = run("tests", "-p", "NO_SUCH_TEST_NAME")
  lu.assertEquals(code, 5)                                  -- no test matched
  local list = ran(out)
  lu.assertTrue(#list >= 2)
  local seen = {}
  for _, p in ipairs(list) do
    seen[p] = true
    lu.assertNil(p:find("fixtures", 1, true), p)
  end
  lu.assertTrue(seen["tests/cli/test_runner.lua"])
  -- and the fixture folder, given, is searched
  lu.assertEquals(#ran(run(FIX, "-p", "NO_SUCH_TEST_NAME")), 10)
end

-- with no path: tests/ under the current folder
function TestRunnerDiscovery:testDefaultPathIsTests()
  local exe = EXE
  if exe:sub(1, 1) ~= "/" then
    local p = io.popen("pwd")
    exe = p:read("l") .. "/" .. exe
    p:close()
  end
  local d = tmpdir()
  local p = io.popen(("cd %s && %s test 2>&1"):format(quote(d), quote(exe)))
  local out = p:read("a")
  local _, _, code = p:close()
  lu.assertEquals(code, 2)
  lu.assertStrContains(out, "tests: No such file or directory")
  assert(os.execute("mkdir " .. quote(d .. "/tests")))
  writefile(d .. "/tests/test_default.lua", "function testDefault() end\n")
  p = io.popen(("cd %s && %s test 2>&1"):format(quote(d), quote(exe)))
  out = p:read("a")
  _, _, code = p:close()
  os.execute("rm -rf " .. quote(d))
  lu.assertEquals(code, 0)
  lu.assertEquals(ran(out), {"tests/test_default.lua"})
end

---------------------------------------------------------------- run directly

-- `qkv file.lua`: a suite runs as under `qkv test` and closes with the same
-- line; other scripts are left as they were
TestDirectRun = {}

function TestDirectRun:setUp() self.dir = tmpdir() end
function TestDirectRun:tearDown() os.execute("rm -rf " .. quote(self.dir)) end

-- writes a file into the temporary folder; returns its path
function TestDirectRun:file(name, text)
  local path = self.dir .. "/" .. name
  writefile(path, text)
  return path
end

-- the fixtures with and without the run line: the same last line as `qkv
-- test`, and a failing status exactly when something failed
function TestDirectRun:testSameClosingLine()
  local cases = {{"test_pass.lua", "3 passed, 0 failed, 1 skipped", 0},
                 {"test_plain.lua", "2 passed, 0 failed", 0},
                 {"test_exit.lua", "5 passed, 0 failed", 0},
                 {"test_fail.lua", "1 passed, 2 failed", 2},   -- os.exit(failures)
                 {"test_error.lua", "1 passed, 1 failed", 1}}
  for _, c in ipairs(cases) do
    local _, _, runner = run(f(c[1]))
    local out, code, last = direct(f(c[1]))
    lu.assertEquals(runner, c[2], c[1])
    lu.assertEquals(last, c[2], c[1] .. ":\n" .. out)
    lu.assertEquals(code, c[3], c[1])
  end
  -- the exit status the suite asks for, after the line
  local out, code = direct(f"test_exitcode.lua")
  lu.assertEquals(code, 3)
  lu.assertStrContains(out, "\n1 passed, 0 failed\n")
end

-- only Test* tables, no require and no run line: the style docs/testing.md allows
function TestDirectRun:testTablesOnly()
  local path = self:file("test_tables.lua", [[
TestTables = {}
function TestTables.testOk() assert(qkv.ones(2):sum():item() == 2) end
function TestTables.testAlsoOk() end
function TestTables.testFails() error("fails on purpose") end
]])
  local out, code, last = direct(path)
  lu.assertEquals(last, "2 passed, 1 failed", out)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "fails on purpose")
  -- the script's arguments are LuaUnit's options, as under the runner
  out, code, last = direct(path, "-p", "Ok")
  lu.assertEquals(last, "2 passed, 0 failed", out)
  lu.assertEquals(code, 0)
  lu.assertEquals(select(3, run(path)), "2 passed, 1 failed")
end

-- a file of any name that loads LuaUnit is a suite; one named test_*.lua
-- without tests, or another script with a global named test*, is not
function TestDirectRun:testWhatIsASuite()
  local out, code, last = direct(self:file("checks.lua",
    "local lu = require 'luaunit'\nfunction testOne() lu.assertEquals(1, 1) end\n"))
  lu.assertEquals({last, code}, {"1 passed, 0 failed", 0}, out)
  out, code = direct(self:file("test_empty.lua", "print('no tests here')\n"))
  lu.assertEquals({out, code}, {"no tests here\n", 0})
  out, code = direct(self:file("plain.lua", "function test_me() print('called once') end\ntest_me()\n"))
  lu.assertEquals({out, code}, {"called once\n", 0})
end

-- an error outside the tests is the script's error, with no summary
function TestDirectRun:testErrorAtTopLevel()
  local out, code = direct(f"test_toplevel.lua")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "no data at top level")
  lu.assertNotStrContains(out, " passed, ")
end

---------------------------------------------------------------- Ctrl-C

TestRunnerInterrupt = {}

-- the fixture sends SIGINT to its own process in its second test
function TestRunnerInterrupt:testCtrlCStopsTheRun()
  local dir = FIX .. "/fixtures/sigint"
  local out, code = run(dir)
  lu.assertEquals(code, 130)
  lu.assertEquals(ran(out), {dir .. "/test_1_sigint.lua"})
  lu.assertStrContains(out, "1 passed, 1 failed\n")
  lu.assertStrContains(out, "interrupted")
  lu.assertNotStrContains(out, "not interrupted")
end

os.exit(lu.LuaUnit.run(), true)
