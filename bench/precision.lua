-- precision.lua -- float32 products under qkv.set_float32_matmul_precision
-- against PyTorch's (bench/precision_torch.py) in the same run: the best of
-- at least 5 runs and 0.25 s on the model shapes (MiniLM's 384/1536, the
-- square ones), and the error against float64, ||c - ref|| / ||ref||, for
-- "highest", "high" and "medium" as this machine runs them ("-> highest"
-- where it has no faster product: no AVX-512 BF16 for medium, no AMX for
-- high), and for the bfloat16 parts themselves (qkv._split_products: on a
-- CPU without bfloat16 products they run in float32 of the parts, the
-- same values, slower: their time says nothing of the tile unit's).
--
--   build/qkv bench/precision.lua          (run by `make bench`)

local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local SHAPES = {{512, 384, 384}, {512, 384, 1536}, {512, 1536, 384}, {1024, 1024, 1024}}
local PRECISIONS = {"highest", "high", "medium"}

local best = U.best_short

local PY, VERSION = U.peer_python()
local torch = {}                       -- torch["MxKxN precision"] = {seconds, error}
if PY then
  local args = {}
  for _, s in ipairs(SHAPES) do args[#args + 1] = table.concat(s, " ") end
  local p = io.popen(U.quote(PY) .. " " .. U.quote(arg[0]:gsub("precision%.lua$", "precision_torch.py")) ..
                     " " .. table.concat(args, " ") .. " 2>&1")
  for line in p:lines() do
    local m, k, n, pr, t, e = line:match("^RESULT (%d+) (%d+) (%d+) (%a+) (%S+) (%S+)")
    if m then torch[m .. "x" .. k .. "x" .. n .. " " .. pr] = {tonumber(t), tonumber(e)} end
  end
  p:close()
end

local function rel_error(c, ref)
  local d = c:double() - ref
  return math.sqrt((d * d):sum():item()) / math.sqrt((ref * ref):sum():item())
end

-- time and error of a @ b at precision p, the parts forced or not
local function run(a, b, ref, p, forced)
  qkv._split_products(forced)
  qkv.set_float32_matmul_precision(p)
  local t = best(function() return a:matmul(b) end)
  local e = rel_error(a:matmul(b), ref)
  qkv.set_float32_matmul_precision("highest")
  qkv._split_products(false)
  return t, e
end

print("precision: float32 products on the CPU, ms and error against float64, " ..
      qkv.get_num_threads() .. " threads; " ..
      (PY and ("torch " .. VERSION) or "torch: not found (`make bench-deps`), skipped"))
print(("%-16s %-8s %9s %9s %8s %9s %9s %10s %10s"):format("M x K x N", "prec", "qkv ms", "error",
  "/highest", "parts ms", "parts err", "torch ms", "torch err"))
for _, s in ipairs(SHAPES) do
  local m, k, n = s[1], s[2], s[3]
  qkv.seed(1)
  local a, b = qkv.randn(m, k), qkv.randn(k, n)
  local ref = a:double():matmul(b:double())
  local key = m .. "x" .. k .. "x" .. n
  local t0, e0 = run(a, b, ref, "highest", false)
  for _, p in ipairs(PRECISIONS) do
    local t, e = run(a, b, ref, p, false)
    local tp, ep = "-", "-"
    if p ~= "highest" then
      local x, y = run(a, b, ref, p, true)
      tp, ep = ("%.3f"):format(x * 1e3), ("%.3g"):format(y)
    end
    if p == "highest" then t, e = t0, e0 end
    local pt = torch[key .. " " .. p]
    print(("%-16s %-8s %9.3f %9.3g %8.2f %9s %9s %10s %10s"):format(key, p, t * 1e3, e, t0 / t,
      tp, ep, pt and ("%.3f"):format(pt[1] * 1e3) or "-", pt and ("%.3g"):format(pt[2]) or "-"))
  end
end
print("(/highest: highest's time over this one's; parts: qkv._split_products(true))")
