-- data.lua: qkv.data, PyTorch's torch.utils.data for tensors: a
-- TensorDataset pairs tensors row by row, and a DataLoader deals a
-- dataset out in batches, in order or shuffled, as PyTorch's default
-- collate does (each tensor of the items stacked along a new first dim).
--
--   local ds = qkv.data.TensorDataset(x, y)    -- #ds rows; ds[i] = {x[i], y[i]}
--   local loader = qkv.data.DataLoader(ds, {batch_size = 32, shuffle = true})
--   for xb, yb in loader do ... end            -- an epoch; #loader batches
--
-- Rows and indices count from 1. The loader itself is the iterator of a
-- generic for: each `for` over it is an epoch of its own (a shuffled
-- loader draws a new order for each), so loops may nest or stop early.
-- A shuffled loader draws from qkv's generator with qkv.randperm, so
-- qkv.seed repeats it; with {generator = seed} it draws from a generator
-- of its own seeded once (splitmix64 and Fisher-Yates, here), whose orders
-- repeat for the same seed whatever qkv.seed says, and leave qkv's
-- generator where it was.

local qkv = require "qkv"
local caller = require "qkv.caller"

local SOURCE = debug.getinfo(1, "S").source
local function fail(fmt, ...) error(string.format(fmt, ...), caller(SOURCE, true)) end

local M = {}

-- a read of a field an object lacks: an error naming the nearest one
local function no_field(name, k, fields)
  local near = type(k) == "string" and qkv._nearest(k, fields)
  fail("%s has no field '%s'%s", name, tostring(k), near and " (did you mean '" .. near .. "'?)" or "")
end

---------------------------------------------------------------- TensorDataset

local Dataset = {__name = "TensorDataset"}

-- qkv.data.TensorDataset(t1, t2, ...): row i of each tensor, for i in 1..n
function M.TensorDataset(...)
  local n, tensors = select("#", ...), {...}
  if n == 0 then fail("TensorDataset: needs at least one tensor") end
  for i = 1, n do
    local t = tensors[i]
    if not qkv.is_tensor(t) then fail("TensorDataset: argument %d must be a tensor, got %s", i, type(t)) end
    if not pcall(function() return t.ndim end) then fail("TensorDataset: tensor %d is closed", i) end
    if t:dim() == 0 then
      fail("TensorDataset: tensor %d is 0-d: each tensor needs a first dim, its rows", i)
    end
    if t:size(1) ~= tensors[1]:size(1) then
      fail("TensorDataset: the tensors' first dims differ: tensor 1 is %s but tensor %d is %s",
           tostring(tensors[1].shape), i, tostring(t.shape))
    end
  end
  return setmetatable({tensors = tensors}, Dataset)
end

-- the row count, and row i as a positive index (negative counts from the end)
local function rows(ds) return rawget(ds, "tensors")[1]:size(1) end

local function row_index(fname, i, n)
  if math.type(i) ~= "integer" then fail("%s: index must be an integer, got %s", fname, tostring(i)) end
  local j = i < 0 and n + 1 + i or i
  if j < 1 or j > n or i == 0 then
    fail("%s: index %d is out of range for %d rows (1 to %d, or -%d to -1)", fname, i, n, n, n)
  end
  return j
end

-- ds[i]: {t1's row i, t2's row i, ...}, as PyTorch's tuple
function Dataset.__index(ds, k)
  if type(k) == "number" then
    local j = row_index("TensorDataset", k, rows(ds))
    local out = {}
    for i, t in ipairs(rawget(ds, "tensors")) do out[i] = t:select(1, j) end
    return out
  end
  no_field("TensorDataset", k, {"tensors"})
end

function Dataset.__newindex(_, k)
  fail("TensorDataset: cannot set '%s': a dataset's rows are its tensors' (ds.tensors)", tostring(k))
end

Dataset.__len = rows

function Dataset.__tostring(ds)
  local shapes = {}
  for i, t in ipairs(rawget(ds, "tensors")) do shapes[i] = tostring(t.shape) end
  return string.format("TensorDataset(%d rows: %s)", rows(ds), table.concat(shapes, ", "))
end

---------------------------------------------------------------- orders

-- the loader's own generator: splitmix64 on Lua's wrapping integers
local function splitmix(state)
  state = state + 0x9E3779B97F4A7C15
  local z = state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return state, z ~ (z >> 31)
end

-- 1..n shuffled by Fisher-Yates from the loader's generator, which it
-- advances (a 63-bit draw mod i: a bias below i / 2^63)
local function own_permutation(loader, n)
  local p, state, z = {}, rawget(loader, "_state"), nil
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    state, z = splitmix(state)
    local j = (z >> 1) % i + 1
    p[i], p[j] = p[j], p[i]
  end
  rawset(loader, "_state", state)
  return qkv.tensor(p, "int64", "cpu")
end

---------------------------------------------------------------- batches

-- one batch's values from items (each a tensor, or a list of tensors,
-- numbers and booleans), stacked field by field as PyTorch's default collate
local function collate_field(values, where)
  local first = values[1]
  if qkv.is_tensor(first) then
    local ok, r = pcall(qkv.stack, values)
    if not ok then
      fail("DataLoader: %s: the items cannot be stacked into a batch: %s", where,
           tostring(r):gsub("^[^\n]-:%d+: ", "", 1))
    end
    return r
  end
  -- numbers: int64 when every one is an integer, else float64
  local function kind_of(v)
    return math.type(v) == "integer" and "int64" or type(v) == "number" and "float64"
           or type(v) == "boolean" and "bool" or type(v)
  end
  local kind = kind_of(first)
  if kind ~= "int64" and kind ~= "float64" and kind ~= "bool" then
    fail("DataLoader: %s is a %s: an item holds tensors, numbers or booleans", where, kind)
  end
  for i, v in ipairs(values) do
    local k = kind_of(v)
    if k == "float64" and kind == "int64" then kind = k
    elseif k ~= kind and not (k == "int64" and kind == "float64") then
      fail("DataLoader: %s: item %d is %s but item 1 is %s", where, i, qkv.is_tensor(v) and "a tensor" or k,
           kind_of(first))
    end
  end
  return qkv.tensor(values, kind)
end

-- the batch of the dataset's items at idx (a CPU int64 tensor), as values
local function collate(ds, idx)
  if getmetatable(ds) == Dataset then
    local out = {}
    for i, t in ipairs(rawget(ds, "tensors")) do
      out[i] = t:index_select(1, t.device == "cpu" and idx or idx:to(t.device))
    end
    return out
  end
  local items, n = {}, nil
  for p, i in ipairs(idx:tolist()) do
    local item = ds[i]
    local fields = qkv.is_tensor(item) and 1 or type(item) == "table" and #item or nil
    if not fields or fields == 0 then
      fail("DataLoader: dataset[%d] is %s: an item is a tensor or a list of tensors and numbers",
           i, type(item) == "table" and "an empty table" or "a " .. type(item))
    end
    if n and fields ~= n then
      fail("DataLoader: dataset[%d] has %d fields but dataset[%d] has %d", i, fields, idx[1], n)
    end
    n, items[p] = fields, item
  end
  if qkv.is_tensor(items[1]) then return {collate_field(items, "dataset[" .. idx[1] .. "]")} end
  local out = {}
  for f = 1, n do
    local values = {}
    for p, item in ipairs(items) do values[p] = item[f] end
    out[f] = collate_field(values, "field " .. f)
  end
  return out
end

---------------------------------------------------------------- DataLoader

local Loader = {__name = "DataLoader"}
local FIELDS = {"dataset", "batch_size", "shuffle", "drop_last", "generator"}

-- the number of items of a dataset: #ds, a non-negative integer
local function length(ds)
  local ok, n = pcall(function() return #ds end)
  if not ok or math.type(n) ~= "integer" or n < 0 then
    fail("DataLoader: #dataset must be a non-negative integer, got %s",
         ok and tostring(n) or "an error: " .. tostring(n))
  end
  return n
end

-- qkv.data.DataLoader(dataset [, {batch_size = 1, shuffle = false,
-- drop_last = false, generator = seed}])
function M.DataLoader(dataset, opts, ...)
  if select("#", ...) > 0 then fail("DataLoader: takes a dataset and one options table") end
  if type(dataset) ~= "table" then
    fail("DataLoader: dataset must be a TensorDataset or a table with #ds and ds[i], got %s",
         qkv.is_tensor(dataset) and "a tensor (wrap it: qkv.data.TensorDataset(x))" or type(dataset))
  end
  length(dataset)
  local msg, o = qkv._checkopts("DataLoader", opts, {"batch_size", "shuffle", "drop_last", "generator"},
                                {"shuffle", "drop_last"})
  if msg then error(msg, caller(SOURCE, true)) end
  local bs = o.batch_size == nil and 1 or o.batch_size
  if math.type(bs) ~= "integer" or bs < 1 then
    fail("DataLoader: batch_size must be a positive integer, got %s", tostring(bs))
  end
  if o.generator ~= nil and math.type(o.generator) ~= "integer" then
    fail("DataLoader: generator must be an integer seed, got %s", tostring(o.generator))
  end
  if o.generator ~= nil and not o.shuffle then
    fail("DataLoader: a generator seeds the shuffle, and shuffle is false")
  end
  local loader = {dataset = dataset, batch_size = bs, shuffle = o.shuffle or false,
                  drop_last = o.drop_last or false, generator = o.generator,
                  _state = o.generator, _epochs = setmetatable({}, {__mode = "k"})}
  return setmetatable(loader, Loader)
end

-- the number of batches in an epoch, as len(DataLoader)
local function batches(loader)
  local n, bs = length(loader.dataset), loader.batch_size
  return loader.drop_last and n // bs or (n + bs - 1) // bs
end

Loader.__len = batches

-- a field it has reads as nil when unset (generator); another is an error
function Loader.__index(_, k)
  for _, f in ipairs(FIELDS) do
    if k == f then return nil end
  end
  no_field("DataLoader", k, FIELDS)
end

-- for xb, yb in loader do: called with the loop's last first value, nil
-- for a new epoch; each batch's first tensor keys the epoch it belongs to
function Loader.__call(loader, _, last)
  local ep
  if last == nil then
    local n = length(loader.dataset)
    local order
    if loader.shuffle then
      order = loader.generator == nil and qkv.randperm(n, {device = "cpu"}) or own_permutation(loader, n)
    end
    ep = {n = n, pos = 1, order = order, stop = loader.drop_last and n - n % loader.batch_size or n}
  else
    ep = loader._epochs[last]
    if ep == nil then
      fail("DataLoader: called with a value that is not its last batch: loop over it with "
           .. "`for x, y in loader do`")
    end
    loader._epochs[last] = nil
  end
  if ep.pos > ep.stop then return nil end
  local last_i = math.min(ep.pos + loader.batch_size - 1, ep.stop)
  local idx = ep.order and ep.order:narrow(1, ep.pos, last_i - ep.pos + 1)
              or qkv.arange(ep.pos, last_i + 1, "int64", "cpu")
  ep.pos = last_i + 1
  local batch = collate(loader.dataset, idx)
  loader._epochs[batch[1]] = ep
  return table.unpack(batch)
end

function Loader.__tostring(loader)
  return string.format("DataLoader(%d batches of %d from %d items, shuffle=%s, drop_last=%s)",
                       batches(loader), loader.batch_size, length(loader.dataset),
                       tostring(loader.shuffle), tostring(loader.drop_last))
end

return qkv._strict(M, "qkv.data", "class")
