-- test_dist_net.lua: qkv.dist across hosts, over TCP. Three hosts made as
-- network namespaces on this machine (tests/tools/netns.sh: a bridge, a
-- veth pair a host, Open MPI's daemons started in each host through a
-- launch agent, the ranks on btl self,tcp: no shared memory), one rank a
-- host: the collectives, DDP, ring and Ulysses attention and the ways a
-- script ends, run as test_dist.lua and test_dist_attention.lua run them
-- on one machine; then a host's link cut in the middle of all_reduces,
-- which must end the whole job with mpirun naming the host (a watchdog of
-- 120 s catches a hang; no time is asserted). Skipped, with the reason,
-- where namespaces cannot be made (not root, no ip or unshare, no
-- CAP_NET_ADMIN), or without mpirun or build/lib/qkv/mpi.so.
local lu = require "luaunit"
local shell = dofile("tests/helpers/shell.lua")
local mpi = dofile("tests/helpers/mpi.lua")

local exe = arg and arg[-1] or "build/qkv"
local NETNS = "tests/tools/netns.sh"
-- this process's own namespaces, which no other run shares
local PID = assert(io.open("/proc/self/stat")):read("n")
local PREFIX = "qkv" .. PID
local HOSTS = 3

local why                                  -- why the suite cannot run here
local function missing()
  local m = mpi.missing(exe)
  if m then return m end
  local out = shell.sh(NETNS .. " check")
  return out ~= "" and out:gsub("\n$", "") or nil
end

-- every process still in one of our namespaces killed, the namespaces gone
local function down()
  local names = {PREFIX .. "s"}
  for i = 0, HOSTS - 1 do names[#names + 1] = PREFIX .. "h" .. i end
  for _, ns in ipairs(names) do
    shell.sh(("for p in $(ip netns pids %s 2>/dev/null); do kill -KILL $p; done"):format(ns))
  end
  shell.sh(("%s down %s %d"):format(NETNS, PREFIX, HOSTS))
end

-- `mpirun -np n exe args...` on the first n hosts, within `limit` seconds;
-- returns the output (mpi.gather's) and the status
local function run(n, limit, ...)
  local words = {}
  for i, a in ipairs{...} do words[i] = shell.quote(a) end
  local dir = shell.tmpdir()
  local out, code = shell.sh(("timeout -k 5 %d env %s %s mpirun %s %d %s %s %s"):format(limit, mpi.ASAN,
    NETNS, PREFIX, n, mpi.files(dir), shell.quote(exe), table.concat(words, " ")))
  return mpi.gather(out, dir), code
end

TestDistNet = {}

function TestDistNet:setUp()
  if why == nil then why = missing() or false end
  if why then lu.skip(why) end
  down()
  local out, code = shell.sh(("%s up %s %d"):format(NETNS, PREFIX, HOSTS))
  lu.assertEquals(code, 0, out)
end

function TestDistNet:tearDown()
  if not why then down() end
end

-- each rank on a host of its own, rank r on host h<r>, each in another
-- network namespace, and an all_reduce across them
function TestDistNet:testRanksOnTheirHosts()
  local out, code = run(HOSTS, 120, "-e", [[
local d = qkv.dist
local host = io.popen("hostname"):read("l")
local ns = io.popen("readlink /proc/self/ns/net"):read("l")
print(("rank %d on %s in %s sum %d"):format(d.rank(), host, ns, d.all_reduce(qkv.ones(1))[1]))]])
  lu.assertEquals(code, 0, out)
  local seen = {}
  for r = 0, HOSTS - 1 do
    local ns, sum = out:match(("rank %d on h%d in (%%S+) sum (%%d+)"):format(r, r))
    lu.assertNotNil(ns, out)
    lu.assertEquals(tonumber(sum), HOSTS, out)
    lu.assertNil(seen[ns], out)
    seen[ns] = true
  end
end

function TestDistNet:testCollectives()
  local out, code = run(HOSTS, 300, "tests/stdlib/dist/collectives.lua")
  mpi.check(lu, out, code, HOSTS, {"all_reduce sum bfloat16", "all_reduce mean float16",
    "reduce_scatter sum", "all_to_all", "send recv ring", "mismatch call", "mismatch kind",
    "recv mismatch", "done"})
end

function TestDistNet:testDDP()
  local out, code = run(HOSTS, 300, "tests/stdlib/dist/ddp.lua")
  mpi.check(lu, out, code, HOSTS, {"broadcast at wrap", "grads step 3", "three steps", "done"})
end

-- two hosts: the attention script's Ulysses cases have 4 heads
function TestDistNet:testAttention()
  local out, code = run(2, 300, "tests/stdlib/dist/attention.lua")
  mpi.check(lu, out, code, 2, {"ring causal out", "ring causal dk", "ulysses mask dq",
    "ring zigzag out", "ring zigzag dv", "ring blocks differ named", "done"})
end

-- LuaUnit's os.exit(lu.LuaUnit.run(), true): status 0, MPI finalized on every
-- host; os.exit(3) passes through
function TestDistNet:testExit()
  local out, code = run(HOSTS, 120, "tests/stdlib/dist/exit.lua", "luaunit")
  lu.assertEquals(code, 0, out)
  lu.assertEquals(mpi.oks(out)["end"], HOSTS, out)
  lu.assertNotStrContains(out, "exiting improperly")
  out, code = run(HOSTS, 120, "tests/stdlib/dist/exit.lua", "three")
  lu.assertEquals(code, 3, out)
end

-- host h2's link cut while every rank is in a loop of 4 MB all_reduces
-- (dist/spin.lua): mpirun ends the job, naming the host it lost (rank 2's:
-- one rank a host, in order), and nothing is left running on any host
function TestDistNet:testCutLinkEndsTheJob()
  local dir = shell.tmpdir()
  local sh = ([[
d=%s
timeout -k 5 400 env %s %s mpirun %s %d %s tests/stdlib/dist/spin.lua "$d" > "$d/out" 2>&1 & m=$!
for i in $(seq 1 1200); do [ -s "$d/pid.0" ] && [ -s "$d/pid.1" ] && [ -s "$d/pid.2" ] && break; sleep 0.1; done
for r in 0 1 2; do [ -s "$d/pid.$r" ] || echo "rank $r did not start"; done
t0=$(date +%%s.%%N)
%s cut %s 2
for i in $(seq 1 1200); do kill -0 $m 2>/dev/null || break; sleep 0.1; done
# a hang shows mpirun's connections (its state: a timer on each)
if kill -0 $m 2>/dev/null; then echo "hung"; ip netns exec %sh0 ss -tnoi | sed "s/^/h0: /"; fi
echo "secs $(echo "$(date +%%s.%%N) - $t0" | bc)"
# the other hosts' daemons and ranks end after mpirun does: up to 120 s
# (a hang catcher) for every host to be empty
for i in $(seq 1 1200); do
  left=""
  for ns in %sh0 %sh1 %sh2; do
    for p in $(ip netns pids $ns); do
      s=$(cut -d" " -f3 "/proc/$p/stat" 2>/dev/null)      # Z: gone, not yet reaped
      [ -n "$s" ] && [ "$s" != Z ] && left="$left
left in $ns: $(tr '\0' ' ' < /proc/$p/cmdline)"
    done
  done
  [ -z "$left" ] && break
  sleep 0.1
done
[ -n "$left" ] && echo "$left"
wait $m; echo "status $?"
]]):format(shell.quote(dir), mpi.ASAN, NETNS, PREFIX, HOSTS, shell.quote(exe), NETNS, PREFIX,
             PREFIX, PREFIX, PREFIX, PREFIX)
  local out = shell.sh(sh)
  local log = shell.read(dir .. "/out") or ""
  os.execute("rm -rf " .. shell.quote(dir))
  lu.assertNotStrContains(out, "did not start", out .. log)
  lu.assertNotStrContains(out, "hung", out .. log)
  lu.assertNotStrContains(out, "left in", out .. log)
  lu.assertNotStrContains(out, "status 0", out .. log)
  lu.assertNotStrContains(out, "status 124", out .. log)       -- timeout's
  lu.assertStrContains(log, "ORTE has lost communication with a remote daemon", out .. log)
  lu.assertStrContains(log, "on node h2", out .. log)
  lu.assertNotStrContains(log, "ok spun", out .. log)
end

os.exit(lu.LuaUnit.run(), true)
