-- cuda_parts.lua: every part of the cross-backend suite
-- (tests/backends/cuda/test_*.lua) in this one process, as one suite, with
-- LuaUnit's options after it:
--
--   build/qkv tests/helpers/cuda_parts.lua -p Reduce -x OutOfMemory
--
-- For compute-sanitizer (tests/tools/gpu_check.sh), which then watches one
-- process, starts the device once and sees the tests in the order and with
-- the random draws of the suite before it was split; `qkv test
-- tests/backends/cuda/` runs each part in a child process of its own.
local C = dofile("tests/helpers/cuda_suite.lua")
for _, path in ipairs(C.parts()) do dofile(path) end
-- (the runner then runs the Test* classes the parts defined: a script
-- that loaded LuaUnit and defines tests)
