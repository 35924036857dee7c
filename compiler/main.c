/* main.c — the shardc driver: subcommands, common options, exit codes.
 *
 *   shardc check  FILE [-D key.path=value ...]
 *   shardc plan   FILE [-D ...] [--json F] [--rank R] ...
 *   shardc import deepspeed DS.json [--hf config.json] [--nodes N --gpus-per-node G] [-D ...] [-o OUT]
 *   shardc import hf config.json [--nodes N --gpus-per-node G] [-D ...] [-o OUT]
 *   shardc export CKPT_DIR -o OUT_DIR|FILE.safetensors [...]
 *   shardc docs   spec-reference
 *   shardc calibrate -o PROFILE.json [--quick] ...
 */
#include "shardc.h"
#include "plan.h"
#include "emit.h"
#include "catalog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: shardc <command> [options]\n"
    "\n"
    "commands:\n"
    "  check FILE [-D key=value ...]    check a spec; print it resolved, in canonical form\n"
    "  plan  FILE [-D ...] [options]    partition and memory plan (see `shardc plan --help`)\n"
    "  build FILE -o TRAINER [options]  generate the trainer's C and compile it (see `shardc build --help`)\n"
    "  import deepspeed DS.json [--hf config.json] [--nodes N --gpus-per-node G] [-D ...] [-o OUT]\n"
    "                                   convert a DeepSpeed config (+ HF model config) to a spec\n"
    "  import hf config.json [--nodes N --gpus-per-node G] [-D ...] [-o OUT]\n"
    "                                   a Hugging Face GPT-2 or Llama config.json as a spec\n"
    "                                   (see `shardc import --help`)\n"
    "  export CKPT_DIR -o OUT_DIR|FILE.safetensors [--dtype fp32|bf16] [--max-shard-size SIZE]\n"
    "                                   a checkpoint as a Hugging Face model directory (or one file)\n"
    "  ckpt verify CKPT_DIR             check a checkpoint (checksums, structure) without training\n"
    "  calibrate -o PROFILE.json [--quick]\n"
    "                                   measure this machine for cluster.profile (see `shardc calibrate --help`)\n"
    "  docs spec-reference              print the spec language reference (docs/spec-reference.md)\n"
    "  ops [FILE]                       every runtime op (and FILE's user-defined ops): signature, doc\n"
    "\n"
    "options for every command that reads a spec:\n"
    "  -D key.path=value                override a key, e.g. -D parallel.tp=4 -D zero.stage=2\n"
    "  --max-errors N                   stop after N errors (default 20)\n"
    "\n"
    "exit codes: 0 ok, 1 error in the input, 2 usage, 3 internal error\n";

/* A usage error: message, the usage text, exit 2. */
static _Noreturn void usage(const char *fmt, const char *arg)
{
    if (fmt) {
        fprintf(stderr, "shardc: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n\n");
    }
    fputs(usage_text, stderr);
    exit(EXIT_USAGE);
}

/* Parses the key.path=value of a -D into *o, or exits with a usage error. */
static void override_arg(const char *d, Override *o)
{
    const char *eq = strchr(d, '=');
    if (!eq || eq == d) usage("-D takes key.path=value, got '%s'", d);
    o->path = arena_strndup(&g_arena, d, (size_t)(eq - d));
    o->text = eq + 1;
}

/* Splits the arguments after the command into the spec file, -D overrides and
 * the rest (kept in order for the subcommand).  Returns the file. */
static const char *split_args(int argc, char **argv, Override *ov, int *nov, char **rest, int *nrest)
{
    const char *file = NULL;
    *nov = *nrest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *d = NULL;
        if (strcmp(a, "-D") == 0) {
            if (i + 1 >= argc) usage("-D needs key.path=value", NULL);
            d = argv[++i];
        } else if (strncmp(a, "-D", 2) == 0) {
            d = a + 2;
        } else if (strcmp(a, "--max-errors") == 0) {
            if (i + 1 >= argc) usage("--max-errors needs a number", NULL);
            diag_max_errors = atoi(argv[++i]);
            if (diag_max_errors < 1) usage("--max-errors must be at least 1", NULL);
            continue;
        }
        if (d) {
            override_arg(d, &ov[(*nov)++]);
        } else if (!file && (a[0] != '-' || strcmp(a, "-") == 0)) {
            file = a;
        } else {
            rest[(*nrest)++] = argv[i];
            /* an option's value travels with it */
            if (a[0] == '-' && a[1] == '-' && i + 1 < argc && argv[i + 1][0] != '-' &&
                strcmp(a, "--help") != 0 && !strchr(a, '='))
                rest[(*nrest)++] = argv[++i];
        }
    }
    return file;
}

/* Parses and resolves FILE with its overrides; exits 1 on any user error. */
static void load_spec(const char *file, const Override *ov, int nov, Spec *spec)
{
    sema_source = file;     /* names the top-level file even when it is empty */
    Item *items = spec_parse_file(file);
    if (diag_errors) exit(EXIT_USER);
    if (!sema_resolve(items, ov, nov, spec) || diag_errors) exit(EXIT_USER);
    if (!catalog_check_extern(spec, NULL)) exit(EXIT_USER);   /* a user op's header vs its ABI */
}

/* shardc check: the resolved spec in canonical form on stdout. */
static int cmd_check(int argc, char **argv)
{
    Override ov[256];
    char *rest[512];
    int nov, nrest;
    const char *file = split_args(argc, argv, ov, &nov, rest, &nrest);
    if (nrest && strcmp(rest[0], "--help") == 0) usage(NULL, NULL);
    if (nrest) usage("check: unknown option '%s'", rest[0]);
    if (!file) usage("check: which spec file?", NULL);
    Spec spec;
    load_spec(file, ov, nov, &spec);
    canon_print(stdout, &spec);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
}

/* shardc plan: hands the resolved spec and the remaining options to the planner's report. */
static int cmd_plan(int argc, char **argv)
{
    Override ov[256];
    char *rest[512];
    int nov, nrest;
    const char *file = split_args(argc, argv, ov, &nov, rest, &nrest);
    if (!file) {
        for (int i = 0; i < nrest; i++)
            if (strcmp(rest[i], "--help") == 0) return report_plan_main(NULL, nrest, rest);
        usage("plan: which spec file?", NULL);
    }
    Spec spec;
    load_spec(file, ov, nov, &spec);
    return report_plan_main(&spec, nrest, rest);
}

/* Reads a positive integer option value or exits with a usage error. */
static int64_t int_arg(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || *end || n <= 0) usage("%s needs a positive integer", opt);
    return n;
}

static const char import_usage_text[] =
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
    "Keys DeepSpeed has but shardc does not honour are reported as warnings (docs/import-deepspeed.md).\n";

/* shardc import deepspeed DS.json [...] | shardc import hf config.json [...] */
static int cmd_import(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(import_usage_text, stdout);
            return EXIT_OK;
        }
    bool hf = argc >= 1 && strcmp(argv[0], "hf") == 0;
    if (argc < 1 || (!hf && strcmp(argv[0], "deepspeed") != 0))
        usage("import: the formats are 'deepspeed' (shardc import deepspeed DS.json ...) and 'hf' "
              "(shardc import hf config.json ...)", NULL);
    ImportOpts o = {0};
    static Override ov[256];
    o.ov = ov;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-D") == 0 || (strncmp(a, "-D", 2) == 0 && a[2])) {
            if (!a[2] && !v) usage("-D needs key.path=value", NULL);
            if (o.nov == 256) usage("import: more than 256 -D overrides", NULL);
            override_arg(a[2] ? a + 2 : argv[++i], &ov[o.nov++]);
        } else if (strcmp(a, "--max-errors") == 0 && v) {
            diag_max_errors = atoi(v), i++;
            if (diag_max_errors < 1) usage("--max-errors must be at least 1", NULL);
        } else if (strcmp(a, "--hf") == 0 && v && !hf) o.hf_path = v, i++;
        else if (strcmp(a, "-o") == 0 && v) o.out_path = v, i++;
        else if (strcmp(a, "--nodes") == 0 && v) o.nodes = int_arg(a, v), i++;
        else if (strcmp(a, "--gpus-per-node") == 0 && v) o.gpus_per_node = int_arg(a, v), i++;
        else if ((a[0] != '-' || strcmp(a, "-") == 0) && !(hf ? o.hf_path : o.ds_path)) *(hf ? &o.hf_path : &o.ds_path) = a;
        else usage("import: unexpected argument '%s'", a);
    }
    if (hf) {
        if (!o.hf_path) usage("import hf: which config.json?", NULL);
        return import_hf_main(&o);
    }
    if (!o.ds_path) usage("import deepspeed: which DeepSpeed config?", NULL);
    return import_deepspeed(&o);
}

/* shardc docs spec-reference: the generated language reference. */
static int cmd_docs(int argc, char **argv)
{
    if (argc != 1 || strcmp(argv[0], "spec-reference") != 0)
        usage("docs: the only document is 'spec-reference'", NULL);
    schema_write_reference(stdout);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
}

int main(int argc, char **argv)
{
    diag_color = isatty(2) && getenv("NO_COLOR") == NULL;
    if (argc < 2) usage(NULL, NULL);
    const char *cmd = argv[1];
    int rc;
    if (strcmp(cmd, "check") == 0) rc = cmd_check(argc - 2, argv + 2);
    else if (strcmp(cmd, "plan") == 0) rc = cmd_plan(argc - 2, argv + 2);
    else if (strcmp(cmd, "build") == 0) rc = emit_build_main(argc - 2, argv + 2);
    else if (strcmp(cmd, "import") == 0) rc = cmd_import(argc - 2, argv + 2);
    else if (strcmp(cmd, "docs") == 0) rc = cmd_docs(argc - 2, argv + 2);
    else if (strcmp(cmd, "export") == 0) rc = export_main(argc - 2, argv + 2);
    else if (strcmp(cmd, "ckpt") == 0) rc = export_ckpt_main(argc - 2, argv + 2);
    else if (strcmp(cmd, "ops") == 0) rc = catalog_ops_main(argc - 2, argv + 2);
    else if (strcmp(cmd, "calibrate") == 0) rc = calibrate_main(argc - 2, argv + 2);
    else if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        rc = EXIT_OK;
    } else if (strcmp(cmd, "--version") == 0) {
        printf("shardc %s\n", SHARDC_VERSION);
        rc = EXIT_OK;
    } else usage("unknown command '%s'", cmd);
    arena_free(&g_arena);
    return rc;
}
