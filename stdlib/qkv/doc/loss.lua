-- doc/loss.lua: qkv.doc entries of the classification losses and the loss
-- modules (stdlib/qkv/nn/loss.lua): cross_entropy, nll_loss,
-- CrossEntropyLoss, NLLLoss and MSELoss (mse_loss is doc/grad.lua's).

local CLASSES = "qkv's classes count from 1, so a target holds 1 to C; "

return {
  {name = "qkv.nn.cross_entropy", sig = "qkv.nn.cross_entropy(input, target [, opts])",
   group = "functions",
   doc = [=[The cross entropy of the logits input, (N, C), (C) or (N, C, d1,
...), against target: int64 classes of input's shape less its class dim (]=] ..
CLASSES .. [=[ignore_index, -100 by default, is never one, so PyTorch's padding carries
over), or float probabilities of input's shape. opts, PyTorch's keywords:
reduction ("mean", "sum" or "none"), weight (a float (C) tensor of class
weights, also the third argument, as PyTorch's), ignore_index (a target
equal to it counts for nothing) and label_smoothing (0 to 1). The mean
divides by the summed weights of the targets kept, so it is nan when every
one is ignored; a class out of range is an error, and so is an argument
past opts (PyTorch's positional size_average, ignore_index, ... come as
options). It is differentiable. As torch.nn.functional.cross_entropy,
whose classes count from 0.]=],
   example = [=[local l = qkv.tensor{{0, 0}, {0, 0}}
print(qkv.nn.cross_entropy(l, qkv.tensor({1, 2}, "int64")))   --> tensor(0.6931)
print(qkv.nn.cross_entropy(l, qkv.tensor({1, -100}, "int64"), {reduction = "none"}))
--> tensor([0.6931, 0.0000])]=]},

  {name = "qkv.nn.nll_loss", sig = "qkv.nn.nll_loss(input, target [, opts])",
   group = "functions",
   doc = [=[The negative log-likelihood of the log-probabilities input, (N, C),
(C) or (N, C, d1, ...), at the int64 target classes: -input[i][target[i]],
weighted and reduced (]=] .. CLASSES .. [=[ignore_index, -100 by default, is
never one). opts: reduction ("mean", "sum" or "none"), weight (a float (C)
tensor of class weights, also the third argument) and ignore_index. The
mean divides by the summed weights of the targets kept; an argument past
opts is an error, as cross_entropy's. With input
x:log_softmax(2) it is qkv.nn.cross_entropy(x, target). As
torch.nn.functional.nll_loss, whose classes count from 0.]=],
   example = [=[local logp = qkv.tensor{{-1, -2}, {-3, -4}}
print(qkv.nn.nll_loss(logp, qkv.tensor({2, 1}, "int64")))   --> tensor(2.5000)]=]},

  {name = "qkv.nn.CrossEntropyLoss", sig = "qkv.nn.CrossEntropyLoss([opts])", group = "modules",
   doc = [=[The cross entropy as a module: loss(input, target) is
qkv.nn.cross_entropy(input, target, opts), for targets of classes 1 to C
(qkv's classes count from 1) or of probabilities. opts, PyTorch's keywords:
reduction ("mean"), weight (nil), ignore_index (-100, never a 1-based class)
and label_smoothing (0); the class weights may also come first,
CrossEntropyLoss(weight [, opts]), and a third argument is an error
(PyTorch's positional ignore_index comes as an option). They are its fields (loss.reduction,
...), read at each call; it has no parameters and prints as
CrossEntropyLoss(). As torch.nn.CrossEntropyLoss, whose classes count from
0.]=],
   example = [=[local loss = qkv.nn.CrossEntropyLoss{label_smoothing = 0.1}
local logits = qkv.tensor{{2, 0, 0}, {0, 0, 2}}
print(loss, loss(logits, qkv.tensor({1, 3}, "int64")))   --> CrossEntropyLoss()	tensor(0.3729)]=]},

  {name = "qkv.nn.NLLLoss", sig = "qkv.nn.NLLLoss([opts])", group = "modules",
   doc = [=[The negative log-likelihood as a module: loss(input, target) is
qkv.nn.nll_loss(input, target, opts), for log-probabilities input and
targets of classes 1 to C (qkv's classes count from 1). opts: reduction
("mean"), weight (nil; also the first argument) and ignore_index (-100),
its fields, read at each call. It has no parameters. As torch.nn.NLLLoss,
whose classes count from 0.]=],
   example = [=[local loss = qkv.nn.NLLLoss{reduction = "sum"}
local logp = qkv.tensor{{0, 0}, {0, 0}}:log_softmax(2)
print(loss(logp, qkv.tensor({1, 2}, "int64")))   --> tensor(1.3863)]=]},

  {name = "qkv.nn.MSELoss", sig = "qkv.nn.MSELoss([opts])", group = "modules",
   doc = [=[The mean squared error as a module: loss(input, target) is
qkv.nn.mse_loss(input, target, loss.reduction). opts: reduction ("mean",
"sum" or "none"), its field, read at each call. It has no parameters. As
torch.nn.MSELoss.]=],
   example = [=[local loss = qkv.nn.MSELoss{reduction = "sum"}
print(loss, loss(qkv.tensor{1, 2}, qkv.tensor{0, 0}))   --> MSELoss()	tensor(5.)]=]},
}
