/* data.c — llm.c token shards and raw text as layout-independent batches (see data.h). */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* One mapped input file. */
typedef struct data_file {
    char *path;
    void *map;                  /* the whole file, read-only                  */
    size_t bytes;
    const unsigned char *tok;   /* the first token                            */
    int width;                  /* bytes per token: 1 text, 2 or 4 llm.c      */
    int64_t ntok;
    int64_t nwin;               /* windows of seq_len + 1 tokens              */
    int64_t first;              /* index of its first window among all files  */
} data_file;

struct data_loader {
    data_opts o;
    data_file *f;
    int nf;
    int64_t lo, n;              /* this part: windows [lo, lo + n)            */
    int64_t ntok;
    int64_t checked;            /* the last step data_check_step passed, or -1 */
    char err[640];
};

/* Formats an error message into buf and returns code. */
static int fail(char *buf, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *buf, size_t len, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (buf && len) vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return code;
}

/* Token i of file f. */
static int64_t token_at(const data_file *f, int64_t i)
{
    switch (f->width) {
    case 1: return f->tok[i];
    case 2: return ((const uint16_t *)(const void *)f->tok)[i];
    default: return ((const uint32_t *)(const void *)f->tok)[i];
    }
}

/* Reads and checks an llm.c header: sets the token width and count. */
static int parse_llmc(data_file *f, char *err, size_t errlen)
{
    const size_t hdr = DATA_LLMC_HEADER_INTS * sizeof(int32_t);
    if (f->bytes < hdr)
        return fail(err, errlen, DATA_E_TRUNCATED,
                    "%s: truncated: %zu bytes, shorter than the %zu-byte llm.c shard header",
                    f->path, f->bytes, hdr);
    int32_t h[3];
    memcpy(h, f->map, sizeof h);
    if (h[0] == DATA_LLMC_MAGIC16) {
        if (h[1] != DATA_LLMC_VERSION16)
            return fail(err, errlen, DATA_E_MAGIC,
                        "%s: llm.c shard version %d, expected %d for magic %d (uint16 tokens)",
                        f->path, h[1], DATA_LLMC_VERSION16, DATA_LLMC_MAGIC16);
        f->width = 2;
    } else if (h[0] == DATA_LLMC_MAGIC32) {
        if (h[1] != DATA_LLMC_VERSION32)
            return fail(err, errlen, DATA_E_MAGIC,
                        "%s: llm.c shard version %d, expected %d for magic %d (uint32 tokens)",
                        f->path, h[1], DATA_LLMC_VERSION32, DATA_LLMC_MAGIC32);
        f->width = 4;
    } else {
        return fail(err, errlen, DATA_E_MAGIC,
                    "%s: not an llm.c token shard: magic %d, expected %d (uint16 tokens) or %d "
                    "(uint32 tokens); for a text file use data.format = text",
                    f->path, h[0], DATA_LLMC_MAGIC16, DATA_LLMC_MAGIC32);
    }
    if (h[2] < 0)
        return fail(err, errlen, DATA_E_MAGIC, "%s: corrupt llm.c header: token count %d",
                    f->path, h[2]);
    f->ntok = h[2];
    f->tok = (const unsigned char *)f->map + hdr;
    size_t want = hdr + (size_t)f->ntok * (size_t)f->width;
    if (f->bytes < want)
        return fail(err, errlen, DATA_E_TRUNCATED,
                    "%s: truncated: the header declares %lld tokens (%zu bytes) but the file has %zu",
                    f->path, (long long)f->ntok, want, f->bytes);
    if (f->bytes > want)
        return fail(err, errlen, DATA_E_TRUNCATED,
                    "%s: corrupt: %zu bytes follow the %lld tokens the header declares",
                    f->path, f->bytes - want, (long long)f->ntok);
    return DATA_OK;
}

/* Opens and maps one file, then reads its format's header. */
static int open_file(data_file *f, const char *path, int format, char *err, size_t errlen)
{
    f->path = strdup(path);
    if (!f->path) return fail(err, errlen, DATA_E_IO, "%s: out of memory", path);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail(err, errlen, DATA_E_MISSING, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fail(err, errlen, DATA_E_MISSING, "%s: cannot read: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errlen, DATA_E_MISSING, "%s: not a regular file (%s)", path,
                    S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                    : S_ISSOCK(st.st_mode) ? "a socket" : "a device");
    }
    f->bytes = (size_t)st.st_size;
    if (f->bytes == 0) {
        close(fd);
        return fail(err, errlen, DATA_E_EMPTY, "%s: empty file", path);
    }
    f->map = mmap(NULL, f->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return fail(err, errlen, DATA_E_IO, "%s: cannot map: %s", path, strerror(errno));
    }
    if (format == DATA_FMT_TEXT) {
        f->tok = f->map;
        f->width = 1;
        f->ntok = (int64_t)f->bytes;
        return DATA_OK;
    }
    return parse_llmc(f, err, errlen);
}

/* Scans a file for tokens outside the vocabulary. */
static int scan_tokens(const data_file *f, int64_t vocab, int64_t from, int64_t to, char *err,
                       size_t errlen)
{
    for (int64_t i = from; i < to; i++) {
        int64_t t = token_at(f, i);
        if (t >= vocab)
            return fail(err, errlen, DATA_E_TOKEN,
                        "%s: token %lld at position %lld is outside the model's vocabulary of %lld",
                        f->path, (long long)t, (long long)i, (long long)vocab);
    }
    return DATA_OK;
}

/* qsort comparator: file names in byte order (glob's order depends on the locale). */
static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expands the pattern into sorted paths (glob); a literal path that does not exist is reported as such. */
static int expand(const char *pattern, glob_t *g, char *err, size_t errlen)
{
    int rc = glob(pattern, 0, NULL, g);
    if (rc == 0 && g->gl_pathc > 0) {
        qsort(g->gl_pathv, g->gl_pathc, sizeof(char *), by_name);
        return DATA_OK;
    }
    if (rc != GLOB_NOMATCH && rc != 0)
        return fail(err, errlen, DATA_E_MISSING, "%s: cannot list the files", pattern);
    if (strpbrk(pattern, "*?["))
        return fail(err, errlen, DATA_E_MISSING, "%s: no file matches this pattern", pattern);
    return fail(err, errlen, DATA_E_MISSING, "%s: cannot open: %s", pattern, strerror(ENOENT));
}

/* Chooses the part's window range from the whole set (the holdout split). */
static int choose_part(data_loader *d, int64_t total, char *err, size_t errlen)
{
    d->lo = 0;
    d->n = total;
    if (d->o.part == DATA_PART_ALL) return DATA_OK;
    if (!(d->o.holdout > 0 && d->o.holdout < 1))
        return fail(err, errlen, DATA_E_ARGS, "%s: the validation holdout must lie in (0, 1), got %g",
                    d->o.pattern, d->o.holdout);
    int64_t nv = (int64_t)((double)total * d->o.holdout);
    if (nv < 1) nv = 1;
    if (total - nv < 1)
        return fail(err, errlen, DATA_E_SHORT,
                    "%s: %lld sequences of %lld tokens: too few to hold out a validation part "
                    "(give --val, or more data)",
                    d->o.pattern, (long long)total, (long long)d->o.seq_len + 1);
    if (d->o.part == DATA_PART_TRAIN) d->n = total - nv;
    else d->lo = total - nv, d->n = nv;
    return DATA_OK;
}

/* Opens the loader: expands, maps and validates every file. */
int data_open(data_loader **out, const data_opts *o, char *err, size_t errlen)
{
    *out = NULL;
    if (!o->pattern || !*o->pattern)
        return fail(err, errlen, DATA_E_MISSING, "no data file given (--data, or data.train in the spec)");
    if (o->seq_len < 1 || o->vocab < 1 || o->global_batch < 1 ||
        (o->format != DATA_FMT_LLMC && o->format != DATA_FMT_TEXT))
        return fail(err, errlen, DATA_E_ARGS, "%s: bad loader options", o->pattern);
    glob_t g;
    int rc = expand(o->pattern, &g, err, errlen);
    if (rc) return rc;
    data_loader *d = calloc(1, sizeof *d);
    if (d) d->f = calloc(g.gl_pathc, sizeof *d->f);
    if (!d || !d->f) {
        free(d);
        globfree(&g);
        return fail(err, errlen, DATA_E_IO, "%s: out of memory", o->pattern);
    }
    d->o = *o;
    d->checked = -1;
    int64_t total = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == DATA_OK; i++) {
        data_file *f = &d->f[d->nf++];
        rc = open_file(f, g.gl_pathv[i], o->format, err, errlen);
        if (rc) break;
        if (f->ntok < o->seq_len + 1) {
            rc = fail(err, errlen, DATA_E_SHORT,
                      "%s: %lld tokens, too short for one sequence of seq_len + 1 = %lld tokens",
                      f->path, (long long)f->ntok, (long long)o->seq_len + 1);
            break;
        }
        if (o->check == DATA_CHECK_OPEN && (rc = scan_tokens(f, o->vocab, 0, f->ntok, err, errlen)))
            break;
        f->nwin = (f->ntok - 1) / o->seq_len;
        f->first = total;
        total += f->nwin;
        d->ntok += f->ntok;
    }
    globfree(&g);
    if (rc == DATA_OK) rc = choose_part(d, total, err, errlen);
    if (rc) {
        data_close(d);
        return rc;
    }
    *out = d;
    return DATA_OK;
}

/* A loader over tokens in memory (see data.h). */
int data_open_tokens(data_loader **out, const int32_t *tokens, int64_t n, const char *name, const data_opts *o,
                     char *err, size_t errlen)
{
    *out = NULL;
    if (o->seq_len < 1 || o->vocab < 1 || o->global_batch < 1 || n < o->seq_len + 1)
        return fail(err, errlen, DATA_E_ARGS, "%s: bad loader options", name);
    data_loader *d = calloc(1, sizeof *d);
    if (d) d->f = calloc(1, sizeof *d->f);
    if (d && d->f) d->f->path = strdup(name);
    if (!d || !d->f || !d->f->path) {
        data_close(d);
        return fail(err, errlen, DATA_E_IO, "%s: out of memory", name);
    }
    d->o = *o;
    d->o.pattern = d->f->path;
    d->checked = -1;
    d->nf = 1;
    data_file *f = d->f;
    f->tok = (const unsigned char *)tokens;     /* borrowed: read at each data_batch */
    f->width = 4;
    f->ntok = d->ntok = n;
    f->nwin = (n - 1) / o->seq_len;
    int rc = o->check == DATA_CHECK_OPEN ? scan_tokens(f, o->vocab, 0, n, err, errlen) : DATA_OK;
    if (rc == DATA_OK) rc = choose_part(d, f->nwin, err, errlen);
    if (rc) {
        data_close(d);
        return rc;
    }
    *out = d;
    return DATA_OK;
}

/* The file holding window w and the window's first token in it. */
static const data_file *locate(const data_loader *d, int64_t w, int64_t *start)
{
    int lo = 0, hi = d->nf - 1;
    while (lo < hi) {               /* the last file whose first window is <= w */
        int mid = (lo + hi + 1) / 2;
        if (d->f[mid].first <= w) lo = mid;
        else hi = mid - 1;
    }
    *start = (w - d->f[lo].first) * d->o.seq_len;
    return &d->f[lo];
}

/* The window global sequence g reads: the order wraps around after N sequences. */
int64_t data_window(const data_loader *d, int64_t g)
{
    return d->lo + g % d->n;
}

/* Checks the tokens of every sequence of step's global batch. */
int data_check_step(data_loader *d, int64_t step)
{
    if (d->checked == step) return DATA_OK;
    int64_t G = d->o.global_batch, T = d->o.seq_len;
    for (int64_t j = 0; j < G; j++) {
        int64_t start;
        const data_file *f = locate(d, data_window(d, step * G + j), &start);
        int rc = scan_tokens(f, d->o.vocab, start, start + T + 1, d->err, sizeof d->err);
        if (rc) return rc;
    }
    d->checked = step;
    return DATA_OK;
}

/* One microbatch of one dp rank: see data.h for which sequences. */
int data_batch(data_loader *d, int64_t step, int64_t dp_rank, int64_t dp, int64_t mb,
               int64_t micro_batch, int32_t *tokens, int32_t *targets)
{
    int64_t G = d->o.global_batch, T = d->o.seq_len, B = micro_batch;
    if (step < 0 || dp < 1 || dp_rank < 0 || dp_rank >= dp || B < 1 || G % (dp * B) != 0 ||
        mb < 0 || mb >= G / (dp * B))
        return fail(d->err, sizeof d->err, DATA_E_ARGS,
                    "data_batch: step %lld, dp rank %lld of %lld, microbatch %lld of %lld sequences "
                    "does not fit a global batch of %lld",
                    (long long)step, (long long)dp_rank, (long long)dp, (long long)mb,
                    (long long)B, (long long)G);
    if (d->o.check == DATA_CHECK_STEP) {
        int rc = data_check_step(d, step);
        if (rc) return rc;
    }
    int64_t M = G / (dp * B);
    int64_t g0 = step * G + dp_rank * (M * B) + mb * B;
    for (int64_t b = 0; b < B; b++) {
        int64_t start;
        const data_file *f = locate(d, data_window(d, g0 + b), &start);
        int32_t *x = tokens + b * T, *y = targets + b * T;
        for (int64_t t = 0; t < T; t++) {
            x[t] = (int32_t)token_at(f, start + t);
            y[t] = (int32_t)token_at(f, start + t + 1);
        }
    }
    return DATA_OK;
}

/* Accessors: sizes, names and the last error message. */
int64_t data_num_sequences(const data_loader *d) { return d->n; }
int64_t data_num_tokens(const data_loader *d) { return d->ntok; }
int data_num_files(const data_loader *d) { return d->nf; }
const char *data_file_name(const data_loader *d, int i) { return i >= 0 && i < d->nf ? d->f[i].path : NULL; }
const char *data_error(const data_loader *d) { return d->err; }

/* Unmaps every file and frees the loader (NULL is fine). */
void data_close(data_loader *d)
{
    if (!d) return;
    for (int i = 0; d->f && i < d->nf; i++) {
        if (d->f[i].map) munmap(d->f[i].map, d->f[i].bytes);
        free(d->f[i].path);
    }
    free(d->f);
    free(d);
}
