/* test_catalog.c — the op catalog lists exactly the ops shardrt.h declares
 * (the SRT_OPS list, with arities and types); tools/opcatalog sees an op added
 * to a copy of the header and fails on each kind of drift, naming the line;
 * the user-op ABI check accepts typedef'd types that are canonically right and
 * rejects the rest; the emitter's call of a user op. */
#include "shardc.h"
#include "catalog.h"
#include "check.h"
#include "../../runtime/include/shardrt.h"

#include <sys/stat.h>
#include <unistd.h>

/* The X-macro list, as the runtime's own code sees it. */
static const struct { const char *name; int arity; } xops[] = {
#define X(name, arity, kind) {#name, arity},
    SRT_OPS(X)
#undef X
};

/* The generated table agrees with SRT_OPS entry by entry. */
static void test_catalog_matches_xmacro(void)
{
    int n = (int)(sizeof xops / sizeof *xops);
    CHECK_EQ(catalog_nops, n);
    for (int i = 0; i < n && i < catalog_nops; i++) {
        const CatalogOp *o = &catalog_ops[i];
        CHECK_STR(o->op, xops[i].name);
        CHECK_EQ(o->arity, xops[i].arity);
        CHECK_EQ(o->nparams, xops[i].arity + 2);
        CHECK_STR(o->params[0].canon, "struct srt_ctx *");
        CHECK_STR(o->params[1].canon, "enum srt_stream");
        CHECK_STR(o->ret, "void");
        CHECK(strncmp(o->name, "srt_", 4) == 0 && strcmp(o->name + 4, o->op) == 0);
    }
    const CatalogOp *m = catalog_find("matmul_fwd");
    CHECK(m && m == catalog_find("srt_matmul_fwd"));
    CHECK(catalog_find("event_record") == NULL);        /* a stream primitive, not an op */
    if (m) {
        CHECK_STR(catalog_signature(m), "void srt_matmul_fwd(srt_ctx *c, srt_stream s, srt_t out, srt_t inp, srt_t w, "
                                        "srt_t bias, int N, int C, int OC)");
        CHECK(strstr(m->doc, "overwrites out") != NULL);
        CHECK_STR(m->section, "compute ops");
        CHECK_STR(m->params[2].canon, "struct srt_t");
    }
    /* a group under one comment shares it */
    const CatalogOp *lb = catalog_find("layernorm_bwd");
    CHECK(lb && strstr(lb->doc, "LayerNorm over C") != NULL);
    const CatalogOp *x = catalog_find("xent_fwd_bwd");
    CHECK(x && strcmp(x->params[x->nparams - 1].type, "float") == 0);
}

static char tmpdir[] = "/tmp/shardc_catalogXXXXXX";
static char *header_text;

/* Writes text to tmpdir/name; returns the path. */
static const char *write_tmp(const char *name, const char *text)
{
    const char *p = arena_printf(&g_arena, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (!f) return p;
    fputs(text, f);
    fclose(f);
    return p;
}

/* The header with `from` replaced by `to` (once). */
static const char *edited(const char *from, const char *to)
{
    const char *at = strstr(header_text, from);
    CHECK(at != NULL);
    if (!at) return header_text;
    return arena_printf(&g_arena, "%.*s%s%s", (int)(at - header_text), header_text, to, at + strlen(from));
}

/* Runs the tool on text; returns its exit code, its stderr and its output in *out. */
static int run_tool(const char *text, const char **err, const char **out)
{
    const char *h = write_tmp("shardrt.h", text);
    const char *o = arena_printf(&g_arena, "%s/cat.c", tmpdir), *e = arena_printf(&g_arena, "%s/err.txt", tmpdir);
    unlink(o);
    const char *cmd = arena_printf(&g_arena, "ASAN_OPTIONS=detect_leaks=0 '%s' '%s' -o '%s' --as shardrt.h 2>'%s'",
                                   OPCATALOG_PATH, h, o, e);
    int rc = system(cmd);
    size_t len;
    char *es = util_read_file(e, &len, 1 << 20), *os = util_read_file(o, &len, 1 << 24);
    *err = es ? es : "";      /* util_read_file's text lives in the arena */
    *out = os ? os : "";
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The line (1-based) of the first occurrence of s in text. */
static int line_of(const char *text, const char *s)
{
    const char *at = strstr(text, s);
    int line = 1;
    for (const char *p = text; at && p < at; p++) line += *p == '\n';
    return at ? line : -1;
}

static const char decl[] = "/* Scales x by k in place. */\nvoid srt_scale(srt_ctx *c, srt_stream s, srt_t x, float k);\n\n"
                           "/* ---- the op list";
static const char last[] = "SRT_OP(nvme_write, 2, SRT_KIND_COPY)";

/* The tool on copies of the header: an added op appears; each drift is an error at its line. */
static void test_tool(void)
{
    size_t len;
    header_text = util_read_file("runtime/include/shardrt.h", &len, 1 << 20);
    CHECK(header_text != NULL);
    CHECK(mkdtemp(tmpdir) != NULL);
    if (!header_text) return;
    const char *err, *out;

    /* unchanged: succeeds and lists every op */
    CHECK_EQ(run_tool(header_text, &err, &out), 0);
    CHECK(strstr(out, "\"srt_nvme_write\", \"nvme_write\"") != NULL);
    CHECK(strstr(out, "const int catalog_nops = 35;") != NULL || catalog_nops != 35);

    /* a new op, declared and listed: it appears, with its doc comment and parameters */
    const char *added = edited("/* ---- the op list", decl);
    added = arena_printf(&g_arena, "%s", added);
    header_text = (char *)added;
    const char *both = edited(last, "SRT_OP(nvme_write, 2, SRT_KIND_COPY) \\\n    SRT_OP(scale, 2, SRT_KIND_COMPUTE)");
    CHECK_EQ(run_tool(both, &err, &out), 0);
    CHECK(strstr(out, "{\"srt_scale\", \"scale\", \"void\", 4, ") != NULL);
    CHECK(strstr(out, "\"Scales x by k in place.\"") != NULL);
    CHECK(strstr(out, "{\"k\", \"float\", \"float\"}") != NULL);
    CHECK(strstr(out, arena_printf(&g_arena, "const int catalog_nops = %d;", catalog_nops + 1)) != NULL);
    if (*err) fprintf(stderr, "%s", err);

    /* declared, not listed: an error at the declaration's line */
    CHECK_EQ(run_tool(added, &err, &out), 1);
    const char *want = arena_printf(&g_arena, "shardrt.h:%d:6: error: srt_scale takes (srt_ctx *, srt_stream) but is not "
                                              "in SRT_OPS", line_of(added, "void srt_scale("));
    CHECK(strstr(err, want) != NULL);
    if (!strstr(err, want)) fprintf(stderr, "stderr: %s\nwant: %s\n", err, want);
    CHECK(*out == 0);       /* no catalog written */

    /* listed with the wrong arity: an error at the list's line */
    const char *arity = edited(last, "SRT_OP(nvme_write, 2, SRT_KIND_COPY) \\\n    SRT_OP(scale, 3, SRT_KIND_COMPUTE)");
    CHECK_EQ(run_tool(arity, &err, &out), 1);
    want = arena_printf(&g_arena, "shardrt.h:%d:5: error: SRT_OPS gives 'scale' arity 3, but srt_scale (line %d) takes 2",
                        line_of(arity, "SRT_OP(scale,"), line_of(arity, "void srt_scale("));
    CHECK(strstr(err, want) != NULL);
    if (!strstr(err, want)) fprintf(stderr, "stderr: %s\nwant: %s\n", err, want);

    /* listed, not declared */
    header_text = util_read_file("runtime/include/shardrt.h", &len, 1 << 20);
    const char *ghost = edited(last, "SRT_OP(nvme_write, 2, SRT_KIND_COPY) \\\n    SRT_OP(ghost, 1, SRT_KIND_COMPUTE)");
    CHECK_EQ(run_tool(ghost, &err, &out), 1);
    want = arena_printf(&g_arena, "shardrt.h:%d:5: error: SRT_OPS lists 'ghost', but the header declares no function "
                                  "srt_ghost", line_of(ghost, "SRT_OP(ghost,"));
    CHECK(strstr(err, want) != NULL);

    /* a header that does not parse */
    CHECK_EQ(run_tool(edited("void srt_zero(", "void srt_zero(("), &err, &out), 1);
    CHECK(strstr(err, "shardrt.h:") != NULL && strstr(err, "error:") != NULL);
}

/* Resolves a spec whose activation is extern "sq" with this header text. */
static bool check_header(const char *htext, CatalogExtern *x)
{
    const char *h = write_tmp("sq.h", htext);
    const char *c = write_tmp("sq.c", "/* the kernels */\n");
    const char *spec = arena_printf(&g_arena,
                                    "model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 64\n"
                                    "  activation = extern \"sq\" { header = \"%s\" cpu = \"%s\" } }\n",
                                    h, c);
    capture();
    sema_source = NULL;
    Item *items = spec_parse_text("t.tspec", spec, strlen(spec));
    Spec s;
    CHECK(sema_resolve(items, NULL, 0, &s));
    return catalog_check_extern(&s, x);
}

/* The ABI check: canonical types (a typedef of the right type passes), arity, return. */
static void test_abi(void)
{
    CatalogExtern x;
    bool ok = check_header("#include <stdint.h>\ntypedef float real;\ntypedef long i64;\n"
                           "/* y = max(x, 0)^2 */\nvoid sq_forward(real *y, const real *x, i64 n);\n"
                           "void sq_backward(float *dx, const float *x, const float *dy, int64_t n);\n",
                           &x);
    CHECK(ok);
    if (!ok) fprintf(stderr, "%s", captured());
    CHECK(x.abi == catalog_abi("activation"));
    CHECK_STR(x.fns[0].doc, "y = max(x, 0)^2");
    CHECK_STR(catalog_signature(&x.fns[0]), "void sq_forward(real *y, const real *x, i64 n)");
    const char *fv[] = {"act", "fc1"}, *bv[] = {"dfc1", "fc1", "dact"};
    CHECK_STR(catalog_extern_call(&x, 0, fv, 2), "sq_forward((float *)act.p, (const float *)fc1.p, act.n);");
    CHECK_STR(catalog_extern_call(&x, 1, bv, 3),
              "sq_backward((float *)dfc1.p, (const float *)fc1.p, (const float *)dact.p, dfc1.n);");

    /* long long is not int64_t's canonical type on LP64: rejected, with the aka */
    ok = check_header("typedef long long i64;\nvoid sq_forward(float *y, const float *x, i64 n);\n"
                      "void sq_backward(float *dx, const float *x, const float *dy, long n);\n",
                      &x);
    CHECK(!ok);
    CHECK(strstr(captured(), "sq.h:2:43: error: sq_forward: parameter 3 'n' is 'i64' (aka 'long long'), but the "
                             "activation ABI wants 'int64_t' (n)") != NULL);
    CHECK(strstr(captured(), "hint: declare it as: void sq_forward(float *out, const float *inp, int64_t n);") != NULL);
    if (ok || !strstr(captured(), "sq.h:2:43")) fprintf(stderr, "%s", captured());

    /* the ABI is fp32 */
    const char *h = write_tmp("sq.h", "#include <stdint.h>\nvoid sq_forward(float *y, const float *x, int64_t n);\n"
                                      "void sq_backward(float *dx, const float *x, const float *dy, int64_t n);\n");
    const char *spec = arena_printf(&g_arena, "model gpt { layers = 2 hidden = 64 heads = 4 vocab = 256 seq_len = 64\n"
                                              "  activation = extern \"sq\" { header = \"%s\" cpu = \"%s\" } }\n"
                                              "precision { dtype = bf16 }\n", h, h);
    capture();
    Spec s;
    CHECK(sema_resolve(spec_parse_text("t.tspec", spec, strlen(spec)), NULL, 0, &s));
    CHECK(!catalog_check_extern(&s, &x));
    CHECK(strstr(captured(), "t.tspec:3:13: error: extern \"sq\" is an fp32 op") != NULL);

    /* no prototype; a missing backward */
    ok = check_header("void sq_forward();\n", &x);
    CHECK(!ok);
    CHECK(strstr(captured(), "sq_forward is declared without a prototype") != NULL);
    CHECK(strstr(captured(), "declares no sq_backward: an activation needs its backward") != NULL);
    capture();
}

int main(void)
{
    test_catalog_matches_xmacro();
    test_tool();
    test_abi();
    if (tmpdir[0] && strncmp(tmpdir, "/tmp/shardc_catalog", 19) == 0 && !strstr(tmpdir, "XXXXXX")) {
        const char *rm = arena_printf(&g_arena, "rm -rf '%s'", tmpdir);
        if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    arena_free(&g_arena);
    return failures != 0;
}
