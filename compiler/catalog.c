/* catalog.c — the op catalog (built-in ops, generated from shardrt.h by
 * tools/opcatalog), the ABIs of user-defined op kinds, the libclang check of a
 * spec's user-defined op against its kind's ABI, and `shardc ops`.
 *
 * The ABI check runs after sema_resolve for every command that reads a spec
 * (main.c's load_spec; the emitter's own loader calls it too), so `shardc
 * check` reports a bad header exactly as `shardc build` would.
 */
#include "catalog.h"

#include <clang-c/Index.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libclang, loaded by the first spec that names a user-defined op's header
 * (check_header) rather than linked: loading libclang-14 and its LLVM relocates
 * some 57 MB of pages, which every shardc run (every plan) paid for before. */
#define LIBCLANG(X) \
    X(clang_Cursor_getArgument) X(clang_Cursor_getNumArguments) X(clang_Cursor_getRawCommentText) \
    X(clang_File_isEqual) X(clang_createIndex) X(clang_disposeDiagnostic) X(clang_disposeIndex) \
    X(clang_disposeString) X(clang_disposeTranslationUnit) X(clang_equalTypes) X(clang_getCString) \
    X(clang_getCanonicalType) X(clang_getChildDiagnostics) X(clang_getCursorExtent) X(clang_getCursorKind) \
    X(clang_getCursorLocation) X(clang_getCursorResultType) X(clang_getCursorSpelling) \
    X(clang_getCursorType) X(clang_getDiagnostic) X(clang_getDiagnosticInSet) X(clang_getDiagnosticLocation) \
    X(clang_getDiagnosticNumRanges) X(clang_getDiagnosticRange) X(clang_getDiagnosticSeverity) \
    X(clang_getDiagnosticSpelling) X(clang_getFile) X(clang_getFileName) X(clang_getNumDiagnostics) \
    X(clang_getNumDiagnosticsInSet) X(clang_getRangeEnd) X(clang_getRangeStart) X(clang_getSpellingLocation) \
    X(clang_getTranslationUnitCursor) X(clang_getTypeSpelling) X(clang_getTypedefDeclUnderlyingType) \
    X(clang_isFunctionTypeVariadic) X(clang_parseTranslationUnit2) X(clang_visitChildren)
static struct {
#define LC_FN(f) __typeof__(f) *f;
    LIBCLANG(LC_FN)
#undef LC_FN
    bool tried, loaded;
    char error[512];            /* why it could not be loaded */
} lc;

/* Loads libclang (once); false with lc.error when it cannot. */
static bool libclang_load(void)
{
    if (lc.tried) return lc.loaded;
    lc.tried = true;
    void *h = dlopen(SHARDC_LIBCLANG, RTLD_NOW | RTLD_LOCAL);
    if (!h) return snprintf(lc.error, sizeof lc.error, "%s", dlerror()), false;
#define LC_SYM(f)                                                                             \
    if (!(*(void **)&lc.f = dlsym(h, #f)))                                                    \
        return snprintf(lc.error, sizeof lc.error, "%s has no %s", SHARDC_LIBCLANG, #f), false;
    LIBCLANG(LC_SYM)
#undef LC_SYM
    return lc.loaded = true;
}

/* ---- the op kinds' ABIs: the one table (docs/custom-ops.md describes it) ---- */
const CatalogAbi catalog_abis[] = {
    {"activation", "model.activation", 2,
     {{"_forward", "void", 3, {"float *", "const float *", "int64_t"}, {"out", "inp", "n"},
       "out[i] = f(inp[i]) for i < n; overwrites out"},
      {"_backward", "void", 4, {"float *", "const float *", "const float *", "int64_t"}, {"dinp", "inp", "dout", "n"},
       "dinp[i] += f'(inp[i]) * dout[i] for i < n; accumulates, like the runtime's ops"}},
     "the MLP's elementwise activation: replaces GELU between the up and down projections"},
};
const int catalog_nabis = sizeof catalog_abis / sizeof *catalog_abis;

/* The built-in op named `op`, with or without its srt_ prefix. */
const CatalogOp *catalog_find(const char *op)
{
    for (int i = 0; i < catalog_nops; i++)
        if (strcmp(catalog_ops[i].op, op) == 0 || strcmp(catalog_ops[i].name, op) == 0) return &catalog_ops[i];
    return NULL;
}

/* `type name` with no space after a '*'. */
static const char *decl(const char *type, const char *name)
{
    size_t n = strlen(type);
    bool star = n && type[n - 1] == '*';
    return arena_printf(&g_arena, "%s%s%s", type, star || !*name ? "" : " ", name);
}

/* `ret name(type a, ...)`. */
const char *catalog_signature(const CatalogOp *o)
{
    const char *s = arena_printf(&g_arena, "%s(", decl(o->ret, o->name));
    for (int i = 0; i < o->nparams; i++)
        s = arena_printf(&g_arena, "%s%s%s", s, i ? ", " : "", decl(o->params[i].type, o->params[i].name));
    return arena_printf(&g_arena, "%s%s)", s, o->nparams ? "" : "void");
}

/* Signature, a line of facts, then the doc comment, each line indented. */
void catalog_print_op(FILE *out, const CatalogOp *o)
{
    fprintf(out, "%s\n", catalog_signature(o));
    const char *kind = o->kind;
    if (strncmp(kind, "SRT_KIND_", 9) == 0) kind += 9;
    fprintf(out, "    [");
    for (const char *p = kind; *p; p++) fputc(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p, out);
    if (o->arity >= 0) fprintf(out, ", arity %d", o->arity);
    fprintf(out, "]  %s:%d\n", o->file, o->line);
    for (const char *p = o->doc; *p;) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        fprintf(out, "    %.*s\n", n, p);
        p += n + (e != NULL);
    }
}

/* The ABI of kind, or NULL. */
const CatalogAbi *catalog_abi(const char *kind)
{
    for (int i = 0; i < catalog_nabis; i++)
        if (strcmp(catalog_abis[i].kind, kind) == 0) return &catalog_abis[i];
    return NULL;
}

/* The declaration an op kind expects, for op `name`. */
const char *catalog_abi_signature(const CatalogAbiFn *fn, const char *name)
{
    const char *s = arena_printf(&g_arena, "%s %s%s(", fn->ret, name, fn->suffix);
    for (int i = 0; i < fn->nparams; i++)
        s = arena_printf(&g_arena, "%s%s%s", s, i ? ", " : "", decl(fn->types[i], fn->names[i]));
    return arena_printf(&g_arena, "%s)", s);
}

/* ---- the user's header, through libclang ---------------------------------- */

/* A file clang reported on, loaded for diag_error's source line. */
typedef struct Loaded { const char *clang_name; SrcFile *src; } Loaded;

typedef struct Check {
    const Spec *s;
    CatalogExtern *x;
    const char *header_shown;   /* the header as diagnostics name it           */
    SrcFile *header;            /* its text                                     */
    CXTranslationUnit tu;
    CXFile main_file;           /* the synthesized translation unit            */
    CXCursor found[2];          /* the ABI's functions, if declared            */
    bool have[2];
    CXType expect[2][CATALOG_MAX_PARAMS + 1];   /* [fn][0] return, [fn][1+i] params */
    bool have_expect[2][CATALOG_MAX_PARAMS + 1];
    Loaded files[16];
    int nfiles;
} Check;

/* A path of the spec resolved against the directory of the file that set it. */
static const char *resolve(const Spec *s, Loc where, const char *path)
{
    if (path[0] == '/') return path;
    const char *base = where.file && access(where.file->path, R_OK) == 0 ? where.file->path : s->source;
    const char *slash = base ? strrchr(base, '/') : NULL;
    if (!slash) return path;
    return arena_printf(&g_arena, "%.*s/%s", (int)(slash - base), base, path);
}

/* Reads path into an arena SrcFile shown as `shown`; NULL (errno) if unreadable. */
static SrcFile *load_src(const char *path, const char *shown)
{
    size_t len;
    char *text = util_read_file(path, &len, SPEC_MAX_FILE_BYTES);
    if (!text) return NULL;
    SrcFile *f = arena_alloc(&g_arena, sizeof *f);
    f->path = arena_strdup(&g_arena, shown);
    f->text = text;         /* an arena copy already */
    f->len = len;
    return f;
}

/* The Loc of line:col in f, spanning len bytes (clipped to the line). */
static Loc loc_in(const SrcFile *f, int line, int col, int len)
{
    Loc l = {0};
    if (!f) return l;
    const char *p = f->text, *end = f->text + f->len;
    for (int ln = 1; ln < line && p < end; p++)
        if (*p == '\n') ln++;
    const char *eol = p;
    while (eol < end && *eol != '\n') eol++;
    l.file = f;
    l.line = line;
    l.col = col;
    l.pos = p + (col - 1 <= eol - p ? col - 1 : eol - p);
    l.len = len < 1 ? 1 : len;
    if (l.pos + l.len > eol) l.len = eol > l.pos ? (int)(eol - l.pos) : 1;
    return l;
}

/* The SrcFile of a file clang names (the user's header, or one it includes). */
static SrcFile *src_of(Check *ck, CXFile file)
{
    if (!file) return NULL;
    CXString n = lc.clang_getFileName(file);
    const char *name = lc.clang_getCString(n);
    SrcFile *f = NULL;
    CXFile hf = lc.clang_getFile(ck->tu, ck->header_shown);
    if (hf && lc.clang_File_isEqual(hf, file)) f = ck->header;
    for (int i = 0; !f && i < ck->nfiles; i++)
        if (strcmp(ck->files[i].clang_name, name) == 0) f = ck->files[i].src;
    if (!f && ck->nfiles < (int)(sizeof ck->files / sizeof *ck->files)) {
        f = load_src(name, name);
        ck->files[ck->nfiles].clang_name = arena_strdup(&g_arena, name);
        ck->files[ck->nfiles++].src = f;
    }
    lc.clang_disposeString(n);
    return f;
}

/* The Loc of a clang source location, spanning len bytes. */
static Loc loc_clang(Check *ck, CXSourceLocation sl, int len)
{
    CXFile file;
    unsigned line, col;
    lc.clang_getSpellingLocation(sl, &file, &line, &col, NULL);
    return loc_in(src_of(ck, file), (int)line, (int)col, len);
}

/* The Loc of a cursor's whole extent (clipped to its first line). */
static Loc loc_extent(Check *ck, CXCursor c, bool from_name)
{
    CXSourceRange r = lc.clang_getCursorExtent(c);
    unsigned b, e, bl, el;
    lc.clang_getSpellingLocation(lc.clang_getRangeStart(r), NULL, &bl, NULL, &b);
    lc.clang_getSpellingLocation(lc.clang_getRangeEnd(r), NULL, &el, NULL, &e);
    CXSourceLocation at = from_name ? lc.clang_getCursorLocation(c) : lc.clang_getRangeStart(r);
    int len = bl == el && e > b ? (int)(e - b) : 1;
    if (from_name) {
        CXString n = lc.clang_getCursorSpelling(c);
        len = (int)strlen(lc.clang_getCString(n));
        lc.clang_disposeString(n);
    }
    return loc_clang(ck, at, len);
}

/* Shows clang's errors (and their notes) with diag_error; returns how many. */
static int show_clang_errors(Check *ck)
{
    int n = 0;
    for (unsigned i = 0; i < lc.clang_getNumDiagnostics(ck->tu); i++) {
        CXDiagnostic d = lc.clang_getDiagnostic(ck->tu, i);
        if (lc.clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) {
            CXString msg = lc.clang_getDiagnosticSpelling(d);
            int len = 1;
            if (lc.clang_getDiagnosticNumRanges(d) > 0) {
                CXSourceRange r = lc.clang_getDiagnosticRange(d, 0);
                unsigned b, e;
                lc.clang_getSpellingLocation(lc.clang_getRangeStart(r), NULL, NULL, NULL, &b);
                lc.clang_getSpellingLocation(lc.clang_getRangeEnd(r), NULL, NULL, NULL, &e);
                if (e > b) len = (int)(e - b);
            }
            diag_error(loc_clang(ck, lc.clang_getDiagnosticLocation(d), len), "%s", lc.clang_getCString(msg));
            lc.clang_disposeString(msg);
            CXDiagnosticSet kids = lc.clang_getChildDiagnostics(d);
            for (unsigned k = 0; k < lc.clang_getNumDiagnosticsInSet(kids); k++) {
                CXDiagnostic kd = lc.clang_getDiagnosticInSet(kids, k);
                CXFile kf;
                lc.clang_getSpellingLocation(lc.clang_getDiagnosticLocation(kd), &kf, NULL, NULL, NULL);
                /* "in file included from" our synthesized file says nothing to the user */
                if (!lc.clang_File_isEqual(kf, ck->main_file)) {
                    CXString km = lc.clang_getDiagnosticSpelling(kd);
                    diag_note(loc_clang(ck, lc.clang_getDiagnosticLocation(kd), 1), "%s", lc.clang_getCString(km));
                    lc.clang_disposeString(km);
                }
                lc.clang_disposeDiagnostic(kd);
            }
            n++;
        }
        lc.clang_disposeDiagnostic(d);
    }
    return n;
}

/* Collects the ABI's functions and the expected types (typedefs shardc_abi_F_P). */
static enum CXChildVisitResult visit(CXCursor c, CXCursor parent, CXClientData data)
{
    Check *ck = data;
    enum CXCursorKind k = lc.clang_getCursorKind(c);
    if (k != CXCursor_FunctionDecl && k != CXCursor_TypedefDecl) return CXChildVisit_Continue;
    CXString ns = lc.clang_getCursorSpelling(c);
    const char *name = lc.clang_getCString(ns);
    const CatalogAbi *abi = ck->x->abi;
    int f, p;
    if (k == CXCursor_TypedefDecl && sscanf(name, "shardc_abi_%d_%d", &f, &p) == 2 && f >= 0 && f < abi->nfns &&
        p >= 0 && p <= CATALOG_MAX_PARAMS) {
        ck->expect[f][p] = lc.clang_getCanonicalType(lc.clang_getTypedefDeclUnderlyingType(c));
        ck->have_expect[f][p] = true;
    } else if (k == CXCursor_FunctionDecl) {
        for (int i = 0; i < abi->nfns; i++) {
            const char *want = arena_printf(&g_arena, "%s%s", ck->x->name, abi->fns[i].suffix);
            if (!ck->have[i] && strcmp(name, want) == 0) {
                ck->found[i] = c;
                ck->have[i] = true;
            }
        }
    }
    lc.clang_disposeString(ns);
    return CXChildVisit_Continue;
}

/* A type for a message: 'i64' (aka 'long') when a typedef hides the canonical type. */
static const char *type_phrase(CXType t)
{
    CXString a = lc.clang_getTypeSpelling(t), b = lc.clang_getTypeSpelling(lc.clang_getCanonicalType(t));
    const char *s = strcmp(lc.clang_getCString(a), lc.clang_getCString(b)) == 0
                        ? arena_printf(&g_arena, "'%s'", lc.clang_getCString(a))
                        : arena_printf(&g_arena, "'%s' (aka '%s')", lc.clang_getCString(a), lc.clang_getCString(b));
    lc.clang_disposeString(a);
    lc.clang_disposeString(b);
    return s;
}

/* A libclang string as an arena string. */
static const char *take(CXString s)
{
    const char *d = arena_strdup(&g_arena, lc.clang_getCString(s) ? lc.clang_getCString(s) : "");
    lc.clang_disposeString(s);
    return d;
}

/* The comment above a declaration without its markers (as tools/opcatalog does). */
static const char *doc_of(CXCursor c)
{
    const char *raw = take(lc.clang_Cursor_getRawCommentText(c));
    char *out = arena_alloc(&g_arena, strlen(raw) + 1);
    size_t o = 0;
    for (const char *p = raw; *p;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        const char *b = p, *t = e;
        while (b < t && (*b == ' ' || *b == '\t' || *b == '/' || *b == '*')) b++;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r' || t[-1] == '/' || t[-1] == '*')) t--;
        if (t > b) {
            if (o) out[o++] = '\n';
            memcpy(out + o, b, (size_t)(t - b));
            o += (size_t)(t - b);
        }
        p = *e ? e + 1 : e;
    }
    return out;
}

/* Records a found function as a CatalogOp (for `shardc ops FILE`). */
static void record(Check *ck, int i, CXCursor c)
{
    CatalogOp *o = &ck->x->fns[i];
    int n = lc.clang_Cursor_getNumArguments(c);
    CatalogParam *ps = arena_alloc(&g_arena, sizeof *ps * (size_t)(n > 0 ? n : 1));
    for (int k = 0; k < n; k++) {
        CXCursor a = lc.clang_Cursor_getArgument(c, (unsigned)k);
        ps[k].name = take(lc.clang_getCursorSpelling(a));
        ps[k].type = take(lc.clang_getTypeSpelling(lc.clang_getCursorType(a)));
        ps[k].canon = take(lc.clang_getTypeSpelling(lc.clang_getCanonicalType(lc.clang_getCursorType(a))));
    }
    Loc l = loc_extent(ck, c, true);
    o->name = take(lc.clang_getCursorSpelling(c));
    o->op = ck->x->name;
    o->ret = take(lc.clang_getTypeSpelling(lc.clang_getCursorResultType(c)));
    o->nparams = n < 0 ? 0 : n;
    o->params = ps;
    o->arity = -1;
    o->kind = arena_printf(&g_arena, "%s%s", ck->x->abi->kind, ck->x->abi->fns[i].suffix);
    o->section = "user-defined";
    o->doc = doc_of(c);
    o->file = l.file ? l.file->path : ck->header_shown;
    o->line = l.line;
    o->col = l.col;
}

/* The found declaration, spelled back: "int sqrelu_forward(float *out)". */
static const char *found_signature(CXCursor c)
{
    CXString ns = lc.clang_getCursorSpelling(c);
    const char *s = arena_printf(&g_arena, "%s(", decl(take(lc.clang_getTypeSpelling(lc.clang_getCursorResultType(c))),
                                                      lc.clang_getCString(ns)));
    lc.clang_disposeString(ns);
    int n = lc.clang_Cursor_getNumArguments(c);
    for (int k = 0; k < n; k++) {
        CXCursor a = lc.clang_Cursor_getArgument(c, (unsigned)k);
        s = arena_printf(&g_arena, "%s%s%s", s, k ? ", " : "",
                         decl(take(lc.clang_getTypeSpelling(lc.clang_getCursorType(a))), take(lc.clang_getCursorSpelling(a))));
    }
    return arena_printf(&g_arena, "%s)", s);
}

/* Checks one found function against ABI fn i; errors at the header's line:col. */
static void check_fn(Check *ck, int i)
{
    const CatalogAbiFn *fn = &ck->x->abi->fns[i];
    CXCursor c = ck->found[i];
    const char *name = arena_printf(&g_arena, "%s%s", ck->x->name, fn->suffix);
    const char *want = catalog_abi_signature(fn, ck->x->name);
    const char *kind = ck->x->abi->kind;
    CXType ft = lc.clang_getCursorType(c);
    if (ft.kind == CXType_FunctionNoProto) {
        diag_error(loc_extent(ck, c, true), "%s is declared without a prototype", name);
        diag_hint("declare it as: %s;", want);
        return;
    }
    if (lc.clang_isFunctionTypeVariadic(ft)) {
        diag_error(loc_extent(ck, c, true), "%s is variadic (found: %s)", name, found_signature(c));
        diag_hint("declare it as: %s;", want);
        return;
    }
    CXType rt = lc.clang_getCursorResultType(c);
    if (!ck->have_expect[i][0]) die("catalog: no expected type for %s's return", name);
    if (!lc.clang_equalTypes(lc.clang_getCanonicalType(rt), ck->expect[i][0])) {
        /* the caret spans the return type: from the declaration's start to its name */
        Loc at = loc_extent(ck, c, false), name_at = loc_extent(ck, c, true);
        if (at.file && at.file == name_at.file && at.line == name_at.line && name_at.pos > at.pos) {
            const char *e = name_at.pos;
            while (e > at.pos && (e[-1] == ' ' || e[-1] == '\t')) e--;
            at.len = (int)(e - at.pos);
        }
        diag_error(at, "%s returns %s, but an %s's %s must return '%s'", name, type_phrase(rt),
                   kind, fn->suffix + 1, fn->ret);
        diag_hint("declare it as: %s;", want);
    }
    int n = lc.clang_Cursor_getNumArguments(c);
    if (n != fn->nparams) {
        diag_error(loc_extent(ck, c, true), "%s takes %d parameter%s, but an %s's %s takes %d (found: %s)", name, n,
                   n == 1 ? "" : "s", kind, fn->suffix + 1, fn->nparams, found_signature(c));
        diag_hint("declare it as: %s;", want);
        return;
    }
    bool bad = false;
    for (int k = 0; k < n; k++) {
        CXCursor a = lc.clang_Cursor_getArgument(c, (unsigned)k);
        CXType t = lc.clang_getCursorType(a);
        if (!ck->have_expect[i][k + 1]) die("catalog: no expected type for %s's parameter %d", name, k + 1);
        if (lc.clang_equalTypes(lc.clang_getCanonicalType(t), ck->expect[i][k + 1])) continue;
        CXString pn = lc.clang_getCursorSpelling(a);
        const char *pname = lc.clang_getCString(pn);
        diag_error(loc_extent(ck, a, false), "%s: parameter %d%s%s%s is %s, but the %s ABI wants '%s' (%s)", name, k + 1,
                   *pname ? " '" : "", pname, *pname ? "'" : "", type_phrase(t), kind, fn->types[k], fn->names[k]);
        lc.clang_disposeString(pn);
        bad = true;
    }
    if (bad) diag_hint("declare it as: %s;", want);
}

/* Parses the header in a translation unit that also spells the ABI's types, and checks. */
static void check_header(Check *ck, const char *path)
{
    const CatalogAbi *abi = ck->x->abi;
    /* the header first, alone, so a missing #include of its own is its error */
    const char *tu_text = arena_printf(&g_arena, "#include \"%s\"\n#include <stdint.h>\n#include <stddef.h>\n", path);
    for (int f = 0; f < abi->nfns; f++) {
        tu_text = arena_printf(&g_arena, "%stypedef %s shardc_abi_%d_0;\n", tu_text, abi->fns[f].ret, f);
        for (int p = 0; p < abi->fns[f].nparams; p++)
            tu_text = arena_printf(&g_arena, "%stypedef %s shardc_abi_%d_%d;\n", tu_text, abi->fns[f].types[p], f, p + 1);
    }
    const char *main_name = "shardc-abi-check.c";
    struct CXUnsavedFile uf = {main_name, tu_text, (unsigned long)strlen(tu_text)};
    const char *args[] = {"-x", "c", "-std=c11", "-fparse-all-comments"};
    if (!libclang_load()) {
        diag_error(sema_key_loc(ck->s, "model.activation.header"), "cannot check %s: libclang did not load (%s)",
                   ck->header_shown, lc.error);
        diag_hint("install libclang-14 (scripts/install-deps does), or rebuild shardc where it is");
        return;
    }
    CXIndex idx = lc.clang_createIndex(0, 0);
    enum CXErrorCode rc = lc.clang_parseTranslationUnit2(idx, main_name, args, 4, &uf, 1,
                                                      CXTranslationUnit_SkipFunctionBodies, &ck->tu);
    if (rc != CXError_Success) {
        lc.clang_disposeIndex(idx);
        diag_error(sema_key_loc(ck->s, "model.activation.header"), "libclang could not parse %s (error %d)",
                   ck->header_shown, (int)rc);
        return;
    }
    ck->main_file = lc.clang_getFile(ck->tu, main_name);
    if (show_clang_errors(ck)) {
        diag_hint("the header of extern \"%s\" must be valid C11 (try: cc -std=c11 -fsyntax-only %s)", ck->x->name,
                  ck->header_shown);
    } else {
        lc.clang_visitChildren(lc.clang_getTranslationUnitCursor(ck->tu), visit, ck);
        for (int i = 0; i < abi->nfns; i++) {
            const char *want = catalog_abi_signature(&abi->fns[i], ck->x->name);
            if (!ck->have[i]) {
                diag_error(sema_key_loc(ck->s, "model.activation.header"), "%s declares no %s%s: an %s needs its %s",
                           ck->header_shown, ck->x->name, abi->fns[i].suffix, abi->kind, abi->fns[i].suffix + 1);
                diag_hint("declare: %s;", want);
                continue;
            }
            record(ck, i, ck->found[i]);
            check_fn(ck, i);
        }
    }
    lc.clang_disposeTranslationUnit(ck->tu);
    lc.clang_disposeIndex(idx);
}

/* A source file the op names must exist: reports it if it cannot be read. */
static const char *check_source(const Spec *s, const char *key, const char *path, const char *what)
{
    if (!path || !*path) return NULL;
    Loc where = sema_key_loc(s, key);
    const char *p = resolve(s, where, path);
    if (access(p, R_OK) != 0) {
        int e = errno;
        diag_error(where, "the %s source of extern \"%s\", %s, cannot be read: %s", what, s->model.extern_name, p,
                   strerror(e));
        diag_hint("paths are relative to the directory of the spec file that names them");
    }
    return p;
}

/* Checks the spec's user-defined op against its kind's ABI. */
bool catalog_check_extern(const Spec *s, CatalogExtern *out)
{
    CatalogExtern local;
    CatalogExtern *x = out ? out : &local;
    memset(x, 0, sizeof *x);
    if (s->model.activation != ACT_EXTERN || !s->model.extern_header || !*s->model.extern_header) return true;
    int before = diag_errors;
    x->abi = catalog_abi("activation");
    x->name = s->model.extern_name;
    Loc hloc = sema_key_loc(s, "model.activation.header");
    x->header = resolve(s, hloc, s->model.extern_header);
    x->cpu = check_source(s, "model.activation.cpu", s->model.extern_cpu, "CPU");
    x->cuda = check_source(s, "model.activation.cuda", s->model.extern_cuda, "CUDA");
    if (!x->cpu && !x->cuda) {
        diag_error(sema_key_loc(s, "model.activation"), "extern \"%s\" names no source file to build it from", x->name);
        diag_hint("add cpu = \"ext/%s.c\" (CPU backend) and/or cuda = \"ext/%s.cu\" (GPU backend) to its block",
                  x->name, x->name);
    }
    if (s->precision.dtype != DT_FP32) {
        Loc at = sema_key_loc(s, "precision.dtype");
        diag_error(at.file ? at : sema_key_loc(s, "model.activation"),
                   "extern \"%s\" is an fp32 op (the activation ABI takes float *), but precision.dtype is not fp32",
                   x->name);
        diag_hint("set precision { dtype = fp32 }");
    }
    Check ck = {.s = s, .x = x, .header_shown = x->header};
    ck.header = load_src(x->header, x->header);
    if (!ck.header) {
        int e = errno;
        diag_error(hloc, "the header of extern \"%s\", %s, cannot be read: %s", x->name, x->header, util_strerror(e));
        diag_hint("paths are relative to the directory of the spec file that names them");
    } else {
        check_header(&ck, x->header);
    }
    return diag_errors == before;
}

/* The C call of a user op's function on runtime views (see catalog.h). */
const char *catalog_extern_call(const CatalogExtern *x, int fn, const char *const *views, int nviews)
{
    if (!x->abi || fn < 0 || fn >= x->abi->nfns) die("catalog: no function %d for this extern op", fn);
    const CatalogAbiFn *f = &x->abi->fns[fn];
    const char *s = arena_printf(&g_arena, "%s%s(", x->name, f->suffix);
    int v = 0;
    for (int i = 0; i < f->nparams; i++) {
        /* pointers take the views in order; the count is the first view's */
        const char *arg;
        if (strchr(f->types[i], '*')) {
            if (v >= nviews) die("catalog: %s%s needs more views than %d", x->name, f->suffix, nviews);
            arg = arena_printf(&g_arena, "(%s)%s.p", f->types[i], views[v++]);
        } else {
            arg = arena_printf(&g_arena, "%s.n", views[0]);
        }
        s = arena_printf(&g_arena, "%s%s%s", s, i ? ", " : "", arg);
    }
    if (v != nviews) die("catalog: %s%s takes %d views, not %d", x->name, f->suffix, v, nviews);
    return arena_printf(&g_arena, "%s);", s);
}

/* ---- shardc ops ----------------------------------------------------------- */

/* Prints the built-in ops by section, then the spec's user-defined ops. */
static void print_ops(FILE *out, const CatalogExtern *x)
{
    fprintf(out, "# %d runtime ops, from %s (SRT_OPS)\n", catalog_nops, catalog_nops ? catalog_ops[0].file : "");
    const char *section = NULL;
    for (int i = 0; i < catalog_nops; i++) {
        const CatalogOp *o = &catalog_ops[i];
        if (!section || strcmp(section, o->section) != 0) fprintf(out, "\n## %s\n\n", section = o->section);
        catalog_print_op(out, o);
    }
    fprintf(out, "\n# user-defined op kinds and their ABIs (docs/custom-ops.md)\n\n");
    for (int k = 0; k < catalog_nabis; k++) {
        const CatalogAbi *a = &catalog_abis[k];
        fprintf(out, "%s (%s = extern \"NAME\" { header = .. cpu = .. cuda = .. }): %s\n", a->kind, a->spec_key, a->doc);
        for (int f = 0; f < a->nfns; f++)
            fprintf(out, "    %s;\n        %s\n", catalog_abi_signature(&a->fns[f], "NAME"), a->fns[f].doc);
    }
    if (x && x->abi) {
        fprintf(out, "\n# user-defined %s \"%s\" (%s)\n\n", x->abi->kind, x->name, x->header);
        for (int f = 0; f < x->abi->nfns; f++) catalog_print_op(out, &x->fns[f]);
    }
}

/* shardc ops [FILE]: the catalog, and the spec's own ops (x: NULL without one). */
int catalog_ops_print(FILE *out, const CatalogExtern *x)
{
    print_ops(out, x);
    return fflush(out) == 0 ? EXIT_OK : EXIT_USER;
}
