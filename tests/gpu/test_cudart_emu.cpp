// test_cudart_emu.cpp — the emulated CUDA runtime (tests/gpu/emu/cudart.c)
// against the real runtime's documented contract: the error codes it must
// return, the memory accounting, the poison, the guards and the faults that
// stand for illegal addresses (each in a forked child that must abort with
// the call's name), and the kernel executor's launch errors and its mutex.
// Compiled as C++ against the real cuda_runtime_api.h (label unit).
#include <cuda_runtime_api.h>

#include "cuemu.h"

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

// Runs f in a child; true when the child aborted and its stderr names who
// (printed when that is not what expect says).
static bool faults(const char *who, const std::function<void()> &f, bool expect = true)
{
    int fds[2];
    if (pipe(fds) != 0) return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        f();
        _exit(0);   // no fault: the parent sees a clean exit
    }
    close(fds[1]);
    char buf[4096] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    bool ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "cuda emulator: ") && strstr(buf, who);
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

int main(void)
{
    test_memory();
    test_host_memory();
    test_handles();
    test_launch();
    test_faults();
    printf("%d of %d checks passed\n", g_checks - g_fail, g_checks);
    return g_fail != 0;
}
