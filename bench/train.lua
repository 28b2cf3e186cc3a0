-- train.lua -- a small transformer's training step, qkv against PyTorch
-- (bench/train_torch.py: the same model, shapes and optimizer) in the same
-- run, idle and with one busy process beside it (`yes > /dev/null`), on 1
-- thread and on all of them.
--
-- The model, per layer: h = LayerNorm(x + MultiHeadAttention(x, causal)),
-- y = h + MLP(h), the MLP d -> 4d -> GELU -> d; MSE against a fixed
-- target; Adam (lr 1e-3). Biases everywhere, as PyTorch's modules have.
--   block:   1 layer,  d 64,  h 4, seq 32, batch 32
--   2-layer: 2 layers, d 128, h 4, seq 64, batch 32
--   2-layer-60: the 2-layer model's first 60 steps from a fresh model, the
--     mean step: by step ~25 its second layer's attention has sharpened
--     until weights below 2^-126 (subnormal floats) appear, which slowed
--     both sides' later steps (bench/NOTES.md)
-- FLOPs per step (2 per multiply-add, backward twice the forward):
-- 3 x (24 d^2 tokens + 2 n d tokens) per layer, attention halved by the
-- mask not counted: block 0.31 GFLOP, 2-layer 4.9 GFLOP.
--
--   build/qkv bench/train.lua [block|2-layer] [idle|busy] [threads]
--   build/qkv bench/train.lua autocast [steps]
--   (run by `make bench`; the peer comes from `make bench-deps`)
-- autocast (issue 51): the 2-layer model under bfloat16 autocast against
-- its float32 step (both on all threads, idle) and PyTorch's float32 and
-- autocast steps; then `steps` (200) steps of each from the same weights
-- and their last losses.

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local nn = qkv.nn

local WORK = {
  {name = "block", layers = 1, d = 64, h = 4, n = 32, b = 32, steps = 60},
  {name = "2-layer", layers = 2, d = 128, h = 4, n = 64, b = 32, steps = 10},
  {name = "2-layer-60", layers = 2, d = 128, h = 4, n = 64, b = 32, steps = 60, fresh = true},
}

local function flops(w)
  local tokens = w.b * w.n
  return 3 * w.layers * (24 * w.d * w.d * tokens + 2 * w.n * w.d * tokens)
end

-- the model and one step of it (under bfloat16 autocast when ac);
-- returns step(), which returns the loss
local function model(w, ac)
  qkv.seed(0)
  local layers = nn.ModuleList()
  for _ = 1, w.layers do
    layers:append(nn.ModuleList{nn.MultiHeadAttention(w.d, w.h, {bias = true}), nn.LayerNorm(w.d),
                                nn.Sequential(nn.Linear(w.d, 4 * w.d), nn.GELU(), nn.Linear(4 * w.d, w.d))})
  end
  local x, target = qkv.randn(w.b, w.n, w.d), qkv.randn(w.b, w.n, w.d)
  local opt = qkv.optim.Adam(layers, {lr = 1e-3})
  local function forward(y)
    for _, l in ipairs(layers) do
      y = l[2](y + l[1](y, {causal = true, weights = false}))
      y = y + l[3](y)
    end
    return y
  end
  local AC = {device_type = "cpu", dtype = "bfloat16", enabled = ac == true}
  return function()
    opt:zero_grad()
    local loss = qkv.autocast(AC, function() return nn.mse_loss(forward(x), target) end)
    loss:backward()
    opt:step()
    return loss
  end
end

-- ms per step: best of 3 runs of w.steps steps, after 3 to warm up; fresh:
-- the mean of one run of w.steps from the start
local function qkv_ms(w, threads, ac)
  qkv.set_num_threads(threads)
  local step = model(w, ac)
  if w.fresh then
    local t = qkv.clock()
    for _ = 1, w.steps do step() end
    return (qkv.clock() - t) / w.steps * 1e3
  end
  for _ = 1, 3 do step() end
  local best = math.huge
  for _ = 1, 3 do
    local t = qkv.clock()
    for _ = 1, w.steps do step() end
    best = math.min(best, qkv.clock() - t)
  end
  collectgarbage()
  return best / w.steps * 1e3
end

local PY, VERSION = U.peer_python()
local function torch_ms(w, threads, ac)
  if not PY then return nil end
  local py = arg[0]:gsub("train%.lua$", "train_torch.py")
  local p = io.popen(table.concat({U.quote(PY), U.quote(py), w.layers, w.d, w.h, w.n, w.b,
                                   w.steps, threads, w.fresh and "fresh" or ac and "autocast" or "",
                                   "2>&1"}, " "))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("RESULT %S+ (%S+)"))
end

local with_load = U.with_load

local only_work, only_load, only_threads = arg[1], arg[2], tonumber(arg[3])
local all = qkv.get_num_threads()

-- the 2-layer model under bfloat16 autocast, and its loss after n steps
local function autocast_rows(n)
  local w = WORK[2]
  local q32, qac = qkv_ms(w, all), qkv_ms(w, all, true)
  local t32, tac = torch_ms(w, all), torch_ms(w, all, true)
  print(("autocast: the 2-layer step, %d threads, idle, ms; %s"):format(all,
    PY and ("torch " .. VERSION) or "torch: not found (`make bench-deps`), skipped"))
  print(("%-22s %9s %9s %12s %12s"):format("", "qkv f32", "qkv bf16", "torch f32", "torch bf16"))
  local f = function(x) return x and ("%.2f"):format(x) or "-" end
  print(("%-22s %9.2f %9.2f %12s %12s"):format("ms a step", q32, qac, f(t32), f(tac)))
  local best_torch = t32 and math.min(t32, tac or math.huge)
  print(("%-22s %9s %9.2f %12s %12s"):format("x qkv f32's speed", "1.00", q32 / qac,
    t32 and f(q32 / t32) or "-", tac and f(q32 / tac) or "-"))
  print(("bf16 autocast: %.2fx qkv's float32 step, %s the faster of torch's"):format(q32 / qac,
    best_torch and ("%.2fx"):format(best_torch / qac) or "-"))
  local last = {}
  for _, ac in ipairs{false, true} do
    qkv.set_num_threads(all)
    local step, loss = model(w, ac)
    for _ = 1, n do loss = step() end
    last[ac] = loss:float():item()
  end
  print(("after %d steps from the same weights: loss float32 %.6f, autocast %.6f (%.2f%% apart)")
    :format(n, last[false], last[true], math.abs(last[true] - last[false]) / last[false] * 100))
end

if only_work == "autocast" then
  autocast_rows(tonumber(arg[2]) or 200)
  return
end
print(string.format("train: one training step (forward, backward, Adam), ms; torch/qkv = how many " ..
                    "times qkv is faster; %s", PY and ("torch " .. VERSION .. " (" .. PY .. ")")
                    or "torch: not found (`make bench-deps`), skipped"))
print(string.format("%-8s %7s %5s %9s %9s %10s %8s", "work", "threads", "load", "qkv ms", "torch ms",
                    "torch/qkv", "GFLOP/s"))
for _, w in ipairs(WORK) do
  if not only_work or only_work == w.name then
    for _, threads in ipairs(all > 1 and {all, 1} or {1}) do
      if not only_threads or only_threads == threads then
        for _, load in ipairs{"idle", "busy"} do
          if not only_load or only_load == load then
            local q, t = with_load(load == "busy", function()
              return qkv_ms(w, threads), torch_ms(w, threads)
            end)
            print(string.format("%-8s %7d %5s %9.2f %9s %10s %8.1f", w.name, threads, load, q,
                                t and string.format("%.2f", t) or "-",
                                t and string.format("%.2f", t / q) or "-", flops(w) / q / 1e6))
          end
        end
      end
    end
  end
end
qkv.set_num_threads(all)
if not only_work then autocast_rows(200) end
