-- soak.lua -- resident memory over a long training run: does anything
-- grow step after step? A tiny model as a script trains one: an
-- embedding-free TransformerEncoderLayer (d 32, 4 heads, feed-forward 64,
-- dropout 0.1, causal mask) and a Linear head to 10 classes, cross-entropy
-- on fresh random tokens each step, AdamW with a cosine schedule,
-- clip_grad_norm_, loss:item() every step, and every 500 steps an eval pass
-- under qkv.no_grad and a state_dict copy. Every STEPS / 20 steps it prints
-- the step, the process's resident memory (/proc/self/statm), live tensor
-- storage (qkv.memory()), Lua's heap and the loss; at the end, how much
-- resident memory grew from the first tenth of the run to its end. It
-- measures and reports; it asserts nothing (bench/RESULTS.md records the
-- curves).
--
-- Then the same for the Jupyter kernel (`qkv kernel`): CELLS cells driven
-- by jupyter_client (bench/soak_kernel.py, which says what they are), the
-- kernel process's resident memory every CELLS / 20 cells. Needs `make
-- peers` (build/pyref); skipped without it.
--
--   build/qkv bench/soak.lua [STEPS [CELLS]]   (`make bench`: 2,000 and 200)
--   nice -n 10 build/qkv bench/soak.lua 100000 10000   (the long soaks)

local nn = qkv.nn
local STEPS = math.tointeger(tonumber(arg[1] or "2000"))
local CELLS = math.tointeger(tonumber(arg[2] or "200"))
if not STEPS or STEPS < 20 or not CELLS or CELLS < 0 then
  io.stderr:write("usage: build/qkv bench/soak.lua [STEPS >= 20 [CELLS >= 0]]\n")
  os.exit(2)
end

local PAGE = 4096
do
  local p = io.popen("getconf PAGESIZE 2>/dev/null")
  PAGE = tonumber(p:read("a")) or PAGE
  p:close()
end

-- resident memory in MiB, or nil without /proc
local function rss_mb()
  local f = io.open("/proc/self/statm")
  if not f then return nil end
  local resident = tonumber(f:read("a"):match("^%d+%s+(%d+)"))
  f:close()
  return resident and resident * PAGE / 2^20
end

local B, N, D, H, FF, C = 8, 16, 32, 4, 64, 10
qkv.seed(0)
local layer = nn.TransformerEncoderLayer(D, H, {dim_feedforward = FF, dropout = 0.1})
local head = nn.Linear(D, C)
local model = nn.Sequential(layer, head)
local params = model:parameters()
local opt = qkv.optim.AdamW(params, {lr = 1e-3})
local sched = qkv.optim.lr_scheduler.CosineAnnealingLR(opt, STEPS)
local mask = qkv.triu(qkv.full({N, N}, -math.huge), 1)     -- causal, additive

local function forward(x)
  return head(layer(x, {src_mask = mask}))
end

-- one step: a batch of tokens whose class is a function of the input, so
-- that the loss falls
local proj = qkv.randn(D, C)
local function batch()
  local x = qkv.randn(B, N, D)
  local y = x:matmul(proj):argmax(-1)            -- 1-based, as the classes
  return x, y:view(B * N)
end

local function step()
  local x, y = batch()
  opt:zero_grad()
  local logits = forward(x):view(B * N, C)
  local loss = nn.cross_entropy(logits, y)
  loss:backward()
  nn.clip_grad_norm_(params, 1.0)
  opt:step()
  sched:step()
  return loss:item()
end

-- every 500 steps: the things a training script does now and then
local function now_and_then()
  model:eval()
  qkv.no_grad(function()
    local x, y = batch()
    return nn.cross_entropy(forward(x):view(B * N, C), y):item()
  end)
  model:train()
  local copy = {}
  for k, v in pairs(model:state_dict()) do copy[k] = v:clone() end
  return copy
end

local every = STEPS // 20
local rows = {}
local loss_sum, loss_n = 0, 0
print(("soak: %d training steps (TransformerEncoderLayer d %d, %d heads, batch %d x %d tokens; " ..
       "AdamW, cosine schedule, clip_grad_norm_); memory every %d steps"):format(
       STEPS, D, H, B, N, every))
print(("%9s %9s %11s %9s %8s"):format("step", "RSS MiB", "tensors MiB", "Lua MiB", "loss"))
local t0 = qkv.clock()
for i = 1, STEPS do
  loss_sum, loss_n = loss_sum + step(), loss_n + 1
  if i % 500 == 0 then now_and_then() end
  if i % every == 0 or i == 1 then
    local r = rss_mb()
    rows[#rows + 1] = {i, r}
    print(("%9d %9s %11.3f %9.2f %8.4f"):format(i, r and ("%.1f"):format(r) or "-",
          qkv.memory() / 2^20, collectgarbage("count") / 1024, loss_sum / loss_n))
    io.stdout:flush()
    loss_sum, loss_n = 0, 0
  end
end
local secs = qkv.clock() - t0

-- growth from the first tenth of the run (thread pools and caches warm)
-- to the end
local warm, last, peak = nil, rows[#rows][2], 0
for _, r in ipairs(rows) do
  if r[1] >= STEPS // 10 and not warm then warm = r[2] end
  if r[2] then peak = math.max(peak, r[2]) end
end
if warm and last then
  print(("soak: RSS %.1f MiB at step %d, %.1f at the end (peak %.1f): %+.1f MiB over %d steps; " ..
         "%.0f steps/s"):format(warm, STEPS // 10, last, peak, last - warm, STEPS - STEPS // 10,
         STEPS / secs))
else
  print("soak: no /proc/self/statm here: resident memory not measured")
end

---------------------------------------------------------------- the kernel

local PY = "build/pyref/bin/python"
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
if CELLS == 0 then return end
if os.execute(PY .. " -c 'import jupyter_client' >/dev/null 2>&1") ~= true then
  print("soak: no " .. PY .. " with jupyter_client (`make peers`): the kernel's soak skipped")
  return
end
local tmp = os.tmpname()
os.remove(tmp)
local exe = arg[-1] or "build/qkv"
os.execute(quote(exe) .. " kernel install --prefix " .. quote(tmp) .. " >/dev/null")
print(("soak: %d Jupyter cells through jupyter_client (bench/soak_kernel.py); the kernel's " ..
       "memory every %d cells"):format(CELLS, math.max(1, CELLS // 20)))
print(("%9s %9s %9s"):format("cells", "RSS MiB", "Lua MiB"))
local p = io.popen(PY .. " " .. quote(here .. "/soak_kernel.py") .. " " ..
                   quote(tmp .. "/share/jupyter") .. " " .. CELLS .. " 2>&1")
local krows, done = {}, nil
for line in p:lines() do
  local n, kib, lua = line:match("^ROW (%d+) (%d+) (%-?%d+)")
  if n then
    krows[#krows + 1] = {tonumber(n), tonumber(kib) / 1024}
    print(("%9d %9.1f %9.2f"):format(tonumber(n), tonumber(kib) / 1024, tonumber(lua) / 1024))
    io.stdout:flush()
  elseif line:match("^DONE") then
    done = line
  else
    print("  " .. line)
  end
end
p:close()
os.execute("rm -rf " .. quote(tmp))
local _, secs, wrong = (done or ""):match("^DONE (%d+) (%S+) (%d+)")
if not secs or #krows < 2 then
  print("soak: the kernel's soak did not finish")
  return
end
local kwarm
for _, r in ipairs(krows) do
  if r[1] >= CELLS // 10 and not kwarm then kwarm = r end
end
local klast = krows[#krows]
print(("soak: kernel RSS %.1f MiB at cell %d, %.1f at the end: %+.1f MiB over %d cells; " ..
       "%.0f cells/s; %d cells answered wrong"):format(kwarm[2], kwarm[1], klast[2],
       klast[2] - kwarm[2], klast[1] - kwarm[1], CELLS / tonumber(secs), tonumber(wrong)))
