/* calibrate.c — `shardc calibrate`: measures this machine through the runtime
 * and writes the profile a spec names with cluster.profile (profile.c reads
 * it; docs/cost-model.md, "Calibrating a machine").
 *
 * The measuring is shardrt_calibrate's (runtime/calibrate), prebuilt beside
 * the runtime library, so that it is the runtime's own code with its own
 * flags: the compute phase (each benchmark at 1 thread and at all the
 * cores in turn, `--threads 1,N`), then the communication phase under
 * mpirun once per ranks-per-node count, each rank with cores / ranks threads
 * and MPI yielding while it waits, as the README launches trainers.  Each phase writes its rows to a temporary
 * file; they are merged, with what describes the machine, into the profile,
 * written atomically, then read back through profile_load as a check.
 * Progress: a line per benchmark, or on a terminal one line rewritten.
 */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include "shardc.h"
#include "emit.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The cores this process may run on. */
static int calib_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- running a phase ------------------------------------------------------------------ */

/* The progress of the whole run: phases, and the terminal's line. */
typedef struct Progress { int phase, nphases; bool tty; } Progress;

/* Shows one line of a phase's output: as it is, or on a terminal as the one
 * line rewritten ("[phase 2/5] [12/80] gemm ...: 1.2 GFLOP/s"). */
static void show(Progress *pg, const char *line)
{
    if (pg->tty) fprintf(stderr, "\r\033[K[phase %d/%d] %.150s", pg->phase, pg->nphases, line);
    else fprintf(stderr, "[phase %d/%d] %s\n", pg->phase, pg->nphases, line);
    fflush(stderr);
}

/* Runs a command line through sh with extra environment (NAME=VALUE words
 * before it), its stdout shown line by line; returns the exit status (-1 if
 * it could not run or died of a signal). */
static int run_phase(Progress *pg, const char *env, const char *cmd)
{
    FILE *f = popen(arena_printf(&g_arena, "%s %s", env, cmd), "r");
    if (!f) return -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (*line) show(pg, line);
    }
    int status = pclose(f);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A word for sh, single-quoted. */
static const char *sh_quote(const char *s)
{
    Arena *a = &g_arena;
    size_t n = strlen(s), k = 0;
    char *q = arena_alloc(a, 4 * n + 3);
    q[k++] = '\'';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'') memcpy(q + k, "'\\''", 4), k += 4;
        else q[k++] = s[i];
    }
    q[k++] = '\'';
    return q;
}

/* Appends the rows of a phase's output file to rows, and sets *blas from
 * its "blas" unless set; false when it is not readable JSON with a "rows"
 * array. */
static bool take_rows(const char *path, cJSON *rows, const char **blas)
{
    size_t len;
    char *text = util_read_file(path, &len, 256u << 20);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;   /* text: an arena copy */
    cJSON *r = doc ? cJSON_GetObjectItemCaseSensitive(doc, "rows") : NULL;
    if (!cJSON_IsArray(r)) {
        cJSON_Delete(doc);
        return false;
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(doc, "blas");
    if (cJSON_IsString(b) && !*blas) *blas = arena_strdup(&g_arena, b->valuestring);
    while (cJSON_GetArraySize(r) > 0) cJSON_AddItemToArray(rows, cJSON_DetachItemFromArray(r, 0));
    cJSON_Delete(doc);
    return true;
}

/* The CPU's model name (/proc/cpuinfo), or "". */
static const char *cpu_model(void)
{
    size_t len;
    char *t = util_read_file("/proc/cpuinfo", &len, 16u << 20);
    const char *m = "";
    char *p = t ? strstr(t, "model name") : NULL;
    if (p && (p = strchr(p, ':'))) {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        m = arena_strndup(&g_arena, p, strcspn(p, "\n"));
    }
    return m;
}

/* The bytes of this machine's last-level cache, the largest one that cpu0's
 * sysfs lists (/sys/devices/system/cpu/cpu0/cache/indexN/size, "32768K");
 * 0 when none is listed.  The cost model prices a small model's GEMMs warm
 * when the node's working set fits it (docs/cost-model.md, "warm GEMMs"). */
static double llc_bytes(void)
{
    double best = 0;
    for (int i = 0; i < 8; i++) {
        size_t len;
        char *t = util_read_file(arena_printf(&g_arena, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i), &len, 4096);
        if (!t) continue;
        char *end;
        double v = strtod(t, &end);
        v *= *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
        if (v > best) best = v;
    }
    return best;
}

/* The one-minute load average (/proc/loadavg); -1 when it cannot be read. */
static double load_avg(void)
{
    size_t len;
    char *t = util_read_file("/proc/loadavg", &len, 4096);
    return t ? strtod(t, NULL) : -1;
}

/* ---- the driver --------------------------------------------------------------------------- */

/* shardc calibrate: the phases, the merge, the atomic write, the check. */
int calibrate_run(const CalibOpts *opts)
{
    CalibOpts o = *opts;
    bool cuda = strcmp(o.backend, "cuda") == 0;
    const char *bin = cc_runtime_file(o.runtime, cuda ? "shardrt_calibrate_cuda" : "shardrt_calibrate");
    if (!bin) {
        fprintf(stderr, "shardc calibrate: error: %s was not found in %s\n",
                cuda ? "shardrt_calibrate_cuda" : "shardrt_calibrate", o.runtime ? o.runtime : "shardc's build tree");
        fprintf(stderr, "hint: build it (cmake --build BUILD --target %s)%s, or point --runtime at its folder\n",
                cuda ? "shardrt_calibrate_cuda" : "shardrt_calibrate", cuda ? " where nvcc is found" : "");
        return EXIT_USER;
    }
    if (o.nranks == 0) {
        /* the CPU: 2, 4, 8, ... up to the larger of 8 and the cores; a GPU node:
         * up to its GPUs (a rank a GPU: NCCL takes no two ranks on one device),
         * none on one GPU (whose plans have no collectives to price) */
        int most = calib_cores() > 8 ? calib_cores() : 8;
        if (cuda) {
            FILE *f = popen(arena_printf(&g_arena, "%s devices", sh_quote(bin)), "r");
            int n = 0;
            if (!f || fscanf(f, "%d", &n) != 1) n = 0;
            if (f) pclose(f);
            if (n < 1) {
                fprintf(stderr, "shardc calibrate: error: %s devices found no CUDA device\n", bin);
                fprintf(stderr, "hint: calibrate the CUDA backend on a GPU machine (nvidia-smi -L lists its GPUs)\n");
                return EXIT_USER;
            }
            most = n;
            if (n == 1)
                fprintf(stderr, "shardc calibrate: one GPU: no collectives to measure (--ranks N with N ranks on "
                                "N GPUs measures them); the profile prices one-GPU plans\n");
        }
        for (int64_t w = 2; w <= most && o.nranks < CALIB_MAX_RANKS; w *= 2) o.ranks[o.nranks++] = w;
        if (o.nranks == 0 && o.nodes > 1) {
            fprintf(stderr, "shardc calibrate: error: --nodes %lld with one GPU a node: no rank count to measure across\n",
                    (long long)o.nodes);
            fprintf(stderr, "hint: --ranks 1 measures one rank a node\n");
            return EXIT_USER;
        }
    }
    int cores = calib_cores();
    char tmpl[] = "/tmp/shardc-calibrate-XXXXXX";
    if (!mkdtemp(tmpl)) {
        fprintf(stderr, "shardc calibrate: error: cannot make a temporary folder: %s\n", strerror(errno));
        return EXIT_USER;
    }
    const char *tmp = arena_strdup(&g_arena, tmpl);
    const char *root = getuid() == 0 ? " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" : "";
    static const char *const grid_flag[] = {"", " --quick", " --smoke"}, *const grid_name[] = {"full", "quick", "smoke"};
    const char *q = grid_flag[o.grid];
    const char *nvme = o.nvme_dir ? arena_printf(&g_arena, " --nvme-dir %s", sh_quote(o.nvme_dir)) : "";
    /* the CPU's rates at one thread and at all the cores, each benchmark at both in turn (one
     * process: the two rates of a shape from the same moments); a GPU's ops do not depend on
     * the host's threads */
    bool two = cores > 1 && !cuda;
    Progress pg = {0, 1 + o.nranks + (o.nodes > 1 ? 1 : 0), isatty(2) && !getenv("NO_COLOR")};
    double load0 = load_avg();
    cJSON *rows = cJSON_CreateArray();
    const char *blas = NULL;    /* the BLAS kernels the compute phase ran */
    bool ok = true;
    {
        const char *out = arena_printf(&g_arena, "%s/compute.json", tmp);
        const char *tl = two ? arena_printf(&g_arena, " --threads 1,%d", cores) : "";
        pg.phase++;
        int rc = run_phase(&pg, arena_printf(&g_arena, "OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=1%s", two ? cores : 1, root),
                           arena_printf(&g_arena, "%s compute --out %s%s%s%s", sh_quote(bin), sh_quote(out), q, nvme, tl));
        ok = rc == 0 && take_rows(out, rows, &blas);
        if (!ok) fprintf(stderr, "%sshardc calibrate: error: the compute benchmarks failed (exit %d)\n", pg.tty ? "\n" : "", rc);
    }
    /* communication and sharing, once per ranks-per-node count (and across nodes) */
    for (int i = 0; i < o.nranks + (o.nodes > 1 ? 1 : 0) && ok; i++) {
        int64_t w = i < o.nranks ? o.ranks[i] : o.ranks[o.nranks - 1], np = i < o.nranks ? w : w * o.nodes;
        int64_t t = cores / w > 0 ? cores / w : 1;
        const char *out = arena_printf(&g_arena, "%s/comm%d.json", tmp, i);
        pg.phase++;
        int rc = run_phase(&pg,
                           arena_printf(&g_arena, "OMP_NUM_THREADS=%lld OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1%s",
                                        (long long)t, root),
                           arena_printf(&g_arena, "%s -np %lld %s comm --out %s --ranks-per-node %lld%s", o.mpirun,
                                        (long long)np, sh_quote(bin), sh_quote(out), (long long)w, q));
        ok = rc == 0 && take_rows(out, rows, &blas);
        if (!ok) fprintf(stderr, "%sshardc calibrate: error: the communication benchmarks on %lld ranks failed (exit %d)\n"
                                 "hint: they run `%s -np %lld ...`; --mpirun sets the launcher\n",
                         pg.tty ? "\n" : "", (long long)np, rc, o.mpirun, (long long)np);
    }
    if (pg.tty) fputc('\n', stderr);
    char *cleanup = arena_printf(&g_arena, "rm -rf %s", sh_quote(tmp));
    if (system(cleanup) != 0) fprintf(stderr, "shardc calibrate: warning: could not remove %s\n", tmp);
    if (!ok) {
        cJSON_Delete(rows);
        return EXIT_USER;
    }
    /* the profile: what describes the machine, then the rows */
    cJSON *doc = cJSON_CreateObject();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddNumberToObject(doc, "shardc_profile", 1);
    cJSON_AddStringToObject(doc, "backend", o.backend);
    cJSON_AddStringToObject(doc, "device", cuda ? "the CUDA backend's device 0" : cpu_model());
    cJSON_AddStringToObject(doc, "host", host);
    if (blas) cJSON_AddStringToObject(doc, "blas", blas);
    cJSON_AddStringToObject(doc, "date", date);
    cJSON_AddStringToObject(doc, "shardc", SHARDC_VERSION);
    cJSON_AddNumberToObject(doc, "cores", cores);
    double llc = cuda ? 0 : llc_bytes();
    if (llc > 0) cJSON_AddNumberToObject(doc, "llc_bytes", llc);
    cJSON_AddNumberToObject(doc, "nodes", (double)o.nodes);
    cJSON_AddStringToObject(doc, "grid", grid_name[o.grid]);
    /* the machine's other load when the calibration began (its own ranks
     * raise the average by the end): on a machine busier than its cores the
     * rows with several threads or ranks measure that load too */
    if (load0 >= 0) {
        cJSON_AddNumberToObject(doc, "load_average", load0);
        if (load0 > cores)
            fprintf(stderr, "shardc calibrate: warning: the load average was %.2f on %d cores when it began: the rows "
                            "with several threads or ranks measure the other jobs too (calibrate a quiet machine)\n",
                    load0, cores);
    }
    cJSON_AddItemToObject(doc, "rows", rows);
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text || !util_write_atomic(o.out, text, strlen(text))) {
        fprintf(stderr, "shardc calibrate: error: cannot write %s: %s\n", o.out, strerror(errno));
        free(text);
        return EXIT_USER;
    }
    free(text);
    const Profile *pf = profile_load(o.out, (Loc){0});
    if (!pf) return EXIT_INTERNAL;   /* what this command wrote must read back */
    printf("wrote %s: %s backend, %d core%s, %d thread count%s, %d collective fits\n", o.out, o.backend, cores,
           cores > 1 ? "s" : "", pf->nthreads, pf->nthreads > 1 ? "s" : "", pf->ncoll);
    printf("use it: cluster { profile = \"%s\" } (relative to the spec's folder), or -D 'cluster.profile=\"%s\"'\n", o.out, o.out);
    return EXIT_OK;
}
