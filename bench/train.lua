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
--   (run by `make bench`; the peer comes from `make bench-deps`)

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

-- the model and one step of it; returns step()
local function model(w)
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
  return function()
    opt:zero_grad()
    local loss = nn.mse_loss(forward(x), target)
    loss:backward()
    opt:step()
  end
end

-- ms per step: best of 3 runs of w.steps steps, after 3 to warm up; fresh:
-- the mean of one run of w.steps from the start
local function qkv_ms(w, threads)
  qkv.set_num_threads(threads)
  local step = model(w)
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
local function torch_ms(w, threads)
  if not PY then return nil end
  local py = arg[0]:gsub("train%.lua$", "train_torch.py")
  local p = io.popen(table.concat({U.quote(PY), U.quote(py), w.layers, w.d, w.h, w.n, w.b,
                                   w.steps, threads, w.fresh and "fresh" or "", "2>&1"}, " "))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("RESULT %S+ (%S+)"))
end

-- runs fn with `yes > /dev/null` beside it when busy
local function with_load(busy, fn)
  if not busy then return fn() end
  local f = io.popen("yes > /dev/null & echo $!")
  local pid = f:read("l")
  f:close()
  local ok, a, b = pcall(fn)
  os.execute("kill " .. pid)
  if not ok then error(a, 0) end
  return a, b
end

local only_work, only_load, only_threads = arg[1], arg[2], tonumber(arg[3])
local all = qkv.get_num_threads()
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
