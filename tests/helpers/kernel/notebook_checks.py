"""notebook_checks.py: notebooks/002_scaled_dot_product.ipynb run headless
with nbclient on the qkv kernel, each cell's outputs checked, for
tests/cli/test_kernel.lua.

    python notebook_checks.py JUPYTER_DIR NOTEBOOK

prints "PASS cell N" or "FAIL cell N: why" for each code cell, then DONE.
"""
import os
import sys

os.environ["JUPYTER_PATH"] = os.path.join(sys.argv[1], "share", "jupyter")

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402


def text(o):
    t = o.get("data", {}).get("text/plain") if "data" in o else o.get("text", "")
    return "".join(t) if isinstance(t, list) else (t or "")


def has_png(o):
    return "image/png" in o.get("data", {})


def streamed(outs):
    return "".join(text(o) for o in outs if o["output_type"] == "stream")


def variance(outs, label):
    for line in streamed(outs).splitlines():
        if line.startswith(label):
            return float(line.split(":")[1])
    return None


# what each code cell must show, in order
EXPECT = [
    lambda o: text(o[-1]).startswith("tensor([[[") and o[-1]["output_type"] == "execute_result",
    lambda o: text(o[-1]) == "true",
    lambda o: 300 < variance(o, "variance without scaling") < 700
              and 0.5 < variance(o, "variance with scaling") < 1.5,
    lambda o: len(o) == 1 and has_png(o[0]),
    lambda o: has_png(o[0]) and text(o[-1]) == "tensor([[1.0000, 1.0000, 1.0000, 1.0000, 1.0000]])",
    lambda o: "heads:\t(1, 8, 10, 64)" in streamed(o) and "merged back exactly:\ttrue" in streamed(o)
              and text(o[-1]) == "(1, 8, 10, 64)",
]


def main():
    nb = nbformat.read(sys.argv[2], as_version=4)
    NotebookClient(nb, kernel_name="qkv", timeout=300).execute()   # a hang catcher
    cells = [c for c in nb.cells if c.cell_type == "code"]
    if len(cells) != len(EXPECT):
        print("FAIL cells: %d code cells, %d expected" % (len(cells), len(EXPECT)))
    for i, (c, ok) in enumerate(zip(cells, EXPECT), 1):
        errors = [o for o in c.outputs if o["output_type"] == "error"]
        try:
            good = not errors and bool(c.outputs) and ok(c.outputs)
        except Exception as e:                       # a missing output
            good = False
            errors = [{"evalue": repr(e)}]
        if good:
            print("PASS cell %d" % i)
        else:
            print("FAIL cell %d: %s" % (i, (errors[0].get("evalue") if errors else
                                            [text(o)[:200] for o in c.outputs])))
    print("DONE")


if __name__ == "__main__":
    main()
