/* sharing.c — how ranks that share their cores in time progress (run by
 * run.sh; see there).  Every rank computes a pure-ALU loop of X ms of its own
 * CPU time (no memory traffic, so no cache contention: only the turns on the
 * cores are measured) and waits as the CPU runtime waits (sched_yield between
 * the tests for SRT_WAIT_YIELD_S, then naps: runtime/core/watchdog.c).
 *
 *   sharing lockstep X ITERS   pairs of ranks: compute, all-reduce in the pair
 *                              (a tensor-parallel layer's halves, all ranks busy)
 *   sharing turns X ITERS      pairs take turns in a ring, one pair computing at
 *                              a time, the others waiting in a receive (a
 *                              pipeline's stages, waits shorter than the yield
 *                              phase when X is small)
 *   sharing turns4 X ITERS     the same with groups of four (a pipeline stage of
 *                              tp 2 · dp 2, as gpt-3d-8's)
 *   sharing idle X ITERS       one pair computes and all-reduces, the others wait
 *                              in one receive for the whole run
 *
 * Rank 0 prints one line: the case, W, the cores, X, the wall time per
 * iteration, processor sharing's prediction (the busy ranks' CPU seconds over
 * min(busy ranks, cores) cores: waiting ranks cost no core time) and the
 * ratio of the two.  Groups all-reduce 16 KB after each X. */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../../runtime/include/shardrt.h"

static double wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile double sink;

static void work(long n)
{
    double a = 1.0;
    for (long i = 0; i < n; i++) a = a * 1.0000001 + 1e-9;
    sink = a;
}

/* Iterations of work() that take `ms` of this thread's CPU time (the fastest
 * of five tries: CPU time does not count the turns other ranks take). */
static long calibrate(double ms)
{
    long n = 200000;
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        double t0 = cpu();
        work(n);
        double t = (cpu() - t0) / (double)n;
        if (t < best) best = t;
    }
    return (long)(ms * 1e-3 / best);
}

/* Waits for q as the runtime's watchdog does. */
static void wait_req(MPI_Request *q)
{
    int done = 0;
    double t0 = wall();
    long nap = SRT_WAIT_NAP_MIN_NS;
    for (;;) {
        MPI_Test(q, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (wall() - t0 < SRT_WAIT_YIELD_S) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        nap = nap * 2 > SRT_WAIT_NAP_MAX_NS ? SRT_WAIT_NAP_MAX_NS : nap * 2;
    }
}

static void group_reduce(MPI_Comm group, float *buf, int n)
{
    MPI_Request q;
    MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, group, &q);
    wait_req(&q);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, W;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    if (argc != 4 || W < 2 || W % 2) {
        if (!r) fprintf(stderr, "usage: mpirun -np EVEN sharing lockstep|turns|turns4|idle X_MS ITERS\n");
        MPI_Finalize();
        return 2;
    }
    const char *mode = argv[1];
    double x = atof(argv[2]);
    int G = !strcmp(mode, "turns4") ? 4 : 2;   /* ranks a group */
    if (W % G) {
        if (!r) fprintf(stderr, "sharing: %s needs a multiple of %d ranks\n", mode, G);
        MPI_Finalize();
        return 2;
    }
    int iters = atoi(argv[3]), P = W / G, k = r / G;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    MPI_Comm group;
    MPI_Comm_split(MPI_COMM_WORLD, k, r, &group);
    long n = calibrate(x);
    enum { NB = 4096 };                 /* 16 KB a group all-reduce */
    static float buf[NB];
    int tok = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = wall(), busy_ranks = W, turns = 1;
    if (!strcmp(mode, "lockstep")) {
        for (int i = 0; i < iters; i++) work(n), group_reduce(group, buf, NB);
    } else if (!strcmp(mode, "turns") || !strcmp(mode, "turns4")) {
        busy_ranks = G, turns = P;
        for (int i = 0; i < iters; i++)
            for (int turn = 0; turn < P; turn++) {
                MPI_Request q;
                if (turn == 0 && i == 0 && k == 0) {
                } else if (turn == 0 ? k == 0 : k == turn) {
                    MPI_Irecv(&tok, 1, MPI_INT, ((k + P - 1) % P) * G + r % G, 0, MPI_COMM_WORLD, &q);
                    wait_req(&q);
                }
                if (k != turn) continue;
                work(n), group_reduce(group, buf, NB);
                MPI_Isend(&tok, 1, MPI_INT, ((k + 1) % P) * G + r % G, 0, MPI_COMM_WORLD, &q);
                wait_req(&q);
            }
        if (k == 0) {                   /* the last group's token ends the ring */
            MPI_Request q;
            MPI_Irecv(&tok, 1, MPI_INT, (P - 1) * G + r % G, 0, MPI_COMM_WORLD, &q);
            wait_req(&q);
        }
    } else if (!strcmp(mode, "idle")) {
        busy_ranks = 2;
        if (k == 0) {
            for (int i = 0; i < iters; i++) work(n), group_reduce(group, buf, NB);
            if (r == 0)
                for (int d = 2; d < W; d++) MPI_Send(&tok, 1, MPI_INT, d, 1, MPI_COMM_WORLD);
        } else {
            MPI_Request q;
            MPI_Irecv(&tok, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, &q);
            wait_req(&q);
        }
    } else {
        if (!r) fprintf(stderr, "sharing: unknown case '%s'\n", mode);
        MPI_Finalize();
        return 2;
    }
    double t = (wall() - t0) / iters;
    MPI_Barrier(MPI_COMM_WORLD);
    /* processor sharing: the busy ranks' X each on min(busy, cores) cores, a
     * turn after another (turns: the P groups' a cycle) */
    double busy_cores = busy_ranks < (double)cores ? busy_ranks : (double)cores;
    double ps = turns * busy_ranks * x * 1e-3 / busy_cores;
    if (!r) printf("%-9s %2d ranks %2ld cores  X %5.2f ms  %8.3f ms an iteration  processor sharing %8.3f ms  ratio %.3f\n",
                   mode, W, cores, x, t * 1e3, ps * 1e3, t / ps);
    MPI_Finalize();
    return 0;
}
