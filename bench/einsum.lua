-- einsum.lua -- times qkv.einsum on the two attention specs against the
-- primitives they stand for, in the same run: "bhqd,bhkd->bhqk" against
-- qkv.scores(Q, K, {scale = 1}) and "bhqk,bhkd->bhqd" against W:matmul(V),
-- float32, at the seed size (1, 1, 3, 2) and a model size (b 8, h 12,
-- q = k = 128, d 64); and against torch.einsum (bench/einsum_torch.py) when
-- /usr/bin/python3 has torch.
--
--   build/qkv bench/einsum.lua [--quick]

local TORCH = (dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua").peer_python()) or "/usr/bin/python3"
local SIZES = {{label = "seed", b = 1, h = 1, q = 3, k = 3, d = 2},
               {label = "model", b = 8, h = 12, q = 128, k = 128, d = 64}}
local quick = arg[1] == "--quick"
local BUDGET = quick and 0.05 or 0.5

-- seconds per call of fn: the best of rounds of `reps` calls each, for at
-- least BUDGET seconds and three rounds
local function per_call(fn)
  local reps, t = 1, 0
  repeat                                  -- rounds of about 10 ms
    local t0 = qkv.clock()
    for _ = 1, reps do fn() end
    t = qkv.clock() - t0
    if t < 0.01 then reps = reps * 2 end
  until t >= 0.01 or reps >= 2 ^ 20
  local best, total, rounds = math.huge, 0, 0
  repeat
    local t0 = qkv.clock()
    for _ = 1, reps do fn() end
    local dt = qkv.clock() - t0
    best, total, rounds = math.min(best, dt / reps), total + dt, rounds + 1
  until total >= BUDGET and rounds >= 3
  return best
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local torch_py = arg[0]:gsub("einsum%.lua$", "einsum_torch.py")
local have_torch = os.execute(TORCH .. " -c 'import torch' >/dev/null 2>&1") == true

-- torch.einsum's seconds per call for a spec and sizes, or nil
local function torch_time(spec, s)
  if not have_torch then return nil end
  local p = io.popen(string.format("%s %s '%s' %d %d %d %d %d %g 2>&1", TORCH,
    shell_quote(torch_py), spec, s.b, s.h, s.q, s.k, s.d, BUDGET))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("RESULT (%S+)"))
end

local function us(t) return t and string.format("%.2f", t * 1e6) or "-" end

print(string.format("einsum: float32, microseconds per call (best of rounds)%s",
  have_torch and "" or "; torch not found by " .. TORCH .. ", skipped"))
print(string.format("%-6s %-17s %10s %12s %7s %10s", "size", "spec", "einsum",
  "primitive", "ratio", "torch"))
for _, s in ipairs(SIZES) do
  qkv.seed(1)
  local Q, K = qkv.randn(s.b, s.h, s.q, s.d), qkv.randn(s.b, s.h, s.k, s.d)
  local W, V = qkv.softmax(qkv.randn(s.b, s.h, s.q, s.k)), qkv.randn(s.b, s.h, s.k, s.d)
  local rows = {
    {"bhqd,bhkd->bhqk", function() return qkv.einsum("bhqd,bhkd->bhqk", Q, K) end,
     "scores", function() return qkv.scores(Q, K, {scale = 1}) end},
    {"bhqk,bhkd->bhqd", function() return qkv.einsum("bhqk,bhkd->bhqd", W, V) end,
     "matmul", function() return W:matmul(V) end},
  }
  for _, r in ipairs(rows) do
    local te, tp = per_call(r[2]), per_call(r[4])
    print(string.format("%-6s %-17s %10s %12s %7.2f %10s", s.label, r[1], us(te),
      us(tp) .. " " .. r[3], te / tp, us(torch_time(r[1], s))))
  end
end
