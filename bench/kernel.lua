-- kernel.lua -- qkv's Jupyter kernel against IPython's (ipykernel), both
-- through the same jupyter_client in the same run (bench/kernel_rtt.py):
-- the start time to the kernel_info_reply and the round trip of `1+1`
-- (execute_request to the idle status). Needs `make peers` (build/pyref).
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

local qs, qr = measure("qkv")
local ps, pr = measure("pyref")
os.execute("rm -rf " .. U.quote(tmp))
print("kernel: through jupyter_client, medians (5 starts, 200 round trips)")
print(("%-38s %10s %10s %10s"):format("", "qkv", "ipykernel", "ipy/qkv"))
local function row(name, a, b, fmt)
  print(("%-38s %10s %10s %10s"):format(name, a and fmt:format(a) or "-", b and fmt:format(b) or "-",
                                        (a and b) and ("%.1f"):format(b / a) or "-"))
end
row("start to kernel_info_reply (s)", qs, ps, "%.3f")
row("1+1: execute_request to idle (ms)", qr, pr, "%.2f")
