/* hostq.h — the CUDA backend's host queue (prefix hq_): one worker thread
 * that runs closures in the order they were pushed, and tickets that say how
 * far it has got.  It knows nothing of CUDA (tests/unit/hostq.test.sh builds
 * it alone); runtime/cuda/host.c puts the SRT_HOST stream on it.
 *
 * Ticket t names the t-th closure pushed (from 1); hq_mark is the ticket of
 * the last one pushed so far (0: none), and the queue has passed t once that
 * closure has returned.  A closure's argument bytes are copied at the push,
 * so the caller may reuse its own at once. */
#ifndef SHARDRT_HOSTQ_H
#define SHARDRT_HOSTQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*hq_fn)(void *arg);

typedef struct hq_item {
    struct hq_item *next;
    hq_fn fn;
    uint64_t ticket;
    max_align_t arg[];          /* the copied argument bytes                 */
} hq_item;

typedef struct hq_queue {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;        /* signalled on a push and on the stop       */
    pthread_cond_t passed;      /* signalled each time a closure returns     */
    hq_item *head, *tail;
    uint64_t pushed, done;      /* tickets: the last pushed, the last passed */
    bool stop, running;
    void (*thread_init)(void *);
    void *thread_arg;
} hq_queue;

/* Starts the worker; init(arg) runs first on it (NULL: nothing).  0 or an errno. */
int hq_start(hq_queue *q, void (*init)(void *), void *arg);
/* Appends fn over a copy of arg's size bytes; its ticket (0: out of memory). */
uint64_t hq_push(hq_queue *q, hq_fn fn, const void *arg, size_t size);
/* The ticket of the last closure pushed (0: none yet). */
uint64_t hq_mark(hq_queue *q);
/* Whether the worker has passed ticket t. */
bool hq_passed(hq_queue *q, uint64_t t);
/* Blocks until the worker has passed ticket t. */
void hq_wait(hq_queue *q, uint64_t t);
/* Blocks until every closure pushed so far has returned. */
void hq_drain(hq_queue *q);
/* Drains the queue, ends the worker and releases the queue. */
void hq_stop(hq_queue *q);

#endif
