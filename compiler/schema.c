/* schema.c — the table of every key (from schema.def), look-ups over it, the
 * canonical spelling of numbers with units, and the generated reference
 * (docs/spec-reference.md).  sema.c and canon.c read the same table, so the
 * checker, the printer and the docs cannot disagree about a key.
 */
#include "shardc.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const SchemaKey schema_keys[] = {
#define KEY(path, type, field, unit, def, min, max, enums, when, doc) \
    {path, type, offsetof(Spec, field), unit, def, min, max, enums, when, doc},
#include "schema.def"
#undef KEY
};
const int schema_nkeys = (int)(sizeof schema_keys / sizeof schema_keys[0]);

_Static_assert(sizeof schema_keys / sizeof schema_keys[0] <= SPEC_MAX_KEYS,
               "more keys than Spec.set[] can record: raise SPEC_MAX_KEYS");
/* T_FLOAT2 keys write two adjacent doubles. */
_Static_assert(offsetof(Spec, train.beta2) == offsetof(Spec, train.beta1) + sizeof(double),
               "betas must be adjacent doubles");

/* Finds a key by its full dotted path. */
const SchemaKey *schema_find(const char *path)
{
    for (int i = 0; i < schema_nkeys; i++)
        if (strcmp(schema_keys[i].path, path) == 0) return &schema_keys[i];
    return NULL;
}

/* The key's position in schema_keys (the index of Spec.set[] and loc[]). */
int schema_index(const SchemaKey *k)
{
    return (int)(k - schema_keys);
}

/* Copies the idx-th '|'-separated name of list into buf; false past the end. */
static bool nth_name(const char *list, int idx, char *buf, size_t cap)
{
    const char *p = list;
    for (int i = 0; i < idx; i++) {
        p = strchr(p, '|');
        if (!p) return false;
        p++;
    }
    if (!*list) return false;
    size_t n = strcspn(p, "|");
    if (n >= cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return true;
}

/* The enum's idx-th value name (an arena copy), or NULL. */
const char *schema_enum_name(const SchemaKey *k, int idx)
{
    char buf[64];
    if (!k->enums || idx < 0 || !nth_name(k->enums, idx, buf, sizeof buf)) return NULL;
    return arena_strdup(&g_arena, buf);
}

/* Position of `name` in a '|'-separated list, -1 if absent. */
static int list_index(const char *list, const char *name)
{
    char buf[64];
    for (int i = 0; nth_name(list, i, buf, sizeof buf); i++)
        if (strcmp(buf, name) == 0) return i;
    return -1;
}

/* The index of an enum value by name, -1 if it is not one of the values. */
int schema_enum_index(const SchemaKey *k, const char *name)
{
    return k->enums ? list_index(k->enums, name) : -1;
}

/* Number of values of an enum key. */
int schema_enum_count(const SchemaKey *k)
{
    if (!k->enums || !*k->enums) return 0;
    int n = 1;
    for (const char *p = k->enums; *p; p++) n += *p == '|';
    return n;
}

/* Edit distance with adjacent transpositions, case-insensitive, capped inputs. */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 63 };
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > MAXLEN || lb > MAXLEN) return 1000;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++) {
        for (int j = 1; j <= lb; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

/* True if the shorter of a and b (at least 3 characters) begins the longer. */
static bool prefix_related(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t n = la < lb ? la : lb;
    return n >= 3 && strncasecmp(a, b, n) == 0;
}

/* The candidate closest to a misspelled name: within about a third of its
 * length in edits, else one that it begins or that begins it; NULL if none. */
const char *schema_suggest(const char *name, const char *const *cands, int n)
{
    if (!name || !*name) return NULL;
    const char *best = NULL;
    int best_d = 1000;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(name, cands[i]);
        if (d < best_d) best_d = d, best = cands[i];
    }
    int len = (int)strlen(name);
    if (best && best_d <= (len + 2) / 3 && best_d < len) return best;
    for (int i = 0; i < n; i++)
        if (prefix_related(name, cands[i])) return cands[i];
    return NULL;
}

/* True if some key lies under `path` (a plain block or an enum with a block). */
bool schema_is_block(const char *path)
{
    size_t n = strlen(path);
    for (int i = 0; i < schema_nkeys; i++)
        if (strncmp(schema_keys[i].path, path, n) == 0 && schema_keys[i].path[n] == '.') return true;
    return false;
}

/* The names one level under `prefix` ("" = top level), in table order,
 * without repeats.  Returns how many were written to out (at most cap). */
int schema_children(const char *prefix, const char **out, int cap)
{
    size_t n = strlen(prefix);
    int count = 0;
    for (int i = 0; i < schema_nkeys; i++) {
        const char *p = schema_keys[i].path;
        if (n) {
            if (strncmp(p, prefix, n) != 0 || p[n] != '.') continue;
            p += n + 1;
        }
        size_t len = strcspn(p, ".");
        bool seen = false;
        for (int j = 0; j < count && !seen; j++)
            seen = strlen(out[j]) == len && strncmp(out[j], p, len) == 0;
        if (!seen && count < cap) out[count++] = arena_strndup(&g_arena, p, len);
    }
    return count;
}

/* The enum key that decides whether k applies (its parent enum, or the
 * sibling named in "key=a|b"), or NULL if k always applies in its block. */
const SchemaKey *schema_governor(const SchemaKey *k)
{
    if (!k->when[0]) return NULL;
    const char *eq = strchr(k->when, '=');
    const char *dot = strrchr(k->path, '.');
    if (!dot) return NULL;
    char buf[128];
    size_t parent_len = (size_t)(dot - k->path);
    if (eq) snprintf(buf, sizeof buf, "%.*s.%.*s", (int)parent_len, k->path, (int)(eq - k->when), k->when);
    else snprintf(buf, sizeof buf, "%.*s", (int)parent_len, k->path);
    const SchemaKey *g = schema_find(buf);
    if (!g || g->type != T_ENUM) die("schema: key %s has a `when` without an enum to test", k->path);
    return g;
}

/* The values of the governor for which k applies ("cpu|nvme"). */
const char *schema_when_values(const SchemaKey *k)
{
    const char *eq = strchr(k->when, '=');
    return eq ? eq + 1 : k->when;
}

/* True if k applies when its governor has the enum value `value`. */
bool schema_when_holds(const SchemaKey *k, int value)
{
    const SchemaKey *g = schema_governor(k);
    if (!g) return true;
    const char *name = schema_enum_name(g, value);
    return name && list_index(schema_when_values(k), name) >= 0;
}

/* The key directly above k if it is a key (an enum carrying k in its block). */
const SchemaKey *schema_parent(const SchemaKey *k)
{
    const char *dot = strrchr(k->path, '.');
    if (!dot) return NULL;
    char buf[128];
    snprintf(buf, sizeof buf, "%.*s", (int)(dot - k->path), k->path);
    return schema_find(buf);
}

/* A noun phrase for what a key of this type takes, for errors and docs. */
const char *schema_type_phrase(const SchemaKey *k)
{
    switch (k->type) {
    case T_INT: return "an integer such as 12 or 5e8";
    case T_FLOAT: return "a number such as 0.1 or 6e-4";
    case T_BOOL: return "on or off";
    case T_ENUM: return arena_printf(&g_arena, "one of %s", schema_enum_list(k, ", "));
    case T_STRING: return "a string in double quotes";
    case T_BYTES: return "a byte size such as 80GB or 32MiB";
    case T_BANDWIDTH: return "a bandwidth such as 450GB/s or 400Gb/s";
    case T_INTLIST: return "a list of integers such as [6, 6]";
    case T_FLOAT2: return "a pair of numbers such as (0.9, 0.95)";
    }
    return "a value";
}

/* The enum's values joined by sep ("a, b, c"). */
const char *schema_enum_list(const SchemaKey *k, const char *sep)
{
    char out[512] = "", buf[64];
    for (int i = 0; nth_name(k->enums, i, buf, sizeof buf); i++) {
        if (i) strncat(out, sep, sizeof out - strlen(out) - 1);
        strncat(out, buf, sizeof out - strlen(out) - 1);
    }
    return arena_strdup(&g_arena, out);
}

/* ---- numbers with units: the canonical spellings ------------------------- */

/* Rewrites printf's exponent "e+20"/"e-05" as "e20"/"e-5" (the spec's style). */
void schema_tidy_exponent(char *s)
{
    char *e = strchr(s, 'e');
    if (!e) return;
    char *p = e + 1, *w = e + 1;
    if (*p == '+') p++;
    else if (*p == '-') *w++ = *p++;
    while (*p == '0' && p[1]) p++;
    memmove(w, p, strlen(p) + 1);
}

/* The shortest decimal that reads back as exactly v (at most 17 digits). */
const char *schema_fmt_double(double v)
{
    char buf[64];
    if (v == 0) return "0";
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* 20, not 2e1: whole numbers of ordinary size read better in full */
    if (strchr(buf, 'e') && v == floor(v) && fabs(v) < 1e15) snprintf(buf, sizeof buf, "%.0f", v);
    schema_tidy_exponent(buf);
    /* 6e-4, not 0.0006: the exponent form with the same digits when shorter */
    if (!strchr(buf, 'e') && v != floor(v)) {
        char alt[64];
        for (int prec = 0; prec <= 16; prec++) {
            snprintf(alt, sizeof alt, "%.*e", prec, v);
            if (strtod(alt, NULL) == v) break;
        }
        schema_tidy_exponent(alt);
        if (strlen(alt) < strlen(buf)) strcpy(buf, alt);
    }
    return arena_strdup(&g_arena, buf);
}

/* Byte units, largest first; a size is printed in the largest that divides it. */
static const struct { const char *name; int64_t mult; } byte_units[] = {
    {"TiB", 1099511627776LL}, {"TB", 1000000000000LL}, {"GiB", 1073741824LL}, {"GB", 1000000000LL},
    {"MiB", 1048576LL},       {"MB", 1000000LL},       {"KiB", 1024LL},       {"KB", 1000LL},
};

/* A byte size in the largest exact binary or decimal unit: 80GiB, 500MB, 0. */
const char *schema_fmt_bytes(int64_t b)
{
    if (b == 0) return "0";
    for (size_t i = 0; i < sizeof byte_units / sizeof byte_units[0]; i++)
        if (b % byte_units[i].mult == 0)
            return arena_printf(&g_arena, "%lld%s", (long long)(b / byte_units[i].mult), byte_units[i].name);
    return arena_printf(&g_arena, "%lld", (long long)b);
}

/* A bandwidth in GB/s as an exact decimal (the lexer reads decimals exactly):
 * 450GB/s, 12.5GB/s; a fractional bytes/s value falls back on B/s. */
const char *schema_fmt_bandwidth(double bps)
{
    if (bps == floor(bps) && fabs(bps) < 9.2e18) {
        int64_t n = (int64_t)bps, whole = n / 1000000000, frac = llabs(n % 1000000000);
        if (!frac) return arena_printf(&g_arena, "%lldGB/s", (long long)whole);
        char digits[16];
        snprintf(digits, sizeof digits, "%09lld", (long long)frac);
        for (char *e = digits + strlen(digits) - 1; *e == '0'; e--) *e = 0;
        return arena_printf(&g_arena, "%s%lld.%sGB/s", n < 0 && whole == 0 ? "-" : "", (long long)whole, digits);
    }
    return arena_printf(&g_arena, "%sB/s", schema_fmt_double(bps));
}

/* A count: plain digits, or "5e8" style for round powers of ten times a digit. */
static const char *fmt_count(double v)
{
    if (v >= 1e6 && v == floor(v) && v < 1e19) {
        int exp = 0;
        double m = v;
        while (fmod(m, 10) == 0) m /= 10, exp++;
        if (m < 10) return arena_printf(&g_arena, "%.0fe%d", m, exp);
    }
    return arena_printf(&g_arena, "%.0f", v);
}

/* A number of key k's type in its canonical spelling (for ranges and docs). */
static const char *fmt_number(const SchemaKey *k, double v)
{
    switch (k->type) {
    case T_BYTES: return schema_fmt_bytes((int64_t)v);
    case T_BANDWIDTH: {
        /* a range reads best in its own largest exact unit: [1MB/s, 1000TB/s] */
        static const struct { const char *name; double mult; } u[] = {
            {"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"KB/s", 1e3}};
        for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
            if (v >= u[i].mult && fmod(v, u[i].mult) == 0) return arena_printf(&g_arena, "%.0f%s", v / u[i].mult, u[i].name);
        return schema_fmt_bandwidth(v);
    }
    case T_FLOAT: case T_FLOAT2: return v >= 1e6 && v == floor(v) ? fmt_count(v) : schema_fmt_double(v);
    default: return fmt_count(v);
    }
}

/* "[1, 65536]" for a key with a range, "" for one without. */
const char *schema_fmt_range(const SchemaKey *k)
{
    if (k->min > k->max) return "";
    return arena_printf(&g_arena, "[%s, %s]", fmt_number(k, k->min), fmt_number(k, k->max));
}

/* ---- the reference (docs/spec-reference.md) ----------------------------- */

/* Writes s with '|' escaped for a Markdown table cell. */
static void md_cell(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", out);
        else fputc(*s, out);
    }
}

/* The "type" column of the reference. */
static const char *type_column(const SchemaKey *k)
{
    switch (k->type) {
    case T_INT: return "integer";
    case T_FLOAT: return "number";
    case T_BOOL: return "on/off";
    case T_ENUM: return arena_printf(&g_arena, "`%s`", schema_enum_list(k, "` | `"));
    case T_STRING: return "string";
    case T_BYTES: return "byte size";
    case T_BANDWIDTH: return "bandwidth";
    case T_INTLIST: return "list of integers";
    case T_FLOAT2: return "(number, number)";
    }
    return "";
}

/* The "applies when" column: "`offload.optimizer` is `cpu` or `nvme`". */
static const char *when_column(const SchemaKey *k)
{
    const SchemaKey *g = schema_governor(k);
    if (!g) return "";
    char out[256];
    snprintf(out, sizeof out, "`%s` is ", g->path);
    const char *vals = schema_when_values(k);
    char buf[64];
    int n = 0;
    while (nth_name(vals, n, buf, sizeof buf)) n++;
    for (int i = 0; i < n; i++) {
        nth_name(vals, i, buf, sizeof buf);
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        size_t len = strlen(out);
        snprintf(out + len, sizeof out - len, "%s`%s`", sep, buf);
    }
    return arena_strdup(&g_arena, out);
}

/* One section of the reference: the keys whose first component is `block`. */
static void write_block(FILE *out, const char *block)
{
    size_t n = strlen(block);
    fprintf(out, "## %s\n\n", block);
    const SchemaKey *self = schema_find(block);
    if (self)
        fprintf(out, "Written `%s %s { ... }` (or `%s = %s { ... }`): the label is the key `%s`.\n\n",
                block, schema_enum_name(self, 0), block, schema_enum_name(self, 0), block);
    fputs("| key | type | unit | default | range | applies when | doc |\n", out);
    fputs("|---|---|---|---|---|---|---|\n", out);
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i];
        if (strncmp(k->path, block, n) != 0 || (k->path[n] != '.' && k->path[n] != 0)) continue;
        bool special = strcmp(k->def, "derived") == 0 || strcmp(k->def, "required") == 0;
        fprintf(out, "| `%s` | ", k->path);
        md_cell(out, type_column(k));
        fprintf(out, " | %s | ", k->unit);
        if (special) fprintf(out, "*%s*", k->def);
        else {
            fputc('`', out);
            md_cell(out, k->def);
            fputc('`', out);
        }
        fputs(" | ", out);
        md_cell(out, schema_fmt_range(k));
        fputs(" | ", out);
        md_cell(out, when_column(k));
        fputs(" | ", out);
        md_cell(out, k->doc);
        fputs(" |\n", out);
    }
    fputc('\n', out);
}

/* Writes docs/spec-reference.md from the table and the cluster profiles. */
void schema_write_reference(FILE *out)
{
    fputs("# Spec language reference\n\n"
          "<!-- Generated by `shardc docs spec-reference` from compiler/schema.def and\n"
          "     compiler/cluster.c. Do not edit by hand: run `make docs`. -->\n\n"
          "Every key of a `.tspec` file, block by block. A key's full path is written here\n"
          "with dots; in a spec it sits inside its blocks (`train { optimizer = adamw { lr = 6e-4 } }`),\n"
          "and `-D train.optimizer.lr=6e-4` sets it from the command line.\n\n"
          "- **type**: integers take count suffixes (`100K`, `5e8`); byte sizes take `KB MB GB TB`\n"
          "  (decimal) or `KiB MiB GiB TiB` (binary), and a bare integer is bytes; bandwidths take\n"
          "  `GB/s` (bytes) or `Gb/s` (bits); on/off also reads `true`/`false`.\n"
          "- **default**: the value when the key is not given. *derived* means it is computed from\n"
          "  other keys by the rule in its doc; *required* means the spec must give it.\n"
          "- **range**: inclusive; a value outside it is an error naming the range.\n"
          "- **applies when**: a key inside an enum's block (`optimizer = nvme { path = \"..\" }`)\n"
          "  exists only for the values listed; given for another value it is an error.\n"
          "- **elements** are counts of parameter elements, as DeepSpeed's `*_bucket_size` keys.\n\n"
          "`shardc check FILE` prints the resolved spec with every key of this table that applies.\n\n",
          out);
    const char *blocks[32];
    int nb = schema_children("", blocks, 32);
    for (int i = 0; i < nb; i++) write_block(out, blocks[i]);

    fputs("## GPU profiles (`cluster.gpu`)\n\n"
          "Each field fills the cluster key named in the header unless the spec sets that key.\n"
          "Bandwidths are per direction. Memory is what the product name promises, read\n"
          "conservatively: \"40GB\"/\"80GB\" cards as 40/80 GiB, the H200 as 141·10⁹ bytes.\n\n"
          "| gpu | memory (`gpu_memory`) | bf16 TFLOP/s (`bf16_tflops`) | fp32 TFLOP/s (`fp32_tflops`) "
          "| HBM (`hbm_bandwidth`) | NVLink (`intra_node`) | PCIe (`pcie`) | what |\n"
          "|---|---|---|---|---|---|---|---|\n",
          out);
    for (int i = 0; i < cluster_ngpus; i++) {
        const GpuInfo *g = &cluster_gpus[i];
        fprintf(out, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", g->name, schema_fmt_bytes(g->memory),
                schema_fmt_double(g->bf16_tflops), schema_fmt_double(g->fp32_tflops),
                schema_fmt_bandwidth(g->hbm_bandwidth), schema_fmt_bandwidth(g->nvlink),
                schema_fmt_bandwidth(g->pcie), g->doc);
    }
    fputs("\n## Networks (`cluster.network`)\n\n"
          "Bandwidth per GPU and direction (each GPU has its own NIC); the latency of one message.\n\n"
          "| network | bandwidth (`inter_node`) | latency µs (`network_latency_us`) | what |\n"
          "|---|---|---|---|\n",
          out);
    for (int i = 0; i < cluster_nnets; i++) {
        const NetInfo *n = &cluster_nets[i];
        fprintf(out, "| `%s` | %s | %s | %s |\n", n->name, schema_fmt_bandwidth(n->bandwidth),
                schema_fmt_double(n->latency_us), n->doc);
    }
}
