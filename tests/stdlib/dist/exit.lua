-- exit.lua: run by test_dist.lua on 2 ranks (mpirun): how a rank's script
-- ends, as arg[1] says. Each rank prints "ok end" as it goes out.
--   luaunit       LuaUnit's os.exit(lu.LuaUnit.run()), the world started
--                 inside a test (os.exit is looked up before it starts)
--   zero, true    a collective, then os.exit(0) / os.exit(true)
--   three, false  a collective, then os.exit(3) / os.exit(false)
--   three_close   os.exit(3, true): the state closed first
--   early         rank 0 ends its script while rank 1 calls all_reduce
--                 and catches the error, then ends
--   early_raise   the same, rank 1 does not catch it
--   early_exit    rank 0 leaves by os.exit(0), rank 1 does not catch it
local how = table.remove(arg, 1)
-- a line at a time: mpirun passes on each rank's output as it reads it,
-- and a block cut mid-line would splice another rank's lines into it
io.stdout:setvbuf("line")
local d = qkv.dist

if how == "luaunit" then
  local lu = require "luaunit"
  TestEnd = {}
  function TestEnd:testAllReduce()
    lu.assertEquals(d.all_reduce(qkv.ones(2)):tolist(), {d.world_size(), d.world_size()})
    print("ok end")
  end
  os.exit(lu.LuaUnit.run())
end

local W = d.world_size()
assert(W >= 2, "run me under mpirun -np 2 or more")
local x = d.all_reduce(qkv.ones(2))
assert(x:tolist()[1] == W)

if how == "zero" or how == "true" or how == "three" or how == "false" or how == "three_close" then
  print("ok end")
  local codes = {zero = 0, ["true"] = true, three = 3, ["false"] = false, three_close = 3}
  os.exit(codes[how], how == "three_close")
end

if how:match("^early") then
  if d.rank() == 0 then
    print("ok end")
    if how == "early_exit" then os.exit(0) end
    return
  end
  local ok, e = pcall(d.all_reduce, qkv.zeros(3))
  if how ~= "early" then error(e, 0) end
  assert(not ok and e:find("exit.lua:%d+: dist.all_reduce: the ranks disagree: rank 0 ended " ..
                           "its script; rank 1 called it with float32 %(3,%), op \"sum\""), e)
  -- rank 0 answers every check until this rank has ended too
  ok, e = pcall(d.barrier)
  assert(not ok and e:find("dist.barrier: the ranks disagree: rank 0 ended its script; rank 1 " ..
                           "called it", 1, true), e)
  print("ok caught")
  print("ok end")
  return
end

error("exit.lua: unknown way to end: " .. tostring(how))
