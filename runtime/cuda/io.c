/* io.c — copies between the arenas and the rank's NVMe swap file on the
 * CUDA backend.
 *
 * srt_copy is cudaMemcpyAsync on the op's stream (the host arena is pinned,
 * so the copy engines move it asynchronously).  NVMe transfers run on the
 * issuing thread after the op's stream has finished its earlier work (the
 * schedule puts them on the copy stream, whose later work they precede)
 * through runtime/core/nvme.c, shared with the CPU backend: O_DIRECT and
 * io_uring with the program's aio settings, its fallbacks and statistics.
 * The bounce slots are pinned (cudaHostAlloc).  Host memory (the pinned
 * arena; srt_main's own buffers) is reached directly, the device arena by a
 * stage function: cudaMemcpyAsync on the op's stream, then a sync. */
#include "cu.h"

#include <string.h>

/* Opens the swap file when the plan uses NVMe, with pinned bounce slots (also
 * used by the page-cache path for device memory). */
void cu_io_init(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    nvme_open(c, &st->nvme);
    if (st->nvme.fd < 0) return;
    CU_CHECK(c, cudaHostAlloc((void **)&st->nvme.bounce, (size_t)(st->nvme.qd * st->nvme.slot), cudaHostAllocPortable),
             "cudaHostAlloc (the NVMe bounce slots)");
}

/* Closes the ring and the swap file, frees the bounce slots. */
void cu_io_fini(srt_ctx *c)
{
    cu_state *st = cu_st(c);
    nvme_close(c, &st->nvme);
    if (st->nvme.bounce) cudaFreeHost(st->nvme.bounce);
    st->nvme.bounce = NULL;
}

/* dst = src on s (any pair of arenas). */
void cu_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    if (dst.p == src.p) return;
    CU_CHECK(c, cudaMemcpyAsync(dst.p, src.p, (size_t)(dst.n * cu_dsize(dst.dt)), cudaMemcpyDefault, cu_stream(c, s)),
             "copy");
}

/* Whether p lies in the device arena (else host memory: the pinned arena, or
 * srt_main's own buffers at start-up and for checkpoints). */
static bool cu_in_dev(const srt_ctx *c, const void *p)
{
    const uint8_t *b = p;
    return c->dev && b >= c->dev && b < c->dev + c->dev_bytes;
}

/* len bytes between a bounce slot and device memory, on the stream ud points
 * at (nvme.c's stage function). */
static void cu_stage(srt_ctx *c, void *ud, void *dst, const void *src, int64_t len)
{
    cudaStream_t s = cu_stream(c, *(const srt_stream *)ud);
    CU_CHECK(c, cudaMemcpyAsync(dst, src, (size_t)len, cudaMemcpyDefault, s), "nvme: stage");
    CU_CHECK(c, cudaStreamSynchronize(s), "nvme: stage");
}

/* A transfer of view t at offset of the swap file, after s's earlier work. */
static void cu_nvme(srt_ctx *c, srt_stream s, srt_t t, int64_t offset, bool write)
{
    CU_CHECK(c, cudaStreamSynchronize(cu_stream(c, s)), write ? "nvme_write: sync" : "nvme_read: sync");
    bool dev = cu_in_dev(c, t.p);
    nvme_transfer(c, &cu_st(c)->nvme, write, t.p, t.n * cu_dsize(t.dt), offset, dev ? cu_stage : NULL,
                  dev ? &s : NULL);
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
