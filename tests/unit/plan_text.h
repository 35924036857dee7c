/* plan_text.h — shared by the schedule's unit tests (test_sched.c,
 * test_verify.c): plans a small GPT from spec text with -D-like overrides,
 * the way `shardc plan -D key=value` does, and captures the verifier's
 * report. */
#ifndef PLAN_TEXT_H
#define PLAN_TEXT_H

#include "check.h"
#include "sim.h"

#include <stdarg.h>

/* An 8-layer GPT small enough to plan in a millisecond: 8 layers so that
 * pp 4 with 2 virtual stages still has a layer per model chunk. */
static const char pt_base[] =
    "model gpt { layers = 8  hidden = 64  heads = 4  vocab = 256  seq_len = 32 }\n"
    "train { micro_batch = 1 }\n"
    "cluster { nodes = 1  gpus_per_node = 1  gpu = h100_sxm_80gb }\n";

/* Plans pt_base with the overrides "key=value" (NULL-terminated); the
 * cluster is sized to the layout.  NULL (diagnostics on stderr) if the spec
 * does not check or plan. */
static inline Plan *pt_plan(const char *const *defs)
{
    Override ov[48];
    int n = 0;
    int64_t world = 1;
    for (; defs && defs[n] && n < 44; n++) {
        const char *eq = strchr(defs[n], '=');
        ov[n].path = arena_strndup(&g_arena, defs[n], (size_t)(eq - defs[n]));
        ov[n].text = eq + 1;
        if (!strncmp(defs[n], "parallel.tp=", 12) || !strncmp(defs[n], "parallel.pp=", 12) ||
            !strncmp(defs[n], "parallel.dp=", 12))
            world *= atoll(eq + 1);
    }
    int64_t gpn = world < 8 ? world : 8;
    ov[n++] = (Override){"cluster.gpus_per_node", arena_printf(&g_arena, "%lld", (long long)gpn)};
    ov[n++] = (Override){"cluster.nodes", arena_printf(&g_arena, "%lld", (long long)(world / gpn))};
    capture();
    sema_source = NULL;
    Item *items = spec_parse_text("t.tspec", pt_base, strlen(pt_base));
    Spec *s = arena_alloc(&g_arena, sizeof *s);
    Plan *mp = arena_alloc(&g_arena, sizeof *mp);
    bool ok = diag_errors == 0 && sema_resolve(items, ov, n, s) && plan_build(s, mp, true);
    if (!ok) {
        fprintf(stderr, "could not plan:");
        for (int i = 0; defs && defs[i]; i++) fprintf(stderr, " -D %s", defs[i]);
        fprintf(stderr, "\n%s", captured());
        return NULL;
    }
    return mp;
}

/* pt_plan with the overrides as arguments (NULL-terminated). */
static inline Plan *pt_planv(const char *first, ...)
{
    const char *defs[48];
    int n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *d = first; d && n < 47; d = va_arg(ap, const char *)) defs[n++] = d;
    va_end(ap);
    defs[n] = NULL;
    return pt_plan(defs);
}

/* Runs the verifier; its report (arena text) in *report. */
static inline bool pt_verify(const Plan *mp, const char **report)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bool ok = verify_plan(mp, f);
    fclose(f);
    *report = arena_strdup(&g_arena, buf ? buf : "");
    free(buf);
    return ok;
}

/* The index of the n-th op (from 0) of class c matching kind and stream (-1:
 * any stream), or -1. */
static inline int pt_find(const Plan *mp, int c, int kind, int stream, int nth)
{
    const Sched *s = &mp->sched.classes[c];
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].kind == kind && (stream < 0 || s->ops[i].stream == stream) && nth-- == 0) return i;
    return -1;
}

#endif
