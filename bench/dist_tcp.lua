-- dist_tcp.lua -- qkv.dist.all_reduce across hosts over TCP, against Open
-- MPI's own MPI_Allreduce from C (bench/dist_mpi.c, built here with
-- mpicc) on the same hosts and sizes. The hosts are network namespaces on
-- this machine (tests/tools/netns.sh: veth pairs on a bridge, one rank a
-- host, btl self,tcp), so the bytes go through the kernel's TCP stack and
-- the bridge, not shared memory. float32 in place, 4 KB to 64 MB, each
-- the slowest rank's mean over 20 to 100 calls after 3 to warm
-- up, timed as bench/dist.lua times them (bench/lib/dist_rank.lua); qkv
-- and MPI alternate twice and each keeps its better run. Needs root (ip
-- netns); prints why not and stops otherwise. Not part of `make bench`.
--
--   build/qkv bench/dist_tcp.lua [P ...]     (default: 2 3 hosts)
local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local exe = arg[-1] or "build/qkv"
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
local NETNS = dir .. "/../tests/tools/netns.sh"
local q = U.quote

local PS = {}
for i = 1, #arg do PS[i] = math.tointeger(tonumber(arg[i])) end
if #PS == 0 then PS = {2, 3} end
local HOSTS = math.max(table.unpack(PS))

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  return out
end

local why = sh(q(NETNS) .. " check")
if why ~= "" then
  print("dist_tcp: cannot make network namespaces here (" .. why:gsub("\n$", "") .. "); skipped")
  return
end
if not os.execute("command -v mpicc >/dev/null 2>&1") then
  print("dist_tcp: no mpicc (`make deps` installs libopenmpi-dev); skipped")
  return
end
local mpi_bin = "build/dist_mpi"
assert(os.execute(("mpicc -O2 -o %s %s"):format(q(mpi_bin), q(dir .. "/dist_mpi.c"))))

-- TCP between namespaces on a shared machine costs milliseconds a call:
-- at most 100 calls a size (dist_mpi.c and dist_rank.lua read this)
local MAX_ITERS = 100
local SIZES = {4096, 65536, 1 << 20, 16 << 20, 64 << 20}
local sizes = {}
for i, s in ipairs(SIZES) do sizes[i] = tostring(s) end

local PREFIX = "qkvb" .. assert(io.open("/proc/self/stat")):read("n")
sh(("%s up %s %d"):format(q(NETNS), PREFIX, HOSTS))

-- the times by size of one run on P hosts: {bytes = seconds}
local function times(P, ...)
  local out = sh(("QKV_BENCH_MAX_ITERS=%d %s mpirun %s %d -x QKV_BENCH_MAX_ITERS %s"):format(
    MAX_ITERS, q(NETNS), PREFIX, P, table.concat({...}, " ")))
  local t = {}
  for a, b in out:gmatch("RESULT %S+ (%S+) (%S+)") do t[tonumber(a)] = tonumber(b) end
  if next(t) == nil then io.stderr:write(out) end
  return t
end

local function better(a, b)
  for s, t in pairs(b) do if not a[s] or t < a[s] then a[s] = t end end
  return a
end

local function fmt(x, f) return x and f:format(x) or "-" end
local ok, err = pcall(function()
  for _, P in ipairs(PS) do
    local load0 = sh("cat /proc/loadavg"):match("^(%S+ %S+ %S+)")
    local qt, mt = {}, {}
    for _ = 1, 2 do
      better(qt, times(P, q(exe), q(dir .. "/lib/dist_rank.lua"), "all_reduce", table.concat(sizes, " ")))
      better(mt, times(P, q(mpi_bin), table.concat(sizes, " ")))
    end
    local load1 = sh("cat /proc/loadavg"):match("^(%S+ %S+ %S+)")
    local function busbw(bytes, t) return t and bytes * 2 * (P - 1) / P / t / 1e9 end
    print(("dist_tcp: all_reduce float32 in place, %d hosts (network namespaces, TCP over veth " ..
           "and a bridge), one rank each; bus bandwidth GB/s, time µs; load average %s -> %s")
          :format(P, load0, load1))
    print(("%10s %9s %9s %10s %10s %8s"):format("bytes", "qkv GB/s", "MPI GB/s", "qkv µs", "MPI µs",
          "qkv/MPI"))
    for _, s in ipairs(SIZES) do
      local a, b = qt[s], mt[s]
      print(("%10d %9s %9s %10s %10s %8s"):format(s, fmt(busbw(s, a), "%.3f"), fmt(busbw(s, b), "%.3f"),
            fmt(a and a * 1e6, "%.1f"), fmt(b and b * 1e6, "%.1f"), fmt(a and b and b / a, "%.2f")))
    end
    print()
  end
end)
sh(("%s down %s %d"):format(q(NETNS), PREFIX, HOSTS))
if not ok then error(err, 0) end
