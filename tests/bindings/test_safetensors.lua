-- test_safetensors.lua: qkv.load_safetensors and qkv.save_safetensors.
-- Reading is checked on a file the reference implementation wrote
-- (tests/fixtures/safetensors/make_st.py: PyPI's safetensors, every dtype,
-- exact values); writing by round trips, by the bytes of the header, and
-- by the reference reading qkv's files back (build/pyref, `make peers`;
-- skipped without it). Every malformed header is a Lua error naming the
-- file and the problem, and the fuzz corpus (tests/fuzz/corpus_safetensors/)
-- and mutations of it never do worse than that (under ASan in test-asan).
local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")
local H = dofile("tests/helpers/npy_helpers.lua")

local FIX = "tests/fixtures/safetensors/"
local CORPUS = "tests/fuzz/corpus_safetensors/"
local PY = "build/pyref/bin/python"
local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

-- what each of the format's dtypes loads as
local LOADS = {F64 = "float64", F32 = "float32", F16 = "float16", BF16 = "bfloat16",
               I64 = "int64", I32 = "int32", I16 = "int64", I8 = "int64", U64 = "int64",
               U32 = "int64", U16 = "int64", U8 = "int64", BOOL = "bool"}

local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, x in ipairs(v) do walk(x) end else out[#out + 1] = v end
  end
  walk(t:tolist())
  return out
end

local function shape(t)
  local s = {}
  for i = 1, t.ndim do s[i] = t.shape[i] end
  return s
end

-- a safetensors file from a header (a string of JSON) and data bytes
local function stfile(name, header, data)
  local path = TMP .. "/" .. name
  S.write(path, string.pack("<I8", #header) .. header .. (data or ""))
  return path
end

TestSafetensorsReference = {}

function TestSafetensorsReference:testEveryDtypeTheReferenceWrote()
  local ref = dofile(FIX .. "dtypes_ref.lua")
  local w, meta = qkv.load_safetensors(FIX .. "dtypes.safetensors")
  local n = 0
  for name, r in pairs(ref) do
    n = n + 1
    local t = w[name]
    lu.assertNotNil(t, name)
    lu.assertEquals(t.dtype, LOADS[r.dtype], name)
    lu.assertEquals(shape(t), r.shape, name)
    lu.assertEquals(flat(t), r.values, name)
  end
  for name in pairs(w) do lu.assertNotNil(ref[name], "unexpected " .. name) end
  lu.assertEquals(n, 16)
  lu.assertEquals(meta, {format = "np", ["made by"] = "make_st.py"})
  -- int64 past 2^53 and U64's top are exact
  lu.assertEquals(w.i64[4], 9007199254740993)
  lu.assertEquals(w.u64[2], math.maxinteger)
end

function TestSafetensorsReference:testTheRealModelsWeights()
  local path = (os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2")
               .. "/model.safetensors"
  if not io.open(path) then lu.skip("the real model is not there (`make model`)") end
  local w = qkv.load_safetensors(path)
  local n = 0
  for _ in pairs(w) do n = n + 1 end
  lu.assertEquals(n, 101 + 3)      -- 16 per layer x 6, 5 embeddings, pooler's 2, position ids
  lu.assertEquals(shape(w["embeddings.word_embeddings.weight"]), {30522, 384})
  -- LayerNorm gains of a trained model are near 1, not 0 or garbage
  local g = w["encoder.layer.5.output.LayerNorm.weight"]:double():mean():item()
  lu.assertTrue(g > 0.2 and g < 2, tostring(g))
end

TestSafetensorsRoundTrip = {}

local function all_dtypes()
  qkv.seed(3)
  return {
    f32 = qkv.randn(3, 5), f64 = qkv.randn(2, 2):double(), f16 = qkv.randn(7):to("float16"),
    bf16 = qkv.randn(2, 3):to("bfloat16"), i64 = qkv.tensor({-2 ^ 62 // 1, 5}, "int64"),
    i32 = qkv.tensor({-7, 8}, "int32"), b = qkv.tensor({true, false}, "bool"),
    scalar = qkv.tensor(4.25), empty = qkv.zeros(0, 4), ["héllo wörld"] = qkv.ones(1),
    strided = qkv.arange(0, 12):view(3, 4):t(), five = qkv.ones(1, 2, 1, 3, 1),
  }
end

function TestSafetensorsRoundTrip:testEveryQkvDtypeComesBackAsItWas()
  local w = all_dtypes()
  local path = TMP .. "/rt.safetensors"
  qkv.save_safetensors(path, w, {format = "pt", note = 'a "quoted" é\n'})
  local r, meta = qkv.load_safetensors(path)
  for name, t in pairs(w) do
    lu.assertEquals(r[name].dtype, t.dtype, name)
    lu.assertEquals(shape(r[name]), shape(t), name)
    lu.assertEquals(flat(r[name]), flat(t), name)
  end
  lu.assertEquals(meta, {format = "pt", note = 'a "quoted" é\n'})
  local _, none = qkv.load_safetensors((function()
    qkv.save_safetensors(TMP .. "/nometa.safetensors", {x = qkv.ones(2)})
    return TMP .. "/nometa.safetensors"
  end)())
  lu.assertEquals(none, {})
end

function TestSafetensorsRoundTrip:testTheFileIsDeterministicAndAligned()
  local a, b = TMP .. "/a.safetensors", TMP .. "/b.safetensors"
  qkv.save_safetensors(a, all_dtypes())
  qkv.save_safetensors(b, all_dtypes())
  local s = H.readfile(a)
  lu.assertEquals(s, H.readfile(b))
  local n = string.unpack("<I8", s)
  lu.assertEquals(n % 8, 0)
  local header = s:sub(9, 8 + n)
  lu.assertEquals(header:sub(1, 1), "{")
  -- widest first: every tensor's data starts at a multiple of its element size
  for dt, b0 in header:gmatch('"dtype":"(%w+)","shape":%b[],"data_offsets":%[(%d+),') do
    local size = ({F64 = 8, I64 = 8, F32 = 4, I32 = 4, F16 = 2, BF16 = 2, BOOL = 1})[dt]
    lu.assertEquals((8 + n + tonumber(b0)) % size, 0, dt)
  end
  lu.assertStrContains(header, '"strided":{"dtype":"F32","shape":[4,3]')
end

function TestSafetensorsRoundTrip:testEmptyTableAndOverwrite()
  local path = TMP .. "/e.safetensors"
  qkv.save_safetensors(path, {})
  local w = qkv.load_safetensors(path)
  lu.assertEquals(next(w), nil)
  qkv.save_safetensors(path, {x = qkv.full({2}, 3)})
  lu.assertEquals(flat(qkv.load_safetensors(path).x), {3, 3})
end

-- the reference reads what qkv wrote
function TestSafetensorsRoundTrip:testTheReferenceReadsQkvsFiles()
  local f = io.open(PY)
  if not f then lu.skip("no " .. PY .. " with safetensors (`make peers`)") end
  f:close()
  local path = TMP .. "/peer.safetensors"
  local w = all_dtypes()
  qkv.save_safetensors(path, w, {k = "v"})
  local out, code = S.sh(PY .. " -c " .. S.quote([==[
import sys, numpy as np
from safetensors import safe_open, deserialize
data = open(sys.argv[1], "rb").read()
print("meta", safe_open(sys.argv[1], "np").metadata())
np_of = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "BOOL": "?"}
for name, t in deserialize(data):
    raw = bytes(t["data"])
    if t["dtype"] == "BF16":
        v = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
    else:
        v = np.frombuffer(raw, np_of[t["dtype"]])
    vals = ",".join(repr(x.item()) for x in v.astype("f8" if v.dtype.kind == "f" else v.dtype))
    print(name, t["dtype"], list(t["shape"]), vals, sep="|")
]==]) .. " " .. S.quote(path) .. " 2>&1")
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "meta {'k': 'v'}")
  local seen = 0
  for name, dt, sh, vals in out:gmatch("([^\n|]+)|(%w+)|%[([^%]]*)%]|([^\n]*)") do
    seen = seen + 1
    local t = w[name]
    lu.assertNotNil(t, name)
    lu.assertEquals(LOADS[dt], t.dtype, name)
    lu.assertEquals("[" .. sh .. "]", "[" .. table.concat(shape(t), ", ") .. "]", name)
    local got = {}
    for v in vals:gmatch("[^,]+") do
      got[#got + 1] = v == "True" or (v ~= "False" and math.tointeger(tonumber(v))
                      or (v ~= "False" and tonumber(v)))
    end
    local want = flat(t)
    for i, x in ipairs(want) do
      if type(x) == "boolean" then want[i] = x else want[i] = x + 0 end
      if type(got[i]) == "number" and type(x) == "number" then got[i] = got[i] + 0 end
    end
    lu.assertEquals(got, want, name)
  end
  lu.assertEquals(seen, 12)
end

TestSafetensorsErrors = {}

local function loadfails(path, ...)
  local ok, err = pcall(qkv.load_safetensors, path)
  lu.assertFalse(ok, path)
  err = tostring(err)
  lu.assertStrContains(err, "load_safetensors: " .. path)
  for _, want in ipairs{...} do lu.assertStrContains(err, want) end
  return err
end

local function entry(dt, shape_, b, e)
  return ('{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'):format(dt, shape_, b, e)
end

function TestSafetensorsErrors:testFramingAndJson()
  loadfails(stfile("short", ""), "the header is not a JSON object")
  S.write(TMP .. "/tiny", "abc")
  loadfails(TMP .. "/tiny", "shorter than the 8")
  S.write(TMP .. "/long", string.pack("<I8", 1000) .. "{}")
  loadfails(TMP .. "/long", "runs past the end of the file")
  S.write(TMP .. "/huge", string.pack("<I8", -1) .. "{}")
  loadfails(TMP .. "/huge", "runs past the end of the file")
  loadfails(stfile("array", "[1, 2]"), "not a JSON object")
  loadfails(stfile("badjson", '{"a": {"dtype": "F32",'), "the header is not valid JSON")
  loadfails(stfile("trail", '{} x'), "bytes after its JSON value")
  loadfails(stfile("dup", '{"a":' .. entry("F32", "1", 0, 4) .. ',"a":' ..
                   entry("F32", "1", 4, 8) .. '}', ("\0"):rep(8)), 'the name "a" twice')
  loadfails(stfile("notobj", '{"a": 3}'), "tensor 'a' is not a JSON object")
  loadfails(stfile("meta", '{"__metadata__": {"k": 1}}'), "__metadata__ maps names to strings")
  loadfails(stfile("meta2", '{"__metadata__": [1]}'), "__metadata__")
  local ok, err = pcall(qkv.load_safetensors, TMP .. "/missing")
  lu.assertFalse(ok); lu.assertStrContains(err, "No such file")
  ok, err = pcall(qkv.load_safetensors, TMP)
  lu.assertFalse(ok); lu.assertStrContains(err, "Is a directory")
  ok, err = pcall(qkv.load_safetensors, 42)
  lu.assertFalse(ok); lu.assertStrContains(err, "load_safetensors")
end

function TestSafetensorsErrors:testEntries()
  local d8 = ("\0"):rep(8)
  loadfails(stfile("dt", '{"a":' .. entry("F17", "2", 0, 8) .. '}', d8), "unknown dtype 'F17'")
  loadfails(stfile("f8", '{"a":' .. entry("F8_E4M3", "8", 0, 8) .. '}', d8),
            "is F8_E4M3, which qkv cannot read")
  loadfails(stfile("nodt", '{"a":{"shape":[2],"data_offsets":[0,8]}}', d8), "has no dtype")
  loadfails(stfile("neg", '{"a":' .. entry("F32", "-2", 0, 8) .. '}', d8),
            "shape must be a list of at most 8 integers >= 0")
  loadfails(stfile("frac", '{"a":' .. entry("F32", "2.5", 0, 8) .. '}', d8), "shape must be")
  -- strings that convert, and sizes from 2^53 on (read through a double:
  -- 9007199254740993 came back as ...992), are no JSON integers here
  loadfails(stfile("str", '{"a":' .. entry("F32", '"2"', 0, 8) .. '}', d8), "shape must be")
  loadfails(stfile("big", '{"a":' .. entry("F32", "9007199254740993,0", 0, 0) .. '}', d8),
            "shape must be")
  loadfails(stfile("soff", '{"a":{"dtype":"F32","shape":[2],"data_offsets":["0","8"]}}', d8),
            "data_offsets must be two integers")
  loadfails(stfile("dims", '{"a":' .. entry("F32", "1,1,1,1,1,1,1,1,2", 0, 8) .. '}', d8),
            "at most 8")
  loadfails(stfile("offs", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}', d8),
            "data_offsets must be two integers")
  loadfails(stfile("bytes", '{"a":' .. entry("F32", "3", 0, 8) .. '}', d8),
            "shape [3] of F32 is 12 bytes, but its data_offsets [0, 8] hold 8")
  loadfails(stfile("past", '{"a":' .. entry("F32", "4", 0, 16) .. '}', d8),
            "run past the 8 bytes of data")
  loadfails(stfile("back", '{"a":' .. entry("F32", "0", 8, 4) .. '}', d8), "end before they begin")
  loadfails(stfile("over", '{"a":' .. entry("F32", "2", 0, 8) .. ',"b":' ..
                   entry("F32", "1", 4, 8) .. '}', d8), "overlap")
  loadfails(stfile("gap", '{"a":' .. entry("F32", "1", 0, 4) .. '}', d8),
            "bytes 4 to 8 of the data belong to no tensor")
  loadfails(stfile("hole", '{"a":' .. entry("F32", "1", 4, 8) .. '}', d8),
            "bytes 0 to 4 of the data belong to no tensor (before 'a')")
  loadfails(stfile("big", '{"a":' .. entry("F64", "4294967296,4294967296", 0, 8) .. '}', d8),
            "is too large")
  loadfails(stfile("bool", '{"a":' .. entry("BOOL", "2", 0, 2) .. '}', "\1\2"),
            "element 1 is the byte 2, not a BOOL")
  loadfails(stfile("u64", '{"a":' .. entry("U64", "1", 0, 8) .. '}', ("\255"):rep(8)),
            "past int64's range")
end

-- a NUL byte in a name or a string, raw or written \u0000, is an error
-- naming the tensor as the header writes it (a C string would end at the
-- NUL: "a\u0000b" loaded as a)
function TestSafetensorsErrors:testNulBytes()
  local d8, a = ("\0"):rep(8), entry("F32", "2", 0, 8)
  loadfails(stfile("nul1", '{"a\\u0000b":' .. a .. '}', d8),
            "tensor 'a\\u0000b': its name holds a NUL byte")
  loadfails(stfile("nul2", '{"x":' .. a .. ',"a\0b":' .. a .. '}', d8 .. d8),
            "tensor 'a\\u0000b': its name holds a NUL byte")
  loadfails(stfile("nul3", '{"a":' .. entry("F32\\u0000x", "2", 0, 8) .. '}', d8),
            "tensor 'a': the string \"F32\\u0000x\" holds a NUL byte")
  loadfails(stfile("nul4", '{"__metadata__":{"k\\u0000":"v"},"a":' .. a .. '}', d8),
            "__metadata__: the string \"k\\u0000\" holds a NUL byte")
  loadfails(stfile("nul5", '{"__metadata__":{"k":"v\\u0000w"},"a":' .. a .. '}', d8),
            "__metadata__: the string \"v\\u0000w\" holds a NUL byte")
  loadfails(stfile("nul6", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x\\u0000":1}}',
                   d8),
            "tensor 'a': the string \"x\\u0000\" holds a NUL byte")
  -- a backslash written \\ before u0000 is no NUL
  local w = qkv.load_safetensors(stfile("nonul", '{"a\\\\u0000b":' .. a .. '}', d8))
  lu.assertEquals(shape(w["a\\u0000b"]), {2})
end

-- what no safetensors header holds is refused by one pass over the text
-- before the JSON parser builds anything from it (a flat list of 50M
-- numbers took 4.8 GB and 10 s to be refused): lists of more than 8
-- values, nesting below a tensor's lists, more than 8 keys in a tensor,
-- metadata that is not strings
function TestSafetensorsErrors:testHeaderBounds()
  local list, d8 = "[" .. ("1,"):rep(1 << 21) .. "1]", ("\0"):rep(8)      -- 4 MB
  loadfails(stfile("flat1", '{"a":{"dtype":"F32","shape":' .. list .. ',"data_offsets":[0,4]}}',
                   "\0\0\0\0"), "tensor 'a': 'shape' holds more than 8 values")
  loadfails(stfile("flat2", '{"a":' .. list .. '}'), "tensor 'a' is a list, not a JSON object")
  loadfails(stfile("flat3", '{"__metadata__":' .. list .. '}'),
            "__metadata__ is a list, not a JSON object")
  loadfails(stfile("flat4", '{"__metadata__":{"k":' .. list .. '}}'),
            "__metadata__ maps names to strings, but 'k' is a list")
  loadfails(stfile("deep", '{"a":{"shape":' .. ("["):rep(1 << 20) .. '}}'),
            "tensor 'a': 'shape' holds a list; a shape is a list of numbers")
  loadfails(stfile("obj", '{"a":{"x":{"y":1}}}'), "tensor 'a': 'x' is a JSON object")
  loadfails(stfile("objs", '{"__metadata__":{"k":{}}}'),
            "__metadata__ maps names to strings, but 'k' is a JSON object")
  local keys = {}
  for i = 1, 9 do keys[i] = ('"k%d":%d'):format(i, i) end
  loadfails(stfile("keys", '{"a":{' .. table.concat(keys, ",") .. '}}'),
            "tensor 'a': more than 8 keys")
  -- what the format holds still loads: 8 dims, a few keys that readers
  -- ignore, metadata of many strings (here named with an escape)
  local meta = {}
  for i = 1, 100 do meta[i] = ('"k%d":"v"'):format(i) end
  local w, m = qkv.load_safetensors(stfile("ok", '{"__metad\\u0061ta__":{'
    .. table.concat(meta, ",") .. '},"a\\tb":{"dtype":"F32","shape":[1,1,1,1,1,1,1,2],'
    .. '"data_offsets":[0,8],"x":[1,2],"y":"z","k6":1,"k7":2,"k8":3}}', d8))
  lu.assertEquals(m.k100, "v")
  lu.assertEquals(shape(w["a\tb"]), {1, 1, 1, 1, 1, 1, 1, 2})
end

function TestSafetensorsErrors:testSaveArguments()
  local function fails(want, ...)
    local ok, err = pcall(qkv.save_safetensors, ...)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), want)
  end
  local p = TMP .. "/s.safetensors"
  fails("bad argument #2", p, 42)
  fails("bad argument #1", nil, {})
  fails("the path holds a NUL byte", "a\0b", {})
  fails("tensor names must be strings, got number 1", p, {qkv.ones(1)})
  fails("'x' is a string, not a tensor", p, {x = "hello"})
  fails("'__metadata__' is the format's own name", p, {__metadata__ = qkv.ones(1)})
  fails("a tensor name is not valid UTF-8 (at byte 2)", p, {["a\255"] = qkv.ones(1)})
  fails("a tensor name holds a NUL byte", p, {["a\0b"] = qkv.ones(1)})
  fails("metadata maps strings to strings, got string = number", p, {}, {k = 1})
  fails("a metadata value is not valid UTF-8", p, {}, {k = "\192\128"})
  fails("bad argument #3", p, {}, 7)
  fails("Is a directory", TMP, {x = qkv.ones(1)})
  local closed
  do local x <close> = qkv.ones(2); closed = x end
  fails("save_safetensors: 'x' is a closed tensor", p, {x = closed})   -- not "bad argument #7"
  lu.assertNil(io.open(p), "nothing was written")
end

-- the corpus: each file loads or is an error that names the function
local function corpus()
  local list = {}
  for name in S.sh("ls " .. S.quote(CORPUS)):gmatch("[^\n]+") do list[#list + 1] = CORPUS .. name end
  return list
end

local function survives(path)
  local ok, err = pcall(qkv.load_safetensors, path)
  if not ok then lu.assertStrContains(tostring(err), "load_safetensors: ", path) end
  return ok
end

TestSafetensorsFuzz = {}

function TestSafetensorsFuzz:testTheCorpus()
  local files, good = corpus(), 0
  lu.assertTrue(#files >= 20, #files .. " files")
  for _, f in ipairs(files) do if survives(f) then good = good + 1 end end
  lu.assertTrue(good >= 3 and good < #files, good .. " of " .. #files .. " loaded")
end

-- random damage to the corpus's files: bytes flipped, cut or grown, the
-- length rewritten, the header's digits changed
function TestSafetensorsFuzz:testMutations()
  local files = corpus()
  local rounds = tonumber(os.getenv("QKV_FUZZ_ROUNDS")) or 400
  local rng = 18
  local function rand(n)              -- a small LCG: the same damage every run
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % n + 1
  end
  local path = TMP .. "/mut.safetensors"
  for _ = 1, rounds do
    local s = H.readfile(files[rand(#files)])
    local kind = rand(5)
    if kind == 1 and #s > 0 then
      local i = rand(#s)
      s = s:sub(1, i - 1) .. string.char(rand(256) - 1) .. s:sub(i + 1)
    elseif kind == 2 then s = s:sub(1, rand(#s + 1) - 1)
    elseif kind == 3 then s = s .. ("\0"):rep(rand(16))
    elseif kind == 4 and #s >= 8 then s = string.pack("<I8", rand(#s + 64) - 1) .. s:sub(9)
    else s = s:gsub("%d", function(d) return rand(4) == 1 and tostring(rand(10) - 1) or d end) end
    S.write(path, s)
    survives(path)
  end
end

os.exit(lu.LuaUnit.run(), true)
