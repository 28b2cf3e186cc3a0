-- sigint.lua: what tests/core/test_interrupt.lua and bench/interrupt.lua share:
-- one long-running op of each kind, and a run of the qkv executable that
-- gets SIGINT while it is inside that op.
--
-- A case is a setup chunk and an op (a Lua expression). The child runs
--
--   qkv -e SETUP -e 'print("ready") ... pcall(loop of OP) ... print(err)'
--       -e 'print(CHECK)'
--
-- and a shell wrapper sends it SIGINT once it has printed "ready" and then
-- used 0.2 s of CPU time (or as much as the caller asks): CPU time only grows while the child runs, so on
-- a loaded machine the signal still comes inside the loop, where a wall
-- clock sleep could come before the op starts. The loop keeps the op
-- running until the signal comes. The error names the op ("gelu:
-- interrupted") when the signal came inside it; the Lua hook's
-- "interrupted!" when it came between two calls (microseconds against the
-- op's tens of milliseconds: a run that sees it is tried again). The
-- third chunk, run after the interrupt, proves the state usable: the flag
-- is cleared and a small op gives its value. Inputs and results stay under
-- 1.5 GB.
local shell = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "shell.lua")
local S = {}

local N4, N8, N16 = 4096, 8192, 16384
local function full(r, c, v) return ("qkv.full({%d, %d}, %s)"):format(r, c, v or "0.5") end

-- name, the op's name in its error (or a list of names), setup, op
S.cases = {
  {"a + b", "add", "a, b = " .. full(N4, N8) .. ", " .. full(N4, N8), "a + b"},
  {"gelu", "gelu", "x = " .. full(N8, N8), "x:gelu()"},
  {"exp", "exp", "x = " .. full(N8, N8), "x:exp()"},
  {"full", "full", "", full(N8, N8, 2)},
  {"masked_fill", "masked_fill", "x = " .. full(N4, N8, 1) .. "; m = x:gt(0)", "x:masked_fill(m, 0)"},
  {"copy of x:t()", "contiguous", "x = " .. full(N8, N8, 1), "x:t():contiguous()"},
  {"sum()", "sum", ("x = qkv.full({%d}, 1)"):format(N16 * N8), "x:sum()"},
  {"sum(1), strided", "sum", "x = " .. full(N8, N16, 1), "x:sum(1)"},
  {"argmax(2)", "argmax", "x = " .. full(N16, N8, 1), "x:argmax(2)"},
  {"var()", "var", ("x = qkv.full({%d}, 1)"):format(N16 * N8), "x:var()"},
  {"matmul 4096²", "matmul", "a, b = " .. full(4096, 4096) .. ", " .. full(4096, 4096), "a:matmul(b)"},
  {"matmul 8×2048²", "matmul",
   "a, b = qkv.full({8, 2048, 2048}, 0.5), qkv.full({8, 2048, 2048}, 0.5)", "a:matmul(b)"},
  {"softmax(2)", "softmax", "x = " .. full(N8, N8, 1), "x:softmax(2)"},
  {"log_softmax(2)", "log_softmax", "x = " .. full(N8, N8, 1), "x:log_softmax(2)"},
  {"layer_norm", "layer_norm", "x = " .. full(N8, N8, 1), ("qkv.layer_norm(x, %d)"):format(N8)},
  -- the unfused path is products and a softmax, reported as attention's
  {"attention", "attention", "q = qkv.full({1, 4, 4096, 64}, 0.1)", "qkv.attention(q, q, q)"},
  {"attention, fused", "attention", "q = qkv.full({1, 8, 16384, 64}, 0.1)",
   "qkv.attention(q, q, q, {weights = false})"},
  {"randn", "randn", "", ("qkv.randn(%d, %d)"):format(N8, N8)},
  {"arange", "arange", "", ("qkv.arange(%d)"):format(N8 * N8)},
  {"causal", "causal", "", ("qkv.causal(%d)"):format(N16)},
  {"sort(2)", "sort", "x = qkv.randn(1024, 65536)", "x:sort(2)"},
  {"where", "where", "x = " .. full(N8, N8) .. "; m = x:gt(0)", "qkv.where(m, x, 0)"},
  {"save", "save", "x = " .. full(N8, N8) .. "; p = os.tmpname()",
   "qkv.save(p, x)"},
  {"load", "load", "x = " .. full(N8, N8) .. "; p = os.tmpname(); qkv.save(p, x)",
   "qkv.load(p)"},
}

-- the child's second chunk: "ready", then the op until interrupted; prints
-- the error the loop ended with
-- (then `tail`, more code in the same command, when given)
function S.body(op, tail)
  return 'print("ready") io.stdout:flush() ' ..
         "local ok, e = pcall(function() for _ = 1, 100 do y = nil; y = " .. op ..
         " end end) y = nil print(ok and 'finished' or e) " .. (tail or "")
end

-- the third: the state is usable after the interrupt
S.CHECK = "if p then os.remove(p) end print('after', qkv.ones(3):sum():item())"

-- runs exe -e setup -e body -e check, SIGINT as above; prints "status N",
-- "latency_us N" (from the kill to the op's error line, read from the
-- child's output as it appears), then its output
local WRAP = [[
exe=$1 setup=$2 body=$3 check=$4 ms=${5:-200}
out=$(mktemp) || exit 2
"$exe" -e "$setup" -e "$body" -e "$check" >"$out" 2>&1 &
pid=$!
# the child's CPU time in clock ticks; -1 once it has exited
cpu() { awk '{ print ($3 == "Z") ? -1 : $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo -1; }
while [ "$(cpu)" -ge 0 ] && ! grep -q '^ready$' "$out"; do sleep 0.01; done
start=$(cpu)
ticks=$(( $(getconf CLK_TCK) * ms / 1000 ))
while c=$(cpu) && [ "$c" -ge 0 ] && [ "$c" -lt $((start + ticks)) ]; do sleep 0.01; done
t0=$(date +%s%N)
kill -INT "$pid" 2>/dev/null
while [ "$(cpu)" -ge 0 ] && [ "$(grep -c . "$out")" -lt 2 ]; do sleep 0.001; done
t1=$(date +%s%N)
wait "$pid"
status=$?
echo "status $status"
echo "latency_us $(( (t1 - t0) / 1000 ))"
cat "$out"
rm -f "$out"
]]

-- runs one case ({label, name, setup, op [, tail]}), the signal after `ms`
-- milliseconds of the child's CPU time past "ready" (200 by default);
-- returns {status=, latency= (seconds), err= (the line the loop ended
-- with), after= (the check's line), out=}; `timeout 120` is the backstop
-- should nothing stop it
function S.run(exe, case, ms)
  local cmd = "timeout 120 sh -c " .. shell.quote(WRAP) .. " sh " .. shell.quote(exe) ..
              " " .. shell.quote(case[3]) .. " " .. shell.quote(S.body(case[4], case[5])) ..
              " " .. shell.quote(S.CHECK) .. " " .. math.tointeger(ms or 200)
  local out, code = shell.sh(cmd)
  local r = {out = out, status = tonumber(out:match("^status (%d+)")) or code}
  r.latency = tonumber(out:match("\nlatency_us (%d+)"))
  r.latency = r.latency and r.latency * 1e-6
  r.err = out:match("\nready\n([^\n]*)")
  r.after = out:match("\n(after%s[^\n]*)")
  return r
end

-- a run whose signal came inside the op (at most `tries` runs, 6 by default:
-- on a busy machine the signal lands between two calls now and then)
function S.run_inside(exe, case, tries)
  local r
  for _ = 1, tries or 6 do
    r = S.run(exe, case)
    if r.err ~= "interrupted!" then return r end
  end
  return r
end

-- whether this system can run the wrapper (Linux /proc, GNU date)
function S.available()
  local out, code = shell.sh("test -r /proc/self/stat && date +%s%N")
  return code == 0 and out:match("^%d+\n$") ~= nil and not out:match("N")
end

return S
