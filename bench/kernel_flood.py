"""kernel_flood.py -- the Python side of bench/kernel.lua's print flood: a
cell that prints the numbers 0 .. N-1, one print call each, timed through
jupyter_client as a notebook front end sees it.

    python kernel_flood.py JUPYTER_PATH KERNEL_NAME CODE N [TIMEOUT_S]

prints "FLOOD seconds messages bytes complete": the time from the
execute_request to the idle status (by then the client has every stream
message of the cell: iopub keeps order), the number of stream messages,
the bytes of text they carried, and 1 when that text is exactly the N
lines (0 when some were lost). Past TIMEOUT_S (300 by default) it stops
waiting and prints what had come by then, with the time as TIMEOUT_S.
"""
import os
import sys
import time
from queue import Empty

os.environ["JUPYTER_PATH"] = sys.argv[1]
from jupyter_client.manager import KernelManager  # noqa: E402

NAME, CODE, N = sys.argv[2], sys.argv[3], int(sys.argv[4])
TIMEOUT = float(sys.argv[5]) if len(sys.argv) > 5 else 300.0


def main():
    km = KernelManager(kernel_name=NAME)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    kc.execute("1+1", silent=False)                       # warm up, then drain
    while True:
        m = kc.get_iopub_msg(timeout=10)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    t = time.perf_counter()
    msg_id = kc.execute(CODE)
    parts, messages, done = [], 0, False
    while not done:
        left = TIMEOUT - (time.perf_counter() - t)
        try:
            m = kc.get_iopub_msg(timeout=max(0.01, left))
        except Empty:
            break
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            messages += 1
            parts.append(m["content"]["text"])
        done = m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
    elapsed = time.perf_counter() - t if done else TIMEOUT
    text = "".join(parts)
    complete = text == "".join("%d\n" % i for i in range(N))
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    print("FLOOD %.3f %d %d %d" % (elapsed, messages, len(text.encode()), complete))


if __name__ == "__main__":
    main()
