-- test_npy.lua: qkv.save / qkv.load and NumPy's .npy format: bit-exact
-- round trips, the files NumPy writes (tests/fixtures/npy/, made by
-- make_fixtures.py) against values computed here, files qkv writes read
-- by NumPy, and hand-made bad headers, each an error naming the file.
-- .npz archives and atomic writes are in test_npz.lua.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local H = dofile("tests/helpers/npy_helpers.lua")
local FIX, readfile, writefile = H.FIX, H.readfile, H.writefile

local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

local count = 0
local function tmp(name)
  count = count + 1
  return string.format("%s/%d_%s", TMP, count, name or "x.npy")
end

-- a .npy file by hand: the dict as given (no padding), then the data
local function npy(dict, data, major)
  major = major or 1
  local body = dict .. "\n"
  local len = major == 1 and string.pack("<I2", #body) or string.pack("<I4", #body)
  return "\x93NUMPY" .. string.char(major, 0) .. len .. body .. (data or "")
end

local function dict(descr, shape, fortran)
  return string.format("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                       fortran and "True" or "False", shape)
end

-- the bytes of values packed one by one (fmt "<f", "<d", "<i8", "B")
-- the float16 bits of v, a value float16 holds exactly
local function f16bits(v)
  local sign = (v < 0 or 1 / v < 0) and 0x8000 or 0
  v = math.abs(v)
  if v == math.huge then return sign | 0x7c00 end
  if v < 2^-14 then return sign | math.tointeger(v / 2^-24) end   -- 0 and subnormals
  local m, e = math.frexp(v)                                      -- v = 2m * 2^(e - 1)
  return sign | ((e + 14) << 10) | math.tointeger((2 * m - 1) * 1024)
end

local function pack(fmt, values)
  local out = {}
  for i, v in ipairs(values) do
    if fmt == "B" then v = v and 1 or 0 end
    out[i] = fmt == "<e" and string.pack("<I2", f16bits(v)) or string.pack(fmt, v)
  end
  return table.concat(out)
end

-- the data part of a file: everything after the header's '\n'
local function data_of(bytes)
  local hlen = bytes:byte(7) == 1 and 10 + string.unpack("<I2", bytes, 9)
                                  or 12 + string.unpack("<I4", bytes, 9)
  return bytes:sub(hlen + 1)
end

local function flat(x)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, w in ipairs(v) do walk(w) end
    else out[#out + 1] = v end
  end
  walk(x:tolist())
  return out
end

-- loading these bytes from a file, and from memory, both fail naming what
local function bad(bytes, ...)
  local path = tmp("bad.npy")
  writefile(path, bytes)
  local msg = fails({"load: " .. path .. ": ", ...}, qkv.load, path)
  fails({"what: ", ...}, qkv._npy_decode, bytes, "what")
  return msg
end

local function loads(bytes)
  local path = tmp("ok.npy")
  writefile(path, bytes)
  local x = qkv.load(path)
  qkv.test.assertTensorEqual(qkv._npy_decode(bytes), x)
  return x
end

---------------------------------------------------------------- round trips
TestRoundTrip = {}

local SPECIAL32 = {0, -0.0, 1.5, -2.75, 2^-149, -2^-126, 3.4028234663852886e38,
                   math.huge, -math.huge}
local SPECIAL64 = {0, -0.0, 0.1, -1 / 3, 2^-1074, 2^-1022, 1.7976931348623157e308,
                   math.huge, -math.huge}

function TestRoundTrip:testEveryDtypeIsBitExact()
  local cases = {
    {"float32", "<f", SPECIAL32}, {"float64", "<d", SPECIAL64},
    {"int64", "<i8", {math.mininteger, -1, 0, 1, math.maxinteger, 2^53 + 1}},
    {"bool", "B", {true, false, false, true}},
    {"int32", "<i4", {-2147483648, -1, 0, 1, 2147483647}},
    {"float16", "<e", {0, -0.0, 1.5, -2.75, 65504, 2^-24, 2^-14, math.huge, -math.huge}},
  }
  for _, c in ipairs(cases) do
    local dtype, fmt, values = c[1], c[2], c[3]
    if dtype == "int64" then values[6] = (1 << 53) + 1 end
    local x = qkv.tensor(values, dtype)
    local path = tmp(dtype .. ".npy")
    qkv.save(path, x)
    lu.assertEquals(data_of(readfile(path)), pack(fmt, values), dtype)
    local y = qkv.load(path)
    lu.assertEquals(y.dtype, dtype)
    lu.assertEquals(y.shape, {#values})
    lu.assertEquals(pack(fmt, y:tolist()), pack(fmt, values), dtype)
  end
end

-- bfloat16 is written as NumPy writes ml_dtypes' bfloat16, a 2-byte void
-- ('|V2'), and a '<V2' or '|V2' file loads as bfloat16, bit for bit
function TestRoundTrip:testBfloat16()
  local values = {0, -0.0, 1.5, -2.75, 3.3895313892515355e38, 2^-133, math.huge, -math.huge}
  local x = qkv.tensor(values, "bfloat16")
  local path = tmp("bf16.npy")
  qkv.save(path, x)
  local bytes = readfile(path)
  lu.assertStrContains(bytes, "'descr': '|V2'")
  local bits = {}
  for i, v in ipairs(values) do bits[i] = string.unpack("<I4", string.pack("<f", v)) >> 16 end
  lu.assertEquals(data_of(bytes), pack("<I2", bits))
  local y = qkv.load(path)
  lu.assertEquals(y.dtype, "bfloat16")
  lu.assertEquals(y:tolist(), values)
  lu.assertEquals(loads(npy(dict("<V2", "(2,)"), "\x80\x3f\x00\xc0")):tolist(), {1, -2})
end

-- NaNs (quiet and signalling, either sign, with payloads) keep their bits
function TestRoundTrip:testNanPayloadsAreKept()
  local bits32 = pack("<I4", {0x7fc00000, 0xffc00001, 0x7f800001, 0x7fbfffff, 0x7fc12345})
  local bits64 = pack("<I8", {0x7ff8000000000000, 0x7ff0000000000001,
                              -0x0007000000000001, 0x7ff800000000abcd})
  for _, c in ipairs{{"<f4", bits32, 5}, {"<f8", bits64, 4}} do
    local x = loads(npy(dict(c[1], "(" .. c[3] .. ",)"), c[2]))
    for _, v in ipairs(x:tolist()) do lu.assertTrue(v ~= v, "a NaN") end
    local path = tmp()
    qkv.save(path, x)
    lu.assertEquals(data_of(readfile(path)), c[2], c[1])
    lu.assertEquals(data_of(qkv._npy_encode(x)), c[2], c[1])
  end
end

function TestRoundTrip:testShapes()
  for _, shape in ipairs{{}, {0, 3}, {3, 0, 2}, {5}, {1, 2, 1, 2, 1, 2, 1, 2}, {0}} do
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    local x = qkv.arange(n, "float64"):reshape(shape)
    local path = tmp()
    qkv.save(path, x)
    local y = qkv.load(path)
    lu.assertEquals(y.shape, shape)
    lu.assertEquals(flat(y), flat(x))
    lu.assertEquals(#readfile(path) % 64, (n * 8) % 64, "the data starts at a multiple of 64")
  end
end

-- a view is written in C order, with its own shape
function TestRoundTrip:testNonContiguousViews()
  local x = qkv.arange(24, "float32"):reshape(2, 3, 4)
  local views = {x:transpose(1, 3), x:narrow(3, 2, 2), x:select(2, 2),
                 qkv.arange(3, "float32"):view(3, 1):expand(3, 4), x:permute(2, 3, 1)}
  for i, v in ipairs(views) do
    lu.assertFalse(v:is_contiguous(), "view " .. i)
    local path = tmp()
    qkv.save(path, v)
    lu.assertEquals(data_of(readfile(path)), pack("<f", flat(v)), "view " .. i)
    local y = qkv.load(path)
    lu.assertEquals(y.shape, v.shape)
    qkv.test.assertTensorEqual(y, v:contiguous())
  end
end

-- qkv writes the bytes np.save writes (NumPy 1.24's header, with room for
-- the first size to grow)
function TestRoundTrip:testFilesAreNumPysBytes()
  for _, f in ipairs{"f4", "f8", "i8", "b1", "scalar", "empty", "empty_1d", "dims8"} do
    local want = readfile(FIX .. f .. ".npy")
    local path = tmp()
    qkv.save(path, qkv.load(FIX .. f .. ".npy"))
    lu.assertTrue(readfile(path) == want, f .. ".npy differs from NumPy's")
    lu.assertTrue(qkv._npy_encode(qkv.load(FIX .. f .. ".npy")) == want, f)
  end
end

function TestRoundTrip:testBoolBytesAreNormalised()
  local x = loads(npy(dict("|b1", "(3,)"), "\0\2\255"))
  lu.assertEquals(x:tolist(), {false, true, true})
  lu.assertEquals(data_of(qkv._npy_encode(x)), "\0\1\1")
end

function TestRoundTrip:testArgumentErrors()
  fails({"bad argument #1 to", "save' (string expected, got nil)"}, qkv.save, nil, qkv.ones(1))
  fails({"bad argument #2 to", "save' (qkv.Tensor expected, got number)"}, qkv.save, tmp(), 3)
  fails({"bad argument #1 to", "load' (string expected, got table)"}, qkv.load, {})
  fails({"load: " .. TMP .. "/none.npy: No such file or directory"}, qkv.load, TMP .. "/none.npy")
  fails({"load: " .. TMP .. ": Is a directory"}, qkv.load, TMP)
  fails({"load: /dev/zero: not a regular file"}, qkv.load, "/dev/zero")
  os.execute("mkfifo " .. H.quote(TMP .. "/fifo"))
  fails({"load: " .. TMP .. "/fifo: not a regular file"}, qkv.load, TMP .. "/fifo")
  fails({"save: " .. TMP .. "/no/x.npy: No such file or directory"}, qkv.save,
        TMP .. "/no/x.npy", qkv.ones(1))
  fails({"save: " .. TMP .. ": Is a directory"}, qkv.save, TMP, qkv.ones(1))
  -- the system would read a path with a NUL as the shorter one before it
  fails({"save: bad argument #1 (the path holds a NUL byte)"}, qkv.save,
        TMP .. "/nul.npy\0.txt", qkv.ones(1))
  fails({"load: bad argument #1 (the path holds a NUL byte)"}, qkv.load, TMP .. "/\0")
  lu.assertNil(io.open(TMP .. "/nul.npy"), "nothing was written at the prefix")
  local closed
  do
    local x <close> = qkv.ones(2)
    closed = x
  end
  fails("tensor was closed", qkv.save, tmp(), closed)
end

---------------------------------------------------------------- NumPy's files
TestFixtures = {}

function TestFixtures:testEachDtype()
  local f4 = qkv.load(FIX .. "f4.npy")
  lu.assertEquals(f4.dtype, "float32")
  lu.assertEquals(f4.shape, {3, 4})
  for i = 0, 11 do lu.assertEquals(f4[i // 4 + 1][i % 4 + 1], i / 8 - 0.5) end
  local f8 = qkv.load(FIX .. "f8.npy")
  lu.assertEquals(f8.dtype, "float64")
  local want = {}
  for i = 0, 5 do want[#want + 1] = i / 10 end
  want[7] = 1 / 3
  lu.assertEquals(pack("<d", f8:tolist()), pack("<d", want))
  local i8 = qkv.load(FIX .. "i8.npy")
  lu.assertEquals(i8:tolist(), {math.mininteger, -1, 0, 1, math.maxinteger, 123456789012345})
  lu.assertEquals(qkv.load(FIX .. "b1.npy"):tolist(), {{true, false, true}, {false, false, true}})
end

-- float16 read as float16, each value exact: subnormals, infinities and NaN
function TestFixtures:testFloat16Specials()
  local x = qkv.load(FIX .. "f2.npy")
  lu.assertEquals(x.dtype, "float16")
  local v = x:tolist()
  local want = {0, -0.0, 1, -2, 65504, 2^-14, 2^-24, 1023 * 2^-24, math.huge, -math.huge}
  for i, w in ipairs(want) do lu.assertEquals(v[i], w, "element " .. i) end
  lu.assertEquals(1 / v[2], -math.huge, "-0.0 keeps its sign")
  lu.assertTrue(v[11] ~= v[11], "NaN")
end

-- every one of the 65536 float16 bit patterns against the formula
function TestFixtures:testEveryFloat16()
  local bits = {}
  for i = 0, 65535 do bits[i + 1] = string.pack("<I2", i) end
  local v = loads(npy(dict("<f2", "(65536,)"), table.concat(bits))):tolist()
  for i = 0, 65535 do
    local s, e, m = i >> 15, (i >> 10) & 31, i & 1023
    local want = e == 0 and m * 2^-24 or e == 31 and (m == 0 and math.huge or 0 / 0)
                 or (1 + m / 1024) * 2^(e - 15)
    if s == 1 then want = -want end
    if want ~= want then lu.assertTrue(v[i + 1] ~= v[i + 1], "NaN " .. i)
    elseif v[i + 1] ~= want or 1 / v[i + 1] ~= 1 / want then
      lu.fail(string.format("float16 0x%04x is %.17g, expected %.17g", i, v[i + 1], want))
    end
  end
end

function TestFixtures:testOtherIntegerWidths()
  local ext = {i1 = {-128, 127}, i2 = {-32768, 32767}, i4 = {-2^31, 2^31 - 1},
               u1 = {0, 255}, u2 = {0, 65535}, u4 = {0, 2^32 - 1}}
  for t, e in pairs(ext) do
    local x = qkv.load(FIX .. t .. ".npy")
    lu.assertEquals(x.dtype, t == "i4" and "int32" or "int64", t)
    lu.assertEquals(x:tolist(), {math.tointeger(e[1]), 0, 1, math.tointeger(e[2])}, t)
  end
  lu.assertEquals(qkv.load(FIX .. "u8.npy"):tolist(), {0, math.maxinteger})
  fails({"u8_big.npy: uint64 value 18446744073709551615 at element 2 does not fit int64"},
        qkv.load, FIX .. "u8_big.npy")
end

function TestFixtures:testBigEndian()
  for _, t in ipairs{"f4", "f8", "i8"} do
    qkv.test.assertTensorEqual(qkv.load(FIX .. t .. "_be.npy"), qkv.load(FIX .. t .. ".npy"))
  end
  local x = loads(npy(dict(">i2", "(2,)"), "\1\2\255\254"))
  lu.assertEquals(x:tolist(), {258, -2})
end

-- Fortran order is read as the same elements in C order
function TestFixtures:testFortranOrder()
  local x = qkv.load(FIX .. "fortran_f8.npy")
  lu.assertEquals(x.shape, {2, 3, 4})
  for i = 1, 2 do for j = 1, 3 do for k = 1, 4 do
    lu.assertEquals(x[i][j][k], 12 * (i - 1) + 4 * (j - 1) + (k - 1))
  end end end
  lu.assertEquals(qkv.load(FIX .. "fortran_i2.npy"):tolist(), {{0, 1, 2}, {3, 4, 5}})
  -- by hand: column-major (2, 3) holds 1 4 2 5 3 6
  local y = loads(npy(dict("<f4", "(2, 3)", true), pack("<f", {1, 4, 2, 5, 3, 6})))
  lu.assertEquals(y:tolist(), {{1, 2, 3}, {4, 5, 6}})
end

function TestFixtures:testVersionsAndShapes()
  lu.assertEquals(qkv.load(FIX .. "v2.npy"):tolist(), {0, 1, 2, 3, 4})
  lu.assertEquals(qkv.load(FIX .. "v3.npy"):tolist(), {0, 1, 2, 3, 4})
  local s = qkv.load(FIX .. "scalar.npy")
  lu.assertEquals(s.shape, {})
  lu.assertEquals(s:item(), 2.5)
  lu.assertEquals(qkv.load(FIX .. "empty.npy").shape, {0, 3})
  lu.assertEquals(qkv.load(FIX .. "empty_1d.npy").shape, {0})
  local d8 = qkv.load(FIX .. "dims8.npy")
  lu.assertEquals(d8.shape, {1, 2, 1, 2, 1, 2, 1, 2})
  lu.assertEquals(flat(d8), flat(qkv.arange(16)))
end

function TestFixtures:testUnsupportedDtypes()
  fails({"c8.npy: unsupported dtype '<c8'"}, qkv.load, FIX .. "c8.npy")
  fails({"str.npy: unsupported dtype '<U2'"}, qkv.load, FIX .. "str.npy")
  fails({"savez.npz: bad magic: a zip archive", "qkv.loadz"}, qkv.load, FIX .. "savez.npz")
end

---------------------------------------------------------------- read by NumPy
TestNumPy = {}

-- NumPy loads what qkv writes, with the same data and shape, and np.save
-- would have written the same file
function TestNumPy:testNumPyReadsOurFiles()
  local x = qkv.arange(12, "float64"):reshape(3, 4):t()
  local cases = {
    {qkv.tensor(SPECIAL32), "float32", "<f", SPECIAL32},
    {x, "float64", "<d", flat(x)},
    {qkv.tensor({math.mininteger, 0, math.maxinteger}, "int64"), "int64", "<i8",
     {math.mininteger, 0, math.maxinteger}},
    {qkv.tensor{{true, false}, {false, true}}, "bool", "B", {true, false, false, true}},
    {qkv.zeros(0, 3), "float32", "<f", {}}, {qkv.tensor(7.5, "float64"), "float64", "<d", {7.5}},
    {qkv.ones(1, 2, 1, 2, 1, 2, 1, 2, "int64"), "int64", "<i8", flat(qkv.ones(16, "int64"))},
  }
  local lines = {}
  for i, c in ipairs(cases) do
    local path = tmp(i .. ".npy")
    qkv.save(path, c[1])
    local shape = #c[1].shape > 0 and table.concat(c[1].shape, ",") or "-"
    lines[i] = string.format("%s %s %s %s", path, c[2], shape,
                             (pack(c[3], c[4]):gsub(".", function(b)
                               return string.format("%02x", b:byte()) end)))
  end
  local list = tmp("list.txt")
  writefile(list, table.concat(lines, "\n") .. "\n")
  local out, code = H.numpy([[
import io, sys, numpy as np
for line in open(sys.argv[1]):
    path, dtype, shape, data = (line.split() + [""])[:4]
    a = np.load(path)
    want = tuple(int(s) for s in shape.split(",") if s != "-")
    assert a.dtype == np.dtype(dtype), (path, a.dtype)
    assert a.shape == want, (path, a.shape, want)
    assert a.tobytes().hex() == data, (path, a.tobytes().hex(), data)
    f = io.BytesIO()
    np.save(f, a)
    assert f.getvalue() == open(path, "rb").read(), (path, "np.save writes other bytes")
print("ok")]], list)
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "ok\n")
end

---------------------------------------------------------------- bad headers
TestHeaders = {}

local GOOD = npy(dict("<f4", "(2, 3)"), pack("<f", {1, 2, 3, 4, 5, 6}))

function TestHeaders:testTruncatedAtEveryByte()
  lu.assertEquals(loads(GOOD):tolist(), {{1, 2, 3}, {4, 5, 6}})
  for n = 0, #GOOD - 1 do
    local msg = bad(GOOD:sub(1, n))
    local known = msg:find("truncated: the file has " .. n .. " bytes", 1, true)
        or msg:find("header length %d+ but the file has " .. n .. " bytes")
        or msg:find("needs 24 bytes of data but the file has " .. (n - (#GOOD - 24)), 1, true)
    lu.assertTrue(known ~= nil, "cut at " .. n .. ": " .. msg)
  end
end

function TestHeaders:testMagicAndVersion()
  bad("\x93NUMPX\1\0" .. GOOD:sub(9), "bad magic (not a .npy file)")
  bad("hello", "bad magic")
  bad("PK\3\4 and then some", "a zip archive")
  bad(GOOD:sub(1, 6) .. "\1\1" .. GOOD:sub(9), "unsupported .npy version 1.1")
  bad(GOOD:sub(1, 6) .. "\4\0" .. GOOD:sub(9), "unsupported .npy version 4.0")
  bad(GOOD:sub(1, 6) .. "\0\0" .. GOOD:sub(9), "unsupported .npy version 0.0")
  bad(GOOD:sub(1, 8) .. "\160\15" .. GOOD:sub(11),
      "header length 4000 but the file has " .. #GOOD .. " bytes")
  bad(npy("", "", 2):sub(1, 8) .. "\0\0\0\1", "header length 16777216 is too long")
end

function TestHeaders:testUnparsableDicts()
  local cases = {
    {"", "expected '{' at its end"}, {"[]", "expected '{'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "expected ',' or '}' at its end"},
    {"{'descr' '<f4'}", "expected ':'"}, {"{descr: '<f4'}", "expected a quoted key"},
    {"{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}", "expected True or False"},
    {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (6,)}", "expected True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': [6]}", "expected a tuple for 'shape'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "shape (n) is not a tuple"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,,)}", "expected an integer"},
    {"{'descr': '<f4', 'fortran_order': False}", "the header has no 'shape'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", "unexpected key 'x'"},
    {"{'descr': '<f4', 'descr': '<f4', 'shape': (6,)}", "key 'descr' appears twice"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x", "unexpected text after"},
    {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (6,)}", "expected a string"},
    {"{'descr': '<f4", "expected a string for 'descr'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}}", "unexpected text after"},
    -- C would read these strings shorter: '<f4' and 'descr'
    {"{'descr': '<f4\0', 'fortran_order': False, 'shape': (6,)}",
     "the 'descr' string holds a NUL byte"},
    {"{'descr': '<\0f4', 'fortran_order': False, 'shape': (6,)}",
     "the 'descr' string holds a NUL byte"},
    {"{'descr\0': '<f4', 'fortran_order': False, 'shape': (6,)}",
     "a key of the header holds a NUL byte"},
  }
  for _, c in ipairs(cases) do bad(npy(c[1], pack("<f", {1, 2, 3, 4, 5, 6})), c[2]) end
end

function TestHeaders:testUnsupportedDtypes()
  for _, d in ipairs{"<c8", "|O", "<U3", "<M8[ns]", "<f16", "<f3", "|f4", "f4", "", "<b2",
                     "<V8", "?", "<i16", ">V2"} do       -- (a void has no byte order: >V2 read unswapped)
    bad(npy(dict(d, "(1,)"), "\0\0\0\0"), "unsupported dtype '" .. d .. "'")
  end
  bad(npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", "\0\0\0\0"),
      "unsupported dtype: a structured dtype")
  bad(npy(dict(string.rep("x", 40), "(1,)"), "\0"), "unsupported dtype 'xxxxxxxxxxxxxxx'...")
end

-- forged shapes are errors before anything is allocated
function TestHeaders:testShapes()
  local data = pack("<f", {1, 2, 3, 4, 5, 6})
  bad(npy(dict("<f4", "(-1, 6)"), data), "shape has a negative size -1")
  bad(npy(dict("<f4", "(2.5,)"), data), "shape must hold integers")
  bad(npy(dict("<f4", "(6e0,)"), data), "shape must hold integers")
  bad(npy(dict("<f4", "(99999999999999999999,)"), data), "size too large for 64 bits")
  bad(npy(dict("<f4", "(4294967296, 4294967296)"), data),
      "shape (4294967296, 4294967296) is too large")
  bad(npy(dict("<f4", "(1099511627776,)"), data),
      "shape (1099511627776,) needs 4398046511104 bytes of data but the file has 24")
  bad(npy(dict("<f4", "(0, 1152921504606846976, 16)"), ""),
      "shape (0, 1152921504606846976, 16) is too large")
  bad(npy(dict("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 6)"), data), "shape has more than 8 dims")
  bad(npy(dict("<f4", "(2, 3)"), data:sub(1, 20)),
      "shape (2, 3) needs 24 bytes of data but the file has 20")
  bad(npy(dict("<f4", "(2, 3)"), data .. "\0\0\0\0"),
      "shape (2, 3) needs 24 bytes of data but the file has 28")
  bad(npy(dict("<i8", "()"), ""), "shape () needs 8 bytes of data but the file has 0")
  -- an empty shape needs no data, however large the other sizes
  lu.assertEquals(loads(npy(dict("<f4", "(0, 576460752303423488)"), "")).shape,
                  {0, 576460752303423488})
end

-- what NumPy (or Python 2) may write: any key order, either quote, no
-- trailing comma, spaces and tabs, 3L, version 2.0
function TestHeaders:testAcceptedVariants()
  local data = pack("<f", {1, 2, 3, 4, 5, 6})
  for _, d in ipairs{
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      '{"descr": "<f4", "fortran_order": False, "shape": (2, 3)}',
      "{ 'descr' : '<f4' ,\t'fortran_order':False,'shape':( 2 ,3 , ) , }   ",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
      "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }"} do
    lu.assertEquals(loads(npy(d, data)):tolist(), {{1, 2, 3}, {4, 5, 6}}, d)
  end
  lu.assertEquals(loads(npy(dict("<f4", "(6,)"), data, 2)):tolist(), {1, 2, 3, 4, 5, 6})
end

os.exit(lu.LuaUnit.run(), true)
