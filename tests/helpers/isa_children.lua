-- isa_children.lua: one test of a file run again in a child process under
-- each $QKV_CPU cap (avx2, baseline; a cap is at most what this CPU has),
-- so that the narrower paths are checked on a machine that has the wider
-- ones. The child sees QKV_ISA_CHILD set and makes no children of its own.
--
--   local isa_children = dofile("tests/helpers/isa_children.lua")
--   isa_children(lu, "tests/core/test_x.lua", "testName")   -- in a test
local shell = dofile("tests/helpers/shell.lua")

return function(lu, file, test)
  if os.getenv("QKV_ISA_CHILD") then return end
  local exe = arg and arg[-1] or "build/qkv"
  for _, cap in ipairs{"avx2", "baseline"} do
    local out, rc = shell.sh(("QKV_ISA_CHILD=1 QKV_CPU=%s %s test -p '%s$' %s"):format(
      cap, shell.quote(exe), test, shell.quote(file)))
    lu.assertEquals(rc, 0, cap .. ": " .. out)
    lu.assertStrContains(out, "1 passed, 0 failed", false, cap .. ": " .. out)
  end
end
