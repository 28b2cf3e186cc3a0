-- test_losses.lua: qkv.nn.cross_entropy, nll_loss and mse_loss, and the
-- modules CrossEntropyLoss, NLLLoss and MSELoss (stdlib/qkv/nn/loss.lua),
-- against PyTorch's values (tests/fixtures/nn/torch_losses.py): reduction
-- mean, sum and none, class weights, ignore_index, label_smoothing, K-dim
-- and unbatched inputs, probability targets, every target ignored, and
-- gradients; the modules equal the functions, their fields as PyTorch's;
-- and every bad argument an error naming the function or the module.
local lu = require "luaunit"
local H = dofile("tests/helpers/composite_ref.lua")
local R = dofile("tests/helpers/attn_ref.lua")
local FIX = dofile("tests/fixtures/nn/torch_losses.lua")
local fails = R.fails

local nn, F = qkv.nn, qkv.nn.functional
local T, same = H.T, H.same

-- a fixture case's options as qkv takes them (weight a tensor)
local function opts_of(c)
  local o = {}
  for k, v in pairs(c.opts) do o[k] = k == "weight" and T(v) or v end
  return o
end

local MODULES = {cross_entropy = nn.CrossEntropyLoss, nll_loss = nn.NLLLoss, mse_loss = nn.MSELoss}

-- each case of a function: the function's value (and gradient), and the
-- module made with the same options gives the same value
local function check(fname)
  local n = 0
  for _, c in ipairs(FIX[fname]) do
    local what = fname .. " " .. c.name
    local x, t = T(c.input), T(c.target)
    if c.grad then x:requires_grad_() end
    local got = nn[fname](x, t, opts_of(c))
    same(got, c.out, what)
    if c.grad then
      got:sum():backward()
      same(x.grad, c.grad, what .. " grad")
    end
    local m = MODULES[fname](opts_of(c))
    same(m(x:detach(), t), c.out, what .. " (module)")
    n = n + 1
  end
  return n
end

---------------------------------------------------------------- PyTorch's values
TestLossValues = {}

function TestLossValues:testCrossEntropy()
  lu.assertTrue(check("cross_entropy") >= 35)
end

function TestLossValues:testNllLoss()
  lu.assertTrue(check("nll_loss") >= 12)
end

function TestLossValues:testMseLoss()
  lu.assertEquals(check("mse_loss"), 3)
end

-- the fixtures hold what the tests lean on: every target ignored gives
-- nan for the mean and 0 for the sum, as PyTorch's
function TestLossValues:testAllIgnored()
  local x = qkv.randn({3, 4}, "float64")
  local t = qkv.full({3}, -100, "int64")
  local mean = nn.cross_entropy(x, t):item()
  lu.assertTrue(mean ~= mean, "nan")
  lu.assertEquals(nn.cross_entropy(x, t, {reduction = "sum"}):item(), 0)
  lu.assertEquals(nn.NLLLoss{reduction = "none"}(x, t):tolist(), {0, 0, 0})
end

-- class 1 is qkv's first class: the picked log-probability is column 1
function TestLossValues:testClassesCountFromOne()
  local x = qkv.tensor({{5, 0, 0}, {0, 0, 5}}, "float64")
  local ls = x:log_softmax(2)
  local got = nn.nll_loss(ls, qkv.tensor({1, 3}, "int64"), {reduction = "none"})
  lu.assertEquals(got:tolist(), {-ls[1][1], -ls[2][3]})
  lu.assertAlmostEquals(nn.cross_entropy(x, qkv.tensor({1, 3}, "int64")):item(), -ls[1][1], 1e-15)
end

---------------------------------------------------------------- the modules
TestLossModules = {}

function TestLossModules:testFieldsAndPrinting()
  local w = qkv.tensor({1, 2, 3}, "float64")
  local ce = nn.CrossEntropyLoss{weight = w, ignore_index = 2, label_smoothing = 0.1, reduction = "sum"}
  lu.assertIs(ce.weight, w)
  lu.assertEquals({ce.ignore_index, ce.label_smoothing, ce.reduction}, {2, 0.1, "sum"})
  local d = nn.CrossEntropyLoss()
  lu.assertEquals({d.weight, d.ignore_index, d.label_smoothing, d.reduction}, {nil, -100, 0, "mean"})
  local nll = nn.NLLLoss()
  lu.assertEquals({nll.ignore_index, nll.reduction}, {-100, "mean"})
  lu.assertEquals(nn.MSELoss().reduction, "mean")
  -- printed as PyTorch prints them, with no parameters
  lu.assertEquals(tostring(ce), "CrossEntropyLoss()")
  lu.assertEquals(tostring(nll), "NLLLoss()")
  lu.assertEquals(tostring(nn.MSELoss{reduction = "sum"}), "MSELoss()")
  lu.assertEquals(#ce:parameters(), 0)
  lu.assertIs(F.nll_loss, nn.nll_loss)
  lu.assertIs(F.cross_entropy, nn.cross_entropy)
end

-- a field changed after construction takes effect, as in PyTorch
function TestLossModules:testFieldsAreReadAtEachCall()
  local x = qkv.randn({4, 3}, "float64")
  local t = qkv.tensor({1, 2, 3, 2}, "int64")
  local ce = nn.CrossEntropyLoss()
  ce.reduction = "sum"
  lu.assertEquals(ce(x, t):item(), nn.cross_entropy(x, t, {reduction = "sum"}):item())
  ce.ignore_index = 2
  lu.assertEquals(ce(x, t):item(), nn.cross_entropy(x, t, {reduction = "sum", ignore_index = 2}):item())
  local mse = nn.MSELoss()
  mse.reduction = "none"
  lu.assertEquals(mse(x, x * 0):tolist(), (x * x):tolist())
  mse.reduction = "avg"
  fails({"MSELoss: reduction must be 'mean', 'sum' or 'none', got avg", "test_losses.lua:"},
        function() local r = mse(x, x); return r end)
end

-- mse_loss takes (input, target [, reduction]): PyTorch's positional
-- F.mse_loss(x, y, None, None, 'sum') gives 10 for x = {1, 2}, y = {0, 5},
-- where the reduction, past size_average and reduce, was dropped for the
-- mean, 5
function TestLossModules:testMseLossRefusesArgumentsPastReduction()
  local x, y = qkv.tensor({1, 2}, "float64"), qkv.tensor({0, 5}, "float64")
  fails({"mse_loss: takes 3 arguments, got 5", "size_average and reduce", "test_losses.lua:"},
        function() local r = nn.mse_loss(x, y, nil, nil, "sum"); return r end)
  fails("mse_loss: takes 3 arguments, got 4", nn.mse_loss, x, y, "sum", false)
  lu.assertEquals(nn.mse_loss(x, y, "sum", nil):item(), 10)       -- trailing nils are none
  lu.assertEquals(nn.mse_loss(x, y, {reduction = "sum"}):item(), 10)
end

-- the losses take (weight, opts) after input and target: PyTorch's positional
-- F.cross_entropy(x, t, w, None, 1) (ignore_index 1, qkv's class 2) gives
-- 2.4076059644443806 for x = {{1, 2, 3}, {0, 1, -1}}, t = {1, 2} (qkv's {2, 3}),
-- where the ignore_index, past size_average, was dropped: 1.9076059644443806
function TestLossModules:testArgumentsPastTheOptionsAreErrors()
  local x = qkv.tensor({{1, 2, 3}, {0, 1, -1}}, "float64")
  local t, w = qkv.tensor({2, 3}, "int64"), qkv.ones(3, "float64")
  for _, c in ipairs{{"cross_entropy", nn.cross_entropy}, {"nll_loss", nn.nll_loss}} do
    fails({c[1] .. ": takes 4 arguments, got 5 (argument #5 is a number): the options come "
           .. "in a table", "test_losses.lua:"},
          function() local r = c[2](x, t, w, nil, 2); return r end)
  end
  fails("CrossEntropyLoss: takes 2 arguments, got 3", nn.CrossEntropyLoss, w, nil, 2)
  fails("NLLLoss: takes 2 arguments, got 3", nn.NLLLoss, w, nil, 2)
  lu.assertAlmostEquals(nn.cross_entropy(x, t, w, {ignore_index = 2}, nil):item(),
                        2.4076059644443806, 1e-14)
  lu.assertAlmostEquals(nn.CrossEntropyLoss(w, {ignore_index = 2})(x, t):item(),
                        2.4076059644443806, 1e-14)
end

-- PyTorch's first positional argument, the class weights
function TestLossModules:testWeightAsTheFirstArgument()
  local x = qkv.randn({5, 3}, "float64")
  local t = qkv.tensor({1, 2, 3, 2, -100}, "int64")
  local w = qkv.tensor({0.5, 1, 2}, "float64")
  local want = nn.cross_entropy(x, t, {weight = w, reduction = "sum"}):item()
  lu.assertEquals(nn.CrossEntropyLoss(w, {reduction = "sum"})(x, t):item(), want)
  lu.assertEquals(nn.cross_entropy(x, t, w, {reduction = "sum"}):item(), want)
  lu.assertEquals(nn.NLLLoss(w)(x, t):item(), nn.nll_loss(x, t, {weight = w}):item())
  lu.assertEquals(F.nll_loss(x, t, w):item(), nn.nll_loss(x, t, {weight = w}):item())
end

-- a training step through the module: the same gradients as the function
function TestLossModules:testBackwardThroughTheModule()
  qkv.seed(3)
  local lin = nn.Linear(4, 3):double()
  local x = qkv.randn({6, 4}, "float64")
  local t = qkv.tensor({1, 3, 2, 2, -100, 1}, "int64")
  local ce = nn.CrossEntropyLoss{label_smoothing = 0.05}
  ce(lin(x), t):backward()
  local g1 = lin.weight.grad:clone()
  lin:zero_grad()
  nn.cross_entropy(lin(x), t, {label_smoothing = 0.05}):backward()
  lu.assertEquals(lin.weight.grad:tolist(), g1:tolist())
  lu.assertTrue(g1:abs():sum():item() > 0)
  qkv.test.gradcheck(function(a) return ce(a, t) end, {qkv.randn({6, 3}, "float64"):requires_grad_()})
  local nll = nn.NLLLoss{weight = qkv.tensor({1, 2, 3}, "float64"), reduction = "sum"}
  qkv.test.gradcheck(function(a) return nll(a:log_softmax(2), t) end,
                     {qkv.randn({6, 3}, "float64"):requires_grad_()})
end

---------------------------------------------------------------- errors
TestLossErrors = {}

local X = qkv.randn({3, 4}, "float64")
local Y = qkv.tensor({1, 4, 2}, "int64")

function TestLossErrors:testOptions()
  fails("cross_entropy: reduction must be 'mean', 'sum' or 'none', got avg",
        nn.cross_entropy, X, Y, {reduction = "avg"})
  fails("CrossEntropyLoss: reduction must be 'mean', 'sum' or 'none', got elementwise_mean",
        nn.CrossEntropyLoss, {reduction = "elementwise_mean"})
  fails("NLLLoss: reduction must be", nn.NLLLoss, {reduction = "batchmean"})
  fails("MSELoss: reduction must be", nn.MSELoss, {reduction = 1})
  fails("CrossEntropyLoss: unknown option 'label_smothing' (did you mean 'label_smoothing'?)",
        nn.CrossEntropyLoss, {label_smothing = 0.1})
  fails("NLLLoss: unknown option 'label_smoothing'", nn.NLLLoss, {label_smoothing = 0.1})
  fails("MSELoss: unknown option 'reduce'", nn.MSELoss, {reduce = true})
  fails("nll_loss: unknown option 'ignore_idx' (did you mean 'ignore_index'?)",
        nn.nll_loss, X, Y, {ignore_idx = 2})
  fails("CrossEntropyLoss: label_smoothing must be a number from 0 to 1, got 1.5",
        nn.CrossEntropyLoss, {label_smoothing = 1.5})
  fails("cross_entropy: label_smoothing must be a number from 0 to 1, got -0.1",
        nn.cross_entropy, X, Y, {label_smoothing = -0.1})
  fails("CrossEntropyLoss: ignore_index must be an integer, got 1.5",
        nn.CrossEntropyLoss, {ignore_index = 1.5})
  fails("CrossEntropyLoss: weight is given twice", nn.CrossEntropyLoss, qkv.ones(4), {weight = qkv.ones(4)})
  fails("CrossEntropyLoss: weight must be a tensor, got table", nn.CrossEntropyLoss, {weight = {1, 2}})
  fails("MSELoss: takes one options table", nn.MSELoss, {}, "sum")
  fails("CrossEntropyLoss: takes one options table, got a second argument (string)",
        nn.CrossEntropyLoss, {}, "sum")
  fails("cross_entropy: options must be a table, got string", nn.cross_entropy, X, Y, "sum")
end

function TestLossErrors:testTargets()
  -- a 0-based class is named: classes count from 1
  fails({"cross_entropy: targets must be classes 1 to 4, got 0 (classes count from 1;",
         "test_losses.lua:"}, function()
    local r = nn.cross_entropy(X, qkv.tensor({0, 1, 2}, "int64")); return r
  end)
  fails("nll_loss: targets must be classes 1 to 4, got 5", nn.nll_loss, X,
        qkv.tensor({5, 1, 2}, "int64"))
  -- -100 is skipped only when it is the ignore_index, as in PyTorch
  fails("got -100 (classes count from 1; ignore_index 2 marks", nn.cross_entropy, X, qkv.tensor({-100, 1, 2}, "int64"), {ignore_index = 2})
  fails("cross_entropy: input is (3, 4), so target must be (3,) of classes, got (2,)",
        nn.cross_entropy, X, qkv.tensor({1, 2}, "int64"))
  fails("cross_entropy: input is (2, 3, 4), so target must be (2, 4) of classes, got (2, 3)",
        nn.cross_entropy, qkv.randn(2, 3, 4), qkv.ones({2, 3}, "int64"))
  fails("nll_loss: target must be int64 classes (1 to 4)", nn.nll_loss, X, qkv.ones({3}, "int32"))
  fails("nll_loss: target must be int64 classes", nn.nll_loss, X, qkv.ones({3, 4}, "float64"))
  -- probabilities: input's shape and dtype, and no ignore_index
  local dev = qkv.default_device()
  fails("cross_entropy: a float target holds probabilities and must be input's shape, dtype and "
        .. "device, (3, 4) float64 on " .. dev .. "; got (3,) float64 on " .. dev, nn.cross_entropy, X,
        qkv.ones({3}, "float64"))
  fails("must be input's shape, dtype", nn.cross_entropy, X, qkv.ones({3, 4}, "float32"))
  fails("cross_entropy: ignore_index (2) needs class-index targets, not probabilities",
        nn.cross_entropy, X, X:softmax(2), {ignore_index = 2})
  fails("cross_entropy: target must be a tensor, got table", nn.cross_entropy, X, {1, 2, 3})
end

function TestLossErrors:testInputAndWeight()
  fails("cross_entropy: input must be a float tensor (C), (N, C) or (N, C, d1, ...), got int64 (3, 4)",
        nn.cross_entropy, qkv.ones({3, 4}, "int64"), Y)
  fails("cross_entropy: input must be a float tensor", nn.cross_entropy, qkv.tensor(1.5), Y)
  fails("nll_loss: input (3, 0) has no classes (C = 0)", nn.nll_loss, qkv.zeros({3, 0}), Y)
  fails("cross_entropy: weight must be (C,) = (4,), one per class, got (3,)",
        nn.cross_entropy, X, Y, {weight = qkv.ones(3, "float64")})
  local dev = qkv.default_device()
  fails("cross_entropy: weight is float32 on " .. dev .. " but input is float64 on " .. dev
        .. ": they must agree", nn.cross_entropy, X, Y, {weight = qkv.ones(4)})
  if qkv.cuda_available() then          -- (the fake device's too)
    fails("cross_entropy: target is on cpu but input on cuda", nn.cross_entropy, X:to("cuda"), Y:to("cpu"))
    fails("nll_loss: weight is float64 on cpu but input is float64 on cuda", nn.nll_loss, X:to("cuda"),
          Y:to("cuda"), {weight = qkv.ones(4, "float64", "cpu")})
  end
  fails("cross_entropy: input must be a tensor, got nil", nn.cross_entropy, nil, Y)
  -- the module names itself, then the function, at the script's line
  local ce = nn.CrossEntropyLoss{weight = qkv.ones(3, "float64")}
  fails({"CrossEntropyLoss: cross_entropy: weight must be (C,) = (4,)", "test_losses.lua:"},
        function() local r = ce(X, Y); return r end)
  fails({"MSELoss: mse_loss: ", "test_losses.lua:"}, function()
    local r = nn.MSELoss()(X, qkv.ones(5)); return r
  end)
  fails("forward: called on a tensor, not a CrossEntropyLoss (called with '.'?)", ce.forward, X, Y)
end

os.exit(lu.LuaUnit.run(), true)
