-- generate.lua -- issue 49's generation targets: the example model of
-- scripts/decoder.lua (scripts/lib/decoder_model.lua: 2 blocks, d 64, 4
-- query heads on 2 key/value heads; random weights, since the speed does
-- not depend on training) writing one token at a time from its KV caches
-- after 128, 512 and 2048 tokens of context, against PyTorch eager with a
-- static cache (bench/generate_torch.py, by the peer python of
-- bench/lib/timing.lua) on the same weights and the same tokens, 2 threads
-- on both sides. The peer first checks that its logits are qkv's.
--
--   build/qkv bench/generate.lua [busy]
--
-- ms/token: the best of 3 runs of STEPS decode steps, each feeding one
-- token (fixed, not drawn, so both sides do the same work); flat: the time
-- at a context over the time at 128. busy: the table again with one busy
-- process beside both sides (bench/lib/timing.lua's with_load).

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local M = dofile(here .. "/../scripts/lib/decoder_model.lua")
local quote = U.quote

local V, STEPS, THREADS, CONTEXTS = 96, 64, 2, {128, 512, 2048}
qkv.set_num_threads(THREADS)
qkv.seed(1)
local m = M.new(V)
local total = CONTEXTS[#CONTEXTS] + STEPS
local tokens = qkv.randint(1, V + 1, {1, total})

local p = io.popen("mktemp -d")
local dir = p:read("l")
p:close()
local state = M.state(m)
qkv.no_grad(function()
  state["check.tokens"] = tokens:narrow(2, 1, 64) - 1             -- PyTorch's ids count from 0
  state["check.logits"] = M.forward(m, tokens:narrow(2, 1, 64), 1)
end)
qkv.save_safetensors(dir .. "/model.safetensors", state, {heads = tostring(m.H)})

-- per token, the best of 3: the context through the caches, then STEPS
-- tokens one at a time
local function per_token(ctx)
  local best = math.huge
  for _ = 1, 3 do
    local caches = M.caches(m, 1, ctx + STEPS)
    qkv.no_grad(function()
      M.forward(m, tokens:narrow(2, 1, ctx), 1, caches)
      local t0 = qkv.clock()
      for i = 1, STEPS do M.forward(m, tokens:narrow(2, ctx + i, 1), ctx + i, caches) end
      best = math.min(best, (qkv.clock() - t0) / STEPS)
    end)
  end
  return best
end

local busy = false
for _, a in ipairs(arg) do
  if a == "busy" then busy = true
  else error("bench/generate.lua: unknown argument '" .. a .. "' (see the head of the file)", 0) end
end

local PY = U.peer_python() or "/usr/bin/python3"
local have_torch = os.execute(PY .. " -c 'import torch' >/dev/null 2>&1") == true
-- the peer's ms/token per context, and the check of its logits
local function peer()
  local torch = {}
  if not have_torch then return torch end
  local script = here .. "/generate_torch.py"
  local cmd = ("%s %s %s %d %d %s 2>&1"):format(PY, quote(script), quote(dir .. "/model.safetensors"), STEPS,
                                                THREADS, table.concat(CONTEXTS, ","))
  local out = io.popen(cmd):read("a")
  torch.check = tonumber(out:match("CHECK (%S+)"))
  for c, t in out:gmatch("RESULT (%d+) (%S+)") do torch[tonumber(c)] = tonumber(t) end
  if not torch.check then io.stderr:write("generate_torch.py:\n", out) end
  return torch
end

print(("generate: the decoder script's model (%d parameters), %d steps a context, %d threads"):format(
  m.nparams, STEPS, THREADS))
for _, load in ipairs(busy and {"idle", "busy"} or {"idle"}) do
  local torch, qkv_t = U.with_load(load == "busy", function()
    local t = {}
    for _, c in ipairs(CONTEXTS) do t[c] = per_token(c) end
    return peer(), t
  end)
  if load == "idle" then
    print(have_torch and ("torch: " .. PY .. ", eager with a static cache; its logits against qkv's: max |diff| "
                          .. (torch.check and ("%.2e"):format(torch.check) or "-"))
          or ("torch: not found by " .. PY .. ", skipped"))
  end
  print(("%-5s %8s %12s %12s %9s %7s"):format("load", "context", "qkv ms/tok", "torch ms/tok", "torch/qkv",
                                              "flat"))
  local first = qkv_t[CONTEXTS[1]]
  for _, c in ipairs(CONTEXTS) do
    local t = qkv_t[c]
    print(("%-5s %8d %12.3f %12s %9s %7.2f"):format(load, c, t * 1e3,
                                                    torch[c] and ("%.3f"):format(torch[c] * 1e3) or "-",
                                                    torch[c] and ("%.2f"):format(torch[c] / t) or "-",
                                                    t / first))
  end
end
os.execute("rm -rf " .. quote(dir))
