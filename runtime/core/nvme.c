/* nvme.c — the rank's NVMe swap file (nvme.h), for both backends. */
#define _GNU_SOURCE   /* O_DIRECT */
#include "nvme.h"

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The swap file's folder: the option, $SRT_NVME_DIR, the spec's offload path,
 * $TMPDIR, /tmp. */
static const char *nvme_dir(const srt_ctx *c)
{
    if (c->opt.nvme_dir && *c->opt.nvme_dir) return c->opt.nvme_dir;
    const char *e = getenv("SRT_NVME_DIR");
    if (e && *e) return e;
    if (c->prog->nvme_path && *c->prog->nvme_path) return c->prog->nvme_path;
    e = getenv("TMPDIR");
    return e && *e ? e : "/tmp";
}

/* Whether environment variable name is set to 0. */
static bool nvme_env_off(const char *name)
{
    const char *e = getenv(name);
    return e && strcmp(e, "0") == 0;
}

/* Opens (creates, sizes, unlinks) the swap file and its ring (see nvme.h). */
void nvme_open(srt_ctx *c, nvme_file *f)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (c->cls->nvme_bytes <= 0) return;
    /* the spec's aio settings: requests of whole O_DIRECT blocks */
    int64_t qd = c->prog->aio_queue_depth > 0 ? c->prog->aio_queue_depth : NVME_QD;
    int64_t slot = c->prog->aio_block_size > 0 ? c->prog->aio_block_size : NVME_SLOT;
    f->qd = (int)(qd < NVME_QD_MAX ? qd : NVME_QD_MAX);
    f->slot = (slot + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    snprintf(c->nvme_path, sizeof c->nvme_path, "%s/shardrt-%d-rank%lld.swap", nvme_dir(c), (int)getpid(),
             (long long)c->rank);
    bool want_direct = !nvme_env_off("SRT_NVME_DIRECT");
    int fd = want_direct ? open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600) : -1;
    f->direct = fd >= 0;
    if (fd < 0 && (!want_direct || errno == EINVAL)) {
        fd = open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0 && want_direct)
            fprintf(stderr, "shardrt: rank %lld: warning: %s refuses O_DIRECT; NVMe offload goes "
                    "through the page cache (pread/pwrite)\n", (long long)c->rank, nvme_dir(c));
    }
    if (fd < 0)
        ctx_fatal(c, 1, "cannot create the NVMe swap file %s: %s (set SRT_NVME_DIR)", c->nvme_path,
                  strerror(errno));
    unlink(c->nvme_path);
    int64_t size = (c->cls->nvme_bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    if (ftruncate(fd, size) != 0)
        ctx_fatal(c, 1, "cannot size the NVMe swap file %s to %lld bytes: %s", c->nvme_path,
                  (long long)size, strerror(errno));
    f->fd = fd;
    if (!f->direct || nvme_env_off("SRT_NVME_URING")) return;
    int e = io_uring_queue_init((unsigned)f->qd, &f->ring, 0);
    f->uring = e == 0;
    if (e != 0)
        fprintf(stderr, "shardrt: rank %lld: warning: io_uring is unavailable (%s); NVMe offload "
                "uses pread/pwrite\n", (long long)c->rank, strerror(-e));
}

/* Prints the statistics, closes the ring and the file (see nvme.h). */
void nvme_close(srt_ctx *c, nvme_file *f)
{
    const char *e = getenv("SRT_NVME_STATS");
    if (f->fd >= 0 && e && strcmp(e, "1") == 0)
        fprintf(stderr, "shardrt: rank %lld: nvme: path %s, block %lld, queue depth %d, read %lld bytes in %.6f s, "
                "wrote %lld bytes in %.6f s\n", (long long)c->rank,
                !f->direct ? "page cache (pread/pwrite)" : f->uring ? "O_DIRECT + io_uring" : "O_DIRECT + pread/pwrite",
                (long long)f->slot, f->qd, (long long)f->rd_bytes, f->rd_us * 1e-6, (long long)f->wr_bytes,
                f->wr_us * 1e-6);
    if (f->uring) io_uring_queue_exit(&f->ring);
    if (f->fd >= 0) close(f->fd);
    f->uring = false;
    f->fd = -1;
}

/* pread/pwrite until done. */
static void nvme_rw_plain(srt_ctx *c, const nvme_file *f, bool write, uint8_t *buf, int64_t bytes, int64_t off)
{
    while (bytes > 0) {
        ssize_t k = write ? pwrite(f->fd, buf, (size_t)bytes, off) : pread(f->fd, buf, (size_t)bytes, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            ctx_fatal(c, 1, "NVMe %s of %lld bytes at %lld failed: %s", write ? "write" : "read",
                      (long long)bytes, (long long)off, k < 0 ? strerror(errno) : "end of file");
        buf += k, bytes -= k, off += k;
    }
}

/* Runs the aligned block transfers of slots [first, first + n) (slot i:
 * bytes[i] at off[i] <-> bounce slot i) and waits for all of them. */
static void nvme_rw_slots(srt_ctx *c, nvme_file *f, bool write, int first, int n, const int64_t *off,
                          const int64_t *bytes)
{
    if (!f->uring) {
        for (int i = first; i < first + n; i++) nvme_rw_plain(c, f, write, f->bounce + (int64_t)i * f->slot, bytes[i], off[i]);
        return;
    }
    for (int i = first; i < first + n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
        if (!sqe) ctx_die(c, "io_uring submission queue full");
        uint8_t *b = f->bounce + (int64_t)i * f->slot;
        if (write) io_uring_prep_write(sqe, f->fd, b, (unsigned)bytes[i], (uint64_t)off[i]);
        else io_uring_prep_read(sqe, f->fd, b, (unsigned)bytes[i], (uint64_t)off[i]);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
    }
    int e = io_uring_submit(&f->ring);
    if (e < 0) ctx_fatal(c, 1, "io_uring submit failed: %s", strerror(-e));
    int bad = 0, res = 0;
    for (int done = 0; done < n; done++) {
        struct io_uring_cqe *cqe;
        e = io_uring_wait_cqe(&f->ring, &cqe);
        if (e < 0) ctx_fatal(c, 1, "io_uring wait failed: %s", strerror(-e));
        int i = (int)io_uring_cqe_get_data64(cqe);
        if (cqe->res != bytes[i]) bad = 1, res = cqe->res;
        io_uring_cqe_seen(&f->ring, cqe);
    }
    if (bad)
        ctx_fatal(c, 1, "NVMe %s through io_uring failed: %s", write ? "write" : "read",
                  res < 0 ? strerror(-res) : "short transfer");
}

/* len bytes between a bounce slot and mem: the backend's stage, or memcpy. */
static void nvme_stage(srt_ctx *c, nvme_stage_fn stage, void *ud, void *dst, const void *src, int64_t len)
{
    if (stage) stage(c, ud, dst, src, len);
    else memcpy(dst, src, (size_t)len);
}

/* Moves bytes [off, off + bytes) of the file to / from mem through the bounce
 * slots, qd aligned requests at a time. */
static void nvme_rw_direct(srt_ctx *c, nvme_file *f, bool write, uint8_t *mem, int64_t bytes, int64_t off,
                           nvme_stage_fn stage, void *ud)
{
    const int64_t A = NVME_ALIGN;
    int64_t lo = off / A * A, hi = (off + bytes + A - 1) / A * A;
    for (int64_t w = lo; w < hi;) {
        int64_t soff[NVME_QD_MAX], slen[NVME_QD_MAX];
        int n = 0;
        for (; n < f->qd && w < hi; n++) {
            soff[n] = w;
            slen[n] = hi - w < f->slot ? hi - w : f->slot;
            w += slen[n];
        }
        if (write) {
            /* the blocks at either end hold bytes outside the view: read them first */
            bool head = soff[0] < off, tail = soff[n - 1] + slen[n - 1] > off + bytes;
            if (head && tail && n <= 2) nvme_rw_slots(c, f, false, 0, n, soff, slen);
            else {
                if (head) nvme_rw_slots(c, f, false, 0, 1, soff, slen);
                if (tail) nvme_rw_slots(c, f, false, n - 1, 1, soff, slen);
            }
        } else {
            nvme_rw_slots(c, f, false, 0, n, soff, slen);
        }
        for (int i = 0; i < n; i++) {
            int64_t a = soff[i] > off ? soff[i] : off;
            int64_t b = soff[i] + slen[i] < off + bytes ? soff[i] + slen[i] : off + bytes;
            uint8_t *slot = f->bounce + (int64_t)i * f->slot + (a - soff[i]);
            if (write) nvme_stage(c, stage, ud, slot, mem + (a - off), b - a);
            else nvme_stage(c, stage, ud, mem + (a - off), slot, b - a);
        }
        if (write) nvme_rw_slots(c, f, true, 0, n, soff, slen);
    }
}

/* A transfer between mem and the swap file (see nvme.h). */
void nvme_transfer(srt_ctx *c, nvme_file *f, bool write, uint8_t *mem, int64_t bytes, int64_t off,
                   nvme_stage_fn stage, void *ud)
{
    if (f->fd < 0) ctx_die(c, "NVMe transfer but the plan gave this rank no NVMe file");
    if (bytes == 0) return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (f->direct) {
        nvme_rw_direct(c, f, write, mem, bytes, off, stage, ud);
    } else if (!stage) {
        nvme_rw_plain(c, f, write, mem, bytes, off);
    } else {    /* the page cache and memory only a stage reaches: through the bounce slots */
        int64_t cap = (int64_t)f->qd * f->slot;
        for (int64_t done = 0; done < bytes;) {
            int64_t len = bytes - done < cap ? bytes - done : cap;
            if (write) stage(c, ud, f->bounce, mem + done, len);
            nvme_rw_plain(c, f, write, f->bounce, len, off + done);
            if (!write) stage(c, ud, mem + done, f->bounce, len);
            done += len;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (c->nvme_untimed) return;    /* srt_main's own (start-up, checkpoints): not the steps' traffic */
    double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3;
    if (write) f->wr_bytes += bytes, f->wr_us += us;
    else f->rd_bytes += bytes, f->rd_us += us;
}
