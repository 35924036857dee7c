/* rt_test_cli.c — the trainer's command line (runtime/core/cli.c):
 *  - every flag in both spellings, --resume with and without a value;
 *  - usage errors: unknown flag (with a suggestion), missing or bad values,
 *    ranges, rules between options;
 *  - the help cannot drift: every flag of the table is in the help, and every
 *    --flag the help mentions is accepted by the parser; docs/trainer.md has a
 *    row for every flag. */
#include "cli.h"
#include "check.h"

/* Parses a NULL-terminated list of arguments. */
static int parse(cli_opts *o, char *err, const char **args)
{
    char *argv[32] = {"trainer"};
    int argc = 1;
    while (args[argc - 1]) argv[argc] = (char *)args[argc - 1], argc++;
    return cli_parse(argc, argv, o, err, 512);
}

#define PARSE(o, err, ...) parse(o, err, (const char *[]){__VA_ARGS__, NULL})

/* Every option, both spellings. */
static void test_ok(void)
{
    cli_opts o;
    char err[512] = "";
    int rc = PARSE(&o, err, "--data", "d/train_*.bin", "--val=d/val.bin", "--steps", "100", "--ckpt-dir", "ck",
                   "--ckpt-every=10", "--resume", "ck/step-50", "--log", "run.jsonl", "--trace", "t.json",
                   "--eval-every", "25", "--sample", "64", "--seed", "4294967295", "--init", "hf/gpt2",
                   "--tokenizer=tok.json", "--eval-batches", "1");
    CHECK_EQ(rc, CLI_OK);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(!strcmp(o.data, "d/train_*.bin") && !strcmp(o.val, "d/val.bin"));
    CHECK(o.steps == 100 && o.ckpt_every == 10 && o.eval_every == 25 && o.sample == 64);
    CHECK(o.seed == 4294967295LL);
    CHECK(!strcmp(o.ckpt_dir, "ck") && !strcmp(o.resume, "ck/step-50"));
    CHECK(!strcmp(o.log, "run.jsonl") && !strcmp(o.trace, "t.json"));
    CHECK(!strcmp(o.init, "hf/gpt2") && !strcmp(o.tokenizer, "tok.json") && o.eval_batches == 1);
    CHECK(o.given[CLI_OPT_steps] && o.given[CLI_OPT_seed] && !o.given[CLI_OPT_help]);

    /* nothing given: nothing set */
    CHECK_EQ(PARSE(&o, err, NULL), CLI_OK);
    for (int i = 0; i < CLI_NOPTS; i++) CHECK(!o.given[i]);
    CHECK(o.data == NULL && o.steps == 0);

    /* --resume alone, or before another option, is auto */
    CHECK_EQ(PARSE(&o, err, "--ckpt-dir", "ck", "--resume"), CLI_OK);
    CHECK(!strcmp(o.resume, "auto"));
    CHECK_EQ(PARSE(&o, err, "--resume", "--ckpt-dir", "ck"), CLI_OK);
    CHECK(!strcmp(o.resume, "auto") && !strcmp(o.ckpt_dir, "ck"));
    CHECK_EQ(PARSE(&o, err, "--resume=auto", "--ckpt-dir=ck"), CLI_OK);
    CHECK_EQ(PARSE(&o, err, "--seed", "0", "--ckpt-every", "0"), CLI_OK);
    CHECK(o.given[CLI_OPT_seed] && o.seed == 0);
    CHECK_EQ(PARSE(&o, err, "--steps", "5", "--help"), CLI_HELP);
}

/* Expects a usage error whose message contains has. */
static void bad(const char *has, const char **args)
{
    cli_opts o;
    char err[512] = "";
    CHECK_EQ(parse(&o, err, args), CLI_USAGE);
    CHECK_HAS(err, has);
}
#define BAD(has, ...) bad(has, (const char *[]){__VA_ARGS__, NULL})

/* Usage errors. */
static void test_errors(void)
{
    BAD("unknown option '--stesp'; did you mean '--steps'?", "--stesp", "5");
    BAD("unknown option '--frobnicate'", "--frobnicate");
    BAD("unexpected argument 'data.bin'", "data.bin");
    BAD("--steps needs a value", "--steps");
    BAD("--steps needs an integer from 1 to", "--steps", "0");
    BAD("got 'ten'", "--steps", "ten");
    BAD("got '5x'", "--eval-every", "5x");
    BAD("--seed needs an integer from 0 to 4294967295", "--seed", "4294967296");
    BAD("--sample needs an integer", "--sample", "-1");
    BAD("--help takes no value", "--help=yes");
    BAD("--data needs a non-empty value", "--data=");
    BAD("--ckpt-every needs --ckpt-dir", "--ckpt-every", "10");
    BAD("--resume auto needs --ckpt-dir", "--resume");
}

/* The help lists every flag of the table, and the parser knows every flag of the help. */
static void test_help(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cli_help(f, "gpt2_train");
    fclose(f);
    CHECK_HAS(text, "usage: gpt2_train [options]");
#define CLI_IN_HELP(fld, flag, arg, kind, lo, hi, help) CHECK_HAS(text, "  " flag);
    CLI_OPTIONS(CLI_IN_HELP)
    int seen = 0;
    for (const char *p = text; (p = strstr(p, "--"));) {
        char flag[64];
        size_t n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
        snprintf(flag, sizeof flag, "%.*s", (int)(n + 2), p);
        p += n + 2;
        if (n == 0) continue;
        cli_opts o;
        char err[512] = "";
        const char *args[] = {"trainer", flag, "1", "--ckpt-dir", "x", NULL};
        int rc = cli_parse(5, (char **)args, &o, err, sizeof err);
        if (strcmp(flag, "--help") == 0) CHECK_EQ(cli_parse(2, (char **)args, &o, err, sizeof err), CLI_HELP);
        else if (rc != CLI_OK) CHECK(!strstr(err, "unknown option"));
        seen++;
    }
    CHECK(seen >= CLI_NOPTS);
    free(text);
}

/* docs/trainer.md documents every flag of the table (run from the repository root). */
static void test_docs(void)
{
    FILE *f = fopen("docs/trainer.md", "r");
    CHECK(f != NULL);
    if (!f) return;
    static char doc[1 << 17];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    doc[n] = 0;
    fclose(f);
#define CLI_IN_DOC(fld, flag, arg, kind, lo, hi, help) CHECK_HAS(doc, "| `" flag);
    CLI_OPTIONS(CLI_IN_DOC)
}

int main(void)
{
    test_ok();
    test_errors();
    test_help();
    test_docs();
    if (!failures) printf("rt_test_cli: ok\n");
    return failures != 0;
}
