/* profile.c — a machine profile: what `shardc calibrate` measured on a machine
 * (a JSON file read with cJSON), checked, and turned into the tables the cost
 * model reads (docs/cost-model.md, "Calibrating a machine").
 *
 * The file is the measurements themselves, one row per benchmark:
 *   {"shardc_profile": 1, "backend": "cpu", "device": "...", "cores": 2, "nodes": 1,
 *    "grid": "full", "rows": [{"table": "gemm", "dtype": "fp32", "pass": "fwd",
 *    "threads": 1, "m": 64, "n": 64, "k": 64, "seconds": 1.2e-5}, ...]}
 * Tables: gemm (m, n, k), attention (batch, seq, heads, head_dim), elementwise
 * (bytes: srt_add_fwd's 3·n·w), activation (op gelu or swiglu, dtype, pass,
 * elements of the output; optional: older profiles lack it), launch,
 * optimizer (elements), sumsq (elements; optional), copy (op h2d or
 * d2h, bytes), nvme (op read or write, bytes), collective (op, span intra or
 * inter, ranks_per_node, group, bytes), sharing (ranks_per_node, threads,
 * gemm_seconds, elementwise_seconds: every rank at once; alone_gemm_seconds,
 * alone_elementwise_seconds: rank 0 alone), skew (op all_reduce or send_recv,
 * ranks_per_node, threads, compute_seconds: the compute before each op,
 * seconds: its time beyond the op entered at once; excess_seconds,
 * optional: the wall time it added to the compute with every rank busy).
 *
 * What the model reads is derived here, once, at load:
 *  - rates on full grids, interpolated multilinearly in the logarithms of the
 *    shape and of the rate, clamped at the grid's edges: GEMM FLOP/s over
 *    (m, n, k), attention FLOP/s over (seq, head_dim), elementwise bytes/s
 *    over the bytes; per dtype, pass and thread count, linear between thread
 *    counts;
 *  - alpha + beta · bytes fitted by least squares to each collective (per
 *    op, span, ranks per node and group size), each copy direction and each
 *    NVMe direction.
 * A row that breaks the format is an error at its line and column in the
 * profile (the rows are located by walking the text), with the spec's
 * cluster.profile named in a note.
 */
#include "shardc.h"
#include "sim.h"
#include "../runtime/include/shardrt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- locating rows in the text ---------------------------------------------------- */

typedef struct Reader {
    SrcFile *src;
    Loc spec_loc;               /* the spec's cluster.profile                    */
    const char **row_at;        /* [nrows]: where each row starts in the text    */
    int nrows;
    bool failed;
} Reader;

/* The Loc of byte `at` of the profile's text, `len` bytes long on its line. */
static Loc loc_at(const Reader *r, const char *at, int len)
{
    const char *t = r->src->text, *ls = t;
    int line = 1;
    for (const char *p = t; p < at; p++)
        if (*p == '\n') line++, ls = p + 1;
    return (Loc){r->src, line, (int)(at - ls) + 1, len > 0 ? len : 1, at};
}

/* An error at byte `at` of the profile, with a note at the spec's key. */
static void prof_error(Reader *r, const char *at, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void prof_error(Reader *r, const char *at, const char *hint, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error(loc_at(r, at ? at : r->src->text, 1), "%s", msg);
    if (hint) diag_hint("%s", hint);
    if (r->spec_loc.file) diag_note(r->spec_loc, "the profile named here");
    r->failed = true;
}

/* Skips JSON white space. */
static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* Where the top-level key `key` is written (its quoted name), or NULL. */
static const char *key_at(const Reader *r, const char *key)
{
    char q[64];
    snprintf(q, sizeof q, "\"%s\"", key);
    return strstr(r->src->text, q);
}

/* Finds where each element of the top-level "rows" array starts, by parsing
 * them one after another from the text. */
static void locate_rows(Reader *r, int n)
{
    r->row_at = arena_alloc(&g_arena, sizeof(char *) * (size_t)(n + 1));
    r->nrows = n;
    const char *p = key_at(r, "rows");
    if (p) p = strchr(p, '[');
    for (int i = 0; i < n; i++) {
        if (!p) return;
        p = skip_ws(p + (i == 0 || *p == ',' || *p == '[' ? 1 : 0));
        r->row_at[i] = p;
        const char *end = NULL;
        cJSON *one = cJSON_ParseWithOpts(p, &end, false);
        cJSON_Delete(one);
        if (!end) return;
        p = skip_ws(end);
    }
}

/* ---- reading the rows --------------------------------------------------------------- */

/* A number field of row i that must be positive (or, with zero_ok, >= 0). */
static double num(Reader *r, const cJSON *row, int i, const char *table, const char *f, bool zero_ok)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, f);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
        (!zero_ok && v->valuedouble == 0)) {
        prof_error(r, i < r->nrows ? r->row_at[i] : NULL, "rerun shardc calibrate, or mend the row",
                   "%s row: '%s' must be a %s number%s", table, f, zero_ok ? "non-negative" : "positive",
                   v ? "" : ", and it is missing");
        return 1;
    }
    return v->valuedouble;
}

/* A string field of row i that must be one of `choices` ("a|b"); its index. */
static int choice(Reader *r, const cJSON *row, int i, const char *table, const char *f, const char *choices)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, f);
    if (cJSON_IsString(v)) {
        int idx = 0;
        for (const char *c = choices; *c; idx++) {
            size_t len = strcspn(c, "|");
            if (strlen(v->valuestring) == len && strncmp(v->valuestring, c, len) == 0) return idx;
            c += len + (c[len] == '|');
        }
    }
    prof_error(r, i < r->nrows ? r->row_at[i] : NULL, NULL, "%s row: '%s' must be one of %s%s", table, f, choices,
               cJSON_IsString(v) ? arena_printf(&g_arena, ", not \"%s\"", v->valuestring) : "");
    return 0;
}

/* Appends to a growing arena array (capacity doubles; the old block is left to the arena). */
#define PUSH(arr, n, cap, val)                                                                   \
    do {                                                                                         \
        if ((n) == (cap)) {                                                                      \
            int nc_ = (cap) ? 2 * (cap) : 16;                                                    \
            void *p_ = arena_alloc(&g_arena, sizeof *(arr) * (size_t)nc_);                       \
            if (n) memcpy(p_, (arr), sizeof *(arr) * (size_t)(n));                               \
            (arr) = p_, (cap) = nc_;                                                             \
        }                                                                                        \
        (arr)[(n)++] = (val);                                                                    \
    } while (0)

/* One measured point of a rate table: its key, coordinates and value. */
typedef struct Pt { int key; double x[3]; double v; int row; } Pt;

/* ---- grids -------------------------------------------------------------------------- */

/* The sorted distinct values of coordinate d of the points with key `key`. */
static int axis(const Pt *p, int n, int key, int d, double *out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (p[i].key != key) continue;
        int j = 0;
        while (j < k && out[j] != p[i].x[d]) j++;
        if (j == k) out[k++] = p[i].x[d];
    }
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && out[j] < out[j - 1]; j--) {
            double t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    return k;
}

/* Builds the grid of key from the points (log of their values): every
 * combination of the axes' values must be measured exactly once. */
static bool grid_build(Reader *r, ProfGrid *g, const Pt *p, int n, int key, int nd, const char *what)
{
    double ax[3][64];
    int size = 1;
    g->nd = nd;
    for (int d = 0; d < nd; d++) {
        g->n[d] = axis(p, n, key, d, ax[d]);
        if (g->n[d] > 64) {
            prof_error(r, NULL, NULL, "%s: more than 64 values on one axis", what);
            return false;
        }
        g->ax[d] = arena_alloc(&g_arena, sizeof(double) * (size_t)g->n[d]);
        for (int i = 0; i < g->n[d]; i++) g->ax[d][i] = log(ax[d][i]);
        size *= g->n[d];
    }
    g->v = arena_alloc(&g_arena, sizeof(double) * (size_t)size);
    bool *seen = arena_alloc(&g_arena, (size_t)size);
    for (int i = 0; i < n; i++) {
        if (p[i].key != key) continue;
        int at = 0;
        for (int d = 0; d < nd; d++) {
            int j = 0;
            while (g->ax[d][j] != log(p[i].x[d])) j++;
            at = at * g->n[d] + j;
        }
        if (seen[at]) {
            prof_error(r, p[i].row < r->nrows ? r->row_at[p[i].row] : NULL, NULL, "%s: this point is measured twice",
                       what);
            return false;
        }
        seen[at] = true;
        g->v[at] = log(p[i].v);
    }
    const char *first = NULL;   /* the table's first row, where a missing point is reported */
    for (int i = 0; i < n && !first; i++)
        if (p[i].key == key && p[i].row < r->nrows) first = r->row_at[p[i].row];
    for (int i = 0; i < size; i++)
        if (!seen[i]) {
            int rest = i;
            double c[3] = {0};
            for (int d = nd - 1; d >= 0; d--) c[d] = exp(g->ax[d][rest % g->n[d]]), rest /= g->n[d];
            char pt[96] = "";
            for (int d = 0, at = 0; d < nd; d++)
                at += snprintf(pt + at, sizeof pt - (size_t)at, "%s%g", d ? ", " : "", c[d]);
            prof_error(r, first, "shardc calibrate measures full grids; a hand-made profile must too",
                       "%s: the grid misses the point (%s): every combination of the measured values is needed", what, pt);
            return false;
        }
    return true;
}

/* Multilinear interpolation of the grid at x (each clamped to its axis), in
 * the logarithms; returns the value itself. */
static double grid_eval(const ProfGrid *g, const double *x)
{
    int lo[3];
    double w[3];
    for (int d = 0; d < g->nd; d++) {
        double lx = log(x[d] > 0 ? x[d] : 1e-30);
        int n = g->n[d], i = 0;
        if (n == 1 || lx <= g->ax[d][0]) lo[d] = 0, w[d] = 0;
        else if (lx >= g->ax[d][n - 1]) lo[d] = n - 2, w[d] = 1;
        else {
            while (g->ax[d][i + 1] < lx) i++;
            lo[d] = i, w[d] = (lx - g->ax[d][i]) / (g->ax[d][i + 1] - g->ax[d][i]);
        }
    }
    double v = 0;
    for (int corner = 0; corner < (1 << g->nd); corner++) {
        double wt = 1;
        int at = 0;
        for (int d = 0; d < g->nd; d++) {
            int up = (corner >> d) & 1;
            if (g->n[d] == 1 && up) wt = 0;
            wt *= up ? w[d] : 1 - w[d];
            at = at * g->n[d] + (g->n[d] == 1 ? 0 : lo[d] + up);
        }
        if (wt > 0) v += wt * g->v[at];
    }
    return exp(v);
}

/* ---- alpha-beta fits ---------------------------------------------------------------- */

/* Least-squares seconds = alpha + beta·bytes over the points of key; both
 * kept non-negative (a negative intercept from noise becomes 0 and the slope
 * is refitted through the origin). */
static ProfFit fit_of(const Pt *p, int n, int key)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, m = 0;
    for (int i = 0; i < n; i++) {
        if (p[i].key != key) continue;
        double x = p[i].x[0], y = p[i].v;
        sx += x, sy += y, sxx += x * x, sxy += x * y, m++;
    }
    ProfFit f = {0, 0, (int)m};
    if (m == 0) return f;
    double den = m * sxx - sx * sx;
    if (m >= 2 && den > 0) {
        f.beta = (m * sxy - sx * sy) / den;
        f.alpha = (sy - f.beta * sx) / m;
    } else {
        f.alpha = 0, f.beta = sx > 0 ? sy / sx : 0;
    }
    if (f.alpha < 0) f.alpha = 0, f.beta = sxx > 0 ? sxy / sxx : 0;
    if (f.beta < 0) f.beta = 0, f.alpha = sy / m;
    return f;
}

/* ---- the tables ------------------------------------------------------------------------ */

enum { DTYPES = 2, PASSES = 2 };

/* The key of a rate table: dtype, pass and the index of the thread count. */
static int rate_key(int dt, int pass, int ti) { return (ti * DTYPES + dt) * PASSES + pass; }

/* The index of thread count t in the profile's list (added when new). */
static int thread_index(Profile *pf, int t)
{
    for (int i = 0; i < pf->nthreads; i++)
        if (pf->threads[i] == t) return i;
    if (pf->nthreads == PROFILE_MAX_THREADS) return PROFILE_MAX_THREADS - 1;
    pf->threads[pf->nthreads] = t;
    return pf->nthreads++;
}

/* The index of (op, span, ranks per node, group) among the collective fits. */
static int coll_index(Profile *pf, int op, bool inter, int w, int n)
{
    for (int i = 0; i < pf->ncoll; i++) {
        const ProfColl *c = &pf->coll[i];
        if (c->op == op && c->inter == inter && c->ranks_per_node == w && c->group == n) return i;
    }
    ProfColl c = {op, inter, w, n, {0, 0, 0}};
    int cap = pf->ncoll;
    PUSH(pf->coll, pf->ncoll, cap, c);
    return pf->ncoll - 1;
}

static const char *const DT_CHOICES = "fp32|bf16", *const PASS_CHOICES = "fwd|bwd";
static const char *const TABLES =
    "gemm|attention|elementwise|launch|optimizer|copy|nvme|collective|sharing|skew|activation|sumsq|norm";
enum { TB_GEMM, TB_ATTN, TB_EW, TB_LAUNCH, TB_OPT, TB_COPY, TB_NVME, TB_COLL, TB_SHARE, TB_SKEW, TB_ACT, TB_SUMSQ, TB_NORM };

/* Reads every row into points and per-thread values; false on an error. */
static bool read_rows(Reader *r, Profile *pf, const cJSON *rows, Pt **pts, int *npts)
{
    int cap = 0, i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        const char *at = i < r->nrows ? r->row_at[i] : NULL;
        if (!cJSON_IsObject(row)) {
            prof_error(r, at, NULL, "a row must be an object {\"table\": ..., \"seconds\": ...}");
            return false;
        }
        int tb = choice(r, row, i, "a", "table", TABLES);
        if (r->failed) return false;
        const char *name = cJSON_GetObjectItemCaseSensitive(row, "table")->valuestring;
        Pt p = {.row = i};
        switch (tb) {
        case TB_GEMM: case TB_ATTN: {
            int dt = choice(r, row, i, name, "dtype", DT_CHOICES), ps = choice(r, row, i, name, "pass", PASS_CHOICES);
            int ti = thread_index(pf, (int)num(r, row, i, name, "threads", false));
            double s = num(r, row, i, name, "seconds", false);
            p.key = (tb == TB_GEMM ? 0 : 1) * 1000 + rate_key(dt, ps, ti);
            if (tb == TB_GEMM && cJSON_GetObjectItemCaseSensitive(row, "cache") &&
                choice(r, row, i, name, "cache", "cold|warm") == 1) {
                p.key = 5000 + rate_key(dt, ps, ti);   /* the warm grid */
                pf->has_warm = true;
            }
            if (tb == TB_GEMM) {
                p.x[0] = num(r, row, i, name, "m", false), p.x[1] = num(r, row, i, name, "n", false);
                p.x[2] = num(r, row, i, name, "k", false);
                p.v = (ps ? 4 : 2) * p.x[0] * p.x[1] * p.x[2] / s;
            } else {
                double b = num(r, row, i, name, "batch", false), nh = num(r, row, i, name, "heads", false);
                p.x[0] = num(r, row, i, name, "seq", false), p.x[1] = num(r, row, i, name, "head_dim", false);
                /* the FLOPs cost.c counts for the core: 4·T·s·a·hd (T = b·s), twice backward */
                p.v = (ps ? 8 : 4) * b * p.x[0] * p.x[0] * nh * p.x[1] / s;
            }
            break;
        }
        case TB_EW: {
            int dt = choice(r, row, i, name, "dtype", DT_CHOICES);
            int ti = thread_index(pf, (int)num(r, row, i, name, "threads", false));
            p.key = 2000 + rate_key(dt, 0, ti);
            p.x[0] = num(r, row, i, name, "bytes", false);
            p.v = p.x[0] / num(r, row, i, name, "seconds", false);
            break;
        }
        case TB_LAUNCH: case TB_OPT: case TB_SUMSQ: {
            int ti = thread_index(pf, (int)num(r, row, i, name, "threads", false));
            double s = num(r, row, i, name, "seconds", false);
            if (tb == TB_LAUNCH) pf->launch[ti] = s;
            else if (tb == TB_OPT) pf->opt_rate[ti] = num(r, row, i, name, "elements", false) / s;
            else pf->sumsq_rate[ti] = num(r, row, i, name, "elements", false) / s, pf->has_sumsq = true;
            p.key = -1;   /* a value per thread count, not a point */
            break;
        }
        case TB_ACT: {
            int op = choice(r, row, i, name, "op", "gelu|swiglu"), dt = choice(r, row, i, name, "dtype", DT_CHOICES);
            int ps = choice(r, row, i, name, "pass", PASS_CHOICES);
            int ti = thread_index(pf, (int)num(r, row, i, name, "threads", false));
            pf->act_rate[op][rate_key(dt, ps, ti)] =
                num(r, row, i, name, "elements", false) / num(r, row, i, name, "seconds", false);
            pf->has_act = true;
            p.key = -1;
            break;
        }
        case TB_NORM: {   /* elements/s of one call over rows × cols, keyed 6000 + op · 1000 */
            int op = choice(r, row, i, name, "op", "layernorm|rmsnorm"), dt = choice(r, row, i, name, "dtype", DT_CHOICES);
            int ps = choice(r, row, i, name, "pass", PASS_CHOICES);
            int ti = thread_index(pf, (int)num(r, row, i, name, "threads", false));
            p.key = 6000 + op * 1000 + rate_key(dt, ps, ti);
            p.x[0] = num(r, row, i, name, "rows", false), p.x[1] = num(r, row, i, name, "cols", false);
            p.v = p.x[0] * p.x[1] / num(r, row, i, name, "seconds", false);
            pf->has_norm = true;
            break;
        }
        case TB_COPY: case TB_NVME: {
            int op = choice(r, row, i, name, "op", tb == TB_COPY ? "h2d|d2h" : "read|write");
            p.key = 3000 + (tb == TB_COPY ? 0 : 2) + op;
            p.x[0] = num(r, row, i, name, "bytes", false);
            p.v = num(r, row, i, name, "seconds", false);
            break;
        }
        case TB_COLL: {
            int op = choice(r, row, i, name, "op", "all_reduce|all_gather|reduce_scatter|send_recv");
            bool inter = choice(r, row, i, name, "span", "intra|inter") == 1;
            int w = (int)num(r, row, i, name, "ranks_per_node", false), n = (int)num(r, row, i, name, "group", false);
            if (r->failed) return false;
            p.key = 4000 + coll_index(pf, op, inter, w, n);
            p.x[0] = num(r, row, i, name, "bytes", false);
            p.v = num(r, row, i, name, "seconds", false);
            break;
        }
        case TB_SKEW: {
            ProfSkew sk = {choice(r, row, i, name, "op", "all_reduce|send_recv") == 1,
                           (int)num(r, row, i, name, "ranks_per_node", false), (int)num(r, row, i, name, "threads", false),
                           num(r, row, i, name, "compute_seconds", false), num(r, row, i, name, "seconds", true), -1};
            if (cJSON_GetObjectItemCaseSensitive(row, "excess_seconds"))
                sk.excess = num(r, row, i, name, "excess_seconds", true);
            int kcap = pf->nskew;
            PUSH(pf->skew, pf->nskew, kcap, sk);
            p.key = -1;
            break;
        }
        default: {   /* sharing */
            ProfShare sh = {(int)num(r, row, i, name, "ranks_per_node", false),
                            (int)num(r, row, i, name, "threads", false), num(r, row, i, name, "gemm_seconds", false),
                            num(r, row, i, name, "elementwise_seconds", false),
                            num(r, row, i, name, "alone_gemm_seconds", false),
                            num(r, row, i, name, "alone_elementwise_seconds", false)};
            int scap = pf->nshare;
            PUSH(pf->share, pf->nshare, scap, sh);
            p.key = -1;
        }
        }
        if (r->failed) return false;
        if (p.key >= 0) PUSH(*pts, *npts, cap, p);
        i++;
    }
    return !r->failed;
}

/* The grids and fits from the points; false on an error. */
static bool build_tables(Reader *r, Profile *pf, const Pt *p, int n)
{
    static const char *const dts[] = {"fp32", "bf16"}, *const passes[] = {"forward", "backward"};
    for (int ti = 0; ti < pf->nthreads; ti++)
        for (int dt = 0; dt < DTYPES; dt++) {
            for (int ps = 0; ps < PASSES; ps++) {
                int k = rate_key(dt, ps, ti);
                char what[96];
                snprintf(what, sizeof what, "gemm %s %s at %d thread%s", dts[dt], passes[ps], pf->threads[ti], pf->threads[ti] > 1 ? "s" : "");
                if (!grid_build(r, &pf->gemm[k], p, n, k, 3, what)) return false;
                snprintf(what, sizeof what, "warm gemm %s %s at %d thread%s", dts[dt], passes[ps], pf->threads[ti], pf->threads[ti] > 1 ? "s" : "");
                if (pf->has_warm && !grid_build(r, &pf->gemm_warm[k], p, n, 5000 + k, 3, what)) return false;
                if (pf->has_warm && pf->gemm_warm[k].n[0] == 0) {
                    prof_error(r, key_at(r, "rows"), "shardc calibrate measures every one; a hand-made profile must too",
                               "%s: no rows (a profile with warm GEMM rows needs them at every dtype, pass and thread count)",
                               what);
                    return false;
                }
                snprintf(what, sizeof what, "attention %s %s at %d thread%s", dts[dt], passes[ps], pf->threads[ti], pf->threads[ti] > 1 ? "s" : "");
                if (!grid_build(r, &pf->attn[k], p, n, 1000 + k, 2, what)) return false;
                for (int op = 0; pf->has_norm && op < 2; op++) {
                    snprintf(what, sizeof what, "norm %s %s %s at %d thread%s", op ? "rmsnorm" : "layernorm", dts[dt], passes[ps],
                             pf->threads[ti], pf->threads[ti] > 1 ? "s" : "");
                    if (!grid_build(r, &pf->norm[op][k], p, n, 6000 + op * 1000 + k, 2, what)) return false;
                    if (pf->norm[op][k].n[0] == 0) {
                        prof_error(r, key_at(r, "rows"), "shardc calibrate measures every one; a hand-made profile must too",
                                   "%s: no rows (a profile with norm rows needs them for both norms at every dtype, pass "
                                   "and thread count)", what);
                        return false;
                    }
                }
            }
            char what[96];
            snprintf(what, sizeof what, "elementwise %s at %d thread%s", dts[dt], pf->threads[ti], pf->threads[ti] > 1 ? "s" : "");
            if (!grid_build(r, &pf->ew[rate_key(dt, 0, ti)], p, n, 2000 + rate_key(dt, 0, ti), 1, what)) return false;
        }
    for (int ti = 0; ti < pf->nthreads; ti++)
        if (!(pf->launch[ti] > 0) || !(pf->opt_rate[ti] > 0)) {
            prof_error(r, key_at(r, "rows"), NULL, "no %s row at %d threads (every thread count of the GEMM table needs one)",
                       pf->launch[ti] > 0 ? "optimizer" : "launch", pf->threads[ti]);
            return false;
        }
    /* activation rows are optional, but where there are some, every
     * thread count needs all of them */
    static const char *const acts[] = {"gelu", "swiglu"};
    for (int ti = 0; pf->has_act && ti < pf->nthreads; ti++)
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < DTYPES * PASSES; k++)
                if (!(pf->act_rate[a][rate_key(k / PASSES, k % PASSES, ti)] > 0)) {
                    prof_error(r, key_at(r, "rows"), "shardc calibrate measures every one; a hand-made profile must too",
                               "no activation row for %s %s %s at %d thread%s", acts[a], dts[k / PASSES],
                               passes[k % PASSES], pf->threads[ti], pf->threads[ti] > 1 ? "s" : "");
                    return false;
                }
    for (int ti = 0; pf->has_sumsq && ti < pf->nthreads; ti++)
        if (!(pf->sumsq_rate[ti] > 0)) {
            prof_error(r, key_at(r, "rows"), NULL, "no sumsq row at %d threads (a profile with one needs one at every thread count)",
                       pf->threads[ti]);
            return false;
        }
    static const char *const fits[] = {"copy h2d", "copy d2h", "nvme read", "nvme write"};
    for (int i = 0; i < 4; i++) {
        pf->io[i] = fit_of(p, n, 3000 + i);
        if (pf->io[i].points == 0) {
            prof_error(r, key_at(r, "rows"), NULL, "no %s rows", fits[i]);
            return false;
        }
    }
    for (int i = 0; i < pf->ncoll; i++) pf->coll[i].fit = fit_of(p, n, 4000 + i);
    return true;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* Reads and checks the profile at path; NULL (reported at the profile's line
 * and column, or at spec_loc when it cannot be read) on an error. */
const Profile *profile_load(const char *path, Loc spec_loc)
{
    size_t len;
    char *text = util_read_file(path, &len, 64u << 20);
    if (!text) {
        diag_error(spec_loc, "cannot read the profile '%s': %s", path, util_strerror(errno));
        diag_hint("write one with `shardc calibrate -o %s` (a relative path is read from the spec's folder)", path);
        return NULL;
    }
    SrcFile *src = arena_alloc(&g_arena, sizeof *src);
    *src = (SrcFile){arena_strdup(&g_arena, path), text, len};   /* text: an arena copy */
    Reader r = {.src = src, .spec_loc = spec_loc};
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithOpts(src->text, &end, true);
    if (!doc) {
        const char *at = cJSON_GetErrorPtr();
        if (!at || at < src->text || at > src->text + len) at = end ? end : src->text;
        prof_error(&r, at, "a profile is JSON as shardc calibrate writes it", "not valid JSON here");
        return NULL;
    }
    Profile *pf = arena_alloc(&g_arena, sizeof *pf);
    pf->path = src->path;
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(doc, "shardc_profile");
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(doc, "backend");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(doc, "rows");
    if (!cJSON_IsObject(doc) || !cJSON_IsNumber(ver) || ver->valuedouble != 1)
        prof_error(&r, ver ? key_at(&r, "shardc_profile") : src->text, "shardc calibrate writes version 1",
                   "not a shardc profile of version 1 (\"shardc_profile\": 1)");
    else if (!cJSON_IsString(be) || (strcmp(be->valuestring, "cpu") != 0 && strcmp(be->valuestring, "cuda") != 0))
        prof_error(&r, be ? key_at(&r, "backend") : src->text, NULL, "\"backend\" must be \"cpu\" or \"cuda\"");
    else if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) == 0)
        prof_error(&r, rows ? key_at(&r, "rows") : src->text, NULL, "\"rows\" must be a non-empty array of measurements");
    if (r.failed) {
        cJSON_Delete(doc);
        return NULL;
    }
    pf->backend = strcmp(be->valuestring, "cuda") == 0 ? PROFILE_CUDA : PROFILE_CPU;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(doc, "device");
    pf->device = arena_strdup(&g_arena, cJSON_IsString(dev) ? dev->valuestring : "");
    pf->cores = (int)num(&r, doc, 1 << 30, "the profile's", "cores", false);
    pf->nodes = (int)num(&r, doc, 1 << 30, "the profile's", "nodes", false);
    if (cJSON_GetObjectItemCaseSensitive(doc, "llc_bytes"))   /* optional: older profiles lack it */
        pf->llc_bytes = num(&r, doc, 1 << 30, "the profile's", "llc_bytes", false);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(doc, "grid");
    pf->grid = arena_strdup(&g_arena, cJSON_IsString(q) ? q->valuestring : "full");
    locate_rows(&r, cJSON_GetArraySize(rows));
    Pt *pts = NULL;
    int npts = 0;
    bool ok = !r.failed && read_rows(&r, pf, rows, &pts, &npts) && build_tables(&r, pf, pts, npts);
    cJSON_Delete(doc);
    return ok ? pf : NULL;
}

/* ---- what the cost model asks ---------------------------------------------------------- */

/* value(t) from per-thread-index values f(ti), linear between the measured
 * thread counts, clamped at the ends. */
typedef double (*per_thread_fn)(const Profile *pf, int ti, const void *ud);
static double over_threads(const Profile *pf, double t, per_thread_fn f, const void *ud)
{
    int lo = -1, hi = -1;
    for (int i = 0; i < pf->nthreads; i++) {
        if (pf->threads[i] <= t && (lo < 0 || pf->threads[i] > pf->threads[lo])) lo = i;
        if (pf->threads[i] >= t && (hi < 0 || pf->threads[i] < pf->threads[hi])) hi = i;
    }
    if (lo < 0) lo = hi;
    if (hi < 0) hi = lo;
    double a = f(pf, lo, ud);
    if (hi == lo) return a;
    double w = (t - pf->threads[lo]) / (double)(pf->threads[hi] - pf->threads[lo]);
    return a + w * (f(pf, hi, ud) - a);
}

typedef struct RateQ { int table, dt, pass; double x[3]; } RateQ;

static double rate_at(const Profile *pf, int ti, const void *ud)
{
    const RateQ *q = ud;
    int k = rate_key(q->dt, q->pass, ti);
    const ProfGrid *g = q->table == 0 ? &pf->gemm[k] : q->table == 1 ? &pf->attn[k] : q->table == 3 ? &pf->gemm_warm[k]
                                                                                   : &pf->ew[rate_key(q->dt, 0, ti)];
    return grid_eval(g, q->x);
}

/* The profile's dtype row for a spec dtype: fp32, or the 16-bit emulation. */
static int dt_of(int dtype) { return dtype == DT_FP32 ? 0 : 1; }

double profile_gemm_rate(const Profile *pf, int dtype, bool bwd, double threads, double m, double n, double k)
{
    RateQ q = {0, dt_of(dtype), bwd, {m, n, k}};
    return over_threads(pf, threads, rate_at, &q);
}

double profile_gemm_warm_rate(const Profile *pf, int dtype, bool bwd, double threads, double m, double n, double k)
{
    double cold = profile_gemm_rate(pf, dtype, bwd, threads, m, n, k);
    if (!pf->has_warm) return cold;
    RateQ q = {3, dt_of(dtype), bwd, {m, n, k}};
    return fmax(cold, over_threads(pf, threads, rate_at, &q));   /* a warm row slower than cold is noise */
}

double profile_warm_fraction(const Profile *pf, double node_bytes)
{
    if (!pf->has_warm || !(pf->llc_bytes > 0)) return 0;
    return node_bytes <= pf->llc_bytes ? 1 : pf->llc_bytes / node_bytes;
}

double profile_attn_rate(const Profile *pf, int dtype, bool bwd, double threads, double seq, double head_dim)
{
    RateQ q = {1, dt_of(dtype), bwd, {seq, head_dim, 0}};
    return over_threads(pf, threads, rate_at, &q);
}

double profile_stream_rate(const Profile *pf, int dtype, double threads, double bytes)
{
    RateQ q = {2, dt_of(dtype), 0, {bytes, 0, 0}};
    return over_threads(pf, threads, rate_at, &q);
}

static double launch_at(const Profile *pf, int ti, const void *ud) { (void)ud; return pf->launch[ti]; }
static double opt_at(const Profile *pf, int ti, const void *ud) { (void)ud; return pf->opt_rate[ti]; }

double profile_launch(const Profile *pf, double threads) { return over_threads(pf, threads, launch_at, NULL); }

static double sumsq_at(const Profile *pf, int ti, const void *ud) { (void)ud; return pf->sumsq_rate[ti]; }
double profile_sumsq_rate(const Profile *pf, double threads)
{
    return pf->has_sumsq ? over_threads(pf, threads, sumsq_at, NULL) : 0;
}

typedef struct NormQ { int op, dt, pass; double x[2]; } NormQ;
static double norm_at(const Profile *pf, int ti, const void *ud)
{
    const NormQ *q = ud;
    return grid_eval(&pf->norm[q->op][rate_key(q->dt, q->pass, ti)], q->x);
}

double profile_norm_rate(const Profile *pf, int op, int dtype, bool bwd, double threads, double rows, double cols)
{
    if (!pf->has_norm) return 0;
    NormQ q = {op, dt_of(dtype), bwd, {rows, cols}};
    return over_threads(pf, threads, norm_at, &q);
}

typedef struct ActQ { int act, dt, pass; } ActQ;
static double act_at(const Profile *pf, int ti, const void *ud)
{
    const ActQ *q = ud;
    return pf->act_rate[q->act][rate_key(q->dt, q->pass, ti)];
}

double profile_act_rate(const Profile *pf, int act, int dtype, bool bwd, double threads)
{
    if (!pf->has_act) return 0;
    ActQ q = {act, dt_of(dtype), bwd};
    return over_threads(pf, threads, act_at, &q);
}
double profile_opt_rate(const Profile *pf, double threads) { return over_threads(pf, threads, opt_at, NULL); }

/* Seconds of a copy (PROFILE_H2D, _D2H) or NVMe transfer (PROFILE_NVME_READ, _WRITE). */
double profile_io_seconds(const Profile *pf, int which, double bytes)
{
    const ProfFit *f = &pf->io[which];
    return f->alpha + f->beta * bytes;
}

/* The fit of collective op over a group of n, with w ranks on a node: the
 * same op, span and group at the measured ranks-per-node nearest w (in
 * ratio), else the largest measured group of that op and span, its alpha
 * scaled by the hops ((n-1)/(g-1)) and beta by the ring's bus factor. */
const ProfFit *profile_coll(const Profile *pf, int op, bool inter, int64_t w, int64_t n, double *scale_a, double *scale_b)
{
    const ProfColl *best = NULL;
    double bestd = 0;
    *scale_a = *scale_b = 1;
    for (int i = 0; i < pf->ncoll; i++) {
        const ProfColl *c = &pf->coll[i];
        if (c->op != op || c->inter != inter || c->fit.points == 0) continue;
        double d = fabs(log((double)c->ranks_per_node / (double)w)) + (c->group == n ? 0 : 100 + fabs(log((double)c->group / (double)n)));
        if (!best || d < bestd) best = c, bestd = d;
    }
    if (!best) return NULL;
    if (best->group != n && op != PROFILE_SENDRECV && best->group > 1 && n > 1) {
        double g = (double)best->group, nn = (double)n;
        *scale_a = (nn - 1) / (g - 1);
        *scale_b = ((nn - 1) / nn) / ((g - 1) / g);
    }
    return &best->fit;
}

/* A sharing row's slowdown: all its ranks at once over rank 0 alone. */
static double share_ratio(const ProfShare *s, bool gemm)
{
    return gemm ? s->gemm_s / s->alone_gemm_s : s->ew_s / s->alone_ew_s;
}

/* A sharing row's time with all its ranks at once over what the profile's
 * own tables price the reference kernel at for one rank of its threads
 * alone (the GEMM or the add of runtime/include/shardrt.h's sharing test;
 * the GEMM at its warm rate, as a rank whose working set fits the cache is
 * priced: the row ran it with cold operands, as ranks that take turns on a
 * core evict each other's): the factor that makes the model's price of the
 * reference, table rate times factor, what the row measured; the row's
 * ratio over rank 0 alone where the tables have no rate. */
static double share_over_table(const Profile *pf, const ProfShare *s, bool gemm)
{
    double d = SRT_SHARE_GEMM_DIM, bytes = 3.0 * SRT_SHARE_EW_ELEMS * 4, rate;
    if (gemm) rate = profile_gemm_warm_rate(pf, DT_FP32, false, s->threads, d, d, d);
    else rate = profile_stream_rate(pf, DT_FP32, s->threads, bytes);
    double alone = gemm ? 2 * d * d * d / rate : bytes / rate;
    if (!(alone > 0) || isinf(alone)) return share_ratio(s, gemm);
    return (gemm ? s->gemm_s : s->ew_s) / alone;
}

/* The contention of ranks that run at once, for w ranks of `threads`
 * threads: over the sharing rows of as many ranks or more (the row of the
 * most ranks where none has that many), each row's time with all its ranks
 * at once over the tables' price of the kernel alone (share_over_table: not
 * over rank 0 alone, whose reading of the same GEMM spread 0.22-0.33 ms over
 * one day's twelve calibrations of this VM where the tables' price spread
 * 0.24-0.29 ms; docs/cost-model.md, 2026-12-05) over the share its ranks'
 * threads took of the cores (at least 1), the smallest, never below 1.  Whatever else runs while a row is timed only
 * makes its ratio larger (one calibration measured 1.71 with 2 ranks and
 * 1.04 and 0.99 with 4 and 8: issue 18), as the calibration keeps each
 * benchmark's fastest batch for the same reason; and more ranks on the same
 * cores contend at least as much (more switches, more working sets in the
 * shared cache), so a row of more ranks bounds this count's too, and one of
 * fewer does not.  1 without rows. */
static double contention(const Profile *pf, int64_t w, bool gemm)
{
    int most = 0;
    for (int i = 0; i < pf->nshare; i++)
        if (pf->share[i].ranks_per_node > most) most = pf->share[i].ranks_per_node;
    double c = 0;
    for (int i = 0; i < pf->nshare; i++) {
        const ProfShare *s = &pf->share[i];
        if (s->ranks_per_node < (w < most ? w : most)) continue;
        double used = (double)s->ranks_per_node * s->threads / (double)pf->cores;
        double r = share_over_table(pf, s, gemm) / (used > 1 ? used : 1);
        if (r == r && (c == 0 || r < c)) c = r;
    }
    return c > 1 ? c : 1;
}

/* How much slower a rank's GEMMs (gemm) or streaming kernels run when w
 * ranks share the node's cores, each with `threads` threads.  With a core
 * per thread (w·threads <= cores): the sharing test's time with the w ranks
 * at once over rank 0's alone in the same launch (each reading one rank a
 * core at that moment, so what drifts between the tables and the test
 * cancels; against the tables a slow launch read as interference: +15 % on
 * gpt-pp2-1f1b in one calibration), never below 1 (1 where w
 * was not measured).  With more threads than cores the
 * ranks take turns: the cores' share w·threads / cores times the machine's
 * contention (above), not the oversubscribed row's own ratio alone. */
double profile_sharing(const Profile *pf, int64_t w, int threads, bool gemm)
{
    double share = (double)w * threads / (double)pf->cores;
    if (share > 1) return share * contention(pf, w, gemm);
    double f = 1;
    for (int i = 0; i < pf->nshare; i++) {
        const ProfShare *s = &pf->share[i];
        if (s->ranks_per_node == w && s->threads == threads) f = share_ratio(s, gemm);
    }
    return f > 1 ? f : 1;
}

/* A skew row's measure: the step's loss (its excess) or the wait. */
static double skew_value(const ProfSkew *k, bool loss) { return fmax(loss ? k->excess : k->seconds, 0); }

/* One rank count's skew after `compute` seconds (alone) between the ops:
 * its rows (of one kind, ranks_per_node and threads) linear between their
 * compute lengths, the shortest's scaled down to 0 at no compute, the
 * longest's beyond it. */
static double skew_after(const Profile *pf, const ProfSkew *k, bool loss, double compute)
{
    const ProfSkew *lo = NULL, *hi = NULL;   /* the nearest rows below and above compute */
    for (int j = 0; j < pf->nskew; j++) {
        const ProfSkew *o = &pf->skew[j];
        if (o->p2p != k->p2p || o->ranks_per_node != k->ranks_per_node || o->threads != k->threads) continue;
        if (o->compute_s <= compute && (!lo || o->compute_s > lo->compute_s)) lo = o;
        if (o->compute_s > compute && (!hi || o->compute_s < hi->compute_s)) hi = o;
    }
    double v0 = lo ? skew_value(lo, loss) : 0, x0 = lo ? lo->compute_s : 0;
    if (!hi) return v0;
    double v1 = skew_value(hi, loss);
    return v0 + (v1 - v0) * (compute - x0) / (hi->compute_s - x0);
}

/* The arrival skew for w ranks of `threads` threads on a node whose cores
 * they oversubscribe (share = w·threads / cores > 1, else 0), after
 * `compute` seconds between the ops: each measured rank count's skew at
 * that compute (skew_after), the largest among those measured at a share
 * up to this one; below the smallest measured share, that one's scaled by
 * (share − 1) / (its share − 1).  So it is never negative, 0 at share 1,
 * and never decreases as more ranks share the cores.  loss: the rows'
 * excess where every row of the kind has one (a profile from before it was
 * measured: the wait, as before). */
double profile_skew(const Profile *pf, int64_t w, int threads, bool p2p, bool loss, double compute)
{
    double share = (double)w * threads / (double)pf->cores, best = 0, low_share = 0, low = 0;
    if (!(share > 1) || !(compute > 0)) return 0;
    for (int i = 0; i < pf->nskew && loss; i++)
        if (pf->skew[i].p2p == p2p && pf->skew[i].excess < 0) loss = false;
    for (int i = 0; i < pf->nskew; i++) {
        const ProfSkew *k = &pf->skew[i];
        double ks = (double)k->ranks_per_node * k->threads / (double)pf->cores;
        if (k->p2p != p2p || !(ks > 1)) continue;
        double v = skew_after(pf, k, loss, compute);
        if (ks <= share) best = fmax(best, v);
        else if (low_share == 0 || ks < low_share) low_share = ks, low = v;
    }
    if (best == 0 && low_share > 0) best = low * (share - 1) / (low_share - 1);
    return best;
}

/* OMP threads a rank runs with when w ranks share a node: the README's
 * launch, cores / ranks per node (at least 1). */
int profile_threads(const Profile *pf, int64_t w)
{
    int64_t t = w > 0 ? pf->cores / w : 1;
    return t >= 1 ? (int)t : 1;
}

/* ---- the derived cluster keys ------------------------------------------------------------ */

/* The largest measured GEMM of a dtype (forward, at the most threads): its
 * FLOP/s, and its shape. */
static double best_gemm(const Profile *pf, int dt, double *m, double *n, double *k)
{
    int ti = 0;
    for (int i = 1; i < pf->nthreads; i++)
        if (pf->threads[i] > pf->threads[ti]) ti = i;
    const ProfGrid *g = &pf->gemm[rate_key(dt, 0, ti)];
    double x[3];
    for (int d = 0; d < 3; d++) x[d] = exp(g->ax[d][g->n[d] - 1]);
    *m = x[0], *n = x[1], *k = x[2];
    return grid_eval(g, x);
}

/* The cluster keys a profile fills for ranks_per_node ranks on a node (the
 * spec's cluster.gpus_per_node), each in the spec's unit (see ProfCluster). */
ProfCluster profile_cluster(const Profile *pf, int gpu, int64_t ranks_per_node)
{
    const CostProfile *cp = cost_profile_gpu(gpu);
    ProfCluster c = {0};
    int tmax = 1;
    for (int i = 0; i < pf->nthreads; i++)
        if (pf->threads[i] > tmax) tmax = pf->threads[i];
    double m, n, k, f32 = best_gemm(pf, 0, &m, &n, &k), b16 = best_gemm(pf, 1, &m, &n, &k);
    double big = exp(pf->ew[rate_key(0, 0, 0)].ax[0][pf->ew[rate_key(0, 0, 0)].n[0] - 1]);
    double stream = profile_stream_rate(pf, DT_FP32, tmax, big);
    double w = ranks_per_node > 0 ? (double)ranks_per_node : 1;
    if (pf->backend == PROFILE_CPU) {
        /* a rank's share of the node's best rates (the MFU's peak) */
        c.fp32_tflops = f32 / w * 1e-12, c.bf16_tflops = b16 / w * 1e-12;
        c.hbm_bandwidth = stream / w;
        c.host_bandwidth = stream;
    } else {
        /* the GPU model's peak and HBM such that it reproduces the largest
         * measured GEMM and the streaming rate */
        c.fp32_tflops = f32 / cost_gemm_eff(cp, m, n, k) * 1e-12;
        c.bf16_tflops = b16 / cost_gemm_eff(cp, m, n, k) * 1e-12;
        c.hbm_bandwidth = stream / cp->hbm_eff;
    }
    c.pcie = pf->io[PROFILE_H2D].beta > 0 ? 1 / pf->io[PROFILE_H2D].beta : 0;
    double rd = pf->io[PROFILE_NVME_READ].beta, wr = pf->io[PROFILE_NVME_WRITE].beta;
    c.nvme = rd > 0 && wr > 0 ? 1 / fmax(rd, wr) : 0;
    double sa, sb;
    const ProfFit *p2p = profile_coll(pf, PROFILE_SENDRECV, false, ranks_per_node, 2, &sa, &sb);
    if (p2p && p2p->beta > 0) c.intra_node = 1 / p2p->beta;
    const ProfFit *net = profile_coll(pf, PROFILE_SENDRECV, true, ranks_per_node, 2, &sa, &sb);
    if (net && net->beta > 0) c.inter_node = 1 / net->beta, c.network_latency_us = net->alpha * 1e6;
    return c;
}
