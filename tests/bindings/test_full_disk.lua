-- test_full_disk.lua: every writer of files on a full disk, and on the
-- paths that cannot be written: qkv.save, qkv.savez, qkv.save_safetensors,
-- qkv.plot's PNGs (and the canvas's write_png under them), `qkv test`'s
-- JUnit file and `qkv kernel install`. A failed write is an error naming
-- the function and the path, and a file of that name is left as it was,
-- with no temp file beside it. The disk is a 64 KiB tmpfs this suite
-- mounts (as root; the tests that need it are skipped otherwise), filled
-- with a file of zeros: wholly (no byte free: the first write fails, and a
-- PNG of a few hundred bytes, which a stdio buffer would hold until the
-- close, fails too) or to 8 KiB from full (the first write is short, the
-- next one fails). /dev/full shows the message where no tmpfs can be had.
-- The atomic writer's other cases (modes, links, a killed writer) are
-- test_npz.lua's.
local lu = require "luaunit"
local fails = dofile("tests/helpers/attn_ref.lua").fails
local H = dofile("tests/helpers/npy_helpers.lua")
local S = dofile("tests/helpers/shell.lua")
local readfile, writefile = H.readfile, H.writefile
local cairo = require "qkv.cairo"

local EXE = arg and arg[-1] or "build/qkv"
local FULL = "No space left on device"

local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

-- the tmpfs, mounted once for the suite and unmounted (before TMP is
-- removed: closed in the reverse order) however it ends
local MNT, nomount = TMP .. "/full", nil
assert(os.execute("mkdir " .. S.quote(MNT)))
if S.sh("id -u") ~= "0\n" then
  nomount = "not root: this suite cannot mount the small tmpfs it fills"
else
  local out, code = S.sh("mount -t tmpfs -o size=64k,mode=0755 qkvtest " .. S.quote(MNT))
  if code ~= 0 then nomount = "mount -t tmpfs failed: " .. out:gsub("%s+$", "") end
end
local _unmount <close> = setmetatable({}, {__close = function()
  if not nomount then os.execute("umount " .. S.quote(MNT)) end
end})

local function needmount() if nomount then lu.skip(nomount) end end

-- the names in folder d, sorted, hidden ones (temp files) included
local function listing(d)
  local names = {}
  for name in S.sh("LC_ALL=C ls -A " .. S.quote(d)):gmatch("[^\n]+") do
    names[#names + 1] = name
  end
  return names
end

-- empties the tmpfs, then runs setup (which writes the old files)
local function fresh(setup)
  os.execute("rm -rf " .. S.quote(MNT) .. "/* " .. S.quote(MNT) .. "/.[!.]*")
  if setup then setup() end
end

-- fills the tmpfs with zeros (FILL), leaving free bytes free
local FILL = MNT .. "/~fill"
local function fill(free)
  S.sh("cat /dev/zero > " .. S.quote(FILL))
  if free > 0 then assert(os.execute("truncate -s -" .. free .. " " .. S.quote(FILL))) end
end

-- the writers: each writes something of about `bytes` bytes to path
local function rand(n) return qkv.arange(n):float():sin() end
local function png_bytes(n)   -- a canvas whose PNG is about n bytes or more
  local side = math.max(4, math.ceil(math.sqrt(n / 3)))
  local cv = cairo.new(side, side)
  local rgb = {}
  local x = 12345
  for i = 1, side * side * 3 do
    x = (x * 1103515245 + 12345) % 2147483648
    rgb[i] = string.char(x >> 16 & 255)       -- noise: zlib cannot shrink it
  end
  cv:image(0, 0, side, side, 1, 1, table.concat(rgb))
  return cv
end
local WRITERS = {
  {name = "save", prefix = "save: ", file = "x.npy",
   write = function(path, n) qkv.save(path, rand(n // 4)) end},
  {name = "savez", prefix = "savez: ", file = "x.npz",
   write = function(path, n) qkv.savez(path, {a = rand(n // 4)}) end},
  {name = "save_safetensors", prefix = "save_safetensors: ", file = "x.safetensors",
   write = function(path, n) qkv.save_safetensors(path, {a = rand(n // 4)}) end},
  {name = "write_png", prefix = "cannot write '", file = "x.png", quoted = true,
   write = function(path, n)
     local cv <close> = png_bytes(n)
     cv:write_png(path)
   end},
  {name = "plot.heatmap", prefix = "heatmap: cannot write '", file = "h.png", quoted = true,
   write = function(path, n)
     local side = math.max(2, math.ceil(math.sqrt(n / 8)))
     qkv.plot.heatmap(rand(side * side):view(side, side), {file = path})
   end},
}

-- the message writer w gives for path and reason
local function message(w, path, why)
  return w.prefix .. path .. (w.quoted and "': " or ": ") .. why
end

---------------------------------------------------------------- a full disk
TestFullDisk = {}

-- for each writer, an old file is replaced by a large one on a disk with
-- no byte free, then with 8 KiB free (a short write first): the error
-- names the function, the path and the reason, the old file is as it was,
-- and no temp file is left
function TestFullDisk:testTheOldFileIsLeftIntact()
  needmount()
  for _, w in ipairs(WRITERS) do
    for _, free in ipairs{0, 8192} do
      local path = MNT .. "/" .. w.file
      fresh(function() w.write(path, 100) end)
      local old = readfile(path)
      fill(free)
      local msg = fails(message(w, path, FULL), w.write, path, 40000)
      lu.assertTrue(readfile(path) == old, w.name .. ", " .. free .. " bytes free: " .. msg)
      lu.assertEquals(listing(MNT), {w.file, "~fill"}, w.name)
    end
  end
end

-- the small case where a buffered writer sees the error only at its
-- close: a few hundred bytes, no byte free
function TestFullDisk:testASmallWriteFailsToo()
  needmount()
  for _, w in ipairs(WRITERS) do
    local path = MNT .. "/" .. w.file
    fresh(function() w.write(path, 40) end)
    local old = readfile(path)
    fill(0)
    fails(message(w, path, FULL), w.write, path, 200)
    lu.assertTrue(readfile(path) == old, w.name)
    lu.assertEquals(listing(MNT), {w.file, "~fill"}, w.name)
  end
end

-- a new file on a full disk: nothing is left under its name
function TestFullDisk:testNoPartOfANewFile()
  needmount()
  for _, w in ipairs(WRITERS) do
    for _, free in ipairs{0, 8192} do
      fresh()
      fill(free)
      local path = MNT .. "/" .. w.file
      fails(message(w, path, FULL), w.write, path, 40000)
      lu.assertEquals(listing(MNT), {"~fill"}, w.name)
    end
  end
end

-- once there is room again the same write succeeds, and its file reads
-- back whole: nothing of the failure sticks
function TestFullDisk:testTheWriteSucceedsOnceThereIsRoom()
  needmount()
  fresh()
  fill(0)
  local x = rand(5000)
  fails("save: " .. MNT .. "/x.npy: " .. FULL, qkv.save, MNT .. "/x.npy", x)
  fails("save_safetensors: " .. MNT .. "/x.safetensors: " .. FULL,
        qkv.save_safetensors, MNT .. "/x.safetensors", {x = x})
  os.remove(FILL)
  qkv.save(MNT .. "/x.npy", x)
  qkv.savez(MNT .. "/x.npz", {x = x})
  qkv.save_safetensors(MNT .. "/x.safetensors", {x = x})
  qkv.test.assertTensorEqual(qkv.load(MNT .. "/x.npy"), x)
  qkv.test.assertTensorEqual(qkv.loadz(MNT .. "/x.npz").x, x)
  qkv.test.assertTensorEqual(qkv.load_safetensors(MNT .. "/x.safetensors").x, x)
end

-- /dev/full, written in place: the same message, and it stays a device
function TestFullDisk:testDevFull()
  for _, w in ipairs(WRITERS) do
    fails(message(w, "/dev/full", FULL), w.write, "/dev/full", 100)
  end
  lu.assertEquals(S.sh("stat -c %F /dev/full"), "character special file\n")
end

---------------------------------------------------------------- paths
TestPaths = {}

-- a folder that does not exist, a target that is a folder, a folder that
-- is a file: the system's reason, and nothing written anywhere
function TestPaths:testPathsThatCannotBeWritten()
  local d = TMP .. "/paths"
  assert(os.execute("mkdir " .. S.quote(d)))
  writefile(d .. "/file", "old")
  for _, w in ipairs(WRITERS) do
    fails(message(w, d .. "/no/" .. w.file, "No such file or directory"),
          w.write, d .. "/no/" .. w.file, 100)
    fails(message(w, d, "Is a directory"), w.write, d, 100)
    fails(message(w, d .. "/", "Is a directory"), w.write, d .. "/", 100)
    fails(message(w, d .. "/file/" .. w.file, "Not a directory"),
          w.write, d .. "/file/" .. w.file, 100)
    lu.assertEquals(listing(d), {"file"}, w.name)
    lu.assertEquals(readfile(d .. "/file"), "old")
  end
end

-- the canvas's path with a NUL byte is an error (it was cut at the NUL
-- and the file written under the shorter name)
function TestPaths:testNulInAPngPath()
  local d = TMP .. "/nul"
  assert(os.execute("mkdir " .. S.quote(d)))
  local cv <close> = png_bytes(10)
  fails("the path holds a NUL byte", cv.write_png, cv, d .. "/a\0b.png")
  lu.assertEquals(listing(d), {})
end

---------------------------------------------------------------- the CLI's files
TestCliFiles = {}

-- `qkv test -o junit -n FILE` on a full disk: the run fails and says why,
-- and no temp file is left. (Each suite's own LuaUnit writes its XML to
-- FILE first, in place, before the runner writes the whole run's: an old
-- FILE is not kept here.)
function TestCliFiles:testJunitFile()
  needmount()
  local suite = TMP .. "/test_one.lua"
  writefile(suite, 'local lu = require "luaunit"\n' ..
                   'function testOne() lu.assertEquals(1, 1) end\n' ..
                   'os.exit(lu.LuaUnit.run(), true)\n')
  local xml = MNT .. "/r.xml"
  fresh(function() writefile(xml, string.rep("x", 3000)) end)
  fill(0)
  local out, code = S.exe(EXE, "test", suite, "-o", "junit", "-n", xml)
  lu.assertEquals(code, 1, out)
  lu.assertStrContains(out, "qkv test: " .. xml .. ": " .. FULL)
  lu.assertStrContains(out, "1 passed, 1 failed")
  lu.assertEquals(listing(MNT), {"r.xml", "~fill"})
  os.remove(FILL)
  out, code = S.exe(EXE, "test", suite, "-o", "junit", "-n", xml)
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(readfile(xml), '<testsuites>')
end

-- `qkv kernel install --prefix DIR` on a full disk: exit status 1 with
-- the reason, and the kernelspec that was there is as it was
function TestCliFiles:testKernelInstall()
  needmount()
  local dir = MNT .. "/k/share/jupyter/kernels/qkv"
  fresh(function()
    local out, code = S.exe(EXE, "kernel", "install", "--prefix", MNT .. "/k")
    lu.assertEquals(code, 0, out)
  end)
  local names = listing(dir)
  lu.assertEquals(names, {"kernel.json", "logo-32x32.png", "logo-64x64.png"})
  local old = {}
  for _, n in ipairs(names) do old[n] = readfile(dir .. "/" .. n) end
  writefile(dir .. "/kernel.json", "{}")       -- so that a rewrite would show
  old["kernel.json"] = "{}"
  fill(0)
  local out, code = S.exe(EXE, "kernel", "install", "--prefix", MNT .. "/k")
  lu.assertEquals(code, 1, out)
  lu.assertStrContains(out, "qkv kernel install: " .. dir .. "/kernel.json: " .. FULL)
  lu.assertEquals(listing(dir), names)
  for _, n in ipairs(names) do lu.assertTrue(readfile(dir .. "/" .. n) == old[n], n) end
end

os.exit(lu.LuaUnit.run(), true)
