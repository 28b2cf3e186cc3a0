-- timing.lua: what the benches share (bench/attention.lua,
-- bench/attention_backward.lua, layers.lua, convert.lua, the GPU ones).
local T = {}

-- this process's peak resident memory in MB (VmHWM), 0 without /proc
function T.hwm_mb()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return (tonumber(s:match("VmHWM:%s*(%d+)")) or 0) / 1024
end

-- the best time of runs of fn: at least `budget` seconds and two runs,
-- unless one run alone takes 10 s
function T.best_time(fn, budget)
  local best, total, runs = math.huge, 0, 0
  repeat
    local t = qkv.clock()
    fn()
    t = qkv.clock() - t
    best, total, runs = math.min(best, t), total + t, runs + 1
  until total >= budget and (runs >= 2 or total >= 10)
  return best
end

-- the best time of at least 5 runs of fn and a quarter of a second, after
-- one run to warm up (a product of 0.2 ms read 1.3 to 2.4 TFLOP/s over
-- runs of five): bench/bf16.lua and precision.lua, as their peers'
-- best() (bench/lib/cpu_best.py)
function T.best_short(fn)
  fn()
  local b, n, t0 = math.huge, 0, qkv.clock()
  while n < 5 or qkv.clock() - t0 < 0.25 do
    local t = qkv.clock()
    fn()
    b, n = math.min(b, qkv.clock() - t), n + 1
  end
  return b
end

-- the median time of runs of fn over at least `budget` seconds (5 runs at
-- least)
function T.median_time(fn, budget)
  local times, total = {}, 0
  repeat
    local t = qkv.clock()
    fn()
    t = qkv.clock() - t
    times[#times + 1], total = t, total + t
  until total >= budget and #times >= 5
  table.sort(times)
  return times[(#times + 1) // 2]
end

local function median(t)
  table.sort(t)
  return #t % 2 == 1 and t[(#t + 1) // 2] or (t[#t // 2] + t[#t // 2 + 1]) / 2
end

-- the median in ms of `runs` (20) runs of fn on the GPU after `warm` (5),
-- each between two CUDA events and waited for, as bench/lib/cuda_events.py
-- times torch; and the median of the same runs on the host's clock, from
-- before the first event to the end of the wait (the launches' host work
-- and the wake-up)
function T.gpu_median_ms(fn, warm, runs)
  for _ = 1, warm or 5 do fn() end
  qkv.cuda.synchronize()
  local gpu, host = {}, {}
  local a, b = qkv.cuda.Event(), qkv.cuda.Event()     -- each record moves the mark
  for i = 1, runs or 20 do
    local t0 = qkv.clock()
    a:record()
    fn()
    b:record()
    b:synchronize()
    host[i] = (qkv.clock() - t0) * 1e3
    gpu[i] = a:elapsed_time(b)
  end
  return median(gpu), median(host)
end

-- the python that runs the PyTorch peers, and its torch's version (nil
-- when none imports torch): $QKV_BENCH_PYTHON, else the venv of `make
-- bench-deps` (build/torch, PyTorch 2.x), else Debian's /usr/bin/python3
-- (python3-torch 1.13), whose rows are labelled with that version
function T.peer_python()
  local here = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
  for _, py in ipairs{os.getenv("QKV_BENCH_PYTHON") or false, here .. "/build/torch/bin/python",
                      "build/torch/bin/python", "/usr/bin/python3"} do
    if py then
      local p = io.popen("'" .. py .. "' -c 'import torch; print(torch.__version__)' 2>/dev/null")
      local v = p and p:read("l")
      if p then p:close() end
      if v and v:match("^%d") then return py, v end
    end
  end
  return nil
end

function T.quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- runs a command, returns the numbers of its "RESULT time gflops mb" line
-- (or nil and its output)
function T.result(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  local t, g, m = out:match("RESULT (%S+) (%S+) (%S+)")
  if not t then return nil, out end
  return {time = tonumber(t), gflops = tonumber(g), mb = tonumber(m)}
end

-- runs fn (returning its results) with one busy process beside it
-- (`yes > /dev/null`) when busy: users' machines are never idle
function T.with_load(busy, fn)
  if not busy then return fn() end
  local f = io.popen("yes > /dev/null & echo $!")
  local pid = f:read("l")
  f:close()
  local r = table.pack(pcall(fn))
  os.execute("kill " .. pid)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

return T
