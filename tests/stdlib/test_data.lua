-- test_data.lua: qkv.randperm (stdlib/qkv/composite/factories.lua) and
-- qkv.data's TensorDataset and DataLoader (stdlib/qkv/data.lua): randperm
-- is a permutation of 1..n, the order that sorts qkv.rand's float64
-- draws, repeatable under qkv.seed and uniform over the n! orders; a
-- dataset's rows; a loader's batches in order, with drop_last, shuffled
-- (every row once an epoch, a new order each epoch, qkv.seed's or a
-- generator seed's of its own that leaves qkv's generator alone), nested
-- and stopped loops, datasets that are Lua lists; and the errors.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local fails = R.fails

local data = qkv.data

-- the values of a 1-D tensor, as a Lua list
local function list(t) return t:to("cpu"):tolist() end

local function sorted(l)
  local c = {table.unpack(l)}
  table.sort(c)
  return c
end

local function range(n)
  local r = {}
  for i = 1, n do r[i] = i end
  return r
end

-- counts of each order of 1..3 over `draws` calls of perm(), each within
-- 5 standard deviations of draws / 6
local function uniform_over_orders(perm, draws)
  local counts = {}
  for _ = 1, draws do
    local k = table.concat(perm(), ",")
    counts[k] = (counts[k] or 0) + 1
  end
  local n, mean = 0, draws / 6
  local sd = math.sqrt(draws * (1 / 6) * (5 / 6))
  for k, c in pairs(counts) do
    n = n + 1
    lu.assertTrue(math.abs(c - mean) <= 5 * sd, k .. ": " .. c .. " of " .. draws)
  end
  lu.assertEquals(n, 6)
end

---------------------------------------------------------------- randperm
TestRandperm = {}

function TestRandperm:testAPermutationOfOneToN()
  qkv.seed(1)
  for _, n in ipairs{0, 1, 2, 7, 1000} do
    local p = qkv.randperm(n)
    lu.assertEquals(p.dtype, "int64")
    lu.assertEquals(p.shape, qkv.zeros(n).shape)
    lu.assertEquals(sorted(list(p)), range(n), "n = " .. n)
  end
end

-- the order that sorts n float64 uniforms of qkv.rand, as documented
function TestRandperm:testTheOrderOfQkvRand()
  qkv.seed(3)
  local u = list(qkv.rand({50}, "float64", "cpu"))
  qkv.seed(3)
  local p = list(qkv.randperm(50))
  for i = 2, 50 do lu.assertTrue(u[p[i - 1]] < u[p[i]], "position " .. i) end
  lu.assertNotEquals(p, range(50))
end

function TestRandperm:testRepeatableUnderSeed()
  qkv.seed(5)
  local a, b = list(qkv.randperm(40)), list(qkv.randperm(40))
  lu.assertNotEquals(a, b)                   -- the generator moved on
  qkv.seed(5)
  lu.assertEquals(list(qkv.randperm(40)), a)
  lu.assertEquals(list(qkv.randperm(40)), b)
  qkv.manual_seed(6)
  lu.assertNotEquals(list(qkv.randperm(40)), a)
end

function TestRandperm:testUniform()
  qkv.seed(7)
  uniform_over_orders(function() return list(qkv.randperm(3)) end, 3000)
end

-- dtype and device as PyTorch's options; the same order in each dtype
function TestRandperm:testOptions()
  qkv.seed(9)
  local want = list(qkv.randperm(20))
  for _, dt in ipairs{"int32", "float64", "float32", "float16", "bfloat16"} do
    qkv.seed(9)
    local p = qkv.randperm(20, {dtype = dt})
    lu.assertEquals(p.dtype, dt)
    lu.assertEquals(list(p), want, dt)
  end
  qkv.seed(9)
  local p = qkv.randperm(20, {device = "cpu"})
  lu.assertEquals(p.device, "cpu")
  lu.assertEquals(list(p), want)
  if qkv.cuda_available() then          -- drawn on the CPU: the same order on the device
    qkv.seed(9)
    p = qkv.randperm(20, {device = "cuda"})
    lu.assertEquals(p.device, "cuda")
    lu.assertEquals(list(p), want)
  end
  lu.assertEquals(qkv.randperm(256, {dtype = "bfloat16"}):max():item(), 256)
  lu.assertEquals(qkv.randperm(0, {dtype = "float32"}).dtype, "float32")
end

function TestRandperm:testErrors()
  fails({"randperm: n must be non-negative, got -1", "test_data.lua:"}, function()
    local r = qkv.randperm(-1); return r
  end)
  fails("randperm: n must be an integer", qkv.randperm, 2.5)
  fails("randperm: n must be an integer", qkv.randperm, "3")
  fails("randperm: n must be an integer", qkv.randperm)
  fails("randperm: dtype must be a number dtype, got bool", qkv.randperm, 3, {dtype = "bool"})
  fails("randperm: float16 cannot hold 1 to 3000 exactly", qkv.randperm, 3000, {dtype = "float16"})
  fails("randperm: bfloat16 cannot hold 1 to 257 exactly", qkv.randperm, 257, {dtype = "bfloat16"})
  fails("randperm: unknown option 'dtyp' (did you mean 'dtype'?)", qkv.randperm, 3, {dtyp = "int32"})
  fails("randperm: unknown option 'generator'", qkv.randperm, 3, {generator = 1})
  fails("randperm: takes 2 arguments, got 3", qkv.randperm, 3, {}, 1)
end

---------------------------------------------------------------- TensorDataset
TestTensorDataset = {}

local X = qkv.arange(12, "float64"):view(6, 2)
local Y = qkv.arange(1, 7, "int64")

function TestTensorDataset:testRows()
  local ds = data.TensorDataset(X, Y)
  lu.assertEquals(#ds, 6)
  lu.assertEquals(#ds.tensors, 2)
  lu.assertIs(ds.tensors[1], X)
  for i = 1, 6 do
    local r = ds[i]
    lu.assertEquals(#r, 2)
    lu.assertEquals(r[1]:tolist(), {2 * i - 2, 2 * i - 1})
    lu.assertEquals(r[2].shape, qkv.zeros({}).shape)
    lu.assertEquals(r[2]:item(), i)
  end
  lu.assertEquals(ds[-1][2]:item(), 6)
  lu.assertEquals(ds[-6][2]:item(), 1)
  lu.assertEquals(#data.TensorDataset(qkv.zeros(0, 3)), 0)
  lu.assertEquals(tostring(ds), "TensorDataset(6 rows: (6, 2), (6,))")
  lu.assertEquals(#data.TensorDataset(X)[2], 1)
end

function TestTensorDataset:testErrors()
  fails({"TensorDataset: the tensors' first dims differ: tensor 1 is (6, 2) but tensor 2 is (5,)",
         "test_data.lua:"}, function()
    local r = data.TensorDataset(X, qkv.ones(5)); return r
  end)
  fails("TensorDataset: the tensors' first dims differ: tensor 1 is (6, 2) but tensor 3 is (7, 1)",
        data.TensorDataset, X, Y, qkv.ones(7, 1))
  fails("TensorDataset: needs at least one tensor", data.TensorDataset)
  fails("TensorDataset: argument 2 must be a tensor, got table", data.TensorDataset, X, {1, 2})
  fails("TensorDataset: tensor 1 is 0-d: each tensor needs a first dim", data.TensorDataset, qkv.tensor(1))
  local ds = data.TensorDataset(X, Y)
  fails("TensorDataset: index 7 is out of range for 6 rows (1 to 6, or -6 to -1)", function() return ds[7] end)
  fails("TensorDataset: index 0 is out of range", function() return ds[0] end)
  fails("TensorDataset: index -7 is out of range", function() return ds[-7] end)
  fails("TensorDataset: index must be an integer, got 1.5", function() return ds[1.5] end)
  fails("TensorDataset has no field 'tensor' (did you mean 'tensors'?)", function() return ds.tensor end)
  fails("TensorDataset: cannot set '1'", function() ds[1] = 3 end)
end

---------------------------------------------------------------- DataLoader
TestDataLoader = {}

-- the loader's epoch: the batches' sizes and their Y values in order
local function epoch(loader)
  local sizes, ys = {}, {}
  for xb, yb in loader do
    sizes[#sizes + 1] = yb:size(1)
    lu.assertEquals(xb:size(1), yb:size(1))
    for i, y in ipairs(list(yb)) do
      ys[#ys + 1] = y
      lu.assertEquals(list(xb[i]), {2 * y - 2, 2 * y - 1}, "x row " .. y)   -- rows stay paired
    end
  end
  return sizes, ys
end

function TestDataLoader:testInOrder()
  local ds = data.TensorDataset(X, Y)
  local sizes, ys = epoch(data.DataLoader(ds, {batch_size = 4}))
  lu.assertEquals(sizes, {4, 2})
  lu.assertEquals(ys, range(6))
  lu.assertEquals(#data.DataLoader(ds, {batch_size = 4}), 2)
  sizes = epoch(data.DataLoader(ds))                       -- batch_size 1
  lu.assertEquals(sizes, {1, 1, 1, 1, 1, 1})
  lu.assertEquals(#data.DataLoader(ds), 6)
  sizes = epoch(data.DataLoader(ds, {batch_size = 10}))
  lu.assertEquals(sizes, {6})
  -- a batch is each tensor's rows stacked, and a 1-D tensor's a (B,)
  for xb, yb in data.DataLoader(ds, {batch_size = 3}) do
    lu.assertEquals(xb.shape, qkv.zeros(3, 2).shape)
    lu.assertEquals(yb.shape, qkv.zeros(3).shape)
    lu.assertEquals(yb.dtype, "int64")
    lu.assertEquals(xb.dtype, "float64")
    break
  end
end

function TestDataLoader:testDropLast()
  local ds = data.TensorDataset(X, Y)
  local L = data.DataLoader(ds, {batch_size = 4, drop_last = true})
  lu.assertEquals(#L, 1)
  local sizes, ys = epoch(L)
  lu.assertEquals(sizes, {4})
  lu.assertEquals(ys, {1, 2, 3, 4})
  lu.assertEquals({epoch(data.DataLoader(ds, {batch_size = 3, drop_last = true}))}, {{3, 3}, range(6)})
  L = data.DataLoader(ds, {batch_size = 7, drop_last = true})
  lu.assertEquals(#L, 0)
  lu.assertEquals(epoch(L), {})
  local empty = data.DataLoader(data.TensorDataset(qkv.zeros(0, 2)), {batch_size = 2, shuffle = true})
  lu.assertEquals(#empty, 0)
  for _ in empty do lu.fail("an empty dataset has no batch") end
end

function TestDataLoader:testShuffleTakesEveryRowOnceAnEpoch()
  qkv.seed(11)
  local ds = data.TensorDataset(qkv.arange(40, "float64"):view(20, 2), qkv.arange(1, 21, "int64"))
  local L = data.DataLoader(ds, {batch_size = 3, shuffle = true})
  lu.assertEquals(#L, 7)
  local orders = {}
  for e = 1, 3 do
    local sizes, ys = epoch(L)
    lu.assertEquals(sizes, {3, 3, 3, 3, 3, 3, 2})
    lu.assertEquals(sorted(ys), range(20), "epoch " .. e)
    lu.assertNotEquals(ys, range(20))
    orders[e] = table.concat(ys, ",")
  end
  lu.assertNotEquals(orders[1], orders[2])      -- a new order each epoch
  lu.assertNotEquals(orders[2], orders[3])
  -- drop_last drops the shuffled order's last short batch
  local D = data.DataLoader(ds, {batch_size = 6, shuffle = true, drop_last = true})
  local sizes, ys = epoch(D)
  lu.assertEquals(sizes, {6, 6, 6})
  lu.assertEquals(#sorted(ys), 18)
  local seen = {}
  for _, y in ipairs(ys) do lu.assertNil(seen[y]); seen[y] = true end
end

-- without a generator the order is qkv.randperm's, so qkv.seed repeats it
function TestDataLoader:testShuffleFollowsQkvSeed()
  local ds = data.TensorDataset(X, Y)
  local L = data.DataLoader(ds, {batch_size = 4, shuffle = true})
  qkv.seed(21)
  local want = list(qkv.randperm(6))
  qkv.seed(21)
  local _, ys = epoch(L)
  lu.assertEquals(ys, want)
  qkv.seed(21)
  lu.assertEquals(select(2, epoch(L)), want)
end

-- with a generator seed: the same orders for the same seed, whatever
-- qkv.seed says, and qkv's generator left where it was
function TestDataLoader:testGeneratorSeed()
  local ds = data.TensorDataset(qkv.arange(24, "float64"):view(12, 2), qkv.arange(1, 13, "int64"))
  local function epochs(seed, global)
    local L = data.DataLoader(ds, {batch_size = 5, shuffle = true, generator = seed})
    lu.assertEquals(L.generator, seed)
    local out = {}
    for e = 1, 3 do
      qkv.seed(global + e)
      local _, ys = epoch(L)
      lu.assertEquals(sorted(ys), range(12))
      out[e] = table.concat(ys, ",")
    end
    return out
  end
  local a = epochs(7, 100)
  lu.assertEquals(epochs(7, 555), a)
  lu.assertNotEquals(a[1], a[2])
  lu.assertNotEquals(epochs(8, 100)[1], a[1])
  qkv.seed(1)
  local u = list(qkv.rand(4, "float64"))
  qkv.seed(1)
  local _ = epoch(data.DataLoader(ds, {batch_size = 5, shuffle = true, generator = 3}))
  lu.assertEquals(list(qkv.rand(4, "float64")), u)
  -- the orders it draws are uniform: one epoch of 3 rows for seeds 1..3000
  local ds3 = data.TensorDataset(qkv.arange(1, 4, "int64"))
  local seed = 0
  uniform_over_orders(function()
    seed = seed + 1
    for b in data.DataLoader(ds3, {batch_size = 3, shuffle = true, generator = seed}) do return list(b) end
  end, 3000)
end

-- each for is an epoch of its own: loops nest, and a loop stopped early
-- leaves the next one to start again
function TestDataLoader:testLoopsNestAndStop()
  local L = data.DataLoader(data.TensorDataset(X, Y), {batch_size = 2})
  local pairs_seen = {}
  for _, a in L do
    for _, b in L do pairs_seen[#pairs_seen + 1] = list(a)[1] .. "-" .. list(b)[1] end
  end
  lu.assertEquals(pairs_seen, {"1-1", "1-3", "1-5", "3-1", "3-3", "3-5", "5-1", "5-3", "5-5"})
  for _, yb in L do lu.assertEquals(list(yb), {1, 2}); break end
  lu.assertEquals(select(2, epoch(L)), range(6))
  -- a batch variable reassigned in the loop does not disturb it
  local n = 0
  for xb in L do xb = xb * 2; n = n + 1 end
  lu.assertEquals(n, 3)
  fails("DataLoader: called with a value that is not its last batch", L, nil, qkv.ones(1))
end

-- any dataset with #ds and ds[i]: a Lua list of items, each a tensor or a
-- list of tensors and numbers, collated as PyTorch's default collate
function TestDataLoader:testListsAsDatasets()
  local items = {}
  for i = 1, 5 do items[i] = {qkv.full({3}, i), i, i / 2, i % 2 == 0} end
  local got = {}
  for xb, ib, fb, bb in data.DataLoader(items, {batch_size = 2}) do
    got[#got + 1] = {xb.shape, ib.dtype, fb.dtype, bb.dtype, list(ib), list(fb), list(bb), list(xb[{{}, 1}])}
  end
  lu.assertEquals(#got, 3)
  lu.assertEquals(got[1], {qkv.zeros(2, 3).shape, "int64", "float64", "bool", {1, 2}, {0.5, 1}, {false, true}, {1, 2}})
  lu.assertEquals(got[3][5], {5})
  local tensors = {qkv.ones(2), qkv.zeros(2), qkv.ones(2) * 3}
  local sizes = {}
  for b in data.DataLoader(tensors, {batch_size = 2}) do sizes[#sizes + 1] = tostring(b.shape) end
  lu.assertEquals(sizes, {"(2, 2)", "(1, 2)"})
  lu.assertEquals(#data.DataLoader(tensors, {batch_size = 2}), 2)
end

function TestDataLoader:testFieldsAndPrinting()
  local ds = data.TensorDataset(X, Y)
  local L = data.DataLoader(ds, {batch_size = 4, shuffle = true})
  lu.assertIs(L.dataset, ds)
  lu.assertEquals({L.batch_size, L.shuffle, L.drop_last, L.generator}, {4, true, false, nil})
  lu.assertEquals(tostring(L), "DataLoader(2 batches of 4 from 6 items, shuffle=true, drop_last=false)")
  fails("DataLoader has no field 'batchsize' (did you mean 'batch_size'?)", function() return L.batchsize end)
end

function TestDataLoader:testErrors()
  local ds = data.TensorDataset(X, Y)
  fails({"DataLoader: batch_size must be a positive integer, got 0", "test_data.lua:"}, function()
    local r = data.DataLoader(ds, {batch_size = 0}); return r
  end)
  fails("DataLoader: batch_size must be a positive integer, got -2", data.DataLoader, ds, {batch_size = -2})
  fails("DataLoader: batch_size must be a positive integer, got 2.5", data.DataLoader, ds, {batch_size = 2.5})
  fails("DataLoader: unknown option 'batchsize' (did you mean 'batch_size'?)", data.DataLoader, ds,
        {batchsize = 2})
  fails("DataLoader: unknown option 'num_workers'", data.DataLoader, ds, {num_workers = 0})
  fails("DataLoader: option 'shuffle' must be a boolean, got number", data.DataLoader, ds, {shuffle = 1})
  fails("DataLoader: generator must be an integer seed, got 1.5", data.DataLoader, ds,
        {shuffle = true, generator = 1.5})
  fails("DataLoader: a generator seeds the shuffle, and shuffle is false", data.DataLoader, ds, {generator = 1})
  fails("DataLoader: options must be a table, got number", data.DataLoader, ds, 4)
  fails("DataLoader: takes a dataset and one options table", data.DataLoader, ds, {}, {})
  fails("DataLoader: dataset must be a TensorDataset or a table with #ds and ds[i], got a tensor "
        .. "(wrap it: qkv.data.TensorDataset(x))", data.DataLoader, X)
  fails("DataLoader: dataset must be a TensorDataset or a table", data.DataLoader, nil)
  -- items that cannot make a batch, named when the batch is made
  local function first(loader) for b in loader do return b end end
  fails("DataLoader: dataset[1] is a string: an item is a tensor or a list of tensors and numbers",
        first, data.DataLoader({"a", "b"}))
  fails("DataLoader: dataset[1]: the items cannot be stacked into a batch: stack: tensor 1 is (2,) but tensor 2 is (3,)",
        first, data.DataLoader({qkv.ones(2), qkv.ones(3)}, {batch_size = 2}))
  fails("DataLoader: dataset[2] has 1 fields but dataset[1] has 2",
        first, data.DataLoader({{qkv.ones(2), 1}, {qkv.ones(2)}}, {batch_size = 2}))
  fails("DataLoader: field 2: item 2 is bool but item 1 is int64",
        first, data.DataLoader({{qkv.ones(2), 1}, {qkv.ones(2), true}}, {batch_size = 2}))
  fails("DataLoader: field 1 is a string: an item holds tensors, numbers or booleans",
        first, data.DataLoader({{"a"}}))
  fails("qkv.data has no class 'Dataloader' (did you mean 'DataLoader'?)", function() return data.Dataloader end)
end

os.exit(lu.LuaUnit.run(), true)
