/* ctx.c — the context: ranks and groups from the layout, the arenas (allocated
 * once, every allocation counted), the step state, the accessors of shardrt.h,
 * and the one way a rank ends the job on an error. */
#include "internal.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lrsched.h"
#include "watchdog.h"

/* The (tp, dp, pp) coordinates of world rank r: tp is always fastest; then dp
 * and pp (rank_order 0, Megatron's) or pp and dp (rank_order 1). */
void ctx_coords(const srt_program *p, int64_t r, int64_t *tp, int64_t *dp, int64_t *pp)
{
    *tp = r % p->tp;
    int64_t q = r / p->tp;
    if (p->rank_order == 1) {
        *pp = q % p->pp;
        *dp = q / p->pp;
    } else {
        *dp = q % p->dp;
        *pp = q / p->dp;
    }
}

/* The world rank at coordinates (tp, dp, pp). */
int64_t ctx_rank_of(const srt_program *p, int64_t tp, int64_t dp, int64_t pp)
{
    if (p->rank_order == 1) return tp + p->tp * (pp + p->pp * dp);
    return tp + p->tp * (dp + p->dp * pp);
}

/* Ends the job: the message on stderr, then MPI_Abort (so that no rank is
 * left waiting in a collective) or exit. */
static _Noreturn void ctx_vfatal(const srt_ctx *c, int code, const char *where, const char *fmt,
                                 va_list ap)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    long long rank = c ? (long long)c->rank : 0;
    if (!c && init && !fin) {
        int r = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        rank = r;
    }
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "shardrt: rank %lld: %s%s%s\n", rank, code == 1 ? "error: " : "internal error: ",
            where ? where : "", msg);
    fflush(stderr);
    /* a guarded device arena (SRT_DEV_GUARD) readable again: exit handlers
     * (LeakSanitizer's scan) and core dumps read it */
    if (c && c->dev_guard && c->dev)
        mprotect(c->dev, ((size_t)(c->dev_bytes > 0 ? c->dev_bytes : 1) + 4095) & ~(size_t)4095, PROT_READ | PROT_WRITE);
    int size = 1;
    if (init && !fin) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (init && !fin && size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* Prints the error and ends every rank (see internal.h). */
_Noreturn void ctx_fatal(const srt_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctx_vfatal(c, code, NULL, fmt, ap);
}

/* An internal error, naming the runtime's source line. */
_Noreturn void ctx_die_at(const srt_ctx *c, const char *file, int line, const char *fmt, ...)
{
    char where[256];
    const char *base = strrchr(file, '/');
    snprintf(where, sizeof where, "%s:%d: ", base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    ctx_vfatal(c, 3, where, fmt, ap);
}

/* Zeroed, page-aligned memory for the life of c: only while the context is
 * created.  Page alignment lets O_DIRECT transfers use any of it. */
void *ctx_alloc(srt_ctx *c, int64_t bytes, const char *what)
{
    if (c->sealed) ctx_die(c, "allocation of %s (%lld bytes) after start-up", what, (long long)bytes);
    size_t n = (size_t)(bytes > 0 ? bytes : 1);
    n = (n + 4095) & ~(size_t)4095;   /* aligned_alloc wants a multiple of the alignment */
    void *p = aligned_alloc(4096, n);
    if (!p) ctx_fatal(c, 1, "out of host memory: %s needs %lld bytes", what, (long long)bytes);
    memset(p, 0, n);   /* touches every page now, and makes every run start from the same bits */
    c->nallocs++;
    c->alloc_bytes += (int64_t)n;
    return p;
}

/* The program's own consistency, checked before anything relies on it. */
static void ctx_check_program(const srt_program *p)
{
    if (p->abi != SRT_ABI_VERSION)
        ctx_fatal(NULL, 1, "the trainer was generated for runtime ABI %d, this runtime is ABI %d: "
                  "rebuild it with this shardc", p->abi, SRT_ABI_VERSION);
    if (p->tp < 1 || p->dp < 1 || p->pp < 1 || p->tp * p->dp * p->pp != p->world)
        ctx_die(NULL, "program layout tp %lld x dp %lld x pp %lld does not make world %lld",
                (long long)p->tp, (long long)p->dp, (long long)p->pp, (long long)p->world);
    if (!p->classes) ctx_die(NULL, "program has no rank classes");
}

/* Sets this rank's index, size and colour in every group. */
static void ctx_groups(srt_ctx *c)
{
    const srt_program *p = c->prog;
    c->grank[SRT_WORLD] = c->rank, c->gsize[SRT_WORLD] = c->world, c->gcolor[SRT_WORLD] = 0;
    c->grank[SRT_TP] = c->tp_idx, c->gsize[SRT_TP] = p->tp;
    c->gcolor[SRT_TP] = c->pp_idx * p->dp + c->dp_idx;
    c->grank[SRT_DP] = c->dp_idx, c->gsize[SRT_DP] = p->dp;
    c->gcolor[SRT_DP] = c->pp_idx * p->tp + c->tp_idx;
    c->grank[SRT_PP] = c->pp_idx, c->gsize[SRT_PP] = p->pp;
    c->gcolor[SRT_PP] = c->dp_idx * p->tp + c->tp_idx;
    /* The tied embedding's group: the first and the last stage of this
     * pipeline; with one stage it is this rank alone. */
    if (p->pp == 1) {
        c->grank[SRT_EMBED] = 0, c->gsize[SRT_EMBED] = 1, c->gcolor[SRT_EMBED] = c->rank;
    } else if (c->pp_idx == 0 || c->pp_idx == p->pp - 1) {
        c->grank[SRT_EMBED] = c->pp_idx == 0 ? 0 : 1, c->gsize[SRT_EMBED] = 2;
        c->gcolor[SRT_EMBED] = c->dp_idx * p->tp + c->tp_idx;
    } else {
        c->grank[SRT_EMBED] = -1, c->gsize[SRT_EMBED] = 0, c->gcolor[SRT_EMBED] = -1;
    }
    /* Megatron's replicated kv heads (kv_heads < tp): tp rank r holds kv head
     * r / rep, rep = tp / kv_heads, so the rep consecutive tp ranks sharing a
     * head sum its gradients; with kv_heads >= tp each rank is its own group. */
    int64_t kvh = p->kv_heads > 0 ? p->kv_heads : p->heads;
    int64_t rep = kvh > 0 && kvh < p->tp && p->tp % kvh == 0 ? p->tp / kvh : 1;
    c->grank[SRT_TP_KV] = c->tp_idx % rep, c->gsize[SRT_TP_KV] = rep;
    c->gcolor[SRT_TP_KV] = c->gcolor[SRT_TP] * p->tp + c->tp_idx / rep;
}

bool ctx_check_wanted(const ctx_options *o)
{
    if (o && o->check != 0) return o->check > 0;
    const char *e = getenv("SRT_CHECK");
    return e && *e && strcmp(e, "0") != 0;
}

/* Creates this process's context for p (see internal.h). */
srt_ctx *ctx_create(const srt_program *p, const ctx_options *o)
{
    ctx_check_program(p);
    int init = 0;
    MPI_Initialized(&init);
    int64_t rank = 0, world = 1;
    if (init) {
        int r, n;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        rank = r, world = n;
    }
    if (world != p->world)
        ctx_fatal(NULL, 1, "%s was planned for %lld ranks (tp %lld x dp %lld x pp %lld) but runs "
                  "on %lld: launch it with mpirun -np %lld", p->name ? p->name : "the trainer",
                  (long long)p->world, (long long)p->tp, (long long)p->dp, (long long)p->pp,
                  (long long)world, (long long)p->world);

    srt_ctx *c = calloc(1, sizeof *c);
    if (!c) ctx_fatal(NULL, 1, "out of host memory");
    c->nallocs = 1;
    c->alloc_bytes = (int64_t)sizeof *c;
    c->prog = p;
    c->mpi = init;
    c->rank = rank, c->world = world;
    ctx_coords(p, rank, &c->tp_idx, &c->dp_idx, &c->pp_idx);
    c->cls = &p->classes[c->pp_idx];
    ctx_groups(c);
    if (o) c->opt = *o;
    c->opt.check = ctx_check_wanted(o);
    c->step = 1;
    c->lr = lrsched_lr(p, 1);
    c->clip_scale = 1.0f;
    lscale_init(&c->ls, p);
    c->loss_scale = (float)c->ls.scale;

    c->dev_bytes = c->cls->device_arena;
    c->host_bytes = c->cls->host_arena;
    c->be = &g_backend;
    if (c->be->arena_alloc) {   /* the backend's own memory (counted like ctx_alloc's) */
        c->dev = c->be->arena_alloc(c, c->dev_bytes, 0);
        c->host = c->be->arena_alloc(c, c->host_bytes, 1);
        c->nallocs += 2;
        c->alloc_bytes += c->dev_bytes + c->host_bytes;
    } else {
        c->dev = ctx_alloc(c, c->dev_bytes, "the device arena");
        c->host = ctx_alloc(c, c->host_bytes, "the host arena");
        /* only ctx_alloc's arena is page-aligned whole pages of its own */
        const char *g = getenv("SRT_DEV_GUARD");
        c->dev_guard = g && *g && strcmp(g, "0") != 0;
    }
    c->bounce = ctx_alloc(c, CTX_BOUNCE, "the bounce buffer of the device arena");
    wd_init(c);
    c->be->init(c);
    if (c->opt.check) chk_create(c);
    c->sealed = true;
    return c;
}

/* Releases everything ctx_create made (the backend first: it may still wait
 * on sends from the arenas). */
void ctx_destroy(srt_ctx *c)
{
    if (!c) return;
    ctx_dev_guard(c, false);
    c->be->fini(c);
    wd_fini(c);
    free(c->chk);
    free(c->bounce);
    if (c->be->arena_free) {
        c->be->arena_free(c, c->dev, 0);
        c->be->arena_free(c, c->host, 1);
    } else {
        free(c->dev);
        free(c->host);
    }
    free(c);
}

/* mprotect of the whole device arena (ctx_alloc's: page-aligned, whole pages). */
static void ctx_protect(srt_ctx *c, int prot)
{
    size_t n = ((size_t)(c->dev_bytes > 0 ? c->dev_bytes : 1) + 4095) & ~(size_t)4095;
    if (mprotect(c->dev, n, prot) != 0) ctx_die(c, "mprotect of the device arena failed");
}

/* Makes the device arena unreadable to the host (on) or readable (off) under SRT_DEV_GUARD. */
void ctx_dev_guard(srt_ctx *c, bool on)
{
    if (c->dev_guard) ctx_protect(c, on ? PROT_NONE : PROT_READ | PROT_WRITE);
}

/* Checks that [off, off + bytes) lies inside the device arena. */
static void ctx_dev_range(srt_ctx *c, int64_t off, int64_t bytes, const char *what)
{
    if (off < 0 || bytes < 0 || off > c->dev_bytes || bytes > c->dev_bytes - off)
        ctx_die(c, "%s: device offset %lld + %lld bytes is outside the arena of %lld bytes", what,
                (long long)off, (long long)bytes, (long long)c->dev_bytes);
}

/* Device arena bytes to host memory (see internal.h). */
void ctx_dev_read(srt_ctx *c, void *dst, int64_t off, int64_t bytes)
{
    ctx_dev_range(c, off, bytes, "ctx_dev_read");
    if (bytes == 0) return;
    if (c->be->dev_read) {
        c->be->dev_read(c, dst, off, bytes);
        return;
    }
    if (c->dev_guard) ctx_protect(c, PROT_READ);
    memcpy(dst, c->dev + off, (size_t)bytes);
    if (c->dev_guard) ctx_protect(c, PROT_NONE);
}

/* Host memory to device arena bytes (see internal.h). */
void ctx_dev_write(srt_ctx *c, int64_t off, const void *src, int64_t bytes)
{
    ctx_dev_range(c, off, bytes, "ctx_dev_write");
    if (bytes == 0) return;
    if (c->be->dev_write) {
        c->be->dev_write(c, off, src, bytes);
        return;
    }
    if (c->dev_guard) ctx_protect(c, PROT_READ | PROT_WRITE);
    memcpy(c->dev + off, src, (size_t)bytes);
    if (c->dev_guard) ctx_protect(c, PROT_NONE);
}

/* Starts a step: the learning rate comes from the program's schedule. */
void ctx_begin_step(srt_ctx *c, int64_t step)
{
    c->step = step;
    c->lr = lrsched_lr(c->prog, step);
    c->loss = 0.0;
    c->loss_scale = (float)c->ls.scale;
    c->overflow = false;
    c->data_step = step - 1;   /* the loader counts steps from 0 */
    c->data_mb = 0;
}

/* ---- the accessors of shardrt.h -------------------------------------------------- */

int64_t srt_rank(const srt_ctx *c) { return c->rank; }

/* This rank's index in group g (-1 when it is not a member). */
int64_t srt_group_rank(const srt_ctx *c, srt_group g)
{
    if ((unsigned)g >= SRT_NGROUPS) ctx_die(c, "srt_group_rank: no group %d", (int)g);
    return c->grank[g];
}

/* The size of group g as this rank sees it (0 when it is not a member). */
int64_t srt_group_size(const srt_ctx *c, srt_group g)
{
    if ((unsigned)g >= SRT_NGROUPS) ctx_die(c, "srt_group_size: no group %d", (int)g);
    return c->gsize[g];
}

/* A pointer at offset of an arena of `bytes`, checked. */
static void *ctx_at(srt_ctx *c, uint8_t *base, int64_t size, int64_t offset, int64_t bytes,
                    const char *arena)
{
    if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset)
        ctx_die(c, "%s offset %lld + %lld bytes is outside the arena of %lld bytes", arena,
                (long long)offset, (long long)bytes, (long long)size);
    return base + offset;
}

/* A pointer at offset of the device arena. */
void *srt_dev(srt_ctx *c, int64_t offset)
{
    return ctx_at(c, c->dev, c->dev_bytes, offset, 0, "device");
}

/* A pointer at offset of the host arena. */
void *srt_host(srt_ctx *c, int64_t offset)
{
    return ctx_at(c, c->host, c->host_bytes, offset, 0, "host");
}

/* A checked view into the device arena. */
srt_t srt_dview(srt_ctx *c, int64_t offset, int64_t n, srt_dtype dt)
{
    srt_t t = { ctx_at(c, c->dev, c->dev_bytes, offset, n * ops_dtype_size(dt), "device"), n, dt };
    return t;
}

/* A checked view into the host arena. */
srt_t srt_hview(srt_ctx *c, int64_t offset, int64_t n, srt_dtype dt)
{
    srt_t t = { ctx_at(c, c->host, c->host_bytes, offset, n * ops_dtype_size(dt), "host"), n, dt };
    return t;
}

/* The current step, from 1. */
int64_t srt_step(const srt_ctx *c) { return c->step; }

/* The current step's learning rate. */
double srt_lr(const srt_ctx *c) { return c->lr; }
float srt_loss_scale(const srt_ctx *c) { return c->loss_scale; }
