// test_cudart_emu.cpp — the emulated CUDA runtime (tests/gpu/emu/cudart.c)
// against the real runtime's documented contract: the error codes it must
// return, the memory accounting, the poison, the guards and the faults that
// stand for illegal addresses (each in a forked child that must abort with
// the call's name), and the kernel executor's launch errors and its mutex.
// Compiled as C++ against the real cuda_runtime_api.h (label unit).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "cuemu.h"
#include "kernels.h"

#include <functional>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void kg_emu_run(unsigned grid, unsigned block, const std::function<void()> &body);
void kg_emu_launch(unsigned grid, unsigned block, const void *s, const std::function<void()> &body);
void kg_emu_launch_recorded(unsigned grid, unsigned block, const void *s, const std::function<void()> &record,
                            const std::function<void()> &body);

static int g_fail, g_checks;

// Counts a check; prints it when it failed.
static void check(bool ok, const char *what)
{
    g_checks++;
    if (!ok) {
        g_fail++;
        printf("FAIL %s\n", what);
    }
}
#define CHECK(cond) check((cond), #cond)

// Runs body in a forked child whose stderr goes to buf (NUL-terminated);
// returns the child's wait status, or -1 when no child could be made.
static int in_child(const std::function<void()> &body, char *buf, size_t size)
{
    int fds[2];
    buf[0] = 0;
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        body();
        _exit(0);   // body returned: the parent sees a clean exit
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n < size - 1 && (r = read(fds[0], buf + n, size - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

// Runs f in a child; true when the child aborted and its stderr names who
// (printed when that is not what expect says).
static bool faults(const char *who, const std::function<void()> &f, bool expect = true)
{
    char buf[4096];
    int st = in_child(f, buf, sizeof buf);
    bool ok = st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "cuda emulator: ") && strstr(buf, who);
    if (ok != expect) printf("     (child: %s)\n", buf[0] ? buf : "no message, no fault");
    return ok;
}

// The device and its memory accounting, allocation alignment and poison.
static void test_memory(void)
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n >= 1);
    CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
    CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
    CHECK(cudaGetLastError() == cudaSuccess);
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
    CHECK(strstr(p.name, "emulator") != NULL && p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132);
    CHECK(p.totalGlobalMem == (size_t)80 << 30 && p.warpSize == 32 && p.canMapHostMemory == 1);
    size_t fr0, tot, fr1, fr2;
    CHECK(cudaMemGetInfo(&fr0, &tot) == cudaSuccess && tot == (size_t)80 << 30);
    void *d = NULL;
    CHECK(cudaMalloc(&d, 1000) == cudaSuccess && ((uintptr_t)d & 255) == 0);
    CHECK(cudaMemGetInfo(&fr1, &tot) == cudaSuccess && fr0 - fr1 == 1000);
    unsigned char h[1000];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h[0] == 0xff && h[999] == 0xff);
    CHECK(cudaMemset(d, 7, 1000) == cudaSuccess);
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDefault) == cudaSuccess && h[0] == 7 && h[999] == 7);
    void *big = NULL;
    CHECK(cudaMalloc(&big, (size_t)81 << 30) == cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation && cudaGetLastError() == cudaSuccess);
    CHECK(cudaMemcpy(h, h, 4, (cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection);
    CHECK(cudaFree((char *)d + 1) == cudaErrorInvalidValue);   // an interior pointer
    CHECK(cudaFree(d) == cudaSuccess && cudaFree(d) == cudaErrorInvalidValue);   // twice
    CHECK(cudaMemGetInfo(&fr2, &tot) == cudaSuccess && fr2 == fr0);
    (void)cudaGetLastError();
}

// Pinned memory, mapped or not, and cuemu_device_range.
static void test_host_memory(void)
{
    void *pin = NULL, *map = NULL, *dev = NULL, *dp = NULL;
    CHECK(cudaHostAlloc(&pin, 256, cudaHostAllocPortable) == cudaSuccess);
    CHECK(cudaHostAlloc(&map, 256, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess);
    CHECK(((uintptr_t)pin & 4095) == 0 && ((uintptr_t)map & 4095) == 0);   // whole pages (O_DIRECT)
    CHECK(cudaHostAlloc(&dp, 256, 0x80) == cudaErrorInvalidValue);
    CHECK(cudaMalloc(&dev, 256) == cudaSuccess);
    CHECK(cudaHostGetDevicePointer(&dp, pin, 0) == cudaErrorInvalidValue);
    CHECK(cudaHostGetDevicePointer(&dp, (char *)map + 8, 0) == cudaSuccess && dp == (char *)map + 8);
    CHECK(cudaHostGetDevicePointer(&dp, map, 1) == cudaErrorInvalidValue);
    CHECK(cudaHostGetDevicePointer(&dp, dev, 0) == cudaErrorInvalidValue);
    CHECK(cuemu_device_range(dev, 256) && cuemu_device_range((char *)dev + 255, 1));
    CHECK(!cuemu_device_range(dev, 257) && !cuemu_device_range((char *)dev + 256, 1));
    CHECK(cuemu_device_range(map, 256) && !cuemu_device_range(pin, 1));
    int x = 0;
    CHECK(!cuemu_device_range(&x, sizeof x));
    CHECK(cudaFreeHost(dev) == cudaErrorInvalidValue && cudaFree(pin) == cudaErrorInvalidValue);
    CHECK(cudaFreeHost(pin) == cudaSuccess && cudaFreeHost(map) == cudaSuccess && cudaFree(dev) == cudaSuccess);
    (void)cudaGetLastError();
}

// Stream and event handles: flags, destroyed and foreign handles.
static void test_handles(void)
{
    cudaStream_t s, t;
    cudaEvent_t e;
    int foreign;
    CHECK(cudaStreamCreateWithFlags(&s, 4) == cudaErrorInvalidValue);
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreate(&t) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&e, cudaEventInterprocess) == cudaErrorInvalidValue);
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaEventRecord(e, s) == cudaSuccess && cudaEventQuery(e) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(t, e, 0) == cudaSuccess && cudaStreamWaitEvent(t, e, 2) == cudaErrorInvalidValue);
    CHECK(cudaStreamSynchronize(0) == cudaSuccess && cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
    CHECK(cudaStreamSynchronize((cudaStream_t)(void *)&foreign) == cudaErrorInvalidResourceHandle);
    CHECK(cudaEventRecord((cudaEvent_t)(void *)&foreign, s) == cudaErrorInvalidResourceHandle);
    CHECK(cudaEventRecord((cudaEvent_t)(void *)s, s) == cudaErrorInvalidResourceHandle);   // a stream is no event
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    char h[8] = {0}, d8[8];
    void *d = NULL;
    CHECK(cudaMalloc(&d, 8) == cudaSuccess);
    CHECK(cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, s) == cudaErrorInvalidResourceHandle);
    CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle && cudaGetLastError() == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle && cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
    CHECK(cudaEventRecord(e, s) == cudaErrorInvalidResourceHandle);
    CHECK(cudaEventDestroy(e) == cudaSuccess && cudaEventQuery(e) == cudaErrorInvalidResourceHandle);
    CHECK(cudaMemset2DAsync(d, 2, 1, 4, 2, t) == cudaErrorInvalidPitchValue);
    CHECK(cudaMemset2DAsync(d, 4, 1, 2, 2, t) == cudaSuccess);
    CHECK(cudaMemcpy(d8, d, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(d8[0] == 1 && d8[1] == 1 && (unsigned char)d8[2] == 0xff && d8[4] == 1 && d8[5] == 1 && (unsigned char)d8[6] == 0xff);
    CHECK(cudaStreamDestroy(t) == cudaSuccess && cudaFree(d) == cudaSuccess);
    CHECK(strcmp(cudaGetErrorName(cudaErrorInvalidResourceHandle), "cudaErrorInvalidResourceHandle") == 0);
    (void)cudaGetLastError();
}

static int g_count;   // under the executor's mutex

// Adds one per thread: the body of the concurrent-launch check.
static void *launcher(void *)
{
    for (int i = 0; i < 20; i++) kg_emu_run(4, 64, [] { g_count++; });
    return NULL;
}

// Launch errors through cudaGetLastError, and launches from two threads.
static void test_launch(void)
{
    kg_emu_run(0, 32, [] {});
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaSuccess);
    kg_emu_run(1, 1025, [] {});
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaErrorInvalidConfiguration);
    cudaStream_t s;
    int ran = 0;
    CHECK(cudaStreamCreate(&s) == cudaSuccess);
    kg_emu_launch(1, 32, s, [&ran] { ran++; });
    CHECK(ran == 32 && cudaGetLastError() == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    kg_emu_launch(1, 32, s, [&ran] { ran++; });   // on a destroyed stream: nothing runs
    CHECK(ran == 32 && cudaGetLastError() == cudaErrorInvalidResourceHandle);
    // KG_LAUNCH's path: a launch that fails records no access (a GPU never runs it)
    int recorded = 0;
    kg_emu_launch_recorded(0, 32, 0, [&recorded] { recorded++; }, [&ran] { ran++; });
    CHECK(recorded == 0 && ran == 32 && cudaGetLastError() == cudaErrorInvalidConfiguration);
    kg_emu_launch_recorded(1, 1025, 0, [&recorded] { recorded++; }, [&ran] { ran++; });
    CHECK(recorded == 0 && ran == 32 && cudaGetLastError() == cudaErrorInvalidConfiguration);
    kg_emu_launch_recorded(1, 32, s, [&recorded] { recorded++; }, [&ran] { ran++; });   // s destroyed
    CHECK(recorded == 0 && ran == 32 && cudaGetLastError() == cudaErrorInvalidResourceHandle);
    kg_emu_launch_recorded(1, 32, 0, [&recorded] { recorded++; }, [&ran] { ran++; });
    CHECK(recorded == 1 && ran == 64 && cudaGetLastError() == cudaSuccess);
    pthread_t a, b;
    pthread_create(&a, NULL, launcher, NULL);
    pthread_create(&b, NULL, launcher, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK(g_count == 2 * 20 * 4 * 64);
}

// What a GPU would fault on ends the process, naming the call.
static void test_faults(void)
{
    CHECK(faults("cudaMemcpy", [] {
        void *d;
        char h[64] = {0};
        cudaMalloc(&d, 32);
        cudaMemcpy(d, h, 64, cudaMemcpyHostToDevice);   // past the allocation
    }));
    CHECK(faults("cudaMemcpyAsync", [] {
        char h[8] = {0}, g[8];
        cudaMemcpyAsync(g, h, 8, cudaMemcpyHostToDevice, 0);   // "device" memory that is the host's
    }));
    CHECK(faults("cudaMemcpy", [] {
        void *d, *e;
        cudaMalloc(&d, 8);
        cudaMalloc(&e, 8);
        cudaMemcpy(d, e, 8, cudaMemcpyHostToDevice);   // the source is device memory
    }));
    CHECK(faults("cudaMemsetAsync", [] {
        void *d;
        cudaMalloc(&d, 100);
        cudaMemsetAsync((char *)d + 50, 0, 51, 0);
    }));
    CHECK(faults("cudaFree", [] {
        void *d;
        cudaMalloc(&d, 100);
        ((char *)d)[100] = 0;   // a kernel's write past the end
        cudaFree(d);
    }));
    CHECK(faults("cudaStreamSynchronize", [] {
        void *d;
        cudaMalloc(&d, 100);
        ((char *)d)[104] = 0;
        cudaStreamSynchronize(0);
    }));
    CHECK(faults("cudaMemcpy", [] {
        void *p;
        char h[64] = {0};
        cudaHostAlloc(&p, 32, 0);
        cudaMemcpy(p, h, 64, cudaMemcpyHostToHost);   // past a pinned allocation
    }));
    CHECK(!faults("nothing", [] {
        void *d;
        char h[32] = {0};
        cudaMalloc(&d, 32);
        cudaMemcpy(d, h, 32, cudaMemcpyHostToDevice);
        cudaFree(d);
    }, false));
}

// A buffer of n bytes of device memory, for the race tests.
static char *dev_buf(size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n) != cudaSuccess) abort();
    return (char *)d;
}

// Two streams of the given flags.
static void two_streams(cudaStream_t *a, cudaStream_t *b, unsigned flags = cudaStreamDefault)
{
    if (cudaStreamCreateWithFlags(a, flags) != cudaSuccess || cudaStreamCreateWithFlags(b, flags) != cudaSuccess)
        abort();
}

// One fp32 GEMM D = A * B of n x n on stream s with the given workspace
// (the heuristic asked for an algorithm that uses it).
static void lt_matmul(cudaStream_t s, const float *A, const float *B, float *D, void *ws, size_t ws_bytes, int n)
{
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, n, n, n) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                             sizeof ws_bytes) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &res, &got) != CUBLAS_STATUS_SUCCESS || got != 1)
        abort();
    float one = 1.0f, zero = 0.0f;
    if (cublasLtMatmul(h, op, &one, A, l, B, l, &zero, D, l, D, l, &res.algo, ws, ws_bytes, s) != CUBLAS_STATUS_SUCCESS)
        abort();
}

static cudaStream_t g_handoff_stream;
static char *g_handoff_buf;

// Another host thread: writes the buffer on its stream, waits for it and
// publishes that at &g_handoff_buf (as the host queue does).
static void *handoff_writer(void *release)
{
    cudaMemsetAsync(g_handoff_buf, 1, 64, g_handoff_stream);
    cudaStreamSynchronize(g_handoff_stream);
    if (release) cuemu_host_release(&g_handoff_buf);
    return NULL;
}

// The race detector: each case in a child, which must fault naming both
// accesses where streams are not ordered, and run clean where they are.
static void test_races(void)
{
    // two streams write one buffer with nothing between them
    CHECK(faults("race: cudaMemsetAsync (destination) writes", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaMemsetAsync(d + 128, 2, 64, b);
    }));
    // the same with an event recorded on a and waited for on b
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        cudaEvent_t e;
        two_streams(&a, &b);
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        char *d = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaEventRecord(e, a);
        cudaStreamWaitEvent(b, e, 0);
        cudaMemsetAsync(d + 128, 2, 64, b);
    }, false));
    // an event recorded before the write orders nothing
    CHECK(faults("race", [] {
        cudaStream_t a, b;
        cudaEvent_t e;
        two_streams(&a, &b);
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        char *d = dev_buf(256);
        cudaEventRecord(e, a);
        cudaMemsetAsync(d, 1, 256, a);
        cudaStreamWaitEvent(b, e, 0);
        cudaMemsetAsync(d + 128, 2, 64, b);
    }));
    // disjoint bytes never race; two reads never race
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256), *x = dev_buf(256), *y = dev_buf(256);
        cudaMemsetAsync(d, 1, 128, a);
        cudaMemsetAsync(d + 128, 2, 128, b);
        cudaDeviceSynchronize();
        cudaMemcpyAsync(x, d, 256, cudaMemcpyDeviceToDevice, a);
        cudaMemcpyAsync(y, d, 256, cudaMemcpyDeviceToDevice, b);
    }, false));
    // a read on b after a write on a, ordered only by the host's cudaStreamSynchronize
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256), *x = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaStreamSynchronize(a);
        cudaMemcpyAsync(x, d, 256, cudaMemcpyDeviceToDevice, b);
    }, false));
    // ... and without it, a race naming the read and the write
    CHECK(faults("race: cudaMemcpyAsync (source) reads", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256), *x = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaMemcpyAsync(x, d, 256, cudaMemcpyDeviceToDevice, b);
    }));
    // the host's synchronisation orders only what the host issues afterwards:
    // b's copy issued before the sync still races
    CHECK(faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256), *x = dev_buf(256);
        cudaMemcpyAsync(x, d, 256, cudaMemcpyDeviceToDevice, b);
        cudaMemsetAsync(d, 1, 256, a);
        cudaStreamSynchronize(b);
    }));
    // a kernel (kg_fill writes its tensor) racing a copy that reads it
    CHECK(faults("race: cudaMemcpyAsync (source) reads", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(1024), *x = dev_buf(1024);
        srt_t t = { d, 256, SRT_F32 };
        if (kg_fill(t, 1.0f, a) != cudaSuccess) abort();
        cudaMemcpyAsync(x, d + 512, 512, cudaMemcpyDeviceToDevice, b);   // the kernel's byte is d[0]: not this
        cudaMemcpyAsync(x, d, 512, cudaMemcpyDeviceToDevice, b);
    }));
    CHECK(faults("kg_fill_kernel (a tensor argument) writes", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(1024), *x = dev_buf(1024);
        srt_t t = { d, 256, SRT_F32 };
        cudaMemcpyAsync(x, d, 512, cudaMemcpyDeviceToDevice, b);
        if (kg_fill(t, 1.0f, a) != cudaSuccess) abort();
    }));
    // a kernel that only reads (kg_convert's source is a KgC) beside a copy that reads
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(1024), *x = dev_buf(1024), *y = dev_buf(1024);
        cudaDeviceSynchronize();
        srt_t src = { d, 256, SRT_F32 }, dst = { y, 256, SRT_F32 };
        cudaMemcpyAsync(x, d, 1024, cudaMemcpyDeviceToDevice, b);
        if (kg_convert(dst, src, a) != cudaSuccess) abort();
    }, false));
    // the legacy default stream waits for a blocking stream's work ...
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaMemsetAsync(d, 2, 256, 0);
        cudaMemsetAsync(d, 3, 256, b);   // and a blocking stream for the legacy one's
    }, false));
    // ... but not for a non-blocking stream's
    CHECK(faults("on the legacy default stream", [] {
        cudaStream_t a, b;
        two_streams(&a, &b, cudaStreamNonBlocking);
        char *d = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaMemsetAsync(d, 2, 256, 0);
    }));
    // cudaStreamPerThread is a blocking stream too
    CHECK(!faults("race", [] {
        char *d = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, cudaStreamPerThread);
        cudaMemsetAsync(d, 2, 256, 0);
    }, false));
    // one cuBLASLt workspace shared by GEMMs on two unordered streams
    CHECK(faults("cublasLtMatmul (the workspace) writes", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        float *A = (float *)dev_buf(64 * 64 * 4), *D1 = (float *)dev_buf(64 * 64 * 4), *D2 = (float *)dev_buf(64 * 64 * 4);
        void *ws = dev_buf(1 << 20);
        cudaMemset(A, 0, 64 * 64 * 4);
        cudaDeviceSynchronize();
        lt_matmul(a, A, A, D1, ws, 1 << 20, 64);
        lt_matmul(b, A, A, D2, ws, 1 << 20, 64);
    }));
    // the same GEMMs with their own workspaces: they only read A together
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        float *A = (float *)dev_buf(64 * 64 * 4), *D1 = (float *)dev_buf(64 * 64 * 4), *D2 = (float *)dev_buf(64 * 64 * 4);
        void *w1 = dev_buf(1 << 20), *w2 = dev_buf(1 << 20);
        cudaMemset(A, 0, 64 * 64 * 4);
        cudaDeviceSynchronize();
        lt_matmul(a, A, A, D1, w1, 1 << 20, 64);
        lt_matmul(b, A, A, D2, w2, 1 << 20, 64);
    }, false));
    // cudaDeviceSynchronize orders everything before what follows
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256);
        cudaMemsetAsync(d, 1, 256, a);
        cudaDeviceSynchronize();
        cudaMemsetAsync(d, 2, 256, b);
    }, false));
    // mapped pinned memory is tracked like device memory (a kernel may address
    // it): only m is shared, each stream copies to or from its own device
    // buffer, and the fault must name m's range on both sides
    {
        cudaStream_t a, b;
        two_streams(&a, &b);
        void *m = NULL;
        if (cudaHostAlloc(&m, 256, cudaHostAllocMapped) != cudaSuccess) abort();
        char *d1 = dev_buf(256), *d2 = dev_buf(256);
        char want[256];
        snprintf(want, sizeof want, "race: cudaMemcpyAsync (source) reads [%p, +256) on stream %p and the earlier "
                 "cudaMemcpyAsync (destination) writes [%p, +256) on stream %p", m, (void *)b, m, (void *)a);
        CHECK(faults(want, [=] {
            cudaMemcpyAsync(m, d1, 256, cudaMemcpyDeviceToHost, a);
            cudaMemcpyAsync(d2, m, 256, cudaMemcpyHostToDevice, b);
        }));
        CHECK(cudaFreeHost(m) == cudaSuccess && cudaFree(d1) == cudaSuccess && cudaFree(d2) == cudaSuccess);
        CHECK(cudaStreamDestroy(a) == cudaSuccess && cudaStreamDestroy(b) == cudaSuccess);
    }
    // host threads: another thread's write, then its synchronisation, and
    // this thread's write issued while that thread runs (before the join):
    // nothing orders the two, whichever is issued first, so a race ...
    CHECK(faults("race: cudaMemsetAsync (destination) writes", [] {
        cudaStream_t b;
        two_streams(&g_handoff_stream, &b);
        g_handoff_buf = dev_buf(256);
        pthread_t t;
        pthread_create(&t, NULL, handoff_writer, NULL);
        cudaMemsetAsync(g_handoff_buf, 2, 64, b);
        pthread_join(t, NULL);
    }));
    // ... and this thread's write issued after the join, which the detector
    // sees through the host queue's hand-off (cuemu_host_release / _acquire)
    CHECK(!faults("race", [] {
        cudaStream_t b;
        two_streams(&g_handoff_stream, &b);
        g_handoff_buf = dev_buf(256);
        pthread_t t;
        pthread_create(&t, NULL, handoff_writer, &g_handoff_buf);
        pthread_join(t, NULL);
        cuemu_host_acquire(&g_handoff_buf);
        cudaMemsetAsync(g_handoff_buf, 2, 64, b);
    }, false));
    // a kernel launch the executor rejects (grid 0) records no access, so its
    // write races with nothing
    CHECK(!faults("race", [] {
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256);
        kg_emu_launch_recorded(0, 32, a, [d, a] { cuemu_access("k", "a tensor argument", a, d, 0, true); }, [] {});
        cudaMemsetAsync(d, 1, 256, b);
    }, false));
    CHECK(faults("and the earlier k (a tensor argument) writes", [] {   // the same launch accepted
        cudaStream_t a, b;
        two_streams(&a, &b);
        char *d = dev_buf(256);
        kg_emu_launch_recorded(1, 32, a, [d, a] { cuemu_access("k", "a tensor argument", a, d, 0, true); }, [] {});
        cudaMemsetAsync(d, 1, 256, b);
    }));
}

// The history collection's workload (run as "test_cudart_emu collect"):
// 5000 writes of distinct bytes on one stream, none superseding another,
// with a created stream and the legacy default stream never used.
static void collect_workload(cudaStream_t a, char *d)
{
    for (int i = 0; i < 5000; i++) cudaMemsetAsync(d + i, 1, 1, a);
}

// Runs this program as "PROG collect" with CUEMU_RACECHECK=2; the detector's
// counts at its exit: accesses collected and forgotten by the bound.
static bool collect_counts(size_t *collected, size_t *forgotten)
{
    char buf[4096];
    int st = in_child([] {
        setenv("CUEMU_RACECHECK", "2", 1);
        execl("/proc/self/exe", "test_cudart_emu", "collect", (char *)NULL);
        _exit(127);
    }, buf, sizeof buf);
    const char *c = strstr(buf, "earlier ones, ");
    bool ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && c &&
              sscanf(c, "earlier ones, %zu collected, %zu forgotten by the bound", collected, forgotten) == 2;
    if (!ok) printf("     (collect child: %s)\n", buf[0] ? buf : "no output");
    return ok;
}

// A stream that has issued nothing does not keep the history from being
// collected (the trainer creates streams it may never use); one first used
// after the collection still races with what was not collected.
static void test_collect(void)
{
    size_t collected = 0, forgotten = 0;
    CHECK(collect_counts(&collected, &forgotten) && collected >= 4096 && forgotten == 0);
    CHECK(faults("race: cudaMemsetAsync (destination) writes", [] {
        cudaStream_t a, u;
        two_streams(&a, &u);
        char *d = dev_buf(5000);
        collect_workload(a, d);
        cudaMemsetAsync(d + 4999, 2, 1, u);   // u's first work: unordered with a's last write
    }));
    CHECK(!faults("race", [] {
        cudaStream_t a, u;
        two_streams(&a, &u);
        char *d = dev_buf(5000);
        collect_workload(a, d);
        cudaStreamSynchronize(a);
        cudaMemsetAsync(d, 2, 5000, u);   // after the host's knowledge of a
    }, false));
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "collect") == 0) {   // collect_counts' child
        cudaStream_t a, u;
        two_streams(&a, &u);
        collect_workload(a, dev_buf(5000));
        return 0;
    }
    test_memory();
    test_host_memory();
    test_handles();
    test_launch();
    test_faults();
    test_races();
    test_collect();
    printf("%d of %d checks passed\n", g_checks - g_fail, g_checks);
    return g_fail != 0;
}
