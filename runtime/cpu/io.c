/* io.c — host copies and the rank's NVMe swap file.
 *
 * The swap file is opened with O_DIRECT (the page cache would double the
 * host memory the offload plan counted, and hide the drive's real speed) and
 * driven through io_uring with offload.aio.queue_depth requests of
 * offload.aio.block_size bytes in flight (the program's aio_queue_depth and
 * aio_block_size; CPU_NVME_QD and CPU_NVME_SLOT when a program gives 0).  The
 * bytes moved by the steps and the time spent are counted (srt_main's own
 * transfers — the initial states, checkpoints — set c->nvme_untimed and
 * are not);
 * SRT_NVME_STATS=1 prints them per rank at the end (the NVMe bench reads them).  O_DIRECT wants offsets, lengths and buffers aligned to the block
 * size, and arena views are not, so transfers go through a page-aligned
 * bounce buffer: reads take the covering aligned blocks, writes read back
 * the partial blocks at either end first.  A file system that refuses
 * O_DIRECT (tmpfs before Linux 6.6) gets plain pread/pwrite through the page
 * cache, and a kernel without io_uring gets pread/pwrite on the O_DIRECT
 * file, each after a one-time warning.  SRT_NVME_DIRECT=0 and
 * SRT_NVME_URING=0 choose those paths on purpose (tests; file systems that
 * accept O_DIRECT and then misbehave).  The file is unlinked as soon as it
 * is open, so no run, however it ends, leaves a swap file behind.
 */
#include "cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* srt_copy: memmove. */
void cpu_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    if (dst.p != src.p) memmove(dst.p, src.p, (size_t)(dst.n * ops_dtype_size(dst.dt)));
}

/* The swap file's folder: the option, $SRT_NVME_DIR, the spec's offload path,
 * $TMPDIR, /tmp. */
static const char *cpu_nvme_dir(const srt_ctx *c)
{
    if (c->opt.nvme_dir && *c->opt.nvme_dir) return c->opt.nvme_dir;
    const char *e = getenv("SRT_NVME_DIR");
    if (e && *e) return e;
    if (c->prog->nvme_path && *c->prog->nvme_path) return c->prog->nvme_path;
    e = getenv("TMPDIR");
    return e && *e ? e : "/tmp";
}

/* Whether environment variable name is set to 0. */
static bool cpu_env_off(const char *name)
{
    const char *e = getenv(name);
    return e && strcmp(e, "0") == 0;
}

/* Opens (creates, sizes, unlinks) the swap file when the plan uses NVMe. */
void cpu_io_init(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    st->nvme_fd = -1;
    if (c->cls->nvme_bytes <= 0) return;
    /* the spec's aio settings: requests of whole O_DIRECT blocks */
    int64_t qd = c->prog->aio_queue_depth > 0 ? c->prog->aio_queue_depth : CPU_NVME_QD;
    int64_t slot = c->prog->aio_block_size > 0 ? c->prog->aio_block_size : CPU_NVME_SLOT;
    st->nvme_qd = (int)(qd < CPU_NVME_QD_MAX ? qd : CPU_NVME_QD_MAX);
    st->nvme_slot = (slot + CPU_NVME_ALIGN - 1) / CPU_NVME_ALIGN * CPU_NVME_ALIGN;
    snprintf(c->nvme_path, sizeof c->nvme_path, "%s/shardrt-%d-rank%lld.swap", cpu_nvme_dir(c),
             (int)getpid(), (long long)c->rank);
    bool want_direct = !cpu_env_off("SRT_NVME_DIRECT");
    int fd = want_direct ? open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600) : -1;
    st->nvme_direct = fd >= 0;
    if (fd < 0 && (!want_direct || errno == EINVAL)) {
        fd = open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0 && want_direct)
            fprintf(stderr, "shardrt: rank %lld: warning: %s refuses O_DIRECT; NVMe offload goes "
                    "through the page cache (pread/pwrite)\n", (long long)c->rank, cpu_nvme_dir(c));
    }
    if (fd < 0)
        ctx_fatal(c, 1, "cannot create the NVMe swap file %s: %s (set SRT_NVME_DIR)", c->nvme_path,
                  strerror(errno));
    unlink(c->nvme_path);
    int64_t size = (c->cls->nvme_bytes + CPU_NVME_ALIGN - 1) / CPU_NVME_ALIGN * CPU_NVME_ALIGN;
    if (ftruncate(fd, size) != 0)
        ctx_fatal(c, 1, "cannot size the NVMe swap file %s to %lld bytes: %s", c->nvme_path,
                  (long long)size, strerror(errno));
    st->nvme_fd = fd;
    if (!st->nvme_direct) return;
    int e = cpu_env_off("SRT_NVME_URING") ? 0 : io_uring_queue_init((unsigned)st->nvme_qd, &st->ring, 0);
    st->uring = e == 0 && !cpu_env_off("SRT_NVME_URING");
    if (e != 0)
        fprintf(stderr, "shardrt: rank %lld: warning: io_uring is unavailable (%s); NVMe offload "
                "uses pread/pwrite\n", (long long)c->rank, strerror(-e));
    st->bounce = ctx_alloc(c, (int64_t)st->nvme_qd * st->nvme_slot, "the NVMe bounce buffer");
}

/* Which path the swap file takes, for the log and the tests. */
static const char *cpu_nvme_path_name(const cpu_state *st)
{
    return !st->nvme_direct ? "page cache (pread/pwrite)" : st->uring ? "O_DIRECT + io_uring" : "O_DIRECT + pread/pwrite";
}

/* Closes the swap file and the ring. */
void cpu_io_fini(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    const char *e = getenv("SRT_NVME_STATS");
    if (st->nvme_fd >= 0 && e && strcmp(e, "1") == 0)
        fprintf(stderr, "shardrt: rank %lld: nvme: path %s, block %lld, queue depth %d, read %lld bytes in %.6f s, "
                "wrote %lld bytes in %.6f s\n", (long long)c->rank, cpu_nvme_path_name(st), (long long)st->nvme_slot,
                st->nvme_qd, (long long)st->nvme_rd_bytes, st->nvme_rd_us * 1e-6, (long long)st->nvme_wr_bytes,
                st->nvme_wr_us * 1e-6);
    if (st->uring) io_uring_queue_exit(&st->ring);
    if (st->nvme_fd >= 0) close(st->nvme_fd);
    free(st->bounce);
    st->nvme_fd = -1;
}

/* pread/pwrite until done. */
static void cpu_rw_plain(srt_ctx *c, bool write, uint8_t *buf, int64_t bytes, int64_t off)
{
    int fd = cpu_st(c)->nvme_fd;
    while (bytes > 0) {
        ssize_t k = write ? pwrite(fd, buf, (size_t)bytes, off) : pread(fd, buf, (size_t)bytes, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            ctx_fatal(c, 1, "NVMe %s of %lld bytes at %lld failed: %s", write ? "write" : "read",
                      (long long)bytes, (long long)off, k < 0 ? strerror(errno) : "end of file");
        buf += k, bytes -= k, off += k;
    }
}

/* Runs the aligned block transfers of slots [first, first + n) (slot i:
 * bytes[i] at off[i] <-> bounce slot i) and waits for all of them. */
static void cpu_rw_slots(srt_ctx *c, bool write, int first, int n, const int64_t *off,
                         const int64_t *bytes)
{
    cpu_state *st = cpu_st(c);
    if (!st->uring) {
        for (int i = first; i < first + n; i++)
            cpu_rw_plain(c, write, st->bounce + (int64_t)i * st->nvme_slot, bytes[i], off[i]);
        return;
    }
    for (int i = first; i < first + n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
        if (!sqe) ctx_die(c, "io_uring submission queue full");
        uint8_t *b = st->bounce + (int64_t)i * st->nvme_slot;
        if (write) io_uring_prep_write(sqe, st->nvme_fd, b, (unsigned)bytes[i], (uint64_t)off[i]);
        else io_uring_prep_read(sqe, st->nvme_fd, b, (unsigned)bytes[i], (uint64_t)off[i]);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
    }
    int e = io_uring_submit(&st->ring);
    if (e < 0) ctx_fatal(c, 1, "io_uring submit failed: %s", strerror(-e));
    int bad = 0, res = 0;
    for (int done = 0; done < n; done++) {
        struct io_uring_cqe *cqe;
        e = io_uring_wait_cqe(&st->ring, &cqe);
        if (e < 0) ctx_fatal(c, 1, "io_uring wait failed: %s", strerror(-e));
        int i = (int)io_uring_cqe_get_data64(cqe);
        if (cqe->res != bytes[i]) bad = 1, res = cqe->res;
        io_uring_cqe_seen(&st->ring, cqe);
    }
    if (bad)
        ctx_fatal(c, 1, "NVMe %s through io_uring failed: %s", write ? "write" : "read",
                  res < 0 ? strerror(-res) : "short transfer");
}

/* Moves bytes [off, off + bytes) of the file to / from mem through the bounce
 * buffer, nvme_qd aligned slots at a time. */
static void cpu_rw_direct(srt_ctx *c, bool write, uint8_t *mem, int64_t bytes, int64_t off)
{
    cpu_state *st = cpu_st(c);
    const int64_t A = CPU_NVME_ALIGN;
    int64_t lo = off / A * A, hi = (off + bytes + A - 1) / A * A;
    for (int64_t w = lo; w < hi;) {
        int64_t soff[CPU_NVME_QD_MAX], slen[CPU_NVME_QD_MAX];
        int n = 0;
        for (; n < st->nvme_qd && w < hi; n++) {
            soff[n] = w;
            slen[n] = hi - w < st->nvme_slot ? hi - w : st->nvme_slot;
            w += slen[n];
        }
        if (write) {
            /* the blocks at either end hold bytes outside the view: read them first */
            bool head = soff[0] < off, tail = soff[n - 1] + slen[n - 1] > off + bytes;
            if (head && tail && n <= 2) cpu_rw_slots(c, false, 0, n, soff, slen);
            else {
                if (head) cpu_rw_slots(c, false, 0, 1, soff, slen);
                if (tail) cpu_rw_slots(c, false, n - 1, 1, soff, slen);
            }
        } else {
            cpu_rw_slots(c, false, 0, n, soff, slen);
        }
        for (int i = 0; i < n; i++) {
            int64_t a = soff[i] > off ? soff[i] : off;
            int64_t b = soff[i] + slen[i] < off + bytes ? soff[i] + slen[i] : off + bytes;
            uint8_t *slot = st->bounce + (int64_t)i * st->nvme_slot + (a - soff[i]);
            if (write) memcpy(slot, mem + (a - off), (size_t)(b - a));
            else memcpy(mem + (a - off), slot, (size_t)(b - a));
        }
        if (write) cpu_rw_slots(c, true, 0, n, soff, slen);
    }
}

/* A transfer of view t at offset of the swap file, counted unless srt_main
 * says it is its own (c->nvme_untimed). */
static void cpu_nvme(srt_ctx *c, bool write, srt_t t, int64_t offset)
{
    cpu_state *st = cpu_st(c);
    if (st->nvme_fd < 0) ctx_die(c, "NVMe transfer but the plan gave this rank no NVMe file");
    int64_t bytes = t.n * ops_dtype_size(t.dt);
    if (bytes == 0) return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (st->nvme_direct) cpu_rw_direct(c, write, t.p, bytes, offset);
    else cpu_rw_plain(c, write, t.p, bytes, offset);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3;
    if (c->nvme_untimed) return;    /* srt_main's own (start-up, checkpoints): not the steps' traffic */
    if (write) st->nvme_wr_bytes += bytes, st->nvme_wr_us += us;
    else st->nvme_rd_bytes += bytes, st->nvme_rd_us += us;
}

/* srt_nvme_read. */
void cpu_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset)
{
    cpu_nvme(c, false, dst, offset);
}

/* srt_nvme_write. */
void cpu_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset)
{
    cpu_nvme(c, true, src, offset);
}
