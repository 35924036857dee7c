/* tok.c — a Hugging Face tokenizer.json, for decoding (see tok.h). */
#include "tok.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_MAX_FILE (256u << 20)       /* real ones are a few MB */
enum { TOK_MAX_STEPS = 16 };

/* One decoder that acts on each token by itself. */
typedef enum tok_kind { TOK_BYTE_LEVEL, TOK_REPLACE, TOK_BYTE_FALLBACK, TOK_STRIP, TOK_METASPACE } tok_kind;

typedef struct tok_step {
    tok_kind kind;
    const char *from, *to;      /* Replace: the String pattern and its content; Metaspace: the replacement */
    const char *content;        /* Strip: the character                                          */
    int64_t start, stop;        /* Strip                                                         */
    bool first;                 /* Metaspace: the first token drops the replacement (no leading space) */
} tok_step;

struct tok {
    cJSON *root;                /* the token strings point into it                      */
    const char **raw;           /* [n]: the token of each id, NULL where none           */
    int64_t n, bos;
    tok_step step[TOK_MAX_STEPS];
    int nsteps;
    bool joined;                /* no decoder: tokens joined with spaces               */
    const char *strip_text;     /* a Strip after Fuse: its character, and how many      */
    int64_t strip_text_n;
    char *buf, *tmp;            /* the decoded token and a scratch copy                */
    size_t cap;
};

/* Formats a message into err; returns -1. */
static int tok_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tok_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A whole file, NUL-terminated (malloc'ed), or NULL with a message. */
static char *tok_read(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > TOK_MAX_FILE) {
        tok_fail(err, errlen, "%s: cannot read: %s", path, !f ? strerror(errno) : !S_ISREG(st.st_mode)
                 ? "not a regular file" : "too large for a tokenizer");
        if (f) fclose(f);
        return NULL;
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t got = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!text || got != (size_t)st.st_size) {
        free(text);
        tok_fail(err, errlen, "%s: cannot read it whole", path);
        return NULL;
    }
    text[got] = 0;
    return text;
}

/* A JSON integer in [0, 2^53), else -1. */
static int64_t tok_id(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= 9007199254740992.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    return (int64_t)v->valuedouble;
}

/* The largest id of the vocabulary and the added tokens, + 1; -1 on a bad id. */
static int64_t tok_count(const cJSON *vocab, const cJSON *added)
{
    int64_t n = cJSON_IsArray(vocab) ? cJSON_GetArraySize(vocab) : 0;
    for (const cJSON *v = cJSON_IsObject(vocab) ? vocab->child : NULL; v; v = v->next) {
        int64_t id = tok_id(v);
        if (id < 0) return -1;
        if (id + 1 > n) n = id + 1;
    }
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next) {
        int64_t id = tok_id(cJSON_GetObjectItemCaseSensitive(a, "id"));
        if (id < 0) return -1;
        if (id + 1 > n) n = id + 1;
    }
    return n;
}

/* Sets t->raw[id] = s; an id at or past the model's vocabulary is refused. */
static int tok_put(tok *t, const char *path, int64_t id, const char *s, int64_t vocab, char *err, size_t errlen)
{
    if (!s) return tok_fail(err, errlen, "%s: token %lld is not a string", path, (long long)id);
    if (id >= vocab)
        return tok_fail(err, errlen, "%s: token '%s' has id %lld, but the model's vocabulary has %lld tokens "
                        "(model.vocab)", path, s, (long long)id, (long long)vocab);
    t->raw[id] = s;
    return 0;
}

/* The vocabulary: the model's, then the added tokens (which win). */
static int tok_vocab(tok *t, const char *path, int64_t vocab, char *err, size_t errlen)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(t->root, "model");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(t->root, "added_tokens");
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return tok_fail(err, errlen, "%s: no model.vocab (an object of token: id, or Unigram's list)", path);
    t->n = tok_count(v, added);
    if (t->n < 0) return tok_fail(err, errlen, "%s: a token id is not a non-negative integer", path);
    t->raw = calloc((size_t)t->n + 1, sizeof *t->raw);
    if (!t->raw) return tok_fail(err, errlen, "%s: out of memory", path);
    int64_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        const char *s = cJSON_IsArray(v) ? cJSON_GetStringValue(cJSON_GetArrayItem(e, 0)) : e->string;
        if (tok_put(t, path, cJSON_IsArray(v) ? i : tok_id(e), s, vocab, err, errlen)) return -1;
    }
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next)
        if (tok_put(t, path, tok_id(cJSON_GetObjectItemCaseSensitive(a, "id")),
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "content")), vocab, err, errlen))
            return -1;
    return 0;
}

/* A string member, or "" (absent). */
static const char *tok_str(const cJSON *o, const char *key)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
    return s ? s : "";
}

/* An integer member, or def. */
static int64_t tok_int(const cJSON *o, const char *key, int64_t def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v ? tok_id(v) : def;
}

/* One decoder (recursing into a Sequence) into t's steps; *fused after a Fuse. */
static int tok_decoder(tok *t, const char *path, const cJSON *d, bool *fused, char *err, size_t errlen)
{
    const char *type = tok_str(d, "type");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next)
            if (tok_decoder(t, path, e, fused, err, errlen)) return -1;
        return 0;
    }
    if (strcmp(type, "Fuse") == 0) {
        *fused = true;
        return 0;
    }
    if (t->nsteps == TOK_MAX_STEPS) return tok_fail(err, errlen, "%s: more than %d decoders", path, TOK_MAX_STEPS);
    tok_step *s = &t->step[t->nsteps];
    if (strcmp(type, "ByteLevel") == 0) {
        s->kind = TOK_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        s->kind = TOK_BYTE_FALLBACK;
    } else if (strcmp(type, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(d, "pattern");
        s->kind = TOK_REPLACE;
        s->from = tok_str(pat, "String");
        s->to = tok_str(d, "content");
        if (!*s->from) return tok_fail(err, errlen, "%s: decoder Replace: only a \"String\" pattern is supported", path);
    } else if (strcmp(type, "Metaspace") == 0) {
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(d, "add_prefix_space");
        const char *scheme = tok_str(d, "prepend_scheme");
        s->kind = TOK_METASPACE;
        s->from = *tok_str(d, "replacement") ? tok_str(d, "replacement") : "\xe2\x96\x81";
        s->first = *scheme ? strcmp(scheme, "never") != 0 : !cJSON_IsFalse(add);
    } else if (strcmp(type, "Strip") == 0) {
        s->kind = TOK_STRIP;
        s->content = tok_str(d, "content");
        s->start = tok_int(d, "start", 0), s->stop = tok_int(d, "stop", 0);
        if (!*s->content || s->start < 0 || s->stop < 0)
            return tok_fail(err, errlen, "%s: decoder Strip needs a content character and counts", path);
        if (*fused) {   /* acts on the whole text: at its start */
            if (s->stop > 0 || t->strip_text)
                return tok_fail(err, errlen, "%s: decoder Strip after Fuse: only a leading strip is supported", path);
            t->strip_text = s->content, t->strip_text_n = s->start;
            return 0;
        }
    } else {
        return tok_fail(err, errlen, "%s: decoder '%s' is not supported (shardc decodes ByteLevel, Metaspace, Replace, "
                        "ByteFallback, Fuse, Strip and their Sequence)", path, *type ? type : "(no type)");
    }
    t->nsteps++;
    return 0;
}

/* The first special token of the post_processor's template, or -1. */
static int64_t tok_template_bos(const cJSON *pp)
{
    if (strcmp(tok_str(pp, "type"), "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next) {
            int64_t b = tok_template_bos(e);
            if (b >= 0) return b;
        }
        return -1;
    }
    if (strcmp(tok_str(pp, "type"), "TemplateProcessing") != 0) return -1;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    const char *name = tok_str(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pp, "special_tokens"), name);
    return *name ? tok_id(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(sp, "ids"), 0)) : -1;
}

/* The token a sample starts from (see tok.h). */
static int64_t tok_find_bos(const tok *t)
{
    int64_t b = tok_template_bos(cJSON_GetObjectItemCaseSensitive(t->root, "post_processor"));
    if (b >= 0 && b < t->n) return b;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(t->root, "added_tokens");
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special")))
            return tok_id(cJSON_GetObjectItemCaseSensitive(a, "id"));
    return -1;
}

int tok_open(tok **out, const char *path, int64_t vocab, char *err, size_t errlen)
{
    *out = NULL;
    char *text = tok_read(path, err, errlen);
    if (!text) return -1;
    tok *t = calloc(1, sizeof *t);
    if (t) t->root = cJSON_Parse(text);
    free(text);
    int rc = 0;
    if (!t) rc = tok_fail(err, errlen, "%s: out of memory", path);
    else if (!cJSON_IsObject(t->root)) rc = tok_fail(err, errlen, "%s: not a JSON object (a tokenizer.json?)", path);
    if (!rc) rc = tok_vocab(t, path, vocab, err, errlen);
    const cJSON *dec = rc ? NULL : cJSON_GetObjectItemCaseSensitive(t->root, "decoder");
    bool fused = false;
    if (!rc && cJSON_IsObject(dec)) rc = tok_decoder(t, path, dec, &fused, err, errlen);
    else if (!rc) t->joined = true;     /* tokenizers without a decoder join the tokens with spaces */
    if (!rc) t->bos = tok_find_bos(t);
    if (rc) {
        tok_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tok_close(tok *t)
{
    if (!t) return;
    cJSON_Delete(t->root);
    free(t->raw);
    free(t->buf);
    free(t->tmp);
    free(t);
}

int64_t tok_bos(const tok *t) { return t->bos; }
int64_t tok_size(const tok *t) { return t->n; }

/* ---- decoding ---------------------------------------------------------------- */

/* The byte GPT-2's bytes_to_unicode maps to code point cp, or -1: the
 * printable bytes are themselves, the others 256 + their rank among them. */
static int tok_byte_of(unsigned cp)
{
    static int table[324];
    static bool made;
    if (!made) {
        for (unsigned i = 0; i < 324; i++) table[i] = -1;
        unsigned k = 0;
        for (unsigned b = 0; b < 256; b++) {
            bool self = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
            table[self ? b : 256 + k++] = (int)b;
        }
        made = true;
    }
    return cp < 324 ? table[cp] : -1;
}

/* The code point of the UTF-8 character at s (of n bytes), its length in *len. */
static unsigned tok_utf8(const unsigned char *s, size_t n, size_t *len)
{
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
    if (k > n) k = 1;
    unsigned cp = k == 1 ? c : c & (0x7f >> k);
    for (size_t i = 1; i < k; i++) cp = cp << 6 | (s[i] & 0x3fu);
    *len = k;
    return cp;
}

/* Makes room for n bytes in t->buf and t->tmp; false when memory ran out. */
static bool tok_room(tok *t, size_t n)
{
    if (n + 8 <= t->cap) return true;
    size_t cap = 2 * n + 64;
    char *b = realloc(t->buf, cap);
    if (b) t->buf = b;
    char *m = b ? realloc(t->tmp, cap) : NULL;
    if (m) t->tmp = m, t->cap = cap;
    return m != NULL;
}

/* Replaces every `from` in buf[0, *n) by `to` (nothing without memory). */
static void tok_replace(tok *t, size_t *n, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), m = 0;
    if (!tok_room(t, *n * (tl > fl ? tl : 1) + 1)) return;
    memcpy(t->tmp, t->buf, *n);
    for (size_t i = 0; i < *n;) {
        if (i + fl <= *n && memcmp(t->tmp + i, from, fl) == 0) {
            memcpy(t->buf + m, to, tl), m += tl, i += fl;
        } else {
            t->buf[m++] = t->tmp[i++];
        }
    }
    *n = m;
}

/* The value of a hexadecimal digit, or -1. */
static int tok_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Applies one per-token decoder to buf[0, *n); first: the sequence's first token. */
static void tok_apply(tok *t, const tok_step *s, size_t *n, bool first)
{
    char *b = t->buf;
    if (s->kind == TOK_REPLACE) {
        tok_replace(t, n, s->from, s->to);
    } else if (s->kind == TOK_METASPACE) {
        tok_replace(t, n, s->from, first && s->first ? "" : " ");
    } else if (s->kind == TOK_BYTE_FALLBACK) {
        int hi = *n == 6 && memcmp(b, "<0x", 3) == 0 && b[5] == '>' ? tok_hex(b[3]) : -1, lo = hi >= 0 ? tok_hex(b[4]) : -1;
        if (lo >= 0) b[0] = (char)(hi << 4 | lo), *n = 1;
    } else if (s->kind == TOK_BYTE_LEVEL) {
        size_t m = 0, len;
        for (size_t i = 0; i < *n; i += len) {
            int byte = tok_byte_of(tok_utf8((const unsigned char *)b + i, *n - i, &len));
            if (byte >= 0) b[m++] = (char)byte;
            else memmove(b + m, b + i, len), m += len;
        }
        *n = m;
    } else if (s->kind == TOK_STRIP) {
        size_t cl = strlen(s->content), a = 0, e = *n;
        for (int64_t k = 0; k < s->start && a + cl <= e && memcmp(b + a, s->content, cl) == 0; k++) a += cl;
        for (int64_t k = 0; k < s->stop && e >= a + cl && memcmp(b + e - cl, s->content, cl) == 0; k++) e -= cl;
        memmove(b, b + a, e - a);
        *n = e - a;
    }
}

void tok_stream_begin(tok_stream *s, const tok *t)
{
    s->t = t;
    s->started = false;
    s->strip_left = t->strip_text ? t->strip_text_n : 0;
}

const char *tok_stream_next(tok_stream *s, int64_t id, size_t *len)
{
    tok *t = (tok *)s->t;       /* its scratch buffers only */
    const char *raw = id >= 0 && id < t->n ? t->raw[id] : NULL;
    *len = 0;
    if (!raw) return "";        /* an id without a token decodes to nothing */
    size_t n = strlen(raw);
    if (!tok_room(t, n + 1)) return "";     /* out of memory: the token is not printed */
    char *b = t->buf;
    if (t->joined && s->started) b[0] = ' ';
    memcpy(b + (t->joined && s->started), raw, n);
    n += t->joined && s->started;
    for (int i = 0; i < t->nsteps; i++) tok_apply(t, &t->step[i], &n, !s->started);
    s->started = true;
    /* a Strip after Fuse: the text's first characters */
    size_t cl = t->strip_text ? strlen(t->strip_text) : 0, a = 0;
    while (s->strip_left > 0 && a < n) {
        if (a + cl <= n && memcmp(t->buf + a, t->strip_text, cl) == 0) a += cl, s->strip_left--;
        else s->strip_left = 0;
    }
    *len = n - a;
    return t->buf + a;
}
