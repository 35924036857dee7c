/* ckpt.c — safetensors rank files, the index, atomic saves, slice reads (see ckpt.h). */
#define _GNU_SOURCE             /* renameat2 */
#include "ckpt.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/file.h>
#include <unistd.h>
#define XXH_INLINE_ALL                  /* Debian's libxxhash-dev, compiled in: no link flag */
#include <xxhash.h>

#define CKPT_FORMAT "shardc-checkpoint"
#define CKPT_VERSION 2                  /* 2: checksums, the save's identity in every file */
#define CKPT_MAX_INDEX (1u << 30)       /* index.json: far beyond any model's              */

void (*ckpt_crash_hook)(const char *point);

/* Calls the test seam, if any, at a named point of a save. */
static void crash_point(const char *point)
{
    if (ckpt_crash_hook) ckpt_crash_hook(point);
}

/* Formats an error message into err and returns code. */
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- small helpers: a string map, dtypes, conversions ---------------------- */

/* Open-addressing map from borrowed strings to ints (tensor and key lookups). */
typedef struct strmap { const char **keys; int *vals; size_t cap, n; } strmap;

/* FNV-1a of a string. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The value of k, or -1. */
static int strmap_get(const strmap *m, const char *k)
{
    if (!m->cap) return -1;
    for (size_t i = hash_str(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return -1;
        if (strcmp(m->keys[i], k) == 0) return m->vals[i];
    }
}

/* Inserts k -> v; false if k is present or memory ran out. */
static bool strmap_put(strmap *m, const char *k, int v)
{
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        strmap g = {calloc(cap, sizeof *g.keys), calloc(cap, sizeof *g.vals), cap, 0};
        if (!g.keys || !g.vals) {
            free(g.keys), free(g.vals);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) strmap_put(&g, m->keys[i], m->vals[i]);
        free(m->keys), free(m->vals);
        *m = g;
    }
    size_t i = hash_str(k) & (m->cap - 1);
    for (; m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (strcmp(m->keys[i], k) == 0) return false;
    m->keys[i] = k;
    m->vals[i] = v;
    m->n++;
    return true;
}

/* Frees the map's tables (not the keys). */
static void strmap_free(strmap *m)
{
    free(m->keys), free(m->vals);
    memset(m, 0, sizeof *m);
}

static const char *const dtype_names[] = {[CKPT_F32] = "F32", [CKPT_BF16] = "BF16", [CKPT_F16] = "F16"};

/* Bytes per element of a dtype. */
static int dtype_size(int dt) { return dt == CKPT_F32 ? 4 : 2; }

/* The dtype named by a safetensors dtype string, or -1. */
static int dtype_parse(const char *s)
{
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, dtype_names[i]) == 0) return i;
    return -1;
}

/* fp32 -> bf16, rounding to nearest even. */
uint16_t ckpt_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* bf16 -> fp32 (exact). */
float ckpt_f32_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> IEEE fp16, rounding to nearest even: subnormals below 2^-14,
 * infinity above 65504 (and for infinity), NaN stays NaN (quiet). */
uint16_t ckpt_f16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;                 /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00;                /* rounds past 65504: inf */
    if (a >= 0x38800000u) {                                    /* normal: rebias 127 -> 15 */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1);
        return sign | (uint16_t)(r >> 13);
    }
    if (a < 0x33000000u) return sign;                          /* below half the least subnormal */
    /* subnormal: the mantissa with its implicit bit, shifted into 2^-24 units */
    int e = (int)(a >> 23);
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - e;                                       /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (uint16_t)q;
}

/* IEEE fp16 -> fp32 (exact, subnormals included). */
float ckpt_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp) {
        u = sign | ((exp + 112) << 23) | (man << 13);
    } else if (!man) {
        u = sign;
    } else {                                /* subnormal: normalise the mantissa */
        int e = 113;
        while (!(man & 0x400)) man <<= 1, e--;
        u = sign | ((uint32_t)e << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n elements of dtype dt starting at element i of src, as fp32. */
static void convert(float *out, const void *src, int dt, int64_t i, int64_t n)
{
    if (dt == CKPT_F32) {
        memcpy(out, (const float *)src + i, (size_t)n * 4);
        return;
    }
    const uint16_t *h = (const uint16_t *)src + i;
    for (int64_t j = 0; j < n; j++)
        out[j] = dt == CKPT_BF16 ? ckpt_f32_from_bf16(h[j]) : ckpt_f32_from_f16(h[j]);
}

/* ---- file-system helpers ------------------------------------------------------ */

/* write(2) until every byte is out. */
static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

/* fsync a directory, making the renames and creations in it durable. */
static bool fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0 || errno == EINVAL;    /* some file systems cannot */
    close(fd);
    return ok;
}

/* Removes a directory of plain files (a checkpoint or its temporary). */
static void rm_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p)
                unlink(p);
        closedir(d);
    }
    rmdir(dir);
}

/* mkdir -p. */
static bool mkdir_p(const char *dir)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return false;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return false;
        *s = '/';
    }
    return mkdir(p, 0755) == 0 || errno == EEXIST;
}

/* Whether path exists. */
static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* DIR/step-N, DIR/step-N.tmp-TOKEN and friends; false if the path is too long. */
static bool step_path(char *out, const char *dir, int64_t step, const char *suffix, uint64_t token)
{
    int n = suffix ? snprintf(out, PATH_MAX, "%s/step-%lld.%s-%016llx", dir, (long long)step, suffix,
                              (unsigned long long)token)
                   : snprintf(out, PATH_MAX, "%s/step-%lld", dir, (long long)step);
    return n > 0 && n < PATH_MAX;
}

/* The unique safetensors key of a piece. */
static void piece_key(char *out, size_t len, const char *kind, const char *tensor, int64_t r0,
                      int64_t r1, int64_t c0, int64_t c1, int64_t f0, int64_t f1)
{
    snprintf(out, len, "%s/%s/%lld:%lld,%lld:%lld/%lld:%lld", kind, tensor, (long long)r0,
             (long long)r1, (long long)c0, (long long)c1, (long long)f0, (long long)f1);
}

/* ---- saving ------------------------------------------------------------------ */

/* A token for this save's temporary names: time and pid, mixed (splitmix64). */
uint64_t ckpt_token(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Removes leftovers of crashed saves: temporaries, and restores a checkpoint
 * moved aside (".old-") whose replacement never arrived. */
static void clean_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[PATH_MAX], q[PATH_MAX];
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (snprintf(p, sizeof p, "%s/%s", dir, n) >= (int)sizeof p) continue;
        if (strncmp(n, "latest.tmp-", 11) == 0) {
            unlink(p);
        } else if (strncmp(n, "step-", 5) == 0 && strstr(n, ".tmp-")) {
            rm_flat_dir(p);
        } else if (strncmp(n, "step-", 5) == 0 && strstr(n, ".old-")) {
            snprintf(q, sizeof q, "%.*s", (int)(strstr(p, ".old-") - p), p);
            if (exists(q)) rm_flat_dir(p);
            else rename(p, q);
        }
    }
    closedir(d);
}

/* Rank 0: the temporary directory of this save, after removing leftovers. */
int ckpt_save_begin(const char *dir, int64_t step, uint64_t token, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    if (step < 0 || !step_path(tmp, dir, step, "tmp", token))
        return fail(err, errlen, CKPT_E_ARGS, "%s: bad checkpoint directory or step", dir);
    if (!mkdir_p(dir))
        return fail(err, errlen, CKPT_E_IO, "%s: cannot create the checkpoint directory: %s", dir,
                    strerror(errno));
    clean_leftovers(dir);
    if (mkdir(tmp, 0755) != 0)
        return fail(err, errlen, CKPT_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    return CKPT_OK;
}

/* Checks a piece's geometry; returns its element count or -1. */
static int64_t piece_numel(const ckpt_piece *p, int64_t *f0, int64_t *f1)
{
    if (!p->kind || !*p->kind || !p->tensor || !*p->tensor || p->rows < 1 || p->cols < 0 ||
        p->r0 < 0 || p->r1 <= p->r0 || p->c0 < 0 || p->c1 <= p->c0 ||
        (p->cols == 0 && (p->c0 != 0 || p->c1 != 1)) || (int)p->dtype < 0 || p->dtype > CKPT_F16 ||
        !p->data)
        return -1;
    int64_t area = (p->r1 - p->r0) * (p->c1 - p->c0);
    *f0 = p->f0, *f1 = p->f1;
    if (*f1 <= *f0) *f0 = 0, *f1 = area;
    if (*f0 < 0 || *f1 > area) return -1;
    return *f1 - *f0;
}

/* "%016llx" of a 64-bit value: checksums and save tokens (JSON numbers hold 53 bits). */
static void hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* The 64-bit value of 16 lowercase hex digits; false if s is not that. */
static bool unhex64(const char *s, uint64_t *v)
{
    if (!s || strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16) return false;
    *v = strtoull(s, NULL, 16);
    return true;
}

/* The checksum of a piece's bytes as stored: XXH3, 64 bits. */
static uint64_t piece_hash(const void *data, uint64_t bytes)
{
    return XXH3_64bits(data, (size_t)bytes);
}

/* The safetensors header of a rank file: one entry per piece, and in
 * __metadata__.shardc (JSON text) the file's identity — rank, step, model,
 * the save's token — and each piece's geometry and checksum.  Sets *data_bytes. */
static char *rank_header(int rank, int64_t step, uint64_t token, const char *model, const ckpt_piece *pieces,
                         int n, uint64_t *data_bytes, char *err, size_t errlen, int *rc)
{
    cJSON *hdr = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *desc = cJSON_CreateArray();
    cJSON *sh = cJSON_CreateObject();
    strmap keys = {0};
    char **names = calloc((size_t)n + 1, sizeof *names);
    char *text = NULL;
    uint64_t off = 0;
    *rc = names ? CKPT_OK : fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    cJSON_AddItemToObject(hdr, "__metadata__", meta);
    for (int i = 0; i < n && *rc == CKPT_OK; i++) {
        const ckpt_piece *p = &pieces[i];
        int64_t f0, f1, numel = piece_numel(p, &f0, &f1);
        if (numel < 0) {
            *rc = fail(err, errlen, CKPT_E_ARGS, "checkpoint: rank %d piece %d (%s of '%s'): bad geometry",
                       rank, i, p->kind ? p->kind : "?", p->tensor ? p->tensor : "?");
            break;
        }
        char key[1024];
        piece_key(key, sizeof key, p->kind, p->tensor, p->r0, p->r1, p->c0, p->c1, f0, f1);
        names[i] = strdup(key);
        if (!names[i] || !strmap_put(&keys, names[i], i)) {
            *rc = fail(err, errlen, CKPT_E_ARGS, "checkpoint: rank %d holds piece '%s' twice", rank, key);
            break;
        }
        uint64_t bytes = (uint64_t)numel * (uint64_t)dtype_size(p->dtype);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", dtype_names[p->dtype]);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        if (f1 - f0 < (p->r1 - p->r0) * (p->c1 - p->c0)) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)numel));
        } else {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)(p->r1 - p->r0)));
            if (p->cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)(p->c1 - p->c0)));
        }
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        cJSON_AddItemToObject(hdr, key, e);
        off += bytes;
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "kind", p->kind);
        cJSON_AddStringToObject(d, "tensor", p->tensor);
        double g[8] = {(double)p->rows, (double)p->cols, (double)p->r0, (double)p->r1,
                       (double)p->c0, (double)p->c1, (double)f0, (double)f1};
        cJSON_AddItemToObject(d, "shape", cJSON_CreateDoubleArray(g, 2));
        cJSON_AddItemToObject(d, "rect", cJSON_CreateDoubleArray(g + 2, 4));
        cJSON_AddItemToObject(d, "flat", cJSON_CreateDoubleArray(g + 6, 2));
        cJSON_AddStringToObject(d, "dtype", dtype_names[p->dtype]);
        char hx[17];
        hex64(hx, piece_hash((const char *)p->data, bytes));
        cJSON_AddStringToObject(d, "xxh3", hx);
        cJSON_AddItemToArray(desc, d);
    }
    if (*rc == CKPT_OK) {
        char tok[17];
        hex64(tok, token);
        cJSON_AddNumberToObject(sh, "rank", rank);
        cJSON_AddNumberToObject(sh, "step", (double)step);
        cJSON_AddStringToObject(sh, "model", model ? model : "");
        cJSON_AddStringToObject(sh, "save", tok);
        cJSON_AddItemToObject(sh, "pieces", desc);
        desc = NULL;
        char *shtext = cJSON_PrintUnformatted(sh);
        cJSON_AddStringToObject(meta, "shardc", shtext ? shtext : "");
        free(shtext);
        text = cJSON_PrintUnformatted(hdr);
        if (!text) *rc = fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    }
    cJSON_Delete(desc);
    cJSON_Delete(sh);
    cJSON_Delete(hdr);
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    strmap_free(&keys);
    *data_bytes = off;
    return text;
}

/* Writes the header (padded to 8 bytes) and the pieces' data to fd; the
 * "rank-half" crash point falls after half of the data bytes. */
static bool write_rank_file(int fd, const char *text, const ckpt_piece *pieces, int n, uint64_t total)
{
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    uint64_t hlen = padded;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    if (!write_all(fd, le, 8) || !write_all(fd, text, len) || !write_all(fd, "       ", padded - len))
        return false;
    uint64_t done = 0, half = total / 2;
    bool halfway = false;
    for (int i = 0; i < n; i++) {
        int64_t f0, f1, numel = piece_numel(&pieces[i], &f0, &f1);
        uint64_t bytes = (uint64_t)numel * (uint64_t)dtype_size(pieces[i].dtype), first = bytes;
        if (!halfway && done + bytes >= half) first = half - done;
        if (!write_all(fd, pieces[i].data, first)) return false;
        if (!halfway && done + bytes >= half) {
            halfway = true;
            crash_point("rank-half");
        }
        if (!write_all(fd, (const char *)pieces[i].data + first, bytes - first)) return false;
        done += bytes;
    }
    if (!halfway) crash_point("rank-half");
    return true;
}

/* Every rank: its safetensors file in the save's temporary directory, fsynced. */
int ckpt_save_rank(const char *dir, int64_t step, uint64_t token, int rank, const char *model,
                   const ckpt_piece *pieces, int n, char *err, size_t errlen)
{
    char tmp[PATH_MAX], path[PATH_MAX + 32];
    if (!step_path(tmp, dir, step, "tmp", token) || rank < 0 || n < 0)
        return fail(err, errlen, CKPT_E_ARGS, "%s: bad checkpoint directory, step or rank", dir);
    snprintf(path, sizeof path, "%s/rank-%05d.safetensors", tmp, rank);
    uint64_t total;
    int rc;
    char *text = rank_header(rank, step, token, model, pieces, n, &total, err, errlen, &rc);
    if (!text) return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(text);
        return fail(err, errlen, CKPT_E_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    bool ok = write_rank_file(fd, text, pieces, n, total) && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    free(text);
    if (!ok) return fail(err, errlen, CKPT_E_IO, "%s: cannot write: %s", path, strerror(e ? e : errno));
    crash_point("rank-written");
    return CKPT_OK;
}

/* Number of a JSON array's element i (0 if absent). */
static double num_at(const cJSON *a, int i)
{
    return cJSON_GetNumberValue(cJSON_GetArrayItem(a, i));
}

/* Adds a key/value list as a JSON object member. */
static void add_kvs(cJSON *obj, const char *name, const ckpt_kv *kv, int n)
{
    cJSON *o = cJSON_AddObjectToObject(obj, name);
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(o, kv[i].key, kv[i].value);
}

/* The index's tensor list while it is built: the JSON array, and by name. */
typedef struct ixbuild { cJSON *tensors; strmap map; cJSON **t; int n, cap; } ixbuild;

/* Appends a tensor object to the list and the map; false when out of memory. */
static bool ix_add(ixbuild *b, cJSON *t)
{
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        cJSON **nt = realloc(b->t, (size_t)cap * sizeof *nt);
        if (!nt) return false;
        b->t = nt, b->cap = cap;
    }
    cJSON_AddItemToArray(b->tensors, t);
    b->t[b->n] = t;
    /* the key lives in the tensor object, which lives as long as the map */
    return strmap_put(&b->map, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name")), b->n++);
}

/* A JSON number that is an integer in [0, 2^53]: its value, else -1. */
static int64_t json_uint(const cJSON *x)
{
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v) return -1;
    return (int64_t)v;
}

/* Array member `key` of o: exactly n such integers into v; false otherwise. */
static bool json_uints(const cJSON *o, const char *key, int n, int64_t *v)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return false;
    for (int i = 0; i < n; i++)
        if ((v[i] = json_uint(cJSON_GetArrayItem(a, i))) < 0) return false;
    return true;
}

/* A rank file's own account of itself: __metadata__.shardc. */
typedef struct rank_meta {
    cJSON *root;
    int64_t rank, step;
    const char *model;
    uint64_t save;              /* the token of the save that wrote it */
    const cJSON *pieces;        /* [{kind, tensor, shape, rect, flat, dtype, xxh3}] */
} rank_meta;

/* One piece descriptor of a rank file's metadata, checked. */
typedef struct rank_desc {
    const char *kind, *tensor;
    int64_t shape[2], rect[4], flat[2];
    int dtype;
    uint64_t xxh3;
} rank_desc;

/* Reads descriptor d; false when it is malformed. */
static bool rank_desc_parse(const cJSON *d, rank_desc *o)
{
    o->kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "kind"));
    o->tensor = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "tensor"));
    o->dtype = dtype_parse(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "dtype")));
    return o->kind && *o->kind && o->tensor && *o->tensor && o->dtype >= 0 &&
           json_uints(d, "shape", 2, o->shape) && json_uints(d, "rect", 4, o->rect) &&
           json_uints(d, "flat", 2, o->flat) &&
           unhex64(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "xxh3")), &o->xxh3);
}

/* Parses a rank file's metadata strictly; the caller frees m->root. */
static int rank_meta_parse(const st_file *f, rank_meta *m, char *err, size_t errlen)
{
    const char *text = st_meta(f, "shardc");
    memset(m, 0, sizeof *m);
    m->root = text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
    const cJSON *o = m->root;
    m->rank = json_uint(cJSON_GetObjectItemCaseSensitive(o, "rank"));
    m->step = json_uint(cJSON_GetObjectItemCaseSensitive(o, "step"));
    m->model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "model"));
    m->pieces = cJSON_GetObjectItemCaseSensitive(o, "pieces");
    const char *what = !text ? "has no __metadata__.shardc"
                       : !cJSON_IsObject(o) ? "has a __metadata__.shardc that is not a JSON object"
                       : m->rank < 0 || m->step < 0 || !m->model ? "does not say its rank, step and model"
                       : !unhex64(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "save")), &m->save)
                           ? "does not say which save wrote it"
                       : !cJSON_IsArray(m->pieces) ? "has no piece list" : NULL;
    if (what) return fail(err, errlen, CKPT_E_CORRUPT, "%s: not a shardc rank file: it %s", st_path(f), what);
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, m->pieces) {
        rank_desc rd;
        if (!rank_desc_parse(d, &rd))
            return fail(err, errlen, CKPT_E_CORRUPT, "%s: piece %d of __metadata__.shardc is malformed", st_path(f), i);
        i++;
    }
    return CKPT_OK;
}

/* Adds rank r's pieces (from its header's metadata) to the index's tensors. */
static int index_rank(ixbuild *b, const char *tmp, int r, int64_t step, uint64_t token, char *err, size_t errlen)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank-%05d.safetensors", tmp, r);
    st_file *f;
    if (st_open(&f, path, err, errlen)) return exists(path) ? CKPT_E_CORRUPT : CKPT_E_MISSING;
    rank_meta m;
    int rc = rank_meta_parse(f, &m, err, errlen);
    if (rc == CKPT_OK && (m.rank != r || m.step != step || m.save != token))
        rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: written as rank %lld of step %lld by another save", path,
                  (long long)m.rank, (long long)m.step);
    const cJSON *d;
    cJSON_ArrayForEach(d, m.pieces) {
        if (rc) break;
        rank_desc pd;
        rank_desc_parse(d, &pd);
        double rows = (double)pd.shape[0], cols = (double)pd.shape[1];
        int ti = strmap_get(&b->map, pd.tensor);
        cJSON *t;
        if (ti < 0) {
            t = cJSON_CreateObject();
            cJSON_AddStringToObject(t, "name", pd.tensor);
            cJSON *sh = cJSON_AddArrayToObject(t, "shape");
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(rows));
            if (cols) cJSON_AddItemToArray(sh, cJSON_CreateNumber(cols));
            cJSON_AddObjectToObject(t, "pieces");
            if (!ix_add(b, t)) {
                rc = fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
                break;
            }
        } else {
            t = b->t[ti];
            const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
            if (num_at(sh, 0) != rows || (cJSON_GetArraySize(sh) == 2 ? num_at(sh, 1) : 0) != cols) {
                rc = fail(err, errlen, CKPT_E_ARGS,
                          "checkpoint: tensor '%s' is saved with two different shapes", pd.tensor);
                break;
            }
        }
        cJSON *kinds = cJSON_GetObjectItemCaseSensitive(t, "pieces");
        cJSON *list = cJSON_GetObjectItemCaseSensitive(kinds, pd.kind);
        if (!list) list = cJSON_AddArrayToObject(kinds, pd.kind);
        double row[7] = {r, (double)pd.rect[0], (double)pd.rect[1], (double)pd.rect[2], (double)pd.rect[3],
                         (double)pd.flat[0], (double)pd.flat[1]};
        cJSON_AddItemToArray(list, cJSON_CreateDoubleArray(row, 7));
    }
    cJSON_Delete(m.root);
    st_close(f);
    return rc;
}

/* Writes text to path and fsyncs it. */
static int write_synced(const char *path, const char *text, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fail(err, errlen, CKPT_E_IO, "%s: cannot create: %s", path, strerror(errno));
    bool ok = write_all(fd, text, strlen(text)) && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    return ok ? CKPT_OK : fail(err, errlen, CKPT_E_IO, "%s: cannot write: %s", path, strerror(e));
}

/* Builds index.json from the rank files and the metadata. */
static int write_index(const char *tmp, int64_t step, uint64_t token, int nranks, const ckpt_meta *m, char *err,
                       size_t errlen)
{
    char tok[17];
    hex64(tok, token);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cJSON *ix = cJSON_CreateObject();
    cJSON_AddStringToObject(ix, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(ix, "version", CKPT_VERSION);
    cJSON_AddNumberToObject(ix, "step", (double)step);
    cJSON_AddStringToObject(ix, "save", tok);
    /* when it was committed: which of two checkpoints is the newer (ckpt_find) */
    cJSON_AddNumberToObject(ix, "saved_at_us", (double)now.tv_sec * 1e6 + (double)(now.tv_nsec / 1000));
    cJSON_AddStringToObject(ix, "model", m && m->model ? m->model : "");
    cJSON_AddStringToObject(ix, "family", m && m->family ? m->family : "");
    add_kvs(ix, "layout", m ? m->layout : NULL, m ? m->nlayout : 0);
    add_kvs(ix, "state", m ? m->state : NULL, m ? m->nstate : 0);
    cJSON *files = cJSON_AddArrayToObject(ix, "files");
    ixbuild b = {cJSON_AddArrayToObject(ix, "tensors"), {0}, NULL, 0, 0};
    int rc = CKPT_OK;
    for (int r = 0; r < nranks && rc == CKPT_OK; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank-%05d.safetensors", r);
        cJSON_AddItemToArray(files, cJSON_CreateString(name));
        rc = index_rank(&b, tmp, r, step, token, err, errlen);
    }
    strmap_free(&b.map);
    free(b.t);
    cJSON_AddStringToObject(ix, "spec", m && m->spec_text ? m->spec_text : "");
    char *text = rc == CKPT_OK ? cJSON_Print(ix) : NULL;
    cJSON_Delete(ix);
    if (rc) return rc;
    if (!text) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/index.json", tmp);
    rc = write_synced(path, text, err, errlen);
    free(text);
    return rc;
}

/* Moves the finished temporary directory to its final name, replacing an
 * existing checkpoint of the same step atomically where the kernel can. */
static int publish(const char *dir, const char *tmp, const char *final, int64_t step, uint64_t token,
                   char *err, size_t errlen)
{
    if (rename(tmp, final) == 0) return CKPT_OK;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return fail(err, errlen, CKPT_E_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        rm_flat_dir(tmp);       /* now the replaced checkpoint */
        return CKPT_OK;
    }
    char old[PATH_MAX];         /* no RENAME_EXCHANGE here: move the old one aside first */
    if (!step_path(old, dir, step, "old", token) || rename(final, old) != 0 || rename(tmp, final) != 0)
        return fail(err, errlen, CKPT_E_IO, "%s: cannot replace %s: %s", tmp, final, strerror(errno));
    rm_flat_dir(old);
    return CKPT_OK;
}

/* Rank 0: index, fsyncs and the two renames that publish the checkpoint. */
int ckpt_save_commit(const char *dir, int64_t step, uint64_t token, int nranks,
                     const ckpt_meta *meta, char *err, size_t errlen)
{
    char tmp[PATH_MAX], final[PATH_MAX], latest[PATH_MAX + 32], ltmp[PATH_MAX + 32];
    if (!step_path(tmp, dir, step, "tmp", token) || !step_path(final, dir, step, NULL, 0) || nranks < 1)
        return fail(err, errlen, CKPT_E_ARGS, "%s: bad checkpoint directory, step or rank count", dir);
    int rc = write_index(tmp, step, token, nranks, meta, err, errlen);
    if (rc) return rc;
    crash_point("index-written");
    if (!fsync_dir(tmp)) return fail(err, errlen, CKPT_E_IO, "%s: cannot fsync: %s", tmp, strerror(errno));
    if ((rc = publish(dir, tmp, final, step, token, err, errlen))) return rc;
    if (!fsync_dir(dir)) return fail(err, errlen, CKPT_E_IO, "%s: cannot fsync: %s", dir, strerror(errno));
    crash_point("renamed");
    char line[64];
    snprintf(line, sizeof line, "step-%lld\n", (long long)step);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(ltmp, sizeof ltmp, "%s/latest.tmp-%016llx", dir, (unsigned long long)token);
    if ((rc = write_synced(ltmp, line, err, errlen))) return rc;
    crash_point("latest-written");
    if (rename(ltmp, latest) != 0)
        return fail(err, errlen, CKPT_E_IO, "%s: cannot rename to %s: %s", ltmp, latest, strerror(errno));
    if (!fsync_dir(dir)) return fail(err, errlen, CKPT_E_IO, "%s: cannot fsync: %s", dir, strerror(errno));
    return CKPT_OK;
}

/* Rank 0 after a failure: the temporary directory goes, the previous checkpoint stays. */
void ckpt_save_abort(const char *dir, int64_t step, uint64_t token)
{
    char tmp[PATH_MAX], ltmp[PATH_MAX + 32];
    if (step_path(tmp, dir, step, "tmp", token)) rm_flat_dir(tmp);
    snprintf(ltmp, sizeof ltmp, "%s/latest.tmp-%016llx", dir, (unsigned long long)token);
    unlink(ltmp);
}

/* One process, one rank file: the three phases in a row. */
int ckpt_save(const char *dir, int64_t step, const ckpt_piece *pieces, int n,
              const ckpt_meta *meta, char *err, size_t errlen)
{
    uint64_t token = ckpt_token();
    int rc = ckpt_save_begin(dir, step, token, err, errlen);
    if (rc) return rc;
    if ((rc = ckpt_save_rank(dir, step, token, 0, meta ? meta->model : NULL, pieces, n, err, errlen)) ||
        (rc = ckpt_save_commit(dir, step, token, 1, meta, err, errlen)))
        ckpt_save_abort(dir, step, token);
    return rc;
}

/* ---- reading index.json ------------------------------------------------------------ */

/* Reads DIR/index.json strictly: a regular file (not opened blocking), one
 * JSON object and nothing after it but whitespace. */
static cJSON *read_index(const char *dir, char *ixpath, size_t ixlen, char *err, size_t errlen, int *rc)
{
    snprintf(ixpath, ixlen, "%s/index.json", dir);
    *rc = CKPT_E_CORRUPT;
    int fd = open(ixpath, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *rc = fail(err, errlen, errno == ENOENT ? CKPT_E_MISSING : CKPT_E_IO, "%s: cannot open: %s", ixpath,
                   strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    cJSON *ix = NULL;
    size_t got = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fail(err, errlen, CKPT_E_CORRUPT, "%s: not a regular file", ixpath);
    } else if ((uint64_t)st.st_size > CKPT_MAX_INDEX) {
        fail(err, errlen, CKPT_E_CORRUPT, "%s: %lld bytes, more than an index can be", ixpath, (long long)st.st_size);
    } else if (!(text = malloc((size_t)st.st_size + 1))) {
        *rc = fail(err, errlen, CKPT_E_IO, "%s: out of memory", ixpath);
    } else {
        while (got < (size_t)st.st_size) {
            ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
        text[got] = 0;
        const char *end = NULL;
        if (got != (size_t)st.st_size) {
            *rc = fail(err, errlen, CKPT_E_IO, "%s: cannot read: %s", ixpath, strerror(errno));
        } else if (strlen(text) != got) {
            fail(err, errlen, CKPT_E_CORRUPT, "%s: a NUL byte at byte %zu", ixpath, strlen(text));
        } else if (!(ix = cJSON_ParseWithLengthOpts(text, got, &end, 0)) || !cJSON_IsObject(ix)) {
            const char *at = end ? end : cJSON_GetErrorPtr();
            fail(err, errlen, CKPT_E_CORRUPT, "%s: not a JSON object (the error is at byte %td)", ixpath,
                 at && at >= text && at <= text + got ? at - text : 0);
            cJSON_Delete(ix);
            ix = NULL;
        } else {
            end += strspn(end, " \t\r\n");
            if (end != text + got) {
                fail(err, errlen, CKPT_E_CORRUPT, "%s: %td bytes follow the JSON object (from byte %td)", ixpath,
                     text + got - end, end - text);
                cJSON_Delete(ix);
                ix = NULL;
            }
        }
    }
    free(text);
    close(fd);
    if (ix) *rc = CKPT_OK;
    return ix;
}

/* The top-level facts of an index, checked: format and version, the step
 * (against the directory's name step-N and the state's step), the save. */
static int index_facts(const cJSON *ix, const char *dir, const char *ixpath, int64_t *step, uint64_t *save,
                       int64_t *saved_at, char *err, size_t errlen)
{
    const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ix, "format"));
    int64_t ver = json_uint(cJSON_GetObjectItemCaseSensitive(ix, "version"));
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0)
        return fail(err, errlen, CKPT_E_CORRUPT, "%s: not a shardc checkpoint index (no \"format\": \"%s\")", ixpath,
                    CKPT_FORMAT);
    if (ver != CKPT_VERSION)
        return fail(err, errlen, CKPT_E_CORRUPT,
                    "%s: checkpoint format version %lld; this shardc reads version %d%s", ixpath, (long long)ver,
                    CKPT_VERSION, ver == 1 ? " (version 1 has no checksums: it cannot be verified)" : "");
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(ix, "step");
    *step = json_uint(sj);
    if (*step < 0) {
        char *shown = cJSON_PrintUnformatted(sj);
        fail(err, errlen, CKPT_E_CORRUPT, "%s: \"step\" is %s, not a step number", ixpath, shown ? shown : "missing");
        free(shown);
        return CKPT_E_CORRUPT;
    }
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    char *end;
    long long named = strncmp(base, "step-", 5) == 0 ? strtoll(base + 5, &end, 10) : -1;
    if (named >= 0 && end != base + 5 && !*end && named != *step)
        return fail(err, errlen, CKPT_E_CORRUPT, "%s: \"step\" is %lld but the checkpoint's directory is %s", ixpath,
                    (long long)*step, base);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ix, "state"), "step");
    if (st && json_uint(st) != *step)
        return fail(err, errlen, CKPT_E_CORRUPT, "%s: \"step\" is %lld but state.step is not", ixpath, (long long)*step);
    *saved_at = json_uint(cJSON_GetObjectItemCaseSensitive(ix, "saved_at_us"));
    if (!unhex64(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ix, "save")), save) || *saved_at < 0)
        return fail(err, errlen, CKPT_E_CORRUPT, "%s: no \"save\" token or \"saved_at_us\" time", ixpath);
    return CKPT_OK;
}

/* ---- finding ---------------------------------------------------------------------------- */

/* Whether dir/index.json exists. */
static bool has_index(const char *dir)
{
    char p[2 * PATH_MAX];
    snprintf(p, sizeof p, "%s/index.json", dir);
    return exists(p);
}

/* When the checkpoint in dir was committed (its index's saved_at_us), or -1
 * when its index cannot be read; the reason in why. */
static int64_t saved_at(const char *dir, char *why, size_t whylen)
{
    char ixpath[PATH_MAX + 16];
    int rc;
    cJSON *ix = read_index(dir, ixpath, sizeof ixpath, why, whylen, &rc);
    int64_t step, at = -1;
    uint64_t save;
    if (ix && index_facts(ix, dir, ixpath, &step, &save, &at, why, whylen) != CKPT_OK) at = -1;
    cJSON_Delete(ix);
    return at;
}

/* The newest complete checkpoint under dir (see ckpt.h). */
int ckpt_find(const char *dir, char *path, size_t pathlen, char *note, size_t notelen, char *err, size_t errlen)
{
    char p[PATH_MAX + 300], name[256] = "", why[1024];
    if (note && notelen) note[0] = 0;
    if (has_index(dir)) {
        snprintf(path, pathlen, "%s", dir);
        return CKPT_OK;
    }
    /* latest's choice, if it names a complete checkpoint */
    long long lstep = -1;
    snprintf(p, sizeof p, "%s/latest", dir);
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        ssize_t n = read(fd, name, sizeof name - 1);
        name[n > 0 ? n : 0] = 0;
        name[strcspn(name, " \t\r\n")] = 0;
        char *end;
        snprintf(p, sizeof p, "%s/%s", dir, name);
        if (strncmp(name, "step-", 5) == 0 && (lstep = strtoll(name + 5, &end, 10)) >= 0 &&
            (end == name + 5 || *end || !has_index(p)))
            lstep = -1;
    }
    if (fd >= 0) close(fd);
    /* the candidates: every step-N with an index, but none older than latest's */
    DIR *d = opendir(dir);
    if (!d) return fail(err, errlen, CKPT_E_MISSING, "%s: no checkpoint: %s", dir, strerror(errno));
    long long *cand = NULL, top = -1;
    int nc = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "step-", 5) != 0) continue;
        long long s = strtoll(e->d_name + 5, &end, 10);
        snprintf(p, sizeof p, "%s/step-%lld", dir, s);
        if (end == e->d_name + 5 || *end || s < 0 || (lstep >= 0 && s < lstep) || !has_index(p)) continue;
        if (nc == cap) {
            long long *nca = realloc(cand, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *cand);
            if (!nca) break;
            cand = nca;
        }
        cand[nc++] = s;
        if (s > top) top = s;
    }
    closedir(d);
    /* latest and nothing newer by number: latest (the common case, no index read) */
    if (lstep >= 0 && top == lstep) {
        free(cand);
        snprintf(path, pathlen, "%s/step-%lld", dir, lstep);
        return CKPT_OK;
    }
    /* else the one committed last; latest's wins a tie */
    long long best = -1;
    int64_t best_at = -1, latest_at = -1;
    for (int i = 0; i < nc; i++) {
        snprintf(p, sizeof p, "%s/step-%lld", dir, cand[i]);
        int64_t at = saved_at(p, why, sizeof why);
        if (cand[i] == lstep) latest_at = at;
        else if (at < 0 && note && notelen)
            snprintf(note + strlen(note), notelen - strlen(note), "%sstep-%lld is not considered: %s",
                     *note ? "; " : "", cand[i], why);
        if (at > best_at || (at == best_at && at >= 0 && cand[i] == lstep)) best_at = at, best = cand[i];
    }
    free(cand);
    if (lstep >= 0 && (best < 0 || best == lstep || (latest_at >= 0 && latest_at >= best_at))) {
        snprintf(path, pathlen, "%s/step-%lld", dir, lstep);
        return CKPT_OK;
    }
    if (best < 0 && top >= 0)       /* only checkpoints whose index is unreadable: open says why */
        best = top;
    if (best < 0) return fail(err, errlen, CKPT_E_MISSING, "%s: no checkpoint in this directory", dir);
    snprintf(path, pathlen, "%s/step-%lld", dir, best);
    if (note && notelen) {
        char first[1024];
        snprintf(first, sizeof first, "%s", note);
        if (lstep >= 0)
            snprintf(note, notelen, "%s/latest names step-%lld, but step-%lld was saved after it and is complete: "
                     "taking step-%lld%s%s", dir, lstep, best, best, *first ? "; " : "", first);
        else
            snprintf(note, notelen, "%s/latest %s: taking the newest complete checkpoint, step-%lld%s%s", dir,
                     *name ? "names no complete checkpoint" : "is missing", best, *first ? "; " : "", first);
    }
    return CKPT_OK;
}

/* ---- opening --------------------------------------------------------------------------- */

/* One piece as the reader holds it, in internal geometry (a vector is one row). */
typedef struct rpiece {
    int file;
    int64_t r0, r1, c0, c1, f0, f1;
    int dtype;
    const void *data;
    uint64_t bytes, xxh3;       /* its bytes as stored and their recorded checksum */
    bool verified;              /* the checksum was compared                        */
} rpiece;

typedef struct rkind { const char *kind; rpiece *p; int n; int last; } rkind;

typedef struct rtensor {
    const char *name;
    int64_t rows, cols;         /* logical, as saved (cols 0: a vector)      */
    int64_t irows, icols;       /* internal: a vector is [1, rows]           */
    rkind *k;
    int nk;
} rtensor;

typedef struct rfile { char *path; st_file *st; } rfile;

struct ckpt_reader {
    char *path;
    char note[2048];            /* what ckpt_find said about its choice            */
    cJSON *ix;
    int64_t step;
    uint64_t save;
    rtensor *t;
    int nt;
    strmap tmap;
    rfile *f;
    int nf;
    ckpt_verify_stats stats;
};

/* Compares piece p's bytes with the checksum its rank file recorded. */
static int verify_piece(ckpt_reader *r, const rtensor *t, const rkind *k, rpiece *p, char *err, size_t errlen)
{
    if (p->verified) return CKPT_OK;
    uint64_t h = piece_hash(p->data, p->bytes);
    r->stats.pieces++;
    r->stats.bytes += p->bytes;
    if (h != p->xxh3) {
        char key[1024];
        piece_key(key, sizeof key, k->kind, t->name, t->cols ? p->r0 : p->c0, t->cols ? p->r1 : p->c1,
                  t->cols ? p->c0 : 0, t->cols ? p->c1 : 1, p->f0, p->f1);
        return fail(err, errlen, CKPT_E_CORRUPT,
                    "%s: tensor '%s' (%s, piece '%s'): its %llu bytes do not match their checksum (xxh3 %016llx, "
                    "recorded %016llx): the file is damaged",
                    r->f[p->file].path, t->name, k->kind, key, (unsigned long long)p->bytes, (unsigned long long)h,
                    (unsigned long long)p->xxh3);
    }
    p->verified = true;
    return CKPT_OK;
}

/* Checks rank file fi against the index (its identity, every piece listed
 * and present, nothing else) and points the index's pieces at their data. */
static int load_file(ckpt_reader *r, int fi, char *err, size_t errlen)
{
    rfile *f = &r->f[fi];
    if (st_open(&f->st, f->path, err, errlen)) return exists(f->path) ? CKPT_E_CORRUPT : CKPT_E_MISSING;
    rank_meta m;
    int rc = rank_meta_parse(f->st, &m, err, errlen);
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r->ix, "model"));
    char tok[17];
    hex64(tok, m.save);
    if (rc) {
    } else if (m.rank != fi) {
        rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: the file of rank %lld in the place of rank %d's", f->path,
                  (long long)m.rank, fi);
    } else if (m.step != r->step) {
        rc = fail(err, errlen, CKPT_E_CORRUPT,
                  "%s: written at step %lld (its own metadata) into the checkpoint of step %lld: a rank file of "
                  "another checkpoint", f->path, (long long)m.step, (long long)r->step);
    } else if (!model || strcmp(m.model, model) != 0) {
        rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: written for model '%s', the checkpoint is of '%s'", f->path,
                  m.model, model ? model : "");
    } else if (m.save != r->save) {
        rc = fail(err, errlen, CKPT_E_CORRUPT,
                  "%s: written by another save (%s) than the checkpoint's index: a rank file of another run", f->path,
                  tok);
    }
    /* the descriptors by key: each piece's dtype and checksum */
    int nd = cJSON_GetArraySize(m.pieces), n = st_count(f->st), di = 0;
    char **keys = calloc((size_t)nd + 1, sizeof *keys);
    rank_desc *descs = calloc((size_t)nd + 1, sizeof *descs);
    bool *used = calloc((size_t)n + 1, sizeof *used);
    strmap dmap = {0};
    if (!rc && (!keys || !descs || !used)) rc = fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    const cJSON *d, *list = rc ? NULL : m.pieces;
    cJSON_ArrayForEach(d, list) {
        rank_desc *pd = &descs[di];
        rank_desc_parse(d, pd);
        char key[1024];
        piece_key(key, sizeof key, pd->kind, pd->tensor, pd->rect[0], pd->rect[1], pd->rect[2], pd->rect[3],
                  pd->flat[0], pd->flat[1]);
        if (!(keys[di] = strdup(key)) || !strmap_put(&dmap, keys[di], di)) {
            rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: piece '%s' is described twice", f->path, key);
            break;
        }
        di++;
    }
    for (int ti = 0; ti < r->nt && rc == CKPT_OK; ti++) {
        rtensor *t = &r->t[ti];
        for (int ki = 0; ki < t->nk && rc == CKPT_OK; ki++) {
            for (int pi = 0; pi < t->k[ki].n; pi++) {
                rpiece *p = &t->k[ki].p[pi];
                if (p->file != fi) continue;
                char key[1024];
                if (t->cols) piece_key(key, sizeof key, t->k[ki].kind, t->name, p->r0, p->r1, p->c0, p->c1, p->f0, p->f1);
                else piece_key(key, sizeof key, t->k[ki].kind, t->name, p->c0, p->c1, 0, 1, p->f0, p->f1);
                const st_tensor *e = st_find(f->st, key);
                int at = strmap_get(&dmap, key);
                int dt = e ? (e->dtype == ST_F32 ? CKPT_F32 : e->dtype == ST_BF16 ? CKPT_BF16
                              : e->dtype == ST_F16 ? CKPT_F16 : -1) : -1;
                uint64_t want = (uint64_t)(p->f1 - p->f0) * (uint64_t)(dt < 0 ? 4 : dtype_size(dt));
                const char *why = !e ? "is not in the file" : at < 0 ? "has no descriptor in the file's metadata"
                                  : used[e - st_tensor_at(f->st, 0)] ? "is listed twice by the index"
                                  : dt < 0 || dt != descs[at].dtype ? "has another dtype than its descriptor's"
                                  : e->end - e->begin != want ? "has another size than its geometry's" : NULL;
                if (why) {
                    rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor '%s' (%s): piece '%s' %s", f->path, t->name,
                              t->k[ki].kind, key, why);
                    break;
                }
                used[e - st_tensor_at(f->st, 0)] = true;
                p->dtype = dt;
                p->data = st_data(f->st, e);
                p->bytes = e->end - e->begin;
                p->xxh3 = descs[at].xxh3;
            }
        }
    }
    for (int i = 0; i < n && rc == CKPT_OK; i++)
        if (!used[i])
            rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: holds piece '%s', which the index does not list", f->path,
                      st_tensor_at(f->st, i)->name);
    if (rc == CKPT_OK && di != n)
        rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: its metadata describes %d pieces, it holds %d", f->path, di, n);
    for (int i = 0; keys && i < nd; i++) free(keys[i]);
    free(keys);
    free(descs);
    free(used);
    strmap_free(&dmap);
    cJSON_Delete(m.root);
    return rc;
}

/* Reads the index's tensor list into the reader, checking every value. */
static int load_tensors(ckpt_reader *r, const char *ixpath, char *err, size_t errlen)
{
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(r->ix, "tensors");
    if (!cJSON_IsArray(ts)) return fail(err, errlen, CKPT_E_CORRUPT, "%s: no \"tensors\" list", ixpath);
    r->nt = cJSON_GetArraySize(ts);
    r->t = calloc((size_t)r->nt + 1, sizeof *r->t);
    if (!r->t) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    int i = 0;
    const cJSON *tj;
    cJSON_ArrayForEach(tj, ts) {
        rtensor *t = &r->t[i];
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(tj, "shape");
        const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(tj, "pieces");
        t->name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tj, "name"));
        int ns = cJSON_GetArraySize(shape);
        int64_t dims[2] = {0, 0};
        bool shape_ok = cJSON_IsArray(shape) && (ns == 1 || ns == 2) && json_uints(tj, "shape", ns, dims) &&
                        dims[0] > 0 && (ns == 1 || dims[1] > 0);
        if (!t->name || !*t->name)
            return fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor entry %d has no name", ixpath, i);
        if (!shape_ok || !cJSON_IsObject(kinds))
            return fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor '%s': a malformed shape or piece list", ixpath, t->name);
        if (!strmap_put(&r->tmap, t->name, i))
            return fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor '%s' is listed twice", ixpath, t->name);
        t->rows = dims[0];
        t->cols = ns == 2 ? dims[1] : 0;
        t->irows = t->cols ? t->rows : 1;
        t->icols = t->cols ? t->cols : t->rows;
        t->nk = cJSON_GetArraySize(kinds);
        t->k = calloc((size_t)t->nk + 1, sizeof *t->k);
        if (!t->k) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
        int ki = 0;
        const cJSON *kj;
        cJSON_ArrayForEach(kj, kinds) {
            rkind *k = &t->k[ki++];
            k->kind = kj->string;
            k->n = cJSON_GetArraySize(kj);
            for (int j = 0; j < ki - 1; j++)
                if (strcmp(t->k[j].kind, k->kind) == 0)
                    return fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor '%s': state '%s' is listed twice", ixpath,
                                t->name, k->kind);
            if (!cJSON_IsArray(kj) || !*k->kind)
                return fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor '%s': a malformed list of '%s' pieces", ixpath,
                            t->name, k->kind);
            k->p = calloc((size_t)k->n + 1, sizeof *k->p);
            if (!k->p) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
            for (int pi = 0; pi < k->n; pi++) {
                const cJSON *a = cJSON_GetArrayItem(kj, pi);
                rpiece *p = &k->p[pi];
                int64_t g[7] = {-1, -1, -1, -1, -1, -1, -1}, area = 0;
                bool ok = cJSON_IsArray(a) && cJSON_GetArraySize(a) == 7;
                for (int j = 0; ok && j < 7; j++) ok = (g[j] = json_uint(cJSON_GetArrayItem(a, j))) >= 0;
                p->file = (int)g[0];
                if (t->cols) p->r0 = g[1], p->r1 = g[2], p->c0 = g[3], p->c1 = g[4];
                else p->r0 = 0, p->r1 = 1, p->c0 = g[1], p->c1 = g[2];
                p->f0 = g[5], p->f1 = g[6];
                ok = ok && g[0] < r->nf && p->r1 > p->r0 && p->c1 > p->c0 && p->c1 <= t->icols &&
                     (t->cols || (g[3] == 0 && g[4] == 1)) &&
                     !__builtin_mul_overflow(p->r1 - p->r0, p->c1 - p->c0, &area) && p->f1 > p->f0 && p->f1 <= area;
                if (!ok)
                    return fail(err, errlen, CKPT_E_CORRUPT, "%s: tensor '%s': '%s' piece %d is malformed", ixpath,
                                t->name, k->kind, pi);
            }
        }
        i++;
    }
    return CKPT_OK;
}

/* The index's list of rank files: rank-00000.safetensors, ... in rank order. */
static int load_files(ckpt_reader *r, const char *dir, const char *ixpath, char *err, size_t errlen)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(r->ix, "files");
    r->nf = cJSON_GetArraySize(files);
    if (!cJSON_IsArray(files) || r->nf < 1)
        return fail(err, errlen, CKPT_E_CORRUPT, "%s: no \"files\" list", ixpath);
    r->f = calloc((size_t)r->nf + 1, sizeof *r->f);
    if (!r->f) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    for (int i = 0; i < r->nf; i++) {
        const char *n = cJSON_GetStringValue(cJSON_GetArrayItem(files, i));
        char want[32], p[PATH_MAX + 300];
        snprintf(want, sizeof want, "rank-%05d.safetensors", i);
        if (!n || strcmp(n, want) != 0)
            return fail(err, errlen, CKPT_E_CORRUPT, "%s: file %d of the list is not %s", ixpath, i, want);
        snprintf(p, sizeof p, "%s/%s", dir, n);
        if (!(r->f[i].path = strdup(p))) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    }
    return CKPT_OK;
}

/* Opens a checkpoint: the index (strictly), every rank file (strictly, its
 * identity against the index), every piece resolved. */
int ckpt_open(ckpt_reader **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    char dir[PATH_MAX], ixpath[PATH_MAX + 16];
    ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) return fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    int rc = ckpt_find(path, dir, sizeof dir, r->note, sizeof r->note, err, errlen);
    if (rc) {
        free(r);
        return rc;
    }
    r->path = strdup(dir);
    r->ix = read_index(dir, ixpath, sizeof ixpath, err, errlen, &rc);
    int64_t at;
    if (!r->path) rc = fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    if (rc == CKPT_OK) rc = index_facts(r->ix, dir, ixpath, &r->step, &r->save, &at, err, errlen);
    if (rc == CKPT_OK && (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r->ix, "model")) ||
                          !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r->ix, "family")) ||
                          !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r->ix, "spec"))))
        rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: \"model\", \"family\" or \"spec\" is not a string", ixpath);
    static const char *const kvs[] = {"layout", "state"};
    for (int i = 0; i < 2 && rc == CKPT_OK; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(r->ix, kvs[i]), *x;
        if (!cJSON_IsObject(o)) rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: no \"%s\" object", ixpath, kvs[i]);
        for (x = rc ? NULL : o->child; x && rc == CKPT_OK; x = x->next)
            if (!cJSON_IsNumber(x))
                rc = fail(err, errlen, CKPT_E_CORRUPT, "%s: %s.%s is not a number", ixpath, kvs[i], x->string);
    }
    if (rc == CKPT_OK) rc = load_files(r, dir, ixpath, err, errlen);
    if (rc == CKPT_OK) rc = load_tensors(r, ixpath, err, errlen);
    for (int i = 0; i < r->nf && rc == CKPT_OK; i++) rc = load_file(r, i, err, errlen);
    if (rc) {
        ckpt_close(r);
        return rc;
    }
    *out = r;
    return CKPT_OK;
}

/* Unmaps and frees everything (NULL is fine). */
void ckpt_close(ckpt_reader *r)
{
    if (!r) return;
    for (int i = 0; r->f && i < r->nf; i++) {
        st_close(r->f[i].st);
        free(r->f[i].path);
    }
    for (int i = 0; r->t && i < r->nt; i++) {
        for (int k = 0; k < r->t[i].nk; k++) free(r->t[i].k[k].p);
        free(r->t[i].k);
    }
    free(r->f);
    free(r->t);
    strmap_free(&r->tmap);
    cJSON_Delete(r->ix);
    free(r->path);
    free(r);
}

/* ---- the reader's questions --------------------------------------------------------- */

/* A string member of the index ("" if absent). */
static const char *ix_str(const ckpt_reader *r, const char *key)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r->ix, key));
    return s ? s : "";
}

/* A number in one of the index's key/value objects. */
static bool ix_kv(const ckpt_reader *r, const char *obj, const char *key, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->ix, obj), key);
    if (!cJSON_IsNumber(x)) return false;
    *v = x->valuedouble;
    return true;
}

/* Accessors of the index. */
int64_t ckpt_step(const ckpt_reader *r) { return r->step; }
const char *ckpt_path(const ckpt_reader *r) { return r->path; }
const char *ckpt_model(const ckpt_reader *r) { return ix_str(r, "model"); }
const char *ckpt_family(const ckpt_reader *r) { return ix_str(r, "family"); }
const char *ckpt_spec_text(const ckpt_reader *r) { return ix_str(r, "spec"); }
int ckpt_nranks(const ckpt_reader *r) { return r->nf; }
bool ckpt_layout(const ckpt_reader *r, const char *key, double *v) { return ix_kv(r, "layout", key, v); }
bool ckpt_state(const ckpt_reader *r, const char *key, double *v) { return ix_kv(r, "state", key, v); }
int ckpt_ntensors(const ckpt_reader *r) { return r->nt; }

/* Tensor i's name and logical shape. */
const char *ckpt_tensor(const ckpt_reader *r, int i, int64_t *rows, int64_t *cols)
{
    if (i < 0 || i >= r->nt) return NULL;
    if (rows) *rows = r->t[i].rows;
    if (cols) *cols = r->t[i].cols;
    return r->t[i].name;
}

/* The pieces of state `kind` of tensor `name`, or NULL. */
static rkind *find_kind(const ckpt_reader *r, const char *kind, const char *name, rtensor **tp)
{
    int ti = strmap_get(&r->tmap, name);
    if (ti < 0) return NULL;
    *tp = &r->t[ti];
    for (int k = 0; k < r->t[ti].nk; k++)
        if (strcmp(r->t[ti].k[k].kind, kind) == 0) return &r->t[ti].k[k];
    return NULL;
}

/* Whether any rank file holds state `kind` of `name`. */
bool ckpt_has(const ckpt_reader *r, const char *kind, const char *name)
{
    rtensor *t;
    return find_kind(r, kind, name, &t) != NULL;
}

/* "[rows, cols]" or "[rows]" into buf. */
static const char *shape_str(char *buf, size_t len, int64_t rows, int64_t cols)
{
    if (cols) snprintf(buf, len, "[%lld, %lld]", (long long)rows, (long long)cols);
    else snprintf(buf, len, "[%lld]", (long long)rows);
    return buf;
}

/* The identity check: every tensor of the model, with its shape, and nothing else. */
int ckpt_check_model(const ckpt_reader *r, const ckpt_tensor_desc *t, int n, char *err, size_t errlen)
{
    strmap want = {0};
    int rc = CKPT_OK;
    char a[64], b[64];
    for (int i = 0; i < n && rc == CKPT_OK; i++) {
        strmap_put(&want, t[i].name, i);
        int ti = strmap_get(&r->tmap, t[i].name);
        if (ti < 0)
            rc = fail(err, errlen, CKPT_E_MODEL,
                      "%s: the checkpoint is of another model (written for '%s'): it has no tensor '%s'",
                      r->path, ckpt_model(r), t[i].name);
        else if (r->t[ti].rows != t[i].rows || r->t[ti].cols != t[i].cols)
            rc = fail(err, errlen, CKPT_E_MODEL,
                      "%s: the checkpoint is of another model (written for '%s'): tensor '%s' is %s "
                      "there but %s in this model",
                      r->path, ckpt_model(r), t[i].name, shape_str(a, sizeof a, r->t[ti].rows, r->t[ti].cols),
                      shape_str(b, sizeof b, t[i].rows, t[i].cols));
    }
    for (int i = 0; i < r->nt && rc == CKPT_OK; i++)
        if (strmap_get(&want, r->t[i].name) < 0)
            rc = fail(err, errlen, CKPT_E_MODEL,
                      "%s: the checkpoint is of another model (written for '%s'): it has a tensor '%s' "
                      "this model does not",
                      r->path, ckpt_model(r), r->t[i].name);
    strmap_free(&want);
    return rc;
}

/* Fills out[0, b - a) with columns [a, b) of row `row` from the pieces that hold them. */
static int read_row(ckpt_reader *r, rtensor *t, rkind *k, int64_t row, int64_t a, int64_t b, float *out, char *err,
                    size_t errlen)
{
    for (int64_t c = a; c < b;) {
        rpiece *hit = NULL;
        int64_t fi = 0;
        for (int j = 0; j < k->n && !hit; j++) {
            rpiece *p = &k->p[(k->last + j) % k->n];    /* the last piece used first */
            if (row < p->r0 || row >= p->r1 || c < p->c0 || c >= p->c1) continue;
            fi = (row - p->r0) * (p->c1 - p->c0) + (c - p->c0);
            if (fi >= p->f0 && fi < p->f1) {
                hit = p;
                k->last = (int)(p - k->p);
            }
        }
        if (!hit)
            return fail(err, errlen, CKPT_E_COVER,
                        "checkpoint: no rank file holds %s of '%s' at element (%lld, %lld)", k->kind,
                        t->name, (long long)(t->cols ? row : c), (long long)(t->cols ? c : 0));
        int rc = verify_piece(r, t, k, hit, err, errlen);     /* once per piece, before its first use */
        if (rc) return rc;
        int64_t n = b - c;
        if (hit->c1 - c < n) n = hit->c1 - c;
        if (hit->f1 - fi < n) n = hit->f1 - fi;
        convert(out + (c - a), hit->data, hit->dtype, fi - hit->f0, n);
        c += n;
    }
    return CKPT_OK;
}

/* Any logical slice of any tensor, assembled from the rank files (see ckpt.h). */
int ckpt_read(ckpt_reader *r, const char *kind, const char *name, int64_t r0, int64_t r1,
              int64_t c0, int64_t c1, int64_t f0, int64_t f1, float *out, char *err, size_t errlen)
{
    rtensor *t = NULL;
    rkind *k = find_kind(r, kind, name, &t);
    if (!k)
        return fail(err, errlen, t ? CKPT_E_COVER : CKPT_E_MODEL, "%s: the checkpoint has no %s of tensor '%s'",
                    r->path, kind, name);
    if (r0 < 0 || r1 <= r0 || c0 < 0 || c1 <= c0 || (!t->cols && (c0 != 0 || c1 != 1)))
        return fail(err, errlen, CKPT_E_ARGS, "checkpoint: bad slice of '%s'", name);
    if (!t->cols) c0 = r0, c1 = r1, r0 = 0, r1 = 1;     /* a vector is one row internally */
    int64_t w = c1 - c0, area = (r1 - r0) * w;
    if (f1 <= f0) f0 = 0, f1 = area;
    if (f0 < 0 || f1 > area) return fail(err, errlen, CKPT_E_ARGS, "checkpoint: bad flat range of '%s'", name);
    for (int64_t e = f0; e < f1;) {
        int64_t row = r0 + e / w, col = c0 + e % w, end = col + (f1 - e);
        if (end > c1) end = c1;
        float *o = out + (e - f0);
        int64_t in = row < t->irows ? (end < t->icols ? end : t->icols) : col;   /* logical part */
        if (in > col) {
            int rc = read_row(r, t, k, row, col, in, o, err, errlen);
            if (rc) return rc;
        }
        for (int64_t c = in > col ? in : col; c < end; c++) o[c - col] = 0.0f;   /* padding */
        e += end - col;
    }
    return CKPT_OK;
}

/* Every piece against its checksum, then every state of every tensor read
 * whole (each element held by some rank file). */
int ckpt_verify(ckpt_reader *r, ckpt_verify_stats *stats, char *err, size_t errlen)
{
    int rc = CKPT_OK;
    int64_t most = 0;
    for (int ti = 0; ti < r->nt && rc == CKPT_OK; ti++) {
        rtensor *t = &r->t[ti], *same;
        if (t->irows * t->icols > most) most = t->irows * t->icols;
        if (!find_kind(r, CKPT_PARAM, t->name, &same))
            rc = fail(err, errlen, CKPT_E_COVER, "%s: tensor '%s' has no %s pieces", r->path, t->name, CKPT_PARAM);
        for (int ki = 0; ki < t->nk && rc == CKPT_OK; ki++)
            for (int pi = 0; pi < t->k[ki].n && rc == CKPT_OK; pi++)
                rc = verify_piece(r, t, &t->k[ki], &t->k[ki].p[pi], err, errlen);
    }
    float *buf = rc == CKPT_OK ? malloc((size_t)most * sizeof *buf + 1) : NULL;
    if (rc == CKPT_OK && !buf) rc = fail(err, errlen, CKPT_E_IO, "checkpoint: out of memory");
    for (int ti = 0; ti < r->nt && rc == CKPT_OK; ti++) {
        rtensor *t = &r->t[ti];
        for (int ki = 0; ki < t->nk && rc == CKPT_OK; ki++)
            rc = ckpt_read(r, t->k[ki].kind, t->name, 0, t->rows, 0, t->cols ? t->cols : 1, 0, 0,
                           buf, err, errlen);
    }
    free(buf);
    r->stats.files = r->nf;
    r->stats.tensors = r->nt;
    if (stats) *stats = r->stats;
    return rc;
}

/* What ckpt_find said about the checkpoint it chose ("" when nothing). */
const char *ckpt_note(const ckpt_reader *r) { return r->note; }

/* One writer per directory: an exclusive flock on DIR/.lock, which the kernel
 * drops when the process ends however it ends. */
int ckpt_lock(const char *dir, int *fd_out, char *err, size_t errlen)
{
    *fd_out = -1;
    char path[PATH_MAX + 16];
    if (!mkdir_p(dir))
        return fail(err, errlen, CKPT_E_IO, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0) return fail(err, errlen, CKPT_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errlen, CKPT_E_IO, "%s: not a regular file", path);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[256] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            return fail(err, errlen, CKPT_E_BUSY,
                        "%s: another trainer is writing checkpoints here (%s): one trainer per checkpoint directory; "
                        "wait for it to end, or give another --ckpt-dir", dir, *who ? who : "its lock is held");
        return fail(err, errlen, CKPT_E_IO, "%s: cannot lock: %s", path, strerror(e));
    }
    char host[128] = "?", line[256];
    gethostname(host, sizeof host - 1);
    int len = snprintf(line, sizeof line, "pid %ld on %s\n", (long)getpid(), host);
    /* who holds it, for the next trainer's message (the lock works without it) */
    if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, line, (size_t)len, 0);
    *fd_out = fd;
    return CKPT_OK;
}
