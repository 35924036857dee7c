/* safetensors.c — the strict safetensors reader (see safetensors.h). */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000u        /* the safetensors library's own limit */

struct st_file {
    char *path;
    const unsigned char *bytes;         /* the whole file                          */
    size_t len;
    void *map;                          /* what st_close unmaps (NULL: borrowed)   */
    cJSON *header;
    const cJSON *meta;                  /* "__metadata__", or NULL                 */
    st_tensor *t;                       /* by data offset                          */
    const st_tensor **by_name;          /* the same, names ascending               */
    int n;
    uint64_t data_off;                  /* 8 + the header's length                 */
};

static const char *const st_names[ST_NDTYPES] = {
#define ST_NAME(name, size) #name,
    ST_DTYPES(ST_NAME)
#undef ST_NAME
};
static const int st_sizes[ST_NDTYPES] = {
#define ST_SIZE(name, size) size,
    ST_DTYPES(ST_SIZE)
#undef ST_SIZE
};

const char *st_dtype_name(st_dtype dt) { return (unsigned)dt < ST_NDTYPES ? st_names[dt] : "?"; }
int st_dtype_size(st_dtype dt) { return (unsigned)dt < ST_NDTYPES ? st_sizes[dt] : 0; }

/* Formats a message into err; returns -1. */
static int st_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int st_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Whether s[0, n) is well-formed UTF-8 without NUL bytes (the header's text). */
static bool st_utf8(const unsigned char *s, size_t n, size_t *bad)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
        bool ok = c != 0 && k != 9 && i + k < n + (k == 0) && !(k == 1 && c < 0xc2) && !(k == 3 && c > 0xf4);
        for (size_t j = 1; ok && j <= k; j++) ok = (s[i + j] & 0xc0) == 0x80;
        if (ok && k == 2) {             /* no overlong forms, no surrogates */
            unsigned v = ((c & 0x0f) << 12) | ((s[i + 1] & 0x3fu) << 6) | (s[i + 2] & 0x3fu);
            ok = v >= 0x800 && (v < 0xd800 || v > 0xdfff);
        }
        if (ok && k == 3) {
            unsigned v = ((c & 0x07) << 18) | ((s[i + 1] & 0x3fu) << 12);
            ok = v >= 0x10000 && v <= 0x10ffff;
        }
        if (!ok) {
            *bad = i;
            return false;
        }
        i += k + 1;
    }
    return true;
}

/* A JSON number that is an integer in [0, 2^53]: its value, else -1. */
static int64_t st_uint(const cJSON *x)
{
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v) return -1;
    return (int64_t)v;
}

/* The dtype a header names, or -1. */
static int st_dtype_parse(const char *s)
{
    for (int i = 0; s && i < ST_NDTYPES; i++)
        if (strcmp(s, st_names[i]) == 0) return i;
    return -1;
}

/* One tensor entry of the header into t; -1 with a message naming it. */
static int st_entry(const st_file *f, const cJSON *e, st_tensor *t, char *err, size_t errlen)
{
    const char *p = f->path, *name = e->string;
    t->name = name;
    if (!cJSON_IsObject(e)) return st_fail(err, errlen, "%s: tensor '%s': its entry is not an object", p, name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *m = e->child; m; m = m->next) {
        const cJSON **slot = strcmp(m->string, "dtype") == 0 ? &dtype : strcmp(m->string, "shape") == 0 ? &shape
                             : strcmp(m->string, "data_offsets") == 0 ? &offs : NULL;
        if (!slot) return st_fail(err, errlen, "%s: tensor '%s': unknown member '%s'", p, name, m->string);
        if (*slot) return st_fail(err, errlen, "%s: tensor '%s': member '%s' given twice", p, name, m->string);
        *slot = m;
    }
    int dt = st_dtype_parse(cJSON_GetStringValue(dtype));
    if (dt < 0)
        return st_fail(err, errlen, "%s: tensor '%s': %s dtype%s%s", p, name, dtype ? "unknown" : "no",
                       cJSON_IsString(dtype) ? " " : "", cJSON_IsString(dtype) ? dtype->valuestring : "");
    t->dtype = (st_dtype)dt;
    int nd = cJSON_GetArraySize(shape);
    if (!cJSON_IsArray(shape) || nd > ST_MAX_DIMS)
        return st_fail(err, errlen, "%s: tensor '%s': the shape is not a list of at most %d sizes", p, name,
                       ST_MAX_DIMS);
    uint64_t numel = 1;
    t->ndim = nd;
    for (int i = 0; i < nd; i++) {
        int64_t d = st_uint(cJSON_GetArrayItem(shape, i));
        if (d < 0 || __builtin_mul_overflow(numel, (uint64_t)d, &numel))
            return st_fail(err, errlen, "%s: tensor '%s': shape entry %d is not a size", p, name, i);
        t->shape[i] = d;
    }
    int64_t b = st_uint(cJSON_GetArrayItem(offs, 0)), en = st_uint(cJSON_GetArrayItem(offs, 1));
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || b < 0 || en < b)
        return st_fail(err, errlen, "%s: tensor '%s': data_offsets is not [begin, end] with begin <= end", p, name);
    t->begin = (uint64_t)b, t->end = (uint64_t)en;
    uint64_t want;
    if (__builtin_mul_overflow(numel, (uint64_t)st_sizes[dt], &want) || want != t->end - t->begin)
        return st_fail(err, errlen, "%s: tensor '%s': %llu bytes for %llu elements of %s", p, name,
                       (unsigned long long)(t->end - t->begin), (unsigned long long)numel, st_names[dt]);
    return 0;
}

/* qsort comparators: tensors by data offset (ties by name, for a stable
 * message); pointers to tensors by name. */
static int st_by_offset(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}
static int st_by_name(const void *a, const void *b)
{
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* Parses and checks the header of f->bytes (see safetensors.h). */
static int st_parse(st_file *f, char *err, size_t errlen)
{
    const char *p = f->path;
    if (f->len < 8) return st_fail(err, errlen, "%s: not a safetensors file: %zu bytes, shorter than the header length", p, f->len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)f->bytes[i] << (8 * i);
    if (n > ST_MAX_HEADER || n > f->len - 8)
        return st_fail(err, errlen, "%s: not a safetensors file: a header of %llu bytes in a file of %zu", p,
                       (unsigned long long)n, f->len);
    const char *h = (const char *)f->bytes + 8;
    size_t bad;
    if (n == 0 || h[0] != '{') return st_fail(err, errlen, "%s: not a safetensors file: the header does not start with '{'", p);
    if (!st_utf8((const unsigned char *)h, n, &bad))
        return st_fail(err, errlen, "%s: not a safetensors file: byte %zu of the header is %s", p, bad,
                       h[bad] ? "not UTF-8" : "NUL");
    const char *end = NULL;
    f->header = cJSON_ParseWithLengthOpts(h, n, &end, 0);
    if (!f->header || !cJSON_IsObject(f->header))
        return st_fail(err, errlen, "%s: not a safetensors file: the header is not a JSON object (at byte %td)", p,
                       (end ? end : cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : h) - h);
    for (const char *q = end; q < h + n; q++)
        if (!strchr(" \t\r\n", *q))
            return st_fail(err, errlen, "%s: not a safetensors file: the header has bytes after its object (at byte %td)", p,
                           q - h);
    f->data_off = 8 + n;
    int count = cJSON_GetArraySize(f->header);
    f->t = calloc((size_t)count + 1, sizeof *f->t);
    f->by_name = calloc((size_t)count + 1, sizeof *f->by_name);
    if (!f->t || !f->by_name) return st_fail(err, errlen, "%s: out of memory", p);
    for (const cJSON *e = f->header->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (f->meta) return st_fail(err, errlen, "%s: __metadata__ given twice", p);
            if (!cJSON_IsObject(e)) return st_fail(err, errlen, "%s: __metadata__ is not an object", p);
            for (const cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return st_fail(err, errlen, "%s: __metadata__ member '%s' is not a string", p, m->string);
            f->meta = e;
            continue;
        }
        if (st_entry(f, e, &f->t[f->n], err, errlen)) return -1;
        f->n++;
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, st_by_offset);
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, st_by_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            return st_fail(err, errlen, "%s: tensor '%s' is listed twice", p, f->by_name[i]->name);
    uint64_t at = 0, data = f->len - f->data_off;
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        if (t->begin != at)
            return st_fail(err, errlen, "%s: tensor '%s': its data starts at byte %llu of the data, not at %llu where %s",
                           p, t->name, (unsigned long long)t->begin, (unsigned long long)at,
                           i ? "the previous tensor's end" : "the data start");
        if (t->end > data)
            return st_fail(err, errlen, "%s: tensor '%s': its data end at byte %llu, past the file's %llu bytes of data",
                           p, t->name, (unsigned long long)t->end, (unsigned long long)data);
        at = t->end;
    }
    if (at != data)
        return st_fail(err, errlen, "%s: %llu bytes follow the last tensor's data (the file is %zu bytes, the header "
                       "accounts for %llu)", p, (unsigned long long)(data - at), f->len,
                       (unsigned long long)(f->data_off + at));
    return 0;
}

/* A new st_file over bytes; parses them. */
static int st_make(st_file **out, const void *bytes, size_t len, void *map, const char *name, char *err,
                   size_t errlen)
{
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        free(f);
        if (map) munmap(map, len);
        return st_fail(err, errlen, "%s: out of memory", name);
    }
    f->bytes = bytes, f->len = len, f->map = map;
    if (st_parse(f, err, errlen)) {
        st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int st_open_mem(st_file **out, const void *bytes, size_t len, const char *name, char *err, size_t errlen)
{
    return st_make(out, bytes, len, NULL, name, err, errlen);
}

/* Opens path without blocking (a FIFO would), refuses what is not a regular file, maps it. */
int st_open(st_file **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return st_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return st_fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(err, errlen, "%s: not a regular file (%s)", path,
                       S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
                       : "a device");
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return st_fail(err, errlen, "%s: cannot map: %s", path, strerror(e));
    return st_make(out, map ? map : (const void *)"", len, map, path, err, errlen);
}

void st_close(st_file *f)
{
    if (!f) return;
    if (f->map) munmap(f->map, f->len);
    cJSON_Delete(f->header);
    free(f->t);
    free(f->by_name);
    free(f->path);
    free(f);
}

const char *st_path(const st_file *f) { return f->path; }
int st_count(const st_file *f) { return f->n; }
const st_tensor *st_tensor_at(const st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }
const void *st_data(const st_file *f, const st_tensor *t) { return f->bytes + f->data_off + t->begin; }

const st_tensor *st_find(const st_file *f, const char *name)
{
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f->meta, key));
}

int st_read(const st_file *f, const st_tensor *t, uint64_t off, uint64_t len, void *out, char *err, size_t errlen)
{
    if (off > t->end - t->begin || len > t->end - t->begin - off)
        return st_fail(err, errlen, "%s: tensor '%s': bytes [%llu, %llu) are outside its %llu bytes", f->path, t->name,
                       (unsigned long long)off, (unsigned long long)(off + len),
                       (unsigned long long)(t->end - t->begin));
    memcpy(out, (const char *)st_data(f, t) + off, (size_t)len);
    return 0;
}
