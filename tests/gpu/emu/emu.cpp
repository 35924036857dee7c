/* emu.cpp — runs kernels/cuda on the CPU for machines without a GPU (see
 * cuda_runtime.h): a fiber per CUDA thread, switched by a few lines of
 * x86-64 assembly at barriers.  The host API (guarded memory, streams,
 * cudaGetLastError) is the emulated runtime, cudart.c.
 * It checks the kernels' indexing and arithmetic against the CPU twins in
 * CI; it says nothing about races between real warps or about speed.
 */
#include "cuda_runtime.h"
#include "cuemu.h"

#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#if !defined(__x86_64__)
#error "the kernel emulator switches fibers with x86-64 assembly"
#endif

dim3 kg_emu_grid_dim, kg_emu_block_dim, kg_emu_block_idx;

/* Saves the callee-saved registers on the current stack, stores its
 * pointer in *save and resumes the fiber whose stack pointer is to. */
extern "C" void kg_emu_switch(void **save, void *to);
asm(".text\n"
    ".globl kg_emu_switch\n"
    "kg_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n");

enum { EMU_RUN, EMU_WAIT_BLOCK, EMU_WAIT_WARP, EMU_DONE };
enum { EMU_STACK = 128 * 1024 };

struct EmuFiber {
    void *sp;
    int state;
    int stack;                                /* its stack; -1: not started yet */
};

static EmuFiber g_fiber[1024];
static char *g_stacks;                       /* 1024 stacks of EMU_STACK bytes */
static int g_free[1024], g_nfree;            /* stacks no live thread uses (LIFO) */
static void *g_sched_sp;
static int g_cur, g_nthreads;
static const std::function<void()> *g_body;
static int g_xi[1024];                       /* __syncthreads_or's slots */
/* Warp exchange slots, two sets used in turn by each lane: a lane writes set
 * p, waits once for its warp, reads set p; its next operation writes the
 * other set, and set p is written again only after one more warp barrier,
 * which every lane reaches after reading it. */
static float g_wf[2][1024];
static int g_wi[2][1024];
static unsigned g_wu[2][1024], g_wm[2][1024];   /* match / reduce: value and mask */
static unsigned char g_wpar[1024];
static unsigned g_wgen[1024];                /* warp operations each lane has made */
/* One kernel at a time: the fibers, their stacks and the dims are global,
 * and the runtime launches from its host worker thread too. */
static std::mutex g_launch_mu;

dim3 kg_emu_thread_idx(void)
{
    dim3 d = { (unsigned)g_cur, 0, 0 };
    return d;
}

/* Parks the current fiber in state st and returns to the scheduler. */
static void emu_wait(int st)
{
    g_fiber[g_cur].state = st;
    kg_emu_switch(&g_fiber[g_cur].sp, g_sched_sp);
}

/* Where every fiber starts: the kernel body, then back for good. */
static void emu_entry(void)
{
    (*g_body)();
    g_fiber[g_cur].state = EMU_DONE;
    kg_emu_switch(&g_fiber[g_cur].sp, g_sched_sp);
    abort();   /* a finished fiber is never resumed */
}

void __syncthreads(void)
{
    emu_wait(EMU_WAIT_BLOCK);
}

int __syncthreads_or(int pred)
{
    g_xi[g_cur] = pred != 0;
    emu_wait(EMU_WAIT_BLOCK);
    int r = 0;
    for (int t = 0; t < g_nthreads; t++) r |= g_fiber[t].state != EMU_DONE && g_xi[t];
    emu_wait(EMU_WAIT_BLOCK);
    return r;
}

/* Every warp operation here is for full warps. */
static void emu_full_mask(unsigned mask)
{
    if (mask != 0xffffffffu) {
        fprintf(stderr, "emu: warp operation with a partial mask %#x\n", mask);
        abort();
    }
}

unsigned __ballot_sync(unsigned mask, int pred)
{
    emu_full_mask(mask);
    int p = g_wpar[g_cur];
    g_wpar[g_cur] = (unsigned char)(p ^ 1);
    g_wi[p][g_cur] = pred != 0;
    g_wgen[g_cur]++;
    emu_wait(EMU_WAIT_WARP);
    unsigned r = 0;
    int w0 = g_cur & ~31;
    for (int l = 0; l < 32 && w0 + l < g_nthreads; l++)
        if (g_wi[p][w0 + l]) r |= 1u << l;
    return r;
}

float __shfl_xor_sync(unsigned mask, float v, int lane_xor)
{
    emu_full_mask(mask);
    int p = g_wpar[g_cur];
    g_wpar[g_cur] = (unsigned char)(p ^ 1);
    g_wf[p][g_cur] = v;
    unsigned gen = ++g_wgen[g_cur];
    emu_wait(EMU_WAIT_WARP);
    int src = (g_cur & ~31) | ((g_cur & 31) ^ lane_xor);
    /* the source made this operation too (it may have ended since) */
    if (src >= g_nthreads || g_wgen[src] < gen) {
        fprintf(stderr, "emu: shuffle from lane %d, which is not running\n", src);
        abort();
    }
    return g_wf[p][src];
}

unsigned __match_any_sync(unsigned mask, unsigned value)
{
    emu_full_mask(mask);
    int p = g_wpar[g_cur];
    g_wpar[g_cur] = (unsigned char)(p ^ 1);
    g_wu[p][g_cur] = value;
    g_wgen[g_cur]++;
    emu_wait(EMU_WAIT_WARP);
    unsigned r = 0;
    int w0 = g_cur & ~31;
    for (int l = 0; l < 32 && w0 + l < g_nthreads; l++)
        if (g_fiber[w0 + l].state != EMU_DONE && g_wu[p][w0 + l] == value) r |= 1u << l;
    return r;
}

/* The one warp operation with a partial mask: every lane of the warp calls it
 * at once (the warp barrier), each with its group's mask, as lanes grouped by
 * __match_any_sync do; a lane named in a mask that calls with another mask,
 * or a mask without the caller, is CUDA's undefined behaviour and ends the test. */
unsigned __reduce_add_sync(unsigned mask, unsigned value)
{
    int p = g_wpar[g_cur], lane = g_cur & 31, w0 = g_cur & ~31;
    g_wpar[g_cur] = (unsigned char)(p ^ 1);
    g_wu[p][g_cur] = value;
    g_wm[p][g_cur] = mask;
    unsigned gen = ++g_wgen[g_cur];
    emu_wait(EMU_WAIT_WARP);
    if (!(mask >> lane & 1u)) {
        fprintf(stderr, "emu: __reduce_add_sync: lane %d is not in its mask %#x\n", lane, mask);
        abort();
    }
    unsigned r = 0;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        if (w0 + l >= g_nthreads || g_wgen[w0 + l] < gen || g_wm[p][w0 + l] != mask) {
            fprintf(stderr, "emu: __reduce_add_sync: lane %d named in mask %#x did not call with it\n", l, mask);
            abort();
        }
        r += g_wu[p][w0 + l];
    }
    return r;
}

/* Releases the barriers that every live thread has reached; 0 if none. */
static int emu_release(void)
{
    int released = 0;
    for (int w0 = 0; w0 < g_nthreads; w0 += 32) {   /* warp barriers */
        int live = 0, waiting = 0;
        for (int t = w0; t < w0 + 32 && t < g_nthreads; t++) {
            live += g_fiber[t].state != EMU_DONE;
            waiting += g_fiber[t].state == EMU_WAIT_WARP;
        }
        if (waiting && waiting == live) {
            for (int t = w0; t < w0 + 32 && t < g_nthreads; t++) g_fiber[t].state = EMU_RUN;
            released = 1;
        }
    }
    if (released) return 1;
    int live = 0, waiting = 0;
    for (int t = 0; t < g_nthreads; t++) {
        live += g_fiber[t].state != EMU_DONE;
        waiting += g_fiber[t].state == EMU_WAIT_BLOCK;
    }
    if (waiting && waiting == live) {
        for (int t = 0; t < g_nthreads; t++)
            if (g_fiber[t].state == EMU_WAIT_BLOCK) g_fiber[t].state = EMU_RUN;
        return 1;
    }
    return 0;
}

/* A launch on a destroyed or foreign stream fails as on a GPU: cuemu_stream_live
 * records cudaErrorInvalidResourceHandle as the last error, and nothing runs
 * (not cudaStreamQuery, which would tell the race detector the host saw s idle). */
void kg_emu_launch(unsigned grid, unsigned block, const void *s, const std::function<void()> &body)
{
    if (!cuemu_stream_live(s)) return;
    kg_emu_run(grid, block, body);
}

/* A kernel launch: its accesses recorded only once it is known to run. */
void kg_emu_launch_recorded(unsigned grid, unsigned block, const void *s, const std::function<void()> &record,
                            const std::function<void()> &body)
{
    if (!cuemu_stream_live(s) || !kg_emu_config_ok(grid, block)) return;
    record();
    kg_emu_run(grid, block, body);
}

/* The fibers' stacks, on transparent huge pages where the kernel allows
 * (a block's threads switch round-robin over up to 1024 stacks). */
static char *emu_stacks(void)
{
    size_t bytes = (size_t)1024 * EMU_STACK;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map %zu bytes of fiber stacks\n", bytes);
        abort();
    }
    madvise(p, bytes, MADV_HUGEPAGE);   /* advice only: 4 KiB pages still work */
    return (char *)p;
}

/* CUDA's launch limits on a 1-D grid and block, shared by every launch path. */
bool kg_emu_config_ok(unsigned grid, unsigned block)
{
    if (grid != 0 && grid <= 0x7fffffffu && block != 0 && block <= 1024) return true;
    cuemu_set_error(cudaErrorInvalidConfiguration);
    return false;
}

/* Runs the grid's blocks one after another, each block's threads as fibers. */
void kg_emu_run(unsigned grid, unsigned block, const std::function<void()> &body)
{
    if (!kg_emu_config_ok(grid, block)) return;
    std::lock_guard<std::mutex> lock(g_launch_mu);
    if (!g_stacks) g_stacks = emu_stacks();
    kg_emu_grid_dim = { grid, 1, 1 };
    kg_emu_block_dim = { block, 1, 1 };
    g_body = &body;
    g_nthreads = (int)block;
    for (unsigned b = 0; b < grid; b++) {
        kg_emu_block_idx = { b, 0, 0 };
        for (int t = 0; t < g_nthreads; t++) {
            g_fiber[t].state = EMU_RUN;
            g_fiber[t].stack = -1;
            g_wpar[t] = 0;
            g_wgen[t] = 0;
        }
        /* a thread gets a stack when it first runs and gives it back when it
         * ends: a kernel without barriers runs every thread on one hot stack */
        g_nfree = 0;
        for (int k = 1023; k >= 0; k--) g_free[g_nfree++] = k;
        /* even blocks run their threads from 0 up between barriers, odd
         * blocks from the last down: a kernel that needs a barrier it lacks
         * (shared memory read before another thread wrote it) sees the
         * other order in some block and gives a wrong result */
        int reverse = b & 1;
        for (;;) {
            int ran = 0, done = 0;
            for (int i = 0; i < g_nthreads; i++) {
                int t = reverse ? g_nthreads - 1 - i : i;
                if (g_fiber[t].state == EMU_RUN) {
                    if (g_fiber[t].stack < 0) {
                        /* a fresh stack that "returns" into emu_entry with the ABI's
                         * alignment: six zero registers, emu_entry, a fake return slot */
                        int k = g_free[--g_nfree];
                        uintptr_t top = ((uintptr_t)(g_stacks + (size_t)(k + 1) * EMU_STACK)) & ~(uintptr_t)15;
                        void **sp = (void **)(top - 64);
                        for (int r = 0; r < 6; r++) sp[r] = 0;
                        sp[6] = (void *)emu_entry;
                        sp[7] = 0;
                        g_fiber[t].sp = sp;
                        g_fiber[t].stack = k;
                    }
                    g_cur = t;
                    kg_emu_switch(&g_sched_sp, g_fiber[t].sp);
                    if (g_fiber[t].state == EMU_DONE) g_free[g_nfree++] = g_fiber[t].stack;
                    ran = 1;
                }
                done += g_fiber[t].state == EMU_DONE;
            }
            if (done == g_nthreads) break;
            if (!ran && !emu_release()) {
                fprintf(stderr, "emu: deadlock in block %u: a barrier not every live thread reaches\n", b);
                abort();
            }
        }
    }
}
