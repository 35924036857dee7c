/* hostq_test.c — the CUDA backend's host queue (runtime/cuda/hostq.c) without
 * a GPU: closures run once each, in push order, on one thread other than the
 * caller's; tickets are passed in order and hq_wait returns only once its
 * closure has returned; the argument bytes are copied at the push; pushes do
 * not wait for a slow closure; hq_stop drains.  Built and run by
 * tests/unit/hostq.test.sh. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostq.h"

static int fails;
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                            \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            fails++;                                                                       \
        }                                                                                  \
    } while (0)

enum { N = 2000 };
static int order[N];
static atomic_int ran;
static pthread_t worker_id;
static _Thread_local int on_worker;
static atomic_int init_ran;
static atomic_int wrong_thread;

typedef struct arg { int i; int sleep_us; } arg;

/* Sleeps us microseconds. */
static void nap(int us)
{
    struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

/* The worker's init: marks the thread. */
static void init(void *p)
{
    on_worker = 1;
    worker_id = pthread_self();
    atomic_store(&init_ran, *(int *)p);
}

/* One closure: records its index at its position. */
static void job(void *p)
{
    arg *a = p;
    if (!on_worker) atomic_fetch_add(&wrong_thread, 1);
    if (a->sleep_us) nap(a->sleep_us);
    int k = atomic_fetch_add(&ran, 1);
    if (k < N) order[k] = a->i;
}

int main(void)
{
    hq_queue q;
    int tag = 7;
    CHECK(hq_start(&q, init, &tag) == 0, "hq_start");
    CHECK(hq_mark(&q) == 0, "no ticket before a push");
    CHECK(hq_passed(&q, 0), "ticket 0 is passed at once");
    hq_wait(&q, 0);

    /* a slow closure: the pushes after it return at once, its ticket is not passed early */
    arg a = { 0, 200000 };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t slow = hq_push(&q, job, &a, sizeof a);
    CHECK(slow == 1, "first ticket %llu", (unsigned long long)slow);
    for (int i = 1; i < N; i++) {
        a.i = i, a.sleep_us = 0;    /* reused at once: the queue holds its own copy */
        uint64_t t = hq_push(&q, job, &a, sizeof a);
        CHECK(t == (uint64_t)i + 1, "ticket %llu for push %d", (unsigned long long)t, i);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double pushed_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(pushed_s < 0.15, "pushes waited for the slow closure (%.3f s)", pushed_s);
    CHECK(!hq_passed(&q, slow), "the slow closure's ticket passed before it returned");
    CHECK(atomic_load(&ran) == 0, "a closure ran before the slow one returned");
    CHECK(hq_mark(&q) == N, "mark %llu", (unsigned long long)hq_mark(&q));

    hq_wait(&q, N / 2);
    CHECK(atomic_load(&ran) >= N / 2, "hq_wait(%d) returned after %d closures", N / 2, atomic_load(&ran));
    hq_drain(&q);
    CHECK(atomic_load(&ran) == N, "drained after %d of %d", atomic_load(&ran), N);
    for (int i = 0; i < N; i++) CHECK(order[i] == i, "closure %d ran at position %d", order[i], i);
    CHECK(atomic_load(&wrong_thread) == 0, "%d closures ran off the worker", atomic_load(&wrong_thread));
    CHECK(!pthread_equal(worker_id, pthread_self()), "the worker is the caller's thread");
    CHECK(atomic_load(&init_ran) == 7, "the thread init did not run with its argument");

    /* hq_wait returns only after its own closure: a fast one, then a slow one waited for */
    int before = atomic_load(&ran);
    a.i = -1, a.sleep_us = 0;
    hq_push(&q, job, &a, sizeof a);
    a.sleep_us = 100000;
    uint64_t t2 = hq_push(&q, job, &a, sizeof a);
    hq_wait(&q, t2);
    CHECK(atomic_load(&ran) == before + 2, "hq_wait returned before its closure (%d of 2 ran)",
          atomic_load(&ran) - before);

    /* hq_stop drains what is still queued */
    a.i = N, a.sleep_us = 50000;
    hq_push(&q, job, &a, sizeof a);
    hq_stop(&q);
    CHECK(atomic_load(&ran) == N + 3, "hq_stop did not drain (%d ran)", atomic_load(&ran));
    CHECK(!q.running, "still running after hq_stop");

    if (fails) return 1;
    printf("ok: hostq: %d closures in order on the worker, tickets, waits, drain, stop\n", N + 3);
    return 0;
}
