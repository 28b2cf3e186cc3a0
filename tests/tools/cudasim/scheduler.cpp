/*
** scheduler.cpp -- the host simulation's grid runner (the model is
** described in cudasim.h): a launch's blocks spread over workers, each
** block's threads as fibers, barriers, warp operations and cp.async.
**
** A block runs as blockDim fibers on one OS thread.  The scheduler passes
** over them in thread order, running each ready fiber until it waits (at
** a barrier or warp operation) or ends.  The last thread to reach a
** barrier releases the others and goes on; a warp operation completes
** when every lane of its mask has arrived, each lane's value kept in one
** of two buffers (a lane cannot be two operations ahead of another, so
** two suffice).  A pass that runs nothing while threads remain is a
** deadlock (a barrier or warp operation some threads never reach): the
** launch fails with a description.  Threads that have ended count as
** arrived at __syncthreads (as on sm_70 and later), but a warp operation
** whose mask names an ended lane is a fault.
*/
#include "internal.h"

#include <stdarg.h>
#include <sys/mman.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <thread>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

using namespace cudasim;

/*
** Fibers.  On x86-64 a switch saves the callee-saved registers, the SSE
** and x87 control words and the stack pointer (a few nanoseconds; ucontext
** would make a system call each time); elsewhere ucontext.
*/
#if defined(__x86_64__)
extern "C" void sim_switch(void **save_sp, void *to_sp);
asm(R"(
  .text
  .globl sim_switch
  .hidden sim_switch
  .type sim_switch, @function
sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size sim_switch, .-sim_switch
)");
#endif

/* SPIN: at a wait on a condition another thread makes true (an mbarrier's
   phase, tma.cpp): run again each pass, where it tests and yields again */
enum { READY, WAIT_BAR, WAIT_WARP, SPIN, WAIT_NAMED, DONE, FAULTED };

/* a cp.async copy, done when its group is waited for (vm/cuda/mma.cuh) */
struct cp_copy { void *dst; const void *src; size_t n; };

struct fiber {
#if defined(__x86_64__)
  void *sp;
#else
  ucontext_t uc;
#endif
  int state;
  unsigned lin;                 /* linear thread index in the block */
  int named_id;                 /* WAIT_NAMED: the barrier's id */
  std::vector<cp_copy> open;    /* cp.async copies not yet committed */
  std::deque<std::vector<cp_copy>> groups;   /* committed, not yet waited for */
  /* wgmma.mma_async issued and not yet waited for, as products.cpp's
     work: open (since the last commit), then committed groups */
  std::vector<std::function<void()>> wg_open;
  std::deque<std::vector<std::function<void()>>> wg_groups;
};

struct warp {
  unsigned arrived, mask, gen;  /* lanes arrived at the operation in progress */
  int op;
  uint64_t val[2][32];
};

/* one OS thread running blocks, and the block it runs */
struct worker {
  char *stacks;                 /* 1024 stacks, each below a guard page */
  size_t stack_size;
  std::vector<fiber> f;
  std::vector<unsigned char> smem_buf;
  unsigned char *smem;
  size_t smem_size;             /* the launch's dynamic shared memory, bytes */
#if defined(__x86_64__)
  void *sched_sp;
#else
  ucontext_t sched_uc;
#endif
  unsigned n, cur, live, bar_arrived, bar_count, bar_gen;
  unsigned bar_res[2][2];       /* by gen parity: threads arrived, threads with v != 0 */
  unsigned named[16], named_n[16];   /* bar.sync/arrive id: threads arrived, of how many */
  warp w[32];
  unsigned ended[32];           /* per warp: lanes ended or absent */
  bool fault;
  unsigned seed;                /* SIM_ORDER=random */
  const char *name;
  dim3 block, grid;
  uint64_t block_id;
  void (*body)(void *);
  void *ctx;
};

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
static thread_local worker *cur_worker;

static size_t stack_size (void) {
  static size_t n;
  if (n == 0) {
    const char *e = getenv("SIM_STACK_KB");
    n = (size_t)(e ? atoi(e) : 256) * 1024;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    n = (n + page - 1) / page * page + page;          /* and a guard page */
  }
  return n;
}

static worker *new_worker (void) {
  worker *w = new worker();
  w->stack_size = stack_size();
  size_t page = (size_t)sysconf(_SC_PAGESIZE), total = w->stack_size * 1024;
  void *p = mmap(NULL, total, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) { perror("cudasim: mmap of the fiber stacks"); abort(); }
  w->stacks = (char *)p;
  for (int i = 0; i < 1024; i++) mprotect(w->stacks + i * w->stack_size, page, PROT_NONE);
  w->f.resize(1024);
  w->seed = 12345;
  return w;
}

/* workers persist (their stacks are mapped once); slot 0 is the caller's */
static worker *worker_slot (unsigned i) {
  static std::vector<worker *> slots;
  std::lock_guard<std::mutex> g(mu);
  if (slots.size() <= i) slots.resize(i + 1);
  if (slots[i] == NULL) slots[i] = new_worker();
  return slots[i];
}

static void set_thread_index (worker *w, unsigned lin) {
  threadIdx = dim3(lin % w->block.x, lin / w->block.x % w->block.y,
                   lin / (w->block.x * w->block.y));
}

/* back to the scheduler (from a fiber) */
static void yield (worker *w) {
  fiber *f = &w->f[w->cur];
#if defined(__x86_64__)
  sim_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
}

/* a fault inside a kernel: the launch fails; this fiber never resumes */
static void fault (worker *w, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail(cudaErrorLaunchFailure, "kernel %s, block %llu, thread %u: %s", w->name,
       (unsigned long long)w->block_id, w->f[w->cur].lin, msg);
  w->fault = true;
  w->f[w->cur].state = FAULTED;
  for (;;) yield(w);
}

static void release_barrier (worker *w) {
  unsigned g = w->bar_gen & 1;
  w->bar_res[g][0] = w->bar_arrived;
  w->bar_res[g][1] = w->bar_count;
  w->bar_arrived = w->bar_count = 0;
  w->bar_gen++;
  for (unsigned i = 0; i < w->n; i++)
    if (w->f[i].state == WAIT_BAR) w->f[i].state = READY;
}

static void release_warp (worker *w, unsigned wi) {
  warp &p = w->w[wi];
  p.arrived = 0;
  p.gen++;
  for (unsigned l = 0; l < 32 && wi * 32 + l < w->n; l++)
    if (w->f[wi * 32 + l].state == WAIT_WARP) w->f[wi * 32 + l].state = READY;
}

static void fiber_main (void) {
  worker *w = cur_worker;
  w->body(w->ctx);
  fiber *f = &w->f[w->cur];
  if (!f->open.empty() || !f->groups.empty())
    fault(w, "ended with cp.async copies never waited for (cp.async.wait_group 0)");
  bool in_flight = !f->wg_open.empty();
  for (const auto &g : f->wg_groups) in_flight = in_flight || !g.empty();
  if (in_flight)
    fault(w, "ended with wgmma.mma_async in flight (wgmma.commit_group, wgmma.wait_group 0)");
  unsigned wi = f->lin / 32, lane = f->lin % 32;
  f->state = DONE;
  w->live--;
  w->ended[wi] |= 1u << lane;
  if (w->w[wi].arrived && (w->w[wi].mask >> lane & 1))
    fault(w, "ended while lanes %#x of its warp wait at a warp operation with mask %#x",
          w->w[wi].arrived, w->w[wi].mask);
  if (w->bar_arrived && w->bar_arrived == w->live) release_barrier(w);
  for (;;) yield(w);
}

/* __syncthreads and its reductions: {threads arrived, how many gave v != 0} */
static const unsigned *block_barrier (int v) {
  worker *w = cur_worker;
  unsigned g = w->bar_gen & 1;
  w->bar_arrived++;
  w->bar_count += v != 0;
  if (w->bar_arrived == w->live) release_barrier(w);
  else {
    w->f[w->cur].state = WAIT_BAR;
    yield(w);
  }
  return w->bar_res[g];
}

void __syncthreads (void) { block_barrier(0); }
int __syncthreads_or (int v) { return block_barrier(v)[1] != 0; }
int __syncthreads_count (int v) { return (int)block_barrier(v)[1]; }
int __syncthreads_and (int v) {
  const unsigned *r = block_barrier(v);
  return r[1] == r[0];
}

unsigned sim_lane (void) { return cur_worker->f[cur_worker->cur].lin % 32; }

static const char *op_name (int op) {
  return op == SIM_SHFL ? "a shuffle" : op == SIM_VOTE ? "a vote" : "__syncwarp";
}

const uint64_t *sim_warp_exchange (sim_warp_op op, unsigned mask, uint64_t v) {
  worker *w = cur_worker;
  unsigned lin = w->f[w->cur].lin, wi = lin / 32, lane = lin % 32;
  warp &p = w->w[wi];
  if (!(mask >> lane & 1))
    fault(w, "%s with mask %#x, which leaves out the calling lane %u", op_name(op), mask, lane);
  if (mask & w->ended[wi])
    fault(w, "%s with mask %#x names lanes %#x that have ended or are outside the block",
          op_name(op), mask, mask & w->ended[wi]);
  if (p.arrived == 0) {
    p.mask = mask;
    p.op = op;
  } else if (p.mask != mask || p.op != op)
    fault(w, "%s with mask %#x while lanes %#x of its warp wait at %s with mask %#x",
          op_name(op), mask, p.arrived, op_name(p.op), p.mask);
  unsigned g = p.gen & 1;
  p.val[g][lane] = v;
  p.arrived |= 1u << lane;
  if (p.arrived == mask) release_warp(w, wi);
  else {
    w->f[w->cur].state = WAIT_WARP;
    yield(w);
  }
  return p.val[g];
}

void __syncwarp (unsigned mask) { sim_warp_exchange(SIM_SYNCWARP, mask, 0); }

void *sim_dynamic_smem (void) { return cur_worker->smem; }

/* shared-memory addresses as the shared window's (wgmma.cuh): the
   dynamic shared memory starts SIM_SMEM_SKEW bytes in, as if static
   __shared__ variables came first, so that a kernel that needs an
   alignment in the window must make it itself, as on the GPU */
enum { SIM_SMEM_SKEW = 0x90 };

uint32_t sim_smem_addr (const void *p) {
  worker *w = cur_worker;
  const unsigned char *b = (const unsigned char *)p;
  if (b < w->smem || b > w->smem + w->smem_size) {
    fault(w, "__cvta_generic_to_shared: %p is not in the block's dynamic shared memory", p);
    return 0;
  }
  return (uint32_t)(SIM_SMEM_SKEW + (b - w->smem));
}

unsigned char *sim_smem_at (uint32_t addr, size_t n, const char *what) {
  worker *w = cur_worker;
  if (addr < SIM_SMEM_SKEW || addr - SIM_SMEM_SKEW + n > w->smem_size) {
    fault(w, "%s: shared address 0x%x (%zu bytes) is outside the block's dynamic shared "
             "memory (0x%x bytes from 0x%x)", what, addr, n, (unsigned)w->smem_size,
          (unsigned)SIM_SMEM_SKEW);
    return NULL;
  }
  return w->smem + (addr - SIM_SMEM_SKEW);
}

void sim_fault (const char *what) { fault(cur_worker, "%s", what); }

/* bar.sync (wait) and bar.arrive: n threads, a multiple of 32, complete
   named barrier id; the arrivals of one round must agree on n */
void sim_named_bar (int id, int n, bool wait) {
  worker *w = cur_worker;
  if (id < 1 || id > 15 || n <= 0 || n % 32 || (unsigned)n > w->n)
    fault(w, "bar.%s %d, %d: an id outside 1 .. 15, or a count not a multiple of 32 "
             "within the block", wait ? "sync" : "arrive", id, n);
  if (w->named[id] && w->named_n[id] != (unsigned)n)
    fault(w, "bar.%s %d, %d while %u threads arrived there for %u", wait ? "sync" : "arrive",
          id, n, w->named[id], w->named_n[id]);
  w->named_n[id] = (unsigned)n;
  if (++w->named[id] == (unsigned)n) {
    w->named[id] = 0;
    for (unsigned i = 0; i < w->n; i++)
      if (w->f[i].state == WAIT_NAMED && w->f[i].named_id == id) w->f[i].state = READY;
    return;
  }
  if (wait) {
    w->f[w->cur].state = WAIT_NAMED;
    w->f[w->cur].named_id = id;
    yield(w);
  }
}

void sim_reschedule (void) { yield(cur_worker); }

void sim_wait_until (const std::function<bool()> &ready) {
  worker *w = cur_worker;
  while (!ready()) {
    w->f[w->cur].state = SPIN;
    yield(w);
  }
  w->f[w->cur].state = READY;
}

static void start_fiber (worker *w, unsigned i) {
  fiber &f = w->f[i];
  f.state = READY;
  f.lin = i;
  f.open.clear();
  f.groups.clear();
  f.wg_open.clear();
  f.wg_groups.clear();
  char *top = w->stacks + (size_t)(i + 1) * w->stack_size;
#if defined(__x86_64__)
  /* the frame sim_switch pops: control words, r15..r12, rbx, rbp, then
     fiber_main as the return address, entered with rsp = 8 mod 16 */
  uint64_t *sp = (uint64_t *)((uintptr_t)top & ~(uintptr_t)15);
  *--sp = 0;                                   /* fiber_main's return: never */
  *--sp = (uint64_t)(uintptr_t)fiber_main;
  for (int r = 0; r < 6; r++) *--sp = 0;
  *--sp = 0x1f80u | (uint64_t)0x037fu << 32;   /* mxcsr, x87 control word */
  f.sp = sp;
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = top - w->stack_size + sysconf(_SC_PAGESIZE);
  f.uc.uc_stack.ss_size = w->stack_size - sysconf(_SC_PAGESIZE);
  f.uc.uc_link = NULL;
  makecontext(&f.uc, fiber_main, 0);
#endif
}

static const char *state_name (int s) {
  return s == WAIT_BAR ? "__syncthreads" : s == WAIT_WARP ? "a warp operation"
         : s == SPIN ? "an mbarrier wait" : s == WAIT_NAMED ? "a named barrier" : "?";
}

/* the order of a pass over the fibers (SIM_ORDER): 0 forward (thread 0
   first), 1 reverse, 2 from a random thread each pass, 3 warp by warp,
   each warp as far as it can go before the next runs (a warp racing ahead
   to the next barrier: finds a missing barrier before a shared write);
   a kernel whose results change with it relies on an order the GPU does
   not promise */
static int order (void) {
  static int o = -1;
  if (o < 0) {
    const char *e = getenv("SIM_ORDER");
    o = !e ? 0 : !strcmp(e, "reverse") ? 1 : !strcmp(e, "random") ? 2 : !strcmp(e, "warps") ? 3 : 0;
  }
  return o;
}

/* runs fiber i until it waits or ends; whether it got anywhere (a
   spinning fiber that spins again did not) */
static bool resume (worker *w, unsigned i) {
  const bool spun = w->f[i].state == SPIN;
  w->cur = i;
  set_thread_index(w, i);
#if defined(__x86_64__)
  sim_switch(&w->sched_sp, w->f[i].sp);
#else
  swapcontext(&w->sched_uc, &w->f[i].uc);
#endif
  return !(spun && w->f[i].state == SPIN);
}

static bool runnable (const fiber &f) { return f.state == READY || f.state == SPIN; }

/* every thread of block b; false after a fault */
static bool run_block (worker *w, uint64_t b) {
  w->block_id = b;
  blockIdx = dim3((unsigned)(b % w->grid.x), (unsigned)(b / w->grid.x % w->grid.y),
                  (unsigned)(b / ((uint64_t)w->grid.x * w->grid.y)));
  w->live = w->n;
  w->bar_arrived = w->bar_count = 0;
  memset(w->named, 0, sizeof w->named);
  for (unsigned wi = 0; wi < 32; wi++) {
    w->w[wi].arrived = 0;
    unsigned have = wi * 32 >= w->n ? 0 : w->n - wi * 32 >= 32 ? 32 : w->n - wi * 32;
    w->ended[wi] = have == 32 ? 0 : ~((1u << have) - 1);
  }
  memset(w->smem, 0xff, w->smem_buf.size() - 128);        /* garbage, as on the GPU */
  for (unsigned i = 0; i < w->n; i++) start_fiber(w, i);
  sim_tma_begin_block();
  int ord = order();
  while (w->live) {
    bool ran = false;
    unsigned start = ord == 2 ? (unsigned)(rand_r(&w->seed) % w->n) : 0;
    if (ord == 3)
      for (unsigned wi = 0; wi * 32 < w->n; wi++)        /* each warp as far as it goes */
        for (bool more = true; more && !w->fault;) {
          more = false;
          for (unsigned i = wi * 32; i < wi * 32 + 32 && i < w->n && !w->fault; i++)
            if (runnable(w->f[i]) && resume(w, i)) ran = more = true;
        }
    else
      for (unsigned j = 0; j < w->n && !w->fault; j++) {
        unsigned i = ord == 1 ? w->n - 1 - j : (start + j) % w->n;
        if (runnable(w->f[i]) && resume(w, i)) ran = true;
      }
    if (w->fault) return false;
    if (!ran) {
      unsigned first = 0;
      while (first < w->n && w->f[first].state == DONE) first++;
      fail(cudaErrorLaunchFailure,
           "kernel %s, block %llu: deadlock: %u of %u threads wait (thread %u at %s, "
           "%u threads at __syncthreads) and none can go on",
           w->name, (unsigned long long)b, w->live, w->n, first,
           state_name(w->f[first].state), w->bar_arrived);
      return false;
    }
  }
  for (int id = 1; id < 16; id++)
    if (w->named[id]) {
      fail(cudaErrorLaunchFailure, "kernel %s, block %llu: ended with %u of %u threads arrived "
           "at named barrier %d", w->name, (unsigned long long)b, w->named[id], w->named_n[id], id);
      return false;
    }
  if (const char *why = sim_tma_end_block()) {
    fail(cudaErrorLaunchFailure, "kernel %s, block %llu: %s", w->name, (unsigned long long)b, why);
    return false;
  }
  return true;
}

static bool trace (void) {
  static int t = -1;
  if (t < 0) t = getenv("SIM_TRACE") != NULL;
  return t;
}

void sim_run_grid (const char *name, const void *kernel, sim_cfg_t c, void (*body)(void *),
                   void *ctx) {
  uint64_t threads = (uint64_t)c.block.x * c.block.y * c.block.z;
  uint64_t blocks = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
  size_t limit = c.smem > DEFAULT_SMEM ? smem_limit(kernel) : DEFAULT_SMEM;
  if (trace())
    fprintf(stderr, "cudasim: %s<<<(%u,%u,%u), (%u,%u,%u), %zu>>>\n", name, c.grid.x, c.grid.y,
            c.grid.z, c.block.x, c.block.y, c.block.z, c.smem);
  if (threads == 0 || threads > 1024 || c.block.z > 64 || blocks == 0 ||
      c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535) {
    fail(cudaErrorInvalidConfiguration, "launch of %s: grid (%u,%u,%u), block (%u,%u,%u)", name,
         c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
    return;
  }
  if (c.smem > limit) {
    fail(cudaErrorInvalidValue,
         "launch of %s: %zu bytes of dynamic shared memory, over its limit %zu%s", name, c.smem,
         limit, limit == DEFAULT_SMEM ? " (no cudaFuncSetAttribute)" : "");
    return;
  }
  static long fault_at = -1, launches;
  if (fault_at < 0) fault_at = getenv("SIM_FAULT_AT") ? atol(getenv("SIM_FAULT_AT")) : 0;
  if (sticky || ++launches == fault_at) {
    std::lock_guard<std::mutex> g(mu);
    if (!sticky) fprintf(stderr, "cudasim: launch %ld (%s) faults, as SIM_FAULT_AT says\n",
                         launches, name);
    last_error = sticky = cudaErrorIllegalAddress;
    return;
  }
  unsigned nw = workers();
  if (nw > blocks) nw = (unsigned)blocks;
  std::atomic<uint64_t> next(0);
  std::atomic<bool> failed(false);
  auto run = [&](unsigned slot) {
    worker *w = worker_slot(slot);
    worker *saved = cur_worker;
    cur_worker = w;
    w->n = (unsigned)threads;
    w->block = c.block;
    w->grid = c.grid;
    w->name = name;
    w->body = body;
    w->ctx = ctx;
    w->fault = false;
    w->bar_gen = 0;
    w->smem_buf.resize(c.smem + 128);
    w->smem_size = c.smem;
    w->smem = (unsigned char *)(((uintptr_t)w->smem_buf.data() + 127) & ~(uintptr_t)127);
    blockDim = c.block;
    gridDim = c.grid;
    for (uint64_t b; !failed && (b = next++) < blocks;)
      if (!run_block(w, b)) failed = true;
    cur_worker = saved;
  };
  std::vector<std::thread> th;
  for (unsigned s = 1; s < nw; s++) th.emplace_back(run, s);
  run(0);
  for (auto &t : th) t.join();
}

void sim_check_align (const void *p, size_t align, const char *what) {
  if ((uintptr_t)p % align != 0)
    fault(cur_worker, "%s: address %p is not %zu-byte aligned", what, p, align);
}


/* cp.async: a copy is queued, and done only when a wait leaves its group
   among the n most recent or fewer, so that a kernel that reads shared
   memory before waiting reads what was there before */

void sim_cp_async (void *dst, const void *src, size_t n) {
  worker *w = cur_worker;
  w->f[w->cur].open.push_back({dst, src, n});
}

void sim_cp_commit (void) {
  fiber &f = cur_worker->f[cur_worker->cur];
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}

/* wgmma: products.cpp's work for one wgmma.mma_async, run when its group
   is waited for (the GPU reads shared memory and writes the accumulators
   at some time before the wait: the simulation takes the latest) */
void sim_wg_issue (std::function<void()> work) {
  cur_worker->f[cur_worker->cur].wg_open.push_back(std::move(work));
}

void sim_wg_commit (void) {
  fiber &f = cur_worker->f[cur_worker->cur];
  /* (with nothing issued since the last, an empty group, as on the GPU:
     it counts in wgmma.wait_group's n) */
  f.wg_groups.push_back(std::move(f.wg_open));
  f.wg_open.clear();
}

void sim_wg_wait (int n) {
  fiber &f = cur_worker->f[cur_worker->cur];
  if (!f.wg_open.empty())
    fault(cur_worker, "wgmma.wait_group with wgmma.mma_async not committed (wgmma.commit_group)");
  while (f.wg_groups.size() > (size_t)n) {
    std::vector<std::function<void()>> g = std::move(f.wg_groups.front());
    f.wg_groups.pop_front();
    for (auto &work : g) work();
  }
}

void sim_cp_wait (int n) {
  fiber &f = cur_worker->f[cur_worker->cur];
  while (f.groups.size() > (size_t)n) {
    for (const cp_copy &c : f.groups.front()) memcpy(c.dst, c.src, c.n);
    f.groups.pop_front();
  }
}
