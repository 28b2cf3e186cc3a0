-- test_npz.lua: qkv.savez / qkv.loadz (.npz archives: NumPy's files, names,
-- hand-made bad zips and zip bombs), and the atomic writes that qkv.save
-- and qkv.savez share: a failed save keeps the old file and leaves no temp
-- file, modes and symbolic links are kept, and a writer killed mid-save
-- always leaves a complete file; character devices and FIFOs are written in
-- place, other special files refused, paths with a NUL refused. The .npy
-- format is test_npy.lua's.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local H = dofile("tests/helpers/npy_helpers.lua")
local S, FIX, readfile, writefile = H, H.FIX, H.readfile, H.writefile

local EXE = arg and arg[-1] or "build/qkv"
local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

local count = 0
local function newdir()
  count = count + 1
  local d = TMP .. "/" .. count
  assert(os.execute("mkdir " .. S.quote(d)))
  return d
end

-- the names in folder d, sorted, hidden ones (our temp files) included
local function listing(d)
  local out = S.sh("LC_ALL=C ls -A " .. S.quote(d))   -- C's order: dot files first
  local names = {}
  for name in out:gmatch("[^\n]+") do names[#names + 1] = name end
  return names
end

-- runs a qkv script in a child process; returns its output and status
local function child(code, prefix)
  return S.sh((prefix or "") .. S.quote(EXE) .. " -e " .. S.quote(code))
end

local function assertEqualTables(got, want)
  local keys = {}
  for k in pairs(want) do keys[#keys + 1] = k end
  for k in pairs(got) do lu.assertNotNil(want[k], "unexpected " .. tostring(k)) end
  for _, k in ipairs(keys) do qkv.test.assertTensorEqual(got[k], want[k]) end
end

---------------------------------------------------------------- a zip by hand

local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC[i] = c
end
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = CRC[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

-- entries {name, data, method = 0 | 8 | ..., size = the size it claims,
-- crc = the CRC-32 it claims, extra = its extra fields, data = the bytes
-- stored in place of data's}; a method-8 entry's data is one stored
-- deflate block, so that no zlib is needed here
local function zip(entries, zip64)
  local locals, central, offset = {}, {}, 0
  for _, e in ipairs(entries) do
    local method, raw, extra = e.method or 0, e[2], e.extra or ""
    local data = method == 8 and string.pack("<BI2I2", 1, #raw, ~#raw & 0xFFFF) .. raw or raw
    data = e.data or data
    local size = e.size or #raw
    local fields = string.pack("<I2I2I2I2I2I4I4I4I2", 20, 0, method, 0, 0x21, e.crc or crc32(raw),
                               #data, size, #e[1])
    local loc = "PK\3\4" .. fields .. string.pack("<I2", #extra) .. e[1] .. extra .. data
    locals[#locals + 1] = loc
    central[#central + 1] = "PK\1\2" .. string.pack("<I2", 20) .. fields ..
        string.pack("<I2I2I2I2I4I4", #extra, 0, 0, 0, 0, offset) .. e[1] .. extra
    offset = offset + #loc
  end
  local cd = table.concat(central)
  if zip64 then         -- the zip64 end record and its locator, the counts in them
    local at = offset + #cd
    return table.concat(locals) .. cd ..
      "PK\6\6" .. string.pack("<I8I2I2I4I4I8I8I8I8", 44, 45, 45, 0, 0, #entries, #entries, #cd,
                              offset) ..
      "PK\6\7" .. string.pack("<I4I8I4", 0, at, 1) ..
      "PK\5\6" .. string.pack("<I2I2I2I2I4I4I2", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
  end
  return table.concat(locals) .. cd .. "PK\5\6" ..
         string.pack("<I2I2I2I2I4I4I2", 0, 0, #entries, #entries, #cd, offset, 0)
end

local function badzip(bytes, ...)
  local path = TMP .. "/bad.npz"
  writefile(path, bytes)
  return fails({"loadz: " .. path, ...}, qkv.loadz, path)
end

---------------------------------------------------------------- .npz
TestNpz = {}

function TestNpz:testRoundTrip()
  local x = qkv.arange(24):reshape(2, 3, 4)
  local t = {w = qkv.randn(3, 4), n = qkv.tensor({7, -8, math.maxinteger}, "int64"),
             flag = qkv.tensor(true), e = qkv.zeros(0, 5, "float64"), view = x:transpose(1, 3),
             ["layer1/attn.q_proj"] = qkv.ones(2)}
  local path = newdir() .. "/a.npz"
  qkv.savez(path, t)
  local back = qkv.loadz(path)
  t.view = x:transpose(1, 3):contiguous()
  assertEqualTables(back, t)
  lu.assertEquals(back.view.shape, {4, 3, 2})
  -- the empty table is an empty archive, as np.savez(path) writes
  qkv.savez(path, {})
  lu.assertEquals(next(qkv.loadz(path)), nil)
end

function TestNpz:testNumPysArchives()
  local w = qkv.arange(6):reshape(2, 3) / 4
  assertEqualTables(qkv.loadz(FIX .. "savez.npz"),
    {w = w, n = qkv.tensor({7, -8, 9}, "int64"), flag = qkv.tensor(true)})
  assertEqualTables(qkv.loadz(FIX .. "savez_compressed.npz"),
    {w = w, n = qkv.tensor({7, -8, 9}, "int64"), zeros = qkv.zeros(1000, "float64")})
end

function TestNpz:testNumPyReadsOurArchives()
  local path = newdir() .. "/a.npz"
  qkv.savez(path, {w = qkv.arange(6, "float64"):reshape(2, 3):t(), ["sub/b"] = qkv.tensor(false)})
  local out, code = H.numpy([=[
import sys, numpy as np
z = np.load(sys.argv[1])
assert sorted(z.files) == ["sub/b", "w"], z.files
assert z["w"].dtype == np.float64 and z["w"].tolist() == [[0, 3], [1, 4], [2, 5]], z["w"]
assert z["sub/b"].shape == () and z["sub/b"].dtype == np.bool_ and not z["sub/b"]
print("ok")]=], path)
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "ok\n")
end

function TestNpz:testBadNames()
  local d = newdir()
  local one = qkv.ones(1)
  for _, name in ipairs{"", "/abs", "a/../b", "a//b", ".", "a/", "x\0y", "a\\b"} do
    fails("savez: the name '" .. name .. "'", qkv.savez, d .. "/x.npz", {[name] = one})
  end
  -- a zip entry's name has 16 bits of length: a longer one was written cut
  fails("is longer than a zip entry's name may be", qkv.savez, d .. "/x.npz",
        {[("n"):rep(70000)] = one})
  fails("is not UTF-8", qkv.savez, d .. "/x.npz", {["a\255b"] = one})
  lu.assertFalse(io.open(d .. "/x.npz") ~= nil, "nothing written")
  local long = ("n"):rep(65531)
  qkv.savez(d .. "/y.npz", {[long] = one})
  lu.assertEquals(qkv.loadz(d .. "/y.npz")[long]:tolist(), {1})
  os.remove(d .. "/y.npz")
  fails("savez: tensor names must be strings, got number 1", qkv.savez, d .. "/x.npz", {one})
  fails("savez: 'w' is a string, not a tensor", qkv.savez, d .. "/x.npz", {w = "x"})
  fails("savez: bad argument #2 (table of tensors expected, got nil)", qkv.savez, d .. "/x.npz")
  fails("savez: bad argument #1 (path expected, got number)", qkv.savez, 1, {})
  fails("loadz: bad argument #1 (path expected, got nil)", qkv.loadz)
  fails("loadz: " .. d .. "/none.npz: No such file or directory", qkv.loadz, d .. "/none.npz")
  fails("loadz: " .. d .. ": Is a directory", qkv.loadz, d)
  lu.assertEquals(listing(d), {})
end

-- a FIFO would block a reader and a device never end: regular files only;
-- errors name the script's line, not qkv.npz's
function TestNpz:testSpecialFilesAndPositions()
  local d = newdir()
  os.execute("mkfifo " .. S.quote(d .. "/fifo"))
  fails("loadz: " .. d .. "/fifo: not a regular file", qkv.loadz, d .. "/fifo")
  fails("loadz: /dev/zero: not a regular file", qkv.loadz, "/dev/zero")
  local closed
  do
    local x <close> = qkv.ones(2)
    closed = x
  end
  fails("savez: 'w': tensor was closed", qkv.savez, d .. "/x.npz", {w = closed})
  local line = debug.getinfo(1, "l").currentline
  local ok, msg = pcall(function() return qkv.loadz(d .. "/none.npz") end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_npz.lua:" .. line + 1 .. ": loadz: " .. d .. "/none.npz: No such")
end

function TestNpz:testBadArchives()
  local good = readfile(FIX .. "savez.npz")
  badzip("hello, not a zip", "Not a zip archive")
  badzip("", "Not a zip archive")
  for n = 1, #good - 1, 7 do badzip(good:sub(1, n)) end
  fails({"loadz: " .. FIX .. "notes.npz: entry 'notes.txt' is not a .npy file"},
        qkv.loadz, FIX .. "notes.npz")
  local npy = qkv._npy_encode(qkv.ones(3))
  badzip(zip{{"a.npy", npy:sub(1, -2)}}, ": a.npy: shape (3,) needs 12 bytes of data but the file has 11")
  badzip(zip{{"a.npy", "hello"}}, ": a.npy: bad magic")
  badzip(zip{{"a.npy", npy}, {"a.npy", npy}}, "File already exists")
  -- the hand-made zip itself is right: stored and deflated entries load
  assertEqualTables(qkv.loadz((function()
    local p = newdir() .. "/ok.npz"
    writefile(p, zip{{"a.npy", npy}, {"b.npy", npy, method = 8}})
    return p
  end)()), {a = qkv.ones(3), b = qkv.ones(3)})
end

-- NumPy's archives with random bytes changed, inserted, deleted or cut
-- off (a fixed seed): each is read or is an error naming the archive, or
-- for a broken entry the entry (make fuzz-npy fuzzes the .npy reader).
-- An archive that is read gives its entries' bytes as they were: the
-- CRC-32s guard the data, so only names, dates and flags can have changed
function TestNpz:testMutatedArchivesFailCleanly()
  local zipm = require "qkv.zip"
  local seeds = {readfile(FIX .. "savez.npz"), readfile(FIX .. "savez_compressed.npz")}
  local original = {}
  for _, s in ipairs(seeds) do
    for _, bytes in pairs(zipm.decode(s)) do original[bytes] = true end
  end
  math.randomseed(6)
  local read = 0
  for _ = 1, 3000 do
    local s = seeds[math.random(#seeds)]
    for _ = 1, math.random(3) do
      local op, i = math.random(4), math.random(#s)
      local c = string.char(math.random(0, 255))
      s = op == 1 and s:sub(1, i - 1) .. c .. s:sub(i + 1) or op == 2 and s:sub(1, i) .. c .. s:sub(i + 1)
          or op == 3 and s:sub(1, i - 1) .. s:sub(i + 1) or s:sub(1, i)
    end
    local ok, entries = pcall(zipm.decode, s, "z")
    if ok then
      read = read + 1
      for name, bytes in pairs(entries) do
        lu.assertTrue(original[bytes], "entry " .. name .. " changed")
        local ok2, x = pcall(qkv._npy_decode, bytes, "z: " .. name)
        lu.assertTrue(ok2 and qkv.is_tensor(x) or tostring(x):find("^z: ") ~= nil, tostring(x))
      end
    else
      lu.assertStrMatches(tostring(entries), "z: .*")
    end
  end
  lu.assertTrue(read > 20, "some archives survive a mutation: " .. read)
end

-- every entry's CRC-32 is checked, stored or deflated, and one bad entry
-- fails the whole archive: nothing is returned
function TestNpz:testCorruptEntries()
  local path = newdir() .. "/a.npz"
  qkv.savez(path, {x = qkv.arange(16), y = qkv.ones(2)})
  local s = readfile(path)
  local at = s:find(string.pack("<f", 1.0) .. string.pack("<f", 2.0), 1, true)
  lu.assertNotNil(at, "x's data")
  -- 1.0 becomes 4.0: a changed data byte, its CRC kept
  badzip(s:sub(1, at + 2) .. "\64" .. s:sub(at + 4), ": entry 'x.npy' is corrupt (CRC-32 mismatch)")
  local npy, other = qkv._npy_encode(qkv.ones(3)), qkv._npy_encode(qkv.zeros(2))
  local flipped = npy:sub(1, -2) .. "\0"
  for _, method in ipairs{0, 8} do
    local inflated = method == 8 and string.pack("<BI2I2", 1, #npy, ~#npy & 0xFFFF) or ""
    badzip(zip{{"a.npy", npy, method = method, data = inflated .. flipped}},
           ": entry 'a.npy' is corrupt (CRC-32 mismatch)")
    badzip(zip{{"a.npy", npy, method = method, crc = crc32(npy) ~ 1}},
           ": entry 'a.npy' is corrupt (CRC-32 mismatch)")
    -- the bad entry first or last among good ones
    badzip(zip{{"a.npy", other}, {"b.npy", npy, method = method, crc = 0}, {"c.npy", other}},
           ": entry 'b.npy' is corrupt")
    badzip(zip{{"a.npy", npy, method = method, crc = 0}, {"b.npy", other}},
           ": entry 'a.npy' is corrupt")
  end
  -- a deflated entry that inflates to more than it claims
  badzip(zip{{"a.npy", npy, method = 8, size = #npy - 1}}, "entry 'a.npy' ")
  -- an empty entry has a CRC too
  badzip(zip{{"a.npy", "", crc = 1}}, ": entry 'a.npy' is corrupt (CRC-32 mismatch)")
end

-- a name with a NUL byte is an error (libzip's C strings would end it
-- there, and "a.npy\0x" load as a), in the record or in the Unicode path
-- that libzip prefers to it
function TestNpz:testNulInEntryNames()
  local npy = qkv._npy_encode(qkv.ones(3))
  badzip(zip{{"a.npy\0x", npy}}, ": entry 'a.npy\\0x' has a NUL byte in its name")
  badzip(zip{{"b.npy", npy}, {"\0a.npy", npy}}, ": entry '\\0a.npy' has a NUL byte in its name")
  local function upath(name, of)
    return string.pack("<I2I2BI4", 0x7075, 5 + #name, 1, crc32(of)) .. name
  end
  badzip(zip{{"a.npy", npy, extra = upath("b.npy\0x", "a.npy")}},
         ": entry 'b.npy\\0x' has a NUL byte in its name")
  local p = newdir() .. "/u.npz"
  writefile(p, zip{{"a.npy", npy, extra = upath("b.npy", "a.npy")}})
  assertEqualTables(qkv.loadz(p), {b = qkv.ones(3)})
  -- the central directory found through a zip64 end record
  badzip(zip({{"b.npy", npy}, {"a.npy\0", npy}}, true), ": entry 'a.npy\\0' has a NUL byte")
  writefile(p, zip({{"b.npy", npy}, {"a.npy", npy}}, true))
  assertEqualTables(qkv.loadz(p), {a = qkv.ones(3), b = qkv.ones(3)})
end

-- sizes are checked before anything is inflated
function TestNpz:testZipBombs()
  local npy = qkv._npy_encode(qkv.ones(3))
  badzip(zip{{"a.npy", npy, method = 8, size = 1 << 31}},
         "entry 'a.npy' claims 2147483648 bytes from " .. #npy + 5 .. " compressed")
  badzip(zip{{"a.npy", npy, size = #npy + 1}}, "entry 'a.npy' claims")
  badzip(zip{{"a.npy", npy, method = 12}}, "entry 'a.npy' uses compression method 12")
  badzip(zip{{"a.npy", npy, method = 8, size = #npy + 10}}, "a.npy")
end

---------------------------------------------------------------- atomic writes
TestAtomic = {}

-- a save that raises before writing keeps the old file, and no temp file
function TestAtomic:testFailedSavesKeepTheOldFile()
  local d = newdir()
  local p, z = d .. "/x.npy", d .. "/x.npz"
  qkv.save(p, qkv.ones(3))
  qkv.savez(z, {a = qkv.ones(3)})
  local old, oldz = readfile(p), readfile(z)
  local closed
  do
    local x <close> = qkv.zeros(3)
    closed = x
  end
  fails("tensor was closed", qkv.save, p, closed)
  fails("savez: 'b' is a number, not a tensor", qkv.savez, z, {a = qkv.zeros(3), b = 1})
  lu.assertTrue(readfile(p) == old)
  lu.assertTrue(readfile(z) == oldz)
  lu.assertEquals(listing(d), {"x.npy", "x.npz"})
end

-- a write that fails half-way (the file size limit: EFBIG) removes its
-- temp file and leaves the old file whole
function TestAtomic:testFailedWritesKeepTheOldFile()
  local d = newdir()
  local p = d .. "/x.npy"
  qkv.save(p, qkv.ones(3))
  local old = readfile(p)
  for _, code in ipairs{"qkv.save(%q, qkv.zeros(100000))",
                        "qkv.savez(%q, {a = qkv.zeros(100000)})"} do
    local out = child(string.format("local ok, e = pcall(function() " .. code ..
                                    " end) print(e)", p), "trap '' XFSZ; ulimit -f 8; ")
    lu.assertStrContains(out, p .. ": File too large")
    lu.assertTrue(readfile(p) == old)
    lu.assertEquals(listing(d), {"x.npy"})
  end
end

-- a folder its owner may not write to, as a user without root's rights;
-- the same save succeeds once the folder is writable again
function TestAtomic:testUnwritableFolder()
  local d = newdir()
  local p = d .. "/x.npy"
  qkv.save(p, qkv.ones(3))
  local old = readfile(p)
  local prefix = ""
  if S.sh("id -u") == "0\n" then
    if select(2, S.sh("command -v setpriv")) ~= 0 then lu.skip("root, and no setpriv") end
    prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups "
    os.execute("chmod 755 " .. S.quote(TMP) .. "; chown 65534 " .. S.quote(d))
  end
  local code = string.format("print(pcall(qkv.save, %q, qkv.zeros(3)))", p)
  os.execute("chmod 555 " .. S.quote(d))
  local out = child(code, prefix)
  lu.assertStrContains(out, "false\tsave: " .. p .. ": Permission denied")
  lu.assertTrue(readfile(p) == old)
  lu.assertEquals(listing(d), {"x.npy"})
  os.execute("chmod 755 " .. S.quote(d))
  lu.assertEquals(child(code, prefix), "true\n")
  lu.assertEquals(qkv.load(p):tolist(), {0, 0, 0})
end

function TestAtomic:testModesAndLinks()
  local d = newdir()
  local p = d .. "/x.npy"
  qkv.save(p, qkv.ones(3))
  lu.assertEquals(S.sh("stat -c %a " .. S.quote(p)), "644\n")
  os.execute("chmod 640 " .. S.quote(p))
  qkv.save(p, qkv.zeros(3))
  lu.assertEquals(S.sh("stat -c %a " .. S.quote(p)), "640\n")
  child(string.format("qkv.save(%q, qkv.zeros(3))", d .. "/y.npy"), "umask 027; ")
  lu.assertEquals(S.sh("stat -c %a " .. S.quote(d .. "/y.npy")), "640\n")
  -- through a symbolic link: the file it names is replaced, the link stays
  os.execute("ln -s x.npy " .. S.quote(d .. "/link.npy"))
  qkv.save(d .. "/link.npy", qkv.full({2}, 5))
  lu.assertEquals(S.sh("readlink " .. S.quote(d .. "/link.npy")), "x.npy\n")
  lu.assertEquals(qkv.load(p):tolist(), {5, 5})
  lu.assertEquals(listing(d), {"link.npy", "x.npy", "y.npy"})
end

-- a link to a file that does not exist yet: the file is made where the
-- link points (as open(O_CREAT) makes it), link by link, relative to each
-- link's folder, and the links stay; a loop of links is an error
function TestAtomic:testLinksToNewFiles()
  local d = newdir()
  os.execute("mkdir " .. S.quote(d .. "/sub"))
  os.execute("ln -s new.npy " .. S.quote(d .. "/a.npy"))
  os.execute("ln -s ../sub/b.npy " .. S.quote(d .. "/sub/l2"))
  os.execute("ln -s sub/l2 " .. S.quote(d .. "/l1"))
  os.execute("ln -s loop " .. S.quote(d .. "/loop"))
  qkv.save(d .. "/a.npy", qkv.full({2}, 3))
  qkv.savez(d .. "/l1", {x = qkv.full({2}, 4)})
  lu.assertEquals(qkv.load(d .. "/new.npy"):tolist(), {3, 3})
  lu.assertEquals(qkv.loadz(d .. "/sub/b.npy").x:tolist(), {4, 4})
  lu.assertEquals(S.sh("readlink " .. S.quote(d .. "/a.npy")), "new.npy\n")
  lu.assertEquals(S.sh("readlink " .. S.quote(d .. "/l1")), "sub/l2\n")
  fails("save: " .. d .. "/loop: Too many levels of symbolic links",
        qkv.save, d .. "/loop", qkv.ones(1))
  lu.assertEquals(listing(d), {"a.npy", "l1", "loop", "new.npy", "sub"})
  lu.assertEquals(listing(d .. "/sub"), {"b.npy", "l2"})
end

-- a name as long as a name may be (255 bytes) is written: the temp
-- file's name is cut to fit
function TestAtomic:testLongestNames()
  local d = newdir()
  for _, n in ipairs{247, 248, 255} do
    local p = d .. "/" .. string.rep("n", n - 4) .. ".npy"
    qkv.save(p, qkv.full({2}, n))
    qkv.save(p, qkv.full({3}, n))            -- and replaced
    lu.assertEquals(qkv.load(p):tolist(), {n, n, n})
  end
  lu.assertEquals(#listing(d), 3)
  fails("File name too long", qkv.save, d .. "/" .. string.rep("n", 256), qkv.ones(1))
end

-- a child saving 4 MiB tensors in a loop, killed with SIGKILL at 8
-- moments: the file always loads to one complete tensor
function TestAtomic:testKilledWriterLeavesACompleteFile()
  local d = newdir()
  local p = d .. "/x.npy"
  local n = 1 << 20
  qkv.save(p, qkv.zeros(n))
  local code = string.format("for k = 1, 1e9 do qkv.save(%q, qkv.full({%d}, k %% 7)) end", p, n)
  local seen = {}
  for _, delay in ipairs{"0.01", "0.02", "0.04", "0.06", "0.09", "0.12", "0.16", "0.2"} do
    local cmd = string.format("%s -e %s & pid=$!; sleep %s; kill -9 $pid; wait $pid",
                              S.quote(EXE), S.quote(code), delay)
    local _, status = S.sh(cmd)
    lu.assertEquals(status, 137, "the child was killed")
    local x = qkv.load(p)
    lu.assertEquals(x.shape, {n})
    local v = x[1]
    lu.assertEquals(x:eq(v):sum():item(), n, "one complete tensor")
    seen[v] = true
  end
  local names = listing(d)
  lu.assertEquals(names[#names], "x.npy")
  for i = 1, #names - 1 do lu.assertStrMatches(names[i], "%.x%.npy%.......") end
end

---------------------------------------------------------------- special files
TestSpecial = {}

-- what kind of file stat says is at path
local function kind(path) return (S.sh("stat -c %F " .. S.quote(path))) end

-- a path with a NUL is an error, for both writers and both readers, and
-- nothing is written at the part before the NUL
function TestSpecial:testNulInPaths()
  local d = newdir()
  local x = qkv.ones(2)
  fails("save: bad argument #1 (the path holds a NUL byte)", qkv.save, d .. "/a\0b", x)
  fails("savez: bad argument #1 (the path holds a NUL byte)", qkv.savez, d .. "/a\0b", {x = x})
  fails("load: bad argument #1 (the path holds a NUL byte)", qkv.load, d .. "/a\0b")
  fails("loadz: bad argument #1 (the path holds a NUL byte)", qkv.loadz, d .. "/a\0b")
  lu.assertEquals(listing(d), {})
end

-- a character device is written in place and stays a device: /dev/null
-- takes the bytes, /dev/full says it is full
function TestSpecial:testCharacterDevicesAreWrittenInPlace()
  qkv.save("/dev/null", qkv.ones(3))
  qkv.savez("/dev/null", {x = qkv.ones(3)})
  fails("save: /dev/full: No space left on device", qkv.save, "/dev/full", qkv.ones(3))
  fails("savez: /dev/full: No space left on device", qkv.savez, "/dev/full", {x = qkv.ones(3)})
  lu.assertEquals(kind("/dev/full"), "character special file\n")
  lu.assertEquals(kind("/dev/null"), "character special file\n")
end

-- a FIFO is written in place, to the reader waiting on it, and stays a FIFO
function TestSpecial:testFifosAreWrittenInPlace()
  local d = newdir()
  local fifo, out = d .. "/fifo", d .. "/out"
  assert(os.execute("mkfifo " .. S.quote(fifo)))
  local x = qkv.tensor({{0, 1, 2}, {3, 4, 5}})
  for _, code in ipairs{"qkv.save(%q, qkv.tensor({{0, 1, 2}, {3, 4, 5}}))",
                        "qkv.savez(%q, {x = qkv.tensor({{0, 1, 2}, {3, 4, 5}})})"} do
    local _, status = S.sh(string.format("cat %s > %s & %s -e %s; wait", S.quote(fifo),
                           S.quote(out), S.quote(EXE), S.quote(code:format(fifo))))
    lu.assertEquals(status, 0)
    lu.assertEquals(kind(fifo), "fifo\n")
    local y = code:find("savez") and qkv.loadz(out).x or qkv.load(out)
    qkv.test.assertTensorEqual(y, x)
  end
  lu.assertEquals(listing(d), {"fifo", "out"})
end

-- a FIFO with no reader waits for one, as any writer does; SIGINT stops
-- the wait with an error a script can catch, and the next command runs
function TestSpecial:testAWaitForAReaderIsInterruptible()
  local d = newdir()
  local fifo = d .. "/fifo"
  assert(os.execute("mkfifo " .. S.quote(fifo)))
  local code = string.format("print(pcall(qkv.save, %q, qkv.ones(3)))", fifo)
  local out = S.sh(string.format("%s -e %s -e 'print(qkv.ones(2):sum())' & pid=$!; " ..
                                 "sleep 0.3; kill -INT $pid; wait $pid 2>&1",
                                 S.quote(EXE), S.quote(code)))
  lu.assertEquals(out, "false\tsave: interrupted\ntensor(2.)\n")
  lu.assertEquals(kind(fifo), "fifo\n")
end

-- a socket or a block device is refused and stays what it was
function TestSpecial:testOtherKindsAreRefused()
  local d = newdir()
  local sock, blk = d .. "/sock", d .. "/blk"
  local made = {}
  if select(2, S.sh("command -v python3")) == 0 and
     select(2, S.sh("python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' " ..
                    S.quote(sock))) == 0 then
    made[#made + 1] = {sock, "socket\n"}
  end
  if select(2, S.sh("mknod " .. S.quote(blk) .. " b 7 200")) == 0 then
    made[#made + 1] = {blk, "block special file\n"}
  end
  if #made == 0 then lu.skip("neither python3 (for a socket) nor mknod (as root) here") end
  for _, m in ipairs(made) do
    fails("save: " .. m[1] .. ": not a regular file, a character device or a FIFO",
          qkv.save, m[1], qkv.ones(1))
    fails("savez: " .. m[1] .. ": not a regular file, a character device or a FIFO",
          qkv.savez, m[1], {x = qkv.ones(1)})
    lu.assertEquals(kind(m[1]), m[2])
  end
end

os.exit(lu.LuaUnit.run(), true)
