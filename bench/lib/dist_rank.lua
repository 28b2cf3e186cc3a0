-- lib/dist_rank.lua -- bench/dist.lua's work on each rank (run by mpirun):
--   all_reduce bytes...   qkv.dist.all_reduce in place on float32, timed as
--                         dist_mpi.c times MPI_Allreduce: "RESULT qkv <bytes> <s>"
--   ring n h d causal     ring_attention on this rank's n / P block, float32:
--                         "RESULT ring <s> <peak MB>" (the slowest rank's
--                         time, the largest rank's peak memory)
--   single n h d causal threads   the same attention in one process (no
--                         mpirun): "RESULT single <s> <peak MB>"
local d = qkv.dist
local T = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/timing.lua")
local R = d.rank()
qkv.set_num_threads(1)

local function slowest(t)
  return d.all_reduce(qkv.tensor({t}, "float64"), "max")[1]
end

local what = arg[1]
if what == "all_reduce" then
  -- as dist_mpi.c: QKV_BENCH_MAX_ITERS lowers the most iterations from 2000
  local cap = math.tointeger(tonumber(os.getenv("QKV_BENCH_MAX_ITERS") or ""))
  local most = cap and cap >= 20 and cap or 2000
  for i = 2, #arg do
    local bytes = math.tointeger(tonumber(arg[i]))
    local iters = math.min(most, math.max(20, 256 * 1024 * 1024 // math.max(bytes, 4096)))
    local x = qkv.zeros(bytes // 4)
    for _ = 1, 3 do d.all_reduce(x) end
    d.barrier()
    local t = qkv.clock()
    for _ = 1, iters do d.all_reduce(x) end
    t = slowest((qkv.clock() - t) / iters)
    if R == 0 then print(("RESULT qkv %d %.9f"):format(bytes, t)) end
  end
elseif what == "ring" then
  local n, h, dh, causal = tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5] == "true"
  local P = d.world_size()
  qkv.seed(1 + R)
  local q, k, v = qkv.randn(1, h, n // P, dh), qkv.randn(1, h, n // P, dh), qkv.randn(1, h, n // P, dh)
  local opts = {causal = causal}
  -- every rank must make the same calls: the count comes from the
  -- slowest rank's first call
  local t0 = qkv.clock()
  d.ring_attention(q, k, v, opts)
  local runs = math.max(3, math.min(50, math.ceil(1.0 / slowest(qkv.clock() - t0))))
  local times = {}
  for i = 1, runs do
    d.barrier()
    local t1 = qkv.clock()
    d.ring_attention(q, k, v, opts)
    times[i] = slowest(qkv.clock() - t1)
  end
  table.sort(times)
  local t = times[(runs + 1) // 2]
  local mb = d.all_reduce(qkv.tensor({T.hwm_mb()}, "float64"), "max")[1]
  if R == 0 then print(("RESULT ring %.9f %.1f"):format(t, mb)) end
elseif what == "single" then
  local n, h, dh, causal = tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5] == "true"
  qkv.set_num_threads(tonumber(arg[6]))
  qkv.seed(1)
  local q, k, v = qkv.randn(1, h, n, dh), qkv.randn(1, h, n, dh), qkv.randn(1, h, n, dh)
  local opts = {causal = causal, weights = false}
  qkv.attention(q, k, v, opts)
  local t = T.median_time(function() qkv.attention(q, k, v, opts) end, 1.0)
  print(("RESULT single %.9f %.1f"):format(t, T.hwm_mb()))
end
