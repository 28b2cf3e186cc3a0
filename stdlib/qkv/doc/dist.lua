-- doc/dist.lua: qkv.doc entries of qkv.dist (stdlib/qkv/dist/: init.lua,
-- ddp.lua, attention.lua). The examples run in a world of one;
-- docs/dist.md says how to start several ranks.

local ASYNC = [[ A last table {async_op = true} returns a handle at once instead:
h:wait() finishes the call and returns its result, h:is_completed() says
whether it has finished.]]

return {
  {name = "qkv.dist.init", sig = "qkv.dist.init()", group = "processes",
   doc = [[Joins the ranks that mpirun started (Open MPI); idempotent, and done by
the first use of any other qkv.dist call. Without a launcher the script is
a world of one: rank 0 of 1, every collective the identity, MPI not
started. An error when Open MPI is not installed. As
torch.distributed.init_process_group.]]},

  {name = "qkv.dist.is_initialized", sig = "qkv.dist.is_initialized()", group = "processes",
   doc = [[Whether init has run, explicitly or by a first call. It never starts
anything itself. As torch.distributed.is_initialized.]]},

  {name = "qkv.dist.rank", sig = "qkv.dist.rank()", group = "processes",
   doc = [[This process's rank, 0 to world_size() - 1. The numbers are MPI's, the
ones mpirun prints. Without mpirun it is 0. As torch.distributed.get_rank.]],
   example = [[print(qkv.dist.rank(), qkv.dist.world_size())   --> 0 1]]},

  {name = "qkv.dist.world_size", sig = "qkv.dist.world_size()", group = "processes",
   doc = [[How many ranks the job has. It is mpirun's -np, or 1 without mpirun.
As torch.distributed.get_world_size.]]},

  {name = "qkv.dist.barrier", sig = "qkv.dist.barrier([opts])", group = "collectives",
   doc = [[Returns when every rank has called it. A rank that calls another
collective instead is named in the error every rank gets. As
torch.distributed.barrier.]] .. ASYNC},

  {name = "qkv.dist.all_reduce", sig = "qkv.dist.all_reduce(t [, op [, opts]])",
   group = "collectives",
   doc = [[In place: t becomes its reduction over the ranks, and is returned. op is
"sum" (the default), "mean" (float tensors), "max" or "min"; on bool
tensors sum and max are or, min is and; float16 and bfloat16 add pairwise
in float32. The ranks must pass the same dtype, shape and op: where they
differ, every rank gets an error naming the ranks and what each passed. A
tensor that is not contiguous, or not on the CPU, goes through a copy.
As torch.distributed.all_reduce.]] .. ASYNC,
   example = [[local t = qkv.tensor({1, 2})
print(qkv.dist.all_reduce(t, "max"))    --> tensor([1., 2.])]]},

  {name = "qkv.dist.broadcast", sig = "qkv.dist.broadcast(t, src [, opts])", group = "collectives",
   doc = [[In place: rank src's t on every rank; returns t. Every rank must pass
the same dtype, shape and src. As torch.distributed.broadcast.]] .. ASYNC},

  {name = "qkv.dist.all_gather", sig = "qkv.dist.all_gather(t [, opts])", group = "collectives",
   doc = [[A new tensor (world_size, ...) holding every rank's t, rank r's at
index r + 1. Every rank must pass the same dtype and shape. As
torch.distributed.all_gather_into_tensor, stacked.]] .. ASYNC,
   example = [==[print(qkv.dist.all_gather(qkv.tensor({5, 6})))   --> tensor([[5., 6.]])]==]},

  {name = "qkv.dist.reduce_scatter", sig = "qkv.dist.reduce_scatter(t [, op [, opts]])",
   group = "collectives",
   doc = [[The reduction of t over the ranks (op as all_reduce's), cut along its
first dimension, which the world size must divide: rank r gets block r + 1,
a new tensor. As torch.distributed.reduce_scatter_tensor.]] .. ASYNC},

  {name = "qkv.dist.all_to_all", sig = "qkv.dist.all_to_all(t, split_dim, cat_dim [, opts])",
   group = "collectives",
   doc = [[t cut into world_size blocks along split_dim (which it must divide),
block j sent to rank j; returns the blocks this rank received joined along
cat_dim in rank order. Dims count from 1, or from -1 at the end. As
torch.distributed.all_to_all_single with the split and join made explicit.]] .. ASYNC},

  {name = "qkv.dist.send", sig = "qkv.dist.send(t, dst [, tag [, opts]])", group = "point to point",
   doc = [[Sends t to rank dst, with an integer tag in [0, 2^20] (0 by default).
Its dtype and shape go with it, for recv to check. As
torch.distributed.send.]] .. ASYNC},

  {name = "qkv.dist.recv", sig = "qkv.dist.recv(t, src [, tag [, opts]])", group = "point to point",
   doc = [[Fills t with what rank src sent with that tag; returns t. What came must
have t's dtype and shape, else an error naming both. As
torch.distributed.recv.]] .. ASYNC},

  {name = "qkv.dist.DDP", sig = "qkv.dist.DDP(module [, {bucket_cap_mb = 25}])",
   group = "training",
   doc = [[Wraps a qkv.nn module for data-parallel training, as PyTorch's
DistributedDataParallel: rank 0's parameters are broadcast at once. The
wrapper is a module whose child is the wrapped one, ddp.module: called, it
runs the module's forward, and every Module method (train, eval, to,
double, parameters, state_dict, zero_grad) reaches the wrapped module, so
an optimizer over the wrapper steps the tensors the forward uses; other
fields read through (ddp.weight is ddp.module.weight). During backward the gradients
are summed over the ranks in buckets of bucket_cap_mb, started while
backward goes on; when backward returns each .grad is the mean over the
ranks.]],
   example = [[local net = qkv.dist.DDP(qkv.nn.Linear(2, 1))
print(#net:parameters(), (net:named_parameters()()))    --> 2	module.weight]]},

  {name = "qkv.dist.ring_attention", sig = "qkv.dist.ring_attention(q, k, v [, opts])",
   group = "attention",
   doc = [[Attention over a sequence split across the ranks: each holds a
contiguous block of q, k and v (dim -2), in rank order, and gets its block
of qkv.attention's output on the whole sequence. The K/V blocks pass around
the ring while each rank keeps an online softmax (Ring Attention, Liu et
al. 2023); opts causal, mask, scale as qkv.attention's (docs/dist.md).
Differentiable.]]},

  {name = "qkv.dist.ulysses_attention", sig = "qkv.dist.ulysses_attention(q, k, v [, opts])",
   group = "attention",
   doc = [[As ring_attention, the DeepSpeed-Ulysses way: an all-to-all turns the
sequence blocks into groups of heads (the heads must divide among the
ranks), each rank runs the fused attention on the whole sequence for its
heads, and a second all-to-all turns them back. It sends less than the
ring on many ranks but holds the whole sequence for its heads.
Differentiable.]]},
}
