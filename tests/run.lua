-- run.lua: runs every tests/test_*.lua suite in its own qkv process (so
-- globals never leak between suites), echoes LuaUnit's output and closes
-- with one line "N passed, N failed" summed over the suites.
-- Usage: qkv tests/run.lua [dir-or-file ...]   (until `qkv test` exists)

local exe = arg[-1] or "qkv"
local targets = {...}
if #targets == 0 then targets = {"tests"} end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local files = {}
for _, t in ipairs(targets) do
  if t:match("%.lua$") then
    files[#files + 1] = t
  else
    local p = io.popen("ls " .. quote(t) .. "/test_*.lua 2>/dev/null")
    for f in p:lines() do files[#files + 1] = f end
    p:close()
  end
end

local passed, failed, skipped = 0, 0, 0
for _, f in ipairs(files) do
  print("== " .. f)
  local p = io.popen(quote(exe) .. " " .. quote(f) .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  io.write(out)
  local status = out:match("\n(Ran %d+ tests[^\n]*)") or out:match("^(Ran %d+ tests[^\n]*)")
  if status then
    local n = function(word) return tonumber(status:match("(%d+) " .. word)) or 0 end
    passed = passed + n("success")
    failed = failed + n("failure") + n("error")
    skipped = skipped + n("skipped")
    if not ok and n("failure") + n("error") == 0 then
      print(f .. ": exited with status " .. tostring(code) .. " after its tests")
      failed = failed + 1
    end
  else
    print(f .. ": no LuaUnit summary (exit status " .. tostring(code) .. "); counted as a failure")
    failed = failed + 1
  end
end

local line = string.format("%d passed, %d failed", passed, failed)
if skipped > 0 then line = line .. string.format(", %d skipped", skipped) end
print(line)
os.exit(failed == 0 and #files > 0 and 0 or 1)
