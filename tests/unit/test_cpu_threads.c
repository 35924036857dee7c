/* test_cpu_threads.c — the CPU backend's OpenMP threads per rank and its
 * check of a launch (runtime/cpu/threads.c) on nodes described by masks:
 * the launches of OpenMPI's defaults, --bind-to none and --map-by slot:PE=k
 * on 2 and 8 CPUs, with and without OMP_NUM_THREADS. */
#define _GNU_SOURCE
#include "threads.h"

#include <stdio.h>
#include <string.h>

static int g_checks, g_failed;

static void check(int ok, const char *what, const char *msg)
{
    g_checks++;
    if (!ok) g_failed++;
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, msg && *msg ? ": " : "", msg ? msg : "");
}

/* A mask of CPUs [lo, hi). */
static cpu_set_t cpus(int lo, int hi)
{
    cpu_set_t m;
    CPU_ZERO(&m);
    for (int i = lo; i < hi; i++) CPU_SET(i, &m);
    return m;
}

/* One node: n ranks on masks, threads from OMP_NUM_THREADS (env > 0) or
 * chosen; checks the chosen counts (want_threads, -1: not checked) and
 * whether the check speaks, and that its line has `needle`. */
static void node(const char *what, int node_cpus, const cpu_set_t *masks, int n, int env, int want_threads,
                 int want_msg, const char *needle)
{
    int threads[16];
    int64_t ranks[16];
    int ok = 1;
    for (int r = 0; r < n; r++) {
        ranks[r] = r;
        threads[r] = env > 0 ? env : cpu_threads_auto(masks, n, r);
        if (want_threads > 0 && threads[r] != want_threads) ok = 0;
    }
    char msg[512] = "";
    int spoke = cpu_threads_check(masks, threads, ranks, n, node_cpus, env > 0, msg, sizeof msg);
    ok &= spoke == want_msg && (!needle || strstr(msg, needle) != NULL);
    check(ok, what, msg);
}

int main(void)
{
    cpu_set_t m[8];
    /* 2 CPUs */
    m[0] = cpus(0, 1);
    node("mpirun -np 1 (bound to a core): 1 thread, the other CPU idle", 2, m, 1, 0, 1, 1,
         "`mpirun --bind-to none`");
    node("mpirun -np 1 with OMP_NUM_THREADS=2: two threads on one core", 2, m, 1, 2, 2, 1,
         "rank 0 runs 2 OpenMP threads (OMP_NUM_THREADS) on the 1 CPU");
    m[0] = cpus(0, 2);
    node("mpirun -np 1 --bind-to none, or no launcher: 2 threads", 2, m, 1, 0, 2, 0, NULL);
    node("... with OMP_NUM_THREADS=1: one CPU idle", 2, m, 1, 1, 1, 1, "set OMP_NUM_THREADS=2");
    node("... with OMP_NUM_THREADS=3: more threads than CPUs", 2, m, 1, 3, 3, 1, "set OMP_NUM_THREADS=2");
    m[0] = cpus(0, 1), m[1] = cpus(1, 2);
    node("mpirun -np 2 (a core each): 1 thread each", 2, m, 2, 0, 1, 0, NULL);
    for (int r = 0; r < 4; r++) m[r] = cpus(0, 2);
    node("mpirun -np 4 --oversubscribe --bind-to none: 1 thread each, nothing to say", 2, m, 4, 0, 1, 0, NULL);
    node("... with OMP_NUM_THREADS=2: 8 threads on 2 CPUs", 2, m, 4, 2, 2, 1,
         "run 8 OpenMP threads (OMP_NUM_THREADS) on 2 CPUs: set OMP_NUM_THREADS=1");
    node("mpirun -np 2 --bind-to none: 1 thread each", 2, m, 2, 0, 1, 0, NULL);
    /* 8 CPUs */
    m[0] = cpus(0, 1), m[1] = cpus(1, 2);
    node("8 CPUs, mpirun -np 2 (a core each): 6 idle, hint PE=4", 8, m, 2, 0, 1, 1, "`mpirun --map-by slot:PE=4`");
    m[0] = cpus(0, 4), m[1] = cpus(4, 8);
    node("8 CPUs, mpirun -np 2 --map-by slot:PE=4: 4 threads each", 8, m, 2, 0, 4, 0, NULL);
    m[0] = m[1] = cpus(0, 8);
    node("8 CPUs, mpirun -np 2 --bind-to none: 4 threads each", 8, m, 2, 0, 4, 0, NULL);
    for (int r = 0; r < 3; r++) m[r] = cpus(0, 8);
    node("8 CPUs, 3 ranks unbound: 2 threads each (2 CPUs left over, said nothing)", 8, m, 3, 0, 2, 0, NULL);
    /* the cpuset lists of cgroups (the node's CPUs in a container or a batch job) */
    check(cpu_list_count("0-3,8,10-11\n") == 7 && cpu_list_count("0") == 1 && cpu_list_count("") == 0 &&
          cpu_list_count("5-2") == -1 && cpu_list_count("1,x") == -1, "cpuset lists: 0-3,8,10-11 is 7 CPUs", NULL);
    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed != 0;
}
