-- test_json.lua: qkv.json (bindings/json/ljson.c, libcjson), the JSON
-- reader behind qkv.bert's config files: every JSON type, numbers that stay
-- integers or not, nesting, and malformed text as errors that name it;
-- and the writer behind the Jupyter kernel's messages, checked by reading
-- its text back and against the exact text it must give.
local lu = require "luaunit"
local json = require "qkv.json"

TestJson = {}

function TestJson:testValues()
  local v = json.decode('{"a": 1, "b": [true, false, null, "x\\u00e9\\n"], "c": {"d": -2.5}}')
  lu.assertEquals(v.a, 1)
  lu.assertEquals(math.type(v.a), "integer")
  lu.assertEquals(v.b[1], true)
  lu.assertEquals(v.b[2], false)
  lu.assertEquals(v.b[3], json.null)
  lu.assertEquals(v.b[4], "x\u{e9}\n")
  lu.assertEquals(v.c.d, -2.5)
  lu.assertEquals(json.decode("[]"), {})
  lu.assertEquals(json.decode("  {}  \n"), {})
  lu.assertEquals(json.decode('"s"'), "s")
end

function TestJson:testNumbers()
  local v = json.decode("[1e-12, 30522, 1e300, -0.0, 9007199254740992, 9007199254740994, 2.0, " ..
                        "9007199254740991, 9007199254740993, -0]")
  lu.assertEquals(v[1], 1e-12)
  lu.assertEquals(math.type(v[2]), "integer")
  lu.assertEquals(v[3], 1e300)
  lu.assertEquals(math.type(v[8]), "integer")              -- below 2^53: exact
  lu.assertEquals(v[8], 9007199254740991)
  -- from 2^53 on the text went through a double that may hold another
  -- whole number (...993 reads as ...992): a float says so, not an integer
  for i = 5, 6 do lu.assertEquals(math.type(v[i]), "float") end
  lu.assertEquals(math.type(v[9]), "float")
  lu.assertEquals(v[7], 2)
  lu.assertEquals(math.type(v[7]), "integer")
  -- -0 keeps its sign
  for _, i in ipairs{4, 10} do
    lu.assertEquals(math.type(v[i]), "float")
    lu.assertEquals(1 / v[i], -math.huge)
  end
end

function TestJson:testNesting()
  local deep = string.rep("[", 900) .. string.rep("]", 900)
  local v = json.decode(deep)
  for _ = 1, 899 do v = v[1] end
  lu.assertEquals(v, {})
  -- past libcjson's nesting limit: an error, not a crash
  local ok, err = pcall(json.decode, string.rep("[", 5000) .. string.rep("]", 5000))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "json.decode: text is not valid JSON")
end

function TestJson:testErrors()
  local cases = {
    {"{", "not valid JSON (at byte 1 of 1)"},
    {'{"a": }', "not valid JSON"},
    {"[1, 2,]", "not valid JSON"},
    {"", "not valid JSON"},
    {"{} {}", "has bytes after its JSON value (at byte 4)"},
    {"nul", "not valid JSON"},
    {"[1]\0", "has bytes after its JSON value"},
  }
  for _, c in ipairs(cases) do
    local ok, err = pcall(json.decode, c[1], "x.json")
    lu.assertFalse(ok, c[1])
    lu.assertStrContains(err, "json.decode: x.json ")
    lu.assertStrContains(err, c[2])
  end
  local ok, err = pcall(json.decode, {})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "bad argument #1")
end

-- a NUL byte in a string, raw or written \u0000, is an error: libcjson's
-- C strings would end there ("a\u0000b" read as "a")
function TestJson:testNulBytesInStrings()
  local cases = {
    {'{"a\\u0000b": 1}', 'name "a\\u0000b" (at byte 2)'},
    {'{"s": "x\0y"}', 'string "x\\u0000y" (at byte 7)'},
    {'["ok", "\\u0000"]', 'string "\\u0000" (at byte 8)'},
    {'"' .. ("a"):rep(100) .. '\\u0000"', 'string "' .. ("a"):rep(60) .. '..." (at byte 1)'},
  }
  for _, c in ipairs(cases) do
    local ok, err = pcall(json.decode, c[1], "x.json")
    lu.assertFalse(ok, c[1])
    lu.assertStrContains(err, "json.decode: x.json has a NUL byte in the " .. c[2])
  end
  -- an escaped backslash before u0000 is no NUL
  lu.assertEquals(json.decode('["a\\\\u0000"]'), {"a\\u0000"})
end

-- the text is parsed by length, so bytes after a NUL are seen
function TestJson:testRepeatedKeysKeepTheLast()
  lu.assertEquals(json.decode('{"a": 1, "a": 2}').a, 2)
  local ok, err = pcall(json.decode, '{"a": {"b": 1, "b": 2}}', "h.json", true)
  lu.assertFalse(ok)
  lu.assertStrContains(err, 'h.json has the name "b" twice in one object')
end

TestJsonEncode = {}

function TestJsonEncode:testExactText()
  lu.assertEquals(json.encode({b = {1, 2.5, "x"}, a = true, c = {}, d = json.array{},
                               e = json.null, f = false}),
                  '{"a":true,"b":[1,2.5,"x"],"c":{},"d":[],"e":null,"f":false}')
  lu.assertEquals(json.encode("quote \" back \\ nl \n tab \t é \1"),
                  '"quote \\" back \\\\ nl \\n tab \\t é \\u0001"')
  lu.assertEquals(json.encode({0.1, 1 / 3, 1e300, -0.0, 3.0, 2 ^ 63, math.mininteger}),
                  "[0.1,0.3333333333333333,1e+300,-0.0,3.0,9.223372036854776e+18,-9223372036854775808]")
  lu.assertEquals(json.encode(nil), "null")
end

function TestJsonEncode:testRoundTrips()
  local v = {name = "héllo", list = {1, {2, {3}}, "four"}, nested = {deep = {deeper = {x = -1e-300}}}}
  lu.assertEquals(json.decode(json.encode(v)), v)
  -- invalid UTF-8 comes out as U+FFFD, so the text is always valid JSON
  lu.assertEquals(json.decode(json.encode("a\255b\0c")), "a\u{fffd}b\u{fffd}c")
end

function TestJsonEncode:testErrors()
  local function fails(v, want)
    local ok, err = pcall(json.encode, v)
    lu.assertFalse(ok)
    lu.assertStrContains(err, want)
  end
  local cyc = {}
  cyc.self = cyc
  fails(cyc, "nested deeper than 200")
  fails({0 / 0}, "is not a JSON number")
  fails({math.huge}, "is not a JSON number")
  fails({[1] = 1, x = 2}, "keys must be strings, got number")
  fails({[true] = 1}, "keys must be strings, got boolean")
  -- a key goes on as a C string: one cut at a NUL wrote {"a":null}
  fails({["a\0b"] = 1}, "an object's key holds a NUL byte")
  fails({f = print}, "cannot encode a function")
  fails(qkv.ones(1), "cannot encode a userdata")
end

os.exit(lu.LuaUnit.run(), true)
