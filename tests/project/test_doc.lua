-- test_doc.lua: the docstring registry (stdlib/qkv/doc/)
-- against the live objects, help()'s output, the examples in the entries,
-- docs/api.md's reference against the registry (tests/tools/gen_api.lua), and
-- the calls README.md and docs/*.md write (tests/helpers/documents.lua lists them).
local lu = require "luaunit"
-- the examples print CPU tensors, also under --device cuda
qkv.set_default_device("cpu")
local doc = require "qkv.doc"

local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "tests/project/test_doc.lua"
local dir = here:match("^(.*)/[^/]*$") or "."
local gen = dofile(dir .. "/../tools/gen_api.lua")
local documents = dofile(dir .. "/../helpers/documents.lua")

local WRITE = "build/qkv tests/tools/gen_api.lua --write"

local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

local function starts(s, prefix) return s:sub(1, #prefix) == prefix end

-- how a name's signature must begin: x:matmul( for Tensor:matmul
local function call_prefix(name)
  local ns, method = name:match("^(%a+):([%w_]+)$")
  if ns == "Tensor" then return "x:" .. method .. "(" end
  if ns == "Module" then return "m:" .. method .. "(" end
  if ns == "Optimizer" then return "opt:" .. method .. "(" end
  if ns == "LRScheduler" then return "sched:" .. method .. "(" end
  if ns == "BertModel" then return "model:" .. method .. "(" end
  if ns == "Tokenizer" then return "tok:" .. method .. "(" end
  if ns == "Event" then return "event:" .. method .. "(" end
  if ns == "BlockMask" then return "bm:" .. method .. "(" end
  if ns == "GradScaler" then return "scaler:" .. method .. "(" end
  return name .. "("
end

-- the namespaces whose module is written by others and may not load yet
local function loads(modname) return (pcall(require, modname)) end

TestRegistry = {}

function TestRegistry:testPublicIsFoundOnTheLiveObjects()
  local pub = set_of(doc.public())
  for _, name in ipairs{"qkv.softmax", "qkv.tensor", "qkv.cosine_similarity",
      "qkv.help", "Tensor:matmul", "Tensor:view", "qkv.nn.Linear",
      "qkv.nn.cosine_similarity", "Module:parameters", "Module:forward",
      "qkv.plot.heatmap", "qkv.nn.Module", "qkv.nn.Parameter"} do
    lu.assertTrue(pub[name], name .. " should be public")
  end
  for _, name in ipairs{"qkv._isatty", "qkv.float32", "qkv.Tensor", "qkv.nn",
      "Module:repr", "Module:init", "Module:param"} do
    lu.assertNil(pub[name], name .. " should not be public")
  end
  lu.assertTrue(#doc.public() > 120)
end

function TestRegistry:testEveryPublicFunctionHasAnEntry()
  local entries, bad = doc.entries(), {}
  for _, name in ipairs(doc.public()) do
    local e = entries[name]
    if not e then bad[#bad + 1] = name .. " (no entry)"
    elseif type(e.sig) ~= "string" or not starts(e.sig, call_prefix(name)) then
      bad[#bad + 1] = name .. " (sig " .. tostring(e.sig) .. ")"
    elseif type(e.doc) ~= "string" or not e.doc:find("%S") then
      bad[#bad + 1] = name .. " (empty doc)"
    end
  end
  lu.assertEquals(bad, {}, "undocumented public functions: " .. table.concat(bad, ", "))
end

function TestRegistry:testEveryEntryNamesSomethingThatExists()
  local pub, stale = set_of(doc.public()), {}
  local skip = {["qkv.test"] = not loads("qkv.test"), ["qkv.repl"] = not loads("qkv.repl")}
  for name, e in pairs(doc.entries()) do
    if not pub[name] and not skip[e.namespace] then stale[#stale + 1] = name end
  end
  table.sort(stale)
  lu.assertEquals(stale, {}, "entries for functions that do not exist: " ..
                  table.concat(stale, ", "))
end

function TestRegistry:testEntriesAreWellFormed()
  local entries, bad = doc.entries(), {}
  for name, e in pairs(entries) do
    if not starts(e.sig, call_prefix(name)) then bad[#bad + 1] = name .. ": sig" end
    -- one paragraph of 3 to 6 sentences (a full stop after a word ends one)
    local _, n = (e.doc .. " "):gsub("[^%s%.]%.%s", "")
    if n < 3 or n > 6 then bad[#bad + 1] = name .. ": " .. n .. " sentences" end
    for _, s in ipairs(e.see or {}) do
      if not entries[s] then bad[#bad + 1] = name .. ": see " .. s end
    end
    if e.also and not entries[doc.name_of_sig(e.also)] then
      bad[#bad + 1] = name .. ": also " .. e.also
    end
  end
  table.sort(bad)
  lu.assertEquals(bad, {})
end

function TestRegistry:testNamespacesHoldEveryEntryOnce()
  local count, seen = 0, {}
  for _, ns in ipairs(doc.namespaces()) do
    for _, g in ipairs(ns.groups) do
      for _, e in ipairs(g.entries) do
        lu.assertEquals(e.namespace, ns.id)
        lu.assertNil(seen[e.name], e.name)
        seen[e.name], count = true, count + 1
      end
    end
  end
  local total = 0
  for _ in pairs(doc.entries()) do total = total + 1 end
  lu.assertEquals(count, total)
end

-- every example in an entry runs, and prints what its --> lines say
-- (runs of spaces and tabs compare equal)
TestExamples = {}

local function squash(s) return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")) end

local function run_example(code)
  local printed = {}
  local env = setmetatable({print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    for line in (table.concat(t, "\t", 1, t.n) .. "\n"):gmatch("([^\n]*)\n") do
      printed[#printed + 1] = squash(line)
    end
  end}, {__index = _G})
  assert(load(code, "=example", "t", env))()
  while printed[#printed] == "" do printed[#printed] = nil end
  return printed
end

function TestExamples:testExamplesPrintWhatTheySay()
  local n = 0
  for name, e in pairs(doc.entries()) do
    if e.example then
      local want = {}
      for line in e.example:gmatch("[^\n]+") do
        local out = line:match("%-%->%s?(.*)$")
        if out then want[#want + 1] = squash(out) end
      end
      local ok, got = pcall(run_example, e.example)
      lu.assertTrue(ok, name .. ": " .. tostring(got))
      lu.assertEquals(got, want, name .. "'s example")
      n = n + 1
    end
  end
  lu.assertTrue(n >= 20)
end

-- docs/api.md's reference is what gen_api.lua makes from the registry
TestReadme = {}

function TestReadme:testApiBlockIsCurrent()
  local text, first, last = gen.current()
  lu.assertNotNil(first, gen.NAME .. " lacks the " .. gen.BEGIN .. " / " .. gen.END ..
                  " markers of the API reference")
  lu.assertTrue(text:sub(first, last) == gen.block(),
                gen.NAME .. "'s API reference is out of date with the registry; run: " .. WRITE)
end

function TestReadme:testApiBlockListsEverySignature()
  local block = gen.block()
  for name, e in pairs(doc.entries()) do
    lu.assertStrContains(block, "- `" .. e.sig .. "` — ", false, name)
  end
end

-- calls written anywhere in the documents (code and prose) are documented
local function is_lua_method(m)
  return string[m] ~= nil or getmetatable(io.stdout).__index[m] ~= nil
end

local function unknown_calls(text, entries)
  local unknown = {}
  -- require "qkv.autograd" names a module, not a function: one that loads
  -- is no call (one that does not stays in the text and is reported)
  text = text:gsub("require%s*%(?%s*\"(qkv%.[%w_.]+)\"", function(mod)
    if pcall(require, mod) then return "require" end
  end)
  -- a method defined (function Block:init(...)) is no call of one
  text = text:gsub("function%s+[%a_][%w_.]*:[%a_][%w_]*%s*%(", "function (")
  for name in text:gmatch("%f[%w_](qkv%.[%w_.]*[%w_])%s*[%({\"]") do
    if not entries[name] then unknown[name] = true end
  end
  for method in text:gmatch("%f[%w_][%a_][%w_]*:([%a_][%w_]*)%s*[%({\"]") do
    if not entries["Tensor:" .. method] and not entries["Module:" .. method]
        and not entries["Optimizer:" .. method] and not entries["BertModel:" .. method]
        and not entries["LRScheduler:" .. method]
        and not entries["Tokenizer:" .. method]
        and not entries["Event:" .. method]
        and not entries["BlockMask:" .. method]
        and not entries["GradScaler:" .. method]
        and not is_lua_method(method) then
      unknown["x:" .. method] = true
    end
  end
  local list = {}
  for k in pairs(unknown) do list[#list + 1] = k end
  table.sort(list)
  return list
end

function TestReadme:testCallsInTheDocumentsAreDocumented()
  local docs = documents.all(dir .. "/../../")
  lu.assertTrue(#docs >= 10, #docs .. " documents")
  for _, d in ipairs(docs) do
    local list = unknown_calls(d.text, doc.entries())
    lu.assertEquals(list, {}, d.path .. " calls functions that have no entry: " ..
                    table.concat(list, ", "))
  end
end

function TestReadme:testTheCallCheckCatchesUnknownCalls()
  local list = unknown_calls("see qkv.softmx(x) and `x:resahpe(2, 3)`, " ..
    "qkv.nn.Lineer{}, x:sum(2), s:gsub('a', 'b'), require(\"qkv.autograd\").queue_callback(f), " ..
    "require \"qkv.autograf\"", doc.entries())
  lu.assertEquals(list, {"qkv.autograf", "qkv.nn.Lineer", "qkv.softmx", "x:resahpe"})
end

-- help's text
TestHelp = {}

function TestHelp:testFunctionByValue()
  local text = doc.text(qkv.softmax)
  lu.assertTrue(starts(text, "qkv.softmax(x [, dim])\n\n  Softmax along dim"), text)
  lu.assertStrContains(text, "Also: x:softmax([dim])")
  lu.assertStrContains(text, "Example:\n  print(qkv.softmax(qkv.tensor{1, 2, 3}))")
  for line in text:gmatch("[^\n]+") do
    lu.assertTrue(utf8.len(line) <= 76 or line:find("^  %-%->") or line:find("^  print"),
                  "too long: " .. line)
  end
end

function TestHelp:testNamesAsStrings()
  local want = doc.text(qkv.softmax)
  lu.assertEquals(doc.text("qkv.softmax"), want)
  lu.assertEquals(doc.text("softmax"), want)
  lu.assertEquals(doc.text(" ?qkv.softmax "), want)
  lu.assertTrue(starts(doc.text("x:softmax"), "x:softmax([dim])\n"))
end

function TestHelp:testMethods()
  local want = doc.text("x:matmul")
  lu.assertTrue(starts(want, "x:matmul(y)\n\n  The matrix product"), want)
  lu.assertEquals(doc.text("Tensor:matmul"), want)
  lu.assertEquals(doc.text("qkv.Tensor.matmul"), want)
  lu.assertTrue(starts(doc.text("view"), "x:view("))         -- no qkv.view
  lu.assertTrue(starts(doc.text("m:parameters"), "m:parameters()"))
  lu.assertTrue(starts(doc.text("nparams"), "m:nparams()"))
  -- one function under two names: by value it is the qkv one
  local x = qkv.ones(2, 2)
  lu.assertTrue(starts(doc.text(x.matmul), "qkv.matmul(x, y)\n"))
end

function TestHelp:testNnAndLibraries()
  lu.assertTrue(starts(doc.text(qkv.nn.Linear), "qkv.nn.Linear(d_in, d_out [, opts])\n"))
  lu.assertTrue(starts(doc.text("nn.Linear"), "qkv.nn.Linear("))
  lu.assertTrue(starts(doc.text(qkv.nn.Linear(2, 3)), "qkv.nn.Linear("))
  lu.assertTrue(starts(doc.text(qkv.nn.Linear.forward), "m:forward(...)"))
  lu.assertTrue(starts(doc.text(qkv.plot.heatmap), "qkv.plot.heatmap(w [, opts])"))
  lu.assertTrue(starts(doc.text("heatmap"), "qkv.plot.heatmap("))
  lu.assertTrue(starts(doc.text(qkv.help), "qkv.help([x])"))
end

function TestHelp:testNamespaceListsItsFunctions()
  local text = doc.text(qkv.nn)
  lu.assertTrue(starts(text, "qkv.nn\n"), text)
  lu.assertStrContains(text, "  qkv.nn.Linear(d_in, d_out [, opts])\n      A fully connected layer")
  for _, ns in ipairs(doc.namespaces()) do
    if ns.id == "qkv.nn" then
      for _, g in ipairs(ns.groups) do
        for _, e in ipairs(g.entries) do lu.assertStrContains(text, "  " .. e.sig .. "\n") end
      end
    end
  end
  lu.assertEquals(doc.text("qkv.plot"), doc.text(qkv.plot))
  lu.assertStrContains(doc.text(qkv.plot), "  qkv.plot.heatmap(w [, opts])\n")
  lu.assertStrContains(doc.text(qkv), "  qkv.attention(Q, K, V [, opts])\n")
  lu.assertStrContains(doc.text("Module"), "  m:load(src)\n")
  lu.assertEquals(doc.text("qkv.variants"), doc.text(qkv.variants))
  lu.assertStrContains(doc.text(qkv.variants), "  qkv.variants.sliding_window(w [, opts])\n")
  lu.assertStrContains(doc.text("BlockMask"), "  bm:density()\n")
end

function TestHelp:testVariants()
  lu.assertTrue(starts(doc.text(qkv.block_mask), "qkv.block_mask(mask_mod, B, H, n_q, n_k [, opts])\n"))
  lu.assertTrue(starts(doc.text(qkv.variants.alibi), "qkv.variants.alibi(H)\n"))
  lu.assertTrue(starts(doc.text("sliding_window"), "qkv.variants.sliding_window("))
  lu.assertTrue(starts(doc.text("bm:density"), "bm:density()\n"))
  lu.assertTrue(starts(doc.text("BlockMask.to_dense"), "bm:to_dense()\n"))
  -- the entry qkv.attention hands its mods to is not a function of its own
  lu.assertNil(set_of(doc.public())["qkv.variants.attention"])
end

function TestHelp:testTensorGivesTheTensorHelp()
  local text = doc.text(qkv.ones(2, 3))
  lu.assertTrue(starts(text, "Tensor methods\n"), text)
  for _, s in ipairs{"x.shape", "x.dtype", "  x:matmul(y)\n", "  x:view(d1, d2, ...)\n",
                     "  x:sum([dim [, keepdim]])\n"} do
    lu.assertStrContains(text, s)
  end
  lu.assertEquals(doc.text("Tensor"), text)
  lu.assertEquals(doc.text(qkv.Tensor), text)
end

function TestHelp:testUnknown()
  local text, msg = doc.text("no_such_function")
  lu.assertNil(text)
  lu.assertEquals(msg, "no documentation for no_such_function")
  lu.assertEquals(select(2, doc.text("x:no_such_method")), "no documentation for x:no_such_method")
  lu.assertEquals(select(2, doc.text(42)), "no documentation for 42")
  lu.assertEquals(select(2, doc.text(nil)), "no documentation for nil")
  lu.assertStrContains(select(2, doc.text(print)), "no documentation for ")
end

function TestHelp:testGeneralHelp()
  local text = doc.text()
  lu.assertStrContains(text, qkv._VERSION)
  for _, s in ipairs{"?name", "help(name)", "Ctrl-C", "Ctrl-D", "Tab", "_ holds",
                     "qkv.repl.timing(false)", "qkv.nn", "qkv.plot", "\"float64\"", "\"bool\""} do
    lu.assertStrContains(text, s)
  end
end

function TestHelp:testHelpPrints()
  local out, write = {}, io.write
  io.write = function(...) for _, s in ipairs{...} do out[#out + 1] = s end end
  local ok, err = pcall(function()
    lu.assertNil(qkv.help("softmax"))
    qkv.help("no_such_function")
  end)
  io.write = write
  lu.assertTrue(ok, err)
  local text = table.concat(out)
  lu.assertEquals(text, doc.text(qkv.softmax) .. "no documentation for no_such_function\n")
end

function TestHelp:testWrapAndFirstSentence()
  lu.assertEquals(doc.wrap("aaa bbb ccc", 8, "  "), "  aaa\n  bbb\n  ccc")
  lu.assertEquals(doc.wrap("aa bb cc", 8, "  "), "  aa bb\n  cc")
  lu.assertEquals(doc.first_sentence("Uniform in [0, 1), 0.5 apart. Then more."),
                  "Uniform in [0, 1), 0.5 apart.")
  lu.assertEquals(doc.first_sentence("a, b, ... up to c. Then"), "a, b, ... up to c.")
end

os.exit(lu.LuaUnit.run(), true)
