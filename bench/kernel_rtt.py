"""kernel_rtt.py -- the Python side of bench/kernel.lua: a Jupyter kernel
timed through jupyter_client, as a notebook front end sees it.

    python kernel_rtt.py JUPYTER_PATH KERNEL_NAME [ROUNDS]

prints "RESULT start_s rtt_ms": the median over 5 starts of the time from
start_kernel to the kernel_info_reply, and the median round trip of
execute_request("1+1") to the idle status (ROUNDS of them, 200 by default,
after 20 of warm-up).
"""
import os
import statistics
import sys
import time

os.environ["JUPYTER_PATH"] = sys.argv[1]
from jupyter_client.manager import KernelManager  # noqa: E402

NAME = sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 200


def start():
    km = KernelManager(kernel_name=NAME)
    t = time.perf_counter()
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)          # sends kernel_info until it answers
    return km, kc, time.perf_counter() - t


def rtt(kc):
    t = time.perf_counter()
    msg_id = kc.execute("1+1")
    while True:
        m = kc.get_iopub_msg(timeout=10)
        if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle"):
            return time.perf_counter() - t


def main():
    starts = []
    for _ in range(5):
        km, kc, s = start()
        starts.append(s)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    km, kc, _ = start()
    for _ in range(20):
        rtt(kc)
    times = [rtt(kc) for _ in range(ROUNDS)]
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    print("RESULT %.4f %.3f" % (statistics.median(starts), 1e3 * statistics.median(times)))


if __name__ == "__main__":
    main()
