/* io.c — host copies and the rank's NVMe swap file on the CPU backend.
 *
 * srt_copy is memmove (both arenas are host memory).  The swap file, its
 * O_DIRECT + io_uring path and its fallbacks are runtime/core/nvme.c's,
 * shared with the CUDA backend; here every view is host memory, so the
 * transfers reach it directly (no stage function).
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

/* srt_copy: memmove. */
void cpu_copy(srt_ctx *c, srt_stream s, srt_t dst, srt_t src)
{
    if (dst.p != src.p) memmove(dst.p, src.p, (size_t)(dst.n * ops_dtype_size(dst.dt)));
}

/* Opens the swap file when the plan uses NVMe (runtime/core/nvme.c), with
 * bounce slots for the O_DIRECT path. */
void cpu_io_init(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    nvme_open(c, &st->nvme);
    if (st->nvme.fd >= 0 && st->nvme.direct)
        st->nvme.bounce = ctx_alloc(c, (int64_t)st->nvme.qd * st->nvme.slot, "the NVMe bounce buffer");
}

/* Closes the swap file and the ring. */
void cpu_io_fini(srt_ctx *c)
{
    cpu_state *st = cpu_st(c);
    nvme_close(c, &st->nvme);
    free(st->nvme.bounce);
    st->nvme.bounce = NULL;
}

/* srt_nvme_read: host memory, reached directly. */
void cpu_nvme_read(srt_ctx *c, srt_stream s, srt_t dst, int64_t offset)
{
    nvme_transfer(c, &cpu_st(c)->nvme, false, dst.p, dst.n * ops_dtype_size(dst.dt), offset, NULL, NULL);
}

/* srt_nvme_write. */
void cpu_nvme_write(srt_ctx *c, srt_stream s, srt_t src, int64_t offset)
{
    nvme_transfer(c, &cpu_st(c)->nvme, true, src.p, src.n * ops_dtype_size(src.dt), offset, NULL, NULL);
}
