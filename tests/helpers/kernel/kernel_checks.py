"""kernel_checks.py: qkv's Jupyter kernel through the real client
(jupyter_client), for tests/cli/test_kernel.lua.

    python kernel_checks.py JUPYTER_DIR LOG [CHECK ...]

JUPYTER_DIR holds share/jupyter/kernels/qkv (`qkv kernel install --prefix`);
the kernel is started from that kernelspec as Jupyter starts it, its
stderr going to LOG. Each check prints one line, "PASS name" or
"FAIL name: why", and the script ends with "DONE".
"""
import base64
import json
import os
import struct
import sys
import time
import traceback

JUPYTER_DIR, LOG = sys.argv[1], sys.argv[2]
ONLY = set(sys.argv[3:])
os.environ["JUPYTER_PATH"] = os.path.join(JUPYTER_DIR, "share", "jupyter")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402
from jupyter_client.session import Session  # noqa: E402

CHECKS = []
# every wait below only catches a hang: never a measure of speed, so that a
# kernel under the sanitizers on a busy machine passes as an idle one does
HANG = 300


def check(fn):
    CHECKS.append(fn)
    return fn


class Kernel:
    def __init__(self):
        self.log = open(LOG, "a")
        self.km = KernelManager(kernel_name="qkv")
        self.km.start_kernel(stderr=self.log)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=HANG)

    def close(self):
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)
        self.log.close()

    def iopub_for(self, msg_id, timeout=HANG):
        """the iopub messages of one request, up to its idle status"""
        out = []
        deadline = time.time() + timeout
        while True:
            m = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.time()))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            out.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return out

    def reply_for(self, msg_id, timeout=HANG):
        deadline = time.time() + timeout
        while True:
            m = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.time()))
            if m["parent_header"].get("msg_id") == msg_id:
                return m

    def run(self, code, timeout=HANG, **kw):
        msg_id = self.kc.execute(code, **kw)
        reply = self.reply_for(msg_id, timeout)
        return reply["content"], self.iopub_for(msg_id, timeout)


def types(msgs):
    return [m["msg_type"] for m in msgs]


def of(msgs, t):
    return [m["content"] for m in msgs if m["msg_type"] == t]


def expect(cond, why):
    if not cond:
        raise AssertionError(why)


K = None


@check
def kernelspec():
    spec = KernelSpecManager().get_kernel_spec("qkv")
    expect(spec.language == "lua", spec.language)
    expect(spec.interrupt_mode == "signal", spec.interrupt_mode)
    expect(spec.display_name == "qkv", spec.display_name)
    expect(os.path.isfile(spec.argv[0]) and spec.argv[1:] == ["kernel", "-f", "{connection_file}"],
           spec.argv)
    for size in (32, 64):
        with open(os.path.join(spec.resource_dir, "logo-%dx%d.png" % (size, size)), "rb") as f:
            head = f.read(24)
        expect(head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (size, size),
               "logo %d" % size)


@check
def kernel_info():
    msg_id = K.kc.kernel_info()
    r = K.reply_for(msg_id)["content"]
    expect(r["status"] == "ok" and r["protocol_version"] == "5.3", r)
    expect(r["implementation"] == "qkv" and r["language_info"]["name"] == "lua", r)
    expect(r["language_info"]["file_extension"] == ".lua", r)
    expect(types(K.iopub_for(msg_id)) == ["status", "status"], "busy, idle")


@check
def binds_loopback_only():
    info = K.km.get_connection_info()
    expect(info["ip"] == "127.0.0.1", info["ip"])
    ports = {info[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")}
    listening = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        for line in open(name).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":                                  # LISTEN
                host, port = f[1].split(":")
                listening.setdefault(int(port, 16), set()).add(host)
    for p in ports:
        expect(listening.get(p) == {"0100007F"}, "port %d listens on %s" % (p, listening.get(p)))


@check
def execute_result_and_count():
    r1, msgs = K.run("1+1")
    expect(r1["status"] == "ok", r1)
    expect(types(msgs) == ["status", "execute_input", "execute_result", "status"], types(msgs))
    res = of(msgs, "execute_result")[0]
    expect(res["data"]["text/plain"] == "2" and res["execution_count"] == r1["execution_count"], res)
    r2, msgs = K.run("x = qkv.tensor{{1, 2}, {3, 4}}\nx")
    expect(r2["execution_count"] == r1["execution_count"] + 1, (r1, r2))
    data = of(msgs, "execute_result")[0]["data"]
    expect(data["text/plain"] == "tensor([[1., 2.],\n        [3., 4.]])", data["text/plain"])
    expect("<table" in data["text/html"] and "4.0000" in data["text/html"], data["text/html"])
    _, msgs = K.run("local a = 2\na * 21")
    expect(of(msgs, "execute_result")[0]["data"]["text/plain"] == "42", "the last line's value")
    _, msgs = K.run("y = 5;")
    expect(not of(msgs, "execute_result"), "';' keeps it quiet")
    _, msgs = K.run("return _ ~= nil, y")
    expect(of(msgs, "execute_result")[0]["data"]["text/plain"] == "true\t5", "globals persist")
    _, msgs = K.run("1 + 1", silent=True)
    expect(types(msgs) == ["status", "status"], "silent: nothing but the status")


def merged(msgs):
    """stream, display_data and error messages, a stream's consecutive
    messages as one: how many there are depends on the machine's speed"""
    out = []
    for m in msgs:
        t, c = m["msg_type"], m["content"]
        if t == "stream" and out and out[-1][0] == c["name"]:
            out[-1] = (c["name"], out[-1][1] + c["text"])
        elif t == "stream":
            out.append((c["name"], c["text"]))
        elif t in ("display_data", "error"):
            out.append((t, c.get("evalue")))
    return out


@check
def streams_as_they_come():
    # stdout goes when stderr writes; stderr goes by the timer while the
    # cell computes: the cell waits for the client to say it has it
    go = os.path.join(JUPYTER_DIR, "go")
    code = ('print("first"); io.write("second\\n"); io.stderr:write("err\\n")\n'
            'local t, s, f = qkv.clock(), 0\n'
            'repeat for i = 1, 1e5 do s = s + i end; f = io.open(%r)\n'
            'until f or qkv.clock() - t > %d\n'
            'print(f and "last" or "the client never had err")' % (go, HANG))
    msg_id = K.kc.execute(code)
    got = []
    while not got or got[-1]["content"]["name"] != "stderr":
        m = K.kc.get_iopub_msg(timeout=HANG)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
            got.append(m)
    open(go, "w").close()
    msgs = K.iopub_for(msg_id)
    K.reply_for(msg_id)
    expect(merged(got + msgs) == [("stdout", "first\nsecond\n"), ("stderr", "err\n"),
                                  ("stdout", "last\n")], merged(got + msgs))


@check
def streams_in_order_and_batched():
    r, msgs = K.run('print("a"); io.stderr:write("b\\n"); print("c"); qkv.display(1); print("d")\n'
                    'io.write("e"); error("f")')
    expect(merged(msgs) == [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n"),
                            ("display_data", None), ("stdout", "d\ne"),
                            ("error", "In[%d]:2: f" % r["execution_count"])], merged(msgs))
    # a flood: every line arrives, in few messages; each flush is by size
    # (1 MiB), by age (one per 0.2 s of the cell at most) or the cell's end
    n = 51200
    t = time.time()
    _, msgs = K.run("for i = 0, %d do print(i) end" % (n - 1))
    elapsed = time.time() - t
    texts = [c["text"] for c in of(msgs, "stream")]
    expect("".join(texts) == "".join("%d\n" % i for i in range(n)), "lines lost or reordered")
    size = sum(len(x) for x in texts)
    expect(len(texts) <= size // (1 << 20) + elapsed / 0.2 + 2, (len(texts), size, elapsed))
    # 3 MiB in 1 KiB writes: no message holds more than 1 MiB and a write
    _, msgs = K.run('local s = string.rep("x", 1023) .. "\\n"\nfor i = 1, 3072 do io.write(s) end')
    texts = [c["text"] for c in of(msgs, "stream")]
    expect("".join(texts) == ("x" * 1023 + "\n") * 3072, "3 MiB: lines lost")
    expect(len(texts) >= 3 and max(len(x) for x in texts) <= (1 << 20) + 1024, [len(x) for x in texts])
    # silent cells stream nothing; the next cell's output is its own
    _, msgs = K.run('print("quiet")', silent=True)
    expect(types(msgs) == ["status", "status"], types(msgs))
    _, msgs = K.run('print("loud")')
    expect(of(msgs, "stream") == [{"name": "stdout", "text": "loud\n"}], of(msgs, "stream"))


@check
def errors_and_the_kernel_goes_on():
    r, msgs = K.run("error('boom')")
    err = of(msgs, "error")[0]
    expect(r["status"] == "error" and r["ename"] == "Error", r)
    expect(err["evalue"].endswith("boom") and err["traceback"][0] == err["evalue"], err)
    expect(any("in main chunk" in line for line in err["traceback"]), err["traceback"])
    expect(not any("kernel" in line for line in err["traceback"]), err["traceback"])
    # what is not a string shows as Lua's REPL shows it (lua.c's msghandler)
    for code, evalue in (("error()", "(error object is a nil value)"),
                         ("error(nil)", "(error object is a nil value)"),
                         ("error({})", "(error object is a table value)"),
                         ("error(true)", "(error object is a boolean value)"),
                         ("error(42)", "42"),
                         ("error(setmetatable({}, {__tostring = function() return 'own' end}))",
                          "own")):
        r, msgs = K.run(code)
        err = of(msgs, "error")[0]
        expect(r["evalue"] == evalue and err["evalue"] == evalue and err["traceback"][0] == evalue,
               (code, r["evalue"], err["evalue"]))
    r, msgs = K.run("qkv.scores(qkv.ones(3, 2), qkv.ones(5, 3))")
    expect("scores: Q is (3, 2) but K is (5, 3)" in r["evalue"], r["evalue"])
    r, msgs = K.run("for i = 1, do")
    expect(r["status"] == "error" and r["ename"] == "SyntaxError", r)
    r, msgs = K.run("2 * 21")
    expect(r["status"] == "ok" and of(msgs, "execute_result")[0]["data"]["text/plain"] == "42", r)


@check
def display_and_plots():
    _, msgs = K.run("qkv.display(qkv.ones(2)); qkv.display('text', 3)")
    shown = of(msgs, "display_data")
    expect(len(shown) == 2 and shown[0]["data"]["text/plain"] == "tensor([1., 1.])", shown)
    expect(shown[1]["data"]["text/plain"] == "text\t3", shown[1])
    code = ("w = qkv.softmax(qkv.randn(5, 7))\n"
            "qkv.plot.heatmap(w, {title = 'w', xlabels = {'a','b','c','d','e','f','g'}})")
    r, msgs = K.run(code)
    expect(r["status"] == "ok", r)
    img = of(msgs, "display_data")
    expect(len(img) == 1 and "image/png" in img[0]["data"], types(msgs))
    png = base64.b64decode(img[0]["data"]["image/png"])
    w, h = struct.unpack(">II", png[16:24])
    meta = img[0]["metadata"]["image/png"]
    expect(png[:8] == b"\x89PNG\r\n\x1a\n" and (w, h) == (meta["width"], meta["height"]), (w, h, meta))
    # the same figure written to a file has the size the PNG has
    _, msgs = K.run("local p = os.tmpname()\n"
                    "local l = qkv.plot.heatmap(w, {title = 'w', xlabels = {'a','b','c','d','e','f','g'},"
                    " file = p .. '.png'})\nos.remove(p); os.remove(p .. '.png')\nreturn l.width, l.height")
    size = of(msgs, "execute_result")[0]["data"]["text/plain"]
    expect(size == "%d\t%d" % (w, h), (size, w, h))
    _, msgs = K.run("qkv.plot.heatmap(w, {out = false}):sub(1, 0)")
    expect(not of(msgs, "display_data"), "out = false returns the text")
    # a line plot (loss curves) goes the same way
    r, msgs = K.run("qkv.plot.line({{3, 2, 1.5, 1.2}, {3, 2.5, 2, 1.9}}, "
                    "{label = {'train', 'valid'}, title = 'loss'})")
    expect(r["status"] == "ok", r)
    img = of(msgs, "display_data")
    expect(len(img) == 1 and "image/png" in img[0]["data"]
           and img[0]["data"]["text/plain"].startswith("<qkv.plot.line: "), types(msgs))
    png = base64.b64decode(img[0]["data"]["image/png"])
    w, h = struct.unpack(">II", png[16:24])
    meta = img[0]["metadata"]["image/png"]
    expect(png[:8] == b"\x89PNG\r\n\x1a\n" and (w, h) == (meta["width"], meta["height"]), (w, h, meta))


@check
def clear_output_and_help_pages():
    _, msgs = K.run('print("a"); qkv.clear_output(); qkv.clear_output(true); print("b")')
    seen = [(m["msg_type"], m["content"].get("wait", m["content"].get("text")))
            for m in msgs if m["msg_type"] in ("stream", "clear_output")]
    expect(seen == [("stream", "a\n"), ("clear_output", False), ("clear_output", True),
                    ("stream", "b\n")], seen)
    r, msgs = K.run("qkv.clear_output(1)")
    expect(r["status"] == "error" and "clear_output: bad argument #1 (boolean expected, got number)"
           in r["evalue"], r)
    r, msgs = K.run("?qkv.softmax")
    expect(r["status"] == "ok" and not of(msgs, "stream") and len(r["payload"]) == 1, (r, msgs))
    page = r["payload"][0]
    expect(page["source"] == "page" and page["start"] == 0
           and "Softmax along dim" in page["data"]["text/plain"], page)
    r, _ = K.run("  ?  ")
    expect("qkv.softmax" in r["payload"][0]["data"]["text/plain"], "? alone: the general help")
    r, msgs = K.run("?no_such_name_here")
    expect(r["status"] == "ok" and r["payload"] == [], r)
    expect(of(msgs, "stream") == [{"name": "stdout", "text": "no documentation for no_such_name_here\n"}],
           of(msgs, "stream"))


@check
def complete():
    msg_id = K.kc.complete("x = qkv.sof", 11)
    r = K.reply_for(msg_id)["content"]
    expect(r["status"] == "ok" and "qkv.softmax" in r["matches"], r)
    expect(r["cursor_start"] == 4 and r["cursor_end"] == 11, r)
    msg_id = K.kc.complete("é = x:tran", 10)                     # code points, not bytes
    r = K.reply_for(msg_id)["content"]
    expect("x:transpose" in r["matches"] and r["cursor_start"] == 4, r)


@check
def inspect():
    msg_id = K.kc.inspect("y = qkv.softmax(x)", 10)
    r = K.reply_for(msg_id)["content"]
    expect(r["found"] and "Softmax along dim" in r["data"]["text/plain"], r)
    msg_id = K.kc.inspect("no_such_name_here", 5)
    r = K.reply_for(msg_id)["content"]
    expect(r["status"] == "ok" and not r["found"], r)


@check
def is_complete():
    for code, status in (("for i = 1, 2 do", "incomplete"), ("x = 1", "complete"),
                         ("1 + 1", "complete"), ("x = = 1", "invalid"), ("f(", "incomplete")):
        msg_id = K.kc.is_complete(code)
        r = K.reply_for(msg_id)["content"]
        expect(r["status"] == status, (code, r))


@check
def history_and_comm_info():
    K.run("hist_mark = 1")
    msg_id = K.kc.history(hist_access_type="tail", n=2, output=False, raw=True)
    r = K.reply_for(msg_id)["content"]
    expect(r["status"] == "ok" and r["history"][-1][2] == "hist_mark = 1", r)
    expect(len(r["history"]) == 2, r)
    msg_id = K.kc.history(hist_access_type="search", pattern="hist_*", output=False, raw=True)
    r = K.reply_for(msg_id)["content"]
    expect([h[2] for h in r["history"]] == ["hist_mark = 1"], r)
    for code in ("hist_n = 1", "hist_n = 2", "hist_n = 1", "return hist_n * 7"):
        K.run(code)

    def search(**kw):
        msg_id = K.kc.history(hist_access_type="search", raw=True, **kw)
        return [h[2] for h in K.reply_for(msg_id)["content"]["history"]]
    expect(search(pattern="hist_n = ?", output=False) == ["hist_n = 1", "hist_n = 2", "hist_n = 1"],
           "glob")
    expect(search(pattern="hist_n = ?", output=False, unique=True) == ["hist_n = 2", "hist_n = 1"],
           "unique: each code once, at its latest")
    expect(search(pattern="hist_n = ?", output=False, n=2) == ["hist_n = 2", "hist_n = 1"],
           "n: the last n matches")
    expect(search(pattern="*hist_n [*]*", output=True) == [["return hist_n * 7", "7"]],
           "output: the text of the value")
    msg_id = K.kc.comm_info()
    r = K.reply_for(msg_id)["content"]
    expect(r == {"status": "ok", "comms": {}}, r)


@check
def interrupt():
    # each cell says it runs before the interrupt is sent: an interrupt
    # that came before the cell started would be one between cells
    for code in ("while true do end", "local s = 0\nfor i = 1, 1e12 do s = s + i end",
                 "local x = qkv.randn(2000, 2000)\nwhile true do x = x:matmul(x) / 2000 end"):
        msg_id = K.kc.execute('print("running")\n' + code)
        while True:
            m = K.kc.get_iopub_msg(timeout=HANG)
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
                break
        K.km.interrupt_kernel()
        r = K.reply_for(msg_id)["content"]
        expect(r["status"] == "error" and r["ename"] == "Interrupted", (code, r))
        K.iopub_for(msg_id)
    K.km.interrupt_kernel()                               # between cells: nothing happens
    time.sleep(0.3)
    r, msgs = K.run("6 * 7")
    expect(r["status"] == "ok" and of(msgs, "execute_result")[0]["data"]["text/plain"] == "42", r)


@check
def wrongly_signed_and_replayed_messages_are_dropped():
    bad = Session(key=b"not-the-key", username="mallory")
    bad.send(K.kc.shell_channel.socket, "execute_request",
             content={"code": "signed_badly = 1", "silent": False, "store_history": True,
                      "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    unsigned = Session(key=b"", username="mallory")
    unsigned.send(K.kc.shell_channel.socket, "execute_request",
                  content={"code": "unsigned = 1", "silent": False})
    # a valid message, then the same bytes again
    s = K.kc.session
    msg = s.msg("execute_request", content={"code": "replays = (replays or 0) + 1", "silent": False,
                                            "store_history": True, "user_expressions": {},
                                            "allow_stdin": False, "stop_on_error": True})
    frames = s.serialize(msg)
    K.kc.shell_channel.socket.send_multipart(frames)
    K.reply_for(msg["header"]["msg_id"])
    K.kc.shell_channel.socket.send_multipart(frames)
    time.sleep(1.0)
    _, msgs = K.run("return signed_badly, unsigned, replays")
    expect(of(msgs, "execute_result")[0]["data"]["text/plain"] == "nil\tnil\t1", msgs)
    log = open(LOG).read()
    expect("signature does not verify" in log and "seen before" in log, log[-500:])


@check
def garbage_is_dropped_and_the_kernel_goes_on():
    import hashlib
    import hmac
    key = K.km.session.key
    sock = K.kc.shell_channel.socket

    def signed(*parts):
        return [b"<IDS|MSG>", hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode(),
                *parts]
    for frames in ([b"x"], [b"<IDS|MSG>"], [b"<IDS|MSG>", b"", b"", b""],
                   signed(b"not json", b"{}", b"{}", b"{}"),
                   signed(b"[1, 2]", b"{}", b"{}", b"{}"),
                   signed(b'{"msg_type": 7}', b"{}", b"{}", b"[]"),
                   signed(b'{"msg_type": "execute_request"}', b"{}", b"{}", b'{"code": 5}'),
                   signed(b'{"msg_type": "complete_request"}', b"{}", b"{}",
                          b'{"code": "qkv.", "cursor_pos": -7}'),
                   signed(b'{"msg_type": "no_such_request"}', b"{}", b"{}", b"{}"),
                   signed(b'{"msg_type": "history_request"}', b"[]", b"null", b'{"n": "x"}'),
                   [b"\xff" * 100000]):
        sock.send_multipart(frames)
    time.sleep(0.5)
    r, msgs = K.run("6 * 7")
    expect(r["status"] == "ok" and of(msgs, "execute_result")[0]["data"]["text/plain"] == "42", r)


@check
def shutdown_and_restart():
    K.run("before_restart = 1")
    K.km.restart_kernel(now=False)
    K.kc.wait_for_ready(timeout=HANG)
    r, msgs = K.run("return before_restart == nil")
    expect(of(msgs, "execute_result")[0]["data"]["text/plain"] == "true", "a fresh kernel")
    msg_id = K.kc.shutdown()
    r = K.kc.get_control_msg(timeout=HANG) if hasattr(K.kc, "get_control_msg") else None
    deadline = time.time() + HANG
    while K.km.is_alive() and time.time() < deadline:
        time.sleep(0.1)
    expect(not K.km.is_alive(), "the kernel exits after shutdown_request")
    if r is not None:
        expect(r["msg_type"] == "shutdown_reply" and r["content"]["restart"] is False, r)


def main():
    global K
    names = [c.__name__ for c in CHECKS]
    try:
        K = Kernel()
    except Exception:
        for n in names:
            print("FAIL %s: the kernel did not start: %s" % (n, traceback.format_exc(limit=2)
                                                          .replace("\n", " | ")))
        print("DONE")
        return
    try:
        for c in CHECKS:
            if ONLY and c.__name__ not in ONLY:
                continue
            try:
                c()
                print("PASS %s" % c.__name__)
            except Exception as e:
                why = "%s: %s" % (type(e).__name__, e)
                print("FAIL %s: %s" % (c.__name__, why.replace("\n", "\\n")[:2000]))
            sys.stdout.flush()
    finally:
        K.close()
    print("DONE")


if __name__ == "__main__":
    main()
