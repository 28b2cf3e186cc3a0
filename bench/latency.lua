-- latency.lua -- what a user of small examples feels: start-up and per-call
-- overhead, qkv next to Python + PyTorch on the same workloads (issue 7).
--
--   build/qkv bench/latency.lua [startup|step|prim|suite ...] [--quick]
--                               [--no-hyperfine] [--no-torch]
--
--   startup  process start to exit of the seed worked examples: qkv on
--            scripts/NNN_*.lua, /usr/bin/python3 on bench/latency/NNN_*.py
--   step     one tiny attention step (Q 4x16, K and V 9x16) in a loop
--   prim     each primitive on seed-sized tensors (at most 16x16)
--   suite    1,000 small tensor tests: `qkv test` against pytest
--
-- With no section it runs all four; the summary table comes last. --quick
-- makes few, short runs (tests/project/test_bench.lua uses it: its numbers are only
-- for checking that everything runs); --no-hyperfine times start-up with a
-- loop of os.execute even when hyperfine is installed; --no-torch leaves
-- the python side out (both for tests/project/test_bench.lua). The torch side
-- (bench/latency_torch.py) runs under /usr/bin/python3, where Debian's torch
-- lives, and shows "-" when `import torch` fails there.

local TORCH = "/usr/bin/python3"
local QKV = arg[-1]
local ROOT = arg[0]:match("^(.*)/bench/[^/]*$") or "."
local TORCH_PY = ROOT .. "/bench/latency_torch.py"

-- run sizes: start-up (process runs), in-process loops (seconds), the suite
local FULL = {qkv_runs = 50, qkv_warmup = 3, py_runs = 10, py_warmup = 3,
              warm = 0.1, batch = 0.03, batches = 15,
              suite_qkv_runs = 10, suite_qkv_warmup = 2, suite_py_runs = 5, suite_py_warmup = 1}
local QUICK = {qkv_runs = 3, qkv_warmup = 1, py_runs = 1, py_warmup = 0,
               warm = 0.01, batch = 0.003, batches = 3,
               suite_qkv_runs = 2, suite_qkv_warmup = 0, suite_py_runs = 1, suite_py_warmup = 0}

local MS, US = 1e-3, 1e-6

---------------------------------------------------------------- utilities

-- quote, sh (output and exit status) and read, shared with the test suites
local shell = dofile(ROOT .. "/tests/helpers/shell.lua")
local quote, read = shell.quote, shell.read

-- runs a shell command; returns its output (stdout and stderr) and success
local function sh(cmd)
  local out, code = shell.sh(cmd)
  return out, code == 0
end

-- the last non-empty line of a command's output: why something failed
local function last_line(out)
  local last = "no output"
  for line in out:gmatch("[^\n]+") do
    if line:match("%S") then last = line end
  end
  return last
end

-- pads to w columns counting UTF-8 characters (µ, ×, ≤ are one column each)
local function pad(s, w, right)
  local fill = string.rep(" ", math.max(0, w - (utf8.len(s) or #s)))
  return right and fill .. s or s .. fill
end

local function median(xs)
  local s = table.move(xs, 1, #xs, 1, {})
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

-- 3 significant figures in the unit (MS or US), e.g. "3.12 ms", "890 ms"
local function fmt_time(sec, unit)
  if not sec then return "-" end
  local v = sec / unit
  local f = v >= 100 and "%.0f" or v >= 10 and "%.1f" or "%.2f"
  return string.format(f, v) .. (unit == MS and " ms" or " µs")
end

local function fmt_ratio(torch, q)
  if not (torch and q) then return "-" end
  local r = torch / q
  return string.format(r >= 100 and "%.0f×" or r >= 10 and "%.1f×" or "%.2f×", r)
end

---------------------------------------------------------------- the peers

-- why torch (or pytest) cannot be used, or nil when it can
local function torch_missing()
  local out, ok = sh(TORCH .. " -c 'import torch'")
  if not ok then return TORCH .. " cannot import torch: " .. last_line(out) end
end

local function pytest_missing()
  local out, ok = sh(TORCH .. " -m pytest --version")
  if not ok then return TORCH .. " -m pytest fails: " .. last_line(out) end
end

-- hyperfine's options: "-N" when it can run commands without a shell
-- (so that no shell start-up is counted), "" when it cannot, nil when it
-- is not installed
local function hyperfine_flags()
  local out, ok = sh("hyperfine --help")
  if not ok then return nil end
  return out:find("\n%s*%-N[%s,]") and "-N" or ""
end

---------------------------------------------------------------- process timing

-- times `cmd` (a command line; env is put in its environment) from process
-- start to exit: {median, mean, sd, runs} in seconds, or nil and why
local function time_hyperfine(cmd, env, runs, warmup, cfg)
  local json, log = cfg.tmp .. "/hyperfine.json", cfg.tmp .. "/hyperfine.log"
  local line = string.format("%s hyperfine %s --style none --warmup %d --runs %d "
                             .. "--export-json %s %s >%s 2>&1", env, cfg.hyperfine,
                             warmup, runs, quote(json), quote(cmd), quote(log))
  if not os.execute(line) then return nil, last_line(read(log) or "") end
  local s = read(json) or ""
  local function field(name) return tonumber(s:match('"' .. name .. '":%s*([%d%.eE+-]+)')) end
  return {median = field("median"), mean = field("mean"), sd = field("stddev"), runs = runs}
end

-- the same with a loop of os.execute; /bin/sh's own start (about 1 ms)
-- is counted here, as hyperfine -N does not
local function time_loop(cmd, env, runs, warmup)
  local line = env .. " exec " .. cmd .. " >/dev/null 2>&1"
  for _ = 1, warmup do os.execute(line) end
  local times, sum = {}, 0
  for i = 1, runs do
    local t = qkv.clock()
    local ok = os.execute(line)
    times[i] = qkv.clock() - t
    if not ok then return nil, "exit status not 0: " .. cmd end
    sum = sum + times[i]
  end
  local mean, var = sum / runs, 0
  for _, t in ipairs(times) do var = var + (t - mean) ^ 2 end
  return {median = median(times), mean = mean, sd = math.sqrt(var / math.max(1, runs - 1)),
          runs = runs}
end

local function time_process(cmd, env, runs, warmup, cfg)
  if cfg.hyperfine then return time_hyperfine(cmd, env, runs, warmup, cfg) end
  return time_loop(cmd, env, runs, warmup)
end

-- "3.12 ms ± 0.10 (50)" for a detail row
local function fmt_stats(r, unit)
  if not r then return "-" end
  -- hyperfine gives no sd for a single run
  local sd = r.sd and string.format(" ± %.2f", r.sd / unit) or ""
  return string.format("%s%s (%d)", fmt_time(r.median, unit), sd, r.runs)
end

---------------------------------------------------------------- 1. start-up

-- {script, detail label, summary label, draws a figure}
local WORKED = {
  {"000_worked_example", "000 worked 2×3 example", "start: 000 worked example"},
  {"001_self_attention", "001 self-attention 3×4", "start: 001 self-attention", true},
  {"001_cross_attention", "001 cross-attention 2×4, 3×4", "start: 001 cross-attention", true},
}

-- run before a script, turns its figure off: how much of its start-up is
-- the PNG (cairo, fonts) rather than the attention
local NO_FIGURE = "qkv.plot = {scatter = function() end, out = function() end}"

local function startup_cases()
  local cases = {}
  for _, w in ipairs(WORKED) do
    local script = ROOT .. "/scripts/" .. w[1] .. ".lua"
    local c = {label = w[2], sum = w[3], target = 10 * MS, qkv = quote(QKV) .. " " .. quote(script),
               py = TORCH .. " " .. quote(ROOT .. "/bench/latency/" .. w[1] .. ".py")}
    cases[#cases + 1] = c
    if w[4] then    -- the python side draws nothing: its time is the row above's
      cases[#cases + 1] = {label = "  the same, no figure", same_py = c,
                           sum = w[3]:gsub("%-attention", "-attn") .. ", no fig",
                           qkv = quote(QKV) .. " -e " .. quote(NO_FIGURE) .. " " .. quote(script)}
    end
  end
  -- the floors: an empty script, and python importing torch alone
  cases[#cases + 1] = {label = "empty: qkv -e '', import torch", sum = "start: empty, import torch",
                       qkv = quote(QKV) .. " -e ''",
                       py = TORCH .. " -c 'import torch'"}
  return cases
end

-- the python side of a start-up case: its times, or nil and why
local function startup_py(c, env, cfg)
  if cfg.no_torch then return nil, cfg.no_torch end
  if c.same_py then return c.same_py.py_result, "(python as above)" end
  return time_process(c.py, env, cfg.py_runs, cfg.py_warmup, cfg)
end

local function section_startup(cfg)
  local how = cfg.hyperfine and "hyperfine " .. cfg.hyperfine or "a loop of os.execute"
  print(string.format("== 1. start-up: process start to exit, median ± sd (runs), by %s", how))
  print(pad("workload", 32) .. pad("qkv", 22, true) .. pad("python3 + torch", 24, true))
  local env = "QKV_OUT=" .. quote(cfg.tmp)   -- the scripts' figures go there
  local rows = {}
  for _, c in ipairs(startup_cases()) do
    local q, err = time_process(c.qkv, env, cfg.qkv_runs, cfg.qkv_warmup, cfg)
    if not q then error("start-up of " .. c.qkv .. " failed: " .. err, 0) end
    local p, perr = startup_py(c, env, cfg)
    c.py_result = p
    if not (p or c.same_py or cfg.no_torch) then print("  torch side skipped: " .. perr) end
    print(pad(c.label, 32) .. pad(fmt_stats(q, MS), 22, true)
          .. pad(c.same_py and p and "as above" or fmt_stats(p, MS), 24, true))
    rows[#rows + 1] = {label = c.sum, qkv = q.median, torch = p and p.median,
                       unit = MS, target = c.target}
  end
  return rows
end

---------------------------------------------------------------- 2., 3. loops

-- the tensors of sections 2 and 3, seed-sized; bench/latency_torch.py makes
-- the same shapes
local SETUP = [[
qkv.seed(1)
local x4 = qkv.randn(4, 4)
local Q, K, V = qkv.randn(4, 16), qkv.randn(9, 16), qkv.randn(9, 16)
local W, b = qkv.randn(16, 16), qkv.randn(16)
local MLP = {qkv.randn(16, 16), qkv.randn(16), qkv.randn(16, 16), qkv.randn(16)}
local S, M = qkv.scores(Q, K), qkv.causal(4, 9)
local X3 = qkv.randn(1, 4, 16)
local H = qkv.heads(X3, 2)
local FUSED = {weights = false}
]]

-- {key of the torch row, label, the statement a user's loop would run}
local STEP = {
  {"step", "primitives: scores, softmax, matmul", "qkv.softmax(qkv.scores(Q, K)):matmul(V)",
   sum = "step: primitives"},
  {"step", "qkv.attention(Q, K, V)", "qkv.attention(Q, K, V)", sum = "step: qkv.attention"},
  {"step", "qkv.attention, weights = false", "qkv.attention(Q, K, V, FUSED)",
   sum = "step: attention, fused"},
}

local PRIM = {
  {"add4", "x + 1 (4×4)", "x4 + 1", 0.3 * US},
  {"softmax4", "softmax (4×4)", "qkv.softmax(x4)", 0.3 * US},
  {"matmul4", "matmul (4×4)", "x4:matmul(x4)", 0.3 * US},
  {"project", "project (4×16, 16×16)", "qkv.project(Q, W)"},
  {"scores", "scores (4×16, 9×16)", "qkv.scores(Q, K)"},
  {"mask", "mask (4×9, causal)", "qkv.mask(S, M)"},
  {"softmax49", "softmax (4×9)", "qkv.softmax(S)"},
  {"heads", "heads (1×4×16, 2 heads)", "qkv.heads(X3, 2)"},
  {"merge", "merge (1×2×4×8)", "qkv.merge(H)"},
  {"gelu", "gelu (4×16)", "qkv.gelu(Q)"},
  {"align", "align (4×16, 16×16, b)", "qkv.align(Q, W, b)"},
  {"align_mlp", "align MLP (16-16-16)", "qkv.align(Q, MLP)"},
  {"attention", "attention (4×16, 9×16, 9×16)", "qkv.attention(Q, K, V)"},
}

-- a function running the statement n times in a plain for loop, compiled
-- with the set-up so that the loop pays no extra call per iteration
local function compile(stmt)
  local src = SETUP .. "return function(n)\n  for _ = 1, n do local r = " .. stmt
              .. " end\nend\n"
  return assert(load(src, "=" .. stmt, "t", _ENV))()
end

-- µs per call: warm up for cfg.warm seconds while doubling the loop until
-- it takes a quarter batch, size a batch to cfg.batch seconds at the best
-- rate seen (a pause, ours or another process's, only ever slows a run:
-- it must not shrink the batches), then the median of cfg.batches batch
-- means. The collector stays on: a user's loop pays for its garbage. The
-- same procedure as latency_torch.py's per_call.
local function per_call(stmt, cfg)
  local loop = compile(stmt)
  local function run(n)
    local t = qkv.clock()
    loop(n)
    return qkv.clock() - t
  end
  local n, t = 1, run(1)
  local spent, best = t, t
  while spent < cfg.warm or t < cfg.batch / 4 do
    if t < cfg.batch / 4 then n = n * 2 end
    t = run(n)
    spent, best = spent + t, math.min(best, t / n)
  end
  n = math.ceil(cfg.batch / best)
  local means = {}
  for i = 1, cfg.batches do means[i] = run(n) / n end
  return median(means), n
end

-- runs latency_torch.py for a section: {key = seconds per call}, its
-- header line; or nil and why
local function torch_loops(section, cfg)
  if cfg.no_torch then return nil, cfg.no_torch end
  local out, ok = sh(string.format("%s %s %s %g %g %d", TORCH, quote(TORCH_PY), section,
                                   cfg.warm, cfg.batch, cfg.batches))
  if not ok then return nil, "latency_torch.py failed: " .. last_line(out) end
  local res = {}
  for key, us in out:gmatch("RESULT (%S+) (%S+)") do res[key] = tonumber(us) * US end
  return res, out:match("INFO ([^\n]*)")
end

local function section_loops(title, cases, target, cfg)
  print("== " .. title)
  print(string.format("µs per call: median of %d batch means (%g ms a batch) after warm-up; GC on",
                      cfg.batches, cfg.batch * 1e3))
  local torch, info = torch_loops(cases == STEP and "step" or "prim", cfg)
  if torch then print("torch: " .. info)
  elseif info ~= cfg.no_torch then print("torch side skipped: " .. info) end
  print(pad("workload", 38) .. pad("calls/batch", 12, true) .. pad("qkv", 12, true)
        .. pad("torch", 12, true))
  local rows = {}
  for _, c in ipairs(cases) do
    local q, n = per_call(c[3], cfg)
    local p = torch and torch[c[1]]
    print(pad(c[2], 38) .. pad(tostring(n), 12, true) .. pad(fmt_time(q, US), 12, true)
          .. pad(fmt_time(p, US), 12, true))
    rows[#rows + 1] = {label = c.sum or c[2], qkv = q, torch = p, unit = US,
                       target = c[4] or target}
  end
  return rows
end

local function section_step(cfg)
  return section_loops("2. one attention step, Q 4×16, K and V 9×16", STEP, 1 * US, cfg)
end

local function section_prim(cfg)
  return section_loops("3. one primitive call, seed-sized tensors", PRIM, nil, cfg)
end

---------------------------------------------------------------- 4. suite

local function section_suite(cfg)
  local gen = dofile(ROOT .. "/bench/latency/gen_suite.lua")
  local lua_file, py_file = gen.write(cfg.tmp, 1000)
  print("== 4. a suite of 1,000 small tensor tests: start to exit, median ± sd (runs)")
  print(pad("workload", 32) .. pad("qkv test", 22, true) .. pad("pytest", 24, true))
  local q, err = time_process(quote(QKV) .. " test " .. quote(lua_file), "", cfg.suite_qkv_runs,
                              cfg.suite_qkv_warmup, cfg)
  if not q then error("qkv test " .. lua_file .. " failed: " .. err, 0) end
  local why = cfg.no_torch or pytest_missing()
  local p
  if not why then
    p, why = time_process(TORCH .. " -m pytest -q -p no:cacheprovider " .. quote(py_file), "",
                          cfg.suite_py_runs, cfg.suite_py_warmup, cfg)
  end
  if why then print("  pytest side skipped: " .. why) end
  print(pad("1,000 tests (10 kinds)", 32) .. pad(fmt_stats(q, MS), 22, true)
        .. pad(fmt_stats(p, MS), 24, true))
  return {{label = "suite of 1,000 small tests", qkv = q.median, torch = p and p.median,
           unit = MS}}
end

---------------------------------------------------------------- summary

local W = {30, 9, 9, 9, 13}

local function summary_line(cells)
  local s = pad(cells[1], W[1])
  for i = 2, #cells do s = s .. "  " .. pad(cells[i], W[i], i < 5) end
  return (s:gsub("%s+$", ""))
end

local function print_summary(rows, cfg)
  print("== summary: median times; torch/qkv = how many times qkv is faster")
  print(summary_line{"workload", "qkv", "torch", "torch/qkv", "target"})
  print(string.rep("-", 78))
  for _, r in ipairs(rows) do
    local target = "-"
    if r.target then
      target = string.format("≤ %g %s: %s", r.target / r.unit, r.unit == MS and "ms" or "µs",
                             r.qkv <= r.target and "yes" or "no")
    end
    print(summary_line{r.label, fmt_time(r.qkv, r.unit), fmt_time(r.torch, r.unit),
                       fmt_ratio(r.torch, r.qkv), target})
  end
  print(string.rep("-", 78))
  if cfg.ran.startup then
    print("start: the 001 scripts also draw their PNG figure (cairo), the python")
    print("  equivalents nothing (no matplotlib here): conservative for qkv. \"no fig\":")
    print("  the same script with qkv.plot stubbed out, against the same python time.")
  end
  if cfg.ran.step or cfg.ran.prim then
    print("step and primitives: in-process loops; torch under no_grad, the straightforward")
    print("  PyTorch call (softmax(Q @ K.T / sqrt(d)) @ V for attention; torch 1.13 has no")
    print("  scaled_dot_product_attention).")
  end
  if cfg.quick then print("--quick: few, short runs; these numbers are not measurements.") end
end

---------------------------------------------------------------- main

local SECTIONS = {{"startup", section_startup}, {"step", section_step},
                  {"prim", section_prim}, {"suite", section_suite}}

local USAGE = "usage: qkv bench/latency.lua [startup|step|prim|suite ...] [--quick]\n"
              .. "                            [--no-hyperfine] [--no-torch]"

local function parse_args()
  local cfg = {want = {}, hyperfine_off = false}
  for _, a in ipairs(arg) do
    if a == "--quick" then cfg.quick = true
    elseif a == "--no-hyperfine" then cfg.hyperfine_off = true
    elseif a == "--no-torch" then cfg.no_torch = "--no-torch"
    elseif a == "-h" or a == "--help" then print(USAGE); os.exit(0)
    else
      local known = false
      for _, s in ipairs(SECTIONS) do known = known or s[1] == a end
      if not known then io.stderr:write(USAGE, "\n"); os.exit(2) end
      cfg.want[a] = true
    end
  end
  for k, v in pairs(cfg.quick and QUICK or FULL) do cfg[k] = v end
  return cfg
end

local function main(cfg)
  local all = next(cfg.want) == nil
  cfg.ran = {}
  cfg.no_torch = cfg.no_torch or torch_missing()
  if not cfg.hyperfine_off then cfg.hyperfine = hyperfine_flags() end
  local version = last_line(sh(quote(QKV) .. " --version"))
  print(string.format("latency: %s (%s); torch side: %s", QKV, version,
                      cfg.no_torch and "none" or TORCH))
  if cfg.no_torch then print("  " .. cfg.no_torch .. ": its columns show -") end
  local rows = {}
  for _, s in ipairs(SECTIONS) do
    if all or cfg.want[s[1]] then
      for _, r in ipairs(s[2](cfg)) do rows[#rows + 1] = r end
      cfg.ran[s[1]] = true
      print()
    end
  end
  print_summary(rows, cfg)
end

local cfg = parse_args()
cfg.tmp = last_line(sh("mktemp -d"))
local ok, err = pcall(main, cfg)
os.execute("rm -rf " .. quote(cfg.tmp))
if not ok then error(err, 0) end
