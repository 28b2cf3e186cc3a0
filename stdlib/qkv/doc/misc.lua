-- doc/misc.lua: qkv.doc entries of qkv.test (assertions for LuaUnit
-- suites), qkv.repl (the REPL's settings) and qkv.help itself.

return {
  ---------------------------------------------------------------- qkv.test
  {name = "qkv.test.assertClose", sig = "qkv.test.assertClose(a, b [, opts])",
   group = "assertions",
   doc = [[Asserts that a and b, tensors or numbers, are close elementwise:
|a - b| <= atol + rtol |b|. b is the expected value, opts default to
{rtol = 1e-5, atol = 1e-8}, and the comparison is in float64. A number
against a tensor compares every element, and two tensors must have the
same shape; NaN is close to nothing, and equal infinities are close. A failure is a
LuaUnit failure whose message gives the shapes, how many elements differ,
the largest difference, its 1-based index and the two values there;
unknown options or negative tolerances are errors. As
torch.testing.assert_close.]]},

  {name = "qkv.test.assertShape", sig = "qkv.test.assertShape(x, shape)",
   group = "assertions",
   doc = [[Asserts that the tensor x has the shape given as a table of
integer sizes, such as {3, 4}, or as another tensor's x.shape. A failure
is a LuaUnit failure: assertShape: expected shape (3, 4), got (3, 5). An x
that is not a tensor, or a shape that is not a table of integers, is an
error naming the argument.]]},

  {name = "qkv.test.assertTensorEqual", sig = "qkv.test.assertTensorEqual(a, b)",
   group = "assertions",
   doc = [[Asserts that the tensors a and b have the same shape, the same
dtype and equal elements, compared in their own dtype. NaN equals NaN here,
so that a tensor equals its copy, where torch.equal says false. A failure
is a LuaUnit failure that gives the shapes or dtypes that differ, or how
many elements differ and the first of them, by 1-based index, with the two
values. Arguments that are not tensors are errors naming them.]]},

  {name = "qkv.test.skipUnlessCuda", sig = "qkv.test.skipUnlessCuda()",
   group = "assertions",
   doc = [[Skips the running test, as LuaUnit's skip does, unless
qkv.cuda_available() is true. Call it first in a test that needs a GPU;
qkv test then counts the test as skipped rather than failed. As
pytest.mark.skipif(not torch.cuda.is_available()).]]},

  ---------------------------------------------------------------- qkv.repl
  {name = "qkv.repl.timing", sig = "qkv.repl.timing([on | seconds])", group = "settings",
   doc = [[Shows each REPL command's wall time, right-aligned after its
output, when it is over 10 ms (12.3 ms, 1.52 s). qkv.repl.timing(false)
turns that off and qkv.repl.timing(true) on again at 10 ms (the
default); a number
shows the commands over that many seconds (qkv.repl.timing(1): the slow
ones only). It returns whether timing is on, so qkv.repl.timing() only
asks; any other argument, or seconds below 0, is an error. As Torch7's
trepl timing.]]},

  ---------------------------------------------------------------- qkv.help
  {name = "qkv.help", sig = "qkv.help([x])", group = "runtime",
   doc = [[Prints the documentation of x: a function's signature and
description, a namespace's functions, or with no argument how to use the
REPL. x is a function (qkv.softmax), a name as a string ("softmax",
"x:matmul", "qkv.nn.Linear"), a namespace (qkv.nn, qkv.plot, qkv) or a
tensor, which gives the tensor methods. The qkv executable has it as the
global help too, in scripts and suites as in the REPL, where ?name shows
the same as help(name). Something undocumented prints no documentation for it;
require("qkv.doc").text(x) returns the text instead of printing it.]]},

  {name = "qkv.display", sig = "qkv.display(...)", group = "runtime",
   doc = [[Shows values as a command's results show. In a Jupyter notebook
(the qkv kernel) each call is a display_data output: the REPL's text as
text/plain, and a small tensor (at most 2-D, 400 elements) also as an
HTML table, so a cell can show several values, not only its last one. In
the REPL or a script it prints them as the REPL prints results. As
IPython.display.display.]]},

  {name = "qkv.clear_output", sig = "qkv.clear_output([wait])", group = "runtime",
   doc = [[Clears the output of the running cell in a Jupyter notebook (the
qkv kernel): what it printed and displayed so far goes. With wait = true
the old output stays until new output comes, so that a loop that redraws
a plot or a line does not flicker. In the REPL or a script it does
nothing. As IPython.display.clear_output.]]},
}

