/* io.c — copies between the arenas and the rank's NVMe swap file on the
 * CUDA backend.
 *
 * srt_copy is cudaMemcpyAsync on the op's stream (the host arena is pinned,
 * so the copy engines move it asynchronously).  NVMe transfers are
 * synchronous on the host after the op's stream has finished its earlier
 * work: the file is opened with O_DIRECT (page cache off; plain I/O when the
 * file system refuses it), and blocks go through a pinned, page-aligned
 * bounce buffer of CU_NVME_BOUNCE bytes with pread/pwrite, covering the
 * aligned blocks around an unaligned range (writes read the partial blocks
 * at either end back first).  The CPU backend's io_uring queue is not used
 * here (it is tied to its own state); the file is unlinked once open. */
#define _GNU_SOURCE   /* O_DIRECT */
#include "cu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The swap file's folder: the option, $SRT_NVME_DIR, $TMPDIR, /tmp. */
static const char *cu_nvme_dir(const srt_ctx *c)
{
    if (c->opt.nvme_dir && *c->opt.nvme_dir) return c->opt.nvme_dir;
    const char *e = getenv("SRT_NVME_DIR");
    if (e && *e) return e;
    e = getenv("TMPDIR");
    return e && *e ? e : "/tmp";
}

/* Opens (creates, sizes, unlinks) the swap file when the plan uses NVMe. */
void cu_io_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    st->nvme_fd = -1;
    if (c->cls->nvme_bytes <= 0) return;
    snprintf(c->nvme_path, sizeof c->nvme_path, "%s/shardrt-%d-rank%lld.swap", cu_nvme_dir(c), (int)getpid(),
             (long long)c->rank);
    int fd = open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) fd = open(c->nvme_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        ctx_fatal(c, 1, "cannot create the NVMe swap file %s: %s (set SRT_NVME_DIR)", c->nvme_path, strerror(errno));
    unlink(c->nvme_path);
    int64_t size = (c->cls->nvme_bytes + CU_NVME_ALIGN - 1) / CU_NVME_ALIGN * CU_NVME_ALIGN;
    if (ftruncate(fd, size) != 0)
        ctx_fatal(c, 1, "cannot size the NVMe swap file %s to %lld bytes: %s", c->nvme_path, (long long)size,
                  strerror(errno));
    st->nvme_fd = fd;
    CU_CHECK(c, cudaHostAlloc((void **)&st->bounce, CU_NVME_BOUNCE, cudaHostAllocPortable),
             "cudaHostAlloc (the NVMe bounce buffer)");
}

/* Closes the swap file and frees the bounce buffer. */
void cu_io_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
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

/* Reads or writes all len bytes at off of the swap file from/into buf. */
static void cu_rw_all(srt_ctx *c, bool write, uint8_t *buf, int64_t len, int64_t off)
{
    cu_state *st = cu_st(c);
    int64_t done = 0;
    while (done < len) {
        ssize_t r = write ? pwrite(st->nvme_fd, buf + done, (size_t)(len - done), off + done)
                          : pread(st->nvme_fd, buf + done, (size_t)(len - done), off + done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) ctx_fatal(c, 1, "nvme_%s of %lld bytes at %lld: %s", write ? "write" : "read", (long long)len,
                             (long long)off, strerror(errno));
        if (r == 0) {   /* past the end of what was written: zeros */
            memset(buf + done, 0, (size_t)(len - done));
            break;
        }
        done += r;
    }
}

/* Moves bytes [offset, offset + n) of the file to or from t, through the
 * bounce buffer in aligned pieces. */
static void cu_nvme(srt_ctx *c, srt_stream s, srt_t t, int64_t offset, bool write)
{
    cu_state *st = cu_st(c);
    if (st->nvme_fd < 0) ctx_die(c, "nvme_%s: the program plans no NVMe bytes", write ? "write" : "read");
    CU_CHECK(c, cudaStreamSynchronize(cu_stream(c, s)), write ? "nvme_write: sync" : "nvme_read: sync");
    int64_t bytes = t.n * cu_dsize(t.dt), done = 0;
    uint8_t *mem = t.p;
    while (done < bytes) {
        int64_t off = offset + done;
        int64_t a0 = off / CU_NVME_ALIGN * CU_NVME_ALIGN, head = off - a0;
        int64_t len = bytes - done;
        if (head + len > CU_NVME_BOUNCE) len = CU_NVME_BOUNCE - head;
        int64_t a1 = (off + len + CU_NVME_ALIGN - 1) / CU_NVME_ALIGN * CU_NVME_ALIGN;
        if (write) {
            if (head || (off + len) % CU_NVME_ALIGN) cu_rw_all(c, false, st->bounce, a1 - a0, a0);
            CU_CHECK(c, cudaMemcpy(st->bounce + head, mem + done, (size_t)len, cudaMemcpyDefault), "nvme_write: stage");
            cu_rw_all(c, true, st->bounce, a1 - a0, a0);
        } else {
            cu_rw_all(c, false, st->bounce, a1 - a0, a0);
            CU_CHECK(c, cudaMemcpy(mem + done, st->bounce + head, (size_t)len, cudaMemcpyDefault), "nvme_read: unstage");
        }
        done += len;
    }
}

void cu_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset)
{
    cu_nvme(c, s, dst, offset, false);
}

void cu_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset)
{
    cu_nvme(c, s, src, offset, true);
}
