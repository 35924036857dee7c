/* hostq.c — the host queue: a FIFO of closures and its one worker thread
 * (hostq.h).  One mutex guards the list and both counters; the worker runs
 * each closure outside it, so pushes never wait for host work. */
#include "hostq.h"

#include <stdlib.h>
#include <string.h>

/* The CUDA emulation's race detector (tests/gpu/emu/cuemu.h) cannot see this
 * queue's mutex, which orders the worker's CUDA work with the trainer's:
 * the queue tells it, as a thread sanitizer's annotations would.  Weak:
 * NULL when linked against the real libcudart. */
extern void cuemu_host_release(const void *obj) __attribute__((weak));
extern void cuemu_host_acquire(const void *obj) __attribute__((weak));

/* The calling thread's CUDA knowledge published at obj (mutex held), for the emulation. */
static void hq_release(const void *obj)
{
    if (cuemu_host_release) cuemu_host_release(obj);
}

/* What was published at obj taken in by the calling thread (mutex held), for the emulation. */
static void hq_acquire(const void *obj)
{
    if (cuemu_host_acquire) cuemu_host_acquire(obj);
}

/* The worker: takes closures in push order and runs them until stopped. */
static void *hq_main(void *p)
{
    hq_queue *q = p;
    if (q->thread_init) q->thread_init(q->thread_arg);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->work, &q->mu);
        if (!q->head) break;    /* stopped and empty */
        hq_item *it = q->head;
        hq_acquire(&q->work);
        q->head = it->next;
        if (!q->head) q->tail = NULL;
        pthread_mutex_unlock(&q->mu);
        it->fn(it->arg);
        pthread_mutex_lock(&q->mu);
        hq_release(&q->passed);
        q->done = it->ticket;
        free(it);
        pthread_cond_broadcast(&q->passed);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Starts the worker after initialising the queue. */
int hq_start(hq_queue *q, void (*init)(void *), void *arg)
{
    memset(q, 0, sizeof *q);
    q->thread_init = init;
    q->thread_arg = arg;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->passed, NULL);
    int e = pthread_create(&q->thread, NULL, hq_main, q);
    q->running = e == 0;
    return e;
}

/* Appends a closure; its ticket (0: out of memory). */
uint64_t hq_push(hq_queue *q, hq_fn fn, const void *arg, size_t size)
{
    hq_item *it = malloc(sizeof *it + size);
    if (!it) return 0;
    it->next = NULL;
    it->fn = fn;
    if (size) memcpy(it->arg, arg, size);
    pthread_mutex_lock(&q->mu);
    uint64_t t = it->ticket = ++q->pushed;   /* read under the lock: the worker may free it at once */
    hq_release(&q->work);
    if (q->tail) q->tail->next = it;
    else q->head = it;
    q->tail = it;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return t;
}

/* The last ticket pushed. */
uint64_t hq_mark(hq_queue *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t t = q->pushed;
    pthread_mutex_unlock(&q->mu);
    return t;
}

/* Whether closure t has returned (tickets are passed in order). */
bool hq_passed(hq_queue *q, uint64_t t)
{
    pthread_mutex_lock(&q->mu);
    bool r = q->done >= t;
    pthread_mutex_unlock(&q->mu);
    return r;
}

/* Waits for closure t. */
void hq_wait(hq_queue *q, uint64_t t)
{
    pthread_mutex_lock(&q->mu);
    while (q->done < t) pthread_cond_wait(&q->passed, &q->mu);
    hq_acquire(&q->passed);
    pthread_mutex_unlock(&q->mu);
}

/* Waits for everything pushed so far. */
void hq_drain(hq_queue *q)
{
    hq_wait(q, hq_mark(q));
}

/* Drains, stops and joins the worker; the queue is released. */
void hq_stop(hq_queue *q)
{
    if (!q->running) return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    q->running = false;
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->passed);
    pthread_mutex_destroy(&q->mu);
}
