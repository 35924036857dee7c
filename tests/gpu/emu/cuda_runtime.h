/* cuda_runtime.h — the emulator's stand-in for CUDA's device side, enough for
 * kernels/cuda: every CUDA thread of a block is a fiber on one OS thread, run
 * until it reaches a barrier; __syncthreads releases when every live thread
 * of the block waits, a warp operation when every live lane of the warp
 * does.  A barrier that can never be released (divergent __syncthreads or
 * shuffles) ends the test.  Blocks run one after another, so __shared__
 * variables can be statics; odd blocks run their threads in reverse order,
 * so that a missing barrier shows up as a wrong result.
 */
#ifndef KG_EMU_CUDA_RUNTIME_H
#define KG_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"
#include "cuemu.h"

#include <functional>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 { unsigned x, y, z; };
extern dim3 kg_emu_grid_dim, kg_emu_block_dim, kg_emu_block_idx;
dim3 kg_emu_thread_idx(void);
#define threadIdx (kg_emu_thread_idx())
#define blockIdx kg_emu_block_idx
#define blockDim kg_emu_block_dim
#define gridDim kg_emu_grid_dim

void __syncthreads(void);
int __syncthreads_or(int pred);
unsigned __ballot_sync(unsigned mask, int pred);
float __shfl_xor_sync(unsigned mask, float v, int lane_xor);
unsigned __match_any_sync(unsigned mask, unsigned value);
unsigned __reduce_add_sync(unsigned mask, unsigned value);

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
/* Rounded fp32 operations (the host compiler contracts nothing without -mfma). */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
/* One OS thread runs every fiber, and fibers switch only at barriers. */
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    unsigned long long old = *p;
    *p = old + v;
    return old;
}

/* Whether grid blocks of block threads are within CUDA's limits; if not,
 * the thread's last error is cudaErrorInvalidConfiguration (the launch fails). */
bool kg_emu_config_ok(unsigned grid, unsigned block);
/* Runs body as grid blocks of block threads (CUDA's limits checked). */
void kg_emu_run(unsigned grid, unsigned block, const std::function<void()> &body);
/* kg_emu_run on stream s (a cudaStream_t: void here, so that host code
 * built against the real header links the same symbol), which must be live. */
void kg_emu_launch(unsigned grid, unsigned block, const void *s, const std::function<void()> &body);
/* kg_emu_launch after record() has told the race detector the launch's
 * accesses; neither happens for a launch that fails (s not live, the
 * configuration out of CUDA's limits), which a GPU never runs. */
void kg_emu_launch_recorded(unsigned grid, unsigned block, const void *s, const std::function<void()> &record,
                            const std::function<void()> &body);

/* A kernel argument as the race detector sees it, converted to the kernel's
 * parameter type P: a pointer to const is read, any other pointer written,
 * at the byte it points to (the extent is the kernel's business); a KgT
 * (kernels/cuda/common.cuh: a non-const pointer) is written, a KgC read. */
template <typename P, typename = void> struct KgEmuArg {
    static void access(const char *, const void *, const P &) {}
};
template <typename T> struct KgEmuArg<T *, void> {
    static void access(const char *kern, const void *s, T *p)
    {
        cuemu_access(kern, "a pointer argument", s, (const void *)p, 0, !std::is_const<T>::value);
    }
};
/* a tensor passed as a struct with a pointer member p (KgT, KgC) */
template <typename P>
struct KgEmuArg<P, typename std::enable_if<std::is_class<P>::value && std::is_pointer<decltype(P::p)>::value>::type> {
    static void access(const char *kern, const void *s, const P &t)
    {
        cuemu_access(kern, "a tensor argument", s, (const void *)t.p, 0,
                     !std::is_const<typename std::remove_pointer<decltype(P::p)>::type>::value);
    }
};

/* Records every argument's access on s, then runs the kernel; a launch
 * that fails (s not live, a bad configuration) records its error and nothing else. */
template <typename... P, typename... A>
void kg_emu_launch_args(const char *kern, void (*)(P...), unsigned grid, unsigned block, const void *s,
                        const std::function<void()> &body, const A &...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launched with the wrong number of arguments");
    kg_emu_launch_recorded(grid, block, s, [&] {
        (KgEmuArg<typename std::decay<P>::type>::access(kern, s, (typename std::decay<P>::type)args), ...);
    }, body);
}
#define KG_LAUNCH(kern, grid, block, s, ...) \
    kg_emu_launch_args(#kern, &kern, (unsigned)(grid), (unsigned)(block), (s), [=]() { kern(__VA_ARGS__); }, \
                       __VA_ARGS__)

#endif
