-- fuzz_api.lua: a fuzzer over the whole Lua API of qkv.
--
--   qkv tests/fuzz/fuzz_api.lua [N [SEED]] [--replay K] [-v] [--only PAT] [--extra FILE]
--                               [--hang-seconds S] [--rules LIST]
--
-- calls every public function and method (tests/fuzz/registry.lua lists
-- them from the live module tables) with random arguments under pcall:
-- call K of a run calls function (K - 1) % #functions + 1 with arguments
-- drawn by tests/fuzz/values.lua from math.random seeded by (SEED, K), so
-- `--replay K` makes that one call again. A call's arguments are random
-- (0 to 5 values of any kind), valid-looking (sizes that agree, from the
-- parameter names of the docstrings) or valid-looking with one of them
-- replaced. tests/fuzz/check.lua judges each outcome (an op of the list
-- of elementwise ops, qkv._ops(), also by its row's result dtype); what
-- it rejects is a finding, printed with its call number. The run ends with
--   fuzz: N calls, seed S: X ok, Y errors, Z findings, C crashes, H hangs
-- and exits with status 1 when there are findings, crashes or hangs.
--
-- The calls run in a child process (this script with --child) whose
-- working directory is a fresh temp folder, removed at the end, so that
-- relative paths from the string pool land there; its standard output
-- goes to /dev/null (plots and help print), and its address space is
-- limited (ulimit -v; under a sanitizer, max_allocation_size_mb), so that a
-- size such as 2^31 gives "out of memory" rather than eating the machine.
-- Before it makes a call's arguments the child writes the call number and
-- the function to fuzz_last in that folder (and the counts so far), then
-- the arguments once they are made. A watchdog, a loop of the shell that
-- starts each child, reads its first line every second: when one call
-- (its arguments' making included) has used S seconds of the child's CPU
-- time (--hang-seconds, 10), or stood for 120 s of the clock (a child
-- that waits on something and spends nothing), it kills the child
-- (SIGKILL). CPU time, not the clock, so that a busy machine, which
-- delays a call without it spinning, makes no hang of it. After a hang or a crash the parent
-- prints the call with its --replay line (after a crash it keeps the
-- folder) and starts a new child, with a new watchdog, at the next call,
-- so that one run reports them all.
--   -v            a line per function with its counts
--   --only PAT    only the functions whose name matches the Lua pattern
--   --extra FILE  a Lua file returning more {name =, fn =, params =}
--                 entries to fuzz (tests/bindings/test_fuzz.lua's fakes)
--   --hang-seconds S  the watchdog's limit on one call (10 s of CPU time)
--   --tame-libs   the functions written in Lua (qkv.plot, qkv.nn, Module,
--                 qkv.test) get no proxies or cyclic tables (they do by
--                 default; --hostile-libs is accepted for older commands)
--   --rules LIST  which classes of tests/fuzz/rules.lua to draw: names
--                 separated by commas (options,duplicates,grad,convert,
--                 crc,nul,sizes,shapes,modules,ddp,schedulers,
--                 dotcall), "all" (the default) or "none"

local qkv = qkv or require "qkv"
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = HERE .. "/?.lua;" .. package.path

local function usage(msg)
  io.stderr:write("fuzz_api: ", msg, "\nusage: qkv fuzz_api.lua [N [SEED]] ",
                  "[--replay K] [-v] [--only PAT] [--extra FILE] [--hang-seconds S] [--tame-libs] ",
                  "[--rules LIST]\n")
  os.exit(2)
end

local HANG_SECONDS = 10       -- a call that runs longer is a hang

-- a whole number >= lo from option a's value v, or usage
local function count(a, v, lo)
  v = math.tointeger(tonumber(v))
  if not v or v < lo then usage(a .. " needs a whole number >= " .. lo) end
  return v
end

-- the classes of tests/fuzz/rules.lua a --rules list names: class -> true
local function rules_of(list)
  local classes, on = require("rules").CLASSES, {}
  if list == nil or list == "all" then list = table.concat(classes, ",") end
  if list == "none" then return on end
  for name in list:gmatch("[^,]+") do
    local known = false
    for _, c in ipairs(classes) do known = known or c == name end
    if not known then usage("--rules: no class '" .. name .. "' (" .. table.concat(classes, ", ") .. ")") end
    on[name] = true
  end
  return on
end

local function parse(argv)
  local o, pos, i = {n = 10000, seed = 1, hang = HANG_SECONDS, hostile_libs = true}, {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == "-v" then o.verbose = true
    elseif a == "--hostile-libs" then o.hostile_libs = true
    elseif a == "--tame-libs" then o.hostile_libs = false
    elseif a == "--child" then o.child = argv[i + 1]; i = i + 1
    elseif a == "--from" then o.from = count(a, argv[i + 1], 1); i = i + 1
    elseif a == "--hang-seconds" then o.hang = count(a, argv[i + 1], 1); i = i + 1
    elseif a == "--replay" or a == "--only" or a == "--extra" or a == "--rules" then
      if argv[i + 1] == nil then usage(a .. " needs a value") end
      o[a:sub(3)] = argv[i + 1]
      i = i + 1
    elseif a:match("^%-?%d+$") then pos[#pos + 1] = math.tointeger(tonumber(a))
    else usage("unknown argument " .. a) end
    i = i + 1
  end
  o.n, o.seed = pos[1] or o.n, pos[2] or o.seed
  if o.replay then o.replay = count("--replay", o.replay, 1) end
  if o.n < 0 then usage("N must be >= 0") end
  o.enabled = rules_of(o.rules)
  return o
end

---------------------------------------------------------------- parent

local shell = dofile(HERE .. "/../helpers/shell.lua")
local quote, readall = shell.quote, shell.read

local function absolute(p, cwd)
  if p:sub(1, 1) == "/" or not p:find("/") then return p end
  return cwd .. "/" .. p
end

-- KiB of address space this process uses, once OpenMP's threads exist
local function vmsize_kb()
  qkv.randn(64, 64):matmul(qkv.randn(64, 64)):sum()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmSize:%s*(%d+)")
    if kb then return math.tointeger(tonumber(kb)) end
  end
  return 0
end

local LIMIT_MB = 1536          -- what a call may allocate, about

local OUTSIDE_SECONDS = 120   -- the child's start-up and end (ASan's leak check)

-- the watchdog, a loop of the shell that started the child ($pid): once a
-- second it reads the first line of fuzz_last and the child's CPU time
-- (/proc/$pid/stat, in clock ticks). A "call K ..." line (the child writes
-- it before it makes the call's arguments) that stays the same while the
-- child uses `secs` seconds of CPU is a hang; so is any state that stands
-- for OUTSIDE_SECONDS of the clock: a call that waits without spinning,
-- no file yet (the child is starting), "end of the calls". Where /proc
-- cannot be read a call's limit is `secs` of the clock. It writes the
-- file hung and kills the child (SIGKILL: a loop in C answers nothing
-- else). The parent removes fuzz_last before each child, so that a new
-- child is never blamed for the last one's call.
local function watchdog(secs)
  local outside = math.max(secs, OUTSIDE_SECONDS)
  return "hz=$(getconf CLK_TCK 2>/dev/null || echo 100); " ..
         "cpu() { awk '{ print $14 + $15 }' /proc/$pid/stat 2>/dev/null || echo -1; }; " ..
         "last=; same=0; base=$(cpu); while sleep 1; do " ..
         "cur=$(head -n 1 fuzz_last 2>/dev/null); c=$(cpu); " ..
         "if [ \"$cur\" = \"$last\" ]; then same=$((same + 1)); else last=$cur; same=0; base=$c; fi; " ..
         "spun=0; case $cur in 'call '*) " ..
         "if [ \"$c\" -lt 0 ]; then [ $same -ge " .. secs .. " ] && spun=1; " ..
         "elif [ $((c - base)) -ge $((" .. secs .. " * hz)) ]; then spun=1; fi;; esac; " ..
         "if [ $spun = 1 ] || [ $same -ge " .. outside .. " ]; then : > hung; kill -9 $pid; exit 0; fi; done"
end

-- the shell command that runs the child on calls from..last in folder tmp
-- under the watchdog; it exits with the child's status (128 + N: signal N)
local function child_command(run, from)
  local flags = {"--child", run.tmp, tostring(run.o.n), tostring(run.o.seed),
                 "--from", tostring(from)}
  local o = run.o
  if o.replay then flags[#flags + 1] = "--replay"; flags[#flags + 1] = tostring(o.replay) end
  if o.verbose then flags[#flags + 1] = "-v" end
  if not o.hostile_libs then flags[#flags + 1] = "--tame-libs" end
  if o.only then flags[#flags + 1] = "--only"; flags[#flags + 1] = o.only end
  if o.rules then flags[#flags + 1] = "--rules"; flags[#flags + 1] = o.rules end
  if o.extra then flags[#flags + 1] = "--extra"; flags[#flags + 1] = absolute(o.extra, run.cwd) end
  for i, f in ipairs(flags) do flags[i] = quote(f) end
  return run.limit .. "cd " .. quote(run.tmp) .. " || exit 125; rm -f hung fuzz_last; " ..
         "(ASAN_OPTIONS=" .. quote(run.asan) .. " QKV_OUT=" .. quote(run.tmp .. "/out") ..
         " exec " .. quote(run.exe) .. " " .. quote(run.script) .. " " .. table.concat(flags, " ") ..
         ") </dev/null >/dev/null & pid=$!; (" .. watchdog(o.hang) .. ") & wd=$!; " ..
         "wait $pid 2>/dev/null; st=$?; kill $wd 2>/dev/null; exit $st"
end

-- runs the child from call `from`; returns its report, whether the watchdog
-- killed it, and its exit status (how, code as os.execute gives them)
local function segment(run, from)
  os.remove(run.tmp .. "/report")
  local _, how, code = os.execute(child_command(run, from))
  if how == "exit" and code > 128 then how, code = "signal", code - 128 end
  local hung = readall(run.tmp .. "/hung") ~= nil
  return readall(run.tmp .. "/report") or "", hung, how, code
end

local COUNTS = "\ncounts: (%d+) calls, (%d+) ok, (%d+) errors, (%d+) findings\n"

-- the last call the child began, and the counts of the calls before it
local function last_call(tmp)
  local text = readall(tmp .. "/fuzz_last") or ""
  local line = text:match("^(call [^\n]*)\n")
  local ok, err, find = text:match("\ntally: (%d+) ok, (%d+) errors, (%d+) findings")
  if not line or not ok then return nil end
  return line, math.tointeger(tonumber(line:match("^call (%d+)"))),
         tonumber(ok), tonumber(err), tonumber(find)
end

local function parent(o)
  local cwd = io.popen("pwd"):read("l")
  local tmp = io.popen("mktemp -d \"${TMPDIR:-/tmp}/qkv_fuzz.XXXXXX\""):read("l")
  assert(tmp and tmp ~= "", "fuzz_api: mktemp failed")
  -- a sanitizer reserves terabytes of address space: ulimit -v would stop
  -- it starting, so the allocator is told the limit instead
  local vm = vmsize_kb()
  local asan = os.getenv("ASAN_OPTIONS")
  local run = {o = o, cwd = cwd, tmp = tmp,
               exe = absolute(arg[-1] or "qkv", cwd), script = absolute(arg[0], cwd),
               limit = vm < (64 << 20) and ("ulimit -v " .. (vm + (LIMIT_MB << 10)) .. "; ") or "",
               asan = (asan and asan ~= "" and asan .. ":" or "") ..
                      "allocator_may_return_null=1:max_allocation_size_mb=" .. LIMIT_MB}
  local again = table.concat({arg[-1] or "qkv", arg[0], o.n, o.seed,
    o.only and "--only " .. quote(o.only) or nil}, " ") ..
    (o.extra and " --extra " .. quote(o.extra) or "") ..
    (o.hang ~= HANG_SECONDS and " --hang-seconds " .. o.hang or "") ..
    (o.hostile_libs and "" or " --tame-libs") ..
    (o.rules and " --rules " .. quote(o.rules) or "")
  local last = o.replay or o.n
  local tot = {calls = 0, ok = 0, errors = 0, findings = 0, crashes = 0, hangs = 0}
  local from, status = o.replay or 1, 0
  while from <= last do
    local report, hung, how, code = segment(run, from)
    io.write((report:gsub("counts: [^\n]*\n", "")))
    if report:find("^fuzz: no function matches") then
      os.execute("rm -rf " .. quote(tmp))
      os.exit(2)
    end
    local c, ok, err, find = ("\n" .. report):match(COUNTS)
    if c then                               -- the child got to its end
      tot.calls, tot.ok = tot.calls + tonumber(c), tot.ok + tonumber(ok)
      tot.errors, tot.findings = tot.errors + tonumber(err), tot.findings + tonumber(find)
      if not (how == "exit" and code == (tonumber(find) > 0 and 1 or 0)) then
        -- a sanitizer's report at exit (a leak) changed its status
        io.write(("fuzz: the child ended with %s %s after its report: see above\n"):format(
          how == "signal" and "signal" or "status", tostring(code)))
        status = 1
      end
      break
    end
    local line, K, bok, berr, bfind = last_call(tmp)
    if not line then
      if hung then
        io.write(("fuzz: hang outside any call (starting or ending): no progress in %d s, killed\n")
                 :format(math.max(o.hang, OUTSIDE_SECONDS)))
        tot.hangs = tot.hangs + 1
      else
        io.write(("fuzz: the child %s %s outside any call\n"):format(
          how == "signal" and "was killed by signal" or "exited with status", tostring(code)))
      end
      status, run.keep = 1, true
      break
    end
    tot.calls = tot.calls + (K - from) + 1
    tot.ok, tot.errors, tot.findings = tot.ok + bok, tot.errors + berr, tot.findings + bfind
    if hung then
      tot.hangs = tot.hangs + 1
      io.write(("fuzz: hang at call %d: no progress in %d s, killed\n"):format(K, o.hang))
    else
      tot.crashes = tot.crashes + 1
      io.write(("fuzz: crash at call %d: the child %s %s\n"):format(K,
        how == "signal" and "was killed by signal" or "exited with status", tostring(code)))
    end
    io.write("  ", line, "\nfuzz: replay it with ", again, " --replay ", K, "\n")
    run.keep, from = run.keep or not hung, K + 1
  end
  if tot.findings > 0 and not o.replay then
    io.write("fuzz: replay call K with ", again, " --replay K\n")
  end
  if run.keep then io.write("fuzz: its folder is kept: ", tmp, "\n")
  else os.execute("rm -rf " .. quote(tmp)) end
  io.write(("fuzz: %d calls, seed %d: %d ok, %d errors, %d findings, %d crashes, %d hangs\n"):format(
    tot.calls, o.seed, tot.ok, tot.errors, tot.findings, tot.crashes, tot.hangs))
  if tot.findings + tot.crashes + tot.hangs > 0 then status = 1 end
  os.exit(status)
end

---------------------------------------------------------------- child

local V = require "values"
local H = require "hostile"
local P = require "params"
local C = require "check"
local R = require "registry"
local S = require "rules"
local D = require "rules_data"

local random = math.random

-- arguments that look valid: by the parameter names of the signature;
-- names[i] is the name of args[i]
local function valid_args(e, F, self)
  local args, n, names = {}, 0, {}
  local function add(v, name) n = n + 1; args[n], names[n] = v, name end
  local prev, list
  for _, p in ipairs(e.params) do
    local name = p.name
    if p.opt and random() < 0.4 then
      -- left out: from here on a name may not be its argument's position
      -- (norm(x [, p [, dim]]) without p reads dim as p)
      names.gap = names.gap or n + 1
    elseif name == "d2" and list then
      -- d1 gave the whole list
    elseif name == "..." then
      if prev == "m2" then
        if random() < 0.3 then add(P.param("m1", F), "m1") end
      elseif not list then
        for _ = 1, random(1, 2) do add(P.param("...", F, e.name, self, args), "...") end
        if random() < 0.3 then add(P.param("opts", F), "opts") end
      end
    elseif name == "d1" then
      local v = P.param("d1", F, e.name, self, args)
      list = type(v) == "table"
      if list and getmetatable(v) == nil and random() < 0.5 then
        for _, x in ipairs(v) do add(x, "d1") end
      else
        add(v, "d1")
      end
    else
      add(P.param(name, F, e.name, self, args), name)
    end
    prev = name
  end
  return args, n, names
end

local function random_args()
  local args, n = {}, random(0, 5)
  for i = 1, n do args[i] = V.any() end
  return args, n
end

-- self, args, n for call K of entry e, and marks: {[i] = why args[i]
-- obliges the call to raise} (tests/fuzz/hostile.lua)
local function make_call(e, F)
  H.begin(e)
  local mode = random(10)                  -- 1-4 random, 5-8 valid, 9-10 one replaced
  local self
  if e.kind == "tensor" then
    if mode <= 4 then self = random() < 0.95 and V.tensor() or V.any()
    else self = P.param("x", F) end
  elseif e.kind == "module" then
    self = P.module_with(F, e.method)         -- one of the classes that have it
  end
  local args, n, names, marks
  if mode <= 4 then args, n, marks = random_args()
  else
    args, n, names = valid_args(e, F, self)
    self, n, marks = H.rewrite(e, self, args, n, names)   -- maybe one hostile
  end
  marks = marks or {}
  if mode >= 9 then
    local i = random(n + 1)
    args[i] = V.any()
    if i > n then n = i end
    marks = {}; H.drop_rule()
  end
  -- an operator has a tensor on one side: first, or second (2 * x)
  if e.kind == "meta" then
    if not qkv.is_tensor(args[1]) then
      args[1] = V.tensor()
      marks = {}; H.drop_rule()
    end
    if e.binary and random() < 0.3 then args[1], args[2] = args[2], args[1]; marks = {} end
    n = math.max(n, e.binary and 2 or 1)
  end
  H.arm(self, args, n)
  return self, args, n, marks
end

-- pcall calls the function itself, as pcall(qkv.softmax, x) does: then
-- no call site names it, and its messages must find its name themselves
local function invoke(e, self, args, n)
  if H.call then return pcall(H.call, table.unpack(args, 1, n)) end   -- a rule's own
  if e.kind == "tensor" then return pcall(e.fn, self, table.unpack(args, 1, n)) end
  if e.kind == "module" then return pcall(self[e.method], self, table.unpack(args, 1, n)) end
  return pcall(e.fn, table.unpack(args, 1, n))
end

local function describe(e, self, args, n)
  local parts = {}
  for i = 1, n do parts[i] = V.describe(args[i]) end
  local call = e.name .. "(" .. table.concat(parts, ", ") .. ")"
  if H.desc then
    call = e.name .. " drawn as " .. H.desc .. "(" .. table.concat(parts, ", ") .. ")"
  elseif e.kind == "tensor" or e.kind == "module" then
    call = V.describe(self) .. " :" .. e.method .. "(" .. table.concat(parts, ", ") .. ")"
    call = e.name .. " on " .. call
  end
  return call
end

-- the names an error of this call may give: the function's, and for a
-- module's method its class too
local function accept_for(e, self)
  if H.accept then return H.accept end
  if e.kind ~= "module" then return e.accept end
  local a = {table.unpack(e.accept)}
  local mt = getmetatable(self)
  if type(mt) == "table" and type(rawget(mt, "__name")) == "string" then a[#a + 1] = mt.__name end
  return a
end

-- the options qkv.plot knows, from its own lists
local function plot_options(spec)
  local names = {}
  if not spec then return names end
  for _, n in ipairs(spec.FIGURE or {}) do names[#names + 1] = n end
  for _, lists in pairs(spec.OPTIONS or {}) do
    for _, list in ipairs(lists) do
      for _, n in ipairs(list) do names[#names + 1] = n end
    end
  end
  table.sort(names)
  return names
end

local function child(o)
  local tmp = o.child
  local out = assert(io.open(tmp .. "/report", "w"))
  local function say(...) out:write(...); out:flush() end
  local q = qkv
  local ok, spec = pcall(require, "qkv.plot.spec")
  spec = ok and spec or nil
  V.setup(q, tmp)
  H.setup(q, o.hostile_libs, S)
  P.setup(q, plot_options(spec))
  S.setup(q, spec, o.enabled)
  C.setup(q)
  V.files()
  D.files(tmp)
  local list, makers = R.build(q)
  if o.extra then
    for _, e in ipairs(dofile(o.extra)) do
      e.kind, e.short = e.kind or "function", e.short or e.name:match("([%w_]+)$")
      e.params = e.params or {}
      e.accept = e.accept or {e.short}
      list[#list + 1] = e
    end
  end
  if o.only then
    local keep = {}
    for _, e in ipairs(list) do if e.name:match(o.only) then keep[#keep + 1] = e end end
    list = keep
  end
  if #list == 0 then say("fuzz: no function matches\n"); os.exit(2) end
  for _, m in ipairs(makers) do
    P.MODULES[#P.MODULES + 1] = function(F)
      local args, n = valid_args(m, F, nil)
      return m.fn(table.unpack(args, 1, n))
    end
  end
  collectgarbage()
  collectgarbage()
  local base_mem = q.memory()
  local counts, shown, kinds = {}, 0, {}
  local tot = {ok = 0, error = 0, fail = 0, finding = 0}
  local first, last = o.from or 1, o.n
  if o.replay then first, last = o.replay, o.replay end
  local slow = {t = 0}
  local last_file, last_len = assert(io.open(tmp .. "/fuzz_last", "w")), 0
  -- call K and what it is doing, over the last one in place: a write, not
  -- an open and a close; the counts so far follow for the parent after a
  -- crash or hang
  local function note(K, what)
    local line = ("call %d seed %d: %s\ntally: %d ok, %d errors, %d findings\n"):format(
      K, o.seed, what, tot.ok, tot.error + tot.fail, tot.finding)
    last_file:seek("set")
    last_file:write(line, (" "):rep(math.max(0, last_len - #line)))
    last_file:flush()
    last_len = math.max(last_len, #line)
  end
  local threads = q.get_num_threads()
  for K = first, last do
    math.randomseed(o.seed, K)
    q.seed(o.seed * 1000003 + K)
    q.set_default_device("cpu")   -- a fuzzed qkv.set_default_device lasts one call
    q.set_num_threads(threads)    -- and so does a fuzzed qkv.set_num_threads
    q.set_float32_matmul_precision("highest")   -- and the float32 matmul precision
    local e = list[(K - 1) % #list + 1]
    -- before the arguments are made: making them may hang too
    note(K, e.name .. " (making its arguments)")
    local F = P.begin_call()
    local okg, self, args, n, marks = pcall(make_call, e, F)
    local kind, why, desc
    if not okg then
      kind, why, desc = "finding", "making the arguments raised: " .. tostring(self), e.name
    else
      desc = describe(e, self, args, n)
      note(K, desc)
      local t0 = q.clock()
      local res = table.pack(invoke(e, self, args, n))
      local dt = q.clock() - t0
      if dt > slow.t then slow = {t = dt, K = K, name = e.name} end
      local given = {self, table.unpack(args, 1, n)}
      kind, why = C.outcome(e, accept_for(e, self), given, table.unpack(res, 1, res.n))
      kind, why = C.judge(kind, why, res[1], res[2], H.allowed(), select(2, next(marks)))
      -- (a check that raises is a finding, not the child's end)
      local okw, w = true, nil
      if kind == "ok" and H.post then okw, w = pcall(H.post, table.unpack(res, 2, res.n))
      elseif kind == "error" and H.post_error then okw, w = pcall(H.post_error, res[2]) end
      -- an op of the list: its result's dtype is its row's
      if okw and not w and kind == "ok" and not H.call then w = C.op_result(e, res[2]) end
      if not okw then w = "checking the outcome raised: " .. tostring(w) end
      if w then kind, why = "finding", w end
      if kind == "finding" and H.rule then why = "rule " .. H.rule .. ": " .. why end
      if o.replay then
        say("call ", K, ": ", desc, "\n")
        -- the values of small tensors (0: self), also in tables
        local function show(path, a, depth)
          if qkv.is_tensor(a) then
            local ok, text = pcall(function() return a:numel() <= 100 and tostring(a) end)
            if ok and text then say(path, ": ", text, "\n") end
          elseif type(a) == "table" and depth < 2 then
            for k, x in next, a do show(path .. "." .. tostring(k), x, depth + 1) end
          end
        end
        for i = 0, n do show(tostring(i), i == 0 and self or args[i], 0) end
        say(kind, ": ", why or (res[1] and "" or tostring(res[2])), "\n")
        if not res[1] then        -- where it was raised
          local f, a, m = e.fn, args, n
          if H.call then f = H.call
          elseif e.kind == "module" or e.kind == "tensor" then
            f, a, m = e.fn or self[e.method], {self, table.unpack(args, 1, n)}, n + 1
          end
          -- made again: a proxy's answers may differ, and the call succeed
          local again = table.pack(xpcall(f, debug.traceback, table.unpack(a, 1, m)))
          say(again[1] and "(made again, the call returned)" or tostring(again[2]), "\n")
        end
      end
    end
    local c = counts[e.name] or {ok = 0, error = 0, fail = 0, finding = 0}
    counts[e.name] = c
    c[kind], tot[kind] = c[kind] + 1, tot[kind] + 1
    if H.rule then
      local rc = counts["rule " .. H.rule] or {ok = 0, error = 0, fail = 0, finding = 0}
      counts["rule " .. H.rule], rc[kind] = rc, rc[kind] + 1
    end
    if kind == "finding" then
      -- the first of each kind in full, the rest counted
      local key = e.name .. ": " .. why:gsub("0x%x+", "#"):gsub("%d+", "#"):gsub("'[^']*'", "'#'")
                                       :sub(1, 70)
      kinds[key] = (kinds[key] or 0) + 1
      if kinds[key] == 1 and shown < 50 then     -- said at once: a crash may follow
        shown = shown + 1
        say(("finding at call %d (%s): %s\n  call: %s\n"):format(K, e.name, why, desc))
      end
    end
    if K % 256 == 0 then collectgarbage() end
  end
  last_file:seek("set")
  last_file:write("end of the calls\n")
  last_file:close()
  collectgarbage()
  collectgarbage()
  local mem = q.memory()
  if o.verbose then
    local names = {}
    for name in pairs(counts) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local c = counts[name]
      say(("%-34s %7d ok %7d error %5d fail %5d finding\n"):format(name, c.ok, c.error, c.fail, c.finding))
    end
    say(("slowest call: %d (%s), %.3f s\n"):format(slow.K or 0, slow.name or "-", slow.t))
  end
  if shown < tot.finding then
    for key, k in pairs(kinds) do say(("  %d x %s\n"):format(k, key)) end
  end
  if mem > base_mem + (1 << 20) then
    tot.finding = tot.finding + 1
    say(("finding: %d bytes of tensors live after the run, %d before it\n"):format(mem, base_mem))
  end
  -- for the parent, which sums the children of a run
  say(("counts: %d calls, %d ok, %d errors, %d findings\n"):format(
    last - first + 1, tot.ok, tot.error + tot.fail, tot.finding))
  out:close()
  os.exit(tot.finding > 0 and 1 or 0, true)
end

local o = parse(arg)
if o.child then child(o) else parent(o) end
