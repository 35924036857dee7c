/* driver.c — the shardc driver (prefix drv_): one table of tools (the
 * subcommands, as ninja's tools are), one option parser and one spec loader
 * they share, and the compiler's passes run in order in compile():
 *
 *   load      parse (spec.c), -D overrides and semantic checks (sema.c),
 *             the user-defined op's ABI (catalog.c)          -> Spec
 *   plan      model -> partition -> schedule -> memory plan   -> Plan  (plan.c)
 *   verify    the schedule's collectives, sends, events, arena (verify.c)
 *   then      plan:  fixes (fix.c), simulation (sim.c), reports (report.c,
 *                    trace.c, html.c)
 *             build: the C text (emit.c), compile and link (cc.c)
 */
#include "shardc.h"
#include "plan.h"
#include "sim.h"
#include "emit.h"
#include "catalog.h"
#include "tune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_POS = 4, MAX_OPTS = 10, MAX_OVERRIDES = 256 };

/* An option of a tool: "--json" with a value ("FILE"), or a flag (arg NULL). */
typedef struct Opt { const char *name, *arg; } Opt;

/* What a tool does with its first positional argument. */
typedef enum SpecUse { SPEC_NONE, SPEC_OPTIONAL, SPEC_REQUIRED } SpecUse;

typedef struct Job Job;

typedef struct Tool {
    const char *name;
    const char *synopsis;       /* the general usage's line                        */
    SpecUse spec;               /* the first positional is a spec, loaded first    */
    bool plans;                 /* it needs the verified plan                       */
    bool overrides;             /* takes -D (without a spec: import's own)          */
    int maxpos;                 /* positional arguments it takes                   */
    Opt opts[MAX_OPTS];
    const char *usage;          /* its --help text                                 */
    int (*check)(const Job *j); /* its options' checks before anything runs: PARSED
                                   or a usage error's exit code (NULL: none)        */
    int (*run)(Job *j);
    int (*own)(int argc, char **argv);  /* a tool that parses its own arguments (run NULL) */
    bool tunes;                 /* it takes a spec with open keys (shardc tune)     */
} Tool;

/* One invocation: the tool, its parsed arguments, and what the passes made. */
struct Job {
    const Tool *tool;
    const char *pos[MAX_POS];
    int npos;
    const char *val[MAX_OPTS];  /* each option's value ("" for a flag), NULL: not given */
    Override ov[MAX_OVERRIDES];
    int nov;
    Spec spec;
    bool spec_given;            /* spec was loaded by the caller (drv_run_spec)     */
    CatalogExtern ext;          /* the spec's user-defined op (ext.abi NULL: none)  */
    Plan plan;
    Sim sim;                    /* plan: the step simulated by period_plan          */
    bool simulated;
};

static const Tool tools[];
static const int ntools;

/* ---- usage ---------------------------------------------------------------- */

/* The general usage: every tool's line, the common options, the exit codes. */
static void general_usage(FILE *f)
{
    fputs("usage: shardc <command> [options]\n\ncommands:\n", f);
    for (int i = 0; i < ntools; i++) fputs(tools[i].synopsis, f);
    fputs("\n"
          "options for every command that reads a spec:\n"
          "  -D key.path=value                override a key, e.g. -D parallel.tp=4 -D zero.stage=2\n"
          "  --max-errors N                   stop after N errors (default 20)\n"
          "\n"
          "exit codes: 0 ok, 1 error in the input, 2 usage, 3 internal error\n", f);
}

/* A usage error of tool t (NULL: of the command line): the message and the
 * usage; returns EXIT_USAGE. */
static int usage_error(const Tool *t, const char *fmt, const char *arg)
{
    FILE *f = diag_stream ? diag_stream : stderr;
    fprintf(f, t ? "shardc %s: " : "shardc: ", t ? t->name : "");
    fprintf(f, fmt, arg);
    fputs("\n\n", f);
    if (t) fputs(t->usage, f);
    else general_usage(f);
    return EXIT_USAGE;
}

/* ---- the option parser ------------------------------------------------------ */

/* The index of option name among t's, or -1. */
static int find_opt(const Tool *t, const char *name, size_t len)
{
    for (int k = 0; k < MAX_OPTS && t->opts[k].name; k++)
        if (strlen(t->opts[k].name) == len && strncmp(t->opts[k].name, name, len) == 0) return k;
    return -1;
}

/* Parsing stops with an exit code (a usage error, or --help answered). */
enum { PARSED = -1 };

/* One -D key.path=value; PARSED, or the usage error's exit code. */
static int add_override(Job *j, const char *d)
{
    const char *eq = strchr(d, '=');
    if (!eq || eq == d) return usage_error(j->tool, "-D takes key.path=value, got '%s'", d);
    if (j->nov == MAX_OVERRIDES) return usage_error(j->tool, "more than %s -D overrides", "256");
    j->ov[j->nov].path = arena_strndup(&g_arena, d, (size_t)(eq - d));
    j->ov[j->nov++].text = eq + 1;
    return PARSED;
}

/* Parses the arguments after the tool's name into j: positionals, -D,
 * --max-errors, the tool's options ("--name VALUE" or "--name=VALUE").
 * Returns PARSED, or an exit code: a usage error, or 0 after --help. */
static int parse_args(Job *j, int argc, char **argv)
{
    const Tool *t = j->tool;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = PARSED;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(t->usage, stdout);
            return EXIT_OK;
        } else if (strncmp(a, "-D", 2) == 0 && t->overrides) {
            if (!a[2] && !v) return usage_error(t, "-D needs key.path=value%s", "");
            rc = add_override(j, a[2] ? a + 2 : argv[++i]);
        } else if (strcmp(a, "--max-errors") == 0) {
            if (!v) return usage_error(t, "%s needs a number", a);
            diag_max_errors = atoi(argv[++i]);
            if (diag_max_errors < 1) return usage_error(t, "%s must be at least 1", a);
        } else if (a[0] == '-' && a[1]) {
            const char *eq = strchr(a, '=');
            int k = find_opt(t, a, eq ? (size_t)(eq - a) : strlen(a));
            if (k < 0 || (eq && !t->opts[k].arg)) return usage_error(t, "unknown option '%s'", a);
            if (!t->opts[k].arg) j->val[k] = "";
            else if (eq) j->val[k] = eq + 1;
            else if (v) j->val[k] = argv[++i];
            else return usage_error(t, "%s needs a value", a);
        } else if (j->npos < t->maxpos) {
            j->pos[j->npos++] = a;
        } else {
            return usage_error(t, "unexpected argument '%s'", a);
        }
        if (rc != PARSED) return rc;
    }
    if (t->spec == SPEC_REQUIRED && j->npos == 0 && !j->spec_given) return usage_error(t, "which spec file?%s", "");
    if (t->spec == SPEC_OPTIONAL && j->nov && j->npos == 0) return usage_error(t, "-D needs a spec file%s", "");
    return t->check ? t->check(j) : PARSED;
}

/* The value of option name of j's tool (NULL: not given). */
static const char *opt(const Job *j, const char *name)
{
    int k = find_opt(j->tool, name, strlen(name));
    if (k < 0) die("the tool %s has no option %s", j->tool->name, name);
    return j->val[k];
}

/* ---- the passes -------------------------------------------------------------- */

/* A spec with open keys is a search space: only shardc tune takes one; the
 * other tools say where each open key is and how to close it. */
static bool refuse_open(const Job *j)
{
    const Spec *s = &j->spec;
    for (int i = 0; i < s->nopen; i++) {
        const OpenKey *o = &s->open[i];
        const char *path = schema_keys[o->key].path;
        diag_error(o->loc, "%s is left open (%s): shardc %s needs one layout", path,
                   o->any ? "auto" : "a set of values to try", j->tool->name);
        diag_hint("let `shardc tune %s` choose it (its -o FILE writes the choice as a spec), or set it: -D %s=VALUE",
                  j->pos[0], path);
    }
    return false;
}

/* Loads the spec: parse, -D overrides, semantic checks, the user-defined op's
 * header against its kind's ABI.  False after the diagnostics. */
static bool load(Job *j)
{
    sema_source = j->pos[0];    /* names the top-level file even when it is empty */
    Item *items = spec_parse_file(j->pos[0]);
    if (diag_errors) return false;
    if (!sema_resolve(items, j->ov, j->nov, &j->spec) || diag_errors) return false;
    if (j->spec.nopen && !j->tool->tunes) return refuse_open(j);
    if (!j->spec.nopen && j->tool->tunes) {
        diag_plain("tune: %s leaves no layout key open: write the keys to search as auto or a set, e.g. "
                   "parallel { tp = auto }  zero { stage = (1, 3) } (docs/tune.md)", j->pos[0]);
        return false;
    }
    return catalog_check_extern(&j->spec, &j->ext) && !diag_errors;
}

static int run_plan(Job *j);

/* Whether the tool reads only the step's figures: `plan` without the files
 * and the rank listing, which show every op and buffer of the whole step. */
static bool figures_only(const Job *j)
{
    return j->tool->run == run_plan && !opt(j, "--json") && !opt(j, "--trace") && !opt(j, "--html") &&
           !opt(j, "--rank");
}

/* The compiler: the passes in order, then the tool's own (see the top). */
static int compile(Job *j)
{
    const Tool *t = j->tool;
    if (t->spec != SPEC_NONE && j->npos > 0 && !j->spec_given && !load(j)) return EXIT_USER;    /* load */
    if (t->plans && figures_only(j) && period_plan(&j->spec, true, &j->plan, &j->sim)) {
        j->simulated = true;                                                    /* plan, verify, simulate */
    } else if (t->plans) {
        if (!plan_build(&j->spec, &j->plan, true)) return EXIT_USER;           /* plan */
        if (!verify_plan(&j->plan, stderr)) return EXIT_INTERNAL;               /* verify */
    }
    return t->run(j);      /* plan: fixes, simulate, report | build: emit, cc */
}

/* ---- the tools --------------------------------------------------------------- */

/* shardc check: the resolved spec in canonical form. */
static int run_check(Job *j)
{
    canon_print(stdout, &j->spec);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
}

/* Writes text to path atomically; false after a message. */
static bool write_out(const char *tool, const char *path, const char *text)
{
    if (util_write_atomic(path, text, strlen(text))) return true;
    diag_plain("%s: cannot write %s: %s", tool, path, strerror(errno));
    return false;
}

/* Streams the trace to path (it is millions of events at scale), atomically. */
static bool write_trace(const char *path, const Plan *pl, const Sim *sim)
{
    const char *tmp;
    FILE *f = util_atomic_open(path, &tmp);
    if (f && util_atomic_close(f, tmp, path, trace_write(f, pl, sim))) return true;
    diag_plain("plan: cannot write %s: %s", path, strerror(errno));
    return false;
}

/* shardc plan: the fixes, the simulation, the text report, the files. */
static int run_plan(Job *j)
{
    Plan *pl = &j->plan;
    int64_t rank = -1;
    if (opt(j, "--rank")) {
        const char *num = opt(j, "--rank");
        char *end;
        errno = 0;
        long long r = strtoll(num, &end, 10);
        if (errno || *end || end == num || r < 0) return usage_error(j->tool, "--rank needs a rank number, got '%s'", num);
        rank = r;
    }
    if (rank >= pl->part.world) {
        diag_plain("plan: --rank %lld is not a rank of this layout (0 .. %lld)", (long long)rank,
                   (long long)pl->part.world - 1);
        return EXIT_USAGE;
    }
    fix_find(pl);
    Sim sim = j->sim;
    if (!j->simulated) sim_run(pl, &sim);
    report_text(stdout, pl);
    sim_summary(stdout, pl, &sim);
    if (rank >= 0) report_rank(stdout, pl, rank);
    if (opt(j, "--json") && !write_out("plan", opt(j, "--json"), report_json(pl, &sim, rank))) return EXIT_USER;
    if (opt(j, "--trace") && !write_trace(opt(j, "--trace"), pl, &sim)) return EXIT_USER;
    if (opt(j, "--html") && !write_out("plan", opt(j, "--html"), html_report(pl, &sim))) return EXIT_USER;
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
}

/* The spec's file name without its folders. */
static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Checks the options of shardc build (before anything is planned). */
static int check_build_opts(const Job *j)
{
    if (!opt(j, "-o") && !opt(j, "--emit-c"))
        return usage_error(j->tool, "nothing to do: give -o TRAINER and/or --emit-c OUT.c%s", "");
    const char *be = opt(j, "--backend");
    if (be && strcmp(be, "cpu") != 0 && strcmp(be, "cuda") != 0)
        return usage_error(j->tool, "--backend is cpu or cuda, not '%s'", be);
    return PARSED;
}

/* A user-defined op needs the source of the backend it is built for. */
static bool ext_has_source(const Job *j, bool cuda)
{
    const CatalogExtern *x = &j->ext;
    if (!x->abi || (cuda ? x->cuda : x->cpu)) return true;
    diag_error(sema_key_loc(&j->spec, "model.activation"),
               "shardc build: the user-defined %s '%s' has no %s source, and the %s backend needs one", x->abi->kind,
               x->name, cuda ? "cuda" : "cpu", cuda ? "CUDA" : "CPU");
    diag_hint(cuda ? "add cuda = \"FILE.cu\" to its extern block, or build with --backend cpu"
                   : "add cpu = \"FILE.c\" to its extern block");
    return false;
}

/* shardc build: the C text, written (--emit-c) and compiled and linked (-o). */
static int run_build(Job *j)
{
    CcOpts cc = {opt(j, "-o"), opt(j, "--backend") ? opt(j, "--backend") : "cpu", opt(j, "--runtime")};
    if (!ext_has_source(j, strcmp(cc.backend, "cuda") == 0) || !emit_supported(&j->spec, true)) return EXIT_USER;
    if (!j->plan.mem.fits)
        fprintf(stderr, "shardc build: warning: the plan does not fit the cluster of the spec (see `shardc plan %s`)\n",
                j->npos ? j->pos[0] : j->spec.source);
    const CatalogExtern *x = j->ext.abi ? &j->ext : NULL;
    char *src = emit_c(&j->plan, x, base_name(j->npos ? j->pos[0] : j->spec.source), !opt(j, "--no-loops"));
    const char *c_path = opt(j, "--emit-c");
    if (c_path && !util_write_atomic(c_path, src, strlen(src))) {
        fprintf(stderr, "shardc build: error: cannot write %s: %s\n", c_path, strerror(errno));
        return EXIT_USER;
    }
    return cc.out ? cc_build(&cc, src, c_path, x) : EXIT_OK;
}

/* Checks the options of shardc tune. */
static int check_tune_opts(const Job *j)
{
    const char *top = opt(j, "--top");
    if (top) {
        char *end;
        long n = strtol(top, &end, 10);
        if (*end || end == top || n < 1 || n > 1000) return usage_error(j->tool, "--top needs a number from 1 to 1000, got '%s'", top);
    }
    return PARSED;
}

/* shardc tune: the fastest layout of the open spec that fits. */
static int run_tune(Job *j)
{
    TuneOpts o = {.top = opt(j, "--top") ? atoi(opt(j, "--top")) : 5, .exhaustive = opt(j, "--exhaustive") != NULL,
                  .quiet = opt(j, "--quiet") != NULL, .json = opt(j, "--json"), .out = opt(j, "-o")};
    return tune_main(&j->spec, &o);
}

/* shardc ops [FILE]: the op catalog (and the spec's user-defined ops). */
static int run_ops(Job *j)
{
    return catalog_ops_print(stdout, j->ext.abi ? &j->ext : NULL);
}

/* A positive integer option's value into *out (0: not given); false if it is not one. */
static bool int_opt(const Job *j, const char *name, int64_t *out)
{
    const char *v = opt(j, name);
    *out = 0;
    if (!v) return true;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    *out = n;
    return !errno && !*end && n > 0;
}

/* shardc import deepspeed DS.json [...] | shardc import hf config.json [...]: a
 * DeepSpeed config (and a Hugging Face model config), or a Hugging Face model
 * config alone, as a spec. */
static int run_import(Job *j)
{
    bool hf = j->npos >= 1 && strcmp(j->pos[0], "hf") == 0;
    if (j->npos < 1 || (!hf && strcmp(j->pos[0], "deepspeed") != 0))
        return usage_error(j->tool, "the formats are 'deepspeed' (shardc import deepspeed DS.json ...) and 'hf' "
                                    "(shardc import hf config.json ...)%s", "");
    if (j->npos < 2) return usage_error(j->tool, hf ? "which config.json?%s" : "which DeepSpeed config?%s", "");
    if (hf && opt(j, "--hf")) return usage_error(j->tool, "--hf goes with 'import deepspeed'%s", "");
    ImportOpts o = {.ds_path = hf ? NULL : j->pos[1], .hf_path = hf ? j->pos[1] : opt(j, "--hf"),
                    .out_path = opt(j, "-o"), .ov = j->ov, .nov = j->nov};
    if (!int_opt(j, "--nodes", &o.nodes)) return usage_error(j->tool, "%s needs a positive integer", "--nodes");
    if (!int_opt(j, "--gpus-per-node", &o.gpus_per_node))
        return usage_error(j->tool, "%s needs a positive integer", "--gpus-per-node");
    return hf ? import_hf_main(&o) : import_deepspeed(&o);
}

/* shardc calibrate -o PROFILE.json [...]: this machine measured into a profile. */
static int run_calibrate(Job *j)
{
    CalibOpts o = {.out = opt(j, "-o"), .backend = opt(j, "--backend") ? opt(j, "--backend") : "cpu",
                   .runtime = opt(j, "--runtime"), .nvme_dir = opt(j, "--nvme-dir"), .nodes = 1,
                   .mpirun = opt(j, "--mpirun") ? opt(j, "--mpirun") : "mpirun --oversubscribe --bind-to none",
                   .grid = opt(j, "--smoke") ? CALIB_SMOKE : opt(j, "--quick") ? CALIB_QUICK : CALIB_FULL};
    if (!o.out) return usage_error(j->tool, "where to? give -o PROFILE.json%s", "");
    if (opt(j, "--smoke") && opt(j, "--quick")) return usage_error(j->tool, "--quick or --smoke, not both%s", "");
    if (strcmp(o.backend, "cpu") != 0 && strcmp(o.backend, "cuda") != 0)
        return usage_error(j->tool, "--backend is cpu or cuda, not '%s'", o.backend);
    if (!int_opt(j, "--nodes", &o.nodes) || o.nodes > 1024)
        return usage_error(j->tool, "--nodes needs a count from 1 to 1024, not '%s'", opt(j, "--nodes"));
    if (!o.nodes) o.nodes = 1;
    for (const char *v = opt(j, "--ranks"), *p = v; p && *p;) {
        char *end;
        errno = 0;
        long long n = strtoll(p, &end, 10);
        if (errno || end == p || n < 1 || n > 4096 || o.nranks == CALIB_MAX_RANKS || (*end && *end != ','))
            return usage_error(j->tool, "--ranks takes up to 16 counts from 1 to 4096, as 2,4,8; not '%s'", v);
        o.ranks[o.nranks++] = n;
        p = *end ? end + 1 : end;
    }
    return calibrate_run(&o);
}

/* shardc docs spec-reference: the generated language reference. */
static int run_docs(Job *j)
{
    if (j->npos != 1 || strcmp(j->pos[0], "spec-reference") != 0)
        return usage_error(j->tool, "the only document is 'spec-reference'%s", "");
    schema_write_reference(stdout);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
}

static const Tool tools[] = {
    {"check", "  check FILE [-D key=value ...]    check a spec; print it resolved, in canonical form\n",
     SPEC_REQUIRED, false, true, 1, {{0}},
     "usage: shardc check FILE [-D key.path=value ...] [--max-errors N]\n"
     "\n"
     "Checks a spec and prints it resolved (every default filled in) in canonical\n"
     "form, which parses back to the same spec.\n", NULL, run_check, NULL, false},
    {"plan", "  plan  FILE [-D ...] [options]    partition and memory plan (see `shardc plan --help`)\n",
     SPEC_REQUIRED, true, true, 1, {{"--json", "FILE"}, {"--trace", "FILE"}, {"--html", "FILE"}, {"--rank", "R"}},
     "usage: shardc plan FILE [-D key.path=value ...] [--rank R] [--json FILE] [--trace FILE] [--html FILE]\n"
     "\n"
     "Plans the partition and the memory of every rank and says whether it fits.\n"
     "  --rank R      also list rank R's buffers: offset, size, lifetime, category\n"
     "  --json FILE   write the whole plan as JSON (schema: docs/plan-json.md)\n"
     "  --trace FILE  write the simulated step as Chrome trace JSON (Perfetto, chrome://tracing)\n"
     "  --html FILE   write a self-contained HTML report: memory plan, live bytes, timeline\n"
     "  --help        this text\n"
     "\n"
     "Exit 0 with a plan (whether it fits or not), 1 for a spec that cannot be\n"
     "planned, 2 for a bad option.\n", NULL, run_plan, NULL, false},
    {"build", "  build FILE -o TRAINER [options]  generate the trainer's C and compile it (see `shardc build --help`)\n",
     SPEC_REQUIRED, true, true, 1,
     {{"-o", "TRAINER"}, {"--backend", "cpu|cuda"}, {"--emit-c", "OUT.c"}, {"--runtime", "DIR"}, {"--no-loops", NULL}},
     "usage: shardc build FILE -o TRAINER [options] [-D key.path=value ...]\n"
     "\n"
     "Plans the spec, writes the trainer's C source and compiles and links it\n"
     "against the runtime (libshardrt_cpu.a or libshardrt_cuda.a).\n"
     "\n"
     "options:\n"
     "  -o TRAINER          the trainer binary to write\n"
     "  --backend cpu|cuda  the runtime to link (default cpu)\n"
     "  --emit-c OUT.c      also keep the generated C source (without -o: only write it)\n"
     "  --runtime DIR       where the runtime's libraries and include/shardrt.h are\n"
     "                      (default: the build tree shardc was built in)\n"
     "  --no-loops          write every op as its own call (no folded loops)\n"
     "  -D key.path=value   override a key of the spec\n"
     "  --max-errors N      stop after N errors (default 20)\n"
     "\n"
     "environment: CC, the C compiler (default mpicc for the cpu backend; with CC\n"
     "set, MPI's flags come from `mpicc --showme`)\n"
     "\n"
     "exit codes: 0 ok, 1 error in the input, 2 usage, 3 internal error (the C\n"
     "compiler rejected the generated code: a shardc bug)\n", check_build_opts, run_build, NULL, false},
    {"tune", "  tune  FILE [-D ...] [options]    the fastest layout that fits (see `shardc tune --help`)\n",
     SPEC_REQUIRED, false, true, 1,
     {{"--top", "N"}, {"--json", "FILE"}, {"-o", "FILE"}, {"--exhaustive", NULL}, {"--quiet", NULL}},
     "usage: shardc tune FILE [-D key.path=value ...] [--top N] [--json FILE] [-o FILE]\n"
     "\n"
     "Searches the layouts of a spec whose layout keys are left open (tp = auto,\n"
     "zero.stage = (1, 3); docs/tune.md) for the fastest one that fits: every\n"
     "layout reported fits by the exact memory plan and is priced by the simulated\n"
     "step; cheap lower bounds skip the ones that cannot win.  Keys that are set\n"
     "stay fixed.\n"
     "  --top N        how many of the best to list (default 5)\n"
     "  --json FILE    write the table, the counts and the rejected as JSON (docs/tune.md)\n"
     "  -o FILE        write the fastest layout as a spec (`shardc check` resolves it)\n"
     "  --exhaustive   plan and simulate every layout, no pruning; count the bounds\n"
     "                 above the exact values (a check of the pruning)\n"
     "  --quiet        no progress line on the terminal\n"
     "  --help         this text\n"
     "\n"
     "Exit 0 with a layout that fits, 1 when nothing fits or the spec is invalid,\n"
     "2 for a bad option.\n", check_tune_opts, run_tune, NULL, true},
    {"import", "  import deepspeed DS.json [--hf config.json] [--nodes N --gpus-per-node G] [-D ...] [-o OUT]\n"
               "                                   convert a DeepSpeed config (+ HF model config) to a spec\n"
               "  import hf config.json [--nodes N --gpus-per-node G] [-D ...] [-o OUT]\n"
               "                                   a Hugging Face GPT-2 or Llama config.json as a spec\n"
               "                                   (see `shardc import --help`)\n",
     SPEC_NONE, false, true, 2, {{"--hf", "config.json"}, {"-o", "OUT"}, {"--nodes", "N"}, {"--gpus-per-node", "G"}},
     "usage: shardc import deepspeed DS.json [--hf config.json] [--nodes N --gpus-per-node G]\n"
     "                                [-D key.path=value ...] [-o OUT]\n"
     "       shardc import hf config.json [--nodes N --gpus-per-node G] [-D key.path=value ...] [-o OUT]\n"
     "\n"
     "Converts a DeepSpeed config (and a Hugging Face model config), or a Hugging Face model\n"
     "config alone, to a spec, each key commented with the key it came from; the spec must\n"
     "pass `shardc check`.  What shardc cannot train (RoPE scaling, experts, a sliding\n"
     "window, biases on some layers only, ...) is an error at its key.\n"
     "\n"
     "  --hf config.json          the model (GPT-2 or Llama config.json)\n"
     "  --nodes N                 cluster.nodes (with --gpus-per-node: the dp DeepSpeed's batch keys need;\n"
     "                            for `import hf`, a default layout: ZeRO-3 data parallel over every GPU, bf16)\n"
     "  --gpus-per-node G         cluster.gpus_per_node\n"
     "  -D key.path=value         set a key of the imported spec, as check/plan/build do; it replaces\n"
     "                            what the DeepSpeed config gave and is written with the comment `# -D`,\n"
     "                            e.g. -D cluster.gpu=h100_sxm_80gb -D 'offload.optimizer=nvme { path = \"/nvme\" }'\n"
     "  -o OUT                    write the spec to OUT (atomically; nothing on failure), not stdout\n"
     "  --max-errors N            stop after N errors (default 20)\n"
     "\n"
     "Keys DeepSpeed has but shardc does not honour are reported as warnings (docs/import-deepspeed.md).\n",
     NULL, run_import, NULL, false},
    {"export", "  export CKPT_DIR -o OUT_DIR|FILE.safetensors [--dtype fp32|bf16] [--max-shard-size SIZE]\n"
               "                                   a checkpoint as a Hugging Face model directory (or one file)\n",
     SPEC_NONE, false, false, 0, {{0}}, NULL, NULL, NULL, export_main, false},    /* export.c parses its own arguments */
    {"ckpt", "  ckpt verify CKPT_DIR             check a checkpoint (checksums, structure) without training\n",
     SPEC_NONE, false, false, 0, {{0}}, NULL, NULL, NULL, export_ckpt_main, false},
    {"calibrate", "  calibrate -o PROFILE.json [--quick]\n"
                  "                                   measure this machine for cluster.profile (see `shardc calibrate --help`)\n",
     SPEC_NONE, false, false, 0,
     {{"-o", "PROFILE.json"}, {"--quick", NULL}, {"--smoke", NULL}, {"--backend", "cpu|cuda"}, {"--runtime", "DIR"},
      {"--ranks", "N[,N...]"}, {"--nodes", "N"}, {"--mpirun", "CMD"}, {"--nvme-dir", "DIR"}},
     "usage: shardc calibrate -o PROFILE.json [options]\n"
     "\n"
     "Measures this machine through the runtime's backend (GEMMs over shapes, attention,\n"
     "elementwise bandwidth, the optimizer, collectives per group size, send/receive,\n"
     "copies, NVMe, and how ranks share the cores) and writes a profile that a spec\n"
     "names with `cluster { profile = \"PROFILE.json\" }`, so that `shardc plan` predicts\n"
     "for this machine.\n"
     "\n"
     "options:\n"
     "  -o PROFILE.json        the profile to write (atomically; nothing on failure)\n"
     "  --quick                a small grid and few repetitions: seconds on a CPU\n"
     "  --smoke                one shape per benchmark, timed once: the least that makes a\n"
     "                         profile (the tests' run on the emulated CUDA stack), not for planning\n"
     "  --backend cpu|cuda     the runtime to measure (default cpu)\n"
     "  --runtime DIR          where shardrt_calibrate is (default: shardc's build tree)\n"
     "  --ranks N[,N...]       ranks per node to measure the communication at\n"
     "                         (default: 2, 4, 8, ... up to the larger of 8 and the cores;\n"
     "                         --backend cuda: up to the node's GPUs, none on one GPU)\n"
     "  --nodes N              also measure across N nodes (--mpirun must place the ranks\n"
     "                         of each node together); default 1\n"
     "  --mpirun CMD           the launcher (default \"mpirun --oversubscribe --bind-to none\")\n"
     "  --nvme-dir DIR         the folder of the NVMe swap file (default: $TMPDIR or /tmp)\n"
     "\n"
     "exit codes: 0 ok, 1 a benchmark failed or the profile could not be written, 2 usage\n",
     NULL, run_calibrate, NULL, false},
    {"docs", "  docs spec-reference              print the spec language reference (docs/spec-reference.md)\n",
     SPEC_NONE, false, false, 1, {{0}}, "usage: shardc docs spec-reference\n", NULL, run_docs, NULL, false},
    {"ops", "  ops [FILE]                       every runtime op (and FILE's user-defined ops): signature, doc\n",
     SPEC_OPTIONAL, false, true, 1, {{0}},
     "usage: shardc ops [FILE [-D key.path=value ...]]\n"
     "  every op of the runtime (runtime/include/shardrt.h) with its signature and doc comment;\n"
     "  with a spec, also its user-defined ops (checked against their kind's ABI)\n", NULL, run_ops, NULL, false},
};
static const int ntools = (int)(sizeof tools / sizeof tools[0]);

/* The tool called name, or NULL. */
static const Tool *find_tool(const char *name)
{
    for (int i = 0; i < ntools; i++)
        if (strcmp(tools[i].name, name) == 0) return &tools[i];
    return NULL;
}

/* Runs a tool's job: its arguments parsed, then compile(). */
static int run_job(const Tool *t, const Spec *spec, int argc, char **argv)
{
    if (!t->run) return t->own(argc, argv);
    Job *j = arena_alloc(&g_arena, sizeof *j);
    j->tool = t;
    if (spec) j->spec = *spec, j->spec_given = true;
    int rc = parse_args(j, argc, argv);
    return rc != PARSED ? rc : compile(j);
}

/* shardc's command line: the tool named by argv[1], its arguments after. */
int drv_main(int argc, char **argv)
{
    if (argc < 2) {
        general_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        general_usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("shardc %s\n", SHARDC_VERSION);
        return EXIT_OK;
    }
    const Tool *t = find_tool(cmd);
    if (!t) return usage_error(NULL, "unknown command '%s'", cmd);
    return run_job(t, NULL, argc - 2, argv + 2);
}

/* Runs tool name on a spec already resolved, with the tool's options. */
int drv_run_spec(const char *name, const Spec *spec, int argc, char **argv)
{
    const Tool *t = find_tool(name);
    if (!t || t->spec == SPEC_NONE) die("no tool %s that takes a spec", name);
    return run_job(t, spec, argc, argv);
}
