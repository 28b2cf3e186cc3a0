-- test_reduce.lua: the cross-backend suite's reductions and scans (the
-- backend's reduce and cumsum): along each dim and over all, NaN and ties,
-- long float32 sums, var and std with a correction, cumsum along each dim
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, values = C.need, C.same, C.values
local nan, inf = C.nan, C.inf

---------------------------------------------------------------- reductions

TestCudaReduce = {}

function TestCudaReduce:testAlongEachDimAndOverAll()
  need()
  local shapes = {{5}, {3, 4}, {2, 3, 4}, {1, 300}, {300, 1}, {4, 2000}, {0, 3}, {3, 0}, {64, 65}}
  -- (the halves' sums and moments read them where they lie: reduce.cu's half_el)
  for _, dt in ipairs{"float32", "float64", "int64", "bool", "float16", "bfloat16"} do
    for _, s in ipairs(shapes) do
      local x = values(s, dt)
      local label = dt .. " " .. table.concat(s, "x")
      for _, op in ipairs{"sum", "mean", "max", "min", "var", "std", "argmax", "argmin"} do
        local float_only = op == "mean" or op == "var" or op == "std"
        if not float_only or (dt ~= "int64" and dt ~= "bool") then
          if x:numel() > 0 or op == "sum" or op == "mean" then
            same(label .. " " .. op .. "()", function(v) return v[op](v) end, {x})
          end
          for d = 1, #s do
            if s[d] > 0 or op == "sum" or op == "mean" then
              same(("%s %s(%d)"):format(label, op, d), function(v) return v[op](v, d) end, {x})
              same(("%s %s(%d, keep)"):format(label, op, d), function(v) return v[op](v, d, true) end, {x})
            end
          end
        end
      end
    end
  end
end

-- var and std with PyTorch's correction, which reduce.cu's kernels divide
-- by (max(0, n - correction)) as the CPU's: short lines (a thread each),
-- long ones (a block each), pieces folded, lines of one element (0, or
-- NaN for inf and once n - correction <= 0) and of none; and float32
-- rows of 3 on the GPU are the float64 moments rounded once (rescaling a
-- rounded result was 1-2 units in the last place off in a third of them)
function TestCudaReduce:testCorrection()
  need()
  local r = qkv.randn(2000, 3)
  for _, c in ipairs{0, 0.5} do
    for _, op in ipairs{"var", "std"} do
      local got = r:cuda()[op](r:cuda(), {dim = 2, correction = c}):cpu()
      local want = r:double()[op](r:double(), {dim = 2, correction = c}):float()
      lu.assertTrue(got:eq(want):all():item(), ("float32 %s correction %s rounded once"):format(op, c))
    end
  end
  for _, dt in ipairs{"float32", "float64", "float16", "bfloat16"} do
    local x, long = values({4, 2000}, dt), (qkv.randn(1 << 20) + 0.25):to(dt)
    local one = values({1, 5}, dt)
    one[1][2] = inf
    for _, c in ipairs{0, 0.5, 2, 3000} do
      for _, op in ipairs{"var", "std"} do
        local label = ("%s %s correction %s"):format(dt, op, c)
        same(label, function(v) return v[op](v, {dim = 1, correction = c}),
                                       v[op](v, {dim = 2, correction = c}) end, {x})
        same(label .. " long", function(v) return v[op](v, {correction = c}) end, {long})
        same(label .. " of one", function(v) return v[op](v, {dim = 1, correction = c}) end, {one})
        same(label .. " of none", function(v) return v[op](v, {dim = 2, correction = c}) end,
             {values({3, 0}, dt)})
      end
    end
  end
end

function TestCudaReduce:testCumsumAlongEachDim()
  need()
  for _, dt in ipairs{"float32", "float64", "int64", "bool", "float16"} do
    for _, s in ipairs{{}, {7}, {3, 1000}, {1000, 3}, {2, 3, 4}, {0, 5}} do
      local x = values(s, dt)
      for d = 1, math.max(#s, 1) do
        same(("%s %s cumsum(%d)"):format(dt, table.concat(s, "x"), d),
             function(v) return v:cumsum(#s == 0 and 1 or d) end, {x})
      end
    end
  end
end

function TestCudaReduce:testNaNTiesAndLongSums()
  need()
  local x = qkv.tensor{{1, nan, 3}, {2, 2, 1}, {-inf, -inf, 0}}
  for _, op in ipairs{"max", "min", "argmax", "argmin", "sum", "mean"} do
    same("nan/ties " .. op, function(v) return v[op](v, 2) end, {x})
  end
  -- 2^24 + many ones: a float32 accumulator would lose them all
  local big = qkv.ones(1 << 22)
  big[1] = 16777216
  same("long float32 sum", function(v) return v:sum() end, {big})
  same("long float32 mean of a column", function(v) return v:mean(1) end, {qkv.randn(100000, 3)})
  -- the halves' long lines cut in pieces and folded, and their moments
  for _, dt in ipairs{"float16", "bfloat16"} do
    local h = (qkv.randn(1 << 20) + 0.25):to(dt)
    same("long " .. dt .. " sum", function(v) return v:sum() end, {h})
    same("long " .. dt .. " std", function(v) return v:std() end, {h})
    same(dt .. " column sums", function(v) return v:sum(1), v:var(1) end, {h:view(4096, 256)})
  end
  same("any/all", function(v) return v:any(), v:all(2) end, {values({4, 9}, "bool")})
end
