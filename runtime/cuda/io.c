/* io.c — copies between the arenas and the rank's NVMe swap file on the
 * CUDA backend.
 *
 * srt_copy is cudaMemcpyAsync on the op's stream (the host arena is pinned,
 * so the copy engines move it asynchronously).  NVMe transfers run on the
 * issuing thread after the op's stream has finished its earlier work (the
 * schedule puts them on the copy stream, whose later work they precede), the
 * same way as the CPU backend's runtime/cpu/io.c: the file is opened with
 * O_DIRECT and driven through io_uring with the program's aio_queue_depth
 * requests of aio_block_size bytes in flight (CU_NVME_QD and CU_NVME_SLOT
 * when it gives 0), into a pinned, page-aligned bounce buffer (cudaHostAlloc:
 * one slot per request) that covers the aligned blocks around an unaligned
 * view (writes read the partial blocks at either end back first).  Host
 * memory (the pinned arena; srt_main's own buffers) is copied to and from the
 * slots with memcpy, the device arena with cudaMemcpyAsync on the op's stream.  A file system that
 * refuses O_DIRECT gets pread/pwrite through the page cache, a kernel
 * without io_uring pread/pwrite on the O_DIRECT file, each after a warning;
 * SRT_NVME_DIRECT=0 and SRT_NVME_URING=0 choose those paths on purpose.  The
 * folder: the option, $SRT_NVME_DIR, the spec's offload path (nvme_path),
 * $TMPDIR, /tmp; the file is unlinked once open. */
#define _GNU_SOURCE   /* O_DIRECT */
#include "cu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The swap file's folder: the option, $SRT_NVME_DIR, the spec's offload
 * path, $TMPDIR, /tmp. */
static const char *cu_nvme_dir(const srt_ctx *c)
{
    if (c->opt.nvme_dir && *c->opt.nvme_dir) return c->opt.nvme_dir;
    const char *e = getenv("SRT_NVME_DIR");
    if (e && *e) return e;
    if (c->prog->nvme_path && *c->prog->nvme_path) return c->prog->nvme_path;
    e = getenv("TMPDIR");
    return e && *e ? e : "/tmp";
}

/* Whether environment variable name is set to 0. */
static bool cu_env_off(const char *name)
{
    const char *e = getenv(name);
    return e && strcmp(e, "0") == 0;
}

/* Opens (creates, sizes, unlinks) the swap file when the plan uses NVMe, its
 * io_uring queue and the pinned bounce slots. */
void cu_io_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    st->nvme_fd = -1;
    if (c->cls->nvme_bytes <= 0) return;
    int64_t qd = c->prog->aio_queue_depth > 0 ? c->prog->aio_queue_depth : CU_NVME_QD;
    int64_t slot = c->prog->aio_block_size > 0 ? c->prog->aio_block_size : CU_NVME_SLOT;
    st->nvme_qd = (int)(qd < CU_NVME_QD_MAX ? qd : CU_NVME_QD_MAX);
    st->nvme_slot = (slot + CU_NVME_ALIGN - 1) / CU_NVME_ALIGN * CU_NVME_ALIGN;
    snprintf(c->nvme_path, sizeof c->nvme_path, "%s/shardrt-%d-rank%lld.swap", cu_nvme_dir(c), (int)getpid(),
             (long long)c->rank);
    bool want_direct = !cu_env_off("SRT_NVME_DIRECT");
    int fd = want_direct ? open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600) : -1;
    st->nvme_direct = fd >= 0;
    if (fd < 0 && (!want_direct || errno == EINVAL)) {
        fd = open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0 && want_direct)
            fprintf(stderr, "shardrt: rank %lld: warning: %s refuses O_DIRECT; NVMe offload goes "
                    "through the page cache (pread/pwrite)\n", (long long)c->rank, cu_nvme_dir(c));
    }
    if (fd < 0)
        ctx_fatal(c, 1, "cannot create the NVMe swap file %s: %s (set SRT_NVME_DIR)", c->nvme_path, strerror(errno));
    unlink(c->nvme_path);
    int64_t size = (c->cls->nvme_bytes + CU_NVME_ALIGN - 1) / CU_NVME_ALIGN * CU_NVME_ALIGN;
    if (ftruncate(fd, size) != 0)
        ctx_fatal(c, 1, "cannot size the NVMe swap file %s to %lld bytes: %s", c->nvme_path, (long long)size,
                  strerror(errno));
    st->nvme_fd = fd;
    int e = 0;
    if (st->nvme_direct && !cu_env_off("SRT_NVME_URING")) {
        e = io_uring_queue_init((unsigned)st->nvme_qd, &st->ring, 0);
        st->uring = e == 0;
        if (e != 0)
            fprintf(stderr, "shardrt: rank %lld: warning: io_uring is unavailable (%s); NVMe offload "
                    "uses pread/pwrite\n", (long long)c->rank, strerror(-e));
    }
    CU_CHECK(c, cudaHostAlloc((void **)&st->bounce, (size_t)(st->nvme_qd * st->nvme_slot), cudaHostAllocPortable),
             "cudaHostAlloc (the NVMe bounce slots)");
}

/* Closes the ring and the swap file, frees the bounce slots. */
void cu_io_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    if (st->uring) io_uring_queue_exit(&st->ring);
    st->uring = false;
    if (st->nvme_fd >= 0) close(st->nvme_fd);
    st->nvme_fd = -1;
    if (st->bounce) cudaFreeHost(st->bounce);
    st->bounce = NULL;
}

/* dst = src on s (any pair of arenas). */
void cu_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    if (dst.p == src.p) return;
    CU_CHECK(c, cudaMemcpyAsync(dst.p, src.p, (size_t)(dst.n * cu_dsize(dst.dt)), cudaMemcpyDefault, cu_stream(c, s)),
             "copy");
}

/* pread/pwrite until done (reads past the end of what was written: zeros). */
static void cu_rw_plain(srt_ctx *c, bool write, uint8_t *buf, int64_t bytes, int64_t off)
{
    int fd = cu_st(c)->nvme_fd;
    while (bytes > 0) {
        ssize_t k = write ? pwrite(fd, buf, (size_t)bytes, off) : pread(fd, buf, (size_t)bytes, off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            ctx_fatal(c, 1, "NVMe %s of %lld bytes at %lld failed: %s", write ? "write" : "read", (long long)bytes,
                      (long long)off, strerror(errno));
        if (k == 0) {
            if (write) ctx_fatal(c, 1, "NVMe write of %lld bytes at %lld wrote nothing", (long long)bytes,
                                 (long long)off);
            memset(buf, 0, (size_t)bytes);
            return;
        }
        buf += k, bytes -= k, off += k;
    }
}

/* Runs the aligned block transfers of slots [first, first + n) (slot i:
 * bytes[i] at off[i] <-> bounce slot i) and waits for all of them. */
static void cu_rw_slots(srt_ctx *c, bool write, int first, int n, const int64_t *off, const int64_t *bytes)
{
    cu_state *st = cu_st(c);
    if (!st->uring) {
        for (int i = first; i < first + n; i++)
            cu_rw_plain(c, write, st->bounce + (int64_t)i * st->nvme_slot, bytes[i], off[i]);
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

/* Whether p lies in the device arena (else host memory: the pinned arena, or
 * srt_main's own buffers at start-up and for checkpoints). */
static bool cu_in_dev(const srt_ctx *c, const void *p)
{
    const uint8_t *b = p;
    return c->dev && b >= c->dev && b < c->dev + c->dev_bytes;
}

/* len bytes between a bounce slot and the view's memory: memcpy for host
 * memory, a copy on s for device memory. */
static void cu_stage(srt_ctx *c, srt_stream s, void *dst, const void *src, int64_t len, bool host)
{
    if (host) {
        memcpy(dst, src, (size_t)len);
        return;
    }
    CU_CHECK(c, cudaMemcpyAsync(dst, src, (size_t)len, cudaMemcpyDefault, cu_stream(c, s)), "nvme: stage");
    CU_CHECK(c, cudaStreamSynchronize(cu_stream(c, s)), "nvme: stage");
}

/* Moves bytes [off, off + bytes) of the file to / from mem through the bounce
 * slots, nvme_qd aligned requests at a time. */
static void cu_rw_direct(srt_ctx *c, srt_stream s, bool write, uint8_t *mem, int64_t bytes, int64_t off)
{
    cu_state *st = cu_st(c);
    const int64_t A = CU_NVME_ALIGN;
    bool host = !cu_in_dev(c, mem);
    int64_t lo = off / A * A, hi = (off + bytes + A - 1) / A * A;
    for (int64_t w = lo; w < hi;) {
        int64_t soff[CU_NVME_QD_MAX], slen[CU_NVME_QD_MAX];
        int n = 0;
        for (; n < st->nvme_qd && w < hi; n++) {
            soff[n] = w;
            slen[n] = hi - w < st->nvme_slot ? hi - w : st->nvme_slot;
            w += slen[n];
        }
        if (write) {
            /* the blocks at either end hold bytes outside the view: read them first */
            bool head = soff[0] < off, tail = soff[n - 1] + slen[n - 1] > off + bytes;
            if (head && tail && n <= 2) cu_rw_slots(c, false, 0, n, soff, slen);
            else {
                if (head) cu_rw_slots(c, false, 0, 1, soff, slen);
                if (tail) cu_rw_slots(c, false, n - 1, 1, soff, slen);
            }
        } else {
            cu_rw_slots(c, false, 0, n, soff, slen);
        }
        for (int i = 0; i < n; i++) {
            int64_t a = soff[i] > off ? soff[i] : off;
            int64_t b = soff[i] + slen[i] < off + bytes ? soff[i] + slen[i] : off + bytes;
            uint8_t *slot = st->bounce + (int64_t)i * st->nvme_slot + (a - soff[i]);
            if (write) cu_stage(c, s, slot, mem + (a - off), b - a, host);
            else cu_stage(c, s, mem + (a - off), slot, b - a, host);
        }
        if (write) cu_rw_slots(c, true, 0, n, soff, slen);
    }
}

/* A transfer of view t at offset of the swap file, after s's earlier work. */
static void cu_nvme(srt_ctx *c, srt_stream s, srt_t t, int64_t offset, bool write)
{
    cu_state *st = cu_st(c);
    if (st->nvme_fd < 0) ctx_die(c, "nvme_%s: the program plans no NVMe bytes", write ? "write" : "read");
    CU_CHECK(c, cudaStreamSynchronize(cu_stream(c, s)), write ? "nvme_write: sync" : "nvme_read: sync");
    int64_t bytes = t.n * cu_dsize(t.dt);
    if (bytes == 0) return;
    if (st->nvme_direct) {
        cu_rw_direct(c, s, write, t.p, bytes, offset);
    } else if (!cu_in_dev(c, t.p)) {
        cu_rw_plain(c, write, t.p, bytes, offset);
    } else {
        /* page cache and device memory: through the bounce slots, one slot at a time */
        uint8_t *mem = t.p;
        int64_t cap = (int64_t)st->nvme_qd * st->nvme_slot;
        for (int64_t done = 0; done < bytes;) {
            int64_t len = bytes - done < cap ? bytes - done : cap;
            if (write) cu_stage(c, s, st->bounce, mem + done, len, false);
            cu_rw_plain(c, write, st->bounce, len, offset + done);
            if (!write) cu_stage(c, s, mem + done, st->bounce, len, false);
            done += len;
        }
    }
}

/* srt_nvme_read. */
void cu_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset)
{
    cu_nvme(c, s, dst, offset, false);
}

/* srt_nvme_write. */
void cu_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset)
{
    cu_nvme(c, s, src, offset, true);
}
