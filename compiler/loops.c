/* loops.c — folding a step's calls into loops (prefix loops_).
 *
 * A call is its kind and its typed arguments (code.h).  Two calls are alike
 * when they differ only in their integers (a layer, a microbatch, an event's
 * number, an index, an offset); a run of a block of elements repeated r times
 * becomes one loop when every integer of the block advances by the same step
 * from each repetition to the next, so that the generated code can compute
 * it from the loop's variable.  Folding goes innermost first (the shortest
 * blocks: the layers of a microbatch, then the microbatches of a phase of
 * the pipeline), and repeats until nothing folds; a loop must save a few
 * calls (short runs read better written out).
 */
#include "code.h"

#include <stdlib.h>
#include <string.h>

enum { PERIOD_MAX = 512, MIN_SAVED = 3 };

/* ---- a call's integers and identity ----------------------------------------- */

/* The integers of a call its text shows, in order, with what each counts. */
int loops_ints(const CE *e, const Call *c, int64_t *out, signed char *types, int cap)
{
    int n = 0;
#define PUT(v, t)                                                                                                    \
    do {                                                                                                             \
        if (n == cap) die("loops: a call with more than %d integers", cap);                                         \
        out[n] = (v), types[n] = (signed char)(t), n++;                                                              \
    } while (0)
    for (int i = 0; i < c->nargs; i++) {
        const Arg *a = &c->args[i];
        switch (a->kind) {
        case A_INT: PUT(a->v[0], a->name); break;
        case A_BUF: {
            const BufName *nm = &e->names[a->name];
            if (nm->indexed) PUT(a->v[3], IT_OTHER);
            if (nm->uses_c) PUT(a->v[2], IT_CHUNK);
            if (nm->uses_l && !nm->indexed) PUT(a->v[0], IT_LAYER);
            if (nm->uses_mb) PUT(a->v[1], IT_MB);
            PUT(a->v[4], IT_OTHER);
            break;
        }
        case A_ROW:
            if (a->name == 2) PUT(a->v[0], IT_LAYER);
            break;
        case A_EVENT:
            if (c->kind == K_WAIT) PUT(a->v[1], IT_OTHER);
            break;
        default: break;
        }
    }
#undef PUT
    return n;
}

/* Interned identities: equal keys get equal numbers. */
typedef struct Syms {
    char **keys;
    uint64_t *hash;
    int *slot;                  /* open addressing over ids + 1 */
    int n, cap, hcap;
} Syms;

/* FNV-1a of a string. */
static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The number of key (the first time: a new one). */
static int intern(Syms *y, const char *key)
{
    if (2 * (y->n + 1) >= y->hcap) {
        int hcap = y->hcap ? 2 * y->hcap : 1024;
        int *slot = calloc((size_t)hcap, sizeof(int));
        if (!slot) die("loops: out of memory");
        for (int i = 0; i < y->n; i++) {
            uint64_t k = y->hash[i] & (uint64_t)(hcap - 1);
            while (slot[k]) k = (k + 1) & (uint64_t)(hcap - 1);
            slot[k] = i + 1;
        }
        free(y->slot);
        y->slot = slot, y->hcap = hcap;
    }
    uint64_t h = str_hash(key), k = h & (uint64_t)(y->hcap - 1);
    for (; y->slot[k]; k = (k + 1) & (uint64_t)(y->hcap - 1))
        if (y->hash[y->slot[k] - 1] == h && strlen(y->keys[y->slot[k] - 1]) == strlen(key) &&
            memcmp(y->keys[y->slot[k] - 1], key, strlen(key)) == 0)
            return y->slot[k] - 1;
    if (y->n == y->cap) {
        y->cap = y->cap ? 2 * y->cap : 1024;
        y->keys = realloc(y->keys, sizeof(char *) * (size_t)y->cap);
        y->hash = realloc(y->hash, sizeof(uint64_t) * (size_t)y->cap);
        if (!y->keys || !y->hash) die("loops: out of memory");
    }
    y->keys[y->n] = arena_strdup(&g_arena, key), y->hash[y->n] = h;
    y->slot[k] = ++y->n;
    return y->n - 1;
}

/* A growing key. */
typedef struct Key { char *p; size_t n, cap; } Key;

/* Appends text to a key. */
static void key_add(Key *k, const char *t)
{
    size_t l = strlen(t);
    if (k->n + l + 1 > k->cap) {
        k->cap = (k->n + l + 1) * 2;
        k->p = realloc(k->p, k->cap);
        if (!k->p) die("loops: out of memory");
    }
    memcpy(k->p + k->n, t, l + 1);
    k->n += l;
}

/* The identity of a call: its kind and its arguments but their integers. */
static int call_sym(Syms *y, const Call *c, Key *k)
{
    char buf[64];
    k->n = 0;
    if (c->kind == K_CODE) {    /* code of its own is unique */
        snprintf(buf, sizeof buf, "code %p", (const void *)c);
        key_add(k, buf);
        return intern(y, k->p);
    }
    snprintf(buf, sizeof buf, "%d:", c->kind);
    key_add(k, buf);
    for (int i = 0; i < c->nargs; i++) {
        const Arg *a = &c->args[i];
        snprintf(buf, sizeof buf, "|%d.%d", a->kind, a->name);
        key_add(k, buf);
        if (a->kind == A_TEXT) key_add(k, a->text);
    }
    return intern(y, k->p);
}

/* ---- folding ------------------------------------------------------------------- */

typedef struct Fold {
    const CE *e;
    Folded *out;
    Syms syms;
    Key key;
    const int *mb, *layer, *chunk;  /* per call: the microbatch, layer, chunk of its op (-1 none) */
    int new_loops;              /* the loops made since this index are new         */
    int64_t *dp;                /* the alignments' table (dp_table)                */
    size_t dpcap;
} Fold;

/* A body element of a loop being made: the element (its integers at
 * iteration 0, counted even where it does not run), their steps (NULL: none
 * moves) and the iterations it runs in. */
typedef struct Part {
    Elem el;
    const int64_t *delta;
    int lo, hi;
} Part;

/* The loop element of r iterations of parts[0, n), standing for calls first .. last. */
static Elem make_loop(Fold *f, int r, const Part *parts, int n, int first, int last)
{
    Folded *o = f->out;
    if (o->nloops == o->caploops) {
        int cap = o->caploops ? 2 * o->caploops : 64;
        Loop *nl = arena_alloc(&g_arena, sizeof(Loop) * (size_t)cap);
        if (o->nloops) memcpy(nl, o->loops, sizeof(Loop) * (size_t)o->nloops);
        o->loops = nl, o->caploops = cap;
    }
    int nints = 0;
    int64_t len = 0, lines = 2;
    for (int j = 0; j < n; j++)
        nints += parts[j].el.nints, len += parts[j].el.len * (parts[j].hi - parts[j].lo), lines += parts[j].el.lines;
    Loop *l = &o->loops[o->nloops];
    l->r = r, l->n = n;
    l->body = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(n + 1));
    l->lo = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    l->hi = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    l->delta = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(nints + 1));
    Elem el = {.loop = true, .id = o->nloops++, .nints = nints, .len = len, .lines = lines, .first = first, .last = last};
    el.ints = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(nints + 1));
    el.types = arena_alloc(&g_arena, (size_t)(nints + 1));
    for (int j = 0, at = 0; j < n; at += parts[j].el.nints, j++) {
        const Part *q = &parts[j];
        l->body[j] = q->el, l->lo[j] = q->lo, l->hi[j] = q->hi;
        memcpy(el.ints + at, q->el.ints, sizeof(int64_t) * (size_t)q->el.nints);
        memcpy(el.types + at, q->el.types, (size_t)q->el.nints);
        for (int t = 0; t < q->el.nints; t++) l->delta[at + t] = q->delta ? q->delta[t] : 0;
    }
    /* its identity: the count, the body's elements and where they run, the steps */
    char buf[64];
    f->key.n = 0;
    snprintf(buf, sizeof buf, "loop %d:", r);
    key_add(&f->key, buf);
    for (int j = 0; j < n; j++) snprintf(buf, sizeof buf, " %d[%d,%d)", parts[j].el.sym, parts[j].lo, parts[j].hi), key_add(&f->key, buf);
    key_add(&f->key, " /");
    for (int j = 0; j < nints; j++) snprintf(buf, sizeof buf, " %lld", (long long)l->delta[j]), key_add(&f->key, buf);
    el.sym = intern(&f->syms, f->key.p);
    return el;
}

/* The loop element of r repetitions of seq[i, i + p) whose integers step by delta. */
static Elem loop_elem(Fold *f, const Elem *seq, int i, int p, int r, const int64_t *delta)
{
    Part *parts = arena_alloc(&g_arena, sizeof(Part) * (size_t)p);
    for (int j = i, at = 0; j < i + p; at += seq[j].nints, j++)
        parts[j - i] = (Part){seq[j], delta + at, 0, r};
    return make_loop(f, r, parts, p, seq[i].first, seq[i + r * p - 1].last);
}

/* Does block seq[b, b + p) repeat seq[a, a + p) k times over, each integer
 * advanced by k · delta (delta NULL: work it out, k = 1)? */
static bool repeats(const Elem *seq, int a, int b, int p, int64_t *delta, bool find, int64_t k)
{
    for (int j = 0; j < p; j++)
        if (seq[a + j].sym != seq[b + j].sym || seq[a + j].nints != seq[b + j].nints) return false;
    for (int j = 0, at = 0; j < p; at += seq[a + j].nints, j++)
        for (int t = 0; t < seq[a + j].nints; t++) {
            int64_t d = seq[b + j].ints[t] - seq[a + j].ints[t];
            if (find) delta[at + t] = d;
            else if (d != k * delta[at + t]) return false;
        }
    return true;
}

/* One pass at period p: folds every run that repeats; returns the new
 * length.  aligned: a loop's iterations each start at a head (a unit of
 * work), so that a loop over microbatches or layers begins where one
 * does. */
static int fold_period(Fold *f, Elem *seq, int n, int p, int64_t *delta, Elem *out, bool aligned)
{
    int m = 0;
    for (int i = 0; i < n;) {
        int r = 1;
        if (i + 2 * p <= n && (!aligned || (seq[i].head && seq[i + p].head)) && repeats(seq, i, i + p, p, delta, true, 1)) {
            r = 2;
            while (i + (r + 1) * p <= n && (!aligned || seq[i + r * p].head) && repeats(seq, i, i + r * p, p, delta, false, r))
                r++;
        }
        int64_t len = 0;
        for (int j = i; j < i + p && j < n; j++) len += seq[j].len;
        if (r >= 2 && (r - 1) * len >= MIN_SAVED) {
            out[m] = loop_elem(f, seq, i, p, r, delta);
            out[m++].head = seq[i].head;
            i += r * p;
        } else {
            out[m++] = seq[i++];
        }
    }
    return m;
}

/* ---- a loop's first and last iterations -------------------------------------------- */

/* Is element q body element j of loop el (x) at iteration k (one before the
 * first, or one after the last, where j must run on to)? */
static bool is_iteration(const Elem *q, const Elem *el, const Loop *x, int j, int at, int k)
{
    const Elem *b = &x->body[j];
    if (q->sym != b->sym || q->nints != b->nints) return false;
    if (k < 0 ? x->lo[j] != 0 : x->hi[j] != x->r) return false;
    if (x->r == 1) return true;     /* a seed: the second iteration sets the steps */
    for (int t = 0; t < b->nints; t++)
        if (q->ints[t] != el->ints[at + t] + k * x->delta[at + t]) return false;
    return true;
}

/* An alignment's table of rows × cols, its first row and column zero (one
 * table, reused: the folding makes many). */
static int64_t *dp_table(Fold *f, int rows, int cols)
{
    size_t need = (size_t)rows * (size_t)cols;
    if (need > f->dpcap) {
        free(f->dp);
        f->dpcap = need * 2;
        f->dp = malloc(sizeof(int64_t) * f->dpcap);
        if (!f->dp) die("loops: out of memory");
    }
    int64_t *t = f->dp;
    for (int j = 0; j < cols; j++) t[j] = 0;
    for (int i = 0; i < rows; i++) t[(size_t)i * (size_t)cols] = 0;
    return t;
}

enum { MATCH, DROP, ADD };   /* an alignment's steps: alike; the body's alone; the other's alone */

/* Joins to loop element *el its iteration before (front) or after it when
 * the elements next to it are that iteration but for a few: the body's
 * elements it lacks do not run in it, its elements the body lacks run only
 * in it.  The elements are seq[from - n, from) (front) or seq[from, from + n);
 * returns how many it took (0: none). */
static int absorb(Fold *f, Elem *el, const Elem *seq, int from, int n, bool front)
{
    const Loop *x = &f->out->loops[el->id];
    int nb = x->n, np = n < nb + nb / 2 + 2 ? n : nb + nb / 2 + 2;
    if (!np) return 0;
    int *at = arena_alloc(&g_arena, sizeof(int) * (size_t)(nb + 1));
    int64_t body_lines = 0;
    for (int j = 0, a = 0; j < nb; a += x->body[j].nints, j++) at[j] = a, body_lines += x->body[j].lines;
    int k = front ? -1 : x->r;
    /* the i-th body element and the j-th other one counted away from the loop */
#define BI(i) (front ? nb - (i) : (i) - 1)
#define PJ(j) (front ? from - (j) : from + (j) - 1)
    int W = np + 1;
    int64_t *D = dp_table(f, nb + 1, W);
    for (int i = 1; i <= nb; i++)
        for (int j = 1; j <= np; j++) {
            int64_t best = D[(i - 1) * W + j] > D[i * W + j - 1] ? D[(i - 1) * W + j] : D[i * W + j - 1];
            if (is_iteration(&seq[PJ(j)], el, x, BI(i), at[BI(i)], k) && D[(i - 1) * W + j - 1] + seq[PJ(j)].lines > best)
                best = D[(i - 1) * W + j - 1] + seq[PJ(j)].lines;
            D[i * W + j] = best;
        }
    /* the most lines taken in, the fewest guarded (at least two in three
     * alike), whole units of work: the first one taken a head (front), the
     * one after the last taken a head or the end */
    int take = 0;
    int64_t gain = 0, other = 0;
    for (int j = 1; j <= np; j++) {
        other += seq[PJ(j)].lines;
        int64_t same = D[nb * W + j], differ = body_lines - same + other - same;
        bool whole = front ? seq[PJ(j)].head : j == n || seq[PJ(j) + 1].head;
        if (whole && same > 0 && 2 * same >= 4 * differ && 3 * same - body_lines - other > gain)
            take = j, gain = 3 * same - body_lines - other;
    }
    if (!take) return 0;
    /* the alignment, from the far end back to the loop */
    int *step = arena_alloc(&g_arena, sizeof(int) * (size_t)(nb + take + 1)), ns = 0;
    for (int i = nb, j = take; i > 0 || j > 0;) {
        if (i > 0 && j > 0 && is_iteration(&seq[PJ(j)], el, x, BI(i), at[BI(i)], k) &&
            D[i * W + j] == D[(i - 1) * W + j - 1] + seq[PJ(j)].lines)
            step[ns++] = MATCH, i--, j--;
        else if (i > 0 && D[i * W + j] == D[(i - 1) * W + j]) step[ns++] = DROP, i--;
        else step[ns++] = ADD, j--;
    }
    /* in program order: front, the steps from the far end; after, the reverse */
    Part *parts = arena_alloc(&g_arena, sizeof(Part) * (size_t)(nb + take + 1));
    int np2 = 0, bi = 0, pj = front ? from - take : from;
    for (int s = 0; s < ns; s++) {
        int st = step[front ? s : ns - 1 - s];
        if (st == ADD) {
            parts[np2++] = (Part){seq[pj++], NULL, front ? 0 : x->r, front ? 1 : x->r + 1};
            continue;
        }
        Part q = {x->body[bi], x->delta + at[bi], x->lo[bi], x->hi[bi]};
        if (front) {
            /* iterations count from the one taken in: integers at it */
            int64_t *v = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(q.el.nints + 1));
            for (int t = 0; t < q.el.nints; t++) v[t] = el->ints[at[bi] + t] - x->delta[at[bi] + t];
            q.el.ints = v;
            q.lo = st == MATCH ? 0 : q.lo + 1, q.hi++;
        } else {
            q.el.ints = el->ints + at[bi];
            if (st == MATCH) q.hi++;
            if (st == MATCH && x->r == 1) {     /* a seed's steps: from its first iteration to this one */
                int64_t *d = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(q.el.nints + 1));
                for (int t = 0; t < q.el.nints; t++) d[t] = seq[pj].ints[t] - q.el.ints[t];
                q.delta = d;
            }
        }
        if (st == MATCH) pj++;
        bi++;
        parts[np2++] = q;
    }
#undef BI
#undef PJ
    bool head = front ? seq[from - take].head : el->head;
    *el = make_loop(f, x->r + 1, parts, np2, front ? seq[from - take].first : el->first,
                    front ? el->last : seq[from + take - 1].last);
    el->head = head;
    return take;
}

/* Joins to each new loop of seq[0, n) the iterations next to it; returns the new length. */
static int absorb_all(Fold *f, Elem *seq, int n, Elem *out)
{
    int m = 0;
    for (int i = 0; i < n;) {
        Elem el = seq[i++];
        if (el.loop && el.id >= f->new_loops) {
            for (int t; (t = absorb(f, &el, out, m, m, true)) > 0;) m -= t;
            for (int t; (t = absorb(f, &el, seq, i, n - i, false)) > 0;) i += t;
        }
        out[m++] = el;
    }
    return m;
}

/* ---- unfolding: the loops stand for exactly the calls ------------------------------- */

typedef struct Unfold {
    const Folded *f;
    const Elem *calls;          /* the calls as elements, in order */
    int n, at;
} Unfold;

/* Checks that elements els[0, n) with integers ints unfold to the next calls. */
static void unfold(Unfold *u, const Elem *els, int n, const int64_t *ints)
{
    for (int i = 0, a = 0; i < n; a += els[i].nints, i++) {
        const Elem *el = &els[i];
        if (!el->loop && !el->unit) {
            const Elem *c = &u->calls[u->at];
            if (u->at >= u->n || c->sym != el->sym || c->nints != el->nints ||
                memcmp(c->ints, ints + a, sizeof(int64_t) * (size_t)c->nints) != 0)
                die("loops: the loops do not stand for call %d", u->at);
            u->at++;
            continue;
        }
        if (el->unit) {
            const Unit *w = &u->f->units[el->id];
            int64_t *v = malloc(sizeof(int64_t) * (size_t)(w->nints + 1));
            if (!v) die("loops: out of memory");
            for (int j = 0; j < w->nints; j++) v[j] = w->param[j] < 0 ? w->b[j] : w->a[j] * ints[a + w->param[j]] + w->b[j];
            int64_t var = w->nvar > 1 ? ints[a + w->nparams - 1] : 0;
            for (int b = 0, at = 0; b < w->n; at += w->body[b].nints, b++)
                if (w->vmask[b] >> var & 1) unfold(u, &w->body[b], 1, v + at);
            free(v);
            continue;
        }
        const Loop *x = &u->f->loops[el->id];
        int64_t *v = malloc(sizeof(int64_t) * (size_t)(el->nints + 1));
        if (!v) die("loops: out of memory");
        for (int k = 0; k < x->r; k++) {
            for (int t = 0; t < el->nints; t++) v[t] = ints[a + t] + k * x->delta[t];
            for (int j = 0, b = 0; j < x->n; b += x->body[j].nints, j++)
                if (x->lo[j] <= k && k < x->hi[j]) unfold(u, &x->body[j], 1, v + b);
        }
        free(v);
    }
}

/* Does a loop made from a seed go along one chunk, one microbatch or one
 * layer after the next (its chunks fixed, its microbatches stepping by 0 or
 * 1)?  Units alike in their calls but not in what they work on (the last
 * microbatch of one chunk, the first of the next) are left as they are. */
static bool steps_along(const Fold *f, const Elem *el)
{
    const Loop *x = &f->out->loops[el->id];
    for (int j = 0; j < el->nints; j++)
        if ((el->types[j] == IT_CHUNK && x->delta[j]) || (el->types[j] == IT_MB && x->delta[j] != 0 && x->delta[j] != 1))
            return false;
    return true;
}

/* Units of work in a row that are alike but not the same (a chunk's first
 * and last layer differ from the others in what they receive and send):
 * each run of them one loop, its differences guarded.  A unit becomes a
 * loop of one iteration that absorb() extends; seq[0, n) into out, then
 * back; returns the new length, *changed when a loop was made. */
static int seed_all(Fold *f, Elem *seq, int n, Elem *out, bool *changed)
{
    int m = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && !seq[j].head) j++;
        if (!seq[i].head || j == n || (j - i == 1 && seq[i].loop)) {
            out[m++] = seq[i++];
            continue;
        }
        Part *parts = arena_alloc(&g_arena, sizeof(Part) * (size_t)(j - i));
        for (int t = i; t < j; t++) parts[t - i] = (Part){seq[t], NULL, 0, 1};
        Elem el = make_loop(f, 1, parts, j - i, seq[i].first, seq[j - 1].last);
        el.head = true;
        int seed = el.id, took = absorb(f, &el, seq, j, n - j, false);
        if (!took || !steps_along(f, &el)) {
            if (!took) f->out->nloops = seed;   /* the seed is not kept */
            out[m++] = seq[i++];
            continue;
        }
        for (int t; (t = absorb(f, &el, seq, j + took, n - j - took, false)) > 0;) took += t;
        out[m++] = el;
        i = j + took;
        *changed = true;
    }
    memcpy(seq, out, sizeof(Elem) * (size_t)m);
    return m;
}

/* Folds seq[0, n) in place, innermost first (aligned: loops start at
 * heads; seed: units alike but not the same loop too, their differences
 * guarded); returns the new length. */
static int fold_all(Fold *f, Elem *seq, int n, bool aligned, bool seed)
{
    Elem *next = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(n + 1));
    int64_t *delta = NULL;
    int nints = 0;
    for (int i = 0; i < n; i++) nints += seq[i].nints;
    delta = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(nints + 1));
    for (bool changed = true; changed;) {
        changed = false;
        for (int p = 1; p <= PERIOD_MAX && p <= n / 2; p++) {
            f->new_loops = f->out->nloops;
            int k = fold_period(f, seq, n, p, delta, next, aligned);
            if (k == n) continue;
            n = absorb_all(f, next, k, seq);
            changed = true;
        }
        if (!changed && seed) n = seed_all(f, seq, n, next, &changed);
    }
    return n;
}

/* The levels of work a step's calls are cut into before folding: the
 * microbatch (and chunk) an op works on, then the layer. */
enum { LEVEL_MB, LEVEL_LAYER, NLEVELS };

/* Call i's unit of work at a level, or -1 where it belongs to none (a
 * gather or a reduction that serves several microbatches). */
static int64_t unit_of(const Fold *f, int i, int level)
{
    if (f->mb[i] < 0) return -1;
    return level == LEVEL_MB ? (int64_t)f->mb[i] * 4096 + f->chunk[i] + 1 : (int64_t)f->layer[i] + 1;
}

enum { UNIT_MIN_LINES = 8 };

/* The parameters of a unit from its instances' integers ints[t][0, nints)
 * (known[t][j]: instance t has integer j, its element being in its
 * variant): each integer that differs between instances follows an
 * earlier parameter affinely or is a parameter of its own; false when
 * more than max are needed.  par[t][q]: instance t's parameter q. */
static bool unit_params(Unit *u, int64_t **ints, bool **known, int ninst, const signed char *types, int max, int64_t **par)
{
    u->param = arena_alloc(&g_arena, sizeof(int) * (size_t)(u->nints + 1));
    u->a = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(u->nints + 1));
    u->b = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(u->nints + 1));
    int col[MAX_PARAMS];        /* the integer each parameter is */
    u->nparams = 0;
    for (int j = 0; j < u->nints; j++) {
        int t0 = 0;
        while (!known[t0][j]) t0++;
        u->param[j] = -1, u->a[j] = 0, u->b[j] = ints[t0][j];
        bool same = true;
        for (int t = t0 + 1; t < ninst && same; t++) same = !known[t][j] || ints[t][j] == ints[t0][j];
        if (same) continue;
        for (int q = 0; q < u->nparams && u->param[j] < 0; q++) {
            int c = col[q], t2 = -1;
            bool covered = true;
            for (int t = 0; t < ninst; t++) {
                if (!known[t][j]) continue;
                if (!known[t][c]) covered = false;
                else if (t2 < 0 && ints[t][c] != ints[t0][c]) t2 = t;
            }
            if (!covered || t2 < 0 || !known[t0][c]) continue;
            int64_t dq = ints[t2][c] - ints[t0][c], dj = ints[t2][j] - ints[t0][j];
            if (dj % dq) continue;
            int64_t a = dj / dq, b = ints[t0][j] - a * ints[t0][c];
            bool fits = true;
            for (int t = 0; t < ninst && fits; t++) fits = !known[t][j] || ints[t][j] == a * ints[t][c] + b;
            if (fits) u->param[j] = q, u->a[j] = a, u->b[j] = b;
        }
        if (u->param[j] >= 0) continue;
        if (u->nparams == max) return false;
        col[u->nparams] = j, u->ptype[u->nparams] = types[j];
        u->param[j] = u->nparams++, u->a[j] = 1, u->b[j] = 0;
    }
    for (int t = 0; t < ninst; t++)
        for (int q = 0; q < u->nparams; q++) par[t][q] = known[t][col[q]] ? ints[t][col[q]] : 0;
    return true;
}

/* A unit being made: its merged elements and its instances (segments of
 * seq), each with its variant and where each element is in it (-1 not). */
typedef struct Draft {
    Elem *body;
    unsigned *vmask;
    int n, nvar;
    int *seg, *var, **map;      /* per instance */
    int ninst, cap;
} Draft;

/* Adds segment g (its elements seq[start[g], start[g + 1])) to draft d as
 * an instance of variant v; map: where each of d's elements is in it. */
static void draft_add(Draft *d, int g, int v, int *map)
{
    if (d->ninst == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        int *seg = arena_alloc(&g_arena, sizeof(int) * (size_t)cap), *var = arena_alloc(&g_arena, sizeof(int) * (size_t)cap);
        int **mp = arena_alloc(&g_arena, sizeof(int *) * (size_t)cap);
        if (d->ninst) {
            memcpy(seg, d->seg, sizeof(int) * (size_t)d->ninst), memcpy(var, d->var, sizeof(int) * (size_t)d->ninst);
            memcpy(mp, d->map, sizeof(int *) * (size_t)d->ninst);
        }
        d->seg = seg, d->var = var, d->map = mp, d->cap = cap;
    }
    d->seg[d->ninst] = g, d->var[d->ninst] = v, d->map[d->ninst] = map, d->ninst++;
}

enum { MAX_VARIANTS = 8 };

/* How much pairing element b of a unit with element s of another instance
 * weighs in their alignment: 0 unless alike (equal syms). */
static int64_t pair_weight(const Elem *b, const Elem *s)
{
    if (b->sym != s->sym || b->nints != s->nints) return 0;
    bool same = true;
    for (int t = 0; t < b->nints && same; t++)
        same = b->types[t] == IT_MB || b->types[t] == IT_CHUNK || b->ints[t] == s->ints[t];
    return 4 * s->lines + same;
}

/* Makes segment g a new variant of draft d when its elements align with
 * d's (equal syms in order) with at least two lines alike for each one
 * that differs; true when it did. */
static bool draft_merge(Fold *f, Draft *d, const Elem *seq, const int *start, int g)
{
    if (d->nvar == MAX_VARIANTS) return false;
    const Elem *s = seq + start[g];
    int ns = start[g + 1] - start[g], nb = d->n, W = ns + 1;
    int64_t *D = dp_table(f, nb + 1, W);
    int64_t lb = 0, ls = 0;
    for (int i = 0; i < nb; i++) lb += d->body[i].lines;
    for (int j = 0; j < ns; j++) ls += s[j].lines;
    /* lines alike count 4 each, 1 more where they work on the same layer
     * (their integers equal but for the microbatch and chunk), so that an
     * element pairs with its own layer's */
    for (int i = 1; i <= nb; i++)
        for (int j = 1; j <= ns; j++) {
            int64_t best = D[(i - 1) * W + j] > D[i * W + j - 1] ? D[(i - 1) * W + j] : D[i * W + j - 1];
            int64_t w = pair_weight(&d->body[i - 1], &s[j - 1]);
            if (w && D[(i - 1) * W + j - 1] + w > best) best = D[(i - 1) * W + j - 1] + w;
            D[i * W + j] = best;
        }
    /* the alignment back from the ends, then in order */
    int *step = arena_alloc(&g_arena, sizeof(int) * (size_t)(nb + ns + 1)), nst = 0;
    int64_t same = 0;
    for (int i = nb, j = ns; i > 0 || j > 0;) {
        int64_t w = i > 0 && j > 0 ? pair_weight(&d->body[i - 1], &s[j - 1]) : 0;
        if (w && D[i * W + j] == D[(i - 1) * W + j - 1] + w) step[nst++] = MATCH, same += s[j - 1].lines, i--, j--;
        else if (i > 0 && D[i * W + j] == D[(i - 1) * W + j]) step[nst++] = DROP, i--;
        else step[nst++] = ADD, j--;
    }
    int64_t differ = lb - same + ls - same;
    if (!same || same < 2 * differ) return false;
    int v = d->nvar++, n = 0, bi = 0, sj = 0;
    Elem *body = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(nb + ns + 1));
    unsigned *vm = arena_alloc(&g_arena, sizeof(unsigned) * (size_t)(nb + ns + 1));
    int *moved = arena_alloc(&g_arena, sizeof(int) * (size_t)(nb + 1));     /* old element -> new */
    int *map = arena_alloc(&g_arena, sizeof(int) * (size_t)(nb + ns + 1));
    for (int k = nst - 1; k >= 0; k--) {
        if (step[k] == ADD) {
            body[n] = s[sj], vm[n] = 1u << v, map[n++] = start[g] + sj++;
            continue;
        }
        body[n] = d->body[bi], vm[n] = d->vmask[bi], moved[bi++] = n;
        map[n] = step[k] == MATCH ? start[g] + sj++ : -1;
        if (step[k] == MATCH) vm[n] |= 1u << v;
        n++;
    }
    for (int t = 0; t < d->ninst; t++) {
        int *m2 = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
        for (int k = 0; k < n; k++) m2[k] = -1;
        for (int k = 0; k < nb; k++) m2[moved[k]] = d->map[t][k];
        d->map[t] = m2;
    }
    d->body = body, d->vmask = vm, d->n = n;
    draft_add(d, g, v, map);
    return true;
}

/* Makes the units of work of seq[0, n) (cut at start[0, nseg + 1)) that
 * recur into functions: units alike in every element, and units that
 * differ from them in a few elements as variants of theirs (those elements
 * guarded by the variant); each instance becomes one call; returns the new
 * length. */
static int outline(Fold *f, Elem *seq, int n, const int *start, const bool *keyed, int nseg, Elem *out)
{
    int *usym = arena_alloc(&g_arena, sizeof(int) * (size_t)(nseg + 1));
    int *draft_of = arena_alloc(&g_arena, sizeof(int) * (size_t)(nseg + 1));
    for (int g = 0; g < nseg; g++) {
        char buf[32];
        f->key.n = 0;
        key_add(&f->key, "unit:");
        for (int i = start[g]; i < start[g + 1]; i++) snprintf(buf, sizeof buf, " %d", seq[i].sym), key_add(&f->key, buf);
        usym[g] = keyed[g] ? intern(&f->syms, f->key.p) : -1;
        draft_of[g] = -1;
    }
    /* drafts: each a variant's first segment and the segments alike in every element */
    Draft *dr = arena_alloc(&g_arena, sizeof(Draft) * (size_t)(nseg + 1));
    int nd = 0;
    for (int g = 0; g < nseg; g++) {
        if (usym[g] < 0 || draft_of[g] >= 0) continue;
        int64_t lines = 0;
        for (int i = start[g]; i < start[g + 1]; i++) lines += seq[i].lines;
        if (lines < UNIT_MIN_LINES) continue;
        int ninst = 0;
        for (int h = g; h < nseg; h++) ninst += usym[h] == usym[g];
        /* a unit seen once: a variant of an earlier draft, if one is alike */
        if (ninst == 1) {
            int k = 0;
            while (k < nd && !draft_merge(f, &dr[k], seq, start, g)) k++;
            if (k < nd) {
                draft_of[g] = k;
                continue;
            }
        }
        Draft *d = &dr[nd];
        memset(d, 0, sizeof *d);
        d->n = start[g + 1] - start[g], d->nvar = 1;
        d->body = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(d->n + 1));
        d->vmask = arena_alloc(&g_arena, sizeof(unsigned) * (size_t)(d->n + 1));
        memcpy(d->body, seq + start[g], sizeof(Elem) * (size_t)d->n);
        for (int h = g; h < nseg; h++) {
            if (usym[h] != usym[g]) continue;
            int *map = arena_alloc(&g_arena, sizeof(int) * (size_t)(d->n + 1));
            for (int k = 0; k < d->n; k++) map[k] = start[h] + k, d->vmask[k] = 1;
            draft_add(d, h, 0, map);
            draft_of[h] = nd;
        }
        nd++;
    }
    /* the drafts with two instances or more become units */
    Folded *o = f->out;
    int *unit_of_draft = arena_alloc(&g_arena, sizeof(int) * (size_t)(nd + 1));
    int64_t **par_of = arena_alloc(&g_arena, sizeof(int64_t *) * (size_t)(nseg + 1));
    for (int k = 0; k < nd; k++) {
        Draft *d = &dr[k];
        unit_of_draft[k] = -1;
        if (d->ninst < 2) continue;
        Unit u = {.body = d->body, .n = d->n, .vmask = d->vmask, .nvar = d->nvar, .ninst = d->ninst,
                  .first = seq[start[d->seg[0]]].first, .last = seq[start[d->seg[0] + 1] - 1].last};
        int *at = arena_alloc(&g_arena, sizeof(int) * (size_t)(d->n + 1));
        for (int b = 0; b < d->n; b++) at[b] = u.nints, u.nints += d->body[b].nints;
        int64_t **ints = arena_alloc(&g_arena, sizeof(int64_t *) * (size_t)d->ninst);
        bool **known = arena_alloc(&g_arena, sizeof(bool *) * (size_t)d->ninst);
        int64_t **par = arena_alloc(&g_arena, sizeof(int64_t *) * (size_t)d->ninst);
        signed char *types = arena_alloc(&g_arena, (size_t)(u.nints + 1));
        for (int b = 0; b < d->n; b++) memcpy(types + at[b], d->body[b].types, (size_t)d->body[b].nints);
        for (int t = 0; t < d->ninst; t++) {
            ints[t] = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(u.nints + 1));
            known[t] = arena_alloc(&g_arena, sizeof(bool) * (size_t)(u.nints + 1));
            par[t] = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(MAX_PARAMS + 1));
            for (int b = 0; b < d->n; b++) {
                int i = d->map[t][b];
                for (int q = 0; q < d->body[b].nints; q++) known[t][at[b] + q] = i >= 0, ints[t][at[b] + q] = i >= 0 ? seq[i].ints[q] : 0;
            }
        }
        if (!unit_params(&u, ints, known, d->ninst, types, MAX_PARAMS - (d->nvar > 1), par)) continue;
        if (d->nvar > 1) u.ptype[u.nparams++] = IT_OTHER;     /* the variant, last */
        if (o->nunits % 16 == 0) {
            Unit *nu = arena_alloc(&g_arena, sizeof(Unit) * (size_t)(o->nunits + 16));
            if (o->nunits) memcpy(nu, o->units, sizeof(Unit) * (size_t)o->nunits);
            o->units = nu;
        }
        unit_of_draft[k] = o->nunits;
        o->units[o->nunits++] = u;
        for (int t = 0; t < d->ninst; t++) {
            if (d->nvar > 1) par[t][u.nparams - 1] = d->var[t];
            par_of[d->seg[t]] = par[t];
        }
    }
    int m = 0;
    for (int g = 0; g < nseg; g++) {
        int un = draft_of[g] >= 0 ? unit_of_draft[draft_of[g]] : -1;
        if (un < 0) {
            for (int i = start[g]; i < start[g + 1]; i++) out[m++] = seq[i];
            continue;
        }
        const Unit *u = &o->units[un];
        Elem el = {.unit = true, .id = un, .nints = u->nparams, .lines = 1, .head = true,
                   .first = seq[start[g]].first, .last = seq[start[g + 1] - 1].last};
        char buf[32];
        snprintf(buf, sizeof buf, "call unit %d", un);
        el.sym = intern(&f->syms, buf);
        el.ints = par_of[g];
        el.types = arena_alloc(&g_arena, (size_t)(u->nparams + 1));
        memcpy(el.types, u->ptype, (size_t)u->nparams);
        for (int i = start[g]; i < start[g + 1]; i++) el.len += seq[i].len;
        out[m++] = el;
    }
    return m;
}

/* Folds calls seq[0, n) at a level and the ones below it, into out;
 * returns the new length.  The calls are cut into units of work (a run of
 * one unit's calls, with the calls of none among them; and the runs of
 * calls of none between units), each folded on its own one level down;
 * then loops over whole units. */
static int fold_level(Fold *f, const Elem *seq, int n, int level, Elem *out)
{
    if (level == NLEVELS) {
        memcpy(out, seq, sizeof(Elem) * (size_t)n);
        return fold_all(f, out, n, false, false);
    }
    int m = 0, nseg = 0;
    int *start = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 2));
    bool *keyed = arena_alloc(&g_arena, sizeof(bool) * (size_t)(n + 2));
    for (int i = 0; i < n;) {
        int64_t u = unit_of(f, seq[i].first, level);
        int end = i + 1;
        if (u < 0) {            /* calls of none, up to the next unit */
            while (end < n && unit_of(f, seq[end].first, level) < 0) end++;
        } else {                /* the unit's, to its last call */
            for (int j = i + 1; j < n; j++) {
                int64_t v = unit_of(f, seq[j].first, level);
                if (v == u) end = j + 1;
                else if (v >= 0) break;
            }
        }
        int k = fold_level(f, seq + i, end - i, level + 1, out + m);
        for (int j = 0; j < k; j++) out[m + j].head = j == 0;
        keyed[nseg] = u >= 0, start[nseg++] = m;
        m += k;
        i = end;
    }
    start[nseg] = m;
    if (level == LEVEL_MB) {    /* the microbatches' recurring work as functions */
        Elem *calls = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(m + 1));
        m = outline(f, out, m, start, keyed, nseg, calls);
        memcpy(out, calls, sizeof(Elem) * (size_t)m);
    }
    return fold_all(f, out, m, true, true);
}

/* Folds calls [0, n) into loops, innermost first. */
void loops_fold(const CE *e, const Call *calls, int n, bool loops, Folded *out)
{
    memset(out, 0, sizeof *out);
    Fold f = {.e = e, .out = out};
    Elem *seq = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(n + 1));
    int64_t ints[64];
    signed char types[64];
    int total = 0;
    for (int i = 0; i < n; i++) total += loops_ints(e, &calls[i], ints, types, 64);
    int64_t *pool = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(total + 1));
    signed char *tpool = arena_alloc(&g_arena, (size_t)(total + 1));
    for (int i = 0, at = 0; i < n; i++) {
        int k = loops_ints(e, &calls[i], pool + at, tpool + at, 64);
        seq[i] = (Elem){.loop = false, .id = i, .sym = call_sym(&f.syms, &calls[i], &f.key), .ints = pool + at,
                        .types = tpool + at, .nints = k, .len = 1, .lines = 1, .first = i, .last = i};
        at += k;
    }
    /* each call's microbatch, chunk and layer: its op's (a wait's: the op it comes before) */
    int *mb = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1)), *layer = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    int *chunk = arena_alloc(&g_arena, sizeof(int) * (size_t)(n + 1));
    for (int i = n - 1, nmb = -1, nl = -1, nc = -1; i >= 0; i--) {
        const Op *o = calls[i].op >= 0 ? &e->s->ops[calls[i].op] : NULL;
        if (o && o->kind != OP_WAIT) nmb = o->mb, nl = o->layer, nc = o->chunk;
        mb[i] = o && o->kind != OP_WAIT ? o->mb : nmb;
        layer[i] = o && o->kind != OP_WAIT ? o->layer : nl;
        chunk[i] = o && o->kind != OP_WAIT ? o->chunk : nc;
    }
    f.mb = mb, f.layer = layer, f.chunk = chunk;
    int m = n;
    Elem *folded = seq;
    if (loops) {
        folded = arena_alloc(&g_arena, sizeof(Elem) * (size_t)(n + 1));
        m = fold_level(&f, seq, n, LEVEL_MB, folded);
    }
    out->top = folded, out->ntop = m;
    int nints = 0;
    for (int i = 0; i < m; i++) nints += folded[i].nints;
    int64_t *top = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(nints + 1));
    for (int i = 0, at = 0; i < m; at += folded[i].nints, i++)
        memcpy(top + at, folded[i].ints, sizeof(int64_t) * (size_t)folded[i].nints);
    Unfold u = {out, seq, n, 0};
    unfold(&u, folded, m, top);
    if (u.at != n) die("loops: the loops stand for %d calls of %d", u.at, n);
    free(f.syms.keys), free(f.syms.hash), free(f.syms.slot), free(f.key.p), free(f.dp);
}
