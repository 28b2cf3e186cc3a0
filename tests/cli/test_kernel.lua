-- test_kernel.lua: qkv's Jupyter kernel (`qkv kernel`). With the peers
-- (`make peers`: jupyter_client, nbclient, nbconvert in build/pyref) the
-- real client starts it from its kernelspec and checks every message type
-- (tests/helpers/kernel/kernel_checks.py: results, streams as they come, errors
-- and the kernel going on, display_data PNGs of a heatmap's and a line plot's size,
-- complete, inspect, is_complete, history, comm_info, interrupts of
-- running loops, wrongly signed and replayed messages dropped, loopback
-- only, shutdown and restart), jupyter_kernel_test's conformance checks
-- run against it (tests/helpers/kernel/conformance.py), nbclient runs notebooks/
-- and checks each cell, and nbconvert --execute turns it into HTML.
-- Without them those are skipped; what needs no peer (install, the cell
-- rules, history search, arguments) is checked here directly.
local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")
local H = dofile("tests/helpers/npy_helpers.lua")
local json = require "qkv.json"

local PY = "build/pyref/bin/python"
local QKV = arg and arg[-1] or "build/qkv"     -- build-asan/qkv under make test-asan
local NOTEBOOK = "notebooks/002_scaled_dot_product.ipynb"
local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

local function peers()
  local _, code = S.sh(PY .. " -c 'import jupyter_client, nbclient, nbconvert' 2>/dev/null")
  if code ~= 0 then
    lu.skip("no " .. PY .. " with jupyter_client, nbclient and nbconvert (`make peers`)")
  end
end

-- the kernelspec, installed once into TMP
local installed
local function install()
  if not installed then
    local out, code = S.exe(QKV, "kernel", "install", "--prefix", TMP)
    assert(code == 0, out)
    installed = TMP .. "/share/jupyter/kernels/qkv"
  end
  return installed
end

-- kernel_checks.py, run once for all the checks
local results
local function checks()
  peers()
  if not results then
    install()
    local out = S.sh(PY .. " tests/helpers/kernel/kernel_checks.py " .. S.quote(TMP) .. " "
                     .. S.quote(TMP .. "/kernel.log"))
    results = {raw = out}
    for name, rest in out:gmatch("(%u+ [%w_]+)([^\n]*)") do results[name] = rest end
    results.done = out:find("\nDONE") ~= nil
  end
  return results
end

local function passes(name)
  local r = checks()
  lu.assertTrue(r.done, r.raw)
  if r["PASS " .. name] == nil then
    lu.fail(name .. ": " .. (r["FAIL " .. name] or "not run") .. "\n" .. r.raw)
  end
end

TestKernelClient = {}
for _, name in ipairs{"kernelspec", "kernel_info", "binds_loopback_only",
    "execute_result_and_count", "streams_as_they_come", "streams_in_order_and_batched",
    "errors_and_the_kernel_goes_on",
    "display_and_plots", "clear_output_and_help_pages", "complete", "inspect", "is_complete", "history_and_comm_info",
    "interrupt", "wrongly_signed_and_replayed_messages_are_dropped",
    "garbage_is_dropped_and_the_kernel_goes_on", "shutdown_and_restart"} do
  TestKernelClient["test_" .. name] = function() passes(name) end
end

-- under make test-asan the kernel is build-asan/qkv: its reports go to the log
local function assert_clean(log)
  log = H.readfile(log)
  lu.assertNil(log:find("Sanitizer", 1, true), log)
  lu.assertNil(log:find("runtime error", 1, true), log)
end

function TestKernelClient:test_the_kernel_log_has_no_sanitizer_report()
  checks()
  assert_clean(TMP .. "/kernel.log")
end

-- jupyter_kernel_test, the Jupyter project's conformance checks: its
-- KernelTests with qkv's samples (tests/helpers/kernel/conformance.py), run once;
-- each of its checks must pass, and one it adds later shows up here
local CONFORMANCE = {"kernel_info", "execute_stdout", "execute_stderr", "completion",
  "is_complete", "pager", "error", "execute_result", "display_data", "history", "inspect",
  "clear_output"}
local conformance
local function conform()
  local _, code = S.sh(PY .. " -c 'import jupyter_kernel_test' 2>/dev/null")
  if code ~= 0 then lu.skip("no " .. PY .. " with jupyter_kernel_test (`make peers`)") end
  if not conformance then
    install()
    local out = S.sh(PY .. " tests/helpers/kernel/conformance.py " .. S.quote(TMP) .. " "
                     .. S.quote(TMP .. "/conformance.log"))
    conformance = {raw = out, done = out:find("\nDONE") ~= nil, names = {}}
    for verdict, name, rest in out:gmatch("(%u+) test_([%w_]+)([^\n]*)") do
      conformance[name] = {verdict, rest}
      conformance.names[#conformance.names + 1] = name
    end
  end
  lu.assertTrue(conformance.done, conformance.raw)
  return conformance
end

TestKernelConformance = {}
for _, name in ipairs(CONFORMANCE) do
  TestKernelConformance["test_" .. name] = function()
    local r = conform()[name]
    lu.assertNotNil(r, name .. " did not run\n" .. conformance.raw)
    if r[1] ~= "PASS" then lu.fail(("%s %s%s"):format(r[1], name, r[2])) end
  end
end

function TestKernelConformance:test_every_check_is_listed_here()
  local listed = {}
  for _, name in ipairs(CONFORMANCE) do listed[name] = true end
  for _, name in ipairs(conform().names) do
    lu.assertTrue(listed[name], "jupyter_kernel_test's test_" .. name .. " is new: list it")
  end
end

function TestKernelConformance:test_the_kernel_log_has_no_sanitizer_report()
  conform()
  assert_clean(TMP .. "/conformance.log")
end

TestKernelNotebook = {}

function TestKernelNotebook:testEveryCellWithNbclient()
  peers()
  install()
  local out, code = S.sh(PY .. " tests/helpers/kernel/notebook_checks.py " .. S.quote(TMP) .. " "
                         .. S.quote(NOTEBOOK))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "DONE", out)
  lu.assertNil(out:find("FAIL", 1, true), out)
  local n = 0
  for _ in out:gmatch("PASS cell") do n = n + 1 end
  lu.assertEquals(n, 6, out)
end

function TestKernelNotebook:testNbconvertExecutesToHtml()
  peers()
  install()
  local html = TMP .. "/nb.html"
  local out, code = S.sh("JUPYTER_PATH=" .. S.quote(TMP .. "/share/jupyter") ..
    " build/pyref/bin/jupyter-nbconvert --to html --execute --output " .. S.quote(html) ..
    " " .. S.quote(NOTEBOOK))
  lu.assertEquals(code, 0, out)
  local text = H.readfile(html)
  local pngs = 0
  for _ in text:gmatch("data:image/png;base64") do pngs = pngs + 1 end
  lu.assertTrue(pngs >= 2, pngs .. " images")
  lu.assertStrContains(text, "variance with scaling")
end

-- without peers ------------------------------------------------------------

TestKernelLocal = {}

function TestKernelLocal:testInstallWritesTheKernelspec()
  local dir = install()
  local spec = json.decode(H.readfile(dir .. "/kernel.json"))
  lu.assertEquals(spec.display_name, "qkv")
  lu.assertEquals(spec.language, "lua")
  lu.assertEquals(spec.interrupt_mode, "signal")
  lu.assertEquals({spec.argv[2], spec.argv[3], spec.argv[4]}, {"kernel", "-f", "{connection_file}"})
  lu.assertStrContains(spec.argv[1], "/qkv")
  lu.assertEquals(spec.argv[1]:sub(1, 1), "/")
  for _, size in ipairs{32, 64} do
    local w, h = require("qkv.cairo").read_png(dir .. ("/logo-%dx%d.png"):format(size, size))
    lu.assertEquals({w, h}, {size, size})
  end
  -- --user follows JUPYTER_DATA_DIR
  local out, code = S.sh("JUPYTER_DATA_DIR=" .. S.quote(TMP .. "/user") .. " " .. QKV ..
                         " kernel install --user")
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, TMP .. "/user/kernels/qkv")
  lu.assertNotNil(io.open(TMP .. "/user/kernels/qkv/kernel.json"))
end

function TestKernelLocal:testBadArguments()
  local out, code = S.exe(QKV, "kernel")
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "usage:")
  out, code = S.exe(QKV, "kernel", "install", "--bogus")
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "kernel install: unknown option '--bogus'\nusage:")
  -- a misspelt option or command names the nearest, as qkv's other
  -- command lines do; an argument the kernel does not take is an error
  for _, c in ipairs({{{"install", "--usr"}, "kernel install: unknown option '--usr' (did you mean '--user'?)"},
                      {{"install", "-prefix", "/x"}, "unknown option '-prefix' (did you mean '--prefix'?)"},
                      {{"install", "--prefix"}, "kernel install: option '--prefix' needs a folder"},
                      {{"install", "here"}, "kernel install: unknown argument 'here'"},
                      {{"instal", "--user"}, "kernel: unknown argument 'instal' (did you mean 'install'?)"},
                      {{"-F", "c.json"}, "kernel: unknown option '-F' (did you mean '-f'?)"},
                      {{"-f"}, "kernel: option '-f' needs the connection file"},
                      {{"-f", TMP .. "/c.json", "--debug"}, "kernel: unknown option '--debug'\nusage:"}}) do
    out, code = S.exe(QKV, "kernel", table.unpack(c[1]))
    lu.assertEquals(code, 2, table.concat(c[1], " "))
    lu.assertStrContains(out, c[2])
  end
  out, code = S.exe(QKV, "kernel", "-f", TMP .. "/no-such-file.json")
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "cannot read the connection file")
  S.write(TMP .. "/bad.json", '{"shell_port": "x"}')
  out, code = S.exe(QKV, "kernel", "-f", TMP .. "/bad.json")
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "shell_port must be an integer port")
  S.write(TMP .. "/scheme.json", '{"shell_port": 1, "iopub_port": 2, "stdin_port": 3, ' ..
          '"control_port": 4, "hb_port": 5, "key": "k", "signature_scheme": "hmac-md5"}')
  out, code = S.exe(QKV, "kernel", "-f", TMP .. "/scheme.json")
  lu.assertNotEquals(code, 0)
  lu.assertStrContains(out, "signature_scheme hmac-md5 is not supported")
end

function TestKernelLocal:testTheCellRules()
  local exec = require "qkv.kernel.exec"
  lu.assertEquals(exec.is_complete("for i = 1, 2 do").status, "incomplete")
  lu.assertEquals(exec.is_complete("x = 1").status, "complete")
  lu.assertEquals(exec.is_complete("x = = 1").status, "invalid")
  lu.assertEquals(exec.is_complete("").status, "complete")
  local function shows(code, want)
    local f, show = exec._compile(code, 1)
    lu.assertNotNil(f, code)
    lu.assertEquals(show and table.pack(f()) or {n = 0}, want, code)
  end
  shows("1 + 1", {2, n = 1})
  shows("local a = 2\na * 21", {42, n = 1})
  shows("local a = 2\nreturn a, 3", {2, 3, n = 2})
  shows("local t = {}\nfor i = 1, 3 do t[i] = i end", {n = 0})
  shows("local a = 5\na -- a comment", {5, n = 1})
  local _, _, quiet = exec._compile("1 + 1;", 1)
  lu.assertTrue(quiet)
  local f, err = exec._compile("for", 7)
  lu.assertNil(f)
  lu.assertStrContains(err, "In[7]:1:")
  lu.assertStrContains(exec.help_text("qkv.softmax"), "Softmax along dim")
  lu.assertNil(exec.help_text("no_such_thing_at_all"))
end

-- IPython's HistoryManager is the reference (ipykernel's do_history)
function TestKernelLocal:testHistoryAnswersAsIPythonDoes()
  local history = require "qkv.kernel.history"
  local h = {{1, "x = 1", nil}, {2, "1 + 2", "3"}, {3, "y = 2"}, {4, "1 + 2", "3"},
             {5, "1 + 20", "21"}, {6, "1 + 2", "3"}, {7, "é?"}, {8, "a%b.[c]"}}
  local function lines(c)
    local out = {}
    for i, e in ipairs(history.query(h, c)) do out[i] = e[1] end
    return out
  end
  local function search(pattern, extra)
    local c = {hist_access_type = "search", pattern = pattern}
    for k, v in pairs(extra or {}) do c[k] = v end
    return lines(c)
  end
  lu.assertEquals(search("1 + *"), {2, 4, 5, 6})
  lu.assertEquals(search("1 + *", {unique = true}), {5, 6})        -- each code at its latest
  lu.assertEquals(search("1 + *", {n = 3}), {4, 5, 6})             -- the last n, oldest first
  lu.assertEquals(search("1 + *", {n = 1, unique = true}), {6})
  lu.assertEquals(search("1 + 2"), {2, 4, 6})                      -- the whole code
  lu.assertEquals(search("1 + ?"), {2, 4, 6})
  lu.assertEquals(search("1 + ??"), {5})
  lu.assertEquals(search("??"), {7})                               -- é is one character
  lu.assertEquals(search("[xy] = *"), {1, 3})
  lu.assertEquals(search("[^xy1] *"), {})
  lu.assertEquals(search("[a-x] = 1"), {1})
  lu.assertEquals(search("a%b.[[]c]"), {8})                        -- no magic but the glob's
  lu.assertEquals(search("X = 1"), {})                             -- case-sensitive as GLOB
  lu.assertEquals(search("*"), {1, 2, 3, 4, 5, 6, 7, 8})
  lu.assertEquals(search("*", {n = 0}), {})
  lu.assertEquals(lines{hist_access_type = "tail", n = 2}, {7, 8})
  lu.assertEquals(lines{hist_access_type = "range", session = 1, start = 2, stop = 4}, {2, 3})
  lu.assertEquals(lines{hist_access_type = "range", session = 0, start = 7}, {7, 8})
  lu.assertEquals(lines{hist_access_type = "range", session = 2, start = 1}, {})
  lu.assertEquals(lines{hist_access_type = "tail", n = "x"}, {1, 2, 3, 4, 5, 6, 7, 8})
end

function TestKernelLocal:testDisplayOutsideTheKernelPrints()
  local out = S.sh(QKV .. " -e 'qkv.display(qkv.ones(2), \"x\")'")
  lu.assertEquals(out, "tensor([1., 1.])\tx\n")
  -- a closed tensor inside a table (the API fuzzer's finding)
  out = S.sh(QKV .. " -e 'local t do local x <close> = qkv.ones(1); t = x end; qkv.display({t})'")
  lu.assertEquals(out, "{tensor(<closed>)}\n")
end

-- the kernel's cell runner with a stand-in for the kernel that records
-- what it publishes: a plot without file is a display_data PNG (the
-- signature's base64) of the size the same figure has in a file, and
-- out = false still returns the text
function TestKernelLocal:testPlotsAreDisplayDataPngs()
  S.write(TMP .. "/cells.lua", [=[
local exec = require "qkv.kernel.exec"
local out, sent = io.stdout, {}
local K = {publish = function(_, t, c) sent[#sent + 1] = {t, c} end, docall = pcall}
exec.setup(K)
for n, cell in ipairs{"qkv.plot.line({3, 1, 2}, {title = 'loss', label = 'train'})",
    "local p = os.tmpname() .. '.png'\nlocal l = qkv.plot.line({3, 1, 2}, {title = 'loss', " ..
    "label = 'train', file = p})\nos.remove(p)\nreturn l.width .. 'x' .. l.height",
    "qkv.plot.heatmap({{1, 2}})", "#qkv.plot.line({{3, 1}, {1, 3}}, {out = false})"} do
  sent = {}
  out:write(exec.run(K, {}, cell, n, false).status)
  for _, m in ipairs(sent) do
    local d, meta = m[2].data, m[2].metadata["image/png"]
    out:write(" ", m[1], " ", d["text/plain"], " ", d["image/png"] and d["image/png"]:sub(1, 11)
      .. " " .. meta.width .. "x" .. meta.height or "")
  end
  out:write("\n")
end
]=])
  local out, code = S.exe(QKV, TMP .. "/cells.lua")
  lu.assertEquals(code, 0, out)
  local l = {}
  for line in out:gmatch("[^\n]+") do l[#l + 1] = line end
  local size = l[2] and l[2]:match("^ok execute_result (%d+x%d+)")
  lu.assertNotNil(size, out)
  lu.assertEquals(l[1], "ok display_data <qkv.plot.line: " .. size .. " PNG> iVBORw0KGgo " .. size)
  lu.assertStrMatches(l[3], "ok display_data <qkv%.plot%.heatmap: %d+x%d+ PNG> iVBORw0KGgo %d+x%d+")
  lu.assertStrMatches(l[4], "ok execute_result %d+ ")       -- the text's length, no PNG
  lu.assertEquals(#l, 4, out)
end

function TestKernelLocal:testClearOutputOutsideTheKernel()
  local out, code = S.sh(QKV .. " -e 'print(1); qkv.clear_output(); qkv.clear_output(true); print(2)'")
  lu.assertEquals({out, code}, {"1\n2\n", 0})
  local ok, err = pcall(qkv.clear_output, "yes")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "clear_output: bad argument #1 (boolean expected, got string)")
end

function TestKernelLocal:testHmacAndBase64AgainstKnownAnswers()
  local zmq = require "qkv.zmq"
  -- RFC 4231, test case 2
  lu.assertEquals(zmq.hmac_sha256("Jefe", {"what do ya want ", "for nothing?"}),
    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
  lu.assertTrue(zmq.equal("abc", "abc"))
  lu.assertFalse(zmq.equal("abc", "abd"))
  lu.assertFalse(zmq.equal("abc", "ab"))
  lu.assertEquals(zmq.base64("hello!?"), "aGVsbG8hPw==")
  lu.assertEquals(zmq.base64(""), "")
  local ok, err = pcall(zmq.hmac_sha256, "k", {"a", 3})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "part 2 is not a string")
end

os.exit(lu.LuaUnit.run(), true)
