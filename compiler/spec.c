/* spec.c — the parse driver: reading spec files, includes, and the AST's names.
 *
 * The grammar and the token loop live in grammar/parser.y (spec_parse_src);
 * this file gives it sources: the top-level file, text held in memory, and
 * every `include "path"`, which is parsed on the spot so that its items take
 * the include's place (a later definition overrides an earlier one).
 */
#include "shardc.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

bool spec_allow_include = true;

/* One file being parsed; the chain runs from the innermost to the top. */
struct SpecChain {
    const SpecChain *parent;
    const char *path;       /* as shown to the user                        */
    const char *dir;        /* includes resolve against this ("" = cwd)    */
    bool has_id;            /* dev/ino known (not stdin, not memory)       */
    dev_t dev;
    ino_t ino;
    int depth;              /* 0 for the top-level file                    */
};

/* The kind of a value as messages name it ("expected a byte size"). */
const char *spec_valkind_name(ValKind k)
{
    switch (k) {
    case V_INT: return "integer";
    case V_FLOAT: return "number";
    case V_BYTES: return "byte size";
    case V_BANDWIDTH: return "bandwidth";
    case V_BOOL: return "boolean";
    case V_IDENT: return "name";
    case V_STRING: return "string";
    case V_LIST: return "list";
    case V_TUPLE: return "tuple";
    }
    return "value";
}

/* The directory part of path, "" when it has none ("a.tspec" -> ""). */
static const char *spec_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return "";
    return arena_strndup(&g_arena, path, (size_t)(slash - path) + 1);
}

/* An include's path, relative to the including file's directory. */
static const char *spec_resolve(const char *dir, const char *path)
{
    if (path[0] == '/' || !dir[0]) return path;
    return arena_printf(&g_arena, "%s%s", dir, path);
}

/* A source file record for text already in the arena. */
static SrcFile *spec_src(const char *path, const char *text, size_t len)
{
    SrcFile *f = arena_alloc(&g_arena, sizeof *f);
    f->path = path;
    f->text = text;
    f->len = len;
    return f;
}

/* "a.tspec -> b.tspec -> a.tspec": the chain from the top file down to
 * chain, then last. */
static const char *spec_chain_text(const SpecChain *chain, const char *last)
{
    const char *s = last;
    for (const SpecChain *c = chain; c; c = c->parent)
        s = arena_printf(&g_arena, "%s -> %s", c->path, s);
    return s;
}

/* Reads path for a parse; reports failures at `at` (or plainly when NULL). */
static SrcFile *spec_read(const char *path, const Loc *at)
{
    size_t len = 0;
    char *text = util_read_file(path, &len, SPEC_MAX_FILE_BYTES);
    const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (text) return spec_src(shown, text, len);
    if (errno == EFBIG) {
        if (at)
            diag_error(*at, "'%s' is larger than %u MiB, the limit for a spec file", shown,
                       SPEC_MAX_FILE_BYTES >> 20);
        else
            diag_plain("'%s' is larger than %u MiB, the limit for a spec file", shown,
                       SPEC_MAX_FILE_BYTES >> 20);
        return NULL;
    }
    const char *why = util_strerror(errno);
    if (at)
        diag_error(*at, "cannot read '%s': %s", shown, why);
    else
        diag_plain("cannot read '%s': %s", shown, why);
    return NULL;
}

/* Parses the top-level file (or stdin for "-"); includes resolve beside it. */
Item *spec_parse_file(const char *path)
{
    SrcFile *f = spec_read(path, NULL);
    if (!f) return NULL;
    SpecChain top = {.path = f->path, .dir = ""};
    struct stat st;
    if (strcmp(path, "-") != 0) {
        top.dir = spec_dirname(path);
        if (stat(path, &st) == 0) {
            top.has_id = true;
            top.dev = st.st_dev;
            top.ino = st.st_ino;
        }
    }
    return spec_parse_src(f, &top);
}

/* Parses text from memory under a file name; includes resolve from the cwd. */
Item *spec_parse_text(const char *name, const char *text, size_t len)
{
    if (len > SPEC_MAX_FILE_BYTES) {
        diag_plain("'%s' is larger than %u MiB, the limit for a spec file", name,
                   SPEC_MAX_FILE_BYTES >> 20);
        return NULL;
    }
    /* The lexer needs the NUL sentinel, and locations outlive the caller's buffer. */
    SrcFile *f = spec_src(arena_strdup(&g_arena, name), arena_strndup(&g_arena, text, len), len);
    SpecChain top = {.path = f->path, .dir = ""};
    return spec_parse_src(f, &top);
}

/* Reads and parses an included file, refusing cycles and deep chains. */
Item *spec_include(const Token *path, SpecChain *chain, Item **tail)
{
    *tail = NULL;
    const Loc *at = &path->loc;
    if (!spec_allow_include) {
        diag_error(*at, "include is not allowed here");
        return NULL;
    }
    if (chain->depth + 1 > SPEC_MAX_INCLUDE_DEPTH) {
        diag_error(*at, "includes nested deeper than %d levels", SPEC_MAX_INCLUDE_DEPTH);
        return NULL;
    }
    const char *full = spec_resolve(chain->dir, path->str);
    struct stat st;
    if (stat(full, &st) != 0) {
        diag_error(*at, "cannot read '%s': %s", full, strerror(errno));
        if (full != path->str) diag_hint("an include is relative to the directory of the file that includes it");
        return NULL;
    }
    for (const SpecChain *c = chain; c; c = c->parent) {
        if (c->has_id && c->dev == st.st_dev && c->ino == st.st_ino) {
            diag_error(*at, "include cycle: '%s' is already being read", full);
            diag_hint("%s", spec_chain_text(chain, full));
            return NULL;
        }
    }
    SrcFile *f = spec_read(full, at);
    if (!f) return NULL;
    SpecChain child = {
        .parent = chain, .path = full, .dir = spec_dirname(full),
        .has_id = true, .dev = st.st_dev, .ino = st.st_ino, .depth = chain->depth + 1,
    };
    Item *items = spec_parse_src(f, &child);
    Item *last = items;
    while (last && last->next) last = last->next;
    *tail = last;
    return items;
}
