/* threads.c — how many OpenMP threads each rank runs, and the one line that
 * says so when a launch leaves CPUs of a node idle or makes threads share
 * them.
 *
 * The kernels run OpenBLAS single-threaded inside OpenMP's threads
 * (kernels/cpu/matmul.c), so OpenMP's count is the only one: kc_init has set
 * OpenBLAS's to 1.  A rank may run on the CPUs of its affinity mask, which
 * the launcher sets: OpenMPI binds each rank to one core when it starts two
 * ranks or fewer, so a lone rank of `mpirun -np 1` sees one CPU of the node;
 * `--bind-to none` leaves every rank the whole node.  Without OMP_NUM_THREADS
 * a rank runs its CPUs divided by the ranks of its node whose masks overlap
 * its own (at least 1): all of a node's CPUs, none shared.  With it, the
 * user's count stands.  Either way the ranks of a node compare their masks
 * and threads, and its first rank prints one line when the CPUs they may use
 * are fewer than the node's (idle cores), a rank runs more threads than its
 * mask has CPUs, or the node's ranks together run more threads than their
 * CPUs while some rank runs several (four ranks of one thread on two cores
 * is as good as that machine gets; say nothing then).
 */
#define _GNU_SOURCE
#include "threads.h"

#include "cpu.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* CPUs in both masks. */
static int cpu_overlap(const cpu_set_t *a, const cpu_set_t *b)
{
    cpu_set_t x;
    CPU_AND(&x, a, b);
    return CPU_COUNT(&x);
}

int cpu_threads_auto(const cpu_set_t *masks, int n, int r)
{
    int share = 0;
    for (int i = 0; i < n; i++) share += cpu_overlap(&masks[i], &masks[r]) > 0;
    int t = CPU_COUNT(&masks[r]) / (share > 0 ? share : 1);
    return t > 0 ? t : 1;
}

/* The launch that gives each of n ranks of a node of node_cpus CPUs its own
 * share, for the hints. */
static void cpu_threads_hint(char *h, size_t cap, int n, int node_cpus)
{
    int pe = node_cpus / n;
    if (n == 1)
        snprintf(h, cap, "launch it with `mpirun --bind-to none` (or without mpirun)");
    else if (pe >= 1)
        snprintf(h, cap, "launch with `mpirun --map-by slot:PE=%d` (%d CPUs a rank) or `mpirun --bind-to none`",
                 pe, pe);
    else
        snprintf(h, cap, "launch with `mpirun --oversubscribe --bind-to none`");
}

bool cpu_threads_check(const cpu_set_t *masks, const int *threads, const int64_t *ranks, int n, int node_cpus,
                       bool from_env, char *msg, size_t cap)
{
    cpu_set_t all;
    CPU_ZERO(&all);
    int total = 0, most = 0, worst = -1;
    for (int i = 0; i < n; i++) {
        CPU_OR(&all, &all, &masks[i]);
        total += threads[i];
        most = threads[i] > most ? threads[i] : most;
        if (threads[i] > CPU_COUNT(&masks[i]) && worst < 0) worst = i;
    }
    int used = CPU_COUNT(&all);
    const char *why = from_env ? "OMP_NUM_THREADS" : "chosen from its affinity";
    char hint[160];
    cpu_threads_hint(hint, sizeof hint, n, node_cpus);
    if (worst >= 0) {
        int m = CPU_COUNT(&masks[worst]);
        if (used < node_cpus)
            snprintf(msg, cap, "rank %lld runs %d OpenMP threads (%s) on the %d CPU%s its affinity allows, "
                     "%d of this node's %d CPUs idle: %s", (long long)ranks[worst], threads[worst], why, m,
                     m == 1 ? "" : "s", node_cpus - used, node_cpus, hint);
        else
            snprintf(msg, cap, "rank %lld runs %d OpenMP threads (%s) on the %d CPU%s its affinity allows: "
                     "set OMP_NUM_THREADS=%d, or unset it", (long long)ranks[worst], threads[worst], why, m,
                     m == 1 ? "" : "s", m);
        return true;
    }
    char who[64];   /* the subject of the two lines below */
    if (n == 1) snprintf(who, sizeof who, "rank %lld runs", (long long)ranks[0]);
    else snprintf(who, sizeof who, "the %d ranks of this node run", n);
    if (total > used && most > 1) {
        int fit = used / n > 0 ? used / n : 1;
        snprintf(msg, cap, "%s %d OpenMP threads (%s) on %d CPUs: set OMP_NUM_THREADS=%d, or unset it", who,
                 total, why, used, fit);
        return true;
    }
    if (used < node_cpus && n == 1) {
        snprintf(msg, cap, "rank %lld may use %d of this node's %d CPUs (its affinity, as the launcher bound "
                 "it), %d idle: %s", (long long)ranks[0], used, node_cpus, node_cpus - used, hint);
        return true;
    }
    if (used < node_cpus) {
        snprintf(msg, cap, "the %d ranks of this node may use %d of its %d CPUs (their affinity, as the "
                 "launcher bound them), %d idle: %s", n, used, node_cpus, node_cpus - used, hint);
        return true;
    }
    if (from_env && most < used / n) {   /* the user's count leaves CPUs idle */
        snprintf(msg, cap, "%s %d OpenMP thread%s (OMP_NUM_THREADS) on %d CPUs, %d idle: "
                 "set OMP_NUM_THREADS=%d, or unset it", who, total, total == 1 ? "" : "s", used, used - total,
                 used / n);
        return true;
    }
    return false;
}

int cpu_list_count(const char *s)
{
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s) return -1;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a) return -1;
        }
        n += (int)(b - a + 1);
        s = end;
        if (*s == ',') s++;
        else if (*s && *s != '\n') return -1;
    }
    return n;
}

/* The CPUs of this process's cpuset cgroup (a container's, a batch job's),
 * cgroup v2 or v1, or -1 when there is none to read. */
static int cpu_cgroup_cpus(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[4096], list[4096];
    int n = -1;
    while (n < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *ctl = c1 + 1, *cg = c2 + 1;
        const char *files[3] = { NULL, NULL, NULL };
        char a[4200], b[4200];
        if (!*ctl) {   /* v2: the unified hierarchy, at the mount point or under unified/ */
            snprintf(a, sizeof a, "/sys/fs/cgroup%s/cpuset.cpus.effective", cg);
            snprintf(b, sizeof b, "/sys/fs/cgroup/unified%s/cpuset.cpus.effective", cg);
            files[0] = a, files[1] = b;
        } else if (strstr(ctl, "cpuset")) {   /* v1: the cpuset controller's hierarchy */
            snprintf(a, sizeof a, "/sys/fs/cgroup/cpuset%s/cpuset.effective_cpus", cg);
            files[0] = a;
        }
        for (int i = 0; files[i] && n < 0; i++) {
            FILE *g = fopen(files[i], "r");
            if (!g) continue;
            if (fgets(list, sizeof list, g)) n = cpu_list_count(list);
            fclose(g);
        }
    }
    fclose(f);
    return n > 0 ? n : -1;
}

/* The CPUs of this node the job may use: its cpuset cgroup's, else the
 * online ones. */
static int cpu_node_cpus(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cg = cpu_cgroup_cpus();
    int n = online > 0 ? (int)online : 1;
    return cg > 0 && cg < n ? cg : n;
}

void cpu_threads_init(srt_ctx *c)
{
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) == 0)
        for (int i = 0; i < cpu_node_cpus() && i < CPU_SETSIZE; i++) CPU_SET(i, &mine);
    const char *e = getenv("OMP_NUM_THREADS");
    bool from_env = e && *e;
    MPI_Comm node = MPI_COMM_NULL;
    int n = 1, me = 0;
    if (c->mpi) {
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, (int)c->rank, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &n);
        MPI_Comm_rank(node, &me);
    }
    cpu_set_t *masks = malloc(sizeof *masks * (size_t)n);
    int *threads = malloc(sizeof *threads * (size_t)n);
    int64_t *ranks = malloc(sizeof *ranks * (size_t)n);
    if (!masks || !threads || !ranks) ctx_fatal(c, 1, "out of host memory");
    masks[me] = mine, ranks[me] = c->rank;
    if (node != MPI_COMM_NULL) {
        MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, masks, (int)sizeof mine, MPI_BYTE, node);
        MPI_Allgather(&c->rank, 1, MPI_INT64_T, ranks, 1, MPI_INT64_T, node);
    }
    int t = from_env ? omp_get_max_threads() : cpu_threads_auto(masks, n, me);
    if (!from_env) omp_set_num_threads(t);
    threads[me] = t;
    if (node != MPI_COMM_NULL) MPI_Allgather(&t, 1, MPI_INT, threads, 1, MPI_INT, node);
    char msg[512];
    if (me == 0 && cpu_threads_check(masks, threads, ranks, n, cpu_node_cpus(), from_env, msg, sizeof msg)) {
        fprintf(stderr, "shardrt: cpu: warning: %s\n", msg);
        fflush(stderr);
    }
    free(masks), free(threads), free(ranks);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
}

/* What two libraries read once, when they are loaded, so that the process
 * sets it and executes itself again (once: the second time both are set);
 * a user's setting stands.
 *
 * OpenMP's wait policy.  libgomp's default has a thread that reaches the end
 * of a parallel region spin for its team (GOMP_SPINCOUNT 300000 rounds)
 * before it sleeps; when another process holds one of the cores, the thread
 * it waits for is not running and the spinner takes the core it needs.
 * Sleeping at once (OMP_WAIT_POLICY=passive) costs a wake-up at every
 * region.  Measured on gpt-1 of the fidelity benchmark (one rank, two
 * threads, 2 cores; one thread alone 76-145 ms a step): with other jobs
 * running (load 4-7) 207-963 ms with the default, 132-161 ms spinning 1000
 * rounds, 84-104 ms passive; on the quiet machine 51-54, 56-59 and 97-160 ms.
 * So a rank spins 1000 rounds (docs/trainer.md, "Launching") unless
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT is set.
 *
 * OpenBLAS's kernels: on a CPU model it does not recognise it runs its SSE3
 * ones, 4.8x slower on this machine's AVX-512 (kc_blas_core_upgrade); then
 * OPENBLAS_CORETYPE names the ones the CPU can run, unless it is set. */
void cpu_start(char **argv)
{
    const char *p = getenv("OMP_WAIT_POLICY"), *n = getenv("GOMP_SPINCOUNT"), *b = getenv("OPENBLAS_CORETYPE");
    const char *core = b && *b ? NULL : kc_blas_core_upgrade();
    bool wait = !(p && *p) && !(n && *n), again = false;
    if (wait) again |= setenv("GOMP_SPINCOUNT", "1000", 1) == 0;
    if (core) again |= setenv("OPENBLAS_CORETYPE", core, 1) == 0;
    if (!again) return;
    execv("/proc/self/exe", argv);
    if (wait) unsetenv("GOMP_SPINCOUNT");      /* not executed: the libraries' own choices stand */
    if (core) unsetenv("OPENBLAS_CORETYPE");
}
