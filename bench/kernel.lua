-- kernel.lua -- qkv's Jupyter kernel against IPython's (ipykernel), both
-- through the same jupyter_client in the same run (bench/kernel_rtt.py):
-- the start time to the kernel_info_reply and the round trip of `1+1`
-- (execute_request to the idle status), and a cell of 51,200 print calls
-- (bench/kernel_flood.py): the time until the client has all its output,
-- how many stream messages carried it, and whether every line came.
-- Needs `make peers` (build/pyref).
--
--   build/qkv bench/kernel.lua          (run by `make bench`)

local PY = "build/pyref/bin/python"
local U = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/lib/timing.lua")
local here = arg[0]:match("^(.*)/[^/]*$") or "."

if os.execute(PY .. " -c 'import jupyter_client, ipykernel' >/dev/null 2>&1") ~= true then
  print("kernel: no " .. PY .. " with jupyter_client and ipykernel (`make peers`); skipped")
  return
end

local tmp = os.tmpname()
os.remove(tmp)
local exe = arg[-1] or "build/qkv"
os.execute(U.quote(exe) .. " kernel install --prefix " .. U.quote(tmp) .. " >/dev/null")
os.execute(PY .. " -m ipykernel install --prefix " .. U.quote(tmp) .. " --name pyref >/dev/null 2>&1")

local function measure(name)
  local p = io.popen(PY .. " " .. U.quote(here .. "/kernel_rtt.py") .. " " ..
                     U.quote(tmp .. "/share/jupyter") .. " " .. name .. " 2>&1")
  local out = p:read("a")
  p:close()
  local s, r = out:match("RESULT (%S+) (%S+)")
  if not s then io.stderr:write(name .. ": " .. out) end
  return tonumber(s), tonumber(r)
end

local FLOOD, WAIT = 51200, 120        -- lines, and seconds the client waits for them

-- seconds (math.huge: the client gave up), stream messages, complete
-- (bench/kernel_flood.py)
local function flood(name, code)
  local p = io.popen(PY .. " " .. U.quote(here .. "/kernel_flood.py") .. " " ..
                     U.quote(tmp .. "/share/jupyter") .. " " .. name .. " " .. U.quote(code) ..
                     " " .. FLOOD .. " " .. WAIT .. " 2>&1")
  local out = p:read("a")
  p:close()
  local s, m, _, ok = out:match("FLOOD (%S+) (%S+) (%S+) (%S+)")
  if not s then io.stderr:write(name .. ": " .. out) end
  local t = tonumber(s)
  if t and t >= WAIT then t = math.huge end       -- the idle status never came
  return t, tonumber(m), ok == "1" and "yes" or ok and "no" or nil
end

local qs, qr = measure("qkv")
local ps, pr = measure("pyref")
local qf, qm, qok = flood("qkv", ("for i = 0, %d do print(i) end"):format(FLOOD - 1))
local pf, pm, pok = flood("pyref", ("for i in range(%d): print(i)"):format(FLOOD))
os.execute("rm -rf " .. U.quote(tmp))
print("kernel: through jupyter_client, medians (5 starts, 200 round trips; one flood)")
print(("%-38s %10s %10s %10s"):format("", "qkv", "ipykernel", "ipy/qkv"))
local function cell(v, fmt)
  if v == math.huge then return "> " .. WAIT end
  return v and fmt:format(v) or "-"
end
local function row(name, a, b, fmt)
  local ratio = (a and b and a < math.huge and b < math.huge) and ("%.1f"):format(b / a) or "-"
  print(("%-38s %10s %10s %10s"):format(name, cell(a, fmt), cell(b, fmt), ratio))
end
row("start to kernel_info_reply (s)", qs, ps, "%.3f")
row("1+1: execute_request to idle (ms)", qr, pr, "%.2f")
row(("%d prints: to all output (s)"):format(FLOOD), qf, pf, "%.3f")
row(("%d prints: stream messages"):format(FLOOD), qm, pm, "%d")
print(("%-38s %10s %10s"):format(("%d prints: every line came"):format(FLOOD), qok or "-", pok or "-"))
