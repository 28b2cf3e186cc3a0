-- test_copy.lua: the cross-backend suite's copies and fills (the backend's
-- copy and fill): round trips in every dtype, conversions on the device
-- and their errors, strided copies, factories, printing, mixed devices
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local t = qkv.test
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, move, values = C.need, C.same, C.move, C.values
local LAYOUTS, SHAPES, ALL = C.LAYOUTS, C.SHAPES, C.ALL
local inf, nan = C.inf, C.nan

---------------------------------------------------------------- copies

TestCudaCopy = {}

function TestCudaCopy:testRoundTripsAreExactInEveryDtype()
  need()
  for _, dt in ipairs(ALL) do
    for _, s in ipairs(SHAPES) do
      local x = values(s, dt)
      local g = x:cuda()
      lu.assertEquals(g.device, "cuda")
      t.assertTensorEqual(g:cpu(), x)
      t.assertTensorEqual(x:to("cuda"):to("cpu"), x)
      lu.assertTrue(rawequal(g:cuda(), g))
    end
  end
end

function TestCudaCopy:testConversionsOnTheDevice()
  need()
  local x = qkv.tensor{0, -0.5, 1.5, 2.5, -3.7, 1e10, -1e10, 70000, 1e-8, inf, -inf, nan}:double()
  -- values every dtype turns into one that the ints hold, where an int is
  -- made from a float (the others are errors: testFloatToIntErrorsOnTheDevice)
  local fit = qkv.tensor{0, -0.5, 1.5, 2.5, -3.7, 60000, 1e-8, -65504}:double()
  local int = {int64 = true, int32 = true}
  for _, from in ipairs(ALL) do
    for _, to in ipairs(ALL) do
      local v = (int[from] or int[to]) and fit or x
      same(from .. " -> " .. to, function(w) return w:to(to) end, {v:to(from)}, 0)
    end
  end
end

-- f(args) on the CPU and on the GPU raise the same error (messages that
-- name an element are built from the values, not from the backend)
local function same_error(what, f, args)
  local c, g = move(args, LAYOUTS.contiguous, false), move(args, LAYOUTS.contiguous, true)
  local okc, ec = pcall(f, table.unpack(c))
  local okg, eg = pcall(f, table.unpack(g))
  lu.assertFalse(okc, what .. ": no error on the CPU")
  lu.assertFalse(okg, what .. ": no error on the GPU")
  lu.assertEquals(eg, ec, what)
  return ec
end

-- NaN, ±inf and out-of-range floats into an int raise on the GPU as on
-- the CPU (the kernel's flag), at any place in a big tensor, and a failed
-- copy_ leaves the GPU tensor as it was
function TestCudaCopy:testFloatToIntErrorsOnTheDevice()
  need()
  local bad = {{nan, "nan"}, {inf, "inf"}, {-inf, "-inf"}, {3e38, "3e+38"}}
  for _, from in ipairs{"float32", "float64", "float16", "bfloat16"} do
    for _, to in ipairs{"int64", "int32"} do
      for _, b in ipairs(bad) do
        for _, n in ipairs{1, 7, 70001} do
          local x = qkv.zeros(n, "float64")
          x[n] = b[1]
          local e = same_error(from .. " " .. b[2] .. " -> " .. to .. " at " .. n,
                               function(v) return v:to(to) end, {x:to(from)})
          lu.assertStrContains(e, "at [" .. n .. "] to " .. to)
        end
      end
      local o = qkv.full({2, 3}, 5, to):cuda()
      lu.assertFalse(pcall(o.copy_, o, qkv.tensor({1, nan, 2}, from):cuda()))
      t.assertTensorEqual(o:cpu(), qkv.full({2, 3}, 5, to))
    end
  end
  local x = qkv.tensor({1, 2^31}, "float64")
  same_error("float64 2^31 -> int32", function(v) return v:int() end, {x})
  t.assertTensorEqual(qkv.arange(2^53, 2^53 + 4, 1, "int64", "cuda"):cpu(),
                      qkv.arange(2^53, 2^53 + 4, 1, "int64"))
end

function TestCudaCopy:testStridedCopiesAndFills()
  need()
  for _, dt in ipairs(ALL) do
    same(dt .. " contiguous of a transpose", function(v) return v:t():contiguous() end,
         {values({5, 7}, dt)})
    same(dt .. " copy_ into a narrow", function(v, w)
      local o = v:clone()
      o:narrow(2, 2, 3):copy_(w)
      return o
    end, {values({4, 6}, dt), values({4, 3}, dt)})
    same(dt .. " copy_ broadcast", function(v, w) return v:clone():copy_(w) end,
         {values({3, 4}, dt), values({4}, dt)})
    same(dt .. " fill_ a column", function(v)
      local o = v:clone()
      o:select(2, 2):fill_(1)
      return o
    end, {values({3, 4}, dt)})
  end
  for _, f in ipairs{"zeros", "ones"} do
    t.assertTensorEqual(qkv[f](3, 5, "cuda"):cpu(), qkv[f](3, 5))
  end
  t.assertTensorEqual(qkv.full({2, 3}, 2.5, "float64", "cuda"):cpu(), qkv.full({2, 3}, 2.5, "float64"))
  t.assertTensorEqual(qkv.eye(3, 4, "cuda"):cpu(), qkv.eye(3, 4))
  t.assertTensorEqual(qkv.arange(0, 10, 3, "int64", "cuda"):cpu(), qkv.arange(0, 10, 3, "int64"))
  t.assertTensorEqual(qkv.tensor{1, 2}:cuda():cpu(), qkv.tensor{1, 2})
end

-- a half copied into its own dtype on the device keeps its bits, a NaN's
-- payload and quiet bit included (vm/cuda/copy.cu, as the CPU's
-- copy_f16_f16): every 16-bit pattern, a transposed view made contiguous
-- and a strided column cloned, the bits read back from the bytes
-- qkv.save_safetensors writes (a signalling NaN came back quiet, through
-- float32 and back)
function TestCudaCopy:testHalfSelfCopiesKeepEveryBit()
  need()
  local path, n, parts = os.tmpname(), 65536, {}
  for i = 0, n - 1 do parts[#parts + 1] = string.pack("<I2", i) end
  local bytes = table.concat(parts)
  for _, c in ipairs{{"bfloat16", "BF16"}, {"float16", "F16"}} do
    local header = ('{"x":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}'):format(c[2], n, #bytes)
    local f = assert(io.open(path, "wb"))
    f:write(string.pack("<I8", #header), header, bytes)
    f:close()
    local g = qkv.load_safetensors(path).x:cuda()
    lu.assertEquals(g.dtype, c[1])
    for _, v in ipairs{{"transposed, contiguous", g:view(256, 256):t():contiguous():cpu(),
                        function(i) return (i % 256) * 256 + i // 256 end},
                       {"strided column, cloned", g:view(n / 2, 2):select(2, 2):clone():cpu(),
                        function(i) return 2 * i + 1 end}} do
      qkv.save_safetensors(path, {y = v[2]})
      f = assert(io.open(path, "rb"))
      local data = f:read("a")
      f:close()
      local off = 8 + string.unpack("<I8", data)
      for i = 0, v[2]:numel() - 1 do
        local got, want = string.unpack("<I2", data, off + 1 + 2 * i), v[3](i)
        if got ~= want then
          lu.fail(("%s %s: bits 0x%04x copied as 0x%04x"):format(c[1], v[1], want, got))
        end
      end
    end
  end
  os.remove(path)
end

function TestCudaCopy:testPrintingItemAndTolist()
  need()
  local x = qkv.tensor{{1.5, -2}, {3, 4}}
  local g = x:cuda()
  lu.assertStrContains(tostring(g), "device='cuda'")
  lu.assertEquals(tostring(g):gsub(", device='cuda'", ""), tostring(x))
  lu.assertEquals(g:tolist(), x:tolist())
  lu.assertEquals(g[2][1], 3)
  lu.assertEquals(g:sum():item(), 6.5)
  lu.assertStrContains(tostring(qkv.zeros(2, "int64", "cuda")), "device='cuda'")
  -- an expanded dim crosses to the host once: 2^40 elements print at once
  lu.assertEquals(tostring(qkv.ones(1, "cuda"):expand(2^40)),
                  "tensor([1., 1., 1.,  ..., 1., 1., 1.], device='cuda')")
  lu.assertEquals(g:expand(3, 2, 2):tolist()[3], x:tolist())
end

function TestCudaCopy:testMixedDevicesAreAnErrorNamingBoth()
  need()
  local a, b = qkv.ones(2), qkv.ones(2):cuda()
  for what, f in pairs{
    add = function() return a + b end,
    matmul = function() return qkv.ones(2, 2):matmul(b:view(2, 1)) end,
    attention = function() return qkv.attention(b:view(1, 2), a:view(1, 2), a:view(1, 2)) end,
  } do
    local ok, err = pcall(f)
    lu.assertFalse(ok, what)
    lu.assertStrContains(err, what)
    lu.assertStrContains(err, "cuda")
    lu.assertStrContains(err, "cpu")
  end
  -- a number is fine with a GPU tensor, as in PyTorch
  t.assertTensorEqual((b + 1):cpu(), qkv.full({2}, 2))
  t.assertTensorEqual((2 * b):cpu(), qkv.full({2}, 2))
  t.assertTensorEqual(b:masked_fill(b:gt(0), 5):cpu(), qkv.full({2}, 5))
end
