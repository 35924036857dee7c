/* util.c — files and formatting shared by the compiler's stages. */
#include "shardc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens path for reading without blocking (a FIFO would wait for a writer)
 * and refuses what is not a regular file: errno EISDIR or UTIL_ENOTREG. */
static FILE *util_open_regular(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        errno = S_ISDIR(st.st_mode) ? EISDIR : S_ISREG(st.st_mode) ? e : UTIL_ENOTREG;
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) close(fd);
    return f;
}

/* strerror, and what UTIL_ENOTREG means. */
const char *util_strerror(int e)
{
    return e == UTIL_ENOTREG ? "not a regular file (a FIFO, a device or a socket)" : strerror(e);
}

/* Reads a whole file into the arena with a NUL sentinel.  Fails with errno
 * EFBIG past `limit` bytes, so a 100 MB file is refused before it is read;
 * with EISDIR or UTIL_ENOTREG for a directory, a FIFO, a device or a socket
 * ("-", standard input, may be a pipe). */
char *util_read_file(const char *path, size_t *len, size_t limit)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : util_open_regular(path);
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        if (f != stdin) fclose(f);
        errno = EISDIR;
        return NULL;
    }
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > limit) {
        if (f != stdin) fclose(f);
        errno = EFBIG;
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) die("out of memory");
    for (;;) {
        if (n == cap) {
            if (cap > limit) {
                free(buf);
                if (f != stdin) fclose(f);
                errno = EFBIG;
                return NULL;
            }
            cap *= 2;
            buf = realloc(buf, cap + 1);
            if (!buf) die("out of memory");
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f) ? errno : 0;
    if (f != stdin) fclose(f);
    if (err || n > limit) {
        free(buf);
        errno = err ? err : EFBIG;
        return NULL;
    }
    char *p = arena_strndup(&g_arena, buf, n);
    free(buf);
    *len = n;
    return p;
}

/* Formats bytes with a binary unit for reports; rotates over 8 static buffers. */
const char *util_bytes(int64_t b)
{
    static char bufs[8][32];
    static int k;
    char *s = bufs[k++ & 7];
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)b;
    int u = 0;
    while ((v >= 1024 || v <= -1024) && u < 5) v /= 1024, u++;
    if (u == 0) snprintf(s, 32, "%lld B", (long long)b);
    else snprintf(s, 32, "%.2f %s", v, units[u]);
    return s;
}

/* Opens a temporary file beside path for a writer that streams; *tmp names
 * it (an arena string).  NULL with errno set when it cannot be created. */
FILE *util_atomic_open(const char *path, const char **tmp)
{
    *tmp = arena_printf(&g_arena, "%s.tmp.%ld", path, (long)getpid());
    return fopen(*tmp, "w");
}

/* Closes a file util_atomic_open gave: flush, fsync and rename over path when
 * `ok` (the writer succeeded) and every step does; otherwise the temporary is
 * removed, so a reader sees the old file or the new one, never a part.  errno
 * is the first failure's. */
bool util_atomic_close(FILE *f, const char *tmp, const char *path, bool ok)
{
    int e = ok ? 0 : EIO;
    errno = 0;
    if (fflush(f) != 0 || ferror(f)) e = e ? e : errno ? errno : EIO;
    if (!e && fsync(fileno(f)) != 0) e = errno;
    if (fclose(f) != 0 && !e) e = errno;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (!e) return true;
    unlink(tmp);
    errno = e;
    return false;
}

/* Writes data to path through a temporary file in the same directory, fsync
 * and rename, so a reader sees the old file or the new one, never a part. */
bool util_write_atomic(const char *path, const char *data, size_t len)
{
    const char *tmp;
    FILE *f = util_atomic_open(path, &tmp);
    if (!f) return false;
    return util_atomic_close(f, tmp, path, fwrite(data, 1, len, f) == len);
}

/* path made absolute (an arena string); an internal error if it does not resolve. */
const char *util_abs_path(const char *path)
{
    char *r = realpath(path, NULL);
    if (!r) die("cannot resolve %s: %s", path, strerror(errno));
    const char *a = arena_strdup(&g_arena, r);
    free(r);
    return a;
}
