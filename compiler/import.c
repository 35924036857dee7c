/* import.c — `shardc import deepspeed`: a DeepSpeed JSON config (and a Hugging
 * Face config.json for the model) translated into a readable .tspec.
 *
 * The JSON is parsed by cJSON; a small scanner over the same text remembers
 * where every key and value sits, so diagnostics point at the JSON line with
 * a caret.  Each DeepSpeed key is mapped, ignored with a warning that names
 * it, or reported as unknown with a did-you-mean.  The produced text keeps
 * only the keys that were given or derived, each with a comment naming its
 * source, and is run through the normal front end (spec_parse_text +
 * sema_resolve) before a byte is written: an import never emits a spec that
 * `shardc check` rejects.
 */
#include "shardc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Largest JSON config accepted (real ones are a few KB). */
#define IMPORT_MAX_JSON (16u << 20)

/* ======================================================================== */
/* JSON documents with key positions                                         */
/* ======================================================================== */

/* Where one key of the document sits: its quoted name and its value. */
typedef struct JKey {
    const char *path;           /* "zero_optimization.offload_param.device" */
    const char *kpos, *vpos;
    int klen, vlen;
} JKey;

/* A parsed JSON file: the text (for carets), the cJSON tree, the key index. */
typedef struct JDoc {
    SrcFile src;
    cJSON *root;
    JKey *keys;
    int nkeys, cap;
} JDoc;

/* The 1-based line and column of pos in the document, as a Loc of len bytes. */
static Loc import_loc_at(const JDoc *d, const char *pos, int len)
{
    Loc l = {0};
    if (!d || !pos) return l;
    const char *text = d->src.text, *line_start = text;
    int line = 1;
    for (const char *p = text; p < pos; p++)
        if (*p == '\n') line++, line_start = p + 1;
    const char *eol = pos;
    while (*eol && *eol != '\n') eol++;
    if (len > eol - pos) len = (int)(eol - pos);
    l.file = &d->src;
    l.line = line;
    l.col = (int)(pos - line_start) + 1;
    l.len = len > 0 ? len : 1;
    l.pos = pos;
    return l;
}

/* The index entry of a key path, or NULL (a key spelled with escapes). */
static const JKey *import_find_key(const JDoc *d, const char *path)
{
    for (int i = 0; i < d->nkeys; i++)
        if (strcmp(d->keys[i].path, path) == 0) return &d->keys[i];
    return NULL;
}

/* The document's opening brace: where file-wide messages point. */
static Loc import_file_loc(const JDoc *d)
{
    const char *p = d->src.text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return import_loc_at(d, p, 1);
}

/* The location of a key's name (for "unknown" and "ignored"); the file's
 * start for a key that is absent. */
static Loc import_key_loc(const JDoc *d, const char *path)
{
    const JKey *k = import_find_key(d, path);
    return k ? import_loc_at(d, k->kpos, k->klen) : import_file_loc(d);
}

/* The location of a key's value (for wrong types and bad values). */
static Loc import_val_loc(const JDoc *d, const char *path)
{
    const JKey *k = import_find_key(d, path);
    return k ? import_loc_at(d, k->vpos, k->vlen) : import_file_loc(d);
}

/* The scanner's cursor over text that cJSON has already accepted. */
typedef struct JScan {
    JDoc *d;
    const char *p;
} JScan;

/* Skips JSON white space. */
static void import_scan_ws(JScan *s)
{
    while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r') s->p++;
}

/* Skips a string starting at its opening quote. */
static void import_scan_string(JScan *s)
{
    s->p++;
    while (*s->p && *s->p != '"') {
        if (*s->p == '\\' && s->p[1]) s->p++;
        s->p++;
    }
    if (*s->p) s->p++;
}

/* Appends code point c to out as UTF-8. */
static char *import_put_utf8(char *out, unsigned long c)
{
    if (c < 0x80) {
        *out++ = (char)c;
    } else if (c < 0x800) {
        *out++ = (char)(0xC0 | (c >> 6));
        *out++ = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *out++ = (char)(0xE0 | (c >> 12));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *out++ = (char)(0x80 | (c & 0x3F));
    } else {
        *out++ = (char)(0xF0 | (c >> 18));
        *out++ = (char)(0x80 | ((c >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *out++ = (char)(0x80 | (c & 0x3F));
    }
    return out;
}

/* A key's text between its quotes with JSON escapes decoded, as cJSON
 * names it ("st\u0061ge" is "stage"). */
static char *import_unescape(const char *p, size_t n)
{
    char *buf = arena_alloc(&g_arena, n + 1), *out = buf;
    const char *end = p + n;
    while (p < end) {
        if (*p != '\\' || p + 1 >= end) {
            *out++ = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case 'n': *out++ = '\n'; break;
        case 'r': *out++ = '\r'; break;
        case 't': *out++ = '\t'; break;
        case 'u': {
            unsigned long cp = p + 4 <= end ? strtoul(arena_strndup(&g_arena, p, 4), NULL, 16) : 0;
            p += p + 4 <= end ? 4 : end - p;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 6 <= end && p[0] == '\\' && p[1] == 'u') {
                unsigned long lo = strtoul(arena_strndup(&g_arena, p + 2, 4), NULL, 16);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            /* cJSON rejects lone surrogates and NUL, so these are all well formed */
            out = import_put_utf8(out, cp);
            break;
        }
        default: *out++ = c; break;        /* \" \\ \/ */
        }
    }
    *out = 0;
    return buf;
}

/* Records a key; a second key with the same path in one object is an error
 * (DeepSpeed loads JSON with a hook that rejects duplicate keys). */
static JKey *import_scan_record(JScan *s, const char *path, const char *kpos, int klen)
{
    JDoc *d = s->d;
    const JKey *prev = import_find_key(d, path);
    if (prev) {
        diag_error(import_loc_at(d, kpos, klen), "duplicate key %.*s", klen, kpos);
        diag_note(import_loc_at(d, prev->kpos, prev->klen), "first given here");
        diag_hint("DeepSpeed rejects duplicate keys; keep one");
    }
    if (d->nkeys == d->cap) {
        int cap = d->cap ? d->cap * 2 : 64;
        JKey *grown = arena_alloc(&g_arena, (size_t)cap * sizeof *grown);
        if (d->nkeys) memcpy(grown, d->keys, (size_t)d->nkeys * sizeof *grown);
        d->keys = grown;
        d->cap = cap;
    }
    JKey *k = &d->keys[d->nkeys++];
    k->path = path;
    k->kpos = kpos;
    k->klen = klen;
    return k;
}

static void import_scan_value(JScan *s, const char *path);

/* Scans an object, recording "parent.key" for each member. */
static void import_scan_object(JScan *s, const char *path)
{
    s->p++;
    for (;;) {
        import_scan_ws(s);
        if (*s->p != '"') break;
        const char *kpos = s->p;
        import_scan_string(s);
        int klen = (int)(s->p - kpos);
        char *name = import_unescape(kpos + 1, (size_t)(klen >= 2 ? klen - 2 : 0));
        char *child = *path ? arena_printf(&g_arena, "%s.%s", path, name) : name;
        import_scan_ws(s);
        if (*s->p == ':') s->p++;
        import_scan_ws(s);
        JKey *k = import_scan_record(s, child, kpos, klen);
        k->vpos = s->p;
        int idx = (int)(k - s->d->keys);
        import_scan_value(s, child);
        /* the array may have grown: address the entry by index */
        s->d->keys[idx].vlen = (*k->vpos == '{' || *k->vpos == '[') ? 1 : (int)(s->p - k->vpos);
        import_scan_ws(s);
        if (*s->p != ',') break;
        s->p++;
    }
    if (*s->p == '}') s->p++;
}

/* Scans one value of any kind; objects inside arrays get "path[i]". */
static void import_scan_value(JScan *s, const char *path)
{
    import_scan_ws(s);
    if (*s->p == '{') {
        import_scan_object(s, path);
    } else if (*s->p == '[') {
        s->p++;
        for (int i = 0;; i++) {
            import_scan_ws(s);
            if (*s->p == ']' || !*s->p) break;
            import_scan_value(s, arena_printf(&g_arena, "%s[%d]", path, i));
            import_scan_ws(s);
            if (*s->p != ',') break;
            s->p++;
        }
        if (*s->p == ']') s->p++;
    } else if (*s->p == '"') {
        import_scan_string(s);
    } else {
        while (*s->p && !strchr(",]} \t\r\n", *s->p)) s->p++;
    }
}

/* The first comment or dangling comma outside strings, up to `limit`, or
 * NULL: cJSON reports these a token or two late, so they are found here. */
static const char *import_json_flaw(const char *text, const char *limit, bool *comment)
{
    bool in_str = false;
    for (const char *p = text; *p && p <= limit; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = false;
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == '/' && (p[1] == '/' || p[1] == '*')) {
            *comment = true;
            return p;
        } else if (*p == ',') {
            const char *q = p + 1 + strspn(p + 1, " \t\r\n");
            if (*q == '}' || *q == ']') {
                *comment = false;
                return p;
            }
        }
    }
    return NULL;
}

/* How many '{' and '[' are open just after `at` (strings skipped). */
static int import_json_depth(const char *text, const char *at)
{
    int depth = 0;
    bool in_str = false;
    for (const char *p = text; *p && p <= at; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = false;
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        }
    }
    return depth;
}

/* Says what cJSON could not parse, at the line and column where it stopped. */
static void import_json_error(JDoc *d, const char *at)
{
    const char *text = d->src.text, *end = text + d->src.len;
    if (!at || at < text || at > end) at = end;
    bool comment = false;
    const char *flaw = import_json_flaw(text, at + 1, &comment);
    if (flaw && comment) {
        diag_error(import_loc_at(d, flaw, 2), "malformed JSON: comments are not JSON");
        diag_hint("remove the comment (DeepSpeed's json.load rejects it too)");
        return;
    }
    if (flaw) {
        diag_error(import_loc_at(d, flaw, 1), "malformed JSON: a comma after the last member");
        diag_hint("JSON allows no comma before a closing '}' or ']'");
        return;
    }
    if (import_json_depth(text, at) > CJSON_NESTING_LIMIT) {
        diag_error(import_loc_at(d, at, 1), "malformed JSON: nested deeper than %d levels", CJSON_NESTING_LIMIT);
        return;
    }
    if (at == end || !*at) {
        diag_error(import_loc_at(d, at > text ? at - 1 : at, 1), "malformed JSON: unexpected end of file");
        diag_hint("a '{' or '[' is not closed, or a string is not terminated");
        return;
    }
    unsigned char c = (unsigned char)*at;
    if (c > ' ' && c < 127) diag_error(import_loc_at(d, at, 1), "malformed JSON: unexpected '%c'", c);
    else diag_error(import_loc_at(d, at, 1), "malformed JSON: unexpected byte 0x%02x", c);
    const char *q = at;     /* the last character before the offending token */
    while (q > text && strchr(" \t\r\n", q[-1])) q--;
    if (c == '\'')
        diag_hint("JSON strings take double quotes");
    else if (c == '"' && q > text && strchr("\"}]0123456789el", q[-1]))
        diag_hint("a ',' is missing between two members");
}

/* Reads and parses a JSON file into d; false (reported) on any error. */
static bool import_load_json(JDoc *d, const char *path, const char *what)
{
    memset(d, 0, sizeof *d);
    size_t len = 0;
    char *text = util_read_file(path, &len, IMPORT_MAX_JSON);
    if (!text) {
        if (errno == EFBIG)
            diag_plain("%s: the %s is larger than %u MiB", path, what, IMPORT_MAX_JSON >> 20);
        else
            diag_plain("cannot read the %s %s: %s", what, path, util_strerror(errno));
        return false;
    }
    d->src.path = path;
    d->src.text = text;
    d->src.len = len;
    if (strlen(text) != len) {
        diag_error(import_loc_at(d, text + strlen(text), 1), "malformed JSON: a NUL byte");
        return false;
    }
    const char *end = NULL;
    /* the length covers the NUL: cJSON's trailing-garbage check reads it */
    d->root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!d->root) {
        import_json_error(d, end ? end : cJSON_GetErrorPtr());
        return false;
    }
    const char *first = text;
    while (*first == ' ' || *first == '\t' || *first == '\n' || *first == '\r') first++;
    if (!cJSON_IsObject(d->root)) {
        diag_error(import_loc_at(d, first, 1), "the %s must be a JSON object ({ ... })", what);
        return false;
    }
    int before = diag_errors;
    JScan s = {d, first};
    import_scan_value(&s, "");
    return diag_errors == before;
}

/* The item at a dotted path ("zero_optimization.stage"), or NULL. */
static cJSON *import_get(const JDoc *d, const char *path)
{
    cJSON *it = d->root;
    const char *p = path;
    while (it && *p) {
        size_t n = strcspn(p, ".");
        char name[128];
        if (n >= sizeof name) return NULL;
        memcpy(name, p, n);
        name[n] = 0;
        it = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, name) : NULL;
        p += n;
        if (*p == '.') p++;
    }
    return it;
}

static void import_shortest(char *buf, size_t cap, const char *conv, double v);

/* "a string", "an object", "1.5": what a value is, for type errors. */
static const char *import_describe(const cJSON *v)
{
    if (cJSON_IsString(v)) return arena_printf(&g_arena, "the string \"%.40s\"", v->valuestring);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        return arena_printf(&g_arena, "an array of %d element%s", n, n == 1 ? "" : "s");
    }
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) return "a number beyond a double's range";
    if (cJSON_IsNumber(v)) {
        char buf[64];
        import_shortest(buf, sizeof buf, "%.*g", v->valuedouble);
        return arena_strdup(&g_arena, buf);
    }
    return "something else";
}

/* ======================================================================== */
/* the spec being produced                                                   */
/* ======================================================================== */

/* One emitted key: its schema entry, its value as spec text, its source. */
typedef struct Ent {
    const SchemaKey *k;
    const char *val;
    const char *from;
    struct Ent *next;
} Ent;

/* Everything one import works with. */
typedef struct Imp {
    const ImportOpts *o;
    JDoc ds, hf;
    bool have_hf;
    const char *ds_name, *hf_name;      /* base names, for comments      */
    int64_t hidden;                     /* model width (0 = unknown)     */
    int64_t dp;                         /* nodes·gpus_per_node (0 = ?)   */
    int64_t stage;                      /* ZeRO stage                    */
    const char *model_family;           /* "gpt" or "llama"              */
    Ent *ents;
    double lr;                          /* the optimizer's lr            */
    bool lr_set;
} Imp;

/* The schema entry of a path the importer writes; a missing one is a bug. */
static const SchemaKey *import_key(const char *path)
{
    const SchemaKey *k = schema_find(path);
    if (!k) die("import: the schema has no key '%s'", path);
    return k;
}

/* The entry already emitted for path, or NULL. */
static Ent *import_ent(Imp *im, const char *path)
{
    for (Ent *e = im->ents; e; e = e->next)
        if (strcmp(e->k->path, path) == 0) return e;
    return NULL;
}

/* Emits (or replaces) `path = val` with a comment saying where it came from. */
static void import_put(Imp *im, const char *path, const char *val, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void import_put(Imp *im, const char *path, const char *val, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    Ent *e = import_ent(im, path);
    if (!e) {
        e = arena_alloc(&g_arena, sizeof *e);
        e->k = import_key(path);
        e->next = im->ents;
        im->ents = e;
    }
    e->val = arena_strdup(&g_arena, val);
    e->from = arena_strdup(&g_arena, buf);
}

/* The shortest text in printf format conv ("%.*g" or "%.*e") that reads back as v. */
static void import_shortest(char *buf, size_t cap, const char *conv, double v)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, conv, conv[3] == 'e' ? prec - 1 : prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    schema_tidy_exponent(buf);
}

/* A real number as the shortest spec text that reads back exactly: 0.01,
 * 6e-4 rather than 0.0006, 1.0 rather than 1 (so it stays a real). */
static const char *import_fmt_float(double v)
{
    char g[64], e[64];
    import_shortest(g, sizeof g, "%.*g", v);
    import_shortest(e, sizeof e, "%.*e", v);
    char *best = strlen(e) < strlen(g) ? e : g;
    if (!strpbrk(best, ".en")) strcat(best, ".0");
    return arena_strdup(&g_arena, best);
}

/* A computed real rounded to 15 digits, so 0.1 x 3e-4 prints as 3e-5. */
static double import_round15(double v)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.15g", v);
    return strtod(buf, NULL);
}

/* An integer: digits, or 5e8 / 1.2e9 when it ends in five or more zeros. */
static const char *import_fmt_int(int64_t v)
{
    if (v >= 1000000 && v % 100000 == 0) {
        char buf[64];
        import_shortest(buf, sizeof buf, "%.*e", (double)v);   /* 5e8, never 5.000e8 */
        return arena_strdup(&g_arena, buf);
    }
    return arena_printf(&g_arena, "%lld", (long long)v);
}

/* A byte size in the largest binary unit that divides it (1MiB), else bytes. */
static const char *import_fmt_bytes(int64_t b)
{
    static const struct { const char *name; int64_t mult; } units[] = {
        {"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10},
    };
    for (size_t i = 0; b > 0 && i < sizeof units / sizeof units[0]; i++)
        if (b % units[i].mult == 0) return arena_printf(&g_arena, "%lld%s", (long long)(b / units[i].mult), units[i].name);
    return arena_printf(&g_arena, "%lld", (long long)b);
}

/* The value of key k in spec text, from a JSON number already checked. */
static const char *import_fmt_number(const SchemaKey *k, double v)
{
    if (k->type == T_FLOAT || k->type == T_FLOAT2) return import_fmt_float(v);
    if (k->type == T_BYTES) return import_fmt_bytes((int64_t)v);
    return import_fmt_int((int64_t)v);
}

/* True when the schema gives key k a range and v is outside it. */
static bool import_out_of_range(const SchemaKey *k, double v)
{
    return k->min <= k->max && (v < k->min || v > k->max);
}

/* "1 to 1e12": the key's range in words, for range errors. */
static const char *import_range_text(const SchemaKey *k)
{
    return arena_printf(&g_arena, "%s to %s", import_fmt_number(k, k->min), import_fmt_number(k, k->max));
}

/* ======================================================================== */
/* reading DeepSpeed values                                                   */
/* ======================================================================== */

/* What a getter found. */
enum { J_ABSENT, J_OK, J_AUTO, J_BAD };

/* Is the item the string "auto" (Hugging Face's placeholder)? */
static bool import_is_auto(const cJSON *v)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0;
}

/* Reports a value of the wrong JSON type at its position. */
static void import_type_error(const JDoc *d, const char *path, const cJSON *v, const char *want)
{
    diag_error(import_val_loc(d, path), "%s: expected %s, got %s", path, want, import_describe(v));
}

/* The largest integer a JSON number may give (exact in a double, and an
 * int64_t when cast). */
#define IMPORT_INT_MAX 9.0e15

/* Reads an integral number (5e8 is fine, 1.5 is not); null counts as absent. */
static int import_get_int(const JDoc *d, const char *path, int64_t *out)
{
    cJSON *v = import_get(d, path);
    if (!v || cJSON_IsNull(v)) return J_ABSENT;
    if (import_is_auto(v)) return J_AUTO;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > IMPORT_INT_MAX) {
        import_type_error(d, path, v, "an integer");
        return J_BAD;
    }
    *out = (int64_t)v->valuedouble;
    return J_OK;
}

/* Reads a finite number (cJSON reads 1e999 as inf). */
static int import_get_num(const JDoc *d, const char *path, double *out)
{
    cJSON *v = import_get(d, path);
    if (!v || cJSON_IsNull(v)) return J_ABSENT;
    if (import_is_auto(v)) return J_AUTO;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        import_type_error(d, path, v, "a number");
        return J_BAD;
    }
    *out = v->valuedouble;
    return J_OK;
}

/* Reads true/false. */
static int import_get_bool(const JDoc *d, const char *path, bool *out)
{
    cJSON *v = import_get(d, path);
    if (!v || cJSON_IsNull(v)) return J_ABSENT;
    if (import_is_auto(v)) return J_AUTO;
    if (!cJSON_IsBool(v)) {
        import_type_error(d, path, v, "true or false");
        return J_BAD;
    }
    *out = cJSON_IsTrue(v);
    return J_OK;
}

/* Reads a string ("auto" is returned as J_AUTO). */
static int import_get_str(const JDoc *d, const char *path, const char **out)
{
    cJSON *v = import_get(d, path);
    if (!v || cJSON_IsNull(v)) return J_ABSENT;
    if (import_is_auto(v)) return J_AUTO;
    if (!cJSON_IsString(v)) {
        import_type_error(d, path, v, "a string");
        return J_BAD;
    }
    *out = v->valuestring;
    return J_OK;
}

/* Reads an object; a value of another type is an error. */
static cJSON *import_get_obj(const JDoc *d, const char *path)
{
    cJSON *v = import_get(d, path);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsObject(v)) {
        import_type_error(d, path, v, "an object");
        return NULL;
    }
    return v;
}

/* The Hugging Face Trainer argument that fills a DeepSpeed "auto", or NULL. */
static const char *import_trainer_arg(const char *path)
{
    static const struct { const char *path, *arg; } args[] = {
        {"train_micro_batch_size_per_gpu", "--per_device_train_batch_size"},
        {"gradient_accumulation_steps", "--gradient_accumulation_steps"},
        {"train_batch_size", "--per_device_train_batch_size x --gradient_accumulation_steps x world size"},
        {"gradient_clipping", "--max_grad_norm"},
        {"optimizer.params.lr", "--learning_rate"},
        {"optimizer.params.betas", "--adam_beta1 and --adam_beta2"},
        {"optimizer.params.eps", "--adam_epsilon"},
        {"optimizer.params.weight_decay", "--weight_decay"},
        {"scheduler.params.warmup_max_lr", "--learning_rate"},
        {"scheduler.params.warmup_num_steps", "--warmup_steps"},
        {"scheduler.params.total_num_steps", "--max_steps"},
        {"fp16.enabled", "--fp16"},
        {"bf16.enabled", "--bf16"},
        {"bfloat16.enabled", "--bf16"},
        {"communication_data_type", "the Trainer's precision"},
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        if (strcmp(args[i].path, path) == 0) return args[i].arg;
    return NULL;
}

/* Reports an "auto" that no rule here can fill. */
static void import_auto_error(Imp *im, const char *path)
{
    const char *arg = import_trainer_arg(path);
    Loc loc = import_val_loc(&im->ds, path);
    if (arg) {
        diag_error(loc, "%s is \"auto\": Hugging Face's Trainer fills it from %s, and shardc has no Trainer",
                   path, arg);
        diag_hint("write the value into %s", im->ds.src.path);
    } else {
        diag_error(loc, "%s is \"auto\", and no Hugging Face rule fills it", path);
        diag_hint("write the value into %s", im->ds.src.path);
    }
}

/* Reports a number outside the range of the shardc key it maps to. */
static void import_range_error(Imp *im, const char *path, const SchemaKey *k, double v)
{
    diag_error(import_val_loc(&im->ds, path), "%s: %s is out of range", path, import_fmt_number(k, v));
    diag_hint("it becomes %s, which takes %s", k->path, import_range_text(k));
}

/* Maps a DeepSpeed number, integer or boolean onto the shardc key `spec`,
 * with the type the schema gives it.  Returns what it found. */
static int import_map(Imp *im, const char *ds_path, const char *spec)
{
    const SchemaKey *k = import_key(spec);
    switch (k->type) {
    case T_BOOL: {
        bool b;
        int r = import_get_bool(&im->ds, ds_path, &b);
        if (r == J_OK) import_put(im, spec, b ? "on" : "off", "%s", ds_path);
        else if (r == J_AUTO) import_auto_error(im, ds_path);
        return r;
    }
    case T_INT:
    case T_BYTES: {
        int64_t v;
        int r = import_get_int(&im->ds, ds_path, &v);
        if (r == J_OK) {
            if (import_out_of_range(k, (double)v)) {
                import_range_error(im, ds_path, k, (double)v);
                return J_BAD;
            }
            import_put(im, spec, import_fmt_number(k, (double)v), "%s", ds_path);
        } else if (r == J_AUTO) {
            import_auto_error(im, ds_path);
        }
        return r;
    }
    case T_FLOAT: {
        double v;
        int r = import_get_num(&im->ds, ds_path, &v);
        if (r == J_OK) {
            if (import_out_of_range(k, v)) {
                import_range_error(im, ds_path, k, v);
                return J_BAD;
            }
            import_put(im, spec, import_fmt_float(v), "%s", ds_path);
        } else if (r == J_AUTO) {
            import_auto_error(im, ds_path);
        }
        return r;
    }
    default:
        die("import: no generic mapping for the type of %s", spec);
    }
}

/* Warns that a given key is ignored, naming it and saying why. */
static void import_ignored(Imp *im, const char *path, const char *why)
{
    diag_warning(import_key_loc(&im->ds, path), "%s: ignored: %s", path, why);
}

/* What shardc always does instead of the DeepSpeed switches it accepts but
 * implements one way only (its default in schema.def); NULL for other keys. */
static const char *import_compat_why(const char *spec)
{
    static const struct { const char *spec, *why; } compat[] = {
        {"zero.contiguous_gradients", "shardc always writes gradients into one contiguous buffer"},
        {"zero.reduce_scatter", "shardc always reduce-scatters the gradients of ZeRO 1-3 (ZeRO 0 all-reduces them)"},
        {"offload.optimizer.pin_memory", "shardc's host memory is always page-locked (cudaHostAlloc) on the CUDA backend"},
        {"offload.params.pin_memory", "shardc's host memory is always page-locked (cudaHostAlloc) on the CUDA backend"},
        {"offload.optimizer.pipeline_read", "shardc always reads the next NVMe sub-group while the current one steps "
                                            "(with buffer_count >= 2)"},
        {"offload.optimizer.pipeline_write", "shardc always writes each NVMe sub-group back while the next one steps "
                                             "(with buffer_count >= 2)"},
        {"offload.params.max_in_cpu", "shardc keeps no NVMe-offloaded parameters in host memory besides its staging "
                                      "buffers"},
    };
    for (size_t i = 0; i < sizeof compat / sizeof compat[0]; i++)
        if (strcmp(compat[i].spec, spec) == 0) return compat[i].why;
    return NULL;
}

/* Forgets the entry for path, if any. */
static void import_unput(Imp *im, const char *path)
{
    for (Ent **p = &im->ents; *p; p = &(*p)->next)
        if (strcmp((*p)->k->path, path) == 0) {
            *p = (*p)->next;
            return;
        }
}

/* Maps a switch of import_compat_why's list: kept when its value is what
 * shardc does, else left out of the spec with a warning saying what shardc
 * does instead (a DeepSpeed user must not believe it took effect). */
static void import_compat(Imp *im, const char *ds_path, const char *spec)
{
    const char *why = import_compat_why(spec);
    if (!why) die("import: %s is not a compatibility switch", spec);
    if (import_map(im, ds_path, spec) != J_OK) return;
    Ent *e = import_ent(im, spec);
    if (!e || strcmp(e->val, e->k->def) == 0) return;
    cJSON *v = import_get(&im->ds, ds_path);
    char *text = v ? cJSON_PrintUnformatted(v) : NULL;
    import_ignored(im, ds_path, arena_printf(&g_arena, "%s is not honoured: %s", text ? text : e->val, why));
    free(text);
    import_unput(im, spec);
}

/* ======================================================================== */
/* the DeepSpeed keys: mapped, ignored, unknown                              */
/* ======================================================================== */

/* How a known DeepSpeed key is treated. */
enum {
    K_VAL,      /* mapped by the code below                                */
    K_OBJ,      /* an object whose members are checked against this table  */
    K_OWN,      /* an object whose members the mapping code checks itself  */
    K_IGN,      /* no shardc equivalent: a warning (unless `same`)         */
};

typedef struct DsKey {
    const char *path;
    int kind;
    const char *why;            /* K_IGN: the reason, after "ignored:"      */
    const char *same;           /* K_IGN: a value (compact JSON) that is
                                   what shardc always does: no warning     */
} DsKey;

#define NOEQ "no shardc equivalent"

static const DsKey ds_keys[] = {
    /* batch and logging */
    {"train_batch_size", K_VAL, 0, 0},
    {"train_micro_batch_size_per_gpu", K_VAL, 0, 0},
    {"gradient_accumulation_steps", K_VAL, 0, 0},
    {"steps_per_print", K_VAL, 0, 0},
    {"gradient_clipping", K_VAL, 0, 0},
    {"communication_data_type", K_VAL, 0, 0},
    {"optimizer", K_OBJ, 0, 0},
    {"optimizer.type", K_VAL, 0, 0},
    {"optimizer.params", K_OWN, 0, 0},
    {"optimizer.legacy_fusion", K_IGN, NOEQ " (an implementation detail of DeepSpeed's fused optimizers)", "false"},
    {"scheduler", K_OBJ, 0, 0},
    {"scheduler.type", K_VAL, 0, 0},
    {"scheduler.params", K_OWN, 0, 0},
    /* precision */
    {"fp16", K_OBJ, 0, 0},
    {"fp16.enabled", K_VAL, 0, 0},
    {"fp16.loss_scale", K_VAL, 0, 0},
    {"fp16.initial_scale_power", K_VAL, 0, 0},
    {"fp16.loss_scale_window", K_VAL, 0, 0},
    {"fp16.hysteresis", K_VAL, 0, 0},
    {"fp16.min_loss_scale", K_VAL, 0, 0},
    {"fp16.consecutive_hysteresis", K_IGN, NOEQ, "false"},
    {"fp16.auto_cast", K_IGN, NOEQ " (the step casts exactly what precision.dtype says)", "false"},
    {"fp16.fp16_master_weights_and_grads", K_IGN, "shardc keeps fp32 master weights (precision.master_weights)", "false"},
    {"bf16", K_OBJ, 0, 0},
    {"bf16.enabled", K_VAL, 0, 0},
    {"bf16.immediate_grad_update", K_IGN, NOEQ, 0},
    {"bf16.check_grad_overflow", K_IGN, NOEQ, "false"},
    {"bf16.bf16_master_weights_and_grads", K_IGN, "shardc keeps fp32 master weights (precision.master_weights)", "false"},
    {"bfloat16", K_OBJ, 0, 0},
    {"bfloat16.enabled", K_VAL, 0, 0},
    {"amp", K_IGN, NOEQ " (Apex AMP; use fp16 or bf16)", 0},
    /* ZeRO */
    {"zero_optimization", K_OBJ, 0, 0},
    {"zero_optimization.stage", K_VAL, 0, 0},
    {"zero_optimization.contiguous_gradients", K_VAL, 0, 0},
    {"zero_optimization.reduce_scatter", K_VAL, 0, 0},
    {"zero_optimization.reduce_bucket_size", K_VAL, 0, 0},
    {"zero_optimization.allgather_partitions", K_IGN, "shardc always all-gathers the updated partitions", "true"},
    {"zero_optimization.allgather_bucket_size", K_VAL, 0, 0},
    {"zero_optimization.overlap_comm", K_VAL, 0, 0},
    {"zero_optimization.sub_group_size", K_VAL, 0, 0},
    {"zero_optimization.stage3_prefetch_bucket_size", K_VAL, 0, 0},
    {"zero_optimization.stage3_param_persistence_threshold", K_VAL, 0, 0},
    {"zero_optimization.stage3_max_live_parameters", K_VAL, 0, 0},
    {"zero_optimization.stage3_max_reuse_distance", K_VAL, 0, 0},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", K_IGN,
     NOEQ " (shardc checkpoints are layout-independent and always hold whole tensors)", 0},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", K_IGN,
     NOEQ " (shardc checkpoints are layout-independent and always hold whole tensors)", 0},
    {"zero_optimization.stage3_model_persistence_threshold", K_IGN, NOEQ, 0},
    {"zero_optimization.stage3_module_granularity_threshold", K_IGN, NOEQ, 0},
    {"zero_optimization.module_granularity_threshold", K_IGN, NOEQ, 0},
    {"zero_optimization.offload_param", K_OBJ, 0, 0},
    {"zero_optimization.offload_optimizer", K_OBJ, 0, 0},
    {"zero_optimization.cpu_offload", K_VAL, 0, 0},
    {"zero_optimization.cpu_offload_params", K_VAL, 0, 0},
    {"zero_optimization.cpu_offload_use_pin_memory", K_VAL, 0, 0},
    {"zero_optimization.round_robin_gradients", K_IGN, NOEQ " (the schedule fixes the order of gradient copies)", "false"},
    {"zero_optimization.elastic_checkpoint", K_IGN, "shardc checkpoints always resume under any layout", 0},
    {"zero_optimization.load_from_fp32_weights", K_IGN, "shardc always resumes from the fp32 master weights", "true"},
    {"zero_optimization.ignore_unused_parameters", K_IGN, NOEQ " (every parameter of a shardc model is used)", 0},
    {"zero_optimization.legacy_stage1", K_IGN, NOEQ, "false"},
    {"zero_optimization.zero_hpz_partition_size", K_IGN, NOEQ " (ZeRO++ hierarchical partitioning)", "1"},
    {"zero_optimization.zero_quantized_weights", K_IGN, NOEQ " (ZeRO++ quantized weights)", "false"},
    {"zero_optimization.zero_quantized_nontrainable_weights", K_IGN, NOEQ, "false"},
    {"zero_optimization.zero_quantized_gradients", K_IGN, NOEQ " (ZeRO++ quantized gradients)", "false"},
    {"zero_optimization.mics_shard_size", K_IGN, NOEQ " (MiCS)", "-1"},
    {"zero_optimization.mics_hierarchical_params_gather", K_IGN, NOEQ " (MiCS)", "false"},
    {"zero_optimization.memory_efficient_linear", K_IGN, NOEQ, "true"},
    {"zero_optimization.pipeline_loading_checkpoint", K_IGN, NOEQ, "false"},
    {"zero_optimization.override_module_apply", K_IGN, NOEQ, "true"},
    {"zero_optimization.use_multi_rank_bucket_allreduce", K_IGN, NOEQ, "true"},
    {"zero_optimization.log_trace_cache_warnings", K_IGN, NOEQ " (the fetch order is fixed at compile time)", "false"},
    {"zero_optimization.offload_param.device", K_VAL, 0, 0},
    {"zero_optimization.offload_param.nvme_path", K_VAL, 0, 0},
    {"zero_optimization.offload_param.buffer_count", K_VAL, 0, 0},
    {"zero_optimization.offload_param.buffer_size", K_VAL, 0, 0},
    {"zero_optimization.offload_param.max_in_cpu", K_VAL, 0, 0},
    {"zero_optimization.offload_param.pin_memory", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.device", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.nvme_path", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.buffer_count", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.pin_memory", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.pipeline_read", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.pipeline_write", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.ratio", K_VAL, 0, 0},
    {"zero_optimization.offload_optimizer.fast_init", K_IGN, NOEQ, "false"},
    /* activation checkpointing */
    {"activation_checkpointing", K_OBJ, 0, 0},
    {"activation_checkpointing.partition_activations", K_VAL, 0, 0},
    {"activation_checkpointing.cpu_checkpointing", K_VAL, 0, 0},
    {"activation_checkpointing.contiguous_memory_optimization", K_IGN,
     "shardc's activations always live in one pre-planned arena", "true"},
    {"activation_checkpointing.number_checkpoints", K_IGN,
     NOEQ " (the planner counts the checkpoints itself)", 0},
    {"activation_checkpointing.synchronize_checkpoint_boundary", K_IGN, NOEQ, "false"},
    {"activation_checkpointing.profile", K_IGN, NOEQ " (the trainer's --trace measures every op)", "false"},
    /* asynchronous I/O for NVMe offload */
    {"aio", K_OBJ, 0, 0},
    {"aio.block_size", K_VAL, 0, 0},
    {"aio.queue_depth", K_VAL, 0, 0},
    {"aio.intra_op_parallelism", K_IGN, NOEQ " (shardc's NVMe I/O goes through io_uring)", "1"},
    {"aio.single_submit", K_IGN, NOEQ " (shardc's NVMe I/O goes through io_uring)", "false"},
    {"aio.overlap_events", K_IGN, "shardc always overlaps NVMe requests", "true"},
    {"aio.use_gds", K_IGN, NOEQ " (GPUDirect Storage)", "false"},
    {"aio.thread_count", K_IGN, NOEQ, "1"},
    /* everything else DeepSpeed knows */
    {"wall_clock_breakdown", K_IGN, NOEQ " (`shardc plan` predicts, and the trainer's --trace measures, every op)", "false"},
    {"memory_breakdown", K_IGN, NOEQ " (`shardc plan` lists every buffer of every rank)", "false"},
    {"dump_state", K_IGN, NOEQ, "false"},
    {"prescale_gradients", K_IGN, NOEQ " (gradients are averaged in the reduction)", "false"},
    {"gradient_predivide_factor", K_IGN, NOEQ " (gradients are averaged in the reduction)", "1"},
    {"sparse_gradients", K_IGN, NOEQ, "false"},
    {"zero_allow_untested_optimizer", K_IGN, NOEQ " (every shardc optimizer works with every ZeRO stage)", 0},
    {"zero_force_ds_cpu_optimizer", K_IGN, NOEQ " (the host optimizer step is shardc's own)", 0},
    {"flops_profiler", K_IGN, NOEQ " (`shardc plan` reports FLOPs, MFU and step time)", 0},
    {"tensorboard", K_IGN, NOEQ " (the trainer writes JSONL metrics)", 0},
    {"wandb", K_IGN, NOEQ " (the trainer writes JSONL metrics)", 0},
    {"csv_monitor", K_IGN, NOEQ " (the trainer writes JSONL metrics)", 0},
    {"comet", K_IGN, NOEQ " (the trainer writes JSONL metrics)", 0},
    {"comms_logger", K_IGN, NOEQ " (`shardc plan` lists every collective)", 0},
    {"autotuning", K_IGN, NOEQ " (compare layouts with `shardc plan -D ...`)", 0},
    {"elasticity", K_IGN, NOEQ " (checkpoints resume under any layout instead)", 0},
    {"sparse_attention", K_IGN, NOEQ, 0},
    {"data_efficiency", K_IGN, NOEQ, 0},
    {"curriculum_learning", K_IGN, NOEQ, 0},
    {"progressive_layer_drop", K_IGN, NOEQ, 0},
    {"quantize_training", K_IGN, NOEQ, 0},
    {"compression_training", K_IGN, NOEQ, 0},
    {"eigenvalue", K_IGN, NOEQ, 0},
    {"nebula", K_IGN, NOEQ " (checkpoints are written atomically by the trainer)", 0},
    {"checkpoint", K_IGN, NOEQ " (the trainer's --ckpt-dir; checkpoints are layout-independent)", 0},
    {"data_types", K_IGN, NOEQ " (gradients are reduced in precision.grad_reduce)", 0},
    {"pipeline", K_IGN, NOEQ " (set parallel.pp and parallel.schedule in the spec)", 0},
    {"tensor_parallel", K_IGN, NOEQ " (set parallel.tp in the spec)", 0},
    {"hybrid_engine", K_IGN, NOEQ, 0},
    {"weight_quantization", K_IGN, NOEQ, 0},
    {"compile", K_IGN, NOEQ " (the trainer is compiled C already)", 0},
    {"timers", K_IGN, NOEQ, 0},
    {"dataloader_drop_last", K_IGN, NOEQ " (the data loader's global batch is fixed)", 0},
    {"disable_allgather", K_IGN, NOEQ, "false"},
    {"seq_parallel_communication_data_type", K_IGN, NOEQ, 0},
    {"use_data_before_expert_parallel_", K_IGN, NOEQ, 0},
    {"graph_harvesting", K_IGN, NOEQ, "false"},
    {"torch_autocast", K_IGN, NOEQ " (the step casts exactly what precision.dtype says)", 0},
};

/* The table entry of a DeepSpeed key path, or NULL. */
static const DsKey *import_ds_key(const char *path)
{
    for (size_t i = 0; i < sizeof ds_keys / sizeof ds_keys[0]; i++)
        if (strcmp(ds_keys[i].path, path) == 0) return &ds_keys[i];
    return NULL;
}

/* The known member names of a DeepSpeed object (for did-you-mean). */
static int import_ds_members(const char *parent, const char **out, int cap)
{
    size_t plen = strlen(parent);
    int n = 0;
    for (size_t i = 0; i < sizeof ds_keys / sizeof ds_keys[0] && n < cap; i++) {
        const char *p = ds_keys[i].path;
        const char *name = p;
        if (plen) {
            if (strncmp(p, parent, plen) != 0 || p[plen] != '.') continue;
            name = p + plen + 1;
        }
        if (!strchr(name, '.')) out[n++] = name;
    }
    return n;
}

/* Warns about an unknown key, suggesting the closest known one. */
static void import_unknown(const JDoc *d, const char *path, const char *name, const char *const *cands,
                           int n, const char *what)
{
    diag_warning(import_key_loc(d, path), "%s: not a %s key; ignored", path, what);
    const char *s = schema_suggest(name, cands, n);
    if (s) diag_hint("did you mean '%s'?", s);
}

/* Walks an object of the config: warns about ignored and unknown members. */
static void import_walk(Imp *im, const cJSON *obj, const char *prefix)
{
    const char *cands[256];
    int n = import_ds_members(prefix, cands, 256);
    for (const cJSON *c = obj->child; c; c = c->next) {
        const char *name = c->string ? c->string : "";
        const char *path = *prefix ? arena_printf(&g_arena, "%s.%s", prefix, name) : name;
        const DsKey *k = import_ds_key(path);
        if (!k) {
            import_unknown(&im->ds, path, name, cands, n, "DeepSpeed");
        } else if (k->kind == K_OBJ && cJSON_IsObject(c)) {
            import_walk(im, c, path);
        } else if (k->kind == K_IGN) {
            /* quiet when the value is what shardc does anyway, or the feature is off */
            char *js = cJSON_PrintUnformatted(c);
            bool same = k->same && js && strcmp(js, k->same) == 0;
            free(js);
            bool off = cJSON_IsObject(c) && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "enabled"));
            if (!same && !off) import_ignored(im, path, k->why);
        }
    }
}

/* ======================================================================== */
/* the Hugging Face model config                                             */
/* ======================================================================== */

/* How a config.json key maps onto model.*. */
typedef struct HfKey {
    const char *hf, *spec;
    const char *hf_default;     /* the value HF uses when the key is absent,
                                   emitted because shardc's default differs */
} HfKey;

static const HfKey hf_gpt2[] = {
    {"n_layer", "model.layers", "12"},
    {"n_embd", "model.hidden", "768"},
    {"n_head", "model.heads", "12"},
    {"vocab_size", "model.vocab", "50257"},
    {"n_positions", "model.seq_len", "1024"},
    {"n_inner", "model.ffn_hidden", NULL},
    {"layer_norm_epsilon", "model.norm_eps", NULL},
    {"initializer_range", "model.init_std", NULL},
    {"tie_word_embeddings", "model.tie_embeddings", NULL},
};

static const HfKey hf_llama[] = {
    {"num_hidden_layers", "model.layers", "32"},
    {"hidden_size", "model.hidden", "4096"},
    {"num_attention_heads", "model.heads", "32"},
    {"num_key_value_heads", "model.kv_heads", NULL},
    {"intermediate_size", "model.ffn_hidden", "11008"},
    {"vocab_size", "model.vocab", "32000"},
    {"max_position_embeddings", "model.seq_len", "2048"},
    {"rope_theta", "model.rope_theta", NULL},
    {"rms_norm_eps", "model.norm_eps", "1e-6"},
    {"initializer_range", "model.init_std", NULL},
    {"tie_word_embeddings", "model.tie_embeddings", NULL},
    {"attention_bias", "model.bias", NULL},
};

/* Maps one config.json key; an absent key takes HF's default if it has one. */
static void import_hf_key(Imp *im, const HfKey *h, const char *alias)
{
    const JDoc *d = &im->hf;
    const SchemaKey *k = import_key(h->spec);
    const char *path = h->hf;
    cJSON *v = import_get(d, path);
    if ((!v || cJSON_IsNull(v)) && alias) {
        path = alias;
        v = import_get(d, path);
    }
    if (!v || cJSON_IsNull(v)) {
        if (h->hf_default)
            import_put(im, h->spec, h->hf_default, "%s absent: Hugging Face's default", h->hf);
        return;
    }
    if (k->type == T_BOOL) {
        if (!cJSON_IsBool(v)) {
            import_type_error(d, path, v, "true or false");
            return;
        }
        import_put(im, h->spec, cJSON_IsTrue(v) ? "on" : "off", "%s", path);
        return;
    }
    bool integral = k->type == T_INT;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        (integral && (v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > IMPORT_INT_MAX))) {
        import_type_error(d, path, v, integral ? "an integer" : "a number");
        return;
    }
    if (import_out_of_range(k, v->valuedouble)) {
        diag_error(import_val_loc(d, path), "%s: %s is out of range", path, import_fmt_number(k, v->valuedouble));
        diag_hint("it becomes %s, which takes %s", k->path, import_range_text(k));
        return;
    }
    import_put(im, h->spec, import_fmt_number(k, v->valuedouble), "%s", path);
    if (strcmp(h->spec, "model.hidden") == 0) im->hidden = (int64_t)v->valuedouble;
}

/* A string member of the HF config, or NULL (absent or reported). */
static const char *import_hf_str(Imp *im, const char *path)
{
    const char *s = NULL;
    if (import_get_str(&im->hf, path, &s) == J_AUTO) s = "auto";
    return s;
}

/* GPT-2 specifics: the activation and dropout. */
static void import_hf_gpt2_extra(Imp *im)
{
    const char *act = import_hf_str(im, "activation_function");
    if (act) {
        if (strcmp(act, "relu") == 0) {
            import_put(im, "model.activation", "relu", "activation_function");
        } else if (strncmp(act, "gelu", 4) != 0) {
            diag_error(import_val_loc(&im->hf, "activation_function"),
                       "activation_function \"%s\": shardc's GPT models use gelu or relu", act);
        }
    }
    /* one warning for the three dropout rates, at the first one set */
    static const char *const drops[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop"};
    for (int i = 0; i < 3; i++) {
        double p = 0;
        if (import_get_num(&im->hf, drops[i], &p) == J_OK && p > 0) {
            diag_warning(import_key_loc(&im->hf, drops[i]),
                         "resid_pdrop, embd_pdrop, attn_pdrop: ignored: shardc trains without dropout");
            break;
        }
    }
}

/* Llama specifics: the activation, head_dim, the biases, attention dropout. */
static void import_hf_llama_extra(Imp *im)
{
    const char *act = import_hf_str(im, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        diag_error(import_val_loc(&im->hf, "hidden_act"),
                   "hidden_act \"%s\": shardc's Llama models use silu (SwiGLU)", act);
    int64_t hd = 0, hidden = 0, heads = 0;
    if (import_get_int(&im->hf, "head_dim", &hd) == J_OK &&
        import_get_int(&im->hf, "hidden_size", &hidden) == J_OK &&
        import_get_int(&im->hf, "num_attention_heads", &heads) == J_OK && heads > 0 &&
        hd != hidden / heads) {
        diag_error(import_val_loc(&im->hf, "head_dim"),
                   "head_dim %lld differs from hidden_size / num_attention_heads = %lld / %lld = %lld",
                   (long long)hd, (long long)hidden, (long long)heads, (long long)(hidden / heads));
        diag_hint("shardc's attention heads are hidden / heads wide");
    }
    /* Hugging Face's defaults: no biases (mlp_bias is newer than attention_bias) */
    bool ab = false, mb = false;
    import_get_bool(&im->hf, "attention_bias", &ab);
    if (import_get_bool(&im->hf, "mlp_bias", &mb) != J_BAD && mb != ab)
        diag_error(import_key_loc(&im->hf, import_find_key(&im->hf, "mlp_bias") ? "mlp_bias" : "attention_bias"),
                   "attention_bias %s with mlp_bias %s: shardc cannot train biases on some linear layers only",
                   ab ? "true" : "false", mb ? "true" : "false");
    double p = 0;
    if (import_get_num(&im->hf, "attention_dropout", &p) == J_OK && p > 0)
        diag_warning(import_key_loc(&im->hf, "attention_dropout"),
                     "attention_dropout: ignored: shardc trains without dropout");
}

/* A config.json key for what shardc cannot train: an error at the key unless
 * its value is one of `off` (the JSON texts meaning "not used"). */
typedef struct HfNo {
    const char *model_type;     /* "gpt2", "llama", or "" for both          */
    const char *key;
    const char *off;            /* ' '-separated JSON values that are fine  */
    const char *why;
} HfNo;

static const HfNo hf_no[] = {
    {"llama", "rope_scaling", "null", "shardc's RoPE has no scaling (rope_theta only)"},
    {"llama", "sliding_window", "null", "shardc's attention is full causal attention, without a sliding window"},
    {"llama", "use_sliding_window", "false", "shardc's attention is full causal attention, without a sliding window"},
    {"", "num_local_experts", "null 0 1", "shardc has no mixture of experts"},
    {"", "num_experts", "null 0 1", "shardc has no mixture of experts"},
    {"", "n_routed_experts", "null 0 1", "shardc has no mixture of experts"},
    {"", "num_experts_per_tok", "null 0 1", "shardc has no mixture of experts"},
    {"gpt2", "scale_attn_weights", "true", "shardc always scales attention scores by 1/sqrt(head size)"},
    {"gpt2", "scale_attn_by_inverse_layer_idx", "false", "shardc scales attention scores by 1/sqrt(head size) only"},
    {"gpt2", "add_cross_attention", "false", "shardc's GPT has no cross-attention"},
};

/* Reports every key of hf_no that config.json sets to something shardc cannot train. */
static void import_hf_unsupported(Imp *im, const char *model_type)
{
    for (size_t i = 0; i < sizeof hf_no / sizeof hf_no[0]; i++) {
        const HfNo *h = &hf_no[i];
        cJSON *v = import_get(&im->hf, h->key);
        if (!v || (*h->model_type && strcmp(h->model_type, model_type) != 0)) continue;
        char *text = cJSON_PrintUnformatted(v);
        bool fine = false;
        for (const char *p = h->off; text && *p;) {
            size_t n = strcspn(p, " ");
            fine |= strlen(text) == n && strncmp(p, text, n) == 0;
            p += n + (p[n] == ' ');
        }
        if (!fine)     /* a long value (rope_scaling's object) shortened */
            diag_error(import_val_loc(&im->hf, h->key), "%s %.32s%s: %s", h->key, text ? text : "?",
                       text && strlen(text) > 32 ? "..." : "", h->why);
        free(text);
    }
}

/* Reads config.json into the model block. */
static void import_hf(Imp *im)
{
    const char *mt = NULL;
    int r = import_get_str(&im->hf, "model_type", &mt);
    if (r == J_ABSENT) {
        diag_plain("%s has no model_type; shardc imports gpt2 and llama configs", im->hf.src.path);
        return;
    }
    if (r != J_OK) {
        if (r == J_AUTO) diag_error(import_val_loc(&im->hf, "model_type"), "model_type is \"auto\"");
        return;
    }
    const HfKey *keys;
    int n;
    if (strcmp(mt, "gpt2") == 0) {
        im->model_family = "gpt";
        keys = hf_gpt2;
        n = (int)(sizeof hf_gpt2 / sizeof hf_gpt2[0]);
    } else if (strcmp(mt, "llama") == 0) {
        im->model_family = "llama";
        keys = hf_llama;
        n = (int)(sizeof hf_llama / sizeof hf_llama[0]);
    } else {
        diag_error(import_val_loc(&im->hf, "model_type"), "model_type \"%s\": shardc imports gpt2 and llama", mt);
        static const char *const types[] = {"gpt2", "llama"};
        const char *s = schema_suggest(mt, types, 2);
        if (s) diag_hint("did you mean '%s'?", s);
        return;
    }
    im->hidden = 0;
    for (int i = 0; i < n; i++)
        import_hf_key(im, &keys[i], strcmp(keys[i].hf, "n_positions") == 0 ? "n_ctx" : NULL);
    if (!im->hidden) {
        Ent *e = import_ent(im, "model.hidden");
        if (e) im->hidden = (int64_t)strtod(e->val, NULL);
    }
    if (im->model_family[0] == 'g') import_hf_gpt2_extra(im);
    else import_hf_llama_extra(im);
    import_hf_unsupported(im, mt);
}

/* ======================================================================== */
/* mapping the DeepSpeed sections                                            */
/* ======================================================================== */

/* Reports an "auto" that needs the model, when no --hf was given. */
static void import_auto_needs_model(Imp *im, const char *path, const char *rule)
{
    diag_error(import_val_loc(&im->ds, path), "%s is \"auto\": it needs the model's hidden size", path);
    diag_hint("pass --hf config.json (Hugging Face sets it to %s)", rule);
}

/* A bucket or threshold that may be "auto": HF's rule from the hidden size. */
static void import_auto_size(Imp *im, const char *ds_path, const char *spec, const char *rule)
{
    cJSON *v = import_get(&im->ds, ds_path);
    if (!import_is_auto(v)) {
        import_map(im, ds_path, spec);
        return;
    }
    if (!im->have_hf) {
        import_auto_needs_model(im, ds_path, rule);
        return;
    }
    if (im->hidden <= 0) return;        /* the model's error says why */
    double h = (double)im->hidden;
    int64_t val = strcmp(rule, "hidden*hidden") == 0 ? im->hidden * im->hidden
                : strcmp(rule, "0.9*hidden*hidden") == 0 ? (int64_t)(0.9 * h * h)
                : 10 * im->hidden;
    const SchemaKey *k = import_key(spec);
    if (import_out_of_range(k, (double)val)) {
        import_range_error(im, ds_path, k, (double)val);
        return;
    }
    import_put(im, spec, import_fmt_int(val), "%s \"auto\": %s = %s with hidden = %lld", ds_path,
               rule, import_fmt_int(val), (long long)im->hidden);
}

/* zero_optimization: stage, buckets, the stage-3 keys; the offloads. */
static void import_zero(Imp *im)
{
    im->stage = 0;
    cJSON *z = import_get(&im->ds, "zero_optimization");
    if (cJSON_IsBool(z)) {
        /* DeepSpeed's old form: true means stage 1 */
        im->stage = cJSON_IsTrue(z) ? 1 : 0;
        import_put(im, "zero.stage", cJSON_IsTrue(z) ? "1" : "0", "zero_optimization: %s (the old form)",
                   cJSON_IsTrue(z) ? "true" : "false");
        return;
    }
    if (!import_get_obj(&im->ds, "zero_optimization")) return;
    int64_t st = 0;
    int r = import_map(im, "zero_optimization.stage", "zero.stage");
    if (r == J_OK) {
        import_get_int(&im->ds, "zero_optimization.stage", &st);
        im->stage = st;
    } else if (r == J_BAD || r == J_AUTO) {
        im->stage = -1;         /* unknown: skip the stage-dependent checks */
    }
    import_compat(im, "zero_optimization.contiguous_gradients", "zero.contiguous_gradients");
    import_compat(im, "zero_optimization.reduce_scatter", "zero.reduce_scatter");
    import_auto_size(im, "zero_optimization.reduce_bucket_size", "zero.reduce_bucket", "hidden*hidden");
    import_map(im, "zero_optimization.allgather_bucket_size", "zero.allgather_bucket");
    import_map(im, "zero_optimization.overlap_comm", "zero.overlap_comm");
    import_map(im, "zero_optimization.sub_group_size", "zero.sub_group_size");

    static const struct { const char *ds, *spec, *rule; } s3[] = {
        {"zero_optimization.stage3_prefetch_bucket_size", "zero.prefetch_bucket", "0.9*hidden*hidden"},
        {"zero_optimization.stage3_param_persistence_threshold", "zero.param_persistence_threshold", "10*hidden"},
        {"zero_optimization.stage3_max_live_parameters", "zero.max_live_parameters", NULL},
        {"zero_optimization.stage3_max_reuse_distance", "zero.max_reuse_distance", NULL},
    };
    for (size_t i = 0; i < sizeof s3 / sizeof s3[0]; i++) {
        if (!import_get(&im->ds, s3[i].ds)) continue;
        if (im->stage >= 0 && im->stage < 3) {
            /* DeepSpeed reads these only at stage 3 (and HF leaves them "auto") */
            import_ignored(im, s3[i].ds, "applies only to ZeRO stage 3");
            continue;
        }
        if (s3[i].rule) import_auto_size(im, s3[i].ds, s3[i].spec, s3[i].rule);
        else import_map(im, s3[i].ds, s3[i].spec);
    }
}

/* The offload device of one offload block ("none", "cpu", "nvme"), or NULL. */
static const char *import_offload_device(Imp *im, const char *block)
{
    const char *path = arena_printf(&g_arena, "zero_optimization.%s.device", block);
    const char *dev = NULL;
    int r = import_get_str(&im->ds, path, &dev);
    if (r == J_ABSENT) return "none";
    if (r == J_AUTO) {
        import_auto_error(im, path);
        return NULL;
    }
    if (r != J_OK) return NULL;
    if (strcmp(dev, "none") && strcmp(dev, "cpu") && strcmp(dev, "nvme")) {
        diag_error(import_val_loc(&im->ds, path), "%s: \"%s\" is not a device", path, dev);
        static const char *const devs[] = {"none", "cpu", "nvme"};
        const char *s = schema_suggest(dev, devs, 3);
        if (s) diag_hint("did you mean \"%s\"? (none, cpu or nvme)", s);
        else diag_hint("the devices are none, cpu and nvme");
        return NULL;
    }
    return dev;
}

/* True when `name` is one of the '|'-separated values of list. */
static bool import_in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, "|");
        if (m == n && strncmp(p, name, n) == 0) return true;
        p += m;
        if (*p == '|') p++;
    }
    return false;
}

/* One offload block: the device, then the members that apply to it. */
static void import_offload_block(Imp *im, const char *block, const char *spec, int min_stage,
                                 const char *need)
{
    const char *bpath = arena_printf(&g_arena, "zero_optimization.%s", block);
    if (!import_get_obj(&im->ds, bpath)) return;
    const char *dev = import_offload_device(im, block);
    if (!dev || strcmp(dev, "none") == 0) return;
    const char *dpath = arena_printf(&g_arena, "%s.device", bpath);
    if (im->stage >= 0 && im->stage < min_stage) {
        diag_error(import_val_loc(&im->ds, dpath), "%s \"%s\" needs %s, but zero_optimization.stage is %lld",
                   dpath, dev, need, (long long)im->stage);
        diag_hint("set \"stage\": %d, or remove %s (DeepSpeed would ignore it silently)", min_stage, bpath);
        return;
    }
    import_put(im, spec, dev, "%s", dpath);
    static const struct { const char *ds, *sub; } members[] = {
        {"pin_memory", "pin_memory"}, {"nvme_path", "path"}, {"buffer_count", "buffer_count"},
        {"buffer_size", "buffer_size"}, {"max_in_cpu", "max_in_cpu"}, {"ratio", "ratio"},
        {"pipeline_read", "pipeline_read"}, {"pipeline_write", "pipeline_write"},
    };
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        const char *mpath = arena_printf(&g_arena, "%s.%s", bpath, members[i].ds);
        const char *sp = arena_printf(&g_arena, "%s.%s", spec, members[i].sub);
        if (!import_ds_key(mpath)) continue;            /* not a member of this block */
        cJSON *v = import_get(&im->ds, mpath);
        if (!v || cJSON_IsNull(v)) continue;
        const SchemaKey *k = import_key(sp);
        if (*k->when && !import_in_list(k->when, dev)) {
            import_ignored(im, mpath, arena_printf(&g_arena, "applies only to device %s", k->when));
            continue;
        }
        if (k->type == T_STRING) {
            const char *s = NULL;
            int r = import_get_str(&im->ds, mpath, &s);
            if (r == J_AUTO) import_auto_error(im, mpath);
            if (r != J_OK) continue;
            if (strchr(s, '"') || strchr(s, '\\') || strchr(s, '\n')) {
                diag_error(import_val_loc(&im->ds, mpath), "%s: a path with quotes, backslashes or newlines", mpath);
                continue;
            }
            import_put(im, sp, arena_printf(&g_arena, "\"%s\"", s), "%s", mpath);
        } else if (import_compat_why(sp)) {
            import_compat(im, mpath, sp);
        } else {
            import_map(im, mpath, sp);
        }
    }
    if (strcmp(dev, "nvme") == 0 && !import_ent(im, arena_printf(&g_arena, "%s.path", spec))) {
        diag_error(import_val_loc(&im->ds, dpath), "%s is \"nvme\" but %s.nvme_path is missing", dpath, bpath);
        diag_hint("add \"nvme_path\": \"/local_nvme\" (a directory on the NVMe device)");
    }
    double ratio = 1;
    if (import_get_num(&im->ds, arena_printf(&g_arena, "%s.ratio", bpath), &ratio) == J_OK && ratio < 1 &&
        im->stage >= 0 && im->stage != 3) {
        diag_error(import_val_loc(&im->ds, arena_printf(&g_arena, "%s.ratio", bpath)),
                   "%s.ratio %s: partial offload needs ZeRO stage 3, but zero_optimization.stage is %lld",
                   bpath, import_fmt_float(ratio), (long long)im->stage);
    }
}

/* Both offload blocks, and DeepSpeed's deprecated cpu_offload flags. */
static void import_offload(Imp *im)
{
    if (!cJSON_IsObject(import_get(&im->ds, "zero_optimization"))) return;
    bool on = false, pin = false, legacy = false;
    int rpin = import_get_bool(&im->ds, "zero_optimization.cpu_offload_use_pin_memory", &pin);
    if (import_get_bool(&im->ds, "zero_optimization.cpu_offload", &on) == J_OK && on) {
        if (im->stage == 0) {
            diag_error(import_val_loc(&im->ds, "zero_optimization.cpu_offload"),
                       "zero_optimization.cpu_offload needs ZeRO stage 1, 2 or 3, but zero_optimization.stage is 0");
        } else {
            import_put(im, "offload.optimizer", "cpu", "zero_optimization.cpu_offload (deprecated form)");
            legacy = true;
            if (rpin == J_OK && pin)
                import_put(im, "offload.optimizer.pin_memory", pin ? "on" : "off",
                           "zero_optimization.cpu_offload_use_pin_memory");
        }
    }
    if (import_get_bool(&im->ds, "zero_optimization.cpu_offload_params", &on) == J_OK && on) {
        if (im->stage >= 0 && im->stage != 3) {
            diag_error(import_val_loc(&im->ds, "zero_optimization.cpu_offload_params"),
                       "zero_optimization.cpu_offload_params needs ZeRO stage 3, but zero_optimization.stage is %lld",
                       (long long)im->stage);
        } else {
            import_put(im, "offload.params", "cpu", "zero_optimization.cpu_offload_params (deprecated form)");
            legacy = true;
            if (rpin == J_OK && pin)
                import_put(im, "offload.params.pin_memory", pin ? "on" : "off",
                           "zero_optimization.cpu_offload_use_pin_memory");
        }
    }
    if (rpin == J_OK && legacy && !pin)
        import_ignored(im, "zero_optimization.cpu_offload_use_pin_memory",
                       arena_printf(&g_arena, "false is not honoured: %s", import_compat_why("offload.optimizer.pin_memory")));
    else if (rpin == J_OK && !legacy)
        import_ignored(im, "zero_optimization.cpu_offload_use_pin_memory",
                       "applies only with cpu_offload or cpu_offload_params set to true");
    import_offload_block(im, "offload_optimizer", "offload.optimizer", 1, "ZeRO stage 1, 2 or 3");
    import_offload_block(im, "offload_param", "offload.params", 3, "ZeRO stage 3");
}

/* aio: the NVMe request size and depth. */
static void import_aio(Imp *im)
{
    if (!import_get_obj(&im->ds, "aio")) return;
    int64_t bs = 0;
    if (import_get_int(&im->ds, "aio.block_size", &bs) == J_OK && bs % 4096 != 0) {
        diag_error(import_val_loc(&im->ds, "aio.block_size"), "aio.block_size %lld is not a multiple of 4096",
                   (long long)bs);
        diag_hint("shardc's NVMe I/O uses O_DIRECT, aligned to 4096 bytes: try %lld", (long long)((bs / 4096 + 1) * 4096));
    } else {
        import_map(im, "aio.block_size", "offload.aio.block_size");
    }
    import_map(im, "aio.queue_depth", "offload.aio.queue_depth");
}

/* The fp16 block when it is enabled: dtype and loss scaling. */
static void import_fp16(Imp *im)
{
    const char *lsp = "fp16.loss_scale";
    double scale = 0;
    int r = import_get_num(&im->ds, lsp, &scale);
    if (r == J_AUTO) import_auto_error(im, lsp);
    if (r == J_BAD || r == J_AUTO) return;
    static const struct { const char *ds, *spec; } dyn[] = {
        {"fp16.initial_scale_power", "precision.loss_scale.initial_scale_power"},
        {"fp16.loss_scale_window", "precision.loss_scale.window"},
        {"fp16.hysteresis", "precision.loss_scale.hysteresis"},
        {"fp16.min_loss_scale", "precision.loss_scale.min_scale"},
    };
    if (r == J_OK && scale != 0) {
        const SchemaKey *k = import_key("precision.loss_scale.scale");
        if (import_out_of_range(k, scale)) {
            import_range_error(im, lsp, k, scale);
            return;
        }
        import_put(im, "precision.loss_scale", "static", "fp16.loss_scale %s", import_fmt_float(scale));
        import_put(im, "precision.loss_scale.scale", import_fmt_float(scale), "fp16.loss_scale");
        for (size_t i = 0; i < sizeof dyn / sizeof dyn[0]; i++)
            if (import_get(&im->ds, dyn[i].ds))
                import_ignored(im, dyn[i].ds, "fp16.loss_scale is static (not 0)");
        return;
    }
    import_put(im, "precision.loss_scale", "dynamic", r == J_OK ? "fp16.loss_scale 0" : "fp16.loss_scale absent: 0 (dynamic)");
    for (size_t i = 0; i < sizeof dyn / sizeof dyn[0]; i++) import_map(im, dyn[i].ds, dyn[i].spec);
}

/* fp16 / bf16: the step's dtype; both at once is an error. */
static void import_precision(Imp *im)
{
    bool fp16 = false, bf16 = false;
    const char *bfname = import_get(&im->ds, "bf16") ? "bf16" : "bfloat16";
    const char *fpen = "fp16.enabled", *bfen = arena_printf(&g_arena, "%s.enabled", bfname);
    int rf = import_get_obj(&im->ds, "fp16") ? import_get_bool(&im->ds, fpen, &fp16) : J_ABSENT;
    int rb = import_get_obj(&im->ds, bfname) ? import_get_bool(&im->ds, bfen, &bf16) : J_ABSENT;
    if (rf == J_AUTO) import_auto_error(im, fpen);
    if (rb == J_AUTO) import_auto_error(im, bfen);
    if (rf == J_AUTO || rf == J_BAD || rb == J_AUTO || rb == J_BAD) return;
    if (fp16 && bf16) {
        diag_error(import_val_loc(&im->ds, bfen), "fp16 and bf16 are both enabled");
        diag_note(import_val_loc(&im->ds, fpen), "fp16 enabled here");
        diag_hint("enable one of them (bf16 needs no loss scaling)");
        return;
    }
    if (fp16) {
        import_put(im, "precision.dtype", "fp16", "%s", fpen);
        import_fp16(im);
    } else if (bf16) {
        import_put(im, "precision.dtype", "bf16", "%s", bfen);
    } else {
        import_put(im, "precision.dtype", "fp32", "neither fp16 nor bf16 is enabled");
    }
    const char *cdt = NULL;
    int r = import_get_str(&im->ds, "communication_data_type", &cdt);
    if (r == J_AUTO) import_auto_error(im, "communication_data_type");
    if (r == J_OK) {
        static const struct { const char *ds, *spec; } dts[] = {
            {"fp32", "fp32"}, {"float32", "fp32"}, {"fp16", "fp16"}, {"float16", "fp16"},
            {"bf16", "bf16"}, {"bfloat16", "bf16"}, {"bfp16", "bf16"},
        };
        const char *to = NULL;
        for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
            if (strcasecmp(cdt, dts[i].ds) == 0) to = dts[i].spec;
        if (!to) {
            diag_error(import_val_loc(&im->ds, "communication_data_type"),
                       "communication_data_type \"%s\" is not a dtype", cdt);
            diag_hint("use \"fp32\", \"fp16\" or \"bf16\"");
        } else {
            import_put(im, "precision.grad_reduce", to, "communication_data_type");
        }
    }
}

/* activation_checkpointing: DeepSpeed's checkpoint() recomputes whole layers. */
static void import_checkpointing(Imp *im)
{
    if (!import_get_obj(&im->ds, "activation_checkpointing")) return;
    import_put(im, "checkpointing.activations", "full",
               "activation_checkpointing present: DeepSpeed's checkpoint() recomputes whole layers");
    bool pa = false;
    int r = import_get_bool(&im->ds, "activation_checkpointing.partition_activations", &pa);
    if (r == J_AUTO) import_auto_error(im, "activation_checkpointing.partition_activations");
    if (r == J_OK && pa)
        import_ignored(im, "activation_checkpointing.partition_activations",
                       "it splits activations across the tensor-parallel group, and a DeepSpeed ZeRO job has tp = 1");
    import_map(im, "activation_checkpointing.cpu_checkpointing", "checkpointing.cpu");
}

/* The batch keys, in the order of DeepSpeed's arithmetic. */
static const char *const import_batch_keys[3] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                                 "gradient_accumulation_steps"};

/* Reports that the global batch does not split into whole micro-batches. */
static void import_batch_indivisible(Imp *im, int64_t batch, const char *by, int64_t n, const char *what)
{
    diag_error(import_val_loc(&im->ds, import_batch_keys[0]), "train_batch_size %lld is not divisible by %s = %lld",
               (long long)batch, by, (long long)n);
    diag_hint("%s must be a whole number", what);
}

/* Fills in the batch numbers that were not given, exactly as DeepSpeed's
 * _set_batch_related_parameters; why[] says how each was found.  False
 * (reported) when the given ones do not fit together. */
static bool import_batch_derive(Imp *im, int64_t v[3], const int r[3], const char *why[3])
{
    const char *const *P = import_batch_keys;
    bool T = r[0] == J_OK, M = r[1] == J_OK, G = r[2] == J_OK;
    int64_t dp = im->dp;
    const char *by;
    if (T && M && G) {
        if (v[0] == v[1] * v[2] * dp) return true;
        diag_error(import_val_loc(&im->ds, P[0]),
                   "train_batch_size = %lld, but train_micro_batch_size_per_gpu x gradient_accumulation_steps "
                   "x dp = %lld x %lld x %lld = %lld",
                   (long long)v[0], (long long)v[1], (long long)v[2], (long long)dp, (long long)(v[1] * v[2] * dp));
        diag_hint("dp = nodes x gpus_per_node = %lld x %lld; fix one of the three, or give two of them",
                  (long long)im->o->nodes, (long long)im->o->gpus_per_node);
        return false;
    }
    if (T && M) {
        if (v[0] % (v[1] * dp) != 0) {
            by = arena_printf(&g_arena, "train_micro_batch_size_per_gpu x dp = %lld x %lld", (long long)v[1], (long long)dp);
            import_batch_indivisible(im, v[0], by, v[1] * dp, "gradient_accumulation_steps = train_batch_size / (micro-batch x dp)");
            return false;
        }
        v[2] = v[0] / (v[1] * dp);
        why[2] = arena_printf(&g_arena, "derived: train_batch_size / (micro-batch * dp) = %lld / (%lld * %lld)",
                              (long long)v[0], (long long)v[1], (long long)dp);
        return true;
    }
    if (T && G) {
        if (v[0] % (v[2] * dp) != 0) {
            by = arena_printf(&g_arena, "gradient_accumulation_steps x dp = %lld x %lld", (long long)v[2], (long long)dp);
            import_batch_indivisible(im, v[0], by, v[2] * dp, "train_micro_batch_size_per_gpu = train_batch_size / (accumulation x dp)");
            return false;
        }
        v[1] = v[0] / (v[2] * dp);
        why[1] = arena_printf(&g_arena, "derived: train_batch_size / (gradient_accumulation_steps * dp) = %lld / (%lld * %lld)",
                              (long long)v[0], (long long)v[2], (long long)dp);
        return true;
    }
    if (M && G) {
        v[0] = v[1] * v[2] * dp;
        why[0] = arena_printf(&g_arena, "derived: micro-batch * gradient_accumulation_steps * dp = %lld * %lld * %lld",
                              (long long)v[1], (long long)v[2], (long long)dp);
        return true;
    }
    /* one of the two alone: DeepSpeed sets the accumulation to 1 */
    if (r[2] == J_AUTO) {
        import_auto_error(im, P[2]);
        return false;
    }
    v[2] = 1;
    why[2] = "derived: absent, 1 as in DeepSpeed";
    if (T) {
        if (v[0] % dp != 0) {
            import_batch_indivisible(im, v[0], "dp", dp, "train_micro_batch_size_per_gpu = train_batch_size / dp");
            return false;
        }
        v[1] = v[0] / dp;
        why[1] = arena_printf(&g_arena, "derived: train_batch_size / dp = %lld / %lld", (long long)v[0], (long long)dp);
    } else {
        v[0] = v[1] * dp;
        why[0] = arena_printf(&g_arena, "derived: micro-batch * dp = %lld * %lld", (long long)v[1], (long long)dp);
    }
    return true;
}

/* The batch keys: any two of micro-batch, accumulation and global batch give
 * the third through dp; all three go into the spec. */
static void import_batch(Imp *im)
{
    const char *const *P = import_batch_keys;
    int64_t v[3] = {0, 0, 0};
    int r[3];
    bool bad = false;
    for (int i = 0; i < 3; i++) {
        r[i] = import_get_int(&im->ds, P[i], &v[i]);
        if (r[i] == J_BAD) bad = true;
        if (r[i] == J_OK && v[i] < 1) {
            diag_error(import_val_loc(&im->ds, P[i]), "%s: %lld is not a positive number", P[i], (long long)v[i]);
            bad = true;
        }
    }
    if (bad) return;
    if (r[0] != J_OK && r[1] != J_OK) {
        /* nothing to derive from: say which "auto" is the trouble, if any */
        for (int i = 0; i < 3; i++)
            if (r[i] == J_AUTO) {
                import_auto_error(im, P[i]);
                return;
            }
        diag_error(import_file_loc(&im->ds), "the DeepSpeed config gives neither train_batch_size nor "
                   "train_micro_batch_size_per_gpu");
        diag_hint("DeepSpeed needs one of them too; add \"train_micro_batch_size_per_gpu\" to %s", im->ds.src.path);
        return;
    }
    if (im->dp == 0) {
        diag_error(import_key_loc(&im->ds, r[0] == J_OK ? P[0] : P[1]),
                   "train_batch_size = micro-batch x accumulation x dp needs the data-parallel size");
        diag_hint("pass --nodes N --gpus-per-node G (dp = N x G: DeepSpeed's ZeRO has no tp or pp)");
        return;
    }
    const char *why[3] = {P[0], P[1], P[2]};
    if (!import_batch_derive(im, v, r, why)) return;
    static const char *const S[3] = {"train.global_batch", "train.micro_batch", "train.grad_accum"};
    for (int i = 0; i < 3; i++) {
        const SchemaKey *k = import_key(S[i]);
        if (import_out_of_range(k, (double)v[i])) {
            diag_error(import_val_loc(&im->ds, r[i] == J_OK ? P[i] : P[0]), "%s = %lld is out of range", P[i],
                       (long long)v[i]);
            diag_hint("it becomes %s, which takes %s", k->path, import_range_text(k));
            return;
        }
        const char *from = r[i] == J_AUTO ? arena_printf(&g_arena, "%s \"auto\", %s", P[i], why[i]) : why[i];
        import_put(im, S[i], import_fmt_int(v[i]), "%s", from);
    }
}

/* Warns about the members of a params object that the mapping does not know. */
static void import_params_rest(Imp *im, const char *prefix, const char *const *known, int nknown,
                               const char *what)
{
    cJSON *p = import_get_obj(&im->ds, prefix);
    if (!p) return;
    for (cJSON *c = p->child; c; c = c->next) {
        const char *name = c->string ? c->string : "";
        bool found = false;
        for (int i = 0; i < nknown; i++)
            if (strcmp(name, known[i]) == 0) found = true;
        if (!found)
            import_unknown(&im->ds, arena_printf(&g_arena, "%s.%s", prefix, name), name, known, nknown, what);
    }
}

/* The optimizer's type: adamw, adam or sgd, or NULL (reported). */
static const char *import_optimizer_type(Imp *im, const char **from)
{
    const char *type = NULL;
    int r = import_get_str(&im->ds, "optimizer.type", &type);
    if (r == J_AUTO) import_auto_error(im, "optimizer.type");
    if (r == J_ABSENT) {
        diag_error(import_key_loc(&im->ds, "optimizer"), "optimizer has no type");
        diag_hint("add \"type\": \"AdamW\" (or Adam, SGD)");
    }
    if (r != J_OK) return NULL;
    if (strcasecmp(type, "adamw") == 0) {
        *from = "optimizer.type AdamW";
        return "adamw";
    }
    if (strcasecmp(type, "adam") == 0) {
        /* DeepSpeed's Adam decouples weight decay unless told otherwise */
        bool w = true;
        if (import_get_bool(&im->ds, "optimizer.params.adam_w_mode", &w) == J_OK && !w) {
            *from = "optimizer.type Adam, adam_w_mode false";
            return "adam";
        }
        *from = "optimizer.type Adam: DeepSpeed's Adam is AdamW unless adam_w_mode is false";
        return "adamw";
    }
    if (strcasecmp(type, "sgd") == 0) {
        *from = "optimizer.type SGD";
        return "sgd";
    }
    static const char *const known[] = {"Adam", "AdamW", "SGD", "Lamb", "OneBitAdam", "OneBitLamb",
                                        "ZeroOneAdam", "Adagrad", "Lion", "MuAdam", "MuAdamW", "MuSGD"};
    bool ds_knows = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasecmp(type, known[i]) == 0) ds_knows = true;
    diag_error(import_val_loc(&im->ds, "optimizer.type"), "optimizer.type \"%s\": %s", type,
               ds_knows ? "shardc has no such optimizer" : "not a DeepSpeed optimizer");
    const char *s = ds_knows ? NULL : schema_suggest(type, known, 3);
    if (s) diag_hint("did you mean \"%s\"?", s);
    else diag_hint("shardc's optimizers are AdamW, Adam (with adam_w_mode false) and SGD");
    return NULL;
}

/* optimizer.params.betas: [beta1, beta2] becomes (beta1, beta2). */
static void import_betas(Imp *im)
{
    const char *path = "optimizer.params.betas";
    cJSON *b = import_get(&im->ds, path);
    if (import_is_auto(b)) {
        import_auto_error(im, path);
        return;
    }
    if (!b || cJSON_IsNull(b)) return;
    if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(b, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(b, 1))) {
        import_type_error(&im->ds, path, b, "two numbers [beta1, beta2]");
        return;
    }
    double b1 = cJSON_GetArrayItem(b, 0)->valuedouble, b2 = cJSON_GetArrayItem(b, 1)->valuedouble;
    if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1) {
        diag_error(import_val_loc(&im->ds, path), "%s: each beta must be in [0, 1)", path);
        return;
    }
    import_put(im, "train.optimizer.betas",
               arena_printf(&g_arena, "(%s, %s)", import_fmt_float(b1), import_fmt_float(b2)), "%s", path);
}

/* The params of Adam and AdamW beyond lr and weight decay. */
static void import_adam_params(Imp *im)
{
    import_betas(im);
    import_map(im, "optimizer.params.eps", "train.optimizer.eps");
    bool flag = false;
    if (import_get_bool(&im->ds, "optimizer.params.amsgrad", &flag) == J_OK && flag)
        import_ignored(im, "optimizer.params.amsgrad", NOEQ " (shardc's Adam has no AMSGrad variant)");
    if (import_get_bool(&im->ds, "optimizer.params.bias_correction", &flag) == J_OK && !flag)
        import_ignored(im, "optimizer.params.bias_correction", "shardc's Adam always corrects the bias");
    static const char *const known[] = {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "amsgrad",
                                        "bias_correction", "torch_adam", "fused"};
    import_params_rest(im, "optimizer.params", known, 9, "DeepSpeed Adam/AdamW");
}

/* The params of SGD beyond lr and weight decay. */
static void import_sgd_params(Imp *im)
{
    import_map(im, "optimizer.params.momentum", "train.optimizer.momentum");
    double x = 0;
    bool nest = false;
    if (import_get_num(&im->ds, "optimizer.params.dampening", &x) == J_OK && x != 0)
        import_ignored(im, "optimizer.params.dampening", NOEQ " (shardc's SGD has no dampening)");
    if (import_get_bool(&im->ds, "optimizer.params.nesterov", &nest) == J_OK && nest)
        import_ignored(im, "optimizer.params.nesterov", NOEQ " (shardc's SGD momentum is not Nesterov's)");
    static const char *const known[] = {"lr", "momentum", "weight_decay", "dampening", "nesterov"};
    import_params_rest(im, "optimizer.params", known, 5, "DeepSpeed SGD");
}

/* optimizer: the type, the learning rate (DeepSpeed's default 1e-3), the rest. */
static void import_optimizer(Imp *im)
{
    im->lr = 1e-3;
    im->lr_set = false;
    if (!import_get(&im->ds, "optimizer")) {
        diag_warning(import_file_loc(&im->ds), "no optimizer block: DeepSpeed would use the one your script "
                     "builds; the spec gets shardc's default (%s, lr %s)", import_key("train.optimizer")->def,
                     import_key("train.optimizer.lr")->def);
        return;
    }
    if (!import_get_obj(&im->ds, "optimizer")) return;
    const char *from = NULL;
    const char *opt = import_optimizer_type(im, &from);
    if (!opt) return;
    import_put(im, "train.optimizer", opt, "%s", from);
    if (import_get(&im->ds, "optimizer.params") && !import_get_obj(&im->ds, "optimizer.params")) return;
    int rl = import_map(im, "optimizer.params.lr", "train.optimizer.lr");
    if (rl == J_OK) {
        import_get_num(&im->ds, "optimizer.params.lr", &im->lr);
        im->lr_set = true;
    } else if (rl == J_ABSENT) {
        /* DeepSpeed's (and torch's) default differs from shardc's */
        import_put(im, "train.optimizer.lr", "1e-3", "optimizer.params.lr absent: DeepSpeed's default");
    }
    import_map(im, "optimizer.params.weight_decay", "train.optimizer.weight_decay");
    if (strcmp(opt, "sgd") == 0) import_sgd_params(im);
    else import_adam_params(im);
}

/* Reads a scheduler parameter with its DeepSpeed default; false on error. */
static bool import_sched_num(Imp *im, const char *name, double def, double *out, bool *given)
{
    const char *path = arena_printf(&g_arena, "scheduler.params.%s", name);
    *given = false;
    *out = def;
    cJSON *v = import_get(&im->ds, path);
    if (import_is_auto(v) && strcmp(name, "warmup_min_lr") == 0) {
        *given = true;          /* Hugging Face always fills it with 0 */
        *out = 0;
        return true;
    }
    int r = import_get_num(&im->ds, path, out);
    if (r == J_AUTO) import_auto_error(im, path);
    if (r == J_AUTO || r == J_BAD) return false;
    if (r == J_OK) *given = true;
    if (r == J_OK && *out < 0) {
        diag_error(import_val_loc(&im->ds, path), "%s: %s is negative", path, import_fmt_float(*out));
        return false;
    }
    return true;
}

/* The scheduler types DeepSpeed knows; the first three map onto shardc's. */
enum { DS_WARMUP_LR, DS_WARMUP_DECAY, DS_WARMUP_COSINE, DS_NSCHEDULERS = 5 };

/* The warm-up: its length (DeepSpeed's default 1000) and its curve; -1 on error. */
static double import_sched_warmup(Imp *im, int t)
{
    double warm = 1000;
    bool given;
    if (!import_sched_num(im, "warmup_num_steps", 1000, &warm, &given)) return -1;
    if (warm != floor(warm) || warm > IMPORT_INT_MAX) {   /* cast to int64_t below */
        diag_error(import_val_loc(&im->ds, "scheduler.params.warmup_num_steps"),
                   "scheduler.params.warmup_num_steps: expected an integer, got %s", import_fmt_float(warm));
        return -1;
    }
    import_put(im, "train.lr_schedule.warmup", import_fmt_int((int64_t)warm),
               given ? "scheduler.params.warmup_num_steps" : "scheduler.params.warmup_num_steps absent: DeepSpeed's default");
    /* DeepSpeed has no run length; shardc's must cover the warm-up */
    double steps = strtod(import_key("train.steps")->def, NULL);
    if (t == DS_WARMUP_LR && warm > steps)
        import_put(im, "train.steps", import_fmt_int((int64_t)warm),
                   "derived: the run must cover the warm-up (DeepSpeed has no run length); set yours");

    /* DeepSpeed warms up on a log curve unless warmup_type says linear */
    const char *wt = "log";
    const char *wtp = "scheduler.params.warmup_type";
    int rt = import_get_str(&im->ds, wtp, &wt);
    if (rt == J_AUTO) import_auto_error(im, wtp);
    if (rt == J_BAD || rt == J_AUTO) return -1;
    if (strcmp(wt, "log") != 0 && strcmp(wt, "linear") != 0) {
        diag_error(import_val_loc(&im->ds, wtp), "%s \"%s\": DeepSpeed knows log and linear", wtp, wt);
        return -1;
    }
    if (strcmp(wt, "log") == 0 && warm > 0) {
        Loc at = rt == J_OK ? import_val_loc(&im->ds, wtp) : import_val_loc(&im->ds, "scheduler.type");
        diag_warning(at, "%s is \"log\"%s: shardc warms up linearly", wtp, rt == J_OK ? "" : " (DeepSpeed's default)");
        diag_hint("add \"warmup_type\": \"linear\" to the scheduler's params to match");
    }
    return warm;
}

/* WarmupLR and WarmupDecayLR: the schedule, not the optimizer, sets the peak
 * (warmup_max_lr); WarmupDecayLR decays to warmup_min_lr. */
static void import_sched_peak(Imp *im, int t)
{
    double minlr = 0, maxlr = 1e-3;
    bool mgiven, given;
    bool ok = import_sched_num(im, "warmup_min_lr", 0, &minlr, &mgiven);
    if (!import_sched_num(im, "warmup_max_lr", 1e-3, &maxlr, &given) || !ok) return;
    const SchemaKey *k = import_key("train.optimizer.lr");
    if (maxlr <= 0 || import_out_of_range(k, maxlr)) {
        import_range_error(im, "scheduler.params.warmup_max_lr", k, maxlr);
        return;
    }
    if (im->lr_set && im->lr != maxlr)
        diag_warning(import_key_loc(&im->ds, "optimizer.params.lr"),
                     "optimizer.params.lr %s is overridden by scheduler.params.warmup_max_lr %s, as in DeepSpeed",
                     import_fmt_float(im->lr), import_fmt_float(maxlr));
    import_put(im, "train.optimizer.lr", import_fmt_float(maxlr),
               given ? "scheduler.params.warmup_max_lr" : "scheduler.params.warmup_max_lr absent: DeepSpeed's default");
    im->lr = maxlr;
    if (t == DS_WARMUP_LR) {
        if (minlr != 0)
            diag_warning(import_key_loc(&im->ds, "scheduler.params.warmup_min_lr"),
                         "scheduler.params.warmup_min_lr: ignored: shardc's warm-up starts at 0");
        return;
    }
    if (minlr > maxlr) {
        diag_error(import_val_loc(&im->ds, "scheduler.params.warmup_min_lr"),
                   "scheduler.params.warmup_min_lr %s is above warmup_max_lr %s", import_fmt_float(minlr),
                   import_fmt_float(maxlr));
        return;
    }
    if (mgiven) import_put(im, "train.lr_schedule.min_lr", import_fmt_float(minlr), "scheduler.params.warmup_min_lr");
}

/* WarmupCosineLR: the floor is a ratio of the optimizer's lr. */
static void import_sched_cosine(Imp *im)
{
    double wmr = 0, cmr = 0.0001;
    bool given;
    if (import_sched_num(im, "warmup_min_ratio", 0, &wmr, &given) && wmr != 0)
        diag_warning(import_key_loc(&im->ds, "scheduler.params.warmup_min_ratio"),
                     "scheduler.params.warmup_min_ratio: ignored: shardc's warm-up starts at 0");
    if (!import_sched_num(im, "cos_min_ratio", 0.0001, &cmr, &given)) return;
    double min_lr = import_round15(cmr * im->lr);
    import_put(im, "train.lr_schedule.min_lr", import_fmt_float(min_lr), "%s cos_min_ratio x lr = %s x %s",
               given ? "scheduler.params" : "DeepSpeed's default", import_fmt_float(cmr), import_fmt_float(im->lr));
}

/* The decaying schedules' length (DeepSpeed requires it): decay_steps and steps. */
static void import_sched_length(Imp *im, const char *type, double warm)
{
    const char *tp = "scheduler.params.total_num_steps";
    int64_t tn = 0;
    int rn = import_get_int(&im->ds, tp, &tn);
    if (rn == J_AUTO) import_auto_error(im, tp);
    if (rn == J_ABSENT) {
        diag_error(import_key_loc(&im->ds, "scheduler.params"), "scheduler %s needs total_num_steps", type);
        diag_hint("add \"total_num_steps\" to the scheduler's params");
    }
    if (rn != J_OK) return;
    if (warm >= 0 && tn <= (int64_t)warm) {
        diag_error(import_val_loc(&im->ds, tp), "%s %lld is not after the warm-up (%lld steps)", tp, (long long)tn,
                   (long long)warm);
        return;
    }
    import_put(im, "train.lr_schedule.decay_steps", import_fmt_int(tn), "%s", tp);
    import_put(im, "train.steps", import_fmt_int(tn), "%s: the schedule's length", tp);
}

/* scheduler: WarmupLR, WarmupDecayLR and WarmupCosineLR onto lr_schedule. */
static void import_scheduler(Imp *im)
{
    if (!import_get_obj(&im->ds, "scheduler")) return;
    const char *type = NULL;
    int r = import_get_str(&im->ds, "scheduler.type", &type);
    if (r == J_AUTO) import_auto_error(im, "scheduler.type");
    if (r == J_ABSENT) diag_error(import_key_loc(&im->ds, "scheduler"), "scheduler has no type");
    if (r != J_OK) return;
    static const char *const types[DS_NSCHEDULERS] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
                                                    "LRRangeTest"};
    int t = -1;
    for (int i = 0; i < DS_NSCHEDULERS; i++)
        if (strcmp(type, types[i]) == 0) t = i;
    if (t < 0 || t > DS_WARMUP_COSINE) {
        diag_error(import_val_loc(&im->ds, "scheduler.type"), "scheduler.type \"%s\": %s", type,
                   t < 0 ? "not a DeepSpeed scheduler" : "shardc has no such schedule");
        const char *s = t < 0 ? schema_suggest(type, types, DS_NSCHEDULERS) : NULL;
        if (s) diag_hint("did you mean \"%s\"?", s);
        else diag_hint("shardc maps WarmupLR (constant), WarmupDecayLR (linear) and WarmupCosineLR (cosine)");
        return;
    }
    if (import_get(&im->ds, "scheduler.params") && !import_get_obj(&im->ds, "scheduler.params")) return;
    static const char *const warmup_lr[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                                            "last_batch_iteration", "total_num_steps"};
    static const char *const cosine[] = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
                                         "cos_min_ratio", "warmup_type", "last_batch_iteration"};
    import_params_rest(im, "scheduler.params", t == DS_WARMUP_COSINE ? cosine : warmup_lr,
                       t == DS_WARMUP_LR ? 5 : 6, arena_printf(&g_arena, "DeepSpeed %s", type));

    static const char *const sched[] = {"constant", "linear", "cosine"};
    import_put(im, "train.lr_schedule", sched[t], "scheduler.type %s", type);
    double warm = import_sched_warmup(im, t);
    if (t == DS_WARMUP_COSINE) import_sched_cosine(im);
    else import_sched_peak(im, t);
    if (t != DS_WARMUP_LR) import_sched_length(im, type, warm);
}

/* ======================================================================== */
/* writing the spec                                                          */
/* ======================================================================== */

/* The column at which comments start. */
#define IMPORT_COMMENT_COL 34

/* Does path sit directly under prefix (one more segment)? */
static bool import_is_child(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n && (strncmp(path, prefix, n) != 0 || path[n] != '.')) return false;
    return !strchr(path + (n ? n + 1 : 0), '.');
}

/* Is any entry at or under prefix? */
static bool import_any_under(const Imp *im, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const Ent *e = im->ents; e; e = e->next)
        if (strncmp(e->k->path, prefix, n) == 0 && (e->k->path[n] == '.' || e->k->path[n] == 0)) return true;
    return false;
}

/* Writes one line `key = value  # from`, the comment aligned. */
static void import_line(FILE *f, int depth, const char *text, const char *from)
{
    int n = fprintf(f, "%*s%s", 2 * depth, "", text);
    if (from && *from) fprintf(f, "%*s# %s", n < IMPORT_COMMENT_COL ? IMPORT_COMMENT_COL - n : 1, "", from);
    fputc('\n', f);
}

/* Writes the entries under prefix in schema order, nesting value blocks and
 * plain sub-blocks (`aio { .. }`). */
static void import_render(FILE *f, const Imp *im, const char *prefix, int depth)
{
    size_t n = strlen(prefix);
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i];
        if (import_is_child(k->path, prefix)) {
            Ent *e = import_ent((Imp *)im, k->path), dflt = {k, k->def, "shardc's default", NULL};
            if (!e && import_any_under(im, k->path)) e = &dflt;     /* a -D under an enum left as it is */
            if (!e) continue;
            const char *name = k->path + n + 1;
            bool block = false;
            for (int j = 0; j < schema_nkeys && !block; j++)
                if (import_is_child(schema_keys[j].path, k->path) && import_ent((Imp *)im, schema_keys[j].path))
                    block = true;
            import_line(f, depth, arena_printf(&g_arena, "%s = %s%s", name, e->val, block ? " {" : ""), e->from);
            if (block) {
                import_render(f, im, k->path, depth + 1);
                import_line(f, depth, "}", NULL);
            }
            continue;
        }
        /* a plain block inside prefix: render it at its first key */
        if (strncmp(k->path, prefix, n) != 0 || k->path[n] != '.') continue;
        const char *rest = k->path + n + 1;
        size_t seg = strcspn(rest, ".");
        char *sub = arena_strndup(&g_arena, k->path, n + 1 + seg);
        if (schema_find(sub)) continue;                     /* a value block: handled above */
        bool first = true;
        for (int j = 0; j < i; j++)
            if (strncmp(schema_keys[j].path, sub, strlen(sub)) == 0 && schema_keys[j].path[strlen(sub)] == '.')
                first = false;
        if (!first || !import_any_under(im, sub)) continue;
        import_line(f, depth, arena_printf(&g_arena, "%.*s {", (int)seg, rest), NULL);
        import_render(f, im, sub, depth + 1);
        import_line(f, depth, "}", NULL);
    }
}

/* The whole spec text: a header, the model block, then each block in schema order. */
static char *import_text(Imp *im, size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) die("open_memstream failed");
    if (im->ds_name)
        fprintf(f, "# Imported by `shardc import deepspeed` from %s%s%s.\n", im->ds_name,
                im->have_hf ? " and " : "", im->have_hf ? im->hf_name : "");
    else
        fprintf(f, "# Imported by `shardc import hf` from %s.\n", im->hf_name);
    fprintf(f, "# Each key names the DeepSpeed or Hugging Face key it came from; keys not\n"
               "# written here take shardc's defaults (`shardc check` prints them all).\n");
    const char *done[16];
    int ndone = 0;
    for (int i = 0; i < schema_nkeys; i++) {
        const char *p = schema_keys[i].path;
        size_t seg = strcspn(p, ".");
        char *top = arena_strndup(&g_arena, p, seg);
        bool seen = false;
        for (int j = 0; j < ndone; j++)
            if (strcmp(done[j], top) == 0) seen = true;
        if (seen || ndone == 16) continue;
        done[ndone++] = top;
        if (!import_any_under(im, top)) continue;
        fputc('\n', f);
        const Ent *e = schema_find(top) ? import_ent(im, top) : NULL;
        if (e)          /* the enum that heads a block: `model gpt {` */
            import_line(f, 0, arena_printf(&g_arena, "%s %s {", top, e->val), e->from);
        else
            import_line(f, 0, arena_printf(&g_arena, "%s {", top), NULL);
        import_render(f, im, top, 1);
        import_line(f, 0, "}", NULL);
    }
    if (fclose(f) != 0) die("writing to memory failed");
    char *text = arena_strndup(&g_arena, buf, size);
    free(buf);
    *len = size;
    return text;
}

/* The last component of a path, for comments. */
static const char *import_base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The cluster: nodes and GPUs as given, a GPU profile to be set by the user. */
static void import_cluster(Imp *im)
{
    if (im->o->nodes) import_put(im, "cluster.nodes", import_fmt_int(im->o->nodes), "--nodes");
    if (im->o->gpus_per_node)
        import_put(im, "cluster.gpus_per_node", import_fmt_int(im->o->gpus_per_node), "--gpus-per-node");
    const SchemaKey *k = import_key("cluster.gpu");
    char *list = arena_strdup(&g_arena, k->enums);
    for (char *p = list; *p; p++)
        if (*p == '|') *p = ' ';
    import_put(im, "cluster.gpu", "a100_80gb", "not in the %s: set yours (%s)",
               im->ds_name ? "DeepSpeed config" : "model's config", list);
}

/* The first '{' of text[0..n) outside a string, or NULL. */
static const char *import_brace(const char *text, size_t n)
{
    bool quoted = false;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '"' && (i == 0 || text[i - 1] != '\\')) quoted = !quoted;
        else if (text[i] == '{' && !quoted) return text + i;
    }
    return NULL;
}

/* Drops the entries under the enum at path that its new value val does not
 * carry (as -D does to a spec's keys when it changes their enum). */
static void import_drop_stale(Imp *im, const char *path, const char *val)
{
    size_t n = strlen(path);
    for (Ent *e = im->ents, *next; e; e = next) {
        next = e->next;
        const char *p = e->k->path;
        if (strncmp(p, path, n) == 0 && p[n] == '.' && !strchr(p + n + 1, '.') && *e->k->when &&
            !strchr(e->k->when, '=') && !import_in_list(e->k->when, val))
            import_unput(im, p);
    }
}

/* Writes -D path=text into the spec: `key = value  # -D`, replacing what the
 * DeepSpeed config gave; a value that carries a block (nvme { path = "/x" })
 * becomes the value and one entry per key inside it. */
static void import_override(Imp *im, const char *path, const char *text)
{
    size_t n = strlen(text);
    while (n && strchr(" \t\r\n", text[n - 1])) n--;
    while (n && strchr(" \t\r\n", *text)) text++, n--;
    const char *brace = import_brace(text, n);
    size_t hn = brace ? (size_t)(brace - text) : n;
    while (hn && strchr(" \t\r\n", text[hn - 1])) hn--;
    if (hn) {
        const SchemaKey *k = schema_find(path);
        if (!k) {
            diag_plain("-D %s: not a key of the spec language (docs/spec-reference.md lists them)", path);
            return;
        }
        const char *val = arena_strndup(&g_arena, text, hn);
        import_put(im, path, val, "-D %s", path);
        if (k->type == T_ENUM) import_drop_stale(im, path, val);
    } else if (!brace) {
        diag_plain("-D %s= has no value (write it like -D %s=4)", path, path);
        return;
    }
    if (!brace) return;
    if (text[n - 1] != '}') {
        diag_plain("-D %s: the block after '%.*s' is not closed with '}'", path, (int)hn, text);
        return;
    }
    const char *body = arena_strndup(&g_arena, brace + 1, (size_t)(text + n - 1 - (brace + 1)));
    size_t blen = strlen(body);
    int before = diag_errors;
    Item *items = spec_parse_text("-D", body, blen);
    if (diag_errors != before) return;
    /* each key's value is its text up to the next key (or the block's end),
     * in the parser's copy of the body, where the locations point */
    for (Item *it = items; it; it = it->next) {
        const SrcFile *f = it->loc.file;
        const char *start = it->kind == I_ASSIGN ? it->value->loc.pos : it->loc.pos + strlen(it->key);
        const char *end = it->next ? it->next->loc.pos : f->text + f->len;
        import_override(im, arena_printf(&g_arena, "%s.%s", path, it->key),
                        arena_strndup(&g_arena, start, (size_t)(end - start)));
    }
}

static int import_run(Imp *im);
static int import_finish(Imp *im);

/* Starts an import: im set up for o; false (a usage error reported) when
 * --nodes comes without --gpus-per-node or the other way round. */
static bool import_begin(Imp *im, const ImportOpts *o)
{
    memset(im, 0, sizeof *im);
    im->o = o;
    im->dp = o->nodes * o->gpus_per_node;
    if ((o->nodes == 0) == (o->gpus_per_node == 0)) return true;
    fprintf(stderr, "shardc: import: --nodes and --gpus-per-node go together (dp = nodes x gpus per node)\n");
    return false;
}

/* shardc import deepspeed: reads, maps, checks and writes; frees the JSON trees. */
int import_deepspeed(const ImportOpts *o)
{
    Imp im;
    if (!import_begin(&im, o)) return EXIT_USAGE;
    int rc = import_run(&im);
    cJSON_Delete(im.ds.root);
    cJSON_Delete(im.hf.root);
    return rc;
}

/* The import proper; returns the exit code. */
static int import_run(Imp *im)
{
    const ImportOpts *o = im->o;
    im->ds_name = import_base(o->ds_path);
    if (!import_load_json(&im->ds, o->ds_path, "DeepSpeed config")) return EXIT_USER;
    if (o->hf_path) {
        im->hf_name = import_base(o->hf_path);
        if (!import_load_json(&im->hf, o->hf_path, "Hugging Face config")) return EXIT_USER;
        im->have_hf = true;
        import_hf(im);
    }
    import_walk(im, im->ds.root, "");
    import_zero(im);
    import_offload(im);
    import_aio(im);
    import_precision(im);
    import_checkpointing(im);
    import_batch(im);
    import_optimizer(im);
    import_scheduler(im);
    import_map(im, "gradient_clipping", "train.grad_clip");
    import_map(im, "steps_per_print", "train.log_every");
    if (im->dp) import_cluster(im);
    if (!im->have_hf) {
        diag_plain("the DeepSpeed config has no model: pass --hf config.json (a Hugging Face GPT-2 or Llama config)");
    }
    if (diag_errors) return EXIT_USER;
    return import_finish(im);
}

/* The end of both imports: the model's enum, the -D overrides, the front end
 * on the text, then the text to -o or stdout. */
static int import_finish(Imp *im)
{
    const ImportOpts *o = im->o;
    if (im->model_family) import_put(im, "model", im->model_family, "model_type %s", im->model_family[0] == 'g' ? "gpt2" : "llama");
    for (int i = 0; i < o->nov; i++) import_override(im, o->ov[i].path, o->ov[i].text);
    if (diag_errors) return EXIT_USER;

    size_t len = 0;
    char *text = import_text(im, &len);
    /* The result must pass `shardc check`: run the front end on it here. */
    const char *name = o->out_path ? o->out_path
                       : arena_printf(&g_arena, "<import of %s>", im->ds_name ? im->ds_name : im->hf_name);
    Item *items = spec_parse_text(name, text, len);
    Spec spec;
    if (diag_errors || !sema_resolve(items, NULL, 0, &spec) || diag_errors) {
        diag_plain("the imported spec does not pass `shardc check` (the messages above point into it); nothing written");
        return EXIT_USER;
    }
    if (o->out_path && strcmp(o->out_path, "-") != 0) {
        if (!util_write_atomic(o->out_path, text, len)) {
            diag_plain("cannot write %s: %s", o->out_path, strerror(errno));
            return EXIT_USER;
        }
        return EXIT_OK;
    }
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        diag_plain("cannot write the spec to standard output: %s", strerror(errno));
        return EXIT_USER;
    }
    return EXIT_OK;
}

/* The layout of `import hf --nodes N --gpus-per-node G`: data parallel over
 * every GPU with ZeRO-3 (the model states split G·N ways), bf16, one sequence
 * per GPU per step; `shardc plan` then says whether it fits and what would. */
static void import_hf_layout(Imp *im)
{
    import_cluster(im);
    import_put(im, "parallel.tp", "1", "default layout: data parallel over every GPU");
    import_put(im, "parallel.pp", "1", "default layout");
    import_put(im, "zero.stage", "3", "default layout: parameters, gradients and optimizer state split over dp");
    import_put(im, "precision.dtype", "bf16", "default layout: bf16 with fp32 master weights");
    import_put(im, "train.micro_batch", "1", "default layout: set yours");
    import_put(im, "train.global_batch", import_fmt_int(im->dp), "default layout: one sequence per GPU; set yours");
}

/* shardc import hf config.json: the model block (and with --nodes and
 * --gpus-per-node a default layout) of a Hugging Face GPT-2 or Llama config. */
int import_hf_main(const ImportOpts *o)
{
    Imp im;
    if (!import_begin(&im, o)) return EXIT_USAGE;
    im.hf_name = import_base(o->hf_path);
    int rc = EXIT_USER;
    if (import_load_json(&im.hf, o->hf_path, "Hugging Face config")) {
        im.have_hf = true;
        import_hf(&im);
        if (im.dp) import_hf_layout(&im);
        rc = diag_errors ? EXIT_USER : import_finish(&im);
    }
    cJSON_Delete(im.hf.root);
    return rc;
}

/* Sets config.json key `hf` from spec key `spec` of s, typed by the schema. */
static void import_hf_config_key(cJSON *cfg, const Spec *s, const char *hf, const char *spec)
{
    const SchemaKey *k = import_key(spec);
    const void *p = (const char *)s + k->offset;
    if (k->type == T_BOOL) cJSON_AddBoolToObject(cfg, hf, *(const bool *)p);
    else if (k->type == T_INT) cJSON_AddNumberToObject(cfg, hf, (double)*(const int64_t *)p);
    else if (k->type == T_FLOAT) cJSON_AddNumberToObject(cfg, hf, *(const double *)p);
    else die("import: %s is not a number or a switch", spec);
}

/* Says why Hugging Face has no class for the model s describes, or NULL. */
static const char *import_hf_unexportable(const Spec *s)
{
    bool gpt = s->model.family == FAM_GPT;
    if (s->model.activation == ACT_EXTERN) return "a user-defined activation has no Hugging Face equivalent";
    if (gpt && s->model.activation == ACT_SWIGLU) return "Hugging Face's GPT-2 has no gated MLP (model.activation = swiglu)";
    if (gpt && s->model.kv_heads != s->model.heads) return "Hugging Face's GPT-2 has no grouped-query attention (model.kv_heads)";
    if (gpt && !s->model.bias) return "Hugging Face's GPT-2 always has biases (model.bias = off)";
    if (!gpt && s->model.activation != ACT_SWIGLU) return "Hugging Face's Llama always has a SwiGLU MLP (model.activation)";
    return NULL;
}

/* config.json for `shardc export` to a directory (see shardc.h). */
cJSON *import_hf_config(const Spec *s, const char *torch_dtype)
{
    const char *why = import_hf_unexportable(s);
    if (why) {
        diag_plain("cannot write config.json: %s", why);
        diag_hint("`shardc export CKPT -o FILE.safetensors` writes the weights alone");
        return NULL;
    }
    bool gpt = s->model.family == FAM_GPT;
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(cfg, "architectures"),
                         cJSON_CreateString(gpt ? "GPT2LMHeadModel" : "LlamaForCausalLM"));
    cJSON_AddStringToObject(cfg, "model_type", gpt ? "gpt2" : "llama");
    const HfKey *keys = gpt ? hf_gpt2 : hf_llama;
    int n = gpt ? (int)(sizeof hf_gpt2 / sizeof hf_gpt2[0]) : (int)(sizeof hf_llama / sizeof hf_llama[0]);
    for (int i = 0; i < n; i++) import_hf_config_key(cfg, s, keys[i].hf, keys[i].spec);
    if (gpt) {
        import_hf_config_key(cfg, s, "n_ctx", "model.seq_len");        /* the older name of n_positions */
        /* shardc's GELU is the tanh form: Hugging Face's gelu_new */
        cJSON_AddStringToObject(cfg, "activation_function", s->model.activation == ACT_RELU ? "relu" : "gelu_new");
        static const char *const drops[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop"};
        for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(cfg, drops[i], 0.0);   /* trained without dropout */
        cJSON_AddBoolToObject(cfg, "scale_attn_weights", true);
    } else {
        cJSON_AddStringToObject(cfg, "hidden_act", "silu");
        import_hf_config_key(cfg, s, "mlp_bias", "model.bias");
        cJSON_AddNumberToObject(cfg, "head_dim", (double)(s->model.hidden / s->model.heads));
        cJSON_AddNullToObject(cfg, "rope_scaling");
        cJSON_AddNumberToObject(cfg, "attention_dropout", 0.0);
        cJSON_AddNumberToObject(cfg, "pretraining_tp", 1);
    }
    cJSON_AddStringToObject(cfg, "torch_dtype", torch_dtype);
    return cfg;
}
