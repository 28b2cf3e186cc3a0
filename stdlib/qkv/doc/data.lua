-- doc/data.lua: qkv.doc entries of qkv.data (stdlib/qkv/data.lua):
-- TensorDataset and DataLoader.

return {
  {name = "qkv.data.TensorDataset", sig = "qkv.data.TensorDataset(t1 [, t2, ...])", group = "data",
   doc = [=[A dataset of the rows of tensors that share their first dim: #ds is
that size and ds[i] is {t1[i], t2[i], ...}, row i of each as a tensor
(1-based; a negative i counts from the end). Tensors whose first dims
differ are an error naming their shapes. ds.tensors is the list given. A
qkv.data.DataLoader deals it out in batches. As
torch.utils.data.TensorDataset, whose ds[i] is a tuple and counts from 0.]=],
   example = [=[local ds = qkv.data.TensorDataset(qkv.tensor{{1, 2}, {3, 4}, {5, 6}},
                                  qkv.tensor({1, 2, 1}, "int64"))
local x, y = table.unpack(ds[2])
print(#ds, x, y)   --> 3	tensor([3., 4.])	tensor(2)]=]},

  {name = "qkv.data.DataLoader", sig = "qkv.data.DataLoader(dataset [, opts])", group = "data",
   doc = [=[The batches of dataset (a TensorDataset, or any table with #ds and
ds[i] giving a tensor or a list of tensors and numbers), an epoch per loop:
for x, y in loader do ... end. A batch is each field of its items stacked
along a new first dim, as PyTorch's default collate, given as several
values; #loader is the number of batches. opts: batch_size (1), shuffle
(false: in order; true: a new order each epoch, qkv.randperm's, so qkv.seed
repeats it), drop_last (false: the last batch may be short) and generator
(an integer seed: the shuffle draws from a generator of its own, the same
orders whatever qkv.seed says). Loops over one loader may nest or stop
early, each its own epoch. As torch.utils.data.DataLoader loading in the
calling thread (num_workers = 0).]=],
   example = [=[local ds = qkv.data.TensorDataset(qkv.arange(10):view(5, 2), qkv.arange(1, 6, "int64"))
local loader = qkv.data.DataLoader(ds, {batch_size = 2})
print(#loader)   --> 3
for x, y in loader do print(y) end
--> tensor([1, 2])
--> tensor([3, 4])
--> tensor([5])]=]},
}
