-- spin.lua: run by test_dist.lua and test_dist_net.lua under mpirun; every
-- rank all_reduces 4 MB again and again, so that a rank killed or a link
-- cut from outside finds the others in the middle of a collective. Each
-- rank writes its process id to <dir>/pid.<rank> once the first
-- all_reduce is done; the loop ends when <dir>/stop exists.
--   mpirun -np P build/qkv tests/stdlib/dist/spin.lua <dir>
-- a line at a time: mpirun passes on each rank's output as it reads it,
-- and a block cut mid-line would splice another rank's lines into it
io.stdout:setvbuf("line")
local d = qkv.dist
local dir = assert(arg[1], "usage: spin.lua <dir>")
local x = qkv.ones(1 << 20)
d.all_reduce(x)
assert(x[1] == d.world_size(), "the first all_reduce")
local pid = assert(io.open("/proc/self/stat")):read("n")
local f = assert(io.open(("%s/pid.%d"):format(dir, d.rank()), "w"))
f:write(pid, "\n")
f:close()
-- the ranks stop together: whether any sees the file is a collective too
local function stop()
  local seen = io.open(dir .. "/stop")
  if seen then seen:close() end
  return d.all_reduce(qkv.tensor({seen and 1 or 0}), "max")[1] == 1
end
local n = 0
while not stop() do
  x:fill_(1)
  d.all_reduce(x)
  n = n + 1
end
print(("ok spun %d"):format(n))
