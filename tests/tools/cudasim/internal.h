/*
** internal.h -- what the simulation's own sources share: runtime.cpp
** (errors, the device, events, memory) keeps them, scheduler.cpp (the grid
** runner) and products.cpp (tensor cores, cuBLAS) use them.  The kernels
** see only cudasim.h.
*/
#ifndef QKV_CUDASIM_INTERNAL_H
#define QKV_CUDASIM_INTERNAL_H
/* (before cudasim.h, whose __noinline__ the standard headers spell) */
#include <functional>
#include <memory>

#include "cudasim.h"

#include <mutex>

namespace cudasim {

extern std::mutex mu;                  /* errors, allocations, attributes */
extern cudaError_t last_error;
/* a fault inside a kernel kills the context: from then on every call
   fails with it, and cudaGetLastError cannot clear it (SIM_FAULT_AT=n
   makes the n-th launch such a fault, for tests of what follows one) */
extern cudaError_t sticky;

/* e becomes the last error, said on stderr unless it is out of memory */
cudaError_t fail(cudaError_t e, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

/* a kernel's dynamic shared memory without cudaFuncSetAttribute */
static const size_t DEFAULT_SMEM = 48 * 1024;
/* the limit cudaFuncSetAttribute gave kernel f, else DEFAULT_SMEM */
size_t smem_limit(const void *f);

/* the OS threads running blocks (SIM_WORKERS), the device's "SMs" */
unsigned workers(void);

}

/* the block's dynamic shared memory at shared-window address addr, n
   bytes (NULL, and a fault, outside it); a fault saying what */
unsigned char *sim_smem_at(uint32_t addr, size_t n, const char *what);
void sim_fault(const char *what);

/* until ready() (run on the calling thread, which may fault): the thread
   spins, tested again each pass of the scheduler; none able to go on is
   a deadlock */
void sim_wait_until(const std::function<bool()> &ready);
/* the calling thread steps aside for the others, to go on in the
   scheduler's next pass (after an mbarrier arrival: what it lets go may
   happen before the thread's next step, as on the GPU) */
void sim_reschedule(void);

/* mbarriers and TMA (tma.cpp), per block: forget the last block's, and at
   the block's end what it left undone (NULL: nothing) */
void sim_tma_begin_block(void);
const char *sim_tma_end_block(void);

/* wgmma's work, deferred to the wait for its group (scheduler.cpp) */
void sim_wg_issue(std::function<void()> work);

#endif
