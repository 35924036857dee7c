/* nvme.h — the rank's NVMe swap file, shared by the CPU and CUDA backends.
 *
 * The file is opened with O_DIRECT (the page cache would double the host
 * memory the offload plan counted, and hide the drive's real speed) and
 * driven through io_uring with the program's aio_queue_depth requests of
 * aio_block_size bytes in flight (NVME_QD and NVME_SLOT when it gives 0).
 * O_DIRECT wants offsets, lengths and buffers aligned to the block size, and
 * arena views are not, so transfers go through page-aligned bounce slots
 * (one per request, allocated by the backend: plain on the CPU, pinned on the
 * GPU): reads take the covering aligned blocks, writes read back the partial
 * blocks at either end first.  A file system that refuses O_DIRECT (tmpfs
 * before Linux 6.6) gets plain pread/pwrite through the page cache, and a
 * kernel without io_uring pread/pwrite on the O_DIRECT file, each after a
 * one-time warning.  SRT_NVME_DIRECT=0 and SRT_NVME_URING=0 choose those
 * paths on purpose.  The folder: the option, $SRT_NVME_DIR, the spec's offload
 * path, $TMPDIR, /tmp; the file is unlinked as soon as it is open, so no run,
 * however it ends, leaves a swap file behind.  The bytes the steps move and
 * the time spent are counted (srt_main's own transfers — initial states,
 * checkpoints — set c->nvme_untimed and are not); SRT_NVME_STATS=1 prints
 * them per rank at the end (the NVMe bench reads them).
 */
#ifndef SHARDRT_NVME_H
#define SHARDRT_NVME_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "shardrt.h"

enum {
    NVME_QD = 8,                /* requests in flight when the program gives 0   */
    NVME_SLOT = 1 << 20,        /* bytes per request when the program gives 0    */
    NVME_QD_MAX = 1024,         /* the most requests in flight the runtime accepts */
    NVME_ALIGN = 4096,          /* O_DIRECT alignment of offsets, sizes, buffers */
};

typedef struct nvme_file {
    int fd;                     /* -1: the plan gives this rank no NVMe bytes    */
    bool direct;                /* opened with O_DIRECT                          */
    bool uring;                 /* io_uring works here                           */
    struct io_uring ring;
    int qd;                     /* requests in flight (offload.aio.queue_depth)  */
    int64_t slot;               /* bytes per request (offload.aio.block_size)    */
    uint8_t *bounce;            /* qd x slot, page-aligned: the backend's        */
    int64_t rd_bytes, wr_bytes; /* moved by the steps so far, and the time spent */
    double rd_us, wr_us;
} nvme_file;

/* Copies len bytes between a bounce slot and the view's memory (a backend's
 * way to reach device memory); NULL: memcpy. */
typedef void (*nvme_stage_fn)(srt_ctx *c, void *ud, void *dst, const void *src, int64_t len);

/* Opens (creates, sizes, unlinks) the swap file and its ring when the plan
 * gives this rank NVMe bytes (else f->fd = -1).  The caller then sets
 * f->bounce to f->qd * f->slot page-aligned bytes. */
void nvme_open(srt_ctx *c, nvme_file *f);
/* Prints the statistics (SRT_NVME_STATS=1), closes the ring and the file; the
 * caller frees the bounce slots. */
void nvme_close(srt_ctx *c, nvme_file *f);
/* Moves bytes [off, off + bytes) of the file to (write) or from mem, counted
 * unless c->nvme_untimed.  stage/ud: how mem is reached (NULL: host memory).
 * On the page-cache path, memory a stage reaches goes through the bounce
 * slots, host memory directly. */
void nvme_transfer(srt_ctx *c, nvme_file *f, bool write, uint8_t *mem, int64_t bytes, int64_t off,
                   nvme_stage_fn stage, void *ud);

#endif
