-- cuda_suite.lua: what the parts of the cross-backend suite share
-- (tests/backends/cuda/test_*.lua, as ggml's test-backend-ops). Every
-- entry of the backend table (vm/core/backend.h, listed by
-- qkv._backend_entries) runs on random inputs of many shapes and layouts
-- (contiguous, transposed, offset views, broadcast, size 1, empty, n not a
-- multiple of any tile) on the CPU and on the GPU, and the GPU's result
-- must be the CPU's: exact for integers, bools and copies,
-- ||gpu - cpu|| / ||cpu|| < 1e-5 for float32 (TF32 off), 1e-12 for
-- float64, with NaN and inf in the same places. Without a GPU only the
-- checks that need none run: every entry has a test in some part
-- (test_coverage.lua's COVER), and x:cuda() says why it cannot.
--
--   local C = dofile("tests/helpers/cuda_suite.lua")
--
-- Loading it puts the CPU back as the default device (`qkv test --device
-- cuda` sets the GPU) and seeds the generator with 7, as each part did
-- when the suite was one file; tests/helpers/cuda_parts.lua runs every
-- part in one process.
local lu = require "luaunit"
local t = qkv.test
local C = {}

C.DIR = "tests/backends/cuda/"              -- the parts
C.EXE = arg[-1]

qkv.set_default_device("cpu")
C.GPU, C.WHY = qkv.cuda_available()
local inf = math.huge
C.inf, C.nan = inf, 0 / 0

function C.need() if not C.GPU then lu.skip("needs CUDA: " .. tostring(C.WHY)) end end

---------------------------------------------------------------- comparing

C.TOL = {float32 = 1e-5, float64 = 1e-12, float16 = 2e-3, bfloat16 = 1e-2}

-- x with NaN and inf replaced by 0, as float64 on the host
local function finite(x)
  local d = x:double()
  return d:masked_fill(d:ne(d), 0):masked_fill(d:abs():eq(inf), 0)
end

-- the GPU's result got against the CPU's ref
function C.compare(ref, got, what, tol)
  if not qkv.is_tensor(ref) then
    lu.assertEquals(got, ref, what)
    return
  end
  lu.assertTrue(qkv.is_tensor(got), what .. ": no tensor from the GPU")
  lu.assertEquals(got.device, ref.device == "cpu" and "cuda" or ref.device, what .. ": device")
  lu.assertEquals(got.dtype, ref.dtype, what .. ": dtype")
  lu.assertEquals(got.shape, ref.shape, what .. ": shape")
  local g = got:cpu()
  if ref.dtype ~= "float32" and ref.dtype ~= "float64" and ref.dtype ~= "float16"
     and ref.dtype ~= "bfloat16" then
    t.assertTensorEqual(g, ref)
    return
  end
  if ref:numel() == 0 then return end
  local R, G = ref:double(), g:double()
  t.assertTensorEqual(G:ne(G), R:ne(R))                 -- NaN in the same places
  local ri = R:masked_fill(R:ne(R), 0):masked_fill(R:abs():lt(inf), 0)
  local gi = G:masked_fill(G:ne(G), 0):masked_fill(G:abs():lt(inf), 0)
  t.assertTensorEqual(gi, ri)                           -- the same infinities
  local fr, fg = finite(R), finite(G)
  local d = fr - fg
  local num, den = math.sqrt((d * d):sum():item()), math.sqrt((fr * fr):sum():item())
  local rel = den > 0 and num / den or num
  lu.assertTrue(rel <= (tol or C.TOL[ref.dtype]),
    ("%s: ||gpu - cpu|| / ||cpu|| = %.3g"):format(what, rel))
end

-- the same view of x on its own device: contiguous, transposed (the last
-- two dims' strides swapped), or at an offset inside a bigger storage
C.LAYOUTS = {
  contiguous = function(x) return x:clone() end,
  transposed = function(x)
    if x:dim() < 2 then return x:clone() end
    return x:transpose(-1, -2):contiguous():transpose(-1, -2)
  end,
  offset = function(x)
    if x:dim() == 0 or x:size(1) == 0 then return x:clone() end
    local shape = x.shape
    shape[1] = shape[1] + 2
    local big = qkv.zeros(shape, x.dtype, x.device)
    return big:narrow(1, 2, x:size(1)):copy_(x)
  end,
}

function C.move(args, layout, gpu)
  local out = {n = args.n or #args}
  for i = 1, out.n do
    local a = args[i]
    if qkv.is_tensor(a) then
      out[i] = layout(gpu and a:cuda() or a)
    else
      out[i] = a
    end
  end
  return out
end

-- f on the CPU and on the GPU, in each layout; every result compared
function C.same(what, f, args, tol)
  args.n = args.n or #args
  for name, layout in pairs(C.LAYOUTS) do
    local c, g = C.move(args, layout, false), C.move(args, layout, true)
    local ref = table.pack(f(table.unpack(c, 1, c.n)))
    local got = table.pack(f(table.unpack(g, 1, g.n)))
    lu.assertEquals(got.n, ref.n, what)
    for i = 1, ref.n do C.compare(ref[i], got[i], what .. " [" .. name .. ", result " .. i .. "]", tol) end
  end
end

qkv.seed(7)
C.SHAPES = {{}, {0}, {1}, {5}, {3, 1}, {2, 3, 4}, {7, 33}, {1, 1, 1}, {2, 0, 3}, {257}, {3, 130}}

function C.values(shape, dt)
  local x = qkv.randn(shape, "float64") * 3
  if dt == "bool" then return x:gt(0) end
  if dt == "int64" or dt == "int32" then return x:long():to(dt) end
  return x:to(dt)
end

C.FLOATS = {"float32", "float64"}
C.ALL = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"}

---------------------------------------------------------------- op lists

-- the ops the elementwise part runs on both devices (test_elementwise.lua):
-- every public row of the list of ops (vm/common/ops.h, as qkv._ops() gives
-- it) of that arity, so that a new row is tested with no list edited; and
-- C.INTEGER, the binary ones that take int64 (pow aside: its exponent must
-- not be negative)
local function ops_of(arity, keep)
  local names = {}
  for _, op in ipairs(qkv._ops()) do
    if op.public and op.arity == arity and (keep == nil or keep(op)) then
      names[#names + 1] = op.name
    end
  end
  return names
end
C.BINARY = ops_of(2)
C.UNARY = ops_of(1)
C.INTEGER = ops_of(2, function(op) return op.takes ~= "float" and op.name ~= "pow" end)

---------------------------------------------------------------- the parts

-- the parts' paths, in the order `qkv test` runs them
function C.parts()
  local list = {}
  local p = io.popen("ls '" .. C.DIR .. "' 2>/dev/null")
  for name in p:lines() do
    if name:match("^test_.*%.lua$") then list[#list + 1] = C.DIR .. name end
  end
  p:close()
  table.sort(list)
  return list
end

-- the test classes the parts define, {name = path}: each part's top-level
-- `TestX = {}` lines, read without running it (a part that does not
-- compile is an error here); a class defined twice is an error
function C.classes()
  local found = {}
  for _, path in ipairs(C.parts()) do
    assert(loadfile(path))
    for line in io.lines(path) do
      local name = line:match("^(Test[%w_]*)%s*=%s*{}%s*$")
      if name then
        assert(not found[name], name .. " is defined in " .. tostring(found[name]) .. " and " .. path)
        found[name] = path
      end
    end
  end
  return found
end

return C
