/* sema.c — resolves the AST (and -D overrides) against the schema table into a
 * Spec: type and range checks, defaults, derived values, and the semantic rules
 * that tie keys together.  Every rule reports with the arithmetic in its hint
 * and the checker goes on, so one run shows every independent error.
 *
 * Order of work: apply the items (then the overrides), fill plain defaults,
 * decide which enum-block keys apply, derive what is derivable (cluster
 * profile, model shape, dp, batch), then run the rules.
 */
#include "shardc.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The state of one sema_resolve call. */
typedef struct Sema {
    Spec *s;
    bool bad[SPEC_MAX_KEYS];        /* the key had an error: rules reading it stay quiet */
    int seq[SPEC_MAX_KEYS];         /* when it was set (0 = never): later wins          */
    int nseq;
    const SrcFile *main_file;       /* for errors that belong to no key                 */
    const char *blocks[16];         /* the top-level blocks, and where each first appears */
    Loc block_loc[16];
    bool block_seen[16];
    int nblocks;
    bool is_open[SPEC_MAX_KEYS];    /* the key is left open for shardc tune             */
    OpenKey *open;                  /* [SPEC_MAX_KEYS]: its set, where is_open          */
    bool defaults_done;             /* an open spec's defaults are filled already       */
} Sema;

/* ---- small helpers --------------------------------------------------------- */

/* The key at `path`; a missing one is a bug in this file, not in the spec. */
static const SchemaKey *key(const char *path)
{
    const SchemaKey *k = schema_find(path);
    if (!k) die("sema: no schema key '%s'", path);
    return k;
}

/* The index of Spec.set[] for a key path. */
static int kidx(const char *path) { return schema_index(key(path)); }
/* True if the spec (a file, an include or -D) gave the key. */
static bool is_set(Sema *cx, const char *path) { return cx->s->set[kidx(path)]; }
/* Marks a key as erroneous so the rules that read it stay quiet. */
static void mark_bad(Sema *cx, const char *path) { cx->bad[kidx(path)] = true; }
/* Where key k's value lives in the Spec. */
static void *field(Spec *s, const SchemaKey *k) { return (char *)s + k->offset; }
/* The value of an enum key, as its index. */
static int enum_value(const Spec *s, const SchemaKey *k) { return *(const int *)((const char *)s + k->offset); }

/* True if none of the NULL-terminated keys had an error. */
static bool ok(Sema *cx, ...)
{
    va_list ap;
    va_start(ap, cx);
    bool good = true;
    for (const char *p; (p = va_arg(ap, const char *)) != NULL;)
        if (cx->bad[kidx(p)]) good = false;
    va_end(ap);
    return good;
}

/* Line 1, column 1 of the top-level file: where file-wide errors point. */
static Loc file_start(Sema *cx)
{
    Loc l = {0};
    if (cx->main_file) {
        l.file = cx->main_file;
        l.line = l.col = l.len = 1;
        l.pos = cx->main_file->text;
    }
    return l;
}

/* The top-level block slot of a path ("parallel.tp" -> "parallel"). */
static int block_slot(Sema *cx, const char *path)
{
    size_t n = strcspn(path, ".");
    for (int i = 0; i < cx->nblocks; i++)
        if (strlen(cx->blocks[i]) == n && strncmp(cx->blocks[i], path, n) == 0) return i;
    return -1;
}

/* Where to point for a rule: the first of the keys that was set, else the
 * first key's block, else the start of the file. */
static Loc where(Sema *cx, ...)
{
    va_list ap;
    va_start(ap, cx);
    const char *first = NULL;
    for (const char *p; (p = va_arg(ap, const char *)) != NULL;) {
        if (!first) first = p;
        if (is_set(cx, p)) {
            va_end(ap);
            return cx->s->loc[kidx(p)];
        }
    }
    va_end(ap);
    int b = first ? block_slot(cx, first) : -1;
    if (b >= 0 && cx->block_seen[b]) return cx->block_loc[b];
    return file_start(cx);
}

/* a / b with up to two decimals, trailing zeros dropped: "8.33", "1.5". */
static const char *ratio(int64_t a, int64_t b)
{
    if (b == 0) return "inf";
    char buf[64];
    snprintf(buf, sizeof buf, "%.2f", (double)a / (double)b);
    char *e = buf + strlen(buf) - 1;
    while (*e == '0') *e-- = 0;
    if (*e == '.') *e = 0;
    return arena_strdup(&g_arena, buf);
}

/* The divisors of n, "1, 2, 4, 8" (the first 12, then "..."). */
static const char *divisors(int64_t n)
{
    char buf[256] = "";
    int count = 0;
    for (int64_t d = 1; d <= n && d <= 1000000; d++) {
        if (n % d) continue;
        size_t len = strlen(buf);
        if (count == 12) {
            snprintf(buf + len, sizeof buf - len, ", ...");
            break;
        }
        snprintf(buf + len, sizeof buf - len, "%s%lld", count ? ", " : "", (long long)d);
        count++;
    }
    return arena_strdup(&g_arena, buf);
}

/* The divisor of n closest to x (ties go up). */
static int64_t nearest_divisor(int64_t n, int64_t x)
{
    int64_t best = 1;
    for (int64_t d = 1; d <= n && d <= 1000000; d++)
        if (n % d == 0 && llabs(d - x) <= llabs(best - x)) best = d;
    return best;
}

/* "an identifier", "a byte size": what the user wrote, for type errors. */
static const char *kind_phrase(ValKind k)
{
    switch (k) {
    case V_INT: return "an integer";
    case V_FLOAT: return "a number with a fraction";
    case V_BYTES: return "a byte size";
    case V_BANDWIDTH: return "a bandwidth";
    case V_BOOL: return "on/off";
    case V_IDENT: return "an identifier";
    case V_STRING: return "a string";
    case V_LIST: return "a list";
    case V_TUPLE: return "a tuple";
    }
    return "a value";
}

/* "train { optimizer { lr = ... } }": how to write a key at its full path. */
static const char *nesting(const char *path)
{
    char out[256] = "";
    int depth = 0;
    const char *p = path;
    for (;;) {
        size_t n = strcspn(p, ".");
        size_t len = strlen(out);
        if (!p[n]) {
            snprintf(out + len, sizeof out - len, "%.*s = ...", (int)n, p);
            break;
        }
        snprintf(out + len, sizeof out - len, "%.*s { ", (int)n, p);
        depth++;
        p += n + 1;
    }
    while (depth--) strncat(out, " }", sizeof out - strlen(out) - 1);
    return arena_strdup(&g_arena, out);
}

/* ---- values: type checks, ranges, storing ---------------------------------- */

/* The hint that goes with a type error, when there is a likely fix. */
static void type_hint(const SchemaKey *k, const Value *v)
{
    if (k->type == T_BANDWIDTH && (v->kind == V_BYTES || v->kind == V_INT || v->kind == V_FLOAT))
        diag_hint("a bandwidth has a unit per second: 450GB/s (bytes) or 400Gb/s (bits)");
    else if (k->type == T_BOOL && v->kind == V_IDENT)
        diag_hint("write on or off (true and false also work)");
    else if (k->type == T_STRING && (v->kind == V_IDENT || v->kind == V_INT))
        diag_hint("put it in double quotes");
    else if (k->type == T_ENUM && v->kind == V_STRING && schema_enum_index(k, v->s) >= 0)
        diag_hint("write it without quotes: %s = %s", strrchr(k->path, '.') ? strrchr(k->path, '.') + 1 : k->path, v->s);
    else if (k->type == T_ENUM && v->kind == V_BOOL && schema_enum_index(k, "none") >= 0)
        diag_hint("write none to turn it off");
    else if (k->type == T_FLOAT2 && v->kind == V_LIST)
        diag_hint("a pair is written in parentheses: (0.9, 0.95)");
    else if (k->type == T_INTLIST && v->kind == V_INT)
        diag_hint("a list is written in brackets: [%lld]", (long long)v->i);
    else if (k->type == T_INT && v->kind == V_BYTES)
        diag_hint("%s is a plain count%s, not bytes: drop the unit", k->path,
                  *k->unit ? arena_printf(&g_arena, " of %s", k->unit) : "");
}

/* Reports a value of the wrong type for k. */
static void type_error(const SchemaKey *k, const Value *v)
{
    diag_error(v->loc, "%s: expected %s, got %s", k->path, schema_type_phrase(k), kind_phrase(v->kind));
    type_hint(k, v);
}

/* Checks x against k's range; reports and returns false outside it. */
static bool in_range(const SchemaKey *k, double x, const char *shown, Loc loc)
{
    if (k->min > k->max || (x >= k->min && x <= k->max)) return true;
    diag_error(loc, "%s = %s is out of range %s", k->path, shown, schema_fmt_range(k));
    if (*k->unit && !strstr(k->doc, k->unit)) diag_hint("%s, in %s", k->doc, k->unit);
    else diag_hint("%s", k->doc);
    return false;
}

/* A number as an int64 if it is integral and fits; false otherwise. */
static bool as_int(const Value *v, int64_t *out)
{
    if (v->kind == V_INT) {
        *out = v->i;
        return true;
    }
    if (v->kind == V_FLOAT && v->f == floor(v->f) && fabs(v->f) < 9.2e18) {
        *out = (int64_t)v->f;
        return true;
    }
    return false;
}

/* A number as a double; false if v is not a plain number. */
static bool as_double(const Value *v, double *out)
{
    if (v->kind == V_INT) *out = (double)v->i;
    else if (v->kind == V_FLOAT) *out = v->f;
    else return false;
    return true;
}

/* Converts v to k's type and stores it in spec; reports and returns false on
 * a wrong type, an unknown enum value or a value out of range. */
static bool store(Spec *s, const SchemaKey *k, const Value *v)
{
    void *dst = field(s, k);
    int64_t i;
    double d;
    switch (k->type) {
    case T_INT:
        if (v->kind == V_FLOAT && as_double(v, &d) && d != floor(d)) {
            diag_error(v->loc, "%s: expected an integer, got %s", k->path, schema_fmt_double(d));
            return false;
        }
        if (!as_int(v, &i)) break;
        if (!in_range(k, (double)i, arena_printf(&g_arena, "%lld", (long long)i), v->loc)) return false;
        *(int64_t *)dst = i;
        return true;
    case T_FLOAT:
        if (!as_double(v, &d)) break;
        if (!in_range(k, d, schema_fmt_double(d), v->loc)) return false;
        *(double *)dst = d;
        return true;
    case T_BOOL:
        if (v->kind != V_BOOL) break;
        *(bool *)dst = v->b;
        return true;
    case T_ENUM: {
        if (v->kind != V_IDENT) break;
        int idx = schema_enum_index(k, v->s);
        if (idx < 0) {
            const char *vals[32];
            int n = 0;
            for (const char *e; n < 32 && (e = schema_enum_name(k, n)) != NULL; n++) vals[n] = e;
            const char *sug = schema_suggest(v->s, vals, n);
            diag_error(v->loc, "unknown value '%s' for %s", v->s, k->path);
            if (sug) diag_hint("did you mean '%s'? (one of: %s)", sug, schema_enum_list(k, ", "));
            else diag_hint("%s is one of: %s", k->path, schema_enum_list(k, ", "));
            return false;
        }
        *(int *)dst = idx;
        return true;
    }
    case T_STRING:
        if (v->kind != V_STRING) break;
        *(const char **)dst = v->s;
        return true;
    case T_BYTES:
        if (v->kind != V_BYTES && !(v->kind == V_INT)) break;
        if (!in_range(k, (double)v->i, schema_fmt_bytes(v->i), v->loc)) return false;
        *(int64_t *)dst = v->i;
        return true;
    case T_BANDWIDTH:
        if (v->kind != V_BANDWIDTH) break;
        if (!in_range(k, v->f, schema_fmt_bandwidth(v->f), v->loc)) return false;
        *(double *)dst = v->f;
        return true;
    case T_INTLIST: {
        if (v->kind != V_LIST) break;
        IntList l = {arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(v->n ? v->n : 1)), v->n};
        bool good = true;
        for (int j = 0; j < v->n; j++) {
            const Value *e = v->elems[j];
            if (!as_int(e, &l.v[j])) {
                diag_error(e->loc, "%s: expected an integer in the list, got %s", k->path, kind_phrase(e->kind));
                good = false;
            } else if (!in_range(k, (double)l.v[j], arena_printf(&g_arena, "%lld", (long long)l.v[j]), e->loc)) {
                good = false;
            }
        }
        if (good) *(IntList *)dst = l;
        return good;
    }
    case T_FLOAT2: {
        if (v->kind != V_TUPLE) break;
        if (v->n != 2) {
            diag_error(v->loc, "%s: expected a pair of numbers, got %d of them", k->path, v->n);
            diag_hint("write (0.9, 0.95)");
            return false;
        }
        double pair[2];
        bool good = true;
        for (int j = 0; j < 2; j++) {
            if (!as_double(v->elems[j], &pair[j])) {
                diag_error(v->elems[j]->loc, "%s: expected a number, got %s", k->path, kind_phrase(v->elems[j]->kind));
                good = false;
            } else if (!in_range(k, pair[j], schema_fmt_double(pair[j]), v->elems[j]->loc)) {
                good = false;
            }
        }
        if (good) memcpy(dst, pair, sizeof pair);
        return good;
    }
    }
    type_error(k, v);
    return false;
}

/* Records that k was set at loc; a second setting in the same file is an
 * error (a later file, an include or -D, overrides silently). */
static bool record(Sema *cx, const SchemaKey *k, Loc loc)
{
    int i = schema_index(k);
    if (cx->s->set[i] && cx->s->loc[i].file == loc.file && loc.file) {
        diag_error(loc, "%s is set twice", k->path);
        if (k->type == T_ENUM && schema_is_block(k->path))
            diag_hint("to add keys to its block, repeat the block without the value: %s { ... }",
                      strrchr(k->path, '.') ? strrchr(k->path, '.') + 1 : k->path);
        diag_note(cx->s->loc[i], "first set here");
        return false;
    }
    cx->s->set[i] = true;
    cx->s->loc[i] = loc;
    cx->seq[i] = ++cx->nseq;
    cx->bad[i] = false;
    cx->is_open[i] = false;
    return true;
}

/* Applies `key = value` (or a label) for k; the key's loc is `at`. */
static void assign(Sema *cx, const SchemaKey *k, const Value *v, Loc at)
{
    if (!record(cx, k, at)) return;
    if (!store(cx->s, k, v)) {
        cx->bad[schema_index(k)] = true;
        cx->s->set[schema_index(k)] = false;
    }
}

/* ---- open keys: what shardc tune searches ------------------------------------ */

const char *const sema_tunable_keys[] = {
    "parallel.tp", "parallel.pp", "parallel.schedule", "parallel.virtual_stages", "parallel.sequence_parallel",
    "zero.stage", "train.micro_batch", "checkpointing.activations", "checkpointing.every", "offload.optimizer",
    "offload.params", "parallel.tp_comm_overlap", NULL,
};

/* True if key k may be left open (`auto` or a set of values). */
bool sema_tunable(const SchemaKey *k)
{
    for (int i = 0; sema_tunable_keys[i]; i++)
        if (strcmp(k->path, sema_tunable_keys[i]) == 0) return true;
    return false;
}

/* True if v leaves k open: `auto`, or a tuple of values for a tunable key. */
static bool is_open_value(const SchemaKey *k, const Value *v)
{
    if (v->kind == V_IDENT && strcmp(v->s, "auto") == 0) return k->type != T_ENUM || schema_enum_index(k, "auto") < 0;
    return v->kind == V_TUPLE && sema_tunable(k);
}

/* The value of key k in s (an int, an enum's index, a bool) as an open key's
 * values are kept: what store() left there. */
int64_t sema_value(const Spec *s, const SchemaKey *k)
{
    const void *f = (const char *)s + k->offset;
    switch (k->type) {
    case T_INT: return *(const int64_t *)f;
    case T_ENUM: return *(const int *)f;
    case T_BOOL: return *(const bool *)f;
    default: die("the tunable key %s is not an integer, an enum or a switch", k->path);
    }
}

/* Stores x (see stored) as k's value in s. */
static void put(Spec *s, const SchemaKey *k, int64_t x)
{
    void *f = (char *)s + k->offset;
    switch (k->type) {
    case T_INT: *(int64_t *)f = x; break;
    case T_ENUM: *(int *)f = (int)x; break;
    case T_BOOL: *(bool *)f = x != 0; break;
    default: die("the tunable key %s is not an integer, an enum or a switch", k->path);
    }
}

/* "(1, 2)", "(off, on)", "(none, cpu)": a set of values k could take. */
static const char *example_set(const SchemaKey *k)
{
    if (k->type == T_BOOL) return "(off, on)";
    if (k->type == T_ENUM) return arena_printf(&g_arena, "(%s, %s)", schema_enum_name(k, 0), schema_enum_name(k, 1));
    return k->min > 1 ? arena_printf(&g_arena, "(%g, %g)", k->min, k->min + 1) : "(1, 2)";
}

/* `key = auto` or `key = (a, b, ..)`: records k as open, each value checked
 * as if it had been given alone (type, range), none listed twice. */
static void open_key(Sema *cx, const SchemaKey *k, const Value *v, Loc at)
{
    int i = schema_index(k);
    if (!sema_tunable(k)) {
        char list[512] = "";
        for (int j = 0; sema_tunable_keys[j]; j++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "", sema_tunable_keys[j]);
        }
        diag_error(v->loc, "%s cannot be left open: shardc tune searches only the layout keys", k->path);
        diag_hint("give %s a value; the keys that take auto or a set such as (1, 2) are %s", k->path, list);
        cx->bad[i] = true;
        return;
    }
    if (!record(cx, k, at)) return;
    OpenKey *o = &cx->open[i];
    *o = (OpenKey){.key = i, .loc = v->loc, .key_loc = at, .any = v->kind == V_IDENT};
    bool good = true;
    if (!o->any) {
        if (v->n == 0) {
            diag_error(v->loc, "%s = (): an empty set of values to try", k->path);
            diag_hint("list the values to try, e.g. %s = %s, or let shardc tune choose: %s = auto", k->path,
                      example_set(k), k->path);
            good = false;
        }
        o->v = arena_alloc(&g_arena, sizeof(int64_t) * (size_t)(v->n ? v->n : 1));
        Spec *scratch = arena_alloc(&g_arena, sizeof *scratch);
        for (int j = 0; j < v->n; j++) {
            const Value *e = v->elems[j];
            if (!store(scratch, k, e)) {
                good = false;
                continue;
            }
            int64_t x = sema_value(scratch, k);
            bool twice = false;
            for (int q = 0; q < o->n; q++) twice |= o->v[q] == x;
            if (twice) {
                diag_error(e->loc, "%s: this value is listed twice in the set", k->path);
                diag_hint("list each value once");
                good = false;
            }
            o->v[o->n++] = x;
        }
    }
    cx->is_open[i] = good;
    if (!good) {
        cx->bad[i] = true;
        cx->s->set[i] = false;
    }
}

/* ---- walking the items ----------------------------------------------------- */

static void walk(Sema *cx, const Item *items, const char *prefix);

/* The reply to a name that is not a key or block under prefix. */
static void unknown(Sema *cx, const Item *it, const char *prefix)
{
    const char *cands[64];
    int n = schema_children(prefix, cands, 64);
    const char *sug = schema_suggest(it->key, cands, n);
    if (!*prefix) diag_error(it->loc, "unknown %s '%s'", it->kind == I_BLOCK ? "block" : "key", it->key);
    else diag_error(it->loc, "unknown key '%s' in block '%s'", it->key, prefix);
    if (sug) {
        diag_hint("did you mean '%s'?", sug);
        /* the misspelt key was meant: do not also call it missing */
        const SchemaKey *meant = schema_find(*prefix ? arena_printf(&g_arena, "%s.%s", prefix, sug) : sug);
        if (meant) cx->bad[schema_index(meant)] = true;
        return;
    }
    /* the right name in the wrong block: say where it lives */
    char homes[512] = "";
    int nhomes = 0;
    for (int i = 0; i < schema_nkeys; i++) {
        const char *p = schema_keys[i].path, *last = strrchr(p, '.');
        if (last && strcmp(last + 1, it->key) == 0 && nhomes < 3) {
            size_t len = strlen(homes);
            snprintf(homes + len, sizeof homes - len, "%s%s", nhomes ? " or " : "", nesting(p));
            nhomes++;
        }
    }
    if (nhomes) {
        diag_hint("'%s' belongs in another block: %s", it->key, homes);
        return;
    }
    char list[512] = "";
    for (int i = 0; i < n; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, cands[i], sizeof list - strlen(list) - 1);
    }
    diag_hint("%s %s: %s", *prefix ? prefix : "the blocks", *prefix ? "has" : "are", list);
}

/* True if k is an enum with keys of its own (`optimizer = adamw { .. }`). */
static bool carries_block(const SchemaKey *k)
{
    return k->type == T_ENUM && schema_is_block(k->path);
}

/* Notes where a top-level block first appears (for rules about its keys). */
static void note_block(Sema *cx, const char *name, Loc loc)
{
    int b = block_slot(cx, name);
    if (b >= 0 && !cx->block_seen[b]) {
        cx->block_seen[b] = true;
        cx->block_loc[b] = loc;
    }
}

/* `extern "name" { .. }`: the string after the value names the op. */
static void assign_arg(Sema *cx, const SchemaKey *k, const Value *v)
{
    assign(cx, key("model.activation.name"), v->arg, v->arg->loc);
}

/* Applies one item found under prefix ("" at the top level). */
static void walk_item(Sema *cx, const Item *it, const char *prefix)
{
    const char *path = *prefix ? arena_printf(&g_arena, "%s.%s", prefix, it->key) : it->key;
    const SchemaKey *k = schema_find(path);
    if (!*prefix && (k || schema_is_block(path))) note_block(cx, path, it->loc);
    if (it->kind == I_BLOCK) {
        if (k && carries_block(k)) {
            if (it->label) {
                Value lv = {.kind = V_IDENT, .loc = it->label_loc, .s = it->label};
                assign(cx, k, &lv, it->loc);
            }
            walk(cx, it->body, path);
        } else if (k) {
            diag_error(it->loc, "'%s' is a single value, not a block", it->key);
            diag_hint("write %s = ...", it->key);
        } else if (schema_is_block(path)) {
            if (it->label) {
                diag_error(it->label_loc, "block '%s' takes no label", path);
                diag_hint("write %s { ... }", it->key);
            }
            walk(cx, it->body, path);
        } else {
            unknown(cx, it, prefix);
        }
        return;
    }
    if (!k) {
        if (schema_is_block(path)) {
            diag_error(it->loc, "'%s' is a block, not a single value", path);
            diag_hint("write %s { ... }", it->key);
        } else {
            unknown(cx, it, prefix);
        }
        return;
    }
    const Value *v = it->value;
    if (v->arg && strcmp(k->path, "model.activation") != 0) {
        diag_error(v->loc, "%s cannot be extern: only a model's activation can be a user-defined op", path);
        diag_hint("model gpt { activation = extern \"sqrelu\" { header = \"ext/sqrelu.h\" } }");
        cx->bad[schema_index(k)] = true;
        return;
    }
    if (is_open_value(k, v)) open_key(cx, k, v, it->loc);
    else assign(cx, k, v, it->loc);
    if (v->arg) assign_arg(cx, k, v);
    if (v->has_block) {
        if (carries_block(k)) walk(cx, v->block, path);
        else {
            diag_error(v->loc, "%s takes no block", path);
            diag_hint("only a value with keys of its own carries a block, e.g. optimizer = adamw { lr = 6e-4 }");
        }
    }
}

/* Applies a list of items found under prefix. */
static void walk(Sema *cx, const Item *items, const char *prefix)
{
    for (const Item *it = items; it; it = it->next) walk_item(cx, it, prefix);
}

/* Turns -D a.b.c=VALUE into the spec text `a { b { c = VALUE } }` and applies
 * it; its diagnostics read `-D:1:N`. */
static void apply_override(Sema *cx, const Override *o)
{
    const char *p = o->path;
    for (const char *q = p; *q; q++) {
        bool okc = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_' ||
                   (*q == '.' && q != p && q[1] && q[1] != '.');
        if (!okc) {
            diag_plain("-D %s=%s: '%s' is not a key path (write it like train.optimizer.lr)", o->path, o->text, o->path);
            return;
        }
    }
    if (!o->text[strspn(o->text, " \t")]) {
        diag_plain("-D %s= has no value (write it like -D %s=4)", o->path, o->path);
        return;
    }
    char *text = arena_strdup(&g_arena, "");
    int depth = 0;
    for (;;) {
        size_t n = strcspn(p, ".");
        if (!p[n]) {
            text = arena_printf(&g_arena, "%s%.*s = %s", text, (int)n, p, o->text);
            break;
        }
        text = arena_printf(&g_arena, "%s%.*s { ", text, (int)n, p);
        depth++;
        p += n + 1;
    }
    while (depth--) text = arena_printf(&g_arena, "%s }", text);
    int before = diag_errors;
    Item *items = spec_parse_text("-D", text, strlen(text));
    if (diag_errors != before) return;
    walk(cx, items, "");
}

/* ---- defaults and applicability ---------------------------------------------- */

/* Stores k's default (its spec text, parsed like user input). */
static void set_default(Spec *s, const SchemaKey *k)
{
    if (strcmp(k->def, "derived") == 0 || strcmp(k->def, "required") == 0) return;
    char *text = arena_printf(&g_arena, "x = %s", k->def);
    int before = diag_errors;
    Item *it = spec_parse_text("<default>", text, strlen(text));
    if (diag_errors != before || !it || it->kind != I_ASSIGN || !store(s, k, it->value))
        die("the default of %s (%s) does not parse as its type", k->path, k->def);
}

/* The first condition on the way up from k that does not hold: *cond gets the
 * key whose `when` fails, and the governor it tests is returned (NULL: applies). */
static const SchemaKey *blocker(const Spec *s, const SchemaKey *k, const SchemaKey **cond)
{
    for (const SchemaKey *c = k; c; c = schema_parent(c)) {
        const SchemaKey *g = schema_governor(c);
        if (g && !schema_when_holds(c, enum_value(s, g))) {
            *cond = c;
            return g;
        }
    }
    return NULL;
}

/* True if k applies under the spec's enum values (canon.c prints only these). */
bool sema_applies(const Spec *s, const SchemaKey *k)
{
    const SchemaKey *cond;
    return blocker(s, k, &cond) == NULL;
}

/* "cpu or nvme" from "cpu|nvme". */
static const char *or_list(const char *vals)
{
    char out[256] = "";
    const char *p = vals;
    while (*p) {
        size_t n = strcspn(p, "|");
        bool last = !p[n];
        size_t len = strlen(out);
        snprintf(out + len, sizeof out - len, "%s%.*s", !len ? "" : last ? " or " : ", ", (int)n, p);
        p += n + !last;
    }
    return arena_strdup(&g_arena, out);
}

/* A key set for an enum value it does not belong to: an error, unless an
 * earlier file set it and a later file (or -D) changed the enum, in which
 * case the later choice wins and the key is dropped. */
static void check_applies(Sema *cx)
{
    Spec *s = cx->s;
    /* decide on the values as given, then drop: a drop resets a key to its
     * default, which must not change the verdict on the keys under it */
    bool drop[SPEC_MAX_KEYS] = {false};
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i], *cond;
        if (!s->set[i]) continue;
        const SchemaKey *g = blocker(s, k, &cond);
        if (!g) continue;
        drop[i] = true;
        int gi = schema_index(g);
        bool overridden = s->set[gi] && cx->seq[gi] > cx->seq[i] && s->loc[gi].file != s->loc[i].file;
        /* a key inside an enum's block that was itself given in vain: one error, on the enum */
        bool covered = cond != k && s->set[schema_index(cond)];
        if (overridden || covered) continue;
        const char *now = schema_enum_name(g, enum_value(s, g));
        const char *vals = schema_when_values(cond);
        diag_error(s->loc[i], "%s applies only when %s is %s, but it is %s", k->path, g->path, or_list(vals), now);
        if (strcmp(g->path, "precision.dtype") == 0 && strcmp(now, "bf16") == 0)
            diag_hint("fp16 and bf16 are exclusive: loss scaling belongs to fp16; bf16 has fp32's exponent "
                      "range and needs none");
        else diag_hint("remove it, or set %s = %.*s", g->path, (int)strcspn(vals, "|"), vals);
        if (s->set[gi]) diag_note(s->loc[gi], "%s is set to %s here", g->path, now);
    }
    for (int i = 0; i < schema_nkeys; i++) {
        if (!drop[i]) continue;
        s->set[i] = false;
        set_default(s, &schema_keys[i]);
    }
}

/* ---- derived values -------------------------------------------------------------- */

/* Reads the profile cluster.profile names (a relative path from the folder
 * of the file that set it; from the working directory for -D) and checks its
 * backend against cluster.gpu: a CPU profile makes the default gpu cpu. */
static void load_profile(Sema *cx)
{
    Spec *s = cx->s;
    s->cluster.profile = NULL;
    const char *p = s->cluster.profile_path;
    if (!p || !*p) return;
    Loc loc = s->loc[kidx("cluster.profile")];
    const char *path = p, *from = loc.file ? loc.file->path : NULL;
    if (p[0] != '/' && from && strcmp(from, "-D") != 0 && strchr(from, '/'))
        path = arena_printf(&g_arena, "%.*s/%s", (int)(strrchr(from, '/') - from), from, p);
    const Profile *pf = profile_load(path, loc);
    if (!pf) {
        mark_bad(cx, "cluster.profile");
        return;
    }
    bool cpu = pf->backend == PROFILE_CPU;
    if (!is_set(cx, "cluster.gpu")) {
        if (cpu) s->cluster.gpu = GPU_CPU;
    } else if (cpu != (s->cluster.gpu == GPU_CPU)) {
        diag_error(s->loc[kidx("cluster.gpu")], "cluster.gpu = %s, but the profile %s measured the %s backend",
                   schema_enum_name(key("cluster.gpu"), s->cluster.gpu), path, cpu ? "CPU" : "CUDA");
        diag_hint(cpu ? "a CPU profile plans cluster.gpu = cpu: remove the key or set it so"
                      : "a CUDA profile plans a GPU: set cluster.gpu to the GPU it was measured on");
        diag_note(loc, "the profile named here");
        return;
    }
    s->cluster.profile = pf;
}

/* Fills the cluster keys the user left out from the gpu and network profiles,
 * then from the machine's measured profile when the spec names one. */
static void derive_cluster(Sema *cx)
{
    Spec *s = cx->s;
    load_profile(cx);
    const GpuInfo *g = &cluster_gpus[s->cluster.gpu];
    if (!is_set(cx, "cluster.gpu_memory")) s->cluster.gpu_memory = g->memory;
    if (!is_set(cx, "cluster.bf16_tflops")) s->cluster.bf16_tflops = g->bf16_tflops;
    if (!is_set(cx, "cluster.fp32_tflops")) s->cluster.fp32_tflops = g->fp32_tflops;
    if (!is_set(cx, "cluster.hbm_bandwidth")) s->cluster.hbm_bandwidth = g->hbm_bandwidth;
    if (!is_set(cx, "cluster.intra_node")) s->cluster.intra_node = g->nvlink;
    if (!is_set(cx, "cluster.pcie")) s->cluster.pcie = g->pcie;
    if (!is_set(cx, "cluster.network"))
        s->cluster.network = s->cluster.gpu == GPU_A100_40GB || s->cluster.gpu == GPU_A100_80GB ? NET_IB200
                             : s->cluster.gpu == GPU_CPU                                      ? NET_ETH100
                                                                                              : NET_IB400;
    const NetInfo *n = &cluster_nets[s->cluster.network];
    if (!is_set(cx, "cluster.inter_node")) s->cluster.inter_node = n->bandwidth;
    if (!is_set(cx, "cluster.network_latency_us")) s->cluster.network_latency_us = n->latency_us;
    s->cluster.mfu_bf16_tflops = s->cluster.bf16_tflops, s->cluster.mfu_fp32_tflops = s->cluster.fp32_tflops;
    if (!s->cluster.profile) return;
    ProfCluster pc = profile_cluster(s->cluster.profile, s->cluster.gpu, s->cluster.gpus_per_node);
    struct { const char *path; double *f; double v; } fill[] = {
        {"cluster.fp32_tflops", &s->cluster.fp32_tflops, pc.fp32_tflops},
        {"cluster.bf16_tflops", &s->cluster.bf16_tflops, pc.bf16_tflops},
        {"cluster.hbm_bandwidth", &s->cluster.hbm_bandwidth, pc.hbm_bandwidth},
        {"cluster.host_bandwidth", &s->cluster.host_bandwidth, pc.host_bandwidth},
        {"cluster.pcie", &s->cluster.pcie, pc.pcie},
        {"cluster.nvme", &s->cluster.nvme, pc.nvme},
        {"cluster.intra_node", &s->cluster.intra_node, pc.intra_node},
        {"cluster.inter_node", &s->cluster.inter_node, pc.inter_node},
        {"cluster.network_latency_us", &s->cluster.network_latency_us, pc.network_latency_us},
    };
    for (size_t i = 0; i < sizeof fill / sizeof fill[0]; i++)
        if (!is_set(cx, fill[i].path) && fill[i].v > 0) *fill[i].f = fill[i].v;
    /* A CPU has no data sheet: its MFU is against the profile's best rates.  A
     * GPU's profile fits a peak that makes the shape curve meet its largest
     * measured GEMM (1.19 PFLOP/s for an H200's 866 TFLOP/s): for pricing only. */
    if (s->cluster.gpu == GPU_CPU)
        s->cluster.mfu_bf16_tflops = s->cluster.bf16_tflops, s->cluster.mfu_fp32_tflops = s->cluster.fp32_tflops;
}

/* Family-dependent model defaults: kv_heads, ffn_hidden, bias, tied embeddings. */
static void derive_model(Sema *cx)
{
    Spec *s = cx->s;
    bool llama = s->model.family == FAM_LLAMA;
    if (!is_set(cx, "model.kv_heads")) {
        s->model.kv_heads = s->model.heads;
        if (cx->bad[kidx("model.heads")]) mark_bad(cx, "model.kv_heads");
    }
    if (!is_set(cx, "model.ffn_hidden")) {
        int64_t h = s->model.hidden;
        /* Llama's rule: 2/3 of 4h rounded up to a multiple of 256 (7B: 11008) */
        s->model.ffn_hidden = llama ? 256 * ((8 * h + 767) / 768) : 4 * h;
        if (cx->bad[kidx("model.hidden")] || cx->bad[kidx("model")]) mark_bad(cx, "model.ffn_hidden");
    }
    if (!is_set(cx, "model.bias")) s->model.bias = !llama;
    if (!is_set(cx, "model.tie_embeddings")) s->model.tie_embeddings = !llama;
}

/* dp from the cluster when it was left out; checks tp·pp·dp against the ranks. */
static void derive_dp(Sema *cx)
{
    Spec *s = cx->s;
    int64_t tp = s->parallel.tp, pp = s->parallel.pp;
    int64_t nodes = s->cluster.nodes, gpn = s->cluster.gpus_per_node, ranks = nodes * gpn;
    if (!ok(cx, "parallel.tp", "parallel.pp", "cluster.nodes", "cluster.gpus_per_node", NULL)) {
        if (!is_set(cx, "parallel.dp")) s->parallel.dp = 1;
        mark_bad(cx, "parallel.dp");
        return;
    }
    if (is_set(cx, "parallel.dp")) {
        int64_t dp = s->parallel.dp;
        if (tp * pp * dp == ranks) return;
        diag_error(where(cx, "parallel.dp", NULL),
                   "tp·pp·dp = %lld·%lld·%lld = %lld ranks, but the cluster has %lld node%s × %lld GPUs = %lld",
                   (long long)tp, (long long)pp, (long long)dp, (long long)(tp * pp * dp), (long long)nodes,
                   nodes == 1 ? "" : "s", (long long)gpn, (long long)ranks);
        if (ranks % (tp * pp) == 0)
            diag_hint("leave dp out and it is derived: dp = %lld / (%lld·%lld) = %lld%s", (long long)ranks,
                      (long long)tp, (long long)pp, (long long)(ranks / (tp * pp)),
                      (tp * pp * dp) % gpn == 0 ? arena_printf(&g_arena, "; or use cluster.nodes = %lld",
                                                               (long long)(tp * pp * dp / gpn))
                                                : "");
        else if ((tp * pp * dp) % gpn == 0)
            diag_hint("use cluster.nodes = %lld for %lld ranks", (long long)(tp * pp * dp / gpn), (long long)(tp * pp * dp));
        else diag_hint("tp·pp·dp must equal nodes·gpus_per_node");
        mark_bad(cx, "parallel.dp");
        return;
    }
    if (ranks % (tp * pp) != 0) {
        diag_error(where(cx, "parallel.tp", "parallel.pp", NULL),
                   "tp·pp = %lld·%lld = %lld does not divide the cluster's %lld node%s × %lld GPUs = %lld", (long long)tp,
                   (long long)pp, (long long)(tp * pp), (long long)nodes, nodes == 1 ? "" : "s", (long long)gpn,
                   (long long)ranks);
        diag_hint("dp = %lld / %lld = %s is not whole: choose tp·pp among the divisors of %lld (%s)", (long long)ranks,
                  (long long)(tp * pp), ratio(ranks, tp * pp), (long long)ranks, divisors(ranks));
        s->parallel.dp = 1;
        mark_bad(cx, "parallel.dp");
        return;
    }
    s->parallel.dp = ranks / (tp * pp);
}

/* "dp = 8" or "dp = 8 (derived)": the batch messages say where dp came from. */
static const char *dp_text(Sema *cx)
{
    return arena_printf(&g_arena, "%lld%s", (long long)cx->s->parallel.dp, is_set(cx, "parallel.dp") ? "" : " (derived)");
}

/* Batch sizes as DeepSpeed: global = micro · accum · dp, any two give the third. */
static void derive_batch(Sema *cx)
{
    Spec *s = cx->s;
    bool gs = is_set(cx, "train.global_batch"), ms = is_set(cx, "train.micro_batch");
    bool as = is_set(cx, "train.grad_accum"), mbs = is_set(cx, "parallel.microbatches");
    const char *batch[] = {"train.global_batch", "train.micro_batch", "train.grad_accum", "parallel.microbatches"};
    if (!ok(cx, "parallel.dp", batch[0], batch[1], batch[2], batch[3], NULL)) {
        for (int i = 0; i < 4; i++) mark_bad(cx, batch[i]);
        if (!gs) s->train.global_batch = 1;
        if (!ms) s->train.micro_batch = 1;
        if (!as) s->train.grad_accum = 1;
        if (!mbs) s->parallel.microbatches = 1;
        return;
    }
    if (as && mbs && s->train.grad_accum != s->parallel.microbatches) {
        diag_error(where(cx, "parallel.microbatches", NULL), "parallel.microbatches = %lld but train.grad_accum = %lld",
                   (long long)s->parallel.microbatches, (long long)s->train.grad_accum);
        diag_hint("they are the same number (microbatches per step per pipeline): give one of them");
        diag_note(s->loc[kidx("train.grad_accum")], "train.grad_accum is set here");
        for (int i = 0; i < 4; i++) mark_bad(cx, batch[i]);
        if (!gs) s->train.global_batch = s->train.micro_batch * s->train.grad_accum;
        if (!ms) s->train.micro_batch = 1;
        return;
    }
    if (!as && mbs) {
        s->train.grad_accum = s->parallel.microbatches;
        as = true;
    }
    int64_t dp = s->parallel.dp, g = s->train.global_batch, m = s->train.micro_batch, a = s->train.grad_accum;
    bool bad = false;
    if (gs && ms && as) {
        int64_t prod;
        if (__builtin_mul_overflow(m, a, &prod) || __builtin_mul_overflow(prod, dp, &prod)) prod = -1;
        if (g != prod) {
            diag_error(where(cx, "train.global_batch", NULL),
                       "global_batch = %lld, but micro_batch · grad_accum · dp = %lld · %lld · %lld = %lld", (long long)g,
                       (long long)m, (long long)a, (long long)dp, (long long)prod);
            diag_hint("give any two of global_batch, micro_batch and grad_accum, and the third is derived");
            bad = true;
        }
    } else if (gs && (ms || as)) {
        int64_t known = ms ? m : a;
        const char *kn = ms ? "micro_batch" : "grad_accum", *other = ms ? "grad_accum" : "micro_batch";
        if (g % (known * dp) != 0) {
            int64_t unit = known * dp, lo = g / unit * unit, hi = lo + unit;
            diag_error(where(cx, "train.global_batch", NULL), "global_batch = %lld is not divisible by %s · dp = %lld · %lld = %lld",
                       (long long)g, kn, (long long)known, (long long)dp, (long long)unit);
            diag_hint("%s = %lld / %lld = %s must be whole: try global_batch = %s%lld", other, (long long)g,
                      (long long)unit, ratio(g, unit), lo > 0 ? arena_printf(&g_arena, "%lld or ", (long long)lo) : "",
                      (long long)hi);
            bad = true;
        } else if (ms) a = g / (m * dp);
        else m = g / (a * dp);
    } else if (gs) {
        a = 1;
        if (g % dp != 0) {
            int64_t lo = g / dp * dp, hi = lo + dp;
            diag_error(where(cx, "train.global_batch", NULL), "global_batch = %lld is not divisible by dp = %s", (long long)g,
                       dp_text(cx));
            diag_hint("micro_batch = %lld / %lld = %s must be whole: try global_batch = %s%lld", (long long)g,
                      (long long)dp, ratio(g, dp), lo > 0 ? arena_printf(&g_arena, "%lld or ", (long long)lo) : "",
                      (long long)hi);
            bad = true;
        } else m = g / dp;
    } else {
        if (!ms) m = 1;
        if (!as) a = 1;
        int64_t prod;
        if (__builtin_mul_overflow(m, a, &prod) || __builtin_mul_overflow(prod, dp, &prod) ||
            prod > (int64_t)key("train.global_batch")->max) {
            diag_error(where(cx, "train.micro_batch", "train.grad_accum", NULL),
                       "global_batch = micro_batch · grad_accum · dp = %lld · %lld · %lld is too large", (long long)m,
                       (long long)a, (long long)dp);
            diag_hint("the largest global batch is %s sequences", schema_fmt_range(key("train.global_batch")));
            bad = true;
        } else g = prod;
    }
    if (bad) {
        for (int i = 0; i < 4; i++) mark_bad(cx, batch[i]);
        if (!ms) m = 1;
        if (!as) a = 1;
        if (!gs) g = m * a;
    }
    s->train.global_batch = g;
    s->train.micro_batch = m;
    s->train.grad_accum = a;
    s->parallel.microbatches = a;
}

/* The remaining derived keys: virtual stages, overlap, reduction dtype, decay. */
static void derive_rest(Sema *cx)
{
    Spec *s = cx->s;
    if (!is_set(cx, "parallel.virtual_stages"))
        s->parallel.virtual_stages = s->parallel.schedule == SCHED_INTERLEAVED ? 2 : 1;
    if (!is_set(cx, "zero.overlap_comm")) s->zero.overlap_comm = s->zero.stage == 3;
    if (!is_set(cx, "precision.grad_reduce")) s->precision.grad_reduce = s->precision.dtype;
    if (!is_set(cx, "train.lr_schedule.decay_steps")) s->train.decay_steps = s->train.steps;
    if (!is_set(cx, "model.activation")) s->model.activation = s->model.family == FAM_LLAMA ? ACT_SWIGLU : ACT_GELU;
}

/* ---- the rules ------------------------------------------------------------------ */

/* The model block: present, complete, and its shapes consistent. */
static bool rules_model_present(Sema *cx)
{
    Spec *s = cx->s;
    bool any = false;
    for (int i = 0; i < schema_nkeys; i++)
        if (strncmp(schema_keys[i].path, "model", 5) == 0 && s->set[i]) any = true;
    int b = block_slot(cx, "model");
    if (!any && !(b >= 0 && cx->block_seen[b]) && !cx->bad[kidx("model")]) {
        diag_error(file_start(cx), "no model block");
        diag_hint("a spec needs at least: model gpt { layers = 12  hidden = 768  heads = 12  vocab = 50257  seq_len = 1024 }");
        return false;
    }
    if (!is_set(cx, "model") && !cx->bad[kidx("model")]) {
        diag_error(where(cx, "model", NULL), "the model block does not say the family");
        diag_hint("write model gpt { ... } or model llama { ... }");
        mark_bad(cx, "model");
    }
    const char *req[] = {"model.layers", "model.hidden", "model.heads", "model.vocab", "model.seq_len"};
    const char *eg[] = {"layers = 12", "hidden = 768", "heads = 12", "vocab = 50257", "seq_len = 1024"};
    char missing[128] = "", example[160] = "";
    for (int i = 0; i < 5; i++) {
        if (is_set(cx, req[i]) || cx->bad[kidx(req[i])]) continue;
        mark_bad(cx, req[i]);
        size_t ml = strlen(missing), el = strlen(example);
        snprintf(missing + ml, sizeof missing - ml, "%s%s", ml ? ", " : "", req[i] + 6);
        snprintf(example + el, sizeof example - el, "%s%s", el ? "  " : "", eg[i]);
    }
    if (*missing) {
        diag_error(where(cx, "model", NULL), "the model block does not give %s", missing);
        diag_hint("add, for example: %s", example);
    }
    return true;
}

/* Shapes of the model: heads, kv_heads, text data's vocabulary, extern ops. */
static void rules_model(Sema *cx)
{
    Spec *s = cx->s;
    int64_t h = s->model.hidden, a = s->model.heads, kv = s->model.kv_heads;
    if (ok(cx, "model.hidden", "model.heads", NULL) && h % a != 0) {
        diag_error(where(cx, "model.heads", "model.hidden", NULL), "hidden = %lld is not divisible by heads = %lld",
                   (long long)h, (long long)a);
        diag_hint("each head gets hidden/heads = %lld / %lld = %s dimensions, which must be whole: e.g. heads = %lld or "
                  "hidden = %lld",
                  (long long)h, (long long)a, ratio(h, a), (long long)nearest_divisor(h, a), (long long)((h / a + 1) * a));
    }
    if (ok(cx, "model.heads", "model.kv_heads", NULL) && a % kv != 0) {
        diag_error(where(cx, "model.kv_heads", "model.heads", NULL), "heads = %lld is not a multiple of kv_heads = %lld",
                   (long long)a, (long long)kv);
        diag_hint("each key/value head serves heads/kv_heads = %lld / %lld = %s query heads, which must be whole: "
                  "kv_heads must divide %lld (%s)",
                  (long long)a, (long long)kv, ratio(a, kv), (long long)a, divisors(a));
    }
    if (s->data.format == DATA_TEXT && ok(cx, "model.vocab", NULL) && s->model.vocab < 256) {
        diag_error(where(cx, "model.vocab", "data.format", NULL),
                   "data.format = text reads bytes (256 symbols), but vocab = %lld", (long long)s->model.vocab);
        diag_hint("set model.vocab = 256 (or more)");
    }
    if (s->model.activation == ACT_EXTERN) {
        if (!*s->model.extern_name) {
            diag_error(where(cx, "model.activation", NULL), "activation = extern needs the op's name");
            diag_hint("activation = extern \"sqrelu\" { header = \"ext/sqrelu.h\"  cpu = \"ext/sqrelu.c\" }");
        }
        if (!*s->model.extern_header) {
            diag_error(where(cx, "model.activation", NULL), "activation = extern needs the header that declares the op");
            diag_hint("add header = \"ext/NAME.h\" to its block");
        }
    }
}

/* The parallel layout: what tp splits, what pp needs, the schedules. */
static void rules_parallel(Sema *cx)
{
    Spec *s = cx->s;
    int64_t tp = s->parallel.tp, pp = s->parallel.pp, v = s->parallel.virtual_stages;
    int64_t a = s->model.heads, kv = s->model.kv_heads, L = s->model.layers, gpn = s->cluster.gpus_per_node;
    Loc tploc = where(cx, "parallel.tp", NULL);
    if (ok(cx, "model.heads", "parallel.tp", NULL) && a % tp != 0) {
        diag_error(tploc, "heads = %lld is not divisible by tp = %lld", (long long)a, (long long)tp);
        diag_hint("each tensor-parallel rank computes heads/tp = %lld / %lld = %s whole heads: tp must divide %lld (%s)",
                  (long long)a, (long long)tp, ratio(a, tp), (long long)a, divisors(a));
    }
    /* with kv_heads = heads this is the rule above; one message is enough */
    if (ok(cx, "model.kv_heads", "parallel.tp", NULL) && kv != a && kv % tp != 0 && tp % kv != 0) {
        diag_error(where(cx, "model.kv_heads", "parallel.tp", NULL), "kv_heads = %lld does not fit tp = %lld",
                   (long long)kv, (long long)tp);
        diag_hint("shardc needs kv_heads %% tp == 0 (each rank holds whole key/value heads) or tp %% kv_heads == 0 "
                  "(each key/value head is replicated on tp/kv_heads ranks, as Megatron does); here %lld %% %lld = %lld "
                  "and %lld %% %lld = %lld",
                  (long long)kv, (long long)tp, (long long)(kv % tp), (long long)tp, (long long)kv, (long long)(tp % kv));
    }
    if (ok(cx, "model.ffn_hidden", "parallel.tp", NULL) && s->model.ffn_hidden % tp != 0) {
        diag_error(where(cx, "model.ffn_hidden", "parallel.tp", NULL), "ffn_hidden = %lld%s is not divisible by tp = %lld",
                   (long long)s->model.ffn_hidden, is_set(cx, "model.ffn_hidden") ? "" : " (derived)", (long long)tp);
        diag_hint("the MLP is split column-wise over tp: %lld / %lld = %s", (long long)s->model.ffn_hidden, (long long)tp,
                  ratio(s->model.ffn_hidden, tp));
    }
    if (ok(cx, "model.layers", "parallel.pp", NULL) && L < pp) {
        diag_error(where(cx, "parallel.pp", NULL), "pp = %lld pipeline stages, but the model has only layers = %lld",
                   (long long)pp, (long long)L);
        diag_hint("every stage needs at least one layer: pp <= %lld", (long long)L);
    }
    if (ok(cx, "parallel.tp", "cluster.gpus_per_node", NULL)) {
        if (tp > gpn)
            diag_warning(tploc,
                         "tp = %lld spans %lld nodes (gpus_per_node = %lld): its all-reduces cross the network "
                         "(%s instead of %s)",
                         (long long)tp, (long long)((tp + gpn - 1) / gpn), (long long)gpn,
                         schema_fmt_bandwidth(s->cluster.inter_node), schema_fmt_bandwidth(s->cluster.intra_node));
        else if (gpn % tp != 0)
            diag_warning(tploc, "tp = %lld does not divide gpus_per_node = %lld: some tensor-parallel groups straddle two nodes",
                         (long long)tp, (long long)gpn);
    }
    if (s->parallel.sequence_parallel) {
        if (tp == 1) {
            diag_warning(where(cx, "parallel.sequence_parallel", NULL), "sequence_parallel has no effect with tp = 1; turned off");
            s->parallel.sequence_parallel = false;
        } else if (ok(cx, "model.seq_len", "parallel.tp", NULL) && s->model.seq_len % tp != 0) {
            diag_error(where(cx, "parallel.sequence_parallel", NULL),
                       "sequence_parallel splits the sequence over tp, but seq_len = %lld is not divisible by tp = %lld",
                       (long long)s->model.seq_len, (long long)tp);
            diag_hint("%lld / %lld = %s", (long long)s->model.seq_len, (long long)tp, ratio(s->model.seq_len, tp));
        }
    }
    if (s->parallel.tp_comm_overlap == TPO_FULL && tp > 1) {
        /* each chunk is a block of token rows: the all-reduce of every chunk sums exactly
           what the unchunked one sums, so the chunks must tile the microbatch's tokens */
        /* under sequence parallelism a chunk is a block of each rank's tokens */
        bool sp = s->parallel.sequence_parallel;
        int64_t k = s->parallel.tp_overlap_chunks, n = s->train.micro_batch * s->model.seq_len / (sp ? tp : 1);
        if (ok(cx, "parallel.tp_overlap_chunks", "train.micro_batch", "model.seq_len", NULL) && n > 0 && n % k != 0) {
            diag_error(where(cx, "parallel.tp_overlap_chunks", NULL),
                       "tp_overlap_chunks = %lld does not divide the %lld tokens of a microbatch%s", (long long)k,
                       (long long)n, sp ? " on one tp rank (micro_batch·seq_len / tp, sequence parallel)"
                                        : " (micro_batch·seq_len)");
            diag_hint("each chunk is n / k token rows: k must divide %lld (%s)", (long long)n, divisors(n));
        }
    }
    IntList sl = s->parallel.stage_layers;
    if (s->parallel.schedule == SCHED_INTERLEAVED) {
        Loc sloc = where(cx, "parallel.schedule", NULL);
        if (pp < 2) {
            diag_error(sloc, "the interleaved schedule needs pp >= 2 (pp = %lld)", (long long)pp);
            diag_hint("with one stage there is nothing to interleave: schedule = 1f1b");
        }
        if (v < 2) {
            diag_error(where(cx, "parallel.virtual_stages", NULL), "the interleaved schedule needs virtual_stages >= 2");
            diag_hint("virtual_stages = 1 is the plain 1f1b schedule");
        }
        if (pp >= 2 && v >= 2 && ok(cx, "model.layers", "parallel.pp", NULL) && L % (pp * v) != 0) {
            diag_error(where(cx, "parallel.virtual_stages", "parallel.schedule", NULL),
                       "layers = %lld is not divisible by pp·virtual_stages = %lld·%lld = %lld", (long long)L, (long long)pp,
                       (long long)v, (long long)(pp * v));
            diag_hint("each of the %lld model chunks holds the same number of layers: %lld / %lld = %s", (long long)(pp * v),
                      (long long)L, (long long)(pp * v), ratio(L, pp * v));
        }
        int64_t m = s->parallel.microbatches;
        if (pp >= 2 && ok(cx, "parallel.microbatches", "parallel.pp", NULL) && m % pp != 0) {
            diag_error(where(cx, "parallel.microbatches", "train.grad_accum", "parallel.schedule", NULL),
                       "the interleaved schedule needs microbatches to be a multiple of pp, but %lld %% %lld = %lld",
                       (long long)m, (long long)pp, (long long)(m % pp));
            diag_hint("microbatches (= grad_accum) run in groups of pp: try %lld", (long long)((m / pp + 1) * pp));
        }
        if (sl.n) {
            diag_error(where(cx, "parallel.stage_layers", NULL), "stage_layers cannot be used with the interleaved schedule");
            diag_hint("its chunks are uniform: layers / (pp·virtual_stages) each");
        }
    } else if (sl.n && ok(cx, "parallel.stage_layers", "parallel.pp", "model.layers", NULL)) {
        Loc lloc = where(cx, "parallel.stage_layers", NULL);
        int64_t sum = 0;
        char terms[256] = "";
        for (int i = 0; i < sl.n; i++) {
            sum += sl.v[i];
            size_t len = strlen(terms);
            if (len < 200) snprintf(terms + len, sizeof terms - len, "%s%lld", i ? " + " : "", (long long)sl.v[i]);
        }
        if (sl.n != pp) {
            diag_error(lloc, "stage_layers has %d entr%s, but pp = %lld", sl.n, sl.n == 1 ? "y" : "ies", (long long)pp);
            diag_hint("one entry per pipeline stage, adding up to layers = %lld", (long long)L);
        } else if (sum != L) {
            diag_error(lloc, "stage_layers add up to %s = %lld, but layers = %lld", terms, (long long)sum, (long long)L);
            diag_hint("every layer belongs to exactly one stage");
        }
    }
}

/* ZeRO and offload: which stages make which offload meaningful, and the cost
 * of ZeRO-2/3 under pipeline parallelism. */
static void rules_zero(Sema *cx)
{
    Spec *s = cx->s;
    int64_t stage = s->zero.stage, pp = s->parallel.pp, m = s->parallel.microbatches;
    if (s->offload.params != OFF_NONE && ok(cx, "zero.stage", NULL) && stage != 3) {
        diag_error(where(cx, "offload.params", NULL), "parameter offload needs ZeRO stage 3 (zero.stage = %lld)", (long long)stage);
        diag_hint("only stage 3 partitions the parameters, so only it can offload them (DeepSpeed silently ignores "
                  "offload_param below stage 3): set zero.stage = 3, or params = none");
    }
    if (s->offload.optimizer != OFF_NONE && ok(cx, "zero.stage", NULL) && stage == 0) {
        diag_error(where(cx, "offload.optimizer", NULL), "optimizer offload needs ZeRO stage 1 or more (zero.stage = 0)");
        diag_hint("what is offloaded is each rank's ZeRO shard of the optimizer state: set zero.stage = 1, 2 or 3");
    }
    if (s->zero.overlap_param_gather && ok(cx, "zero.stage", NULL) && (stage == 0 || stage == 3)) {
        diag_error(where(cx, "zero.overlap_param_gather", NULL),
                   "overlap_param_gather needs ZeRO stage 1 or 2 (zero.stage = %lld)", (long long)stage);
        diag_hint(stage == 0 ? "only the distributed optimizer (stage 1 or 2) all-gathers updated parameters: set zero.stage = 1"
                             : "stage 3 gathers parameters per fetch unit before each use (prefetch_bucket sets how far "
                               "ahead): remove overlap_param_gather");
    }
    if (s->offload.optimizer == OFF_NVME && !*s->offload.optimizer_path) {
        diag_error(where(cx, "offload.optimizer", NULL), "NVMe optimizer offload needs a path");
        diag_hint("optimizer = nvme { path = \"/local_nvme\" }");
    }
    if (s->offload.params == OFF_NVME && !*s->offload.params_path) {
        diag_error(where(cx, "offload.params", NULL), "NVMe parameter offload needs a path");
        diag_hint("params = nvme { path = \"/local_nvme\" }");
    }
    if (s->offload.optimizer != OFF_NONE) {
        double r = s->offload.optimizer_ratio;
        if (r == 0) {
            diag_error(where(cx, "offload.optimizer.ratio", NULL), "offload ratio = 0 offloads nothing");
            diag_hint("use optimizer = none to keep the optimizer on the device");
        } else if (r < 1 && ok(cx, "zero.stage", NULL) && stage != 3) {
            diag_error(where(cx, "offload.optimizer.ratio", NULL),
                       "a partial optimizer offload (ratio = %s) needs zero.stage = 3 (it is %lld)", schema_fmt_double(r),
                       (long long)stage);
            diag_hint("partial offload splits the stage-3 partition between device and host: use ratio = 1.0 or zero.stage = 3");
        }
    }
    if (s->offload.aio_block_size % 4096 != 0) {
        diag_error(where(cx, "offload.aio.block_size", NULL), "aio block_size = %lld is not a multiple of 4KiB",
                   (long long)s->offload.aio_block_size);
        diag_hint("O_DIRECT reads and writes are aligned to 4096 bytes: try %s",
                  schema_fmt_bytes((s->offload.aio_block_size / 4096 + 1) * 4096));
    }
    if (stage >= 2 && pp > 1 && m > 1 && ok(cx, "zero.stage", "parallel.pp", "parallel.microbatches", NULL)) {
        Loc l = where(cx, "zero.stage", NULL);
        if (stage == 3 && !s->zero.gather_across_microbatches) {
            diag_warning(l,
                         "ZeRO-3 with pp = %lld reduce-scatters gradients and re-gathers parameters for each of the %lld "
                         "microbatches: %lld× the reduce-scatter and all-gather traffic of one step without pipelining",
                         (long long)pp, (long long)m, (long long)m);
            diag_hint("DeepSpeed refuses ZeRO-2/3 with pipeline parallelism; shardc runs it at this cost. "
                      "zero.gather_across_microbatches = on keeps parameters gathered over the step (more memory, "
                      "one all-gather); ZeRO-1 reduces once per step");
        } else {
            diag_warning(l,
                         "ZeRO-%lld with pp = %lld reduce-scatters the gradients of each of the %lld microbatches: "
                         "%lld× the reduce-scatter traffic of one reduction per step",
                         (long long)stage, (long long)pp, (long long)m, (long long)m);
            diag_hint("DeepSpeed refuses ZeRO-2/3 with pipeline parallelism; shardc runs it at this cost. "
                      "ZeRO-1 reduces once per step");
        }
    }
}

/* A DeepSpeed key set to a value shardc does not implement: a warning saying
 * what shardc does instead; the field takes the value shardc implements. */
static void compat_warn(Sema *cx, const char *path, const char *value, const char *what)
{
    const char *name = strrchr(path, '.') + 1;
    diag_warning(where(cx, path, NULL), "%s = %s has no effect: %s", name, value, what);
    diag_hint("%s is accepted for DeepSpeed compatibility; remove it (shardc's behaviour is its default)", path);
}

/* DeepSpeed's memory-layout and overlap switches: shardc always does one thing. */
static void rules_compat(Sema *cx)
{
    Spec *s = cx->s;
    if (is_set(cx, "zero.contiguous_gradients") && !s->zero.contiguous_gradients) {
        compat_warn(cx, "zero.contiguous_gradients", "off",
                    "shardc always writes gradients into one contiguous buffer as they are produced; using on");
        s->zero.contiguous_gradients = true;
    }
    /* compiler/lower.c reduce_op: ZeRO 1-3 reduce-scatter each bucket into the
     * shards, ZeRO 0 all-reduces it (DeepSpeed's reduce_scatter = false
     * all-reduces and keeps the shard: the same sums, more traffic) */
    if (is_set(cx, "zero.reduce_scatter") && !s->zero.reduce_scatter) {
        compat_warn(cx, "zero.reduce_scatter", "off",
                    "shardc always reduce-scatters the gradients of ZeRO 1-3 into each rank's shard (ZeRO 0 "
                    "all-reduces them); using on");
        s->zero.reduce_scatter = true;
    }
    /* the runtime's host arena is cudaHostAlloc'd on the CUDA backend; the CPU
     * backend has no host-device copies for pinning to speed up */
    static const char pinned[] = "shardc's host memory is always page-locked (cudaHostAlloc) on the CUDA backend, and "
                                 "the CPU backend has no device copies to pin for; using on";
    if (is_set(cx, "offload.optimizer.pin_memory") && !s->offload.optimizer_pin_memory) {
        compat_warn(cx, "offload.optimizer.pin_memory", "off", pinned);
        s->offload.optimizer_pin_memory = true;
    }
    if (is_set(cx, "offload.params.pin_memory") && !s->offload.params_pin_memory) {
        compat_warn(cx, "offload.params.pin_memory", "off", pinned);
        s->offload.params_pin_memory = true;
    }
    /* compiler/sched.c opt_host: with two staging slots or more the next
     * sub-group is read, and the last written, while the current one steps */
    const char *pipe[2] = {"offload.optimizer.pipeline_read", "offload.optimizer.pipeline_write"};
    bool *on[2] = {&s->offload.optimizer_pipeline_read, &s->offload.optimizer_pipeline_write};
    for (int i = 0; i < 2; i++) {
        if (!is_set(cx, pipe[i])) continue;
        const char *name = strrchr(pipe[i], '.') + 1;
        if (!*on[i]) {
            compat_warn(cx, pipe[i], "off",
                        i == 0 ? "shardc always reads the next NVMe sub-group while the current one steps when "
                                 "buffer_count >= 2; using on"
                               : "shardc always writes each NVMe sub-group back while the next one steps when "
                                 "buffer_count >= 2; using on");
            diag_hint("buffer_count = 1 serialises the NVMe transfers with the step");
            *on[i] = true;
        } else if (s->offload.optimizer_buffer_count < 2) {
            diag_warning(where(cx, pipe[i], NULL),
                         "%s = on has no effect with buffer_count = 1: one staging buffer cannot hold the sub-group "
                         "in flight and the one stepping", name);
            diag_hint("set offload.optimizer.buffer_count = 2 or more to overlap the NVMe transfers with the step");
        }
    }
    if (is_set(cx, "offload.params.max_in_cpu") && s->offload.params_max_in_cpu != 0) {
        compat_warn(cx, "offload.params.max_in_cpu", schema_fmt_double((double)s->offload.params_max_in_cpu),
                    arena_printf(&g_arena, "shardc keeps no NVMe-offloaded parameters in host memory besides its "
                                           "staging buffers (buffer_count·buffer_size = %lld elements); using 0",
                                 (long long)(s->offload.params_buffer_count * s->offload.params_buffer_size)));
        s->offload.params_max_in_cpu = 0;
    }
}

/* Precision: fp16 and bf16 exclusive, master weights in fp32. */
static void rules_precision(Sema *cx)
{
    Spec *s = cx->s;
    int dt = s->precision.dtype, mw = s->precision.master_weights, gr = s->precision.grad_reduce;
    const SchemaKey *dk = key("precision.dtype");
    if (mw != DT_FP32 && dt != DT_FP32) {
        diag_error(where(cx, "precision.master_weights", NULL), "master_weights = %s with dtype = %s: the master copy must be fp32",
                   schema_enum_name(dk, mw), schema_enum_name(dk, dt));
        diag_hint("a 16-bit master copy loses every update smaller than 2^-%d of a weight: master_weights = fp32",
                  mw == DT_BF16 ? 8 : 11);
    } else if (mw != DT_FP32) {
        diag_warning(where(cx, "precision.master_weights", NULL),
                     "master_weights = %s has no effect with dtype = fp32 (the fp32 weights are the master copy); "
                     "using fp32",
                     schema_enum_name(dk, mw));
        s->precision.master_weights = DT_FP32;
    }
    if ((dt == DT_BF16 && gr == DT_FP16) || (dt == DT_FP16 && gr == DT_BF16)) {
        diag_error(where(cx, "precision.grad_reduce", NULL), "grad_reduce = %s with dtype = %s: fp16 and bf16 are exclusive",
                   schema_enum_name(dk, gr), schema_enum_name(dk, dt));
        diag_hint("reduce gradients in %s or fp32", schema_enum_name(dk, dt));
    }
}

/* Checkpointing options that need something else to mean anything. */
static void rules_checkpointing(Sema *cx)
{
    Spec *s = cx->s;
    if (s->checkpointing.partition_activations && s->parallel.tp == 1) {
        diag_warning(where(cx, "checkpointing.partition_activations", NULL),
                     "partition_activations has no effect with tp = 1 (there is no tp group to split over); turned off");
        s->checkpointing.partition_activations = false;
    }
    if (s->checkpointing.cpu && s->checkpointing.activations == CKPT_NONE) {
        diag_warning(where(cx, "checkpointing.cpu", NULL),
                     "checkpointing.cpu has no effect with activations = none (nothing is checkpointed); turned off");
        s->checkpointing.cpu = false;
    }
}

/* The optimizer and the schedule of the learning rate. */
static void rules_train(Sema *cx)
{
    Spec *s = cx->s;
    if (ok(cx, "train.optimizer.lr", NULL) && s->train.lr <= 0) {
        diag_error(where(cx, "train.optimizer.lr", NULL), "lr = 0: the learning rate must be positive");
        diag_hint("typical values: 6e-4 for GPT-2 small, 3e-4 for Llama-2 7B");
        mark_bad(cx, "train.optimizer.lr");
    }
    if (s->train.optimizer != OPT_SGD && ok(cx, "train.optimizer.betas", NULL) && (s->train.beta1 >= 1 || s->train.beta2 >= 1)) {
        diag_error(where(cx, "train.optimizer.betas", NULL), "betas = (%s, %s): each must be below 1",
                   schema_fmt_double(s->train.beta1), schema_fmt_double(s->train.beta2));
        diag_hint("a beta of 1 never updates its moment estimate: typical values are (0.9, 0.95) or (0.9, 0.999)");
    }
    if (s->train.optimizer == OPT_SGD && s->train.momentum >= 1) {
        diag_error(where(cx, "train.optimizer.momentum", NULL), "momentum = %s must be below 1",
                   schema_fmt_double(s->train.momentum));
        diag_hint("a momentum of 1 never forgets a gradient: typical values are 0.9 or 0.99");
    }
    if (s->train.lr_schedule != LR_CONSTANT && ok(cx, "train.optimizer.lr", "train.lr_schedule.min_lr", NULL) &&
        s->train.min_lr > s->train.lr) {
        diag_error(where(cx, "train.lr_schedule.min_lr", NULL), "min_lr = %s is above lr = %s",
                   schema_fmt_double(s->train.min_lr), schema_fmt_double(s->train.lr));
        char tenth[32];
        snprintf(tenth, sizeof tenth, "%.3g", s->train.lr / 10);
        diag_hint("the schedule decays from lr down to min_lr; a tenth of lr is usual (%s)",
                  schema_fmt_double(strtod(tenth, NULL)));
    }
    if (ok(cx, "train.lr_schedule.warmup", "train.steps", NULL) && s->train.warmup > s->train.steps) {
        diag_error(where(cx, "train.lr_schedule.warmup", NULL), "warmup = %lld is longer than the run (steps = %lld)",
                   (long long)s->train.warmup, (long long)s->train.steps);
        diag_hint("warm-up is part of the steps: warmup <= %lld", (long long)s->train.steps);
    } else if (s->train.lr_schedule != LR_CONSTANT && ok(cx, "train.lr_schedule.warmup", "train.lr_schedule.decay_steps", NULL) &&
               s->train.warmup > s->train.decay_steps) {
        diag_error(where(cx, "train.lr_schedule.warmup", NULL), "warmup = %lld is longer than decay_steps = %lld",
                   (long long)s->train.warmup, (long long)s->train.decay_steps);
        diag_hint("the decay starts after the warm-up and ends at step decay_steps");
    }
}

/* The cluster: something must be left of the device after the reserve. */
static void rules_cluster(Sema *cx)
{
    Spec *s = cx->s;
    if (s->cluster.runtime_reserve >= s->cluster.gpu_memory) {
        diag_error(where(cx, "cluster.runtime_reserve", "cluster.gpu_memory", NULL),
                   "runtime_reserve = %s leaves nothing of gpu_memory = %s", schema_fmt_bytes(s->cluster.runtime_reserve),
                   schema_fmt_bytes(s->cluster.gpu_memory));
        diag_hint("the reserve (CUDA context, NCCL, slack) must be smaller than the device");
    }
}

/* ---- the entry point -------------------------------------------------------------- */

const char *sema_source;

/* The top-level file: the one named by sema_source (an empty file has no
 * items, so it gets a record of its own), else the first item's. */
static const SrcFile *top_file(const Item *items)
{
    if (sema_source) {
        const char *want = strcmp(sema_source, "-") == 0 ? "<stdin>" : sema_source;
        for (const Item *it = items; it; it = it->next)
            if (it->loc.file && strcmp(it->loc.file->path, want) == 0) return it->loc.file;
        if (!items) {
            SrcFile *f = arena_alloc(&g_arena, sizeof *f);
            f->path = want;
            f->text = "";
            return f;
        }
    }
    return items ? items->loc.file : NULL;
}

/* The keys left open, in table order, as out's search space; their defaults
 * (and every other unset key's) are filled so that sema_bind starts from them. */
static void keep_open(Sema *cx, int nopen)
{
    Spec *out = cx->s;
    OpenKey *o = arena_alloc(&g_arena, sizeof *o * (size_t)nopen);
    int n = 0;
    for (int i = 0; i < schema_nkeys; i++) {
        if (!cx->is_open[i]) continue;
        o[n++] = cx->open[i];
        out->set[i] = false;
    }
    for (int i = 0; i < schema_nkeys; i++)
        if (!out->set[i]) set_default(out, &schema_keys[i]);
    cx->defaults_done = true;
    out->open = o;
    out->nopen = n;
    out->pending = cx;
}

/* Everything after the items: defaults, derived values, the rules. */
static void finish(Sema *cx)
{
    Spec *out = cx->s;
    if (!cx->defaults_done)
        for (int i = 0; i < schema_nkeys; i++)
            if (!out->set[i]) set_default(out, &schema_keys[i]);
    bool have_model = rules_model_present(cx);
    derive_rest(cx);                /* the activation first: it governs extern's keys */
    check_applies(cx);
    derive_cluster(cx);
    if (have_model) derive_model(cx);
    derive_dp(cx);
    derive_batch(cx);
    derive_rest(cx);                /* again: a dropped key may have a derived default */

    if (have_model) {
        rules_model(cx);
        rules_parallel(cx);
    }
    rules_zero(cx);
    rules_compat(cx);
    rules_precision(cx);
    rules_checkpointing(cx);
    rules_train(cx);
    rules_cluster(cx);
}

/* Resolves items and overrides into *out (see shardc.h); a spec with open
 * keys stops after its items (sema_bind finishes each choice). */
bool sema_resolve(Item *items, const Override *ov, int nov, Spec *out)
{
    int errors_before = diag_errors;
    memset(out, 0, sizeof *out);
    Sema *cx = arena_alloc(&g_arena, sizeof *cx);
    cx->s = out;
    cx->open = arena_alloc(&g_arena, sizeof *cx->open * SPEC_MAX_KEYS);
    cx->main_file = top_file(items);
    out->source = cx->main_file ? cx->main_file->path : "";
    cx->nblocks = schema_children("", cx->blocks, 16);

    walk(cx, items, "");
    for (int i = 0; i < nov; i++) apply_override(cx, &ov[i]);

    int nopen = 0;
    for (int i = 0; i < schema_nkeys; i++) nopen += cx->is_open[i];
    if (nopen) keep_open(cx, nopen);
    else finish(cx);
    return diag_errors == errors_before;
}

/* Resolves one choice of an open spec (see shardc.h). */
bool sema_bind(const Spec *open, const int64_t *val, Spec *out)
{
    if (!open->pending) die("sema_bind on a spec with no open keys");
    int errors_before = diag_errors;
    Sema cx = *open->pending;
    *out = *open;
    cx.s = out;
    out->open = NULL;
    out->nopen = 0;
    out->pending = NULL;
    for (int j = 0; j < open->nopen; j++) {
        if (val[j] == SEMA_UNBOUND) continue;
        const OpenKey *o = &open->open[j];
        put(out, &schema_keys[o->key], val[j]);
        out->set[o->key] = true;
        out->loc[o->key] = o->key_loc;
    }
    finish(&cx);
    return diag_errors == errors_before;
}

/* Where the user (an include, or -D) set key path, or no location. */
Loc sema_key_loc(const Spec *s, const char *path)
{
    const SchemaKey *k = schema_find(path);
    if (!k) return (Loc){0};
    int i = schema_index(k);
    return s->set[i] ? s->loc[i] : (Loc){0};
}
