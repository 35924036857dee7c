/* opcatalog.c — a build-time tool: reads the runtime's header with libclang and
 * writes the compiler's op catalog as C (a const table of every op function:
 * name, parameters with their canonical types, return type, doc comment).
 *
 *   opcatalog HEADER -o OUT.c [--as SHOWN_PATH]
 *
 * An op function is one whose first two parameters are (srt_ctx *, srt_stream)
 * and that is not a stream primitive (events, stream sync).  The header's
 * SRT_OPS X-macro is the one list of ops: an op declared and not listed, listed
 * and not declared, or listed with another arity is a drift, reported as
 * `header:line:col: error: ...` with exit 1, so the build stops.
 */
#include <clang-c/Index.h>

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPS 512
#define MAX_PARAMS 32
#define MAX_SECTIONS 64

/* (ctx, stream) functions that order streams rather than compute: not ops. */
static const char *const stream_primitives[] = {"srt_event_record", "srt_event_wait", "srt_stream_sync"};

typedef struct Param { char *name, *type, *canon; } Param;

typedef struct Fn {
    char *name, *ret, *doc, *section;
    Param params[MAX_PARAMS];
    int nparams;
    int line, col, end_line;
    bool is_op;                 /* takes (srt_ctx *, srt_stream) first          */
    bool listed;                /* found in SRT_OPS                             */
} Fn;

typedef struct Entry { char *name, *kind; int arity, line, col; Fn *fn; } Entry;
typedef struct Section { int line; char *title; } Section;

static Fn fns[MAX_OPS];
static int nfns;
static Entry entries[MAX_OPS];
static int nentries;
static Section sections[MAX_SECTIONS];
static int nsections;
static const char *shown;       /* the header's path as diagnostics name it     */
static int errors;

/* Internal failure of the tool itself (not a drift): exit 3. */
static _Noreturn void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "opcatalog: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(3);
}

/* A drift or parse error at a line of the header. */
static void error_at(int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d:%d: error: ", shown, line, col);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    errors++;
}

/* strdup that cannot fail quietly. */
static char *xstrdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d) fatal("out of memory");
    return d;
}

/* A libclang string as a malloc'd C string (and the CXString disposed). */
static char *take(CXString s)
{
    char *d = xstrdup(clang_getCString(s));
    clang_disposeString(s);
    return d;
}

/* The comment's text without its markers: one line per source line, trimmed. */
static char *clean_comment(const char *raw)
{
    size_t n = strlen(raw);
    char *out = malloc(n + 1);
    if (!out) fatal("out of memory");
    size_t o = 0;
    const char *p = raw, *end = raw + n;
    if (n >= 2 && raw[0] == '/' && (raw[1] == '*' || raw[1] == '/')) p += 2;
    if (n >= 4 && end[-2] == '*' && end[-1] == '/') end -= 2;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        const char *b = p;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        if (b < e && *b == '*' && !(b + 1 < e && b[1] == '/')) b++;            /* " * text" */
        if (e - b >= 2 && b[0] == '/' && b[1] == '/') b += 2;                    /* "// text" */
        while (b < e && (*b == ' ' || *b == '\t' || *b == '*' || *b == '/')) b++;
        const char *t = e;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r')) t--;
        if (t > b) {
            if (o) out[o++] = '\n';
            memcpy(out + o, b, (size_t)(t - b));
            o += (size_t)(t - b);
        }
        p = e + 1;
    }
    out[o] = 0;
    return out;
}

/* Line of a source location (spelling), and its column. */
static void loc_of(CXSourceLocation l, int *line, int *col)
{
    unsigned ln, cl;
    clang_getSpellingLocation(l, NULL, &ln, &cl, NULL);
    *line = (int)ln;
    if (col) *col = (int)cl;
}

/* Records one function declaration of the header. */
static void add_function(CXCursor c)
{
    if (nfns >= MAX_OPS) fatal("more than %d functions", MAX_OPS);
    Fn *f = &fns[nfns++];
    f->name = take(clang_getCursorSpelling(c));
    f->ret = take(clang_getTypeSpelling(clang_getCursorResultType(c)));
    loc_of(clang_getCursorLocation(c), &f->line, &f->col);
    CXSourceRange ext = clang_getCursorExtent(c);
    int start;
    loc_of(clang_getRangeStart(ext), &start, NULL);
    loc_of(clang_getRangeEnd(ext), &f->end_line, NULL);
    int n = clang_Cursor_getNumArguments(c);
    if (n > MAX_PARAMS) fatal("%s: more than %d parameters", f->name, MAX_PARAMS);
    for (int i = 0; i < n; i++) {
        CXCursor a = clang_Cursor_getArgument(c, (unsigned)i);
        CXType t = clang_getCursorType(a);
        f->params[i].name = take(clang_getCursorSpelling(a));
        f->params[i].type = take(clang_getTypeSpelling(t));
        f->params[i].canon = take(clang_getTypeSpelling(clang_getCanonicalType(t)));
    }
    f->nparams = n;
    f->is_op = n >= 2 && strcmp(f->params[0].canon, "struct srt_ctx *") == 0 &&
               strcmp(f->params[1].canon, "enum srt_stream") == 0;
    for (size_t i = 0; i < sizeof stream_primitives / sizeof *stream_primitives; i++)
        if (strcmp(f->name, stream_primitives[i]) == 0) f->is_op = false;
    /* the comment directly above (a banner separated by a blank line is not its doc) */
    CXString raw = clang_Cursor_getRawCommentText(c);
    const char *rs = clang_getCString(raw);
    int cend;
    loc_of(clang_getRangeEnd(clang_Cursor_getCommentRange(c)), &cend, NULL);
    f->doc = rs && *rs && cend >= start - 1 ? clean_comment(rs) : xstrdup("");
    clang_disposeString(raw);
    if (strncmp(f->doc, "----", 4) == 0) f->doc[0] = 0;
}

/* Reads SRT_OPS's body token by token: SRT_OP(name, arity, kind) entries. */
static void read_xmacro(CXTranslationUnit tu, CXCursor c)
{
    CXToken *toks;
    unsigned n;
    clang_tokenize(tu, clang_getCursorExtent(c), &toks, &n);
    /* SRT_OPS ( PARAM ) PARAM ( name , arity , kind ) ... */
    char *param = n > 2 ? take(clang_getTokenSpelling(tu, toks[2])) : xstrdup("");
    for (unsigned i = 4; i + 7 < n + 1; i++) {
        char *t = take(clang_getTokenSpelling(tu, toks[i]));
        bool head = strcmp(t, param) == 0 && i + 7 < n;
        free(t);
        if (!head) continue;
        char *sp[8];
        for (int k = 0; k < 8; k++) sp[k] = take(clang_getTokenSpelling(tu, toks[i + (unsigned)k]));
        int line, col;
        loc_of(clang_getTokenLocation(tu, toks[i]), &line, &col);
        if (strcmp(sp[1], "(") || strcmp(sp[3], ",") || strcmp(sp[5], ",") || strcmp(sp[7], ")")) {
            error_at(line, col, "SRT_OPS: expected %s(name, arity, kind)", param);
        } else if (nentries >= MAX_OPS) {
            fatal("more than %d SRT_OPS entries", MAX_OPS);
        } else {
            Entry *e = &entries[nentries++];
            e->name = xstrdup(sp[2]);
            e->arity = atoi(sp[4]);
            e->kind = xstrdup(sp[6]);
            e->line = line;
            e->col = col;
            i += 7;
        }
        for (int k = 0; k < 8; k++) free(sp[k]);
    }
    free(param);
    clang_disposeTokens(tu, toks, n);
}

typedef struct Walk { CXTranslationUnit tu; bool saw_xmacro; } Walk;

/* Visits the header's top-level declarations and macros. */
static enum CXChildVisitResult visit(CXCursor c, CXCursor parent, CXClientData data)
{
    Walk *w = data;
    if (!clang_Location_isFromMainFile(clang_getCursorLocation(c))) return CXChildVisit_Continue;
    enum CXCursorKind k = clang_getCursorKind(c);
    if (k == CXCursor_FunctionDecl) {
        add_function(c);
    } else if (k == CXCursor_MacroDefinition) {
        char *name = take(clang_getCursorSpelling(c));
        if (strcmp(name, "SRT_OPS") == 0) {
            read_xmacro(w->tu, c);
            w->saw_xmacro = true;
        }
        free(name);
    }
    return CXChildVisit_Continue;
}

/* The header's section banners: lines like `/ * ---- compute ops ---- * /`. */
static void read_sections(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) fatal("cannot read %s", path);
    char buf[4096];
    int line = 0;
    while (fgets(buf, sizeof buf, f)) {
        line++;
        char *p = strstr(buf, "/* ----");
        if (p != buf || nsections >= MAX_SECTIONS) continue;
        p += 7;
        while (*p == ' ') p++;
        char *e = strstr(p, " --");
        if (!e) e = p + strcspn(p, "*\n");
        while (e > p && e[-1] == ' ') e--;
        *e = 0;
        char *colon = strchr(p, ':');       /* "the op list: one X-macro..." -> "the op list" */
        if (colon) *colon = 0;
        sections[nsections].line = line;
        sections[nsections++].title = xstrdup(p);
    }
    fclose(f);
}

/* The section an op at `line` belongs to. */
static const char *section_of(int line)
{
    const char *t = "";
    for (int i = 0; i < nsections; i++)
        if (sections[i].line < line) t = sections[i].title;
    return t;
}

/* Compares the declared ops with SRT_OPS; every difference is an error. */
static void check_drift(void)
{
    for (int i = 0; i < nentries; i++) {
        Entry *e = &entries[i];
        for (int j = 0; j < i; j++)
            if (strcmp(entries[j].name, e->name) == 0)
                error_at(e->line, e->col, "SRT_OPS lists '%s' twice (first at line %d)", e->name, entries[j].line);
        char want[256];
        snprintf(want, sizeof want, "srt_%s", e->name);
        for (int j = 0; j < nfns; j++)
            if (strcmp(fns[j].name, want) == 0) e->fn = &fns[j];
        if (!e->fn) {
            error_at(e->line, e->col, "SRT_OPS lists '%s', but the header declares no function %s", e->name, want);
            continue;
        }
        if (!e->fn->is_op) {
            error_at(e->line, e->col, "SRT_OPS lists '%s', but %s (line %d) does not take (srt_ctx *, srt_stream) first",
                     e->name, want, e->fn->line);
            continue;
        }
        e->fn->listed = true;
        if (e->fn->nparams - 2 != e->arity)
            error_at(e->line, e->col, "SRT_OPS gives '%s' arity %d, but %s (line %d) takes %d arguments after (ctx, stream)",
                     e->name, e->arity, want, e->fn->line, e->fn->nparams - 2);
    }
    for (int j = 0; j < nfns; j++) {
        Fn *f = &fns[j];
        if (!f->is_op || f->listed) continue;
        if (strncmp(f->name, "srt_", 4) == 0)
            error_at(f->line, f->col, "%s takes (srt_ctx *, srt_stream) but is not in SRT_OPS: add "
                     "SRT_OP(%s, %d, SRT_KIND_...) to the list", f->name, f->name + 4, f->nparams - 2);
        else
            error_at(f->line, f->col, "%s takes (srt_ctx *, srt_stream) but is not named srt_* and not in SRT_OPS",
                     f->name);
    }
}

/* Writes s as a C string literal (octal escapes for anything not plain ASCII). */
static void put_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(o, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", o);
        else if (*p < 32 || *p >= 127 || *p == '?') fprintf(o, "\\%03o", *p);
        else fputc(*p, o);
    }
    fputc('"', o);
}

/* Writes the catalog: one CatalogParam array per op, then the op table. */
static void write_catalog(FILE *o, const char *header)
{
    fprintf(o, "/* op_catalog.c — GENERATED by tools/opcatalog from %s; do not edit. */\n", shown);
    fprintf(o, "#include \"catalog.h\"\n\n");
    for (int i = 0; i < nentries; i++) {
        Fn *f = entries[i].fn;
        fprintf(o, "static const CatalogParam params_%d[] = {\n", i);
        for (int k = 0; k < f->nparams; k++) {
            fputs("    {", o);
            put_str(o, f->params[k].name);
            fputs(", ", o);
            put_str(o, f->params[k].type);
            fputs(", ", o);
            put_str(o, f->params[k].canon);
            fputs("},\n", o);
        }
        fputs("};\n", o);
    }
    fprintf(o, "\nconst CatalogOp catalog_ops[] = {\n");
    for (int i = 0; i < nentries; i++) {
        Entry *e = &entries[i];
        Fn *f = e->fn;
        fputs("    {", o);
        put_str(o, f->name);
        fputs(", ", o);
        put_str(o, e->name);
        fputs(", ", o);
        put_str(o, f->ret);
        fprintf(o, ", %d, params_%d, %d, ", f->nparams, i, e->arity);
        put_str(o, e->kind);
        fputs(", ", o);
        put_str(o, f->section);
        fputs(",\n     ", o);
        put_str(o, f->doc);
        fputs(", ", o);
        put_str(o, shown);
        fprintf(o, ", %d, %d},\n", f->line, f->col);
    }
    fprintf(o, "};\nconst int catalog_nops = %d;\n", nentries);
    (void)header;
}

/* Whether two functions are one family: their names agree up to an underscore
 * past the srt_ prefix (srt_layernorm_fwd / _bwd, srt_nvme_read / _write). */
static bool same_family(const Fn *a, const Fn *b)
{
    size_t n = 0;
    while (a->name[n] && a->name[n] == b->name[n]) n++;
    while (n > 4 && a->name[n - 1] != '_') n--;
    return n > 4 && strncmp(a->name, "srt_", 4) == 0;
}

int main(int argc, char **argv)
{
    const char *header = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--as") == 0 && i + 1 < argc) shown = argv[++i];
        else if (argv[i][0] != '-' && !header) header = argv[i];
        else {
            fprintf(stderr, "usage: opcatalog HEADER -o OUT.c [--as SHOWN_PATH]\n");
            return 2;
        }
    }
    if (!header || !out) {
        fprintf(stderr, "usage: opcatalog HEADER -o OUT.c [--as SHOWN_PATH]\n");
        return 2;
    }
    if (!shown) shown = header;
    const char *args[] = {"-x", "c", "-std=c11", "-fparse-all-comments"};
    CXIndex idx = clang_createIndex(0, 0);
    CXTranslationUnit tu;
    enum CXErrorCode rc = clang_parseTranslationUnit2(idx, header, args, 4, NULL, 0,
                                                      CXTranslationUnit_DetailedPreprocessingRecord |
                                                          CXTranslationUnit_SkipFunctionBodies,
                                                      &tu);
    if (rc != CXError_Success) fatal("libclang could not parse %s (error %d)", header, (int)rc);
    for (unsigned i = 0; i < clang_getNumDiagnostics(tu); i++) {
        CXDiagnostic d = clang_getDiagnostic(tu, i);
        if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) {
            char *msg = take(clang_formatDiagnostic(d, clang_defaultDiagnosticDisplayOptions()));
            fprintf(stderr, "%s\n", msg);
            free(msg);
            errors++;
        }
        clang_disposeDiagnostic(d);
    }
    Walk w = {tu, false};
    if (!errors) clang_visitChildren(clang_getTranslationUnitCursor(tu), visit, &w);
    if (!errors && !w.saw_xmacro) error_at(1, 1, "no SRT_OPS X-macro: the header must list its ops");
    read_sections(header);
    /* a group of declarations under one comment shares it (layernorm_fwd, _bwd) */
    for (int j = 0; j < nfns; j++) {
        fns[j].section = xstrdup(section_of(fns[j].line));
        if (!fns[j].doc[0] && j > 0 && fns[j - 1].end_line == fns[j].line - 1 && same_family(&fns[j - 1], &fns[j])) {
            free(fns[j].doc);
            fns[j].doc = xstrdup(fns[j - 1].doc);
        }
    }
    if (!errors) check_drift();
    clang_disposeTranslationUnit(tu);
    clang_disposeIndex(idx);
    if (errors) {
        fprintf(stderr, "opcatalog: %d error%s: %s and its SRT_OPS list disagree; the catalog was not written\n",
                errors, errors == 1 ? "" : "s", shown);
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *o = fopen(tmp, "w");
    if (!o) fatal("cannot write %s", tmp);
    write_catalog(o, header);
    if (fclose(o) != 0 || rename(tmp, out) != 0) fatal("cannot write %s", out);
    return 0;
}
