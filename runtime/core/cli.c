/* cli.c — the trainer's command line, driven by the CLI_OPTIONS table (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct cli_spec {
    const char *flag, *arg, *help;
    int kind;
    double lo, hi;
} cli_spec;

#define CLI_ROW(f, flag, arg, kind, lo, hi, help) {flag, arg, help, kind, lo, hi},
static const cli_spec specs[CLI_NOPTS] = {CLI_OPTIONS(CLI_ROW)};

/* Where each option's value lives in cli_opts. */
#define CLI_OFFSET(f, flag, arg, kind, lo, hi, help) offsetof(cli_opts, f),
static const size_t offsets[CLI_NOPTS] = {CLI_OPTIONS(CLI_OFFSET)};

/* Formats a usage error into err and returns CLI_USAGE. */
static int usage(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int usage(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return CLI_USAGE;
}

/* Edit distance of two short strings (for "did you mean"). */
static int distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int s = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1;
            d[i][j] = s < x ? (s < y ? s : y) : (x < y ? x : y);
        }
    return d[la][lb];
}

/* The option named by the flag (name part of --name=value), or -1. */
static int find(const char *flag, size_t len)
{
    for (int i = 0; i < CLI_NOPTS; i++)
        if (strlen(specs[i].flag) == len && strncmp(specs[i].flag, flag, len) == 0) return i;
    return -1;
}

/* Stores one option's value; a usage error for a bad integer. */
static int store(cli_opts *o, int i, const char *v, char *err, size_t errlen)
{
    char *field = (char *)o + offsets[i];
    const cli_spec *s = &specs[i];
    if (s->kind == CLI_STRING || s->kind == CLI_OPTIONAL) {
        if (!*v) return usage(err, errlen, "%s needs a non-empty value", s->flag);
        memcpy(field, &v, sizeof v);
    } else if (s->kind == CLI_INT) {
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno || end == v || *end || n < s->lo || (double)n > s->hi)
            return usage(err, errlen, "%s needs an integer from %.0f to %.0f, got '%s'", s->flag, s->lo,
                         s->hi, v);
        int64_t x = n;
        memcpy(field, &x, sizeof x);
    } else {
        bool t = true;
        memcpy(field, &t, sizeof t);
    }
    o->given[i] = true;
    return CLI_OK;
}

/* Rules between options. */
static int check(const cli_opts *o, char *err, size_t errlen)
{
    if (o->given[CLI_OPT_ckpt_every] && o->ckpt_every > 0 && !o->ckpt_dir)
        return usage(err, errlen, "--ckpt-every needs --ckpt-dir");
    if (o->given[CLI_OPT_resume] && strcmp(o->resume, "auto") == 0 && !o->ckpt_dir)
        return usage(err, errlen, "--resume auto needs --ckpt-dir (or give the checkpoint: --resume DIR)");
    return CLI_OK;
}

/* Parses argv[1..] into o (see cli.h). */
int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strncmp(arg, "--", 2) != 0)
            return usage(err, errlen, "unexpected argument '%s' (every option starts with --)", arg);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        int i = find(arg, len);
        if (i < 0) {
            int best = -1, bd = 3;
            for (int j = 0; j < CLI_NOPTS; j++) {
                char name[64];
                snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), arg);
                int d = distance(name, specs[j].flag);
                if (d < bd) bd = d, best = j;
            }
            if (best >= 0)
                return usage(err, errlen, "unknown option '%.*s'; did you mean '%s'?", (int)len, arg,
                             specs[best].flag);
            return usage(err, errlen, "unknown option '%.*s'", (int)len, arg);
        }
        const cli_spec *s = &specs[i];
        const char *v = eq ? eq + 1 : NULL;
        if (s->kind == CLI_FLAG) {
            if (v) return usage(err, errlen, "%s takes no value", s->flag);
        } else if (!v && s->kind == CLI_OPTIONAL) {
            v = a + 1 < argc && strncmp(argv[a + 1], "--", 2) != 0 ? argv[++a] : "auto";
        } else if (!v) {
            if (a + 1 >= argc) return usage(err, errlen, "%s needs a value: %s %s", s->flag, s->flag, s->arg);
            v = argv[++a];
        }
        int rc = store(o, i, v ? v : "", err, errlen);
        if (rc) return rc;
    }
    if (o->help) return CLI_HELP;
    return check(o, err, errlen);
}

/* Prints text from column `indent`, wrapped at `width` columns, continuation lines indented. */
static void wrap(FILE *f, const char *text, int indent, int width)
{
    int col = indent - 1;       /* the first line's words each follow a space */
    for (const char *p = text; *p;) {
        int n = (int)strcspn(p, " ");
        bool fresh = false;
        if (col >= indent && col + 1 + n > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent, fresh = true;
        }
        fprintf(f, "%s%.*s", fresh ? "" : " ", n, p);
        col += (fresh ? 0 : 1) + n;
        p += n;
        while (*p == ' ') p++;
    }
    fputc('\n', f);
}

/* The help text: one entry per row of the option table. */
void cli_help(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s [options]\n\n"
               "Trains the model this trainer was built for (mpirun -np WORLD %s ... for several ranks).\n\n"
               "options:\n", prog, prog);
    for (int i = 0; i < CLI_NOPTS; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", specs[i].flag, *specs[i].arg ? " " : "", specs[i].arg);
        fprintf(f, "  %-24s", left);
        wrap(f, specs[i].help, 27, 100);
    }
    fprintf(f, "\nexit codes: 0 ok, 1 error in the input (data, checkpoint, world size), 2 usage, 3 internal\n");
}
