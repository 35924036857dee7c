/* emu.cpp — runs kernels/cuda on the CPU for machines without a GPU (see
 * cuda_runtime.h): a fiber per CUDA thread, switched by a few lines of
 * x86-64 assembly at barriers, and the host API on guarded host memory.
 * It checks the kernels' indexing and arithmetic against the CPU twins in
 * CI; it says nothing about races between real warps or about speed.
 */
#include "cuda_runtime.h"

#include <map>
#include <stdio.h>
#include <stdlib.h>

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
};

static EmuFiber g_fiber[1024];
static char *g_stacks;                       /* 1024 stacks of EMU_STACK bytes */
static void *g_sched_sp;
static int g_cur, g_nthreads;
static const std::function<void()> *g_body;
static float g_xf[1024];                     /* warp / block exchange slots */
static int g_xi[1024];
static cudaError_t g_last = cudaSuccess;

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
    g_xi[g_cur] = pred != 0;
    emu_wait(EMU_WAIT_WARP);
    unsigned r = 0;
    int w0 = g_cur & ~31;
    for (int l = 0; l < 32 && w0 + l < g_nthreads; l++)
        if (g_xi[w0 + l]) r |= 1u << l;
    emu_wait(EMU_WAIT_WARP);
    return r;
}

float __shfl_xor_sync(unsigned mask, float v, int lane_xor)
{
    emu_full_mask(mask);
    g_xf[g_cur] = v;
    emu_wait(EMU_WAIT_WARP);
    int src = (g_cur & ~31) | ((g_cur & 31) ^ lane_xor);
    if (src >= g_nthreads || g_fiber[src].state == EMU_DONE) {
        fprintf(stderr, "emu: shuffle from lane %d, which is not running\n", src);
        abort();
    }
    float r = g_xf[src];
    emu_wait(EMU_WAIT_WARP);
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

void kg_emu_run(unsigned grid, unsigned block, const std::function<void()> &body)
{
    if (grid == 0 || grid > 0x7fffffffu || block == 0 || block > 1024) {
        g_last = cudaErrorInvalidConfiguration;
        return;
    }
    if (!g_stacks) g_stacks = (char *)malloc((size_t)1024 * EMU_STACK);
    kg_emu_grid_dim = { grid, 1, 1 };
    kg_emu_block_dim = { block, 1, 1 };
    g_body = &body;
    g_nthreads = (int)block;
    for (unsigned b = 0; b < grid; b++) {
        kg_emu_block_idx = { b, 0, 0 };
        for (int t = 0; t < g_nthreads; t++) {
            /* a fresh stack that "returns" into emu_entry with the ABI's
             * alignment: six zero registers, emu_entry, a fake return slot */
            uintptr_t top = ((uintptr_t)(g_stacks + (size_t)(t + 1) * EMU_STACK)) & ~(uintptr_t)15;
            void **sp = (void **)(top - 64);
            for (int r = 0; r < 6; r++) sp[r] = 0;
            sp[6] = (void *)emu_entry;
            sp[7] = 0;
            g_fiber[t].sp = sp;
            g_fiber[t].state = EMU_RUN;
        }
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
                    g_cur = t;
                    kg_emu_switch(&g_sched_sp, g_fiber[t].sp);
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

/* ---- the host API ---------------------------------------------------------------- */

enum { EMU_GUARD = 4096 };
static std::map<void *, size_t> g_allocs;

extern "C" cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator (tests/gpu/emu)");
    p->major = 9;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMalloc(void **p, size_t bytes)
{
    unsigned char *m = (unsigned char *)malloc(bytes + EMU_GUARD);
    if (!m) return cudaErrorInvalidValue;
    memset(m, 0xff, bytes);
    memset(m + bytes, 0xa5, EMU_GUARD);
    g_allocs[m] = bytes;
    *p = m;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p)
{
    auto it = g_allocs.find(p);
    if (it == g_allocs.end()) return cudaErrorInvalidValue;
    unsigned char *m = (unsigned char *)p;
    for (size_t i = 0; i < EMU_GUARD; i++)
        if (m[it->second + i] != 0xa5) {
            fprintf(stderr, "emu: a kernel wrote %zu bytes past a buffer of %zu bytes\n", i, it->second);
            abort();
        }
    g_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k)
{
    memmove(dst, src, bytes);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                       enum cudaMemcpyKind k, cudaStream_t s)
{
    memmove(dst, src, bytes);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    memset(p, v, bytes);
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    default: return "emulator error";
    }
}
