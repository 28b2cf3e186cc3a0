-- dist.lua -- qkv.dist against its peers, on this machine's ranks (mpirun
-- --oversubscribe, shared memory between them):
--   all_reduce: float32 in place, bus bandwidth (nccl-tests' busbw: bytes x
--     2 (P - 1) / P over the time) from 4 KB to 64 MB, against Open MPI's
--     own MPI_Allreduce from C (bench/dist_mpi.c, built here with mpicc)
--     and against PyTorch's gloo backend (bench/dist_torch.py), each the
--     slowest rank's mean time over many calls;
--   ring attention: qkv.dist.ring_attention at a total N split over P
--     ranks (1 thread each) against qkv.attention on the whole N in one
--     process with P threads, and each's peak memory (per rank).
--
--   build/qkv bench/dist.lua [P]      (run by `make bench`; P = 2)
local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local exe = arg[-1] or "build/qkv"
local P = tonumber(arg[1]) or 2
local dir = arg[0]:match("^(.*)/[^/]*$") or "."

local function q(s) return U.quote(s) end
local ENV = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 " ..
            "OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1"

if not os.execute("command -v mpirun >/dev/null 2>&1") then
  print("dist: Open MPI's mpirun is not installed (`make deps`); skipped")
  return
end

local function results(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  local r = {}
  for name, a, b in out:gmatch("RESULT (%S+) (%S+) ?(%S*)") do
    r[#r + 1] = {name = name, a = tonumber(a), b = tonumber(b)}
  end
  if #r == 0 then io.stderr:write(out) end
  return r
end

local function mpirun(n, ...)
  return ("env %s mpirun -np %d %s"):format(ENV, n, table.concat({...}, " "))
end

local SIZES = {4096, 65536, 1 << 20, 16 << 20, 64 << 20}
local sizes = {}
for i, s in ipairs(SIZES) do sizes[i] = tostring(s) end

-- the peers
local mpi_bin = "build/dist_mpi"
os.execute(("mpicc -O2 -o %s %s 2>/dev/null"):format(q(mpi_bin), q(dir .. "/dist_mpi.c")))
local PY, VERSION = U.peer_python()

local qkv_r = results(mpirun(P, q(exe), q(dir .. "/lib/dist_rank.lua"), "all_reduce", table.concat(sizes, " ")))
local mpi_r = io.open(mpi_bin) and results(mpirun(P, q(mpi_bin), table.concat(sizes, " "))) or {}
local gloo_r = {}
if PY then
  local port = tostring(29500 + math.random(0, 999))
  gloo_r = results(mpirun(P, q(PY), q(dir .. "/dist_torch.py"), port, table.concat(sizes, " ")))
end

local function by_size(r)
  local t = {}
  for _, x in ipairs(r) do t[x.a] = x.b end
  return t
end
local qt, mt, gt = by_size(qkv_r), by_size(mpi_r), by_size(gloo_r)

local function busbw(bytes, t) return t and bytes * 2 * (P - 1) / P / t / 1e9 end
local function fmt(x, f) return x and f:format(x) or "-" end

print(("dist: all_reduce float32 in place, %d ranks on this machine (shared memory); " ..
       "bus bandwidth GB/s, time µs"):format(P))
print(PY and ("torch " .. VERSION .. " gloo (" .. PY .. ")") or "torch: not found (`make bench-deps`), gloo skipped")
print(("%10s %9s %9s %9s %9s %9s %9s %8s %8s"):format("bytes", "qkv GB/s", "MPI GB/s", "gloo GB/s",
      "qkv µs", "MPI µs", "gloo µs", "qkv/MPI", "gloo/qkv"))
for _, s in ipairs(SIZES) do
  local a, b, c = qt[s], mt[s], gt[s]
  print(("%10d %9s %9s %9s %9s %9s %9s %8s %8s"):format(s, fmt(busbw(s, a), "%.2f"),
        fmt(busbw(s, b), "%.2f"), fmt(busbw(s, c), "%.2f"), fmt(a and a * 1e6, "%.1f"),
        fmt(b and b * 1e6, "%.1f"), fmt(c and c * 1e6, "%.1f"),
        fmt(a and b and b / a, "%.2f"), fmt(a and c and c / a, "%.2f")))
end

-- ring attention against one process
print()
print(("ring attention: float32, B 1 H 8 d 64, %d ranks x 1 thread against one process x %d " ..
       "threads; time ms, peak MB (per rank)"):format(P, P))
print(("%7s %7s %10s %10s %9s %9s %9s"):format("N", "causal", "ring ms", "one ms", "one/ring",
      "ring MB", "one MB"))
for _, n in ipairs({2048, 8192}) do
  for _, causal in ipairs({false, true}) do
    local c = tostring(causal)
    local r = results(mpirun(P, q(exe), q(dir .. "/lib/dist_rank.lua"), "ring", n, 8, 64, c))[1]
    local s = results(("%s %s single %d 8 64 %s %d"):format(q(exe), q(dir .. "/lib/dist_rank.lua"),
                                                             n, c, P))[1]
    print(("%7d %7s %10s %10s %9s %9s %9s"):format(n, c, fmt(r and r.a * 1e3, "%.2f"),
          fmt(s and s.a * 1e3, "%.2f"), fmt(r and s and s.a / r.a, "%.2f"),
          fmt(r and r.b, "%.0f"), fmt(s and s.b, "%.0f")))
  end
end
