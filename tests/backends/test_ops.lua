-- test_ops.lua: the one list of elementwise ops (vm/common/ops.h) as the
-- runtime gives it (qkv._ops()): every public row is a function and a
-- method whose results have the dtype its row states for every input
-- dtype, a differentiable row has autograd's rule, and a CUDA plugin built
-- from another list refuses to load, saying why. The ISA suite
-- (test_isa.lua), the cross-backend suite (test_cuda.lua), gradcheck
-- (tests/autograd/test_autograd.lua) and the API fuzzer loop over the
-- same list.
local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")
local EXE = arg and arg[-1] or "build/qkv"

qkv.set_default_device("cpu")

local OPS = qkv._ops()
local DTYPES = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"}
local FLOAT = {float32 = true, float64 = true, float16 = true, bfloat16 = true}

-- the row's rule, as ops.h states it: bool for a comparison, else the
-- operand's dtype lifted to one the op takes
local function result_dtype(op, dt)
  if op.result == "bool" then return "bool" end
  if op.takes == "float" and not FLOAT[dt] then return "float32" end
  if op.takes == "number" and dt == "bool" then return "int64" end
  return dt
end

TestOpList = {}

function TestOpList:testRowsAreWellFormed()
  lu.assertTrue(#OPS >= 26)
  local seen = {}
  for _, op in ipairs(OPS) do
    lu.assertNil(seen[op.name], "two rows named " .. op.name)
    seen[op.name] = true
    lu.assertTrue(op.arity == 1 or op.arity == 2, op.name)
    lu.assertTrue(op.takes == "float" or op.takes == "number" or op.takes == "any", op.name)
    lu.assertTrue(op.result == "same" or op.result == "bool", op.name)
    lu.assertIsBoolean(op.grad)
    lu.assertIsBoolean(op.public)
    if op.public then
      lu.assertIsFunction(qkv[op.name], "qkv." .. op.name)
      lu.assertIsFunction(qkv.ones(1)[op.name], "x:" .. op.name)
    end
  end
  -- a fresh list each call: a script that changes one changes nothing
  OPS[1].name = "changed"
  lu.assertNotEquals(qkv._ops()[1].name, "changed")
  OPS = qkv._ops()
end

function TestOpList:testResultDtypesAreTheRows()
  for _, op in ipairs(OPS) do
    if op.public then
      for _, dt in ipairs(DTYPES) do
        local x = qkv.tensor({1, 2, 3}):to(dt)
        local y = op.arity == 2 and qkv[op.name](x, x) or qkv[op.name](x)
        lu.assertEquals(y.dtype, result_dtype(op, dt), ("%s of %s"):format(op.name, dt))
        lu.assertEquals(y.shape, {3})
      end
    end
  end
end

-- a differentiable row records a node; the others give a tensor that
-- requires no grad
function TestOpList:testGradColumn()
  require "qkv.autograd"
  for _, op in ipairs(OPS) do
    if op.public then
      local x = (qkv.rand(3, "float64") + 0.5):requires_grad_()
      local y = op.arity == 2 and qkv[op.name](x, x * 2) or qkv[op.name](x)
      lu.assertEquals(y.requires_grad, op.grad, op.name)
    end
  end
end

-- a plugin built from another list: here the fake device
-- (tests/tools/fakecuda.c) built with ops.h less its first row, as a
-- plugin built before that row was added, whose enums number every op
-- one lower; the same build with the list as it is loads
function TestOpList:testAStalePluginRefusesToLoad()
  local cc = os.getenv("CC") or "cc"
  if select(2, S.sh("command -v " .. S.quote(cc))) ~= 0 then lu.skip("needs a C compiler (" .. cc .. ")") end
  local dir = S.tmpdir()
  local text = S.read("vm/common/ops.h")
  local older, n = text:gsub("\n[ ]*X%(ADD,[^\n]*\\\n", "\n", 1)
  lu.assertEquals(n, 1, "no ADD row in vm/common/ops.h")
  S.write(dir .. "/ops.h", older)
  -- (the list comes first with -include, before fakecuda.c's own define)
  local function build(name, extra)
    local out, code = S.sh(("%s -std=c11 -D_POSIX_C_SOURCE=200809L -fPIC -shared -I vm/common %s " ..
                            "-o %s tests/tools/fakecuda.c")
                           :format(S.quote(cc), extra, S.quote(dir .. "/" .. name)))
    lu.assertEquals(code, 0, out)
    return dir .. "/" .. name
  end
  local function load(plugin)
    return S.sh("QKV_CUDA_PLUGIN=" .. S.quote(plugin) .. " " .. S.quote(EXE) ..
                " -e 'print(qkv.cuda_available())'")
  end
  local same = build("same.so", "")
  local stale = build("stale.so", "-include " .. S.quote(dir .. "/ops.h"))
  local out, code = load(same)
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "true\n")
  out, code = load(stale)
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "false\tthe CUDA plugin was built from another list of ops " ..
                       "(vm/common/ops.h changed since; rebuild it: make)\n")
  os.execute("rm -rf " .. S.quote(dir))
end

os.exit(lu.LuaUnit.run(), true)
