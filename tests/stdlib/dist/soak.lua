-- soak.lua: run by test_dist.lua on 2 ranks (mpirun). 10,000 rounds of
-- all_reduce, each round three calls that make what a training loop makes:
-- a new tensor reduced in place, a transposed view (reduced through a
-- contiguous copy written back) and an async call waited on. Resident
-- memory, read every 1000 rounds after 1000 rounds to warm up, must stay
-- flat (within 8 MB of the warm value, test_memory.lua's rule for loops of
-- temporaries); each rank prints its curve, "rss <rank> <round> <MB>",
-- then "ok soak flat" ("ok soak unmeasured" under AddressSanitizer). The
-- sums are checked on the way.
--   mpirun -np 2 build/qkv tests/stdlib/dist/soak.lua [rounds]
-- a line at a time: mpirun passes on each rank's output as it reads it,
-- and a block cut mid-line would splice another rank's lines into it
io.stdout:setvbuf("line")
local d = qkv.dist
local R, W = d.rank(), d.world_size()
local ROUNDS = math.tointeger(tonumber(arg[1])) or 10000

local PAGE = 4096
do
  local p = io.popen("getconf PAGESIZE")
  PAGE = tonumber(p:read("l")) or PAGE
  p:close()
end

local function rss_mb()
  local f = assert(io.open("/proc/self/statm"))
  local resident = tonumber(f:read("l"):match("^%d+%s+(%d+)"))
  f:close()
  return resident * PAGE / 2^20
end

local base = qkv.arange(1, 257, "float32"):view(16, 16)
local function round(i)
  local x = qkv.full({1024}, R + 1)
  d.all_reduce(x)
  local view = base:clone():t()
  d.all_reduce(view)
  local w = d.all_reduce(qkv.ones(64, "float64"), "sum", {async_op = true})
  local y = w:wait()
  if i % 997 == 1 then                          -- now and then, the values
    assert(x[1] == W * (W + 1) / 2, "the sum in place")
    assert(view[2][1] == 2 * W, "the transposed view")
    assert(y[64] == W, "the async sum")
  end
end

for i = 1, 1000 do round(i) end
collectgarbage()
local warm, peak = rss_mb(), 0
print(("rss %d 0 %.1f"):format(R, warm))
for i = 1, ROUNDS do
  round(i)
  if i % 1000 == 0 then
    local m = rss_mb()
    peak = math.max(peak, m)
    print(("rss %d %d %.1f"):format(R, i, m))
  end
end
-- under AddressSanitizer freed blocks wait in its quarantine (256 MB by
-- default) before they are reused, and resident memory climbs until it is
-- full: the curve is printed, not judged
local maps = assert(io.open("/proc/self/maps")):read("a")
if maps:find("libasan", 1, true) or maps:find("clang_rt.asan", 1, true) then
  print("ok soak unmeasured")
  return
end
if peak - warm >= 8 then
  error(("soak on rank %d: resident memory grew from %.1f to %.1f MB"):format(R, warm, peak))
end
print("ok soak flat")
