/* host.c — the SRT_HOST stream on the CUDA backend: a worker thread (the
 * host queue, hostq.h) that runs the host ops in issue order while the
 * issuing thread goes on queueing GPU work.
 *
 * The ops the schedule puts on SRT_HOST (grad_sumsq of the fp32 host
 * gradients, grad_norm_finish when every gradient is the host's, and
 * optimizer_step of the offloaded states) become closures
 * over their arguments and the step's scalars (lr, step, loss scale, taken
 * at the issue); any other op on SRT_HOST ends the job at cu_before_op.  A
 * closure's CUDA work (grad_sumsq's kernel) goes to the SRT_HOST cudaStream
 * and the worker waits for it before the next closure, so a closure is
 * complete when the worker passes it.  Events: an event recorded on SRT_HOST
 * is the queue's ticket at the record (cu_host_record); a host op waiting on
 * a device event is a closure that cudaEventSynchronize's, on the worker, a
 * snapshot of the event's record at the issue (a private event recorded on
 * the gate stream after it waits for the event: the event id may be
 * recorded again before the worker gets there); a device stream waiting on
 * a host event blocks the issuing thread in srt_event_wait until the worker
 * has passed the ticket (the only place the issuing thread waits for the
 * host work, and exactly where the schedule says the GPU depends on it);
 * srt_stream_sync(SRT_HOST) drains the queue. */
#include "cu.h"

#include <string.h>

enum { CU_HOP_WAIT = -1 };      /* the closure that waits for a device event */

/* One host op: the op, its arguments and the scalars it reads. */
typedef struct cu_hop {
    srt_ctx *c;
    int op;                     /* SRT_OP_* or CU_HOP_WAIT               */
    srt_t t[5];
    srt_group g;                /* grad_norm_finish's group              */
    bool decay;
    int gate;                   /* CU_HOP_WAIT: the gate_ev slot         */
    cu_step_sc sc;
} cu_hop;

static _Thread_local bool cu_on_worker;

/* The worker's start: the rank's device is per thread. */
static void cu_host_thread_init(void *p)
{
    srt_ctx *c = p;
    cu_on_worker = true;
    CU_CHECK(c, cudaSetDevice(cu_st(c)->device), "cudaSetDevice (the host worker)");
}

/* Runs one closure on the worker and waits for the CUDA work it queued. */
static void cu_hop_run(void *p)
{
    cu_hop *h = p;
    srt_ctx *c = h->c;
    cu_state *st = cu_st(c);
    switch (h->op) {
    case CU_HOP_WAIT:
        CU_CHECK(c, cudaEventSynchronize(st->gate_ev[h->gate]), "srt_event_wait (SRT_HOST): cudaEventSynchronize");
        return;
    case SRT_OP_grad_sumsq:
        cu_grad_sumsq(c, SRT_HOST, h->t[0]);
        break;
    case SRT_OP_grad_norm_finish:
        cu_grad_norm_finish_ls(c, SRT_HOST, h->g, h->sc.loss_scale);
        break;
    case SRT_OP_optimizer_step:
        cu_optimizer_step_sc(c, SRT_HOST, h->t[0], h->t[1], h->t[2], h->t[3], h->t[4], h->decay, &h->sc);
        break;
    default:
        ctx_die(c, "host queue: op %d is not a host op", h->op);
    }
    CU_CHECK(c, cudaStreamSynchronize(st->stream[SRT_HOST]), "the host worker: cudaStreamSynchronize");
}

/* The gate stream and its events, then the worker. */
void cu_host_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    CU_CHECK(c, cudaStreamCreateWithFlags(&st->gate, cudaStreamNonBlocking), "cudaStreamCreate (the host gate)");
    for (int k = 0; k < CU_GATES; k++)
        CU_CHECK(c, cudaEventCreateWithFlags(&st->gate_ev[k], cudaEventDisableTiming), "cudaEventCreate (the host gate)");
    int e = hq_start(&st->hostq, cu_host_thread_init, c);
    if (e != 0) ctx_die(c, "cannot start the host worker thread: %s", strerror(e));
}

/* Drains the queue, ends the worker, releases the gate. */
void cu_host_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    hq_stop(&st->hostq);
    if (!st->gate) return;
    for (int k = 0; k < CU_GATES; k++) cudaEventDestroy(st->gate_ev[k]);
    cudaStreamDestroy(st->gate);
    st->gate = NULL;
}

/* Whether an op on s goes to the worker (SRT_HOST, issued by the trainer). */
bool cu_host_defer(srt_ctx *c, srt_stream s)
{
    (void)c;
    return s == SRT_HOST && !cu_on_worker;
}

/* Whether op may be issued on SRT_HOST. */
bool cu_host_op_ok(int op)
{
    return op == SRT_OP_grad_sumsq || op == SRT_OP_grad_norm_finish || op == SRT_OP_optimizer_step;
}

/* Queues h. */
static void cu_host_push(srt_ctx *c, const cu_hop *h)
{
    if (hq_push(&cu_st(c)->hostq, cu_hop_run, h, sizeof *h) == 0) ctx_die(c, "host queue: out of memory");
}

/* grad_sumsq on SRT_HOST. */
void cu_host_grad_sumsq(srt_ctx *c, srt_t g)
{
    cu_host_push(c, &(cu_hop){ .c = c, .op = SRT_OP_grad_sumsq, .t = { g } });
}

/* grad_norm_finish on SRT_HOST (the generated code's when the optimizer is
 * offloaded and the norm is this rank's alone). */
void cu_host_grad_norm_finish(srt_ctx *c, srt_group g)
{
    cu_host_push(c, &(cu_hop){ .c = c, .op = SRT_OP_grad_norm_finish, .g = g, .sc = cu_step_scalars(c) });
}

/* optimizer_step on SRT_HOST, with this step's scalars. */
void cu_host_optimizer_step(srt_ctx *c, srt_t params, srt_t master, srt_t grads, srt_t m, srt_t v, bool decay)
{
    cu_host_push(c, &(cu_hop){ .c = c, .op = SRT_OP_optimizer_step, .t = { params, master, grads, m, v },
                               .decay = decay, .sc = cu_step_scalars(c) });
}

/* An event recorded on SRT_HOST: the ticket of the host ops issued so far. */
void cu_host_record(srt_ctx *c, int ev)
{
    cu_state *st = cu_st(c);
    st->ev_host[ev] = true;
    st->ev_ticket[ev] = hq_mark(&st->hostq);
}

/* SRT_HOST waits for ev: nothing for a host event (the queue is in order);
 * for a device event, a snapshot of its record now (the gate stream waits
 * for it, then records a free gate event) and a closure that waits on the
 * worker for the snapshot.  A gate slot is reused once the worker has passed
 * the closure that waited on it (the trainer's thread waits for that only
 * with CU_GATES waits outstanding). */
void cu_host_wait(srt_ctx *c, int ev)
{
    cu_state *st = cu_st(c);
    if (st->ev_host[ev]) return;
    int k = st->gate_next;
    st->gate_next = (k + 1) % CU_GATES;
    hq_wait(&st->hostq, st->gate_ticket[k]);
    CU_CHECK(c, cudaStreamWaitEvent(st->gate, st->event[ev], 0), "srt_event_wait (SRT_HOST): cudaStreamWaitEvent");
    CU_CHECK(c, cudaEventRecord(st->gate_ev[k], st->gate), "srt_event_wait (SRT_HOST): cudaEventRecord");
    st->gate_ticket[k] = hq_push(&st->hostq, cu_hop_run, &(cu_hop){ .c = c, .op = CU_HOP_WAIT, .gate = k },
                                 sizeof(cu_hop));
    if (st->gate_ticket[k] == 0) ctx_die(c, "host queue: out of memory");
}

/* A device stream waits for host event ev: the issuing thread blocks until
 * the worker has passed it. */
void cu_host_block(srt_ctx *c, int ev)
{
    cu_state *st = cu_st(c);
    hq_wait(&st->hostq, st->ev_ticket[ev]);
}

/* Waits for every host op issued so far. */
void cu_host_drain(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    if (st->hostq.running) hq_drain(&st->hostq);
}
