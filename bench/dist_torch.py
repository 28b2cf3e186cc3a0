# dist_torch.py -- bench/dist.lua's PyTorch peer: torch.distributed's gloo
# backend, all_reduce in place on float32 over the sizes given, timed as
# dist_rank.lua times qkv.dist.all_reduce. Started by mpirun, which gives
# each process its rank and the world's size in the environment.
#   mpirun -np P python dist_torch.py port bytes...  prints "RESULT gloo <bytes> <s>"
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    port = sys.argv[1]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port, rank=rank,
                            world_size=size)
    torch.set_num_threads(1)
    for arg in sys.argv[2:]:
        nbytes = int(arg)
        iters = min(2000, max(20, 256 * 1024 * 1024 // max(nbytes, 4096)))
        x = torch.zeros(nbytes // 4, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(x)
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        t = torch.tensor([(time.perf_counter() - t) / iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            print("RESULT gloo %d %.9f" % (nbytes, t.item()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
