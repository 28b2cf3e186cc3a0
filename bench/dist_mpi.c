/*
** dist_mpi.c -- bench/dist.lua's peer for all_reduce: Open MPI's own
** MPI_Allreduce from C, in place on float32, over the sizes given, timed
** as dist_rank.lua times qkv.dist.all_reduce (a barrier, iterations, the
** slowest rank's time; QKV_BENCH_MAX_ITERS lowers the most iterations a
** size gets from 2000). Built by bench/dist.lua and bench/dist_tcp.lua
** with mpicc into build/.
**   mpirun -np P build/dist_mpi bytes...   prints "RESULT mpi <bytes> <s>"
*/
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main (int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *cap = getenv("QKV_BENCH_MAX_ITERS");     /* bench/dist_tcp.lua's */
  int most = cap && atoi(cap) >= 20 ? atoi(cap) : 2000;
  for (int a = 1; a < argc; a++) {
    long bytes = atol(argv[a]), n = bytes / 4;
    int iters = (int)(256L * 1024 * 1024 / (bytes > 4096 ? bytes : 4096));
    if (iters < 20) iters = 20;
    if (iters > most) iters = most;
    float *x = calloc((size_t)n, 4);
    for (int w = 0; w < 3; w++) MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++)
      MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t = (MPI_Wtime() - t) / iters;
    double worst;
    MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("RESULT mpi %ld %.9f\n", bytes, worst);
    free(x);
  }
  MPI_Finalize();
  return 0;
}
