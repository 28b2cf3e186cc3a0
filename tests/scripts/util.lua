-- util.lua: what the per-seed script tests share: run a script in its own
-- qkv process with PNGs going to a fresh folder, and read back what it
-- printed and returned; float64 references by plain loops to check the
-- returned tensors against; the assertions the seed files all make.
local lu = require "luaunit"
local U = {}

local exe = arg and arg[-1] or "build/qkv"
local quote = dofile("tests/helpers/shell.lua").quote

-- run(script [, env]) -> {stdout = text printed, results = returned table (tensors
-- come back as {__tensor = nested float64 lists, shape = ...}), out = the
-- folder with its PNGs, pngs = list of file names}; env: "NAME=value "
-- settings put before the command
function U.run(script, env)
  local p = io.popen("mktemp -d")
  local dir = p:read("l")
  p:close()
  -- under `qkv test --device cuda` the scripts run on the GPU too
  local dev = qkv.default_device() == "cuda" and " --device cuda" or ""
  local cmd = string.format("cd %s && %sQKV_OUT=%s NO_COLOR=1 %s%s tests/scripts/harness.lua %s 2>&1",
                            quote(os.getenv("PWD") or "."), env or "", quote(dir), quote(exe), dev,
                            quote(script))
  p = io.popen(cmd)
  local text = p:read("a")
  local ok, _, code = p:close()
  assert(ok, script .. " failed (exit " .. tostring(code) .. "):\n" .. text)
  -- the same prints as on the CPU, but for the device's suffix
  if dev ~= "" then text = text:gsub(",%s*device='cuda'", "") end
  local stdout, lit = text:match("^(.*)\n%-%-%- results %-%-%-\n(.*)$")
  assert(stdout, script .. ": no results marker in its output:\n" .. text)
  local results = assert(load(lit))()
  local pngs = {}
  p = io.popen("ls " .. quote(dir))
  for f in p:lines() do pngs[#pngs + 1] = f end
  p:close()
  return {stdout = stdout, results = results, out = dir, pngs = pngs}
end

-- remove a run's PNG folder
function U.clean(r)
  os.execute("rm -rf " .. quote(r.out))
end

-- the nested lists of a returned tensor
function U.values(t) return assert(t and t.__tensor, "not a returned tensor") end

-- max |a - b| over nested lists of numbers
function U.maxdiff(a, b)
  if type(a) == "number" then return math.abs(a - b) end
  assert(#a == #b, "lengths differ: " .. #a .. " vs " .. #b)
  local m = 0
  for i = 1, #a do m = math.max(m, U.maxdiff(a[i], b[i])) end
  return m
end

-- the numbers in a line of text, in order
function U.numbers(line)
  local r = {}
  line = line:gsub("grad_fn=<%w+>", "")    -- PyTorch's suffix, as qkv prints it
  for n in line:gmatch("%-?%d+%.?%d*[eE]?[-+]?%d*") do r[#r + 1] = tonumber(n) end
  return r
end

-- cached(script): run it once for all the tests that ask; its PNGs are read
-- back into r.images (name -> picture, or the error) and the folder removed
-- at once, so that no test depends on another having run first
local runs = {}
function U.cached(script, env)
  local r = runs[script]
  if not r then
    r = U.run(script, env)
    r.images = {}
    for _, name in ipairs(r.pngs) do
      local ok, img = pcall(qkv.plot.read_png, r.out .. "/" .. name)
      r.images[name] = ok and img or tostring(img)
    end
    U.clean(r)
    runs[script] = r
  end
  return r
end

---------------------------------------------------------------- references
-- in float64 on nested lists, written out so that they share nothing with
-- the tensor code under test

function U.matmul(a, b)
  local c = {}
  for i = 1, #a do
    c[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for k = 1, #b do s = s + a[i][k] * b[k][j] end
      c[i][j] = s
    end
  end
  return c
end

function U.transpose(a)
  local t = {}
  for j = 1, #a[1] do
    t[j] = {}
    for i = 1, #a do t[j][i] = a[i][j] end
  end
  return t
end

function U.scale(a, s)
  local c = {}
  for i = 1, #a do
    c[i] = {}
    for j = 1, #a[i] do c[i][j] = a[i][j] * s end
  end
  return c
end

-- softmax of each row; keep(j) false drops column j (weight exactly 0)
function U.softmax_rows(s, keep)
  local w = {}
  for i, row in ipairs(s) do
    local m, z = -math.huge, 0
    for j, v in ipairs(row) do if not keep or keep(j) then m = math.max(m, v) end end
    w[i] = {}
    for j, v in ipairs(row) do
      w[i][j] = (not keep or keep(j)) and math.exp(v - m) or 0
      z = z + w[i][j]
    end
    for j = 1, #row do w[i][j] = w[i][j] / z end
  end
  return w
end

-- softmax(xq W_Q (xkv W_K)^T / sqrt(d_k)) xkv W_V with every intermediate:
-- {Q, K, V, QK, scaled, weights, out}
function U.attention(xq, xkv, W_Q, W_K, W_V)
  local r = {Q = U.matmul(xq, W_Q), K = U.matmul(xkv, W_K), V = U.matmul(xkv, W_V)}
  r.QK = U.matmul(r.Q, U.transpose(r.K))
  r.scaled = U.scale(r.QK, 1 / math.sqrt(#r.K[1]))
  r.weights = U.softmax_rows(r.scaled)
  r.out = U.matmul(r.weights, r.V)
  return r
end

---------------------------------------------------------------- assertions

-- a returned tensor t matches the nested lists ref to within tol
function U.assertClose(t, ref, tol, what)
  local v = U.values(t)
  lu.assertEquals(#v, #ref, what)
  lu.assertTrue(U.maxdiff(v, ref) <= tol, what .. ": off by " .. U.maxdiff(v, ref))
end

-- every row of t (a returned tensor or nested lists, of any rank) sums to
-- 1; each weight is in [0, 1], or in (0, 1) when open, as softmax of
-- finite scores gives
function U.assertRowsSumToOne(t, open)
  local w = t.__tensor or t
  if type(w[1][1]) == "table" then
    for _, m in ipairs(w) do U.assertRowsSumToOne(m, open) end
    return
  end
  for i, row in ipairs(w) do
    local s = 0
    for _, v in ipairs(row) do
      if open then lu.assertTrue(v > 0 and v < 1, "weight outside (0, 1): " .. v)
      else lu.assertTrue(v >= 0 and v <= 1, "weight outside [0, 1]: " .. v) end
      s = s + v
    end
    lu.assertAlmostEquals(s, 1, 1e-5, "row " .. i)
  end
end

function U.assertShape(t, shape)
  lu.assertEquals(t.shape, shape)
end

-- a run from U.cached wrote name, and it reads back at a sane size: at
-- least min_w x min_h (200 x 200 unless given), at most 4000 x 4000
function U.assertPng(r, name, min_w, min_h)
  local img = r.images[name]
  lu.assertNotNil(img, name .. " was not written; got " .. table.concat(r.pngs, ", "))
  lu.assertEquals(type(img), "table", name .. " does not read back: " .. tostring(img))
  local w, h = img.width, img.height
  min_w, min_h = min_w or 200, min_h or 200
  lu.assertTrue(w >= min_w and h >= min_h and w <= 4000 and h <= 4000,
                name .. " is " .. tostring(w) .. "x" .. tostring(h))
end

local function flat(t, out)
  for _, v in ipairs(t) do
    if type(v) == "table" then flat(v, out) else out[#out + 1] = v end
  end
  return out
end

-- title is printed (at or after init) and, if ref (nested lists) is given,
-- followed by a tensor that shows ref's numbers to 4 decimals; returns
-- where the title ends, to look for the next one from
function U.assertPrinted(stdout, title, ref, init)
  local s, e = stdout:find(title, init or 1, true)
  lu.assertNotNil(s, "'" .. title .. "' not printed" .. (init and " in order" or "") .. " in:\n" .. stdout)
  if ref then
    local body = stdout:sub(e + 1):match("^%s*(tensor%b())")
    lu.assertNotNil(body, "no tensor after " .. title)
    local got, want = U.numbers(body), flat(ref, {})
    lu.assertEquals(#got, #want, title)
    for i = 1, #want do
      lu.assertEquals(string.format("%.4f", got[i]), string.format("%.4f", want[i]), title .. " #" .. i)
    end
  end
  return e + 1
end

return U
