-- testrun.lua: `qkv test`, the LuaUnit suite runner.
--
-- Two halves, each in its own Lua state. `main` runs in the runner's state
-- (vm/cli/testrun.c makes it): it reads the options, finds the suites, hands
-- each file to sys.runsuite, which runs it in a brand-new state in a child
-- process (vm/cli/testchild.c), and sums the counts. `suite` runs inside that
-- new state: it loads the file with os.exit turned into "stop this suite",
-- runs LuaUnit when the file does not, tells the runner as each test starts
-- and ends (so a crash can be pinned on a test, and each test gets its time
-- limit), and returns the counts read from LuaUnit's own result objects.
--
-- In every state of the executable `require "luaunit"` comes here
-- (`luaunit`, preloaded by vm/cli/cli.c): LuaUnit with tensor-aware equality
-- and its outermost runs recorded. A suite file run as a script
-- (`qkv test_x.lua`) follows the runner's rule through `script_end`, and
-- closes with the same summary line.

local M = {}

local USAGE = [[
usage: %s test [paths...] [-p pat] [-x pat] [-o text|tap|junit] [-n file.xml] [-v]
                [--timeout s] [--device cpu|cuda] [-h]
  paths            files or folders (default tests/); folders are searched
                   for test_*.lua, skipping hidden, fixtures and build* folders
  -p, --pattern    run only the tests whose name matches (may repeat)
  -x, --exclude    leave out the tests whose name matches (may repeat)
  -o, --output     LuaUnit's output: text (default), tap or junit
  -n, --name       the JUnit XML file for the whole run (with -o junit)
  -v, --verbose    LuaUnit's verbose output
  --timeout        seconds a test may run (default 60; 0: no limit); each
                   file runs in a process of its own, and a test that runs
                   over, or crashes it, fails and the run goes on
  --device         cpu (the default) or cuda
  -h, --help       print this help
]]

---------------------------------------------------------------- inside a suite

-- this state's outermost LuaUnit runs, the one going on (nil between
-- runs), whether it runs a suite for `qkv test`, and what the runner's
-- child process gives a suite (vm/cli/testchild.c): the Ctrl-C flag, the test
-- starting and ending, the time-out message
local function none() end
local runs, active, insuite = {}, nil, false
local ctl = {interrupted = function() return false end, started = none,
             ended = none, timedout = none}

-- a traceback without the runner's own frames below the suite
local function trimmed(msg)
  local tb = debug.traceback(msg, 3)
  local cut = tb:find("\n%s*%[C%]: in function 'xpcall'")
  return cut and tb:sub(1, cut - 1) or tb
end

local function errortext(e)
  if type(e) == "string" then return e end
  local mt = getmetatable(e)
  if mt and mt.__tostring then return tostring(e) end
  return "(error object is a " .. type(e) .. " value)"
end

-- one LuaUnit test node as plain data for the runner's state
local function nodedata(node)
  return {classname = tostring(node.className), name = tostring(node.testName),
          time = node.duration or 0, status = node.status,
          msg = node.msg ~= nil and errortext(node.msg) or nil,
          trace = node.stackTrace and tostring(node.stackTrace) or nil}
end

-- the counts of the suite's outermost LuaUnit runs
local function collect(res, runners)
  res.passed, res.failures, res.errors, res.skipped = 0, 0, 0, 0
  res.tests = {}
  for _, r in ipairs(runners) do
    local result = r.result
    if result then
      res.passed = res.passed + (result.successCount or 0)
      res.failures = res.failures + #result.failedTests
      res.errors = res.errors + #result.errorTests
      res.skipped = res.skipped + #result.skippedTests
      for _, node in ipairs(result.allTests) do res.tests[#res.tests + 1] = nodedata(node) end
    end
  end
end

-- a test that ran out of time errs with the time-out message, whatever
-- error stopped it (the hook's, a kernel's "interrupted", or none); the
-- time limit is the outermost run's test's, a nested run's tests have none
local function timeouts(C)
  local updateStatus, endTest = C.updateStatus, C.endTest
  C.updateStatus = function(self, err)
    local msg = self == active and ctl.timedout()
    if msg and err.status ~= "SUCCESS" then
      err = {status = "ERROR", msg = msg, trace = err.trace}
    end
    return updateStatus(self, err)
  end
  C.endTest = function(self, ...)
    local msg = self == active and ctl.timedout()
    if msg then updateStatus(self, {status = "ERROR", msg = msg, trace = ""}) end
    return endTest(self, ...)
  end
end

--[[
A run that starts while another is going on is nested: a test that runs
LuaUnit itself, as LuaUnit's own suite does to test itself, with failures
on purpose. Its results are that test's business: only the outermost runs
count, and only their tests are told to the runner (a nested test's start
would restart the outer test's time limit, its end make a crash in the
outer test "outside any test", and both would add to the counts).
]]
local function outermost(run)
  return function(self, ...)
    if active then return run(self, ...) end
    runs[#runs + 1], active = self, self
    local _ <close> = setmetatable({}, {__close = function() active = nil end})
    return run(self, ...)
  end
end

--[[
LuaUnit times its run and its tests with os.clock, the process's CPU time:
a suite that waits (on a child process, a socket, a sleep) would read "Ran
30 tests in 0.020 seconds" after 7 s. While LuaUnit's methods that read
the clock run (no test code runs in them), os.clock is qkv.clock, the
monotonic wall clock, so that "Ran N tests in X seconds" and each test's
time (JUnit's time) are the elapsed time; os.clock is itself again before
any test code runs.
]]
local function wallclock(C)
  local wall = require("qkv").clock
  for _, name in ipairs{"startSuite", "startTest", "endTest", "endSuite"} do
    local f = C[name]
    C[name] = function(...)
      local cpu = os.clock
      os.clock = wall
      local ok, err = pcall(f, ...)
      os.clock = cpu
      if not ok then error(err, 0) end
    end
  end
end

-- LuaUnit's outermost runners record themselves and tell the runner as
-- each of their tests starts and ends; any run stops after a test during
-- which Ctrl-C was pressed (LuaUnit would catch the error and go on)
local function hooks(lu)
  local C = lu.LuaUnit
  for _, name in ipairs{"runSuite", "runSuiteByInstances", "internalRunSuiteByInstances"} do
    C[name] = outermost(C[name])
  end
  wallclock(C)
  timeouts(C)
  local startTest, endTest = C.startTest, C.endTest
  C.startTest = function(self, name, ...)
    startTest(self, name, ...)
    if self == active then ctl.started(tostring(name)) end
  end
  C.endTest = function(self, ...)
    local node = self.result.currentNode
    endTest(self, ...)
    if self == active then ctl.ended(node and nodedata(node)) end
    if ctl.interrupted() then error("interrupted!", 0) end
  end
end

-- "N passed, N failed[, N skipped]", the last line of a run
local function summaryline(passed, failed, skipped)
  local line = ("%d passed, %d failed"):format(passed, failed)
  if skipped > 0 then line = line .. (", %d skipped"):format(skipped) end
  return line
end

-- prints the summary line of this state's runs (once); returns whether
-- nothing failed
local printed = false
local function summary()
  local res = {}
  collect(res, runs)
  if not printed then
    printed = true
    print(summaryline(res.passed, res.failures + res.errors, res.skipped))
  end
  return res.failures + res.errors == 0
end

-- a suite file run as a script that exits: the summary line goes first,
-- unless a test is still running (LuaUnit's own os.exit refuses that)
local function exit_with_summary(lu)
  local exit = os.exit
  os.exit = function(...)
    if #runs > 0 and #lu.LuaUnit.instances == 0 then summary() end
    return exit(...)
  end
end

--[[
luaunit() -> LuaUnit, what `require "luaunit"` gives in the executable:
the real module (found by the other searchers), its assertEquals and
assertNotEquals comparing tensors (qkv.equal), its outermost runs
recorded for the summary line and, outside `qkv test`, an os.exit that
prints that line.
]]
local prepared
function M.luaunit()
  if prepared then return prepared end
  package.preload.luaunit = nil
  local lu = require "luaunit"
  require("qkv.equal").patch(lu)
  hooks(lu)
  if not insuite then exit_with_summary(lu) end
  prepared = lu
  return lu
end

-- whether the script defined tests as LuaUnit collects them: globals named
-- test* or Test* (any case) holding a function or a table
local function defines_tests()
  for k, v in pairs(_G) do
    if type(k) == "string" and k:sub(1, 4):lower() == "test"
       and (type(v) == "function" or type(v) == "table") then
      return true
    end
  end
  return false
end

--[[
script_end() -> whether nothing failed: called by the executable once a
script that is a suite (it loaded LuaUnit, or its name is test_*.lua) ran
to its end. The runner's rule: if it did not run LuaUnit itself and it
defines tests, LuaUnit runs them now, with the script's arguments as its
options. When anything ran, the summary line of `qkv test` closes.
]]
function M.script_end()
  if #runs == 0 then
    if not defines_tests() then return true end
    M.luaunit().LuaUnit.run()
  end
  return summary()
end

-- suite(path, args, ctl) -> {passed=, failures=, errors=, skipped=,
-- tests= (LuaUnit's nodes), loaderror=, error= (raised outside any test),
-- exitcode=}; runs in the suite's fresh state, in the child process
function M.suite(path, args, control)
  local res, exitcode = {}, nil
  insuite, ctl = true, control
  -- os.exit records the code and unwinds the suite; LuaUnit, loaded after
  -- this, wraps it as it wraps any os.exit
  os.exit = function(code)
    if code == nil or code == true then code = 0
    elseif code == false then code = 1 end
    exitcode = math.tointeger(code) or 1
    error("os.exit(" .. tostring(code) .. ")", 0)
  end
  local lu = M.luaunit()
  local function handler(e)
    if exitcode then return nil end
    return trimmed(errortext(e))
  end
  local chunk, err = loadfile(path)
  if not chunk then
    res.loaderror = err
  else
    local ok
    ok, err = xpcall(chunk, handler, table.unpack(args))
    if ok and exitcode == nil and #runs == 0 then
      -- a suite without the run line: its Test* tables and test* functions
      ok, err = xpcall(lu.LuaUnit.run, handler)
    end
    -- Ctrl-C unwinds the suite: not an error of its own
    if not ok and exitcode == nil and not ctl.interrupted() then res.error = err end
  end
  collect(res, runs)
  res.exitcode = exitcode
  return res
end

---------------------------------------------------------------- options

local VALUED = {["-p"] = "pattern", ["--pattern"] = "pattern",
                ["-x"] = "exclude", ["--exclude"] = "exclude",
                ["-o"] = "output", ["--output"] = "output",
                ["-n"] = "name", ["--name"] = "name", ["--device"] = "device",
                ["--timeout"] = "timeout"}
local FLAGS = {["-v"] = "verbose", ["--verbose"] = "verbose",
               ["-h"] = "help", ["--help"] = "help"}
local OUTPUTS = {text = true, tap = true, junit = true}

-- "unknown option '--timout' (did you mean '--timeout'?)": the nearest
-- option by the rule of an options table's (qkv._nearest); -timeout and
-- --timeout=5 name --timeout
local function unknown(a)
  local names = {}
  for k in pairs(VALUED) do names[#names + 1] = k end
  for k in pairs(FLAGS) do names[#names + 1] = k end
  table.sort(names)
  local long = "--" .. a:match("^%-+([^=]*)")
  local near = #long > 3 and ((VALUED[long] or FLAGS[long]) and long or
                              require("qkv")._nearest(long, names))
  if near then return ("unknown option '%s' (did you mean '%s'?)"):format(a, near) end
  return "unknown option '" .. a .. "'"
end

-- the options, or nil and what is wrong with them
local function parseargs(args)
  local o = {paths = {}, pattern = {}, exclude = {}}
  local i, only_paths = 1, false
  while i <= #args do
    local a = args[i]
    if only_paths or a == "-" or a:sub(1, 1) ~= "-" then
      o.paths[#o.paths + 1] = a
    elseif a == "--" then
      only_paths = true
    elseif FLAGS[a] then
      o[FLAGS[a]] = true
    elseif VALUED[a] then
      local v = args[i + 1]
      if v == nil then return nil, "option '" .. a .. "' needs a value" end
      local key = VALUED[a]
      if type(o[key]) == "table" then table.insert(o[key], v) else o[key] = v end
      i = i + 1
    else
      return nil, unknown(a)
    end
    i = i + 1
  end
  if o.output and not OUTPUTS[o.output] then
    return nil, "-o: '" .. o.output .. "' is not text, tap or junit"
  end
  if o.output == "junit" and not o.name then
    return nil, "with junit output, a file name must be given with -n"
  end
  if o.device and o.device ~= "cpu" and o.device ~= "cuda" then
    return nil, "--device: '" .. o.device .. "' is not cpu or cuda"
  end
  local t = tonumber(o.timeout or 60)
  if not t or t < 0 or t ~= t or t == math.huge then
    return nil, "--timeout: '" .. o.timeout .. "' is not a number of seconds (0 for no limit)"
  end
  o.timeout = t
  if #o.paths == 0 then o.paths[1] = "tests" end
  return o
end

-- the options each suite's LuaUnit gets (arg[1..] in the suite)
local function luaunitargs(o)
  local t = {}
  for _, p in ipairs(o.pattern) do t[#t + 1] = "-p"; t[#t + 1] = p end
  for _, p in ipairs(o.exclude) do t[#t + 1] = "-x"; t[#t + 1] = p end
  if o.output then t[#t + 1] = "-o"; t[#t + 1] = o.output end
  if o.name then t[#t + 1] = "-n"; t[#t + 1] = o.name end
  if o.verbose then t[#t + 1] = "-v" end
  return t
end

---------------------------------------------------------------- discovery

local MAXDEPTH = 32   -- against symbolic links that loop

local function skipdir(name)
  return name:sub(1, 1) == "." or name == "fixtures" or name:sub(1, 5) == "build"
end

local function join(dir, name)
  return dir:sub(-1) == "/" and dir .. name or dir .. "/" .. name
end

-- the test_*.lua files under dir, in sorted order, into list
-- the test files under dir into list ({path, id}); a folder is walked
-- once however many links reach it (dirs: the ids walked), so that a link
-- back up (sub/up -> ..) does not run its files again and again
local function walk(sys, dir, id, list, depth, dirs)
  if dirs[id] then return end
  dirs[id] = true
  local names = sys.listdir(dir)
  if not names or depth > MAXDEPTH then return end
  table.sort(names)
  for _, name in ipairs(names) do
    local path = join(dir, name)
    local kind, fid = sys.kind(path)
    if kind == "file" and name:match("^test_.*%.lua$") then
      list[#list + 1] = {path, fid}
    elseif kind == "directory" and not skipdir(name) then
      walk(sys, path, fid, list, depth + 1, dirs)
    end
  end
end

-- the suites for the paths given, each file once (by what it is, not how
-- its path is spelt: dir/x.lua, dir/./x.lua and a link to it are one), or
-- nil and the path that does not exist
local function discover(sys, paths)
  local list, seen, out, dirs = {}, {}, {}, {}
  for _, p in ipairs(paths) do
    local kind, id = sys.kind(p)
    if kind == nil then return nil, id end
    if kind == "directory" then walk(sys, p, id, list, 1, dirs) else list[#list + 1] = {p, id} end
  end
  for _, f in ipairs(list) do
    if not seen[f[2]] then seen[f[2]], out[#out + 1] = true, f[1] end
  end
  return out
end

---------------------------------------------------------------- JUnit XML

local ENTITIES = {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
                  ['"'] = "&quot;", ["'"] = "&apos;"}

-- XML 1.0 has no way to write most control characters, even as entities
local function visible(s)
  return (tostring(s):gsub("[%z\1-\8\11\12\14-\31]",
                           function(c) return ("\\%d"):format(c:byte()) end))
end

-- newlines as references, or a parser would turn them into spaces
local function attr(s)
  return (visible(s):gsub("[&<>\"']", ENTITIES):gsub("\n", "&#10;"))
end
local function cdata(s) return (visible(s):gsub("]]>", "]]]]><![CDATA[>")) end

local function testcase(out, t)
  out[#out + 1] = ('    <testcase classname="%s" name="%s" time="%.3f">')
    :format(attr(t.classname), attr(t.name), t.time or 0)
  local tag = t.status == "FAIL" and "failure" or t.status == "ERROR" and "error"
  if tag then
    out[#out + 1] = ('      <%s type="%s" message="%s"><![CDATA[%s]]></%s>')
      :format(tag, attr(t.msg or ""), attr(t.msg or ""), cdata(t.trace or ""), tag)
  elseif t.status == "SKIP" then
    out[#out + 1] = ("      <skipped>%s</skipped>"):format(attr(t.msg or ""))
  end
  out[#out + 1] = "    </testcase>"
end

-- one testsuite element per file: LuaUnit's testcases, plus an errored
-- one for what went wrong outside any test
local function testsuite(out, s)
  local cases = {}
  for _, t in ipairs(s.tests or {}) do cases[#cases + 1] = t end
  for _, p in ipairs(s.problems) do
    cases[#cases + 1] = {classname = s.path, name = p.name, status = "ERROR",
                         msg = p.msg:match("[^\n]*"), trace = p.msg}
  end
  local n = {FAIL = 0, ERROR = 0, SKIP = 0}
  for _, t in ipairs(cases) do n[t.status] = (n[t.status] or 0) + 1 end
  out[#out + 1] = ('  <testsuite name="%s" tests="%d" failures="%d" errors="%d" skipped="%d">')
    :format(attr(s.path), #cases, n.FAIL, n.ERROR, n.SKIP)
  for _, t in ipairs(cases) do testcase(out, t) end
  out[#out + 1] = "  </testsuite>"
end

local function writejunit(fname, suites)
  local out = {'<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>"}
  for _, s in ipairs(suites) do testsuite(out, s) end
  out[#out + 1] = "</testsuites>\n"
  -- written as qkv.save writes: a failed write (a full disk) is an error
  -- and leaves an old file of that name as it was
  local ok, err = pcall(require("qkv")._write_file, fname, table.concat(out, "\n"), "junit")
  if not ok then return nil, (tostring(err):gsub("^junit: ", "")) end
  return true
end

---------------------------------------------------------------- the run

-- the counts of a suite whose process died, from the tests that ended
local function partialcounts(r)
  r.passed, r.failures, r.errors, r.skipped = 0, 0, 0, 0
  local key = {SUCCESS = "passed", FAIL = "failures", ERROR = "errors", SKIP = "skipped"}
  for _, t in ipairs(r.tests) do
    local k = key[t.status]
    if k then r[k] = r[k] + 1 end
  end
end

-- what went wrong outside LuaUnit's tests, each counting as one failure
local function problems(r)
  local list = {}
  local function add(name, msg) list[#list + 1] = {name = name, msg = msg} end
  if r.crash then
    add(r.crashtest, r.crash)
    list[#list].newline = true   -- LuaUnit's line of dots is cut short
  end
  if r.loaderror then add("(load)", "cannot load the suite: " .. r.loaderror) end
  if r.error then
    add(r.aborted and "(runner)" or "(suite)",
        (r.aborted and "runner error: " or "error outside any test: ") .. r.error)
  end
  if r.exitcode and r.exitcode ~= 0 and (r.failures or 0) + (r.errors or 0) == 0 then
    add("(os.exit)", ("the suite exited with status %d after its tests"):format(r.exitcode))
  end
  return list
end

-- runs the files in order; returns the per-file results, the totals and
-- whether Ctrl-C stopped the run
local function runfiles(sys, files, largs, timeout)
  local suites, tot, stopped = {}, {passed = 0, failed = 0, skipped = 0}, false
  for _, path in ipairs(files) do
    io.write("== ", path, "\n")
    io.stdout:flush()
    local r = sys.runsuite(path, largs, timeout)
    if r.partial then partialcounts(r) end
    r.path, r.problems = path, problems(r)
    for _, p in ipairs(r.problems) do io.write(p.newline and "\n" or "", p.msg, "\n") end
    tot.passed = tot.passed + (r.passed or 0)
    tot.failed = tot.failed + (r.failures or 0) + (r.errors or 0) + #r.problems
    tot.skipped = tot.skipped + (r.skipped or 0)
    suites[#suites + 1] = r
    if r.interrupted then io.write("\n"); stopped = true; break end
  end
  return suites, tot, stopped
end

local function fail(prog, code, msg, usage)
  io.stdout:flush()
  io.stderr:write(prog, " test: ", msg, "\n")
  if usage then io.stderr:write(USAGE:format(prog)) end
  return code
end

-- main(args, sys) -> exit status: 0 all passed, 1 something failed (or no
-- suite found), 2 bad usage, 5 no test left by -p/-x (pytest's status for
-- no test collected), 130 stopped by Ctrl-C
function M.main(args, sys)
  local prog = sys.progname or "qkv"
  local o, err = parseargs(args)
  if not o then return fail(prog, 2, err, true) end
  if o.help then io.write(USAGE:format(prog)); return 0 end
  if o.device == "cuda" then
    local ok, why = sys.cudaprobe()
    if not ok then return fail(prog, 2, "--device cuda: " .. why) end
    require("qkv").set_default_device("cuda")   -- each suite's child inherits it
  end
  local files
  files, err = discover(sys, o.paths)
  if not files then return fail(prog, 2, err) end
  if #files == 0 then
    return fail(prog, 1, "no test_*.lua found in " .. table.concat(o.paths, ", "))
  end
  if o.output == "junit" and o.name:sub(-4) ~= ".xml" then
    o.name = o.name .. ".xml"   -- as LuaUnit names it
  end
  local suites, tot, stopped = runfiles(sys, files, luaunitargs(o), o.timeout)
  if o.output == "junit" then
    local ok, werr = writejunit(o.name, suites)
    if not ok then fail(prog, 1, werr); tot.failed = tot.failed + 1 end
  end
  print(summaryline(tot.passed, tot.failed, tot.skipped))
  if stopped then return fail(prog, 130, "interrupted") end
  if tot.failed == 0 and tot.passed + tot.skipped == 0 and #o.pattern + #o.exclude > 0 then
    local sel = {}
    for _, p in ipairs(o.pattern) do sel[#sel + 1] = "-p " .. p end
    for _, x in ipairs(o.exclude) do sel[#sel + 1] = "-x " .. x end
    return fail(prog, 5, "no test matched " .. table.concat(sel, " "))
  end
  return tot.failed == 0 and 0 or 1
end

return M
