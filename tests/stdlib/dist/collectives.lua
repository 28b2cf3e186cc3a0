-- collectives.lua: run by test_dist.lua on 2 and 4 ranks (mpirun). Every
-- collective and point-to-point call on every dtype, against values worked
-- out here from the ranks' numbers; each check prints "ok <name>" once it
-- holds, and a failed one raises (which ends the whole job).
-- a line at a time: mpirun passes on each rank's output as it reads it,
-- and a block cut mid-line would splice another rank's lines into it
io.stdout:setvbuf("line")
local d = qkv.dist
local R, W = d.rank(), d.world_size()

local function same(got, want, name)
  local g = type(got) == "table" and got or got:tolist()
  local function eq(a, b)
    if type(a) == "table" then
      if type(b) ~= "table" or #a ~= #b then return false end
      for i = 1, #a do if not eq(a[i], b[i]) then return false end end
      return true
    end
    return a == b
  end
  if not eq(g, want) then
    error(("%s on rank %d: got %s"):format(name, R, tostring(got)), 2)
  end
  print("ok " .. name)
end

local function ok(cond, name, msg)
  if not cond then error(("%s on rank %d: %s"):format(name, R, msg or "failed"), 2) end
  print("ok " .. name)
end

assert(W >= 2, "run me under mpirun -np 2 or more")
ok(d.rank() == R and R >= 0 and R < W and d.is_initialized(), "rank")

-- sum, max, min, mean of rank + 1 over the ranks, every dtype
local tri = W * (W + 1) // 2
for _, dt in ipairs({"float32", "float64", "float16", "bfloat16", "int64", "int32"}) do
  local function t() return qkv.full({2, 3}, R + 1, dt) end
  local function rows(v) return {{v, v, v}, {v, v, v}} end
  same(d.all_reduce(t()), rows(tri), "all_reduce sum " .. dt)
  same(d.all_reduce(t(), "max"), rows(W), "all_reduce max " .. dt)
  same(d.all_reduce(t(), "min"), rows(1), "all_reduce min " .. dt)
  if dt:find("float") then
    same(d.all_reduce(t(), "mean"), rows((W + 1) / 2), "all_reduce mean " .. dt)
  end
end
-- max and min keep a NaN whichever rank holds it, as qkv.maximum does
-- (MPI's own MPI_MAX kept or dropped it by rank): element 1 NaN on rank 0,
-- element 2 on the last rank
for _, dt in ipairs({"float32", "float64", "float16", "bfloat16"}) do
  for _, op in ipairs({"max", "min"}) do
    local v = qkv.tensor({R == 0 and 0 / 0 or 1, R == W - 1 and 0 / 0 or 2}, dt)
    local r = d.all_reduce(v, op)
    ok(r:ne(r):all():item(), "all_reduce " .. op .. " keeps NaN " .. dt, tostring(r))
  end
end
same(d.all_reduce(qkv.tensor({R == 0, false, true})), {true, false, true}, "all_reduce sum bool")
same(d.all_reduce(qkv.tensor({R == 0, true}), "min"), {false, true}, "all_reduce min bool")
same(d.all_reduce(qkv.tensor({R == 1, false}), "max"), {true, false}, "all_reduce max bool")

-- float64 sums in a fixed order give the float64 sum of the parts
local x = qkv.tensor({0.1 * (R + 1), 1 / (R + 3)}, "float64")
local want = {0, 0}
for r = 0, W - 1 do want[1], want[2] = want[1] + 0.1 * (r + 1), want[2] + 1 / (r + 3) end
local got = d.all_reduce(x):tolist()
ok(math.abs(got[1] - want[1]) < 1e-15 and math.abs(got[2] - want[2]) < 1e-15, "all_reduce float64")

-- a view that is not contiguous is reduced in place through a copy
local base = qkv.arange(1, 7, "float32"):view(2, 3)
local v = base:t()
d.all_reduce(v)
same(base, {{W, 2 * W, 3 * W}, {4 * W, 5 * W, 6 * W}}, "all_reduce transposed view")
local col = qkv.zeros(3, 2)
d.all_reduce(col:select(2, 2):fill_(R))
same(col, {{0, W * (W - 1) / 2}, {0, W * (W - 1) / 2}, {0, W * (W - 1) / 2}}, "all_reduce column")

-- broadcast from the last rank
for _, dt in ipairs({"float32", "int64", "bool", "float16"}) do
  local b = R == W - 1 and qkv.ones(4, dt) or qkv.zeros(4, dt)
  local one = dt == "bool" and true or 1
  same(d.broadcast(b, W - 1), {one, one, one, one}, "broadcast " .. dt)
end

-- all_gather: (W, ...) with rank r's at r + 1
local g = d.all_gather(qkv.tensor({R, 10 * R}, "int64"))
local rows = {}
for r = 0, W - 1 do rows[r + 1] = {r, 10 * r} end
same(g, rows, "all_gather")
ok(tostring(g.shape) == ("(%d, 2)"):format(W), "all_gather shape")
same(d.all_gather(qkv.tensor(R % 2 == 0)), (function()
  local l = {}
  for r = 0, W - 1 do l[r + 1] = r % 2 == 0 end
  return l
end)(), "all_gather bool scalar")

-- reduce_scatter: element i summed over ranks is W i + W (W - 1) / 2;
-- rank r keeps rows 2r + 1 and 2r + 2
local rs = d.reduce_scatter(qkv.arange(0, 2 * W, "float64"):view(2 * W, 1) + R)
same(rs, {{W * (2 * R) + W * (W - 1) / 2}, {W * (2 * R + 1) + W * (W - 1) / 2}},
     "reduce_scatter sum")
same(d.reduce_scatter(qkv.full({W}, R, "int64"), "max"), {W - 1}, "reduce_scatter max")

-- all_to_all: rank R's row block j (value 100 R + j) goes to rank j; the
-- blocks received are joined along dim 2, in rank order
local t = qkv.zeros(2 * W, 3, "int64")
for j = 0, W - 1 do t:narrow(1, 2 * j + 1, 2):fill_(100 * R + j) end
local a = d.all_to_all(t, 1, 2)
ok(tostring(a.shape) == ("(2, %d)"):format(3 * W), "all_to_all shape")
local arow = {}
for r = 0, W - 1 do for _ = 1, 3 do arow[#arow + 1] = 100 * r + R end end
same(a, {arow, arow}, "all_to_all")
-- split along the last dim, joined along the first (heads to sequence)
local h = qkv.full({3, W}, R, "float32")
same(d.all_to_all(h, -1, 1), (function()
  local l = {}
  for r = 0, W - 1 do for _ = 1, 3 do l[#l + 1] = {r} end end
  return l
end)(), "all_to_all last to first")

-- point to point: around the ring, blocking and not
local nxt, prv = (R + 1) % W, (R - 1) % W
local inbox = qkv.zeros(2, 2)
if R % 2 == 0 then
  d.send(qkv.full({2, 2}, R), nxt, 7)
  d.recv(inbox, prv, 7)
else
  d.recv(inbox, prv, 7)
  d.send(qkv.full({2, 2}, R), nxt, 7)
end
same(inbox, {{prv, prv}, {prv, prv}}, "send recv ring")
local box = qkv.zeros(3, "bfloat16")
local rw = d.recv(box, prv, 3, {async_op = true})
local sw = d.send(qkv.full({3}, R + 0.5, "bfloat16"), nxt, 3, {async_op = true})
sw:wait()
ok(rw:wait() == box, "recv async returns t")
same(box, {prv + 0.5, prv + 0.5, prv + 0.5}, "send recv async")
-- into a view that is not contiguous
local tgt = qkv.zeros(2, 2)
if R == 0 then d.send(qkv.tensor({{1, 2}, {3, 4}}), 1) elseif R == 1 then d.recv(tgt:t(), 0) end
if R == 1 then same(tgt, {{1, 3}, {2, 4}}, "recv into transposed") else print("ok recv into transposed") end

-- async collectives
local w1 = d.all_reduce(qkv.ones(1000), "sum", {async_op = true})
local w2 = d.all_gather(qkv.tensor({R}), {async_op = true})
local r1 = w1:wait()
ok(r1[1] == W and w1:is_completed() and w1:wait() == r1, "all_reduce async")
same(w2:wait(), (function()
  local l = {}
  for r = 0, W - 1 do l[r + 1] = {r} end
  return l
end)(), "all_gather async")
d.barrier({async_op = true}):wait()
d.barrier()
print("ok barrier")

-- ranks that disagree: an error on every rank, naming them
local okc, msg = pcall(d.all_reduce, qkv.zeros(R == 1 and 3 or 2))
ok(not okc and msg:find("dist.all_reduce: the ranks disagree", 1, true) and
   msg:find("rank 1 called it with float32 (3,)", 1, true), "mismatch shape", msg)
okc, msg = pcall(d.broadcast, qkv.zeros(2, R == 0 and "float64" or "float32"), 0)
ok(not okc and msg:find("rank 0 called it with float64 (2,), src 0", 1, true), "mismatch dtype", msg)
okc, msg = pcall(d.all_reduce, qkv.zeros(2), R == 0 and "max" or "sum")
ok(not okc and msg:find('op "max"', 1, true), "mismatch op", msg)
okc, msg = pcall(R == 0 and d.barrier or function() return d.all_reduce(qkv.zeros(1)) end)
local others = W == 2 and "rank 1" or "ranks 1, 2"
local want1 = R == 0 and "the ranks disagree: rank 0 called it; " .. others
              or "the ranks disagree: rank 0 called it with barrier; " .. others
ok(not okc and msg:find(want1, 1, true) and msg:find(R == 0 and "all_reduce on float32 (1,)" or
   "called it with float32 (1,), op \"sum\"", 1, true), "mismatch call", msg)
-- a collective on one rank, an attention on the others: each side names
-- what the other called
local z = qkv.zeros(1, 2, 4)
if R == 0 then okc, msg = pcall(d.all_reduce, qkv.zeros(2))
else okc, msg = pcall(d.ring_attention, z, z, z) end
local rest = {}
for r = 1, W - 1 do rest[r] = r end
rest = (W == 2 and "rank " or "ranks ") .. table.concat(rest, ", ")
local want2 = R == 0 and "; " .. rest .. " called ring_attention with q float32 (1, 2, 4), k "
              or "rank 0: called all_reduce on float32 (2,); " .. rest .. ": q float32 (1, 2, 4)"
ok(not okc and msg:find(want2, 1, true), "mismatch kind", msg)
-- an error in one rank's own arguments (caught by pcall) is an error on
-- every rank, and the calls after it pair up as before: one rank that
-- raised before agreeing met the others' next collective with its own
okc, msg = pcall(d.reduce_scatter, qkv.zeros(R == 1 and W + 1 or W))
ok(not okc and (R == 1 and msg:find("must divide among", 1, true) or
   R ~= 1 and msg:find("rank 1 raised an error on its own arguments to reduce_scatter", 1, true)),
   "own argument error on every rank", msg)
okc, msg = pcall(d.all_reduce, qkv.ones(1), R == 1 and "prod" or "sum")
ok(not okc, "own op error on every rank", msg)
local after = d.all_reduce(qkv.tensor({R + 1}, "int64")):tolist()
ok(after[1] == W * (W + 1) // 2, "in step after argument errors", tostring(after[1]))
okc, msg = pcall(d.ring_attention, z, z, z, {causal = R == 1 and 1 or false})
ok(not okc, "own option error on every rank", msg)
after = d.all_reduce(qkv.tensor({R + 1}, "int64")):tolist()
ok(after[1] == W * (W + 1) // 2, "in step after an option error", tostring(after[1]))
if R == 0 then
  okc, msg = pcall(d.recv, qkv.zeros(3), 1, 9)
  ok(not okc and msg:find("dist.recv: rank 1 sent float32 (2, 2), but t is float32 (3,)", 1, true),
     "recv mismatch", msg)
elseif R == 1 then
  d.send(qkv.zeros(2, 2), 0, 9)
  print("ok recv mismatch")
else
  print("ok recv mismatch")
end
d.barrier()
print("ok done")
