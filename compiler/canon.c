/* canon.c — the resolved spec as canonical text (what `shardc check` prints).
 *
 * Every block in schema order, every key that applies with its value (defaults
 * and derived values filled in), units normalised, floats in their shortest
 * round-trip form.  The output parses back through the parser and sema to the
 * same Spec and the same text (tests/golden/roundtrip.test.sh).
 */
#include "shardc.h"

#include <string.h>

/* A string literal with the lexer's escapes (\" \\ \n \t). */
static void print_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        switch (*s) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\t': fputs("\\t", out); break;
        default: fputc(*s, out);
        }
    }
    fputc('"', out);
}

/* The value of key k in s, in its canonical spelling. */
static void print_value(FILE *out, const Spec *s, const SchemaKey *k)
{
    const void *p = (const char *)s + k->offset;
    switch (k->type) {
    case T_INT: fprintf(out, "%lld", (long long)*(const int64_t *)p); break;
    case T_FLOAT: fputs(schema_fmt_double(*(const double *)p), out); break;
    case T_BOOL: fputs(*(const bool *)p ? "on" : "off", out); break;
    case T_ENUM: fputs(schema_enum_name(k, *(const int *)p), out); break;
    case T_STRING: print_string(out, *(const char *const *)p ? *(const char *const *)p : ""); break;
    case T_BYTES: fputs(schema_fmt_bytes(*(const int64_t *)p), out); break;
    case T_BANDWIDTH: fputs(schema_fmt_bandwidth(*(const double *)p), out); break;
    case T_INTLIST: {
        const IntList *l = p;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)l->v[i]);
        fputc(']', out);
        break;
    }
    case T_FLOAT2: {
        const double *d = p;
        fprintf(out, "(%s, %s)", schema_fmt_double(d[0]), schema_fmt_double(d[1]));
        break;
    }
    }
}

/* True if some key under path applies (so its block is worth printing). */
static bool any_applies_under(const Spec *s, const char *path, const char *skip)
{
    size_t n = strlen(path);
    for (int i = 0; i < schema_nkeys; i++) {
        const SchemaKey *k = &schema_keys[i];
        if (strncmp(k->path, path, n) == 0 && k->path[n] == '.' && (!skip || strcmp(k->path, skip) != 0) &&
            sema_applies(s, k))
            return true;
    }
    return false;
}

static void print_block(FILE *out, const Spec *s, const char *prefix, int depth, const char *skip);

/* One key (with its block, if it carries one) at the given depth. */
static void print_key(FILE *out, const Spec *s, const SchemaKey *k, const char *name, int depth)
{
    fprintf(out, "%*s%s = ", depth * 2, "", name);
    /* extern "name" { .. }: the op's name is written after the value */
    const char *skip = NULL;
    if (strcmp(k->path, "model.activation") == 0 && s->model.activation == ACT_EXTERN) {
        fputs("extern ", out);
        print_string(out, s->model.extern_name ? s->model.extern_name : "");
        skip = "model.activation.name";
    } else {
        print_value(out, s, k);
    }
    if (schema_is_block(k->path) && any_applies_under(s, k->path, skip)) {
        fputs(" {\n", out);
        print_block(out, s, k->path, depth + 1, skip);
        fprintf(out, "%*s}", depth * 2, "");
    }
    fputc('\n', out);
}

/* The keys and sub-blocks under prefix, in table order. */
static void print_block(FILE *out, const Spec *s, const char *prefix, int depth, const char *skip)
{
    const char *names[64];
    int n = schema_children(prefix, names, 64);
    for (int i = 0; i < n; i++) {
        const char *path = arena_printf(&g_arena, "%s.%s", prefix, names[i]);
        const SchemaKey *k = schema_find(path);
        if (k) {
            if ((!skip || strcmp(path, skip) != 0) && sema_applies(s, k)) print_key(out, s, k, names[i], depth);
        } else if (any_applies_under(s, path, NULL)) {
            fprintf(out, "%*s%s {\n", depth * 2, "", names[i]);
            print_block(out, s, path, depth + 1, NULL);
            fprintf(out, "%*s}\n", depth * 2, "");
        }
    }
}

/* Prints the resolved spec s in canonical form (see the top of this file). */
void canon_print(FILE *out, const Spec *s)
{
    fprintf(out, "# %s, resolved by shardc check (every default filled in)\n",
            s->source && *s->source ? s->source : "<spec>");
    const char *blocks[32];
    int n = schema_children("", blocks, 32);
    for (int i = 0; i < n; i++) {
        const SchemaKey *k = schema_find(blocks[i]);
        fputc('\n', out);
        if (k) {
            /* an enum carrying the block: `model gpt {` */
            fprintf(out, "%s ", blocks[i]);
            print_value(out, s, k);
            fputs(" {\n", out);
        } else {
            fprintf(out, "%s {\n", blocks[i]);
        }
        print_block(out, s, blocks[i], 1, NULL);
        fputs("}\n", out);
    }
}
