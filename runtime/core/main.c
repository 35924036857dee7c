/* main.c — srt_main, the trainer: the command line, MPI, the context (one
 * device and one host arena allocation), the weights (initialised from the
 * counter-based RNG or read from a checkpoint, each rank its own pieces),
 * the data, and the loop: step, loss, log, evaluation, checkpoint, sample.
 *
 * Who holds what.  The class's flat parameter space is cut into segments
 * (srt_class.segs); with ZeRO >= 1 dp rank d owns [offset + d·shard, + shard)
 * of each, at shard_offset in its shard space; with ZeRO 0 every dp rank
 * owns all of it.  The owned pieces (one tensor's part of one owned range)
 * are what a rank initialises into its shard-space buffers (params.shard,
 * optimizer.master, the moments) and what it checkpoints; whole copies
 * (params for ZeRO 0-2, params.persistent for ZeRO 3) are filled from the
 * same values.  Values come from the tensor's srt_param (RNG keyed by seed,
 * name and element, ones or zeros), from a checkpoint's slices, or from
 * Hugging Face weights (--init, hf.c: the slices read out of the mapped
 * files), so all three are layout-independent.
 *
 * Errors before the loop (data, checkpoint) are agreed on with one
 * all-reduce so that every rank prints its own message and exits 1 without
 * an abort; an error inside a step ends every rank through ctx_fatal
 * (MPI_Abort).
 */
#include "internal.h"

#include <mpi.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "cli.h"
#include "data.h"
#include "hf.h"
#include "lrsched.h"
#include "metrics.h"
#include "rng.h"
#include "tok.h"
#include "watchdog.h"

/* One tensor's part of a flat range this rank holds: tensor elements
 * [e0, e1) (row-major in its tp shard) at flat index f and shard index j. */
typedef struct loop_piece { int t; int64_t e0, e1, f, j; } loop_piece;

/* The run's state that srt_main's helpers share. */
typedef struct loop_run {
    const srt_program *p;
    srt_ctx *c;
    cli_opts o;
    uint64_t seed;
    int64_t params, pshard, persist, master, mom1, mom2;   /* device offsets, -1: none */
    loop_piece *own;            /* the owned pieces                                  */
    int nown;
    ckpt_piece *save;           /* the checkpoint's pieces (host arena pointers; the
                                   device's and NVMe's are staged at each checkpoint) */
    int nsave;
    int64_t *save_dev;          /* per checkpoint piece: its device arena offset, or -1 */
    ckpt_tensor_desc *desc;     /* the model's tensors, for the identity check      */
    int ndesc;                  /* every stage's (the tied copy twice: one name)     */
    /* offload: the host optimizer owns shard space [sdev, sdev + shost), its fp32
     * states in the host arena (hmaster, hmom1, hmom2: host offsets) or in the
     * NVMe file (nvme: file offset of nstates arrays of shost, [master][m][v]);
     * params.shard is in space pshard_space (0 device, 1 host, 2 NVMe) */
    int64_t sdev, shost, hmaster, hmom1, hmom2, nvme;
    int nstates, pshard_space;
    int64_t *save_nvme;         /* per checkpoint piece: its NVMe file offset, or -1 */
    int lock_fd;                /* rank 0: the --ckpt-dir's lock (ckpt_lock), or -1  */
} loop_run;

/* The offset of the class's buffer called name in space sp, or -1. */
static int64_t loop_buffer_in(const srt_class *k, const char *name, int sp)
{
    for (int i = 0; i < k->nbuffers; i++)
        if (k->buffers[i].space == sp && strcmp(k->buffers[i].name, name) == 0) return k->buffers[i].offset;
    return -1;
}

/* The device offset of the class's buffer called name, or -1. */
static int64_t loop_buffer(const srt_class *k, const char *name)
{
    return loop_buffer_in(k, name, 0);
}

/* Offload: where the host optimizer's share of the shard space starts (the
 * whole space without offload): its fp32 gradients, grads.fp32, say how much. */
static int64_t loop_sdev(const srt_ctx *c)
{
    const srt_class *k = c->cls;
    int64_t S = c->prog->zero >= 1 ? k->shard_numel : k->flat_numel;
    for (int i = 0; i < k->nbuffers; i++)
        if (k->buffers[i].space == 1 && strcmp(k->buffers[i].name, "grads.fp32") == 0) return S - k->buffers[i].bytes / 4;
    return S;
}

/* The elements of parameter t's tp shard. */
static int64_t loop_numel(const srt_param *t)
{
    return t->shard_rows * (t->shard_cols ? t->shard_cols : 1);
}

/* One rectangle of the logical tensor that a tp shard holds: the shard's
 * elements [s0, s0 + its area) are the rectangle's, row by row. */
typedef struct loop_part { int64_t r0, r1, c0, c1, s0; } loop_part;

/* The rectangles of the logical tensor that this tp rank's shard of t covers,
 * in shard order; returns how many.  One, but three for SRT_SPLIT_QKV: the
 * rank's share of the q rows, of the k rows and of the v rows (its heads),
 * so every element keeps its logical index (initialiser, checkpoints). */
static int loop_parts(const srt_ctx *c, const srt_param *t, loop_part out[3])
{
    int64_t w = t->cols ? t->shard_cols : 1;
    if (t->split != SRT_SPLIT_QKV) {
        /* SRT_SPLIT_KV: the rank's kv head's rows, the same on its SRT_TP_KV replicas */
        int64_t part = t->split == SRT_SPLIT_KV ? c->tp_idx / c->gsize[SRT_TP_KV] : c->tp_idx;
        int64_t r0 = t->split == SRT_SPLIT_ROWS || t->split == SRT_SPLIT_KV ? part * t->shard_rows : 0;
        int64_t c0 = t->split == SRT_SPLIT_COLS ? c->tp_idx * t->shard_cols : 0;
        out[0] = (loop_part){r0, r0 + t->shard_rows, c0, c0 + w, 0};
        return 1;
    }
    const srt_program *p = c->prog;
    int64_t q = p->hidden, kv = p->kv_heads * (p->hidden / p->heads), tp = p->tp;
    int64_t base[3] = {0, q, q + kv}, n[3] = {q / tp, kv / tp, kv / tp}, s0 = 0;
    if (q + 2 * kv != t->rows || (q / tp + 2 * (kv / tp)) != t->shard_rows)
        ctx_fatal(c, 3, "%s: its q, k, v split does not match the model's shape (a shardc bug)", t->name);
    int np = 0;
    for (int i = 0; i < 3; i++) {
        int64_t r0 = base[i] + c->tp_idx * n[i];
        if (np > 0 && out[np - 1].r1 == r0) out[np - 1].r1 += n[i];    /* adjacent (tp 1): one rectangle */
        else out[np++] = (loop_part){r0, r0 + n[i], 0, w, s0};
        s0 += n[i] * w;
    }
    return np;
}

/* Collects the owned pieces (see the top of the file); counts them when out is NULL. */
static int loop_owned(const srt_ctx *c, loop_piece *out)
{
    const srt_class *k = c->cls;
    int64_t d = c->prog->zero >= 1 ? c->dp_idx : 0, sdev = loop_sdev(c);
    int n = 0;
    for (int s = 0; s < k->nsegs; s++) {
        const srt_segment *sg = &k->segs[s];
        int64_t a = sg->offset + d * sg->shard, b = a + sg->shard;
        for (int i = sg->first; i < sg->first + sg->n; i++) {
            const srt_param *t = &k->params[i];
            int64_t f0 = a > t->flat ? a : t->flat, f1 = b < t->flat + loop_numel(t) ? b : t->flat + loop_numel(t);
            if (f0 >= f1) continue;
            int64_t j0 = sg->shard_offset + (f0 - a), cut = sdev - j0;
            if (cut > 0 && cut < f1 - f0) {     /* offload: the device's part, then the host's */
                if (out) out[n] = (loop_piece){i, f0 - t->flat, f0 + cut - t->flat, f0, j0};
                n++;
                f0 += cut, j0 += cut;
            }
            if (out) out[n] = (loop_piece){i, f0 - t->flat, f1 - t->flat, f0, j0};
            n++;
        }
    }
    return n;
}

/* Writes n floats as dtype dt at dst. */
static void loop_store(srt_ctx *c, void *dst, const float *v, int64_t n, srt_dtype dt)
{
    if (dt == SRT_F32) {
        memcpy(dst, v, sizeof(float) * (size_t)n);
    } else if (dt == SRT_BF16) {
        uint16_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = ckpt_bf16_from_f32(v[i]);
    } else if (dt == SRT_F16) {
        uint16_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = ckpt_f16_from_f32(v[i]);
    } else {
        ctx_fatal(c, 1, "this trainer's working precision is not supported by srt_main (fp32, bf16, fp16 are)");
    }
}

enum { LOOP_CHUNK = 8192 };

/* Where the starting state comes from: a checkpoint (every state), Hugging
 * Face weights (the parameters; fresh moments), else the initialisation. */
typedef struct loop_src { ckpt_reader *ck; hf_reader *hf; } loop_src;

/* Elements [e0, e1) of parameter t's shard, as fp32, from state `kind` of
 * the source (see loop_src). */
static bool loop_values(loop_run *R, const loop_src *src, const char *kind, int ti, int64_t e0, int64_t e1,
                        float *out, char *err, size_t errlen)
{
    const srt_param *t = &R->c->cls->params[ti];
    loop_part parts[3];
    int np = loop_parts(R->c, t, parts);
    /* each rectangle's share of [e0, e1), at its elements' logical indices */
    for (int i = 0; i < np; i++) {
        const loop_part *q = &parts[i];
        int64_t r0 = q->r0, r1 = q->r1, c0 = q->c0, c1 = q->c1, w = c1 - c0;
        int64_t a = e0 > q->s0 ? e0 : q->s0, b = e1 < q->s0 + (r1 - r0) * w ? e1 : q->s0 + (r1 - r0) * w;
        if (a >= b) continue;
        float *o = out + (a - e0);
        int64_t f0 = a - q->s0, f1 = b - q->s0;
        if (src->ck) {
            if (ckpt_read(src->ck, kind, t->name, r0, r1, c0, c1, f0, f1, o, err, errlen) != CKPT_OK) return false;
        } else if (src->hf && strcmp(kind, CKPT_PARAM) == 0) {
            if (hf_read(src->hf, t->name, r0, r1, c0, c1, f0, f1, o, err, errlen) != 0) return false;
        } else if (strcmp(kind, CKPT_PARAM) != 0 || (!t->init_one && !(t->init_std > 0))) {
            memset(o, 0, sizeof(float) * (size_t)(f1 - f0));
        } else if (t->init_std > 0) {
            rng_normal_fill_piece(o, R->seed, t->name, t->rows, t->cols, r0, r1, c0, c1, f0, f1, 0.0f, t->init_std);
        } else {
            for (int64_t e = f0; e < f1; e++) o[e - f0] = r0 + e / w < t->rows ? 1.0f : 0.0f;
        }
    }
    return true;
}

/* Fills n elements at dst (dtype dt) with elements [e0, e0 + n) of tensor ti, in chunks. */
static bool loop_fill(loop_run *R, const loop_src *r, const char *kind, int ti, int64_t e0, int64_t n, void *dst,
                      srt_dtype dt, char *err, size_t errlen)
{
    static float tmp[LOOP_CHUNK];
    int64_t sz = ops_dtype_size(dt);
    for (int64_t i = 0; i < n; i += LOOP_CHUNK) {
        int64_t m = n - i < LOOP_CHUNK ? n - i : LOOP_CHUNK;
        if (!loop_values(R, r, kind, ti, e0 + i, e0 + i + m, tmp, err, errlen)) return false;
        loop_store(R->c, (uint8_t *)dst + i * sz, tmp, m, dt);
    }
    return true;
}

/* loop_fill into the device arena at byte offset off: chunks converted in
 * the bounce buffer, each written with ctx_dev_write (the host never
 * addresses the device arena: on the CUDA backend it is device memory). */
static bool loop_fill_dev(loop_run *R, const loop_src *r, const char *kind, int ti, int64_t e0, int64_t n, int64_t off,
                          srt_dtype dt, char *err, size_t errlen)
{
    srt_ctx *c = R->c;
    int64_t sz = ops_dtype_size(dt), chunk = CTX_BOUNCE / sz;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t m = n - i < chunk ? n - i : chunk;
        if (!loop_fill(R, r, kind, ti, e0 + i, m, c->bounce, dt, err, errlen)) return false;
        ctx_dev_write(c, off + i * sz, c->bounce, m * sz);
    }
    return true;
}

/* Where state st of piece pc lives (0: its fp32 value — the master weights,
 * else the fp32 working copy; 1, 2: the moments): sets *space (0 device, 1
 * host, 2 NVMe) and returns the byte offset there, or -1 when there is none. */
static int64_t loop_state_at(const loop_run *R, const loop_piece *pc, int st, int *space)
{
    if (pc->j >= R->sdev) {     /* the host optimizer's (offload) */
        int64_t h = pc->j - R->sdev;
        if (R->nvme >= 0) {
            *space = 2;
            return st < R->nstates ? R->nvme + ((int64_t)st * R->shost + h) * 4 : -1;
        }
        int64_t b = st == 0 ? R->hmaster : st == 1 ? R->hmom1 : R->hmom2;
        *space = 1;
        return b >= 0 ? b + h * 4 : -1;
    }
    *space = 0;
    if (st == 1) return R->mom1 >= 0 ? R->mom1 + pc->j * 4 : -1;
    if (st == 2) return R->mom2 >= 0 ? R->mom2 + pc->j * 4 : -1;
    if (R->master >= 0) return R->master + pc->j * 4;
    if (R->pshard >= 0) {
        *space = R->pshard_space;
        return R->pshard + pc->j * 4;
    }
    return R->params + pc->f * 4;
}

/* loop_fill into space sp at offset off; NVMe through a host buffer and the
 * backend's write (start-up: no step is running, nothing to order). */
static bool loop_fill_at(loop_run *R, const loop_src *r, const char *kind, int ti, int64_t e0, int64_t n, int sp,
                         int64_t off, srt_dtype dt, char *err, size_t errlen)
{
    srt_ctx *c = R->c;
    if (sp == 0) return loop_fill_dev(R, r, kind, ti, e0, n, off, dt, err, errlen);
    if (sp == 1) return loop_fill(R, r, kind, ti, e0, n, srt_host(c, off), dt, err, errlen);
    int64_t bytes = n * ops_dtype_size(dt);
    void *tmp = malloc((size_t)bytes + 1);
    if (!tmp) ctx_fatal(c, 1, "out of host memory");
    bool ok = loop_fill(R, r, kind, ti, e0, n, tmp, dt, err, errlen);
    c->nvme_untimed = true;     /* not a step's I/O */
    if (ok) c->be->nvme_write(c, SRT_COPY, (srt_t){tmp, bytes, SRT_U8}, off);
    c->nvme_untimed = false;
    free(tmp);
    return ok;
}

/* Sets every persistent buffer from the source r (see loop_src): the whole
 * copies, the owned shards, the moments (zero unless from a checkpoint). */
static bool loop_load_state(loop_run *R, const loop_src *r, char *err, size_t errlen)
{
    srt_ctx *c = R->c;
    const srt_class *k = c->cls;
    srt_dtype w = R->p->dtype;
    int64_t wb = ops_dtype_size(w);
    if (R->params >= 0)
        for (int i = 0; i < k->nparams; i++)
            if (!loop_fill_dev(R, r, CKPT_PARAM, i, 0, loop_numel(&k->params[i]),
                               R->params + k->params[i].flat * wb, w, err, errlen))
                return false;
    if (R->persist >= 0) {
        int64_t q = 0;
        for (int s = 0; s < k->nsegs; s++) {
            const srt_segment *sg = &k->segs[s];
            if (!sg->persistent) continue;
            for (int i = sg->first; i < sg->first + sg->n; i++)
                if (!loop_fill_dev(R, r, CKPT_PARAM, i, 0, loop_numel(&k->params[i]),
                                   R->persist + (q + k->params[i].flat - sg->offset) * wb, w, err, errlen))
                    return false;
            q += sg->padded;
        }
    }
    for (int i = 0; i < R->nown; i++) {
        const loop_piece *pc = &R->own[i];
        int64_t n = pc->e1 - pc->e0;
        if (R->pshard >= 0 && !loop_fill_at(R, r, CKPT_PARAM, pc->t, pc->e0, n, R->pshard_space,
                                            R->pshard + pc->j * wb, w, err, errlen))
            return false;
        int sp;
        int64_t at = loop_state_at(R, pc, 0, &sp);
        bool master = pc->j >= R->sdev || R->master >= 0;   /* else state 0 is the working copy, filled */
        if (master && !loop_fill_at(R, r, CKPT_PARAM, pc->t, pc->e0, n, sp, at, SRT_F32, err, errlen)) return false;
        if (!r->ck) continue;   /* fresh moments: the arena (and the NVMe file) starts zeroed */
        for (int st = 1; st <= 2; st++) {
            at = loop_state_at(R, pc, st, &sp);
            if (at >= 0 && !loop_fill_at(R, r, st == 1 ? CKPT_ADAM_M : CKPT_ADAM_V, pc->t, pc->e0, n, sp, at, SRT_F32,
                                         err, errlen))
                return false;
        }
    }
    return true;
}

/* Whether parameter i of this rank's class is the last pipeline stage's copy
 * of the tied embedding (a tensor of the first stage's embeddings held again
 * by the head): its values equal the original's, which the first stage saves. */
static bool loop_is_copy(const srt_ctx *c, int i)
{
    const srt_param *t = &c->cls->params[i];
    if (c->prog->pp < 2 || c->pp_idx == 0 || t->layer != c->prog->layers) return false;
    const srt_class *first = &c->prog->classes[0];
    for (int j = 0; j < first->nparams; j++)
        if (first->params[j].layer < 0 && strcmp(first->params[j].name, t->name) == 0) return true;
    return false;
}

/* The checkpoint pieces of this rank (fp32: the master weights, else the
 * fp32 working copy; the moments): pointers into the host arena, offsets
 * into the device arena and the NVMe file, staged by loop_stage.  ZeRO 0:
 * dp rank 0 saves for every replica. */
static void loop_save_pieces(loop_run *R)
{
    srt_ctx *c = R->c;
    const srt_class *k = c->cls;
    R->save = calloc((size_t)R->nown * 9 + 1, sizeof *R->save);   /* 3 states × up to 3 rectangles */
    R->save_nvme = calloc((size_t)R->nown * 9 + 1, sizeof *R->save_nvme);
    R->save_dev = calloc((size_t)R->nown * 9 + 1, sizeof *R->save_dev);
    if (!R->save || !R->save_nvme || !R->save_dev) ctx_fatal(c, 1, "out of host memory");
    R->nsave = 0;
    if (R->p->zero == 0 && c->dp_idx != 0) return;
    for (int i = 0; i < R->nown; i++) {
        const loop_piece *pc = &R->own[i];
        const srt_param *t = &k->params[pc->t];
        if (loop_is_copy(c, pc->t)) continue;   /* saved once, by the first stage */
        /* the states where they live; device and NVMe ones are staged at each checkpoint */
        const uint8_t *st[3];
        int64_t nv[3], dv[3];
        for (int s = 0; s < 3; s++) {
            int sp;
            int64_t at = loop_state_at(R, pc, s, &sp);
            nv[s] = at >= 0 && sp == 2 ? at : -1;
            dv[s] = at >= 0 && sp == 0 ? at : -1;
            st[s] = at < 0 ? NULL : sp == 1 ? srt_host(c, at) : (const uint8_t *)R;
        }
        const char *kinds[3] = {CKPT_PARAM, CKPT_ADAM_M, CKPT_ADAM_V};
        loop_part parts[3];
        int np = loop_parts(c, t, parts);
        for (int r = 0; r < np; r++) {
            const loop_part *q = &parts[r];
            int64_t area = (q->r1 - q->r0) * (q->c1 - q->c0);
            int64_t a = pc->e0 > q->s0 ? pc->e0 : q->s0, b = pc->e1 < q->s0 + area ? pc->e1 : q->s0 + area;
            if (a >= b) continue;
            ckpt_piece base = {.tensor = t->name, .rows = t->rows, .cols = t->cols, .r0 = q->r0, .r1 = q->r1,
                               .c0 = q->c0, .c1 = q->c1, .f0 = a - q->s0, .f1 = b - q->s0, .dtype = CKPT_F32};
            for (int s = 0; s < 3; s++) {
                if (!st[s]) continue;
                ckpt_piece pc2 = base;
                pc2.kind = kinds[s];
                pc2.data = nv[s] >= 0 || dv[s] >= 0 ? NULL : st[s] + (a - pc->e0) * 4;
                R->save_nvme[R->nsave] = nv[s] >= 0 ? nv[s] + (a - pc->e0) * 4 : -1;
                R->save_dev[R->nsave] = dv[s] >= 0 ? dv[s] + (a - pc->e0) * 4 : -1;
                R->save[R->nsave++] = pc2;
            }
        }
    }
}

/* Whether every rank is fine: ok is this rank's verdict; a failing rank
 * has printed its message, the others say which rank failed. */
static bool loop_agree(srt_ctx *c, bool ok)
{
    int any = ok ? 0 : 1;
    if (c) wd_allreduce(c, &any, 1, MPI_INT, MPI_MAX, "the ranks' agreement (an all-reduce)");
    else MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);   /* start-up: no context yet */
    return any == 0;
}

/* What every rank allocated, gathered into the log's last record (rank 0):
 * its stage, its device and host arenas, and all the runtime's allocations
 * (the arenas, the backend's scratch, the bounce buffer). */
static void loop_log_allocated(srt_ctx *c, metrics *m, int64_t step)
{
    int64_t w = c->world, *v = calloc((size_t)(4 * w), sizeof *v);
    if (!v) ctx_fatal(c, 1, "out of host memory");
    int64_t *me = v + 4 * c->rank;
    me[0] = c->pp_idx, me[1] = c->dev_bytes, me[2] = c->host_bytes, me[3] = c->alloc_bytes;
    wd_allreduce(c, v, (int)(4 * w), MPI_LONG_LONG, MPI_SUM, "the ranks' allocations (an all-reduce)");
    if (m) metrics_allocated(m, step, v, w);
    free(v);
}

/* Prints a rank's error (every rank prints its own). */
static void loop_error(const srt_ctx *c, int64_t rank, const char *msg)
{
    fprintf(stderr, "shardrt: rank %lld: error: %s\n", (long long)(c ? c->rank : rank), msg);
    fflush(stderr);
}

/* Offload to NVMe: the swap file read into host memory for a checkpoint,
 * the NVMe pieces pointed into it (NULL, nothing to do, without NVMe state). */
static uint8_t *loop_nvme_mirror(loop_run *R)
{
    srt_ctx *c = R->c;
    bool any = false;
    for (int i = 0; i < R->nsave; i++) any |= R->save_nvme[i] >= 0;
    if (!any) return NULL;
    uint8_t *m = malloc((size_t)c->cls->nvme_bytes);
    if (!m) ctx_fatal(c, 1, "out of host memory for the checkpoint of the NVMe state (%lld bytes)",
                      (long long)c->cls->nvme_bytes);
    c->nvme_untimed = true;     /* not a step's I/O */
    c->be->nvme_read(c, SRT_COPY, (srt_t){m, c->cls->nvme_bytes, SRT_U8}, 0);
    c->nvme_untimed = false;
    for (int i = 0; i < R->nsave; i++)
        if (R->save_nvme[i] >= 0) R->save[i].data = m + R->save_nvme[i];
    return m;
}

/* The device arena's checkpoint pieces staged into one host buffer with
 * ctx_dev_read, the pieces pointed into it; the caller frees it after the
 * save (NULL, nothing to do, when no piece is on the device).  A heap
 * buffer, as the NVMe mirror: its size is the rank's saved device state. */
static uint8_t *loop_stage(loop_run *R)
{
    srt_ctx *c = R->c;
    int64_t bytes = 0;
    for (int i = 0; i < R->nsave; i++)
        if (R->save_dev[i] >= 0) bytes += (R->save[i].f1 - R->save[i].f0) * 4;
    if (bytes == 0) return NULL;
    uint8_t *m = malloc((size_t)bytes);
    if (!m) ctx_fatal(c, 1, "out of host memory for the checkpoint's copy of the device state (%lld bytes)",
                      (long long)bytes);
    int64_t at = 0;
    for (int i = 0; i < R->nsave; i++) {
        if (R->save_dev[i] < 0) continue;
        int64_t n = (R->save[i].f1 - R->save[i].f0) * 4;
        ctx_dev_read(c, m + at, R->save_dev[i], n);
        R->save[i].data = m + at;
        at += n;
    }
    return m;
}

/* Writes checkpoint `step` into the --ckpt-dir: begin on rank 0, every rank
 * its file, commit on rank 0 (aborted everywhere if any rank failed). */
static bool loop_checkpoint(loop_run *R, int64_t step)
{
    srt_ctx *c = R->c;
    const srt_program *p = R->p;
    const char *dir = R->o.ckpt_dir;
    char err[1024] = "";
    uint64_t token = c->rank == 0 ? ckpt_token() : 0;
    wd_bcast(c, &token, 1, MPI_UINT64_T, 0, "the checkpoint's token (a broadcast)");
    bool ok = c->rank != 0 || ckpt_save_begin(dir, step, token, err, sizeof err) == CKPT_OK;
    if (!ok) loop_error(c, 0, err);
    if (!loop_agree(c, ok)) return false;
    uint8_t *mirror = loop_nvme_mirror(R), *staged = loop_stage(R);
    ok = ckpt_save_rank(dir, step, token, (int)c->rank, p->name, R->save, R->nsave, err, sizeof err) == CKPT_OK;
    free(mirror);
    free(staged);
    if (!ok) loop_error(c, 0, err);
    if (!loop_agree(c, ok)) {
        if (c->rank == 0) ckpt_save_abort(dir, step, token);
        return false;
    }
    if (c->rank == 0) {
        ckpt_kv layout[] = {{"tp", (double)p->tp}, {"pp", (double)p->pp}, {"dp", (double)p->dp},
                            {"zero", (double)p->zero}, {"world", (double)p->world}};
        /* the loss scale's state too, so that an fp16 run resumes bit for bit */
        ckpt_kv state[] = {{"step", (double)step}, {"seed", (double)R->seed},
                           {"loss_scale", c->ls.scale}, {"loss_scale_good", (double)c->ls.good},
                           {"loss_scale_hysteresis", (double)c->ls.hyst}, {"skipped_steps", (double)c->ls.skipped}};
        ckpt_meta meta = {.model = p->name, .family = p->family == 1 ? "llama" : "gpt", .spec_text = p->spec_text,
                          .layout = layout, .nlayout = 5, .state = state, .nstate = 6};
        ok = ckpt_save_commit(dir, step, token, (int)c->world, &meta, err, sizeof err) == CKPT_OK;
        if (!ok) {
            loop_error(c, 0, err);
            ckpt_save_abort(dir, step, token);
        }
    }
    return loop_agree(c, ok);
}

/* Takes the loss scale's state from a checkpoint of an fp16 run (one of an
 * fp32 or bf16 run, or an older one, leaves the spec's initial scale). */
static void loop_resume_scale(srt_ctx *c, const ckpt_reader *rd)
{
    double scale, good, hyst, skipped;
    if (c->ls.mode != SRT_LOSS_SCALE_DYNAMIC || !ckpt_state(rd, "loss_scale", &scale) ||
        !ckpt_state(rd, "loss_scale_good", &good) || !ckpt_state(rd, "loss_scale_hysteresis", &hyst) || scale <= 0)
        return;
    c->ls.scale = scale;
    c->ls.good = (int64_t)good;
    c->ls.hyst = (int64_t)hyst;
    if (ckpt_state(rd, "skipped_steps", &skipped)) c->ls.skipped = (int64_t)skipped;
}

/* Opens the checkpoint --resume names (auto: the newest in --ckpt-dir, none:
 * start afresh) and checks that it holds this model.  *r stays NULL when
 * there is nothing to resume. */
static bool loop_open_resume(loop_run *R, ckpt_reader **r, char *err, size_t errlen)
{
    *r = NULL;
    if (!R->o.given[CLI_OPT_resume]) return true;
    const char *what = R->o.resume ? R->o.resume : "auto";
    char path[4096];
    if (strcmp(what, "auto") == 0) {
        if (!R->o.ckpt_dir) {
            snprintf(err, errlen, "--resume auto needs --ckpt-dir (or name a checkpoint: --resume DIR)");
            return false;
        }
        int e = ckpt_find(R->o.ckpt_dir, path, sizeof path, NULL, 0, err, errlen);
        if (e == CKPT_E_MISSING) return true;
        if (e != CKPT_OK) return false;
        what = R->o.ckpt_dir;       /* ckpt_open finds it again and keeps what it said */
    }
    if (ckpt_open(r, what, err, errlen) != CKPT_OK) return false;
    if (R->c->rank == 0 && *ckpt_note(*r)) printf("shardrt: note: %s\n", ckpt_note(*r));
    if (ckpt_check_model(*r, R->desc, R->ndesc, err, errlen) != CKPT_OK) {
        ckpt_close(*r);
        *r = NULL;
        return false;
    }
    return true;
}

/* Opens the Hugging Face weights --init names (when nothing was resumed) and
 * binds them to the model: every stage's tensors, so that every rank reports
 * the same mismatch.  *r stays NULL without --init. */
static bool loop_open_init(loop_run *R, hf_reader **r, char *err, size_t errlen)
{
    *r = NULL;
    if (!R->o.init) return true;
    if (hf_open(r, R->o.init, err, errlen) != 0) return false;
    if (hf_bind(*r, R->p->family, R->desc, R->ndesc, err, errlen) != 0) {
        hf_close(*r);
        *r = NULL;
        return false;
    }
    return true;
}

/* The loss of the step, the mean over the global batch: the last stage's
 * sums, once per dp rank (tp ranks hold the same). */
static double loop_reduce_loss(srt_ctx *c, double local)
{
    double sum = local;
    wd_allreduce(c, &sum, 1, MPI_DOUBLE, MPI_SUM, "the step's loss (an all-reduce)");
    return sum / (double)(c->prog->dp * c->prog->tp);
}

/* This process's rank as its launcher (mpirun, mpiexec, srun) numbers it,
 * known before MPI_Init; -1 when no launcher started it. */
static long loop_launch_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return strtol(getenv(vars[i]), NULL, 10);
    return -1;
}

/* Whether a launcher started this process: its stdout is then a
 * pseudo-terminal or pipe of the launcher's, a terminal to isatty even when
 * the user redirected the launcher's output to a file, so the progress line
 * is written as plain lines. */
static bool loop_launched(void)
{
    return loop_launch_rank() >= 0;
}

/* Test seam: SRT_TEST_SIGSTOP=R:S stops rank R with SIGSTOP at the start of
 * step S, before the step's first collective, as a suspended or hung process
 * would stop (tests/e2e/train_watchdog.test.sh: the others' watchdog). */
static void loop_test_stop(const srt_ctx *c, int64_t step)
{
    const char *e = getenv("SRT_TEST_SIGSTOP");
    long long r = -1, s = -1;
    if (e && sscanf(e, "%lld:%lld", &r, &s) == 2 && r == c->rank && s == step) raise(SIGSTOP);
}

/* Syncs every stream: the end of a step (the checker forgets settled history). */
static void loop_sync(srt_ctx *c)
{
    for (int s = 0; s < SRT_NSTREAMS; s++) srt_stream_sync(c, (srt_stream)s);
}

/* The validation loss: the mean over val batches 0, 1, ... of every
 * sequence of the global batch, so that it does not depend on the layout:
 * each rank runs the eval function (microbatch 0's forward) once per
 * microbatch of its share, srt_load_batch reading microbatch k on the k-th
 * (c->data_mb); each run adds mean / microbatches.  Under pp every stage's
 * eval runs the forward through the pipeline; only the last stage adds a
 * loss, and the sum over the world makes it every rank's. */
static double loop_evaluate(loop_run *R, data_loader *val, data_loader *train, int64_t step, int batches)
{
    srt_ctx *c = R->c;
    double acc = 0;
    for (int i = 0; i < batches; i++) {
        ctx_begin_step(c, step);
        c->data = val;
        c->data_step = i;
        for (int64_t k = 0; k < R->p->microbatches; k++) {
            c->data_mb = k;
            ctx_dev_guard(c, false);
            c->cls->eval(c);
            loop_sync(c);
            ctx_dev_guard(c, true);
        }
        acc += loop_reduce_loss(c, c->loss);
    }
    c->data_mb = 0;
    c->data = train;
    return acc / batches;
}

/* The sampling temperature: below 1 sharpens the distribution (1: the model's
 * own; greedy repeats "the the" on a model this small). */
#define LOOP_TEMPERATURE 0.8

/* The token a sample starts from: the tokenizer's (its BOS), '\n' for a
 * byte-level model, else the training data's first token (llm.c's shards
 * begin each document with <|endoftext|>). */
static int32_t loop_sample_start(loop_run *R, const tok *tk)
{
    const srt_program *p = R->p;
    if (tk && tok_bos(tk) >= 0) return (int32_t)tok_bos(tk);
    if (p->data_format == DATA_FMT_TEXT) return '\n';
    int64_t n = p->micro_batch * p->seq_len;
    int32_t *rows = malloc(sizeof *rows * (size_t)(2 * n));
    int32_t first = 0;
    if (rows && data_batch(R->c->data, 0, 0, p->dp, 0, p->micro_batch, rows, rows + n) == DATA_OK) first = rows[0];
    free(rows);
    return first;
}

/* Prints token id of a sample (rank 0): decoded by the tokenizer, as a byte
 * (a byte-level model; '?' for a control character), else as its id. */
static void loop_sample_print(const srt_program *p, tok_stream *ts, int32_t id, int64_t g)
{
    if (ts->t) {
        size_t len;
        const char *b = tok_stream_next(ts, id, &len);
        fwrite(b, 1, len, stdout);
    } else if (p->data_format == DATA_FMT_TEXT && id < 256) {
        putchar(id >= 32 || id == '\n' ? id : '?');
    } else if (p->data_format == DATA_FMT_TEXT) {
        printf("<%d>", id);     /* past the bytes: a token the data never has */
    } else {
        printf(g ? " %d" : "%d", id);
    }
    fflush(stdout);
}

/* This rank's share of the distribution of the next token (the last stage's
 * tp ranks each hold their vocabulary columns; others contribute nothing):
 * q[v] = p(v)^(1/temperature) over [0, vocab), p recovered from the logits'
 * gradient dloss·(p − onehot(target)) at row pos of microbatch 0. */
static void loop_sample_share(loop_run *R, int64_t logits, int64_t pos, int32_t target, double *q)
{
    srt_ctx *c = R->c;
    const srt_program *p = R->p;
    int64_t V = p->vocab, VP = p->vocab_pad / p->tp, v0 = c->tp_idx * VP, lb = ops_dtype_size(p->dtype);
    /* the generated code's DLOSS (a float): 1 / (tokens of a microbatch · microbatches · dp), times the scale */
    double dl = (double)(float)(1.0 / ((double)p->micro_batch * (double)p->seq_len * (double)p->microbatches *
                                       (double)p->dp)) * c->loss_scale;
    memset(q, 0, sizeof *q * (size_t)V);
    if (logits < 0) return;
    for (int64_t at = 0; at < VP; at += CTX_BOUNCE / lb) {
        int64_t m = VP - at < CTX_BOUNCE / lb ? VP - at : CTX_BOUNCE / lb;
        ctx_dev_read(c, c->bounce, logits + (pos * VP + at) * lb, m * lb);
        for (int64_t i = 0; i < m && v0 + at + i < V; i++) {
            double g = p->dtype == SRT_F32 ? ((const float *)c->bounce)[i]
                       : p->dtype == SRT_F16 ? ckpt_f32_from_f16(((const uint16_t *)c->bounce)[i])
                       : ckpt_f32_from_bf16(((const uint16_t *)c->bounce)[i]);
            int64_t v = v0 + at + i;
            double pv = g / dl + (v == target ? 1.0 : 0.0);
            q[v] = pv > 0 ? pow(pv, 1.0 / LOOP_TEMPERATURE) : 0.0;
        }
    }
}

/* Sampling of n tokens: each is a forward (the eval function) over a window
 * of the last seq_len tokens, held in memory by a data loader of its own;
 * the next token is drawn at LOOP_TEMPERATURE from the softmax at the last
 * position, recovered from the cross-entropy's gradient in the logits (a
 * known target: the padding).  The ranks holding logits (the last stage; its
 * tp ranks each their vocabulary columns, dp replicas the same) give their
 * shares, a max over the world (shares are disjoint, replicas equal) makes
 * the whole distribution every rank's, and every rank draws the same token
 * with the counter-based RNG.  So any size, tp, pp and dp samples, and a
 * layout with the same arithmetic samples the same tokens.  Slow (a whole
 * forward per token) but it needs nothing beyond the eval function the
 * emitter provides.  In bf16 the padding token's own probability is known to
 * bf16's absolute precision only (p − 1 is what the gradient holds). */
static void loop_sample(loop_run *R, int64_t n, int64_t step, const tok *tk, metrics *m)
{
    srt_ctx *c = R->c;
    const srt_program *p = R->p;
    const srt_class *k = c->cls;
    int64_t T = p->seq_len, V = p->vocab;
    int64_t logits = loop_buffer(k, "LOGITS");
    int any = logits >= 0;
    wd_allreduce(c, &any, 1, MPI_INT, MPI_MAX, "the sample's all-reduce");
    if (!k->eval || !any) {
        if (c->rank == 0) printf("(--sample needs the evaluation function; skipped)\n");
        return;
    }
    int32_t *ctxt = malloc(sizeof *ctxt * (size_t)(n + 1)), *win = malloc(sizeof *win * (size_t)(T + 1));
    double *q = malloc(sizeof *q * (size_t)V);
    if (!ctxt || !win || !q) ctx_fatal(c, 1, "out of host memory for the sample");
    int32_t pad = 0;
    int64_t len = 1;
    ctxt[0] = loop_sample_start(R, tk);
    for (int64_t i = 0; i <= T; i++) win[i] = pad;
    data_opts o = {.format = DATA_FMT_LLMC, .seq_len = T, .vocab = V, .global_batch = p->global_batch,
                   .part = DATA_PART_ALL, .check = DATA_CHECK_STEP};
    data_loader *d = NULL;
    char err[512];
    if (data_open_tokens(&d, win, T + 1, "the sample's window", &o, err, sizeof err) != DATA_OK)
        ctx_fatal(c, 3, "%s", err);
    tok_stream ts = {0};
    if (tk) tok_stream_begin(&ts, tk);
    if (c->rank == 0)
        printf("--- sample (%lld tokens from token %d, temperature %.1f, %s) ---\n", (long long)n, (int)ctxt[0],
               LOOP_TEMPERATURE, tk ? "decoded by --tokenizer" : p->data_format == DATA_FMT_TEXT ? "as bytes"
               : "token ids: give --tokenizer for text");
    data_loader *keep = c->data;
    for (int64_t g = 0; g < n; g++) {
        /* the window: the last T tokens, left-aligned, then the padding */
        int64_t w0 = len > T ? len - T : 0, wl = len - w0;
        memcpy(win, ctxt + w0, sizeof *win * (size_t)wl);
        for (int64_t i = wl; i <= T; i++) win[i] = pad;
        ctx_begin_step(c, step);
        c->data = d;
        c->data_step = 0;
        c->data_mb = 0;
        ctx_dev_guard(c, false);
        k->eval(c);
        loop_sync(c);
        ctx_dev_guard(c, true);
        loop_sample_share(R, logits, wl - 1, pad, q);
        wd_allreduce(c, q, (int)V, MPI_DOUBLE, MPI_MAX, "the sample's all-reduce");
        double qsum = 0;
        for (int64_t v = 0; v < V; v++) qsum += q[v];
        double u = rng_uniform_at(R->seed, rng_tensor_id("sample"), g) * qsum;
        int32_t next = -1;
        for (int64_t v = 0; v < V && (next < 0 || u >= 0); v++) {
            if (q[v] > 0) next = (int32_t)v;     /* the last possible one, should rounding leave u over */
            u -= q[v];
        }
        ctxt[len++] = next;
        if (c->rank == 0) loop_sample_print(p, &ts, next, g);
    }
    c->data = keep;
    if (c->rank == 0) printf("\n--- end of sample ---\n");
    if (m) metrics_sample(m, step, ctxt + 1, n);
    data_close(d);
    free(ctxt);
    free(win);
    free(q);
}

/* Runs the trainer (see shardrt.h). */
int srt_main(int argc, char **argv, const srt_program *prog)
{
    if (g_backend.start) g_backend.start(argv);
    loop_run R = {.p = prog};
    char err[2048] = "";
    int cr = cli_parse(argc, argv, &R.o, err, sizeof err);
    /* before MPI: every rank parses the same line; the launcher's rank 0 speaks */
    bool speak = loop_launch_rank() <= 0;
    if (cr == CLI_HELP) {
        if (speak) cli_help(stdout, argv[0]);
        return 0;
    }
    if (cr != CLI_OK) {
        /* The other ranks wait until rank 0 has spoken: mpirun ends the job at
         * the first non-zero exit, and a rank leaving at once could cut the
         * message off before rank 0 wrote it (seen on a loaded machine). */
        MPI_Init(&argc, &argv);
        if (speak) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            cli_help(stderr, argv[0]);
            fflush(stderr);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 2;
    }
    MPI_Init(&argc, &argv);
    int wr = 0, ws = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (ws != prog->world) {
        /* every rank sees the same sizes: each prints and leaves, no abort needed */
        snprintf(err, sizeof err, "%s was planned for %lld ranks (tp %lld x dp %lld x pp %lld) but runs on %d: "
                 "launch it with mpirun -np %lld", prog->name, (long long)prog->world, (long long)prog->tp,
                 (long long)prog->dp, (long long)prog->pp, ws, (long long)prog->world);
        loop_error(NULL, wr, err);
        MPI_Finalize();
        return 1;
    }
    if (R.o.given[CLI_OPT_ckpt_every] && R.o.ckpt_every > 0 && !R.o.ckpt_dir) {
        if (wr == 0) fprintf(stderr, "%s: --ckpt-every needs --ckpt-dir\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    /* one trainer per checkpoint directory: rank 0 holds DIR/.lock until it exits */
    R.lock_fd = -1;
    bool locked = !R.o.ckpt_dir || wr != 0 || ckpt_lock(R.o.ckpt_dir, &R.lock_fd, err, sizeof err) == CKPT_OK;
    if (!locked) loop_error(NULL, wr, err);
    if (!loop_agree(NULL, locked)) {
        MPI_Finalize();
        return 1;
    }
    ctx_options copt = {0};
    srt_ctx *c = ctx_create(prog, &copt);
    R.c = c;
    ctx_dev_guard(c, true);   /* SRT_DEV_GUARD: from here the host reaches the device arena only by ctx_dev_* */
    int64_t allocs0 = c->nallocs;
    const srt_class *k = c->cls;
    R.seed = (uint64_t)(R.o.given[CLI_OPT_seed] ? R.o.seed : prog->seed);
    R.params = loop_buffer(k, "params");
    R.pshard = loop_buffer(k, "params.shard");
    R.persist = loop_buffer(k, "params.persistent");
    R.master = loop_buffer(k, "optimizer.master");
    R.mom1 = loop_buffer(k, "optimizer.exp_avg");
    if (R.mom1 < 0) R.mom1 = loop_buffer(k, "optimizer.momentum");
    R.mom2 = loop_buffer(k, "optimizer.exp_avg_sq");
    /* offload: the host optimizer's states, and parameters on the host or NVMe */
    R.pshard_space = 0;
    for (int sp = 1; sp <= 2 && R.pshard < 0; sp++)
        if ((R.pshard = loop_buffer_in(k, "params.shard", sp)) >= 0) R.pshard_space = sp;
    R.sdev = loop_sdev(c);
    R.shost = (prog->zero >= 1 ? k->shard_numel : k->flat_numel) - R.sdev;
    R.hmaster = loop_buffer_in(k, "optimizer.master", 1);
    R.hmom1 = loop_buffer_in(k, "optimizer.exp_avg", 1);
    if (R.hmom1 < 0) R.hmom1 = loop_buffer_in(k, "optimizer.momentum", 1);
    R.hmom2 = loop_buffer_in(k, "optimizer.exp_avg_sq", 1);
    R.nvme = loop_buffer_in(k, "optimizer.nvme", 2);
    R.nstates = 1 + (prog->optimizer != 2 || prog->momentum > 0) + (prog->optimizer != 2);
    if (R.shost > 0 && R.nvme < 0 && R.hmaster < 0) ctx_die(c, "the host optimizer has no master weights");
    if (R.params < 0 && R.pshard < 0) ctx_die(c, "the program has neither params nor params.shard");
    R.nown = loop_owned(c, NULL);
    R.own = calloc((size_t)R.nown + 1, sizeof *R.own);
    /* the model is every pipeline stage's tensors together */
    for (int64_t st = 0; st < prog->pp; st++) R.ndesc += prog->classes[st].nparams;
    R.desc = calloc((size_t)R.ndesc + 1, sizeof *R.desc);
    if (!R.own || !R.desc) ctx_fatal(c, 1, "out of host memory");
    loop_owned(c, R.own);
    R.ndesc = 0;
    for (int64_t st = 0; st < prog->pp; st++)
        for (int i = 0; i < prog->classes[st].nparams; i++) {
            const srt_param *t = &prog->classes[st].params[i];
            R.desc[R.ndesc++] = (ckpt_tensor_desc){t->name, t->rows, t->cols};
        }
    loop_save_pieces(&R);

    /* the data */
    int64_t steps = R.o.given[CLI_OPT_steps] ? R.o.steps : prog->steps;
    int64_t eval_every = R.o.given[CLI_OPT_eval_every] ? R.o.eval_every : prog->eval_every;
    const char *train_pat = R.o.data ? R.o.data : prog->data_train;
    const char *val_pat = R.o.val ? R.o.val : prog->data_val;
    bool holdout = eval_every > 0 && !val_pat;
    data_opts dopt = {.pattern = train_pat, .format = prog->data_format, .seq_len = prog->seq_len,
                      .vocab = prog->vocab, .global_batch = prog->global_batch,
                      .part = holdout ? DATA_PART_TRAIN : DATA_PART_ALL, .holdout = DATA_DEFAULT_HOLDOUT,
                      .check = DATA_CHECK_OPEN};
    data_loader *train = NULL, *val = NULL;
    bool ok = train_pat != NULL;
    if (!ok) snprintf(err, sizeof err, "no training data: give --data or set data.train in the spec");
    else ok = data_open(&train, &dopt, err, sizeof err) == DATA_OK;
    if (ok && eval_every > 0 && k->eval) {
        data_opts vo = dopt;
        if (val_pat) vo.pattern = val_pat, vo.part = DATA_PART_ALL;
        else vo.part = DATA_PART_VAL;
        ok = data_open(&val, &vo, err, sizeof err) == DATA_OK;
    }
    if (!ok) loop_error(c, 0, err);
    if (!loop_agree(c, ok)) {
        MPI_Finalize();
        return 1;
    }
    c->data = train;

    /* the tokenizer --sample decodes with: read now, so that a bad one stops the run before it trains */
    tok *tk = NULL;
    ok = !R.o.tokenizer || tok_open(&tk, R.o.tokenizer, prog->vocab, err, sizeof err) == 0;
    if (!ok) loop_error(c, 0, err);
    if (!loop_agree(c, ok)) {
        MPI_Finalize();
        return 1;
    }

    /* the weights: a checkpoint, Hugging Face weights (--init), or the initialisation */
    loop_src src = {0};
    ok = loop_open_resume(&R, &src.ck, err, sizeof err);
    if (ok && !src.ck) ok = loop_open_init(&R, &src.hf, err, sizeof err);
    if (ok) ok = loop_load_state(&R, &src, err, sizeof err);
    if (!ok) loop_error(c, 0, err);
    if (!loop_agree(c, ok)) {
        MPI_Finalize();
        return 1;
    }
    int64_t first = 1;
    ckpt_reader *rd = src.ck;
    if (src.hf) {
        if (c->rank == 0)
            printf("initialised from %s (%d safetensors file%s, %s; fresh optimizer state)\n", hf_path(src.hf),
                   hf_nfiles(src.hf), hf_nfiles(src.hf) == 1 ? "" : "s", hf_dtypes(src.hf));
        hf_close(src.hf);
    }
    if (rd) {
        first = ckpt_step(rd) + 1;
        loop_resume_scale(c, rd);
        if (c->rank == 0) printf("resumed from %s (step %lld)\n", ckpt_path(rd), (long long)ckpt_step(rd));
        ckpt_close(rd);
    }

    /* the log */
    metrics *m = NULL;
    if (c->rank == 0) {
        metrics_cfg mc = {.out = stdout, .tty = loop_launched() ? METRICS_TTY_OFF : METRICS_TTY_AUTO,
                          .jsonl = R.o.log, .append = first > 1,
                          .steps = steps, .log_every = prog->log_every > 0 ? prog->log_every : 1,
                          .tokens_per_step = (double)prog->global_batch * (double)prog->seq_len,
                          .flops_per_step = prog->model_flops_per_step,
                          .peak_flops = prog->peak_flops * (double)prog->world};
        m = metrics_open(&mc, err, sizeof err);
        if (!m) loop_error(c, 0, err);
    }
    if (!loop_agree(c, c->rank != 0 || m)) {
        MPI_Finalize();
        return 1;
    }
    metrics_trace *tr = NULL;
    if (R.o.trace) {
        char tp[4096];
        metrics_trace_path(tp, sizeof tp, R.o.trace, (int)c->rank, (int)c->world);
        /* room for every op of every step: a generous bound from the
         * schedule's ops (each a few runtime ops); events past it are
         * counted as dropped, never allocated */
        int64_t per_step = 64 * (int64_t)(k->nops + k->nparams + 16);
        tr = metrics_trace_open(tp, (int)c->rank, per_step * (steps - first + 1) + 1024, err, sizeof err);
        if (!tr) loop_error(c, 0, err);
        for (int s = 0; tr && s < SRT_NSTREAMS; s++) metrics_trace_thread(tr, s, ops_stream_name((srt_stream)s));
        if (tr) metrics_trace_thread(tr, SRT_NSTREAMS, "trainer");
        c->trace = tr;
    }
    if (!loop_agree(c, !R.o.trace || tr)) {
        MPI_Finalize();
        return 1;
    }
    if (c->rank == 0) {
        printf("%s: %lld ranks (tp %lld, dp %lld, pp %lld, ZeRO-%d), steps %lld..%lld, device arena %lld bytes "
               "(plan %lld), host arena %lld bytes (plan %lld), arena_allocations %lld\n",
               prog->name, (long long)prog->world, (long long)prog->tp, (long long)prog->dp, (long long)prog->pp,
               prog->zero, (long long)first, (long long)steps, (long long)c->dev_bytes,
               (long long)k->device_arena, (long long)c->host_bytes, (long long)k->host_arena,
               (long long)c->nallocs);
        fflush(stdout);
    }

    /* the loop: nothing in it allocates (ctx_alloc dies once the context is sealed) */
    int64_t nval = R.o.given[CLI_OPT_eval_batches] ? R.o.eval_batches : 4;
    for (int64_t s = first; s <= steps; s++) {
        loop_test_stop(c, s);
        double t0 = metrics_now_us();
        ctx_begin_step(c, s);
        ctx_dev_guard(c, false);
        k->step(c);
        loop_sync(c);
        ctx_dev_guard(c, true);
        double loss = loop_reduce_loss(c, c->loss);
        bool skipped = c->overflow;   /* the same on every rank: the norm is the world's */
        float scale = c->loss_scale;
        lscale_update(&c->ls, prog, skipped);
        double t1 = metrics_now_us();
        if (tr) {
            metrics_trace_event(tr, "step", SRT_NSTREAMS, t0, t1);
            metrics_trace_counter(tr, "loss", t1, loss);
        }
        if (m && prog->loss_scaling != SRT_LOSS_SCALE_NONE) metrics_note_scale(m, scale, skipped);
        if (m) metrics_step(m, s, loss, c->lr, c->grad_norm, (t1 - t0) * 1e-6, c->dev_bytes + c->host_bytes);
        if (!isfinite(loss)) ctx_fatal(c, 1, "the loss of step %lld is not finite", (long long)s);
        if (val && eval_every > 0 && (s % eval_every == 0 || s == steps)) {
            double vl = loop_evaluate(&R, val, train, s, (int)nval);
            if (m) metrics_eval(m, s, vl);
            if (tr) metrics_trace_event(tr, "eval", SRT_NSTREAMS, t1, metrics_now_us());
        }
        if (R.o.ckpt_dir && ((R.o.given[CLI_OPT_ckpt_every] && R.o.ckpt_every > 0 && s % R.o.ckpt_every == 0) ||
                             s == steps)) {
            double t2 = metrics_now_us();
            if (!loop_checkpoint(&R, s)) {
                if (m) metrics_close(m);
                MPI_Finalize();
                return 1;
            }
            if (tr) metrics_trace_event(tr, "checkpoint", SRT_NSTREAMS, t2, metrics_now_us());
        }
    }
    if (c->nallocs != allocs0) ctx_die(c, "the loop allocated: %lld arena allocations, %lld at start-up",
                                       (long long)c->nallocs, (long long)allocs0);
    if (c->mpi) loop_log_allocated(c, m, steps);
    c->trace = NULL;   /* the trace covers the training, not the sampling */
    if (R.o.given[CLI_OPT_sample] && R.o.sample > 0) loop_sample(&R, R.o.sample, steps, tk, m);
    if (m) metrics_close(m);
    if (tr && metrics_trace_dropped(tr) > 0 && c->rank == 0)
        fprintf(stderr, "shardrt: the trace dropped %lld events (its buffer was full)\n",
                (long long)metrics_trace_dropped(tr));
    if (tr && !metrics_trace_close(tr, err, sizeof err)) loop_error(c, 0, err);
    if (c->rank == 0) printf("done: %lld steps, arena_allocations %lld\n", (long long)steps, (long long)c->nallocs);
    fflush(stdout);
    data_close(train);
    if (val) data_close(val);
    tok_close(tk);
    free(R.own);
    free(R.save);
    free(R.save_nvme);
    free(R.save_dev);
    free(R.desc);
    if (R.lock_fd >= 0) close(R.lock_fd);
    ctx_destroy(c);
    MPI_Finalize();
    return 0;
}
