-- ddp.lua: run by test_dist.lua on 2 and 4 ranks. qkv.dist.DDP: three SGD
-- steps of a small float64 model, each rank on its slice of the batch,
-- against three steps on the whole batch in this process without DDP
-- (the same start); every check prints "ok <name>" once it holds.
-- a line at a time: mpirun passes on each rank's output as it reads it,
-- and a block cut mid-line would splice another rank's lines into it
io.stdout:setvbuf("line")
local d = qkv.dist
local nn = qkv.nn
local R, W = d.rank(), d.world_size()

local function ok(cond, name, msg)
  if not cond then error(("%s on rank %d: %s"):format(name, R, msg or "failed"), 2) end
  print("ok " .. name)
end

local function model(seed)
  qkv.seed(seed)
  return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.GELU(),
                       nn.Linear(16, 3)):double()
end

local function maxdiff(a, b)
  return (a - b):abs():max():item()
end

-- the batch, the same on every rank: 4 rows per rank
qkv.seed(1234)
local B = 4 * W
local x, y = qkv.randn(B, 6):double(), qkv.randn(B, 3):double()
local mine = {4 * R + 1, 4}

-- every rank starts from a different model: DDP gives them rank 0's
local net = model(100 + R)
local ref = model(100)
local ddp = d.DDP(net, {bucket_cap_mb = 0.001})    -- small buckets: several of them
local p0, r0 = net:parameters(), ref:parameters()
local worst = 0
for i = 1, #p0 do worst = math.max(worst, maxdiff(p0[i], r0[i])) end
ok(worst == 0, "broadcast at wrap", ("%g"):format(worst))
ok(#ddp._buckets > 1 and #ddp:parameters() == #p0, "buckets", tostring(#ddp._buckets))

-- the buckets start while backward runs: by the time backward reaches the
-- first layer, the last layer's bucket (the first one) is on its way
local seen
net[1].weight:register_post_accumulate_grad_hook(function()
  seen = {first = ddp._buckets[1].launched == true}
end)
local opt = qkv.optim.SGD(ddp, {lr = 0.1})
local opt_ref = qkv.optim.SGD(ref, {lr = 0.1})
for step = 1, 3 do
  opt:zero_grad()
  local loss = nn.mse_loss(ddp(x:narrow(1, mine[1], mine[2])), y:narrow(1, mine[1], mine[2]))
  loss:backward()
  -- by the time backward returns, every .grad is the mean over the ranks
  opt_ref:zero_grad()
  nn.mse_loss(ref(x), y):backward()
  local pw, pr = net:parameters(), ref:parameters()
  local g = 0
  for i = 1, #pw do g = math.max(g, maxdiff(pw[i].grad, pr[i].grad)) end
  ok(g < 1e-13, "grads step " .. step, ("%g"):format(g))
  ok(seen and seen.first, "bucket started during backward " .. step)
  seen = nil
  opt:step()
  opt_ref:step()
end
worst = 0
local pw, pr = net:parameters(), ref:parameters()
for i = 1, #pw do worst = math.max(worst, maxdiff(pw[i], pr[i])) end
ok(worst < 1e-12, "three steps", ("%g"):format(worst))

-- a parameter that only some ranks use counts zeros for the others; one
-- that none uses keeps its .grad (nil)
local two = nn.ModuleList{nn.Linear(2, 1), nn.Linear(2, 1), nn.Linear(2, 1)}:double()
local dd = d.DDP(two)
local input = qkv.ones(1, 2):double()
local out = two[1](input)
if R == 0 then out = out + two[2](input) end
out:sum():backward()
local lin2 = two[2].weight.grad
ok(lin2 ~= nil and math.abs(lin2[1][1] - 1 / W) < 1e-15, "used by rank 0 alone",
   tostring(lin2))
ok(two[3].weight.grad == nil and two[3].bias.grad == nil, "unused everywhere")
ok(dd.module == two, "module")

-- the buckets start in one order on every rank, whatever order backward
-- reaches them in: rank 0 runs l2(l1(x)), the others l1(x) alone, each
-- parameter a bucket; the k-th all_reduce summed rank 0's l2 with the
-- others' l1 (the same sizes) before
local pair = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)):double()
local dp = d.DDP(pair, {bucket_cap_mb = 1e-6})
local function local_loss(m, rank, xs)
  return (rank == 0 and m[2](m[1](xs)) or m[1](xs)):pow(2):sum()
end
local xs = qkv.ones(2, 4):double() * (R + 1)
dp(qkv.zeros(1, 4):double())                 -- a forward through the wrapper hooks them
local_loss(pair, R, xs):backward()
local want = {}
for q = 0, W - 1 do                          -- each rank's local gradients, here
  local ref = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)):double()
  qkv.no_grad(function()
    for i, p in ipairs(ref:parameters()) do p:copy_(pair:parameters()[i]) end
  end)
  local_loss(ref, q, qkv.ones(2, 4):double() * (q + 1)):backward()
  for i, p in ipairs(ref:parameters()) do
    local g = p.grad or qkv.zeros(p.shape, "float64")
    want[i] = want[i] and want[i] + g or g
  end
end
local worst_order = 0
for i, p in ipairs(pair:parameters()) do
  worst_order = math.max(worst_order, maxdiff(p.grad, want[i] / W))
end
ok(worst_order < 1e-13, "buckets in one order on every rank", ("%g"):format(worst_order))

-- the wrapper is a Module whose child is the wrapped one: double() after
-- wrapping converts the wrapped module's tensors, the next forward hooks
-- the new ones, and their gradients are the mean over the ranks; eval
-- reaches the wrapped module
local function small(seed)
  qkv.seed(seed)
  return nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 3))
end
local net2, ref2 = small(200 + R), small(200):double()
local dd2 = d.DDP(net2)
ok(dd2:double() == dd2 and net2[1].weight.dtype == "float64", "double after wrapping")
dd2:eval()
ref2:eval()
ok(not net2.training and not net2[2].training, "eval reaches the module")
local opt2 = qkv.optim.SGD(dd2, {lr = 0.1})
nn.mse_loss(dd2(x:narrow(1, mine[1], mine[2])), y:narrow(1, mine[1], mine[2])):backward()
nn.mse_loss(ref2(x), y):backward()
local pw2, pr2 = net2:parameters(), ref2:parameters()
local g2 = 0
for i = 1, #pw2 do g2 = math.max(g2, maxdiff(pw2[i].grad, pr2[i].grad)) end
ok(g2 < 1e-13, "grads after double", ("%g"):format(g2))
opt2:step()
d.barrier()
print("ok done")
