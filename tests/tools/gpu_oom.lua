-- gpu_oom.lua: out of memory on a real GPU (step 6 of tests/tools/gpu_check.sh;
-- it takes the whole card, so it runs alone, last). Asks for more than the
-- card has, then fills the card 1 GiB at a time, and checks that each
-- failure is the Lua error, that a product still runs while the cache holds
-- most of the card (cuBLAS's workspace is ours), and that the next
-- allocations work. Prints one line per check; exits 1 if one failed.
--
--   build/gpu/bin/qkv tests/tools/gpu_oom.lua
local ok_all = true
local function check(what, cond, detail)
  print(("%-4s %s%s"):format(cond and "ok" or "FAIL", what, detail and (": " .. detail) or ""))
  ok_all = ok_all and cond
end
local function gib(n) return ("%.1f GiB"):format(n / 2^30) end

local ok, why = qkv.cuda_available()
if not ok then print("gpu_oom: no GPU (" .. why .. ")") os.exit(1) end
local m = qkv.cuda.memory()
print(("%s: %s total, %s free"):format(qkv.cuda.device_name(), gib(m.total), gib(m.free)))

qkv.seed(1)
local a = qkv.randn(512, 512, "cuda")
local ref = a:cpu():matmul(a:cpu())
local function product_ok()
  local r, got = pcall(function() return a:matmul(a):cpu() end)
  if not r then return false, got end
  local err = (got - ref):abs():max():item() / ref:abs():max():item()
  return err < 1e-5, ("relative error %.2g"):format(err)
end
check("a product before", product_ok())

-- 1. more than the card has, in one request
local r, err = pcall(qkv.zeros, m.total // 2, "float64", "cuda")
check("4x the card is an error", not r and err:find("out of memory", 1, true) ~= nil, tostring(err))
check("the next allocation works", qkv.ones(3, "cuda"):sum():item() == 3)

-- 2. the card filled 1 GiB at a time
local held, last = {}, nil
for _ = 1, 4096 do
  local r2, t = pcall(qkv.zeros, 1 << 28, "float32", "cuda")
  if not r2 then last = t break end
  held[#held + 1] = t
end
check("filling the card ends in the Lua error", last ~= nil and last:find("out of memory", 1, true)
  ~= nil, ("%d GiB held; %s"):format(#held, tostring(last)))
local pr, pdetail = product_ok()
print(("info a product with the card full: %s (%s)"):format(pr and "ran" or "error", pdetail))

-- 3. the tensors dropped: the cache holds the card; other sizes and a product
held = nil
collectgarbage()
collectgarbage()
m = qkv.cuda.memory()
print(("info after collecting: %s allocated, %s cached, %s free"):format(gib(m.allocated),
  gib(m.cached), gib(m.free)))
check("the cache holds what was freed", m.cached >= 8 * 2^30, gib(m.cached))
check("a product with the cache full", product_ok())
local r3, big = pcall(qkv.zeros, 3 << 28, "float32", "cuda")        -- 3 GiB: another class
check("an allocation of another size", r3 and big:numel() == 3 << 28, not r3 and tostring(big) or nil)
big = nil
qkv.cuda.empty_cache()
check("empty_cache gives the card back", qkv.cuda.memory().cached == 0)
os.exit(ok_all and 0 or 1)
