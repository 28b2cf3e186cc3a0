-- test_checkpoint.lua: qkv.save(path, t) and qkv.load(path) of a table
-- (stdlib/qkv/checkpoint.lua; docs/from-pytorch.md "Checkpoints"): the
-- values come back as they went, a tensor held twice comes back as one,
-- the file is a safetensors file that qkv.load_safetensors reads, and what
-- a checkpoint cannot hold, or a file that is not one, is an error naming
-- save or load and where.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local H = dofile("tests/helpers/npy_helpers.lua")
local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

local n = 0
local function path()
  n = n + 1
  return TMP .. "/ck" .. n
end

local function same(a, b)
  return a.shape == b.shape and a.dtype == b.dtype and qkv.allclose(a:cpu(), b:cpu(), 0, 0)
end

TestCheckpoint = {}

function TestCheckpoint:testValuesComeBack()
  local p = path()
  local w = qkv.randn(3, 2)
  local ids = qkv.tensor({4, 5, 6}, "int64")
  local t = {
    model = {["layer.0.weight"] = w, ["layer.0.bias"] = qkv.zeros(2, "float64")},
    tied = w, ids = ids, half = qkv.ones(2):to("bfloat16"), flag = qkv.tensor({true, false}),
    epoch = 7, lr = 1e-3, big = math.maxinteger, third = 1 / 3, whole = 2.0,
    nan = 0 / 0, inf = math.huge, ninf = -math.huge, negzero = -0.0,
    yes = true, no = false, name = "résumé", bytes = "a\0b\255",
    list = {1, 2.5, "three", {4}}, empty = {},
    [1] = "one", [2.5] = "two and a half", [true] = "a boolean key", ["\0key"] = 0,
  }
  qkv.save(p, t)
  local u = qkv.load(p)
  lu.assertTrue(same(u.model["layer.0.weight"], w))
  lu.assertTrue(same(u.model["layer.0.bias"], t.model["layer.0.bias"]))
  lu.assertTrue(rawequal(u.tied, u.model["layer.0.weight"]))   -- one tensor, held twice
  lu.assertTrue(same(u.ids, ids))
  lu.assertTrue(same(u.half, t.half))
  lu.assertTrue(same(u.flag, t.flag))
  lu.assertEquals(math.type(u.epoch), "integer")
  lu.assertEquals(u.epoch, 7)
  lu.assertEquals(u.big, math.maxinteger)
  lu.assertEquals(u.lr, 1e-3)
  lu.assertEquals(u.third, 1 / 3)                             -- bit for bit
  lu.assertEquals(math.type(u.whole), "float")
  lu.assertTrue(u.nan ~= u.nan)
  lu.assertEquals(u.inf, math.huge)
  lu.assertEquals(u.ninf, -math.huge)
  lu.assertEquals(1 / u.negzero, -math.huge)                  -- -0.0 keeps its sign
  lu.assertIs(u.yes, true)
  lu.assertIs(u.no, false)
  lu.assertEquals(u.name, "résumé")
  lu.assertEquals(u.bytes, "a\0b\255")
  lu.assertEquals(u.list[1], 1)
  lu.assertEquals(u.list[2], 2.5)
  lu.assertEquals(u.list[3], "three")
  lu.assertEquals(u.list[4], {4})
  lu.assertEquals(u.empty, {})
  lu.assertEquals(u[1], "one")
  lu.assertEquals(u[2.5], "two and a half")
  lu.assertEquals(u[true], "a boolean key")
  lu.assertEquals(u["\0key"], 0)
  local keys = 0
  for _ in pairs(u) do keys = keys + 1 end
  local want = 0
  for _ in pairs(t) do want = want + 1 end
  lu.assertEquals(keys, want)
end

-- a safetensors file: its tensors by number, the structure in the
-- metadata; the same table gives the same bytes
function TestCheckpoint:testASafetensorsFile()
  local a, b = path(), path()
  local t = {w = qkv.arange(6):reshape(2, 3), n = 3, nested = {v = qkv.ones(2)}}
  qkv.save(a, t)
  qkv.save(b, t)
  lu.assertEquals(H.readfile(a), H.readfile(b))
  local tensors, meta = qkv.load_safetensors(a)
  lu.assertEquals(meta.format, "qkv")
  lu.assertNotNil(meta["qkv.checkpoint"])
  local count = 0
  for _ in pairs(tensors) do count = count + 1 end
  lu.assertEquals(count, 2)
end

-- a model and its optimizer, saved and loaded: the state_dicts load back
function TestCheckpoint:testModelAndOptimizer()
  local p = path()
  qkv.seed(3)
  local m = qkv.nn.Linear(4, 2)
  local opt = qkv.optim.AdamW(m, {lr = 0.01})
  local x = qkv.randn(5, 4)
  m(x):sum():backward()
  opt:step()
  qkv.save(p, {model = m:state_dict(), optim = opt:state_dict(), epoch = 1})
  local ck = qkv.load(p)
  qkv.seed(4)
  local m2 = qkv.nn.Linear(4, 2)
  m2:load(ck.model)
  local opt2 = qkv.optim.AdamW(m2)
  opt2:load_state_dict(ck.optim)
  lu.assertEquals(opt2.lr, 0.01)
  for _, o in ipairs{{m, opt}, {m2, opt2}} do
    o[2]:zero_grad()
    o[1](x):sum():backward()
    o[2]:step()
  end
  lu.assertTrue(qkv.allclose(m(x), m2(x), 0, 0))
end

function TestCheckpoint:testWhatACheckpointCannotHold()
  local p = path()
  fails('save: t["f"] is a function', qkv.save, p, {f = print})
  fails('save: t["m"] is a Linear, not a plain table: save its state_dict()', qkv.save, p,
        {m = qkv.nn.Linear(2, 2)})
  local c = {}
  c.self = c
  fails('save: t["self"] holds a table that holds it (a cycle)', qkv.save, p, c)
  fails("keys are strings, numbers and booleans", qkv.save, p, {[{}] = 1})
  local x
  do local t <close> = qkv.ones(2); x = t end
  fails('save: t["x"] is a closed tensor', qkv.save, p, {x = x})
  local deep = {}
  local d = deep
  for _ = 1, 70 do d.next = {} d = d.next end
  fails("tables nested over 64 deep", qkv.save, p, deep)
  lu.assertNil(io.open(p, "rb"))                          -- nothing was written
end

-- files that are not checkpoints, and checkpoints made wrong by hand
function TestCheckpoint:testFilesThatAreNotCheckpoints()
  local p = path()
  qkv.save_safetensors(p, {a = qkv.ones(2)})
  fails("a safetensors file, not a qkv checkpoint: qkv.load_safetensors reads it", qkv.load, p)
  local function bad(skel, tensors, why)
    qkv.save_safetensors(p, tensors or {}, {["qkv.checkpoint"] = skel})
    fails({"load: " .. p .. ": not a qkv checkpoint", why}, qkv.load, p)
  end
  bad("{", nil, "its structure is not JSON")
  bad('["t","0"]', nil, "names a tensor 0 that the file lacks")
  bad('["q",1]', nil, 'an unknown tag "q"')
  bad('["i","1.5"]', nil, "an integer is not one")
  bad('["f","x"]', nil, "a float is not one")
  bad('["m",[["s","a"],["i","1"]],[["s","a"],["i","2"]]]', nil, "a key is there twice")
  bad('["m",[["t","0"],["i","1"]]]', {["0"] = qkv.ones(1)}, "a key is a userdata")
  bad('["x","zz"]', nil, "a hex string is not one")
  bad('"plain"', nil, "not a tagged list")
  bad(string.rep('["m",[["i","1"],', 70) .. '["i","0"]' .. string.rep("]]", 70), nil, "nested over 64 deep")
end

-- a plain .npy still reads as a tensor
function TestCheckpoint:testNpyStillATensor()
  local p = path()
  qkv.save(p, qkv.eye(2))
  lu.assertTrue(qkv.is_tensor(qkv.load(p)))
end

os.exit(lu.LuaUnit.run(), true)
