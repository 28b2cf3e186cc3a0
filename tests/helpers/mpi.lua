-- mpi.lua: running a script on several ranks under Open MPI's mpirun for
-- the qkv.dist suites. Ranks may outnumber the cores (--oversubscribe);
-- the transports are shared memory within the machine (ob1 over vader),
-- which also keeps MPI from probing networks; root may run it (CI does).
local shell = dofile("tests/helpers/shell.lua")
local M = {}

-- why the suites cannot run here, or nil when they can
function M.missing(exe)
  if not os.execute("command -v mpirun >/dev/null 2>&1") then
    return "Open MPI's mpirun is not installed (`make deps` installs openmpi-bin)"
  end
  local lib = (exe:match("^(.*)/[^/]*$") or ".") .. "/lib/qkv/mpi.so"
  if not io.open(lib) then return lib .. " is not built (Open MPI's headers: libopenmpi-dev)" end
  return nil
end

M.ENV = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 " ..
        "OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1"
-- under `make test-asan` the ranks keep AddressSanitizer's checks but not
-- LeakSanitizer's: Open MPI leaves thousands of blocks at MPI_Finalize,
-- many from components it has already unloaded, which no suppression can
-- name (qkv's own leaks are looked for everywhere else)
-- (M.ASAN: that setting alone, for the suites that start mpirun their own
-- way, e.g. test_dist_net.lua's hosts; "" when not under a sanitizer)
M.ASAN = os.getenv("ASAN_OPTIONS") and
         "ASAN_OPTIONS=" .. shell.quote(os.getenv("ASAN_OPTIONS") .. ":detect_leaks=0") or ""
M.ENV = M.ENV .. " " .. M.ASAN

-- The ranks' output, each rank's whole: mpirun passes on each rank's output
-- as it reads it, and a read that ends mid-line splices another rank's
-- line into it (seen under the sanitizers on a busy machine: "ok ring
-- zigzag nk=2ok ring nk=2nq causal dq"), however the ranks buffer.  So
-- mpirun writes each rank's stdout and stderr into files under a folder of
-- its own (M.files(dir): the option), and M.gather(out, dir) returns
-- mpirun's own output followed by each rank's, rank by rank, each ending
-- its last line, and removes the folder.
function M.files(dir)
  return "--output-filename " .. shell.quote(dir .. ":nocopy")
end

function M.gather(out, dir)
  local ranks = shell.sh(("cd %s && for r in $(ls -d */rank.* 2>/dev/null | sort -t. -k2 -n); do " ..
    "for f in $r/stdout $r/stderr; do [ -s $f ] && { cat $f; [ -z \"$(tail -c1 $f)\" ] || echo; }; " ..
    "done; done"):format(shell.quote(dir)))
  os.execute("rm -rf " .. shell.quote(dir))
  return out .. ranks
end

-- runs `mpirun -np n exe script args...` with a time limit (seconds);
-- returns the output (mpirun's, then each rank's stdout and stderr), the
-- exit status and the time
function M.run(exe, n, script, limit, ...)
  local words = {}
  for i, a in ipairs{...} do words[i] = shell.quote(a) end
  local dir = shell.tmpdir()
  local cmd = ("env %s timeout -k 5 %d mpirun -np %d %s %s %s %s"):format(M.ENV, limit or 120, n,
    M.files(dir), shell.quote(exe), shell.quote(script), table.concat(words, " "))
  local t0 = qkv.clock()
  local out, code = shell.sh(cmd)
  return M.gather(out, dir), code, qkv.clock() - t0
end

-- a suite's setUp for the tests that need ranks: skipped, with the reason,
-- where they cannot run
function M.need(lu, exe)
  local why = M.missing(exe)
  if why then lu.skip(why) end
end

-- the rank script's run on n ranks succeeded, and every "ok" line came
-- from every rank, the names in `want` among them; returns the counts
function M.check(lu, out, code, n, want)
  lu.assertEquals(code, 0, out)
  local oks = M.oks(out)
  lu.assertTrue(next(oks) ~= nil, out)
  for name, k in pairs(oks) do lu.assertEquals(k, n, name .. "\n" .. out) end
  for _, name in ipairs(want or {}) do lu.assertEquals(oks[name], n, name .. "\n" .. out) end
  return oks
end

-- the lines of out that rank scripts print as "ok <name>", counted by name
function M.oks(out)
  local n = {}
  for name in out:gmatch("ok ([^\n]+)") do n[name] = (n[name] or 0) + 1 end
  return n
end

return M
