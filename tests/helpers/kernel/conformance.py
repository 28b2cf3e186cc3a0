"""conformance.py: the Jupyter project's own kernel conformance checks
(jupyter_kernel_test's KernelTests) run against the qkv kernel, for
tests/cli/test_kernel.lua.

    python conformance.py JUPYTER_DIR LOG

JUPYTER_DIR holds share/jupyter/kernels/qkv (`qkv kernel install --prefix`);
the kernel's stderr goes to LOG. Each check prints one line, "PASS name",
"FAIL name: why" or "SKIP name: why", and the script ends with "DONE".
The class attributes are what jupyter_kernel_test asks a kernel to
describe: samples of each kind of message that qkv answers.
"""
import os
import sys
import unittest

JUPYTER_DIR, LOG = sys.argv[1], sys.argv[2]
os.environ["JUPYTER_PATH"] = os.path.join(JUPYTER_DIR, "share", "jupyter")

import jupyter_kernel_test  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402


class QkvKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = "qkv"
    language_name = "lua"
    file_extension = ".lua"

    code_hello_world = 'print("hello, world")'
    code_stderr = 'io.stderr:write("to stderr\\n")'
    code_generate_error = 'error("boom")'
    code_page_something = "?qkv.softmax"
    code_clear_output = 'print("gone"); qkv.clear_output()'
    code_inspect_sample = "qkv.softmax"

    completion_samples = [
        {"text": "qkv.softm", "matches": {"qkv.softmax"}},
        {"text": "math.fl", "matches": {"math.floor"}},
        {"text": "string.rev", "matches": {"string.reverse"}},
    ]
    complete_code_samples = ["x = 1", "print('hi')", "for i = 1, 2 do print(i) end", "1 + 1"]
    incomplete_code_samples = ["for i = 1, 2 do", "function f(x)", "t = {1, 2,", "f("]
    invalid_code_samples = ["x = = 1", "end", "for for"]

    code_execute_result = [
        {"code": "1 + 2", "result": "3"},
        {"code": "'a' .. 'b'", "result": "ab"},
        {"code": "qkv.ones(2)", "result": "tensor([1., 1.])"},
        {"code": "qkv.eye(2)", "mime": "text/html"},
    ]
    code_display_data = [
        {"code": "qkv.display(qkv.ones(2))", "mime": "text/plain"},
        {"code": "qkv.display(qkv.eye(2))", "mime": "text/html"},
        {"code": "qkv.plot.heatmap(qkv.eye(3))", "mime": "image/png"},
    ]
    # matches one of code_execute_result's cells, run several times
    code_history_pattern = "1 + *"
    supported_history_operations = ("tail", "range", "search")

    @classmethod
    def setUpClass(cls):
        cls.log = open(LOG, "a")
        cls.km, cls.kc = start_new_kernel(kernel_name=cls.kernel_name, stderr=cls.log)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.log.close()


class Report(unittest.TestResult):
    """one line per check; a check with subtests passes when all of them do"""

    def __init__(self):
        super().__init__()
        self.failed, self.skips = {}, {}

    @staticmethod
    def _name(test):
        test = getattr(test, "test_case", test)            # a subtest's check
        return getattr(test, "_testMethodName", None) or str(test)

    @staticmethod
    def _why(err):
        return ("%s: %s" % (err[0].__name__, err[1])).replace("\n", "\\n")[:2000]

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.failed.setdefault(self._name(test), self._why(err))

    def addFailure(self, test, err):
        self.failed.setdefault(self._name(test), self._why(err))
        if not hasattr(test, "_testMethodName"):           # setUpClass failed
            print("FAIL %s: %s" % (self._name(test), self.failed[self._name(test)]))

    addError = addFailure

    def addSkip(self, test, reason):
        self.skips.setdefault(self._name(test), reason)

    def stopTest(self, test):
        name = self._name(test)
        if name in self.failed:
            print("FAIL %s: %s" % (name, self.failed[name]))
        elif name in self.skips:
            print("SKIP %s: %s" % (name, self.skips[name]))
        else:
            print("PASS %s" % name)
        sys.stdout.flush()


def main():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(QkvKernelTests)
    result = Report()
    suite.run(result)
    print("DONE")


if __name__ == "__main__":
    main()
