-- test_fuzz_found.lua: what the API fuzzer (tests/fuzz/fuzz_api.lua) found,
-- kept as regression cases with the input that showed each.
local lu = require "luaunit"

-- pcall(f, ...) must fail with a string containing every piece
local fails = dofile("tests/helpers/attn_ref.lua").fails

TestFuzzFound = {}

-- x:expand(-1, 1, 2) on a (1, 2) tensor gave a tensor of size -1: -1
-- keeps a size, and a new leading dim has none to keep
function TestFuzzFound:testExpandMinusOneNewDim()
  local x = qkv.ones(1, 2)
  fails({"expand", "(1, 2)", "(-1, 1, 2)"}, x.expand, x, -1, 1, 2)
  lu.assertEquals(qkv.ones(3, 1):expand(2, -1, 4).shape, {2, 3, 4})
end

-- sizes whose product overflows int64 wrapped around to a small numel:
-- zeros(0):view(2^62, 4) was a tensor of 0 elements with those sizes, and
-- its strides overflowed
function TestFuzzFound:testSizesOverflowingInt64()
  local big = 1 << 62
  local e = qkv.zeros(0)
  fails({"view", "(4611686018427387904, 4)"}, e.view, e, big, 4)
  fails({"reshape", "(0, 4611686018427387904, 4)"}, e.reshape, e, 0, big, 4)
  fails({"zeros", "too large"}, qkv.zeros, 0, big, 4)
  local one = qkv.ones(1, 1)
  fails({"expand", "(4611686018427387904, 4611686018427387904)"}, one.expand, one, big, big)
  -- a 0 size first still makes an empty tensor
  lu.assertEquals(qkv.zeros(2, 0, 3):reshape(0, 7).shape, {0, 7})
  lu.assertEquals(qkv.zeros(0, 5):view(5, 0).shape, {5, 0})
end

-- a module's forward raised the errors of the primitives it calls, which
-- do not name it: MultiHeadAttention(8, 2)(x) with x (3, 5) said only
-- "project: x is (3, 5) but W is (8, 8)"; the same for a module made of
-- others (AlignedCrossAttention(6, 6, 4) said "MultiHeadCrossAttention: ...")
function TestFuzzFound:testModuleErrorsNameTheModule()
  local m = qkv.nn.MultiHeadAttention(8, 2)
  local err = fails({"MultiHeadAttention: project: x is (3, 5) but W is (8, 8)"},
                    m.forward, m, qkv.ones(3, 5))
  lu.assertNotStrContains(err, "qkv/nn/")      -- the caller's line, not the library's
  fails({"MultiHeadAttention: project"}, m, qkv.ones(3, 5))
  fails({"MultiHeadAttention: x must be a tensor"}, m, "x")
  fails({"Sequential: Linear: project: x is (2, 2) but W is (3, 4)"},
        qkv.nn.Sequential(qkv.nn.Linear(3, 4)), qkv.ones(2, 2))
  fails({"AlignedCrossAttention: MultiHeadCrossAttention: d_model = 6 is not divisible by h = 4"},
        qkv.nn.AlignedCrossAttention, 6, 6, 4)
  fails({"AlignedCrossAttention: TokenAligner: method must be"},
        qkv.nn.AlignedCrossAttention, 8, 8, 2, qkv.ones(1))
end

-- cosine_similarity raised "mul: shapes (2,) and (4, 6) do not broadcast"
-- and "bad argument #1 to 'sum' (dim 3 out of range [-2, 2])"
function TestFuzzFound:testCosineSimilarityErrors()
  local cs = qkv.nn.cosine_similarity
  fails({"cosine_similarity: mul: shapes (2,) and (4, 6)"}, cs, qkv.ones(2), qkv.ones(4, 6))
  fails({"cosine_similarity", "dim", "[-2, 2]", "3"}, cs, qkv.ones(2), qkv.ones(4, 2), 3)
  fails({"cosine_similarity", "dim", "got x"}, cs, qkv.ones(2), qkv.ones(4, 2), "x")
  fails({"cosine_similarity", "eps", "table"}, cs, qkv.ones(2), qkv.ones(4, 2), -1, {})
  -- b closed: "nn.lua:384: bad argument #1 to 'index' (tensor was closed)"
  local b = qkv.ones(2)
  getmetatable(b).__close(b)
  fails({"cosine_similarity: b is a closed tensor"}, cs, qkv.ones(2), b)
  lu.assertEquals(cs(qkv.tensor{1, 0}, qkv.tensor{{1, 0}, {0, 2}}):tolist(), {1, 0})
end

-- Linear(2, 2, co) said "attempt to index a thread value (local 'opts')",
-- Linear(2, 2, {dtype = "int64"}) "bad argument #3 to 'rand'"
function TestFuzzFound:testLinearOptions()
  fails({"Linear", "must be a table", "thread"}, qkv.nn.Linear, 2, 2,
        coroutine.create(print))
  fails({"Linear", "dtype", "int64"}, qkv.nn.Linear, 2, 2, {dtype = "int64"})
  lu.assertEquals(qkv.nn.Linear(2, 3, {dtype = "float64"}).weight.dtype, "float64")
end

-- m:parameters(x) treated its argument as the internal name prefix:
-- "attempt to concatenate a qkv.Tensor value (local 'prefix')"
function TestFuzzFound:testParametersTakesNoArguments()
  local m = qkv.nn.MultiHeadAttention(4, 2)
  lu.assertEquals(#m:parameters(qkv.ones(1), {1, 2}), 4)
  -- the first is still W_Q's tensor (the names are named_parameters')
  local name, first = m:named_parameters()()
  lu.assertEquals(name, "W_Q")
  lu.assertIs(m:parameters("x")[1], first)
end

-- m:load(src) called src.state_dict whenever src had a metatable and that
-- field: "attempt to call a number value (method 'state_dict')"
function TestFuzzFound:testLoadFromOddTable()
  local m = qkv.nn.Linear(2, 2)
  fails({"load", "no tensor 'weight'"}, m.load, m,
        setmetatable({}, {__index = {state_dict = 1}}))
end

-- plot.hist({nan, inf, -inf, 1e308}) raised "spec.lua:220: attempt to
-- compare number with nil": the range [1e308 - 0.5, 1e308 + 0.5] has no
-- width in floating point, nor has [-1e308, 1e308] a finite one; numpy
-- refuses both ("Too many bins for data range")
function TestFuzzFound:testHistRangeWithoutFiniteBins()
  local hist = qkv.plot.hist
  fails({"hist", "30 finite-sized bins", "[1e+308, 1e+308]"}, hist,
        {0 / 0, math.huge, -math.huge, 1e308}, {out = false})
  fails({"hist", "finite-sized bins", "[-1e+308, 1e+308]"}, hist, {-1e308, 1e308}, {out = false})
  fails({"hist", "finite-sized bins"}, hist, {1, 2}, {range = {-1e308, 1e308}, out = false})
  local counts, edges = hist({5, 5, 5}, {bins = 2, out = false})
  lu.assertEquals(counts, {0, 3})
  lu.assertEquals(edges, {4.5, 5, 5.5})
end

-- a closed tensor (local x <close>) given to qkv.plot or qkv.test raised
-- "bad argument #1 to 'index' (tensor was closed)" from inside the
-- library, naming neither heatmap nor assertTensorEqual
function TestFuzzFound:testClosedTensorsToTheLibraries()
  local x, y = qkv.ones(2, 2), qkv.ones(2, 2)
  getmetatable(x).__close(x)
  fails({"heatmap: w is a closed tensor"}, qkv.plot.heatmap, x, {out = false})
  fails({"hist: x is a closed tensor"}, qkv.plot.hist, x, {out = false})
  fails({"grid: panel 1: heatmap: w is a closed tensor"}, qkv.plot.grid, {{x}}, {out = false})
  fails({"'assertClose'", "tensor was closed"}, qkv.test.assertClose, y, x)
  fails({"'assertShape'", "tensor was closed"}, qkv.test.assertShape, x, {2, 2})
  fails({"#2 to 'assertTensorEqual'", "tensor was closed"}, qkv.test.assertTensorEqual, y, x)
end

-- qkv.load(path, x) loaded the file and then raised "bad argument #1 to
-- '?' (qkv.npyreader expected, got string)": it closed its reader at
-- stack index 2, which is the second argument when there is one. Since
-- issue 46 an argument past the path is an error of its own, before any
-- reading (PyTorch's mmap = true, say, would else be ignored)
function TestFuzzFound:testLoadWithExtraArguments()
  local path = os.tmpname()
  qkv.save(path, qkv.tensor{1, 2, 3})
  local ok, err = pcall(qkv.load, path, "x.npy", 3)
  lu.assertFalse(ok)
  lu.assertEquals(err, "load: takes 1 argument, got 3 (argument #2 is a string)")
  local x = qkv.load(path, nil)           -- a trailing nil is no argument
  os.remove(path)
  lu.assertEquals(x:tolist(), {1, 2, 3})
end

-- qkv.scores(Q, K) and qkv.attention with a 0-d Q read Q's size[-1] for
-- the default scale before checking Q's rank (UBSan: "index -1 out of
-- bounds for type 'int64_t [8]'"); found under the ASan build
function TestFuzzFound:testScoresWithZeroDimQ()
  fails({"scores: Q must be (..., n_q, d_k), got ()"}, qkv.scores,
        qkv.tensor(1, "float64"), qkv.ones(1, 6))
  fails({"attention: Q must be (..., n_q, d_k), got ()"}, qkv.attention,
        qkv.tensor(1), qkv.ones(1, 6), qkv.ones(1, 6), {scale = 2})
end

-- qkv.eye(2, 2, 0) wrote its third size past the end of a 2-size array on
-- the C stack (ASan: stack-buffer-overflow in parse_sizes, from b_eye)
function TestFuzzFound:testEyeWithThreeSizes()
  fails({"eye", "n or n, m"}, qkv.eye, 2, 2, 0)
  fails({"eye", "n or n, m"}, qkv.eye, {1, 2, 3, 4, 5, 6, 7, 8})
  lu.assertEquals(qkv.eye(2, 3, "int64"):tolist(), {{1, 0, 0}, {0, 1, 0}})
end

-- plot.image of a matrix with both signs and 1e308 in it (seed 3, call
-- 42916 under ASan) raised "png.lua:62: bad argument #2 to 'rect' (must be a
-- finite number)": centred on 0 its ends are ±1e308, vmax - vmin is inf and
-- every position on the colour bar NaN; in the terminal the cells were grey
-- (NaN's colour). Both renderers now scale in halves.
function TestFuzzFound:testColoursOfARangeWiderThanDoubles()
  local m = qkv.tensor({{0.5, 1e308}, {-1e30, 1}}, "float64")
  local path = os.tmpname()
  local ok, L = pcall(qkv.plot.image, m, {file = path})
  local png = ok and qkv.plot.read_png(path)
  os.remove(path)
  lu.assertTrue(ok, L)
  local function rgb(x, y) return {png.pixel(x, y)} end
  local function byte(t) return {math.floor(t[1] * 255 + 0.5), math.floor(t[2] * 255 + 0.5),
                                 math.floor(t[3] * 255 + 0.5), 255} end
  local top, mid = {qkv.plot.colormap("coolwarm", 1)}, {qkv.plot.colormap("coolwarm", 0.5)}
  lu.assertEquals(rgb(L.x0 + L.cw * 3 // 2, L.y0 + L.ch // 2), byte(top))    -- 1e308
  lu.assertEquals(rgb(L.x0 + L.cw // 2, L.y0 + L.ch // 2), byte(mid))        -- 0.5
  local text = qkv.plot.image(m, {out = false, color = true})
  lu.assertStrContains(text, ("38;2;%d;%d;%dm"):format(table.unpack(byte(top))))
  lu.assertNotStrContains(text, "38;2;153;153;153m")                          -- NaN grey
end

-- tables whose # and ipairs disagree: plot.colormap({nil, t1, t2, {...}}, t)
-- (seed 12, call 226122) took the list for an empty map, since ipairs stops
-- at the hole, and failed in eval with "attempt to index a nil value";
-- assertShape(0-d x, s) with # s == 0 but s[1] behind __index (seed 14,
-- call 356796) called x:size(1). Both now read items 1 .. #t.
function TestFuzzFound:testTablesWithHoles()
  fails({"colormap: cmap colour 1 is not a hex colour", "nil"}, qkv.plot.colormap,
        {nil, "#ffffff", "#000000"}, 0.5)
  lu.assertEquals({qkv.plot.colormap({"#ffffff", "#000000"}, 0.5)}, {0.5, 0.5, 0.5})
  qkv.test.assertShape(qkv.tensor(true), setmetatable({}, {__index = {1, 2}}))
  fails({"'assertShape'", "size 2 is not an integer"}, qkv.test.assertShape,
        qkv.ones(2, 3), {2, nil, 3})
end

-- axes over values near the largest double: plot.scatter of (1e30, y)
-- three times (seed 17, call 41989) and plot.hist of values from -1e308
-- (seed 20, call 82440) raised "bad argument #1 to 'rect' (must be a finite
-- number)": a single x widened by ±1 stays 1e30, so the axis had no width;
-- (hi - lo) * i overflowed the hist's edges to inf; a span from -1e308 to
-- 1e308 is inf wide; in the terminal "table index is NaN"
function TestFuzzFound:testAxesNearTheLargestDouble()
  local f64 = function(t) return qkv.tensor(t, "float64") end
  local path = os.tmpname()
  local ok, L = pcall(qkv.plot.scatter, {{f64{{1e308, 1}, {-1e308, 2}}}}, {file = path})
  lu.assertTrue(ok, L)
  local a, b = L.points[1][1], L.points[1][2]
  lu.assertTrue(a.x > b.x and b.x >= L.x0 and a.x <= L.x0 + L.pw, "x in order, in the plot")
  ok, L = pcall(qkv.plot.scatter, {{qkv.tensor{{1e30, -0.8698}}:expand(3, 2)}}, {file = path})
  lu.assertTrue(ok, L)
  lu.assertEquals(L.points[1][1].x, L.x0 + L.pw / 2)      -- one x: the middle
  ok, L = pcall(qkv.plot.scatter, {{f64{{1.79e308, 1}}}}, {file = path})
  lu.assertTrue(ok, L)
  ok, L = pcall(qkv.plot.hist, {-1e308, 1.88}, {bins = 3, file = path})
  os.remove(path)
  lu.assertTrue(ok, L)
  local counts, edges = qkv.plot.hist({-1e308, 1.88}, {bins = 3, out = false})
  lu.assertEquals(counts, {1, 0, 1})
  local w = (1.88 + 1e308) / 3
  lu.assertEquals(edges, {-1e308, -1e308 + w, -1e308 + 2 * w, 1.88})
  local text = qkv.plot.scatter({{f64{{1e308, 1}, {-1e308, 2}}}}, {out = false, color = false})
  local _, marks = text:gsub("A", "")
  lu.assertEquals(marks, 2)
  lu.assertStrContains(text, "-1e+308")
  -- and a span of one denormal, whose halves are 0 (seed 32, call 49739:
  -- "term.lua:324: table index is NaN" once positions were all in halves)
  local tiny = {{f64{{0, -1.79}, {4.9e-324, -1.4}}}}
  text = qkv.plot.scatter(tiny, {out = false, color = false})
  _, marks = text:gsub("A", "")
  lu.assertEquals(marks, 2)
  ok, L = pcall(qkv.plot.scatter, tiny, {file = path})
  os.remove(path)
  lu.assertTrue(ok, L)
  lu.assertEquals({L.points[1][1].x < L.points[1][2].x}, {true})
end

-- plot.hist(x, {width = 2^53}) (seed 42, call 52036) raised "term.lua:266:
-- resulting string too large" building a bar that wide; width now has a
-- ceiling, as it had a floor
function TestFuzzFound:testTerminalWidthCeiling()
  fails({"hist: width must be an integer from 20 to 10000, got 9007199254740992"},
        qkv.plot.hist, {1, 2}, {width = 1 << 53, out = false})
  local _, _, text = qkv.plot.hist({1, 2, 2}, {width = 10000, bins = 2, out = false, color = false})
  lu.assertStrContains(text, "██")
end

-- plot.scatter of an int64 (n, 2) tensor holding the integer limits (seed
-- 47, call 63744; seed 48, call 47416) raised "term.lua:322: attempt to
-- index a nil value": its points stayed Lua integers, and hi - lo wrapped
-- around (math.maxinteger - math.mininteger is -1); plots take floats
function TestFuzzFound:testInt64PointsAtTheLimits()
  local x = qkv.tensor({{2147483648, -3}, {9007199254740992, 5}, {0, math.mininteger},
                        {1, math.maxinteger}}, "int64")
  local text = qkv.plot.scatter(x, {out = false, color = false})
  local _, marks = text:gsub("A", "")
  lu.assertEquals(marks, 4)
  lu.assertStrContains(text, "-9.22e+18")
  local path = os.tmpname()
  local ok, L = pcall(qkv.plot.scatter, x, {file = path})
  os.remove(path)
  lu.assertTrue(ok, L)
  local p = L.points[1]
  lu.assertTrue(p[4].y < p[2].y and p[2].y < p[3].y, "maxint above 5 above minint")
end

-- seed 2801 call 769844: plot.grid read an option again after checking it,
-- so a table whose __index changes its answers got past the check
-- ("attempt to index a number value"); each option is now read once
function TestFuzzFound:testPlotOptionsAreReadOnce()
  local reads = 0
  local opts = setmetatable({}, {__index = function(_, k)
    if k ~= "cols" then return nil end
    reads = reads + 1
    return reads == 1 and {} or 2
  end})
  fails({"grid: cols must be a positive integer, got table"}, qkv.plot.grid,
        {{qkv.ones(2, 2)}, {qkv.ones(2, 2)}}, opts)
  lu.assertEquals(reads, 1)
end

-- issue 46's dotcall rule: x.new_empty(y, {}) with y closed (as
-- y:new_empty{} is) raised "new_empty: bad argument #1 to 'index' (tensor
-- was closed)", an error of an op the script did not call, and so did
-- x.roll(y, 1) (seed 11, call 311093); the composite functions written in Lua now say
-- which argument is closed
function TestFuzzFound:testClosedTensorsToTheComposites()
  local x, y = qkv.ones(2), qkv.ones(2)
  getmetatable(x).__close(x)
  fails({"new_empty: x is a closed tensor"}, y.new_empty, x, {})
  fails({"new_zeros: x is a closed tensor"}, y.new_zeros, x, 2)
  fails({"new_full: x is a closed tensor"}, y.new_full, x, {2}, 1)
  fails({"zeros_like: x is a closed tensor"}, qkv.zeros_like, x)
  fails({"flip: x is a closed tensor"}, qkv.flip, x, 1)
  fails({"roll: x is a closed tensor"}, y.roll, x, 1)
  fails({"allclose: a is a closed tensor"}, qkv.allclose, x, y)
end


-- seed 1 call 87629 (make test-asan's run): an options table whose reading
-- closes the tensor passed with it got past sample's check of the tensor,
-- read before the options ("sample: bad argument #1 to 'index' (tensor was
-- closed)"); sample, multinomial and rope now read their options first
function TestFuzzFound:testOptionsThatCloseTheTensor()
  local function closing(x)
    return setmetatable({}, {__index = function() getmetatable(x).__close(x) end})
  end
  local x = qkv.randn(2, 4)
  fails({"sample: logits must be a floating tensor (..., V), got a closed tensor"}, qkv.sample, x, closing(x))
  x = qkv.rand(2, 4)
  fails({"multinomial: probs must be a floating tensor (C) or (R, C), got a closed tensor"},
        qkv.multinomial, x, 1, closing(x))
  x = qkv.randn(3, 4)
  fails({"rope: "}, qkv.rope, x, 1, closing(x))
  lu.assertError(function() return x.shape end)   -- it was closed, and rope said so
end

os.exit(lu.LuaUnit.run(), true)
