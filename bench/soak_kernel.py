"""soak_kernel.py -- qkv's Jupyter kernel over many cells, driven by the
real client (jupyter_client) as a notebook front end drives it: does the
kernel's resident memory grow cell after cell? Run by bench/soak.lua.

    python soak_kernel.py JUPYTER_PATH CELLS [EVERY]

JUPYTER_PATH holds kernels/qkv (`qkv kernel install --prefix`). The cells
cycle through ten kinds: a result, a print, a tensor (text and HTML), a
runtime error, a Lua table, a softmax, a heatmap shown as a PNG, a syntax
error, a backward pass, and a 2,000-byte line; every 100th cell is
followed by a complete_request and an inspect_request. Every EVERY cells
(CELLS / 20 by default) it prints "ROW cells rss_kib lua_kib": the
kernel process's resident memory (/proc/PID/statm), then its Lua heap
after a full collection (a cell of its own, kept out of the history). At the end "DONE cells
seconds wrong", wrong counting the cells whose reply was not the one
expected (ok, or error for the two error cells) or whose output did not
come. It measures; it asserts nothing.
"""
import os
import sys
import time

os.environ["JUPYTER_PATH"] = sys.argv[1]
from jupyter_client.manager import KernelManager  # noqa: E402

CELLS = int(sys.argv[2])
EVERY = int(sys.argv[3]) if len(sys.argv) > 3 else max(1, CELLS // 20)
PAGE = os.sysconf("SC_PAGE_SIZE")

# (code, reply status, the iopub message type that must come)
KINDS = [
    ("x = qkv.randn(64, 64); return x:matmul(x):sum():item()", "ok", "execute_result"),
    ('print("cell", {n})', "ok", "stream"),
    ("qkv.arange(12):view(3, 4)", "ok", "execute_result"),
    ('error("boom {n}")', "error", "error"),
    ("local t = {{}} for k = 1, 1000 do t[k] = k end; return #t", "ok", "execute_result"),
    ("y = qkv.randn(128):softmax(1)\ny:max():item()", "ok", "execute_result"),
    ("qkv.plot.heatmap(qkv.rand(6, 6))", "ok", "display_data"),
    ("x = = {n}", "error", "error"),
    ("w = qkv.randn(8, 8):requires_grad_()\nlocal loss = (w * w):sum()\nloss:backward()\n"
     "w.grad:sum():item()", "ok", "execute_result"),
    ('io.write(string.rep("x", 2000), "\\n")', "ok", "stream"),
]


def rss_kib(pid):
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * PAGE // 1024


def reply_for(kc, msg_id, timeout=30):
    deadline = time.time() + timeout
    while True:
        m = kc.get_shell_msg(timeout=max(0.1, deadline - time.time()))
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def iopub_types(kc, msg_id, timeout=30):
    """the iopub message types of one request, up to its idle status"""
    seen = []
    deadline = time.time() + timeout
    while True:
        m = kc.get_iopub_msg(timeout=max(0.1, deadline - time.time()))
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        seen.append(m["msg_type"])
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return seen


PROBE = 'collectgarbage() collectgarbage() return ("%d"):format(collectgarbage("count") // 1)'


def lua_kib(kc):
    """the kernel's Lua heap after a full collection, from a cell kept out
    of the history (store_history=False)"""
    msg_id = kc.execute(PROBE, store_history=False)
    reply_for(kc, msg_id)
    deadline, kib = time.time() + 30, -1
    while True:
        m = kc.get_iopub_msg(timeout=max(0.1, deadline - time.time()))
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "execute_result":
            kib = int(m["content"]["data"]["text/plain"].strip('"'))
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return kib


def main():
    km = KernelManager(kernel_name="qkv")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    pid = km.provisioner.pid
    wrong = 0
    t = time.perf_counter()
    print("ROW 0 %d %d" % (rss_kib(pid), lua_kib(kc)), flush=True)
    for n in range(1, CELLS + 1):
        code, status, want = KINDS[(n - 1) % len(KINDS)]
        msg_id = kc.execute(code.format(n=n))
        reply = reply_for(kc, msg_id)
        seen = iopub_types(kc, msg_id)
        if reply["content"]["status"] != status or want not in seen:
            wrong += 1
            if wrong <= 5:
                print("WRONG cell %d: %s %s, %s" % (n, reply["content"]["status"],
                                                    reply["content"].get("evalue", ""), seen),
                      flush=True)
        if n % 100 == 0:
            reply_for(kc, kc.complete("qkv.ra", 6))
            reply_for(kc, kc.inspect("qkv.randn", 9))
        if n % EVERY == 0:
            print("ROW %d %d %d" % (n, rss_kib(pid), lua_kib(kc)), flush=True)
    secs = time.perf_counter() - t
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    print("DONE %d %.1f %d" % (CELLS, secs, wrong), flush=True)


if __name__ == "__main__":
    main()
