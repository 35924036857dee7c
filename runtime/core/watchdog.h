/* watchdog.h — no silent hang in MPI (prefix wd_): every wait of the CPU
 * backend's collectives and sends/receives, and of srt_main's own world
 * collectives, goes through wd_wait.
 *
 * wd_wait tests its requests (MPI_Testsome).  For the first 5 ms it yields
 * the core between tests (sched_yield): every CPU collective needs each
 * member inside MPI to progress, and a member asleep stalls the others (a
 * 100 us spin then naps of up to 1 ms made tp's ~170 small all-reduces a
 * step cost 3-10x the compute), while a yielding rank answers within
 * microseconds and still lets a rank that shares its core run.  Past that
 * it sleeps with a backoff (50 us doubling to 1 ms), so a rank waiting for
 * a late or stopped peer uses next to no CPU.  Past the timeout — train.comm_timeout
 * in the spec (srt_program.comm_timeout), SRT_COMM_TIMEOUT in the environment
 * overriding it, 300 s without either — it prints what did not complete (the
 * op, the group, for a send or receive the peer) and which ranks did not
 * arrive, then ends every rank (ctx_fatal: MPI_Abort; the launcher kills the
 * others, a stopped one included).  Time this rank itself did not run (a
 * gap of over a second between two tests: it was stopped, or starved of
 * CPU) does not count, so a rank continued after a SIGSTOP does not blame
 * its peers for its own pause.
 *
 * Who did not arrive.  Each rank counts the collectives it has entered per
 * group (wd_arrive) in an MPI window (one-sided communication).  A rank that
 * times out reads every member's count with MPI_Rget: a member whose count is
 * below its own never reached this collective; equal, it arrived (and waits,
 * or stopped inside it).  Within a node the window is shared memory and even
 * a stopped process's count is read; across nodes over a transport that
 * needs the target's progress (TCP), a stopped or dead rank cannot answer
 * and is reported as such after a few seconds.  Where no window could be
 * made, the message says that the ranks are unknown.
 */
#ifndef SHARDRT_WATCHDOG_H
#define SHARDRT_WATCHDOG_H

#include <mpi.h>

#include "internal.h"

/* The counters: one per group, one for srt_main's own world collectives. */
enum { WD_CORE = SRT_NGROUPS, WD_NSLOTS };

/* What a wait is for, for the message. */
typedef struct wd_what {
    const char *op;             /* "all_reduce", "send/recv", ...                   */
    int slot;                   /* the group (srt_group), or WD_CORE                */
    MPI_Comm comm;              /* its communicator (for its members' world ranks)  */
    const int *peers;           /* per request: the peer's rank in comm (sends and
                                   receives), or NULL for a collective              */
} wd_what;

/* Collective over the world (ctx_create calls it): the timeout, the window. */
void wd_init(srt_ctx *c);
void wd_fini(srt_ctx *c);
/* This rank enters the next collective of slot (before posting it). */
void wd_arrive(srt_ctx *c, int slot);
/* Waits for n requests; past the timeout ends the job, saying why (above). */
void wd_wait(srt_ctx *c, int n, MPI_Request *reqs, const wd_what *w);
/* A collective on MPI_COMM_WORLD for srt_main, under the watchdog. */
void wd_allreduce(srt_ctx *c, void *buf, int n, MPI_Datatype t, MPI_Op op, const char *what);
void wd_bcast(srt_ctx *c, void *buf, int n, MPI_Datatype t, int root, const char *what);

#endif
