/* watchdog.c — waits with a timeout and a diagnosis (see watchdog.h). */
#define _GNU_SOURCE
#include "watchdog.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#define WD_DEFAULT_S 300.0      /* without the spec's key or the environment's  */
#define WD_YIELD_S SRT_WAIT_YIELD_S /* tests with sched_yield between them, then naps */
#define WD_NAP_MIN_NS SRT_WAIT_NAP_MIN_NS /* the first nap (50 us)              */
#define WD_NAP_MAX_NS SRT_WAIT_NAP_MAX_NS /* the longest sleep between two tests (1 ms) */
#define WD_ASK_S 5.0            /* how long the diagnosis waits for an answer    */
#define WD_MAX_REQS 256         /* requests of one wait                          */
#define WD_GAP_S 1.0            /* a pause between two tests not counted         */

struct wd_state {
    MPI_Win win;
    int64_t *count;             /* the window: WD_NSLOTS collectives entered     */
    bool have_win;
};

/* Seconds on the monotonic clock. */
static double wd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Between two tests of a wait that has lasted waited seconds: for the first
 * WD_YIELD_S the core is offered to whatever else is runnable (sched_yield)
 * and taken back at once when nothing is, so that a peer's arrival is seen
 * within microseconds and a peer sharing this core runs; past it, sleeps
 * *nap nanoseconds and doubles the next nap up to WD_NAP_MAX_NS. */
static void wd_nap(double waited, long *nap)
{
    if (waited < WD_YIELD_S) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, *nap};
    nanosleep(&ts, NULL);
    *nap = *nap * 2 > WD_NAP_MAX_NS ? WD_NAP_MAX_NS : *nap * 2;
}

/* The timeout: SRT_COMM_TIMEOUT, else the spec's, else the default. */
static double wd_timeout(const srt_program *p)
{
    const char *e = getenv("SRT_COMM_TIMEOUT");
    double v = e ? atof(e) : 0;
    if (v > 0) return v;
    return p && p->comm_timeout > 0 ? p->comm_timeout : WD_DEFAULT_S;
}

/* The timeout and the window of arrival counts (a collective over the world). */
void wd_init(srt_ctx *c)
{
    c->comm_timeout = wd_timeout(c->prog);
    if (!c->mpi || c->world < 2) return;
    struct wd_state *w = ctx_alloc(c, sizeof *w, "the watchdog's state");
    c->wd = w;
    MPI_Errhandler prev;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &prev);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Win_allocate((MPI_Aint)(WD_NSLOTS * sizeof(int64_t)), (int)sizeof(int64_t), MPI_INFO_NULL,
                              MPI_COMM_WORLD, &w->count, &w->win);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, prev);
    MPI_Errhandler_free(&prev);
    if (rc != MPI_SUCCESS) return;      /* the diagnosis says it cannot tell */
    memset(w->count, 0, WD_NSLOTS * sizeof(int64_t));
    MPI_Win_lock_all(MPI_MODE_NOCHECK, w->win);
    w->have_win = true;
}

void wd_fini(srt_ctx *c)
{
    struct wd_state *w = c->wd;
    int fin = 0;
    MPI_Finalized(&fin);
    if (w && w->have_win && !fin) {
        MPI_Win_unlock_all(w->win);
        MPI_Win_free(&w->win);
    }
    free(w);                    /* ctx_alloc's: the context frees what it made */
    c->wd = NULL;
}

void wd_arrive(srt_ctx *c, int slot)
{
    if (c && c->wd && c->wd->have_win) __atomic_add_fetch(&c->wd->count[slot], 1, __ATOMIC_RELAXED);
}

/* The group's name in messages. */
static const char *wd_group(int slot)
{
    return slot == WD_CORE ? "world (srt_main's own)" : ops_group_name((srt_group)slot);
}

/* The world ranks of comm's members 0 .. n-1 into out. */
static void wd_world_ranks(MPI_Comm comm, int n, const int *in, int *out)
{
    MPI_Group g, wg;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, n, in, wg, out);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
}

/* Appends printf output to msg (len bytes in all). */
static void wd_cat(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void wd_cat(char *msg, size_t len, const char *fmt, ...)
{
    size_t at = strlen(msg);
    if (at + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + at, len - at, fmt, ap);
    va_end(ap);
}

/* Which members of w's group have entered this collective: their counts,
 * read from the window, against this rank's. */
static void wd_who(srt_ctx *c, const wd_what *w, char *msg, size_t len)
{
    struct wd_state *st = c->wd;
    if (!st || !st->have_win) {
        wd_cat(msg, len, "; which ranks did not arrive is unknown (no MPI window for the arrival counts)");
        return;
    }
    int n = 0;
    MPI_Comm_size(w->comm, &n);
    int *mem = malloc(sizeof(int) * (size_t)n * 2), *world = mem + n;
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)n);
    MPI_Request *q = malloc(sizeof(MPI_Request) * (size_t)n);
    int *done = malloc(sizeof(int) * (size_t)n);
    if (!mem || !cnt || !q || !done) {
        wd_cat(msg, len, "; out of memory to ask which ranks arrived");
        free(mem), free(cnt), free(q), free(done);
        return;
    }
    for (int i = 0; i < n; i++) mem[i] = i;
    wd_world_ranks(w->comm, n, mem, world);
    int64_t mine = __atomic_load_n(&st->count[w->slot], __ATOMIC_RELAXED);
    for (int i = 0; i < n; i++) {
        cnt[i] = -1;
        if (MPI_Rget(&cnt[i], 1, MPI_INT64_T, world[i], w->slot, 1, MPI_INT64_T, st->win, &q[i]) != MPI_SUCCESS)
            q[i] = MPI_REQUEST_NULL;
    }
    double t0 = wd_now();
    long nap = 20000;
    for (;;) {      /* until every answer is in, or WD_ASK_S */
        int out = 0;
        if (MPI_Testsome(n, q, &out, done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || out == MPI_UNDEFINED ||
            wd_now() - t0 > WD_ASK_S)
            break;
        wd_nap(1.0, &nap);
    }
    const char *sep = "";
    wd_cat(msg, len, "; did not arrive:");
    int late = 0;
    for (int i = 0; i < n; i++)
        if (q[i] == MPI_REQUEST_NULL && cnt[i] >= 0 && cnt[i] < mine) {
            wd_cat(msg, len, "%s rank %d (it entered %lld collectives of this group, this rank %lld)", sep, world[i],
                   (long long)cnt[i], (long long)mine);
            sep = ",", late++;
        }
    if (!late) wd_cat(msg, len, " none (every member that answered entered it: one stopped inside it?)");
    for (int pass = 0; pass < 2; pass++) {
        sep = pass ? "; did not answer (stopped, dead, or on an unreachable node): rank" : "; arrived: rank";
        for (int i = 0; i < n; i++) {
            bool unanswered = q[i] != MPI_REQUEST_NULL || cnt[i] < 0;
            if (pass ? unanswered : !unanswered && cnt[i] >= mine) {
                wd_cat(msg, len, "%s %d", sep, world[i]);
                sep = ",";
            }
        }
    }
    free(mem), free(cnt), free(q), free(done);
}

/* The verdict: what did not complete, who is missing; ends every rank. */
static _Noreturn void wd_expired(srt_ctx *c, int n, MPI_Request *reqs, const wd_what *w, double waited)
{
    char msg[4096];
    snprintf(msg, sizeof msg, "%s on the %s group did not complete in %.0f s (train.comm_timeout %g s%s)", w->op,
             wd_group(w->slot), waited, c->comm_timeout, getenv("SRT_COMM_TIMEOUT") ? ", set by SRT_COMM_TIMEOUT" : "");
    if (w->peers) {
        wd_cat(msg, sizeof msg, "; no match from");
        const char *sep = "";
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int world = -1;
            wd_world_ranks(w->comm, 1, &w->peers[i], &world);
            wd_cat(msg, sizeof msg, "%s rank %d", sep, world);
            sep = ",";
        }
        wd_cat(msg, sizeof msg, " (stopped, dead, or stuck elsewhere)");
    } else {
        wd_who(c, w, msg, sizeof msg);
    }
    wd_cat(msg, sizeof msg, "; ending every rank");
    ctx_fatal(c, 1, "%s", msg);
}

void wd_wait(srt_ctx *c, int n, MPI_Request *reqs, const wd_what *w)
{
    double t0 = wd_now(), last = t0, limit = c ? c->comm_timeout : wd_timeout(NULL);
    long nap = WD_NAP_MIN_NS;
    int done[WD_MAX_REQS];
    if (n > WD_MAX_REQS) ctx_die(c, "wd_wait of %d requests (at most %d)", n, WD_MAX_REQS);
    for (;;) {
        int out = 0;
        int rc = MPI_Testsome(n, reqs, &out, done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            char e[MPI_MAX_ERROR_STRING];
            int el = 0;
            MPI_Error_string(rc, e, &el);
            ctx_fatal(c, 1, "%s on the %s group failed: %s", w->op, wd_group(w->slot), e);
        }
        if (out == MPI_UNDEFINED) return;       /* every request is complete */
        /* a gap far beyond a nap: this process was stopped (SIGSTOP) or not
         * scheduled; that time is not the peers' delay and is not counted */
        double now = wd_now();
        if (now - last > WD_GAP_S) t0 += now - last;
        last = now;
        double t = now - t0;
        if (t > limit) wd_expired(c, n, reqs, w, t);
        wd_nap(t, &nap);
    }
}

void wd_allreduce(srt_ctx *c, void *buf, int n, MPI_Datatype t, MPI_Op op, const char *what)
{
    MPI_Request q;
    wd_arrive(c, WD_CORE);
    MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op, MPI_COMM_WORLD, &q);
    wd_wait(c, 1, &q, &(wd_what){what, WD_CORE, MPI_COMM_WORLD, NULL});
}

void wd_bcast(srt_ctx *c, void *buf, int n, MPI_Datatype t, int root, const char *what)
{
    MPI_Request q;
    wd_arrive(c, WD_CORE);
    MPI_Ibcast(buf, n, t, root, MPI_COMM_WORLD, &q);
    wd_wait(c, 1, &q, &(wd_what){what, WD_CORE, MPI_COMM_WORLD, NULL});
}
