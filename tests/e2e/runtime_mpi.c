/* runtime_mpi.c — the MPI side of libshardrt_cpu, run by runtime_mpi.test.sh
 * under `mpirun -np 4`.
 *
 *   runtime_mpi tpdp     tp 2 x dp 2, Megatron rank order
 *   runtime_mpi dppp     dp 2 x pp 2, rank order 0 (tp, dp, pp)
 *   runtime_mpi dppp1    dp 2 x pp 2, rank order 1 (tp, pp, dp)
 *   runtime_mpi abort    rank 2 hits a race (checking on, default handler)
 *                        while the others wait in an all-reduce: every
 *                        rank must be gone within seconds
 *   runtime_mpi world    a 4-rank program launched on another count
 *
 * In the layout modes every group of the rank (world, tp, dp, pp, embed) is
 * checked: its members (all-gather of world ranks against the rank order),
 * all-reduce SUM and MAX, all-gather, reduce-scatter (also in place) and
 * broadcast, in fp32 and bf16, against the documented fixed-order result
 * computed locally, bit for bit; a world all-reduce larger than one round of
 * the collectives' scratch; send/recv both ways at once across the pipeline
 * (both stages send before they receive: non-blocking sends); the lazy
 * completion of non-blocking sends and receives (check_p2p_lazy); the
 * vocab-parallel cross-entropy over tp against the single-process kernels;
 * the exact gradient norm over the world.  Prints "ok" per check on rank 0;
 * exits 1 on any failure.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels.h"

static int g_rank, g_fail, g_checks;

/* Records a check; every rank prints its failures. */
static void check(int ok, const char *what)
{
    g_checks++;
    if (!ok) {
        g_fail++;
        printf("rank %d: FAIL %s\n", g_rank, what);
        fflush(stdout);
    }
}

/* A deterministic float in [-1, 1) of (rank, i, salt), fp32 or bf16-exact. */
static float val(int64_t r, int64_t i, int salt, srt_dtype dt)
{
    uint64_t h = (uint64_t)r * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)salt * 0x165667B19E3779F9ull;
    h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
    float f = (float)((double)(h >> 40) / 16777216.0 * 2.0 - 1.0);
    return dt == SRT_BF16 ? kc_f32_from_bf16(kc_bf16_from_f32(f)) : f;
}

static void put(void *p, srt_dtype dt, int64_t i, float f)
{
    if (dt == SRT_F32) ((float *)p)[i] = f;
    else ((uint16_t *)p)[i] = kc_bf16_from_f32(f);
}

static float get(const void *p, srt_dtype dt, int64_t i)
{
    return dt == SRT_F32 ? ((const float *)p)[i] : kc_f32_from_bf16(((const uint16_t *)p)[i]);
}

/* What the runtime documents: a double sum in group-rank order, rounded once. */
static float round_to(double v, srt_dtype dt)
{
    float f = (float)v;
    return dt == SRT_BF16 ? kc_f32_from_bf16(kc_bf16_from_f32(f)) : f;
}

/* ---- the test program ------------------------------------------------------------- */

enum { ARENA = 64 << 20 };
static srt_class g_classes[4];
static srt_program g_prog;

static void make_program(int64_t tp, int64_t dp, int64_t pp, int order)
{
    memset(&g_prog, 0, sizeof g_prog);
    g_prog.abi = SRT_ABI_VERSION;
    g_prog.name = "runtime_mpi";
    g_prog.layers = 2, g_prog.hidden = 64, g_prog.heads = 4, g_prog.kv_heads = 4;
    g_prog.vocab = 250, g_prog.vocab_pad = 256, g_prog.seq_len = 16, g_prog.ffn = 256;
    g_prog.tp = tp, g_prog.dp = dp, g_prog.pp = pp, g_prog.world = tp * dp * pp;
    g_prog.rank_order = order;
    g_prog.dtype = SRT_F32;
    g_prog.micro_batch = 2, g_prog.microbatches = 1, g_prog.global_batch = 2 * dp;
    g_prog.steps = 1, g_prog.lr = 1e-3, g_prog.beta1 = 0.9, g_prog.beta2 = 0.95, g_prog.eps = 1e-8;
    for (int s = 0; s < pp; s++) {
        memset(&g_classes[s], 0, sizeof g_classes[s]);
        g_classes[s].stage = s;
        g_classes[s].device_arena = ARENA;
        g_classes[s].host_arena = 4096;
    }
    g_prog.classes = g_classes;
}

/* The world rank of group g's member j, for this rank. */
static int64_t member(const srt_ctx *c, srt_group g, int64_t j)
{
    const srt_program *p = c->prog;
    switch (g) {
    case SRT_WORLD: return j;
    case SRT_TP: return ctx_rank_of(p, j, c->dp_idx, c->pp_idx);
    case SRT_DP: return ctx_rank_of(p, c->tp_idx, j, c->pp_idx);
    case SRT_PP: return ctx_rank_of(p, c->tp_idx, c->dp_idx, j);
    case SRT_EMBED:
        if (p->pp == 1) return c->rank;
        return ctx_rank_of(p, c->tp_idx, c->dp_idx, j == 0 ? 0 : p->pp - 1);
    case SRT_TP_KV: {   /* the tp ranks that hold the same kv head: tp / kv consecutive ones */
        int64_t rep = p->kv_heads < p->tp ? p->tp / p->kv_heads : 1;
        return ctx_rank_of(p, c->tp_idx / rep * rep + j, c->dp_idx, c->pp_idx);
    }
    default: return -1;
    }
}

static const char *gname(srt_group g)
{
    static const char *n[] = { "world", "tp", "dp", "pp", "embed", "tp_kv" };
    _Static_assert(sizeof n / sizeof n[0] == SRT_NGROUPS, "a name for every group");
    return n[g];
}

/* Members, then every collective on group g in dtype dt. */
static void check_group(srt_ctx *c, srt_group g, srt_dtype dt)
{
    int64_t S = srt_group_size(c, g), r = srt_group_rank(c, g);
    if (S == 0) return;
    char what[128];
    const char *tn = dt == SRT_F32 ? "f32" : "bf16";
    int64_t es = dt == SRT_F32 ? 4 : 2, n = 1037;
    srt_stream st = g == SRT_TP ? SRT_TP_COMM : g == SRT_PP ? SRT_PP_COMM : SRT_DP_COMM;

    /* members: the world ranks, gathered in group-rank order */
    srt_t me = srt_dview(c, 0, 1, SRT_I32), all = srt_dview(c, 64, S, SRT_I32);
    ((int32_t *)me.p)[0] = (int32_t)c->rank;
    srt_all_gather(c, st, g, all, me);
    int ok = 1;
    for (int64_t j = 0; j < S; j++) ok &= ((int32_t *)all.p)[j] == member(c, g, j);
    snprintf(what, sizeof what, "%s members", gname(g));
    check(ok, what);

    /* all-reduce SUM and MAX */
    for (int op = 0; op < 2; op++) {
        srt_t x = srt_dview(c, 4096, n, dt);
        for (int64_t i = 0; i < n; i++) put(x.p, dt, i, val(c->rank, i, 1 + op, dt));
        srt_all_reduce(c, st, g, x, op == 0 ? SRT_SUM : SRT_MAX);
        ok = 1;
        for (int64_t i = 0; i < n; i++) {
            double acc = val(member(c, g, 0), i, 1 + op, dt);
            for (int64_t j = 1; j < S; j++) {
                double v = val(member(c, g, j), i, 1 + op, dt);
                acc = op == 0 ? acc + v : (v > acc ? v : acc);
            }
            ok &= get(x.p, dt, i) == round_to(acc, dt);
        }
        snprintf(what, sizeof what, "%s all_reduce %s %s", gname(g), op ? "max" : "sum", tn);
        check(ok, what);
    }

    /* all-gather, out of place and in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        srt_t out = srt_dview(c, 1 << 20, S * n, dt);
        srt_t in = inplace ? srt_dview(c, (1 << 20) + r * n * es, n, dt) : srt_dview(c, 4096, n, dt);
        for (int64_t i = 0; i < n; i++) put(in.p, dt, i, val(c->rank, i, 3, dt));
        srt_all_gather(c, st, g, out, in);
        ok = 1;
        for (int64_t j = 0; j < S; j++)
            for (int64_t i = 0; i < n; i++) ok &= get(out.p, dt, j * n + i) == val(member(c, g, j), i, 3, dt);
        snprintf(what, sizeof what, "%s all_gather %s%s", gname(g), tn, inplace ? " in place" : "");
        check(ok, what);
    }

    /* reduce-scatter, out of place and in place (out = in + r·n) */
    for (int inplace = 0; inplace < 2; inplace++) {
        srt_t in = srt_dview(c, 1 << 20, S * n, dt);
        for (int64_t i = 0; i < S * n; i++) put(in.p, dt, i, val(c->rank, i, 4, dt));
        srt_t out = inplace ? srt_dview(c, (1 << 20) + r * n * es, n, dt) : srt_dview(c, 4096, n, dt);
        srt_reduce_scatter(c, st, g, out, in);
        ok = 1;
        for (int64_t i = 0; i < n; i++) {
            double acc = 0.0;
            for (int64_t j = 0; j < S; j++) acc += val(member(c, g, j), r * n + i, 4, dt);
            ok &= get(out.p, dt, i) == round_to(acc, dt);
        }
        snprintf(what, sizeof what, "%s reduce_scatter %s%s", gname(g), tn, inplace ? " in place" : "");
        check(ok, what);
    }

    /* broadcast from the last member */
    srt_t x = srt_dview(c, 4096, n, dt);
    for (int64_t i = 0; i < n; i++) put(x.p, dt, i, val(c->rank, i, 5, dt));
    srt_broadcast(c, st, g, x, S - 1);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= get(x.p, dt, i) == val(member(c, g, S - 1), i, 5, dt);
    snprintf(what, sizeof what, "%s broadcast %s", gname(g), tn);
    check(ok, what);
    srt_stream_sync(c, st);
}

/* Both stages send first, then receive: deadlocks unless sends are non-blocking. */
static void check_sendrecv(srt_ctx *c, srt_dtype dt)
{
    if (c->prog->pp < 2) return;
    int64_t n = 300000, es = dt == SRT_F32 ? 4 : 2;
    int64_t me = srt_group_rank(c, SRT_PP), peer = me == 0 ? 1 : 0;
    srt_t out = srt_dview(c, 0, n, dt), in = srt_dview(c, n * es + 4096, n, dt);
    for (int64_t i = 0; i < n; i++) put(out.p, dt, i, val(c->rank, i, 6, dt));
    srt_send(c, SRT_PP_COMM, out, peer);
    srt_recv(c, SRT_PP_COMM, in, peer);
    srt_event_record(c, SRT_PP_COMM, 1);
    srt_event_wait(c, SRT_COMPUTE, 1);
    int ok = 1;
    int64_t from = ctx_rank_of(c->prog, c->tp_idx, c->dp_idx, peer);
    for (int64_t i = 0; i < n; i++) ok &= get(in.p, dt, i) == val(from, i, 6, dt);
    check(ok, dt == SRT_F32 ? "send/recv both ways f32" : "send/recv both ways bf16");
    srt_stream_sync(c, SRT_PP_COMM);
}

/* The CPU backend's lazy sends and receives (backend.c): stage 0 sends K
 * messages, each followed by a receive with an event after it, more than the
 * backend keeps in flight per stream; stage 1 receives each and sends it
 * straight back from the same bytes on the same stream (the send must wait
 * for the receive under it).  Stage 0 then waits for a late event (every
 * message up to it must have arrived, not only its own) and the last.  Stage
 * 0 receives into the bytes of a send still in flight (the receive must wait
 * for the send), and an op on the pp stream after a receive reads its data. */
static void check_p2p_lazy(srt_ctx *c)
{
    if (c->prog->pp < 2) return;
    enum { K = 80, EV = 100 };   /* K pairs: more than CPU_MAX_PENDING (64) requests */
    int64_t n = 5000, me = srt_group_rank(c, SRT_PP);   /* 20 KB: past the eager limit */
    int64_t peer = me == 0 ? 1 : 0, from = ctx_rank_of(c->prog, c->tp_idx, c->dp_idx, peer);
    srt_t a[K], b[K];
    for (int k = 0; k < K; k++) {
        a[k] = srt_dview(c, (int64_t)k * n * 4, n, SRT_F32);
        b[k] = srt_dview(c, (int64_t)(K + k) * n * 4, n, SRT_F32);
    }
    srt_t x = srt_dview(c, 2 * K * n * 4, n, SRT_F32), y = srt_dview(c, (2 * K + 1) * n * 4, n, SRT_F32);
    int ok = 1;
    if (me == 0) {
        for (int k = 0; k < K; k++) {
            for (int64_t i = 0; i < n; i++) ((float *)a[k].p)[i] = val(c->rank, i, 10 + k, SRT_F32);
            memset(b[k].p, 0, (size_t)n * 4);
        }
        for (int64_t i = 0; i < n; i++) ((float *)x.p)[i] = val(c->rank, i, 9, SRT_F32);
        for (int k = 0; k < K; k++) {
            srt_send(c, SRT_PP_COMM, a[k], peer);
            srt_recv(c, SRT_PP_COMM, b[k], peer);
            srt_event_record(c, SRT_PP_COMM, EV + k);
        }
        srt_event_wait(c, SRT_COMPUTE, EV + K - 10);   /* past those the backend had to finish */
        for (int k = 0; k <= K - 10; k++)
            for (int64_t i = 0; i < n; i++) ok &= ((float *)b[k].p)[i] == val(c->rank, i, 10 + k, SRT_F32);
        srt_event_wait(c, SRT_COMPUTE, EV + K - 1);
        for (int k = 0; k < K; k++)
            for (int64_t i = 0; i < n; i++) ok &= ((float *)b[k].p)[i] == val(c->rank, i, 10 + k, SRT_F32);
        srt_send(c, SRT_PP_COMM, x, peer);   /* x to stage 1, then stage 1's message into x */
        srt_recv(c, SRT_PP_COMM, x, peer);
        srt_send(c, SRT_PP_COMM, a[0], peer);
        srt_event_record(c, SRT_PP_COMM, EV);
        srt_event_wait(c, SRT_COMPUTE, EV);
        for (int64_t i = 0; i < n; i++) ok &= ((float *)x.p)[i] == val(from, i, 8, SRT_F32);
    } else {
        for (int k = 0; k < K; k++) {
            srt_recv(c, SRT_PP_COMM, a[k], peer);
            srt_send(c, SRT_PP_COMM, a[k], peer);
        }
        for (int64_t i = 0; i < n; i++) ((float *)b[0].p)[i] = val(c->rank, i, 8, SRT_F32);
        srt_recv(c, SRT_PP_COMM, x, peer);
        srt_send(c, SRT_PP_COMM, b[0], peer);
        srt_recv(c, SRT_PP_COMM, b[1], peer);
        srt_add_fwd(c, SRT_PP_COMM, y, b[1], b[1]);   /* after the receive on its stream */
        srt_event_record(c, SRT_PP_COMM, EV);
        srt_event_wait(c, SRT_COMPUTE, EV);
        for (int64_t i = 0; i < n; i++) {
            ok &= ((float *)x.p)[i] == val(from, i, 9, SRT_F32);
            ok &= ((float *)y.p)[i] == 2 * val(from, i, 10, SRT_F32);
        }
    }
    check(ok, "lazy send/recv: events, overlaps, more than the requests in flight");
    srt_stream_sync(c, SRT_PP_COMM);
}

/* A world all-reduce of more elements than one round of the scratch holds. */
static void check_big_allreduce(srt_ctx *c)
{
    int64_t n = 1500001;
    srt_t x = srt_dview(c, 0, n, SRT_F32);
    for (int64_t i = 0; i < n; i++) ((float *)x.p)[i] = val(c->rank, i, 7, SRT_F32);
    srt_all_reduce(c, SRT_DP_COMM, SRT_WORLD, x, SRT_SUM);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < c->world; j++) acc += val(j, i, 7, SRT_F32);
        ok &= ((float *)x.p)[i] == (float)acc;
    }
    check(ok, "world all_reduce over several rounds");
    srt_stream_sync(c, SRT_DP_COMM);
}

/* The vocab-parallel cross-entropy over tp against the unsplit kernels. */
static void check_xent(srt_ctx *c)
{
    int64_t tp = c->prog->tp;
    int N = 8, V = 250, Vp = 256, Vl = (int)(Vp / tp), v0 = (int)(c->tp_idx * Vl);
    float *full = malloc(sizeof(float) * N * Vp), *ref = malloc(sizeof(float) * N * Vp);
    float *st = malloc(sizeof(float) * 6 * N), *rloss = malloc(sizeof(float) * N);
    int32_t tg[8];
    for (int i = 0; i < N; i++) tg[i] = (i * 37 + 11) % V;
    tg[3] = -1;   /* an ignored row */
    for (int64_t i = 0; i < (int64_t)N * Vp; i++) full[i] = 4.0f * val(99, i, 8, SRT_F32);
    memcpy(ref, full, sizeof(float) * N * Vp);
    kc_xent_partial(st, st + N, st + 2 * N, ref, tg, N, Vp, 0, V);
    kc_xent_combine(st + 3 * N, st + 4 * N, st + 5 * N, st, st + N, st + 2 * N, 1, N);
    kc_xent_loss(rloss, tg, st + 3 * N, st + 4 * N, st + 5 * N, N);
    kc_xent_backward(ref, tg, st + 3 * N, st + 4 * N, 0.125f, N, Vp, 0, V);

    srt_t logits = srt_dview(c, 0, (int64_t)N * Vl, SRT_F32);
    srt_t targets = srt_dview(c, 65536, N, SRT_I32), losses = srt_dview(c, 131072, N, SRT_F32);
    for (int i = 0; i < N; i++) {
        memcpy((float *)logits.p + (int64_t)i * Vl, full + (int64_t)i * Vp + v0, sizeof(float) * Vl);
        ((int32_t *)targets.p)[i] = tg[i];
    }
    srt_xent_fwd_bwd(c, SRT_COMPUTE, losses, logits, targets, N, Vl, v0, V, 0.125f);
    double el = 0.0, eg = 0.0;
    for (int i = 0; i < N; i++) {
        el = fmax(el, fabs(((float *)losses.p)[i] - rloss[i]) / fmax(1.0, fabs(rloss[i])));
        for (int j = 0; j < Vl; j++)
            eg = fmax(eg, fabs(((float *)logits.p)[(int64_t)i * Vl + j] - ref[(int64_t)i * Vp + v0 + j]));
    }
    check(el < 1e-6 && eg < 1e-7, "vocab-parallel xent over tp = the unsplit kernels");
    /* every member of the tp group has the same losses, bit for bit */
    srt_t all = srt_dview(c, 262144, tp * N, SRT_F32);
    srt_all_gather(c, SRT_COMPUTE, SRT_TP, all, losses);
    int same = 1;
    for (int64_t j = 1; j < tp; j++)
        same &= memcmp((float *)all.p + j * N, all.p, sizeof(float) * N) == 0;
    check(same, "xent losses identical on every tp member");
    free(full), free(ref), free(st), free(rloss);
}

/* The exact norm over the world: sumsq per rank, finish over SRT_WORLD. */
static void check_norm(srt_ctx *c)
{
    int64_t n = 5000;
    srt_t g = srt_dview(c, 0, n, SRT_F32);
    for (int64_t i = 0; i < n; i++) ((float *)g.p)[i] = val(c->rank, i, 9, SRT_F32);
    srt_grad_sumsq(c, SRT_COMPUTE, g);
    srt_grad_norm_finish(c, SRT_COMPUTE, SRT_WORLD);
    float *allv = malloc(sizeof(float) * n * c->world);
    for (int64_t j = 0; j < c->world; j++)
        for (int64_t i = 0; i < n; i++) allv[j * n + i] = val(j, i, 9, SRT_F32);
    double want = kc_global_norm(allv, (size_t)(n * c->world));
    check(c->grad_norm == want, "exact gradient norm over the world");
    free(allv);
}

/* Rank 2 writes one buffer from two streams without an event: the default
 * race handler must take every rank down, including those in a collective. */
static int run_abort(srt_ctx *c)
{
    srt_t x = srt_dview(c, 0, 16, SRT_F32), y = srt_dview(c, 4096, 16, SRT_F32);
    if (c->rank == 2) {
        srt_zero(c, SRT_COMPUTE, x);
        srt_zero(c, SRT_COPY, x);
        printf("rank 2: the race was not reported\n");
        return 1;
    }
    srt_all_reduce(c, SRT_DP_COMM, SRT_WORLD, y, SRT_SUM);
    printf("rank %d: the all-reduce returned although rank 2 died\n", g_rank);
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    const char *mode = argc > 1 ? argv[1] : "tpdp";
    if (!strcmp(mode, "tpdp") || !strcmp(mode, "abort")) make_program(2, 2, 1, 0), g_prog.kv_heads = 1;
    else if (!strcmp(mode, "dppp")) make_program(1, 2, 2, 0);
    else if (!strcmp(mode, "dppp1")) make_program(1, 2, 2, 1);
    else if (!strcmp(mode, "world")) make_program(2, 2, 1, 0), g_prog.world = 4;
    else {
        fprintf(stderr, "usage: runtime_mpi tpdp|dppp|dppp1|abort|world\n");
        MPI_Finalize();
        return 2;
    }
    ctx_options o = { .check = 1 };
    srt_ctx *c = ctx_create(&g_prog, &o);
    if (!strcmp(mode, "abort")) return run_abort(c);
    for (int g = 0; g < SRT_NGROUPS; g++) {
        check_group(c, (srt_group)g, SRT_F32);
        check_group(c, (srt_group)g, SRT_BF16);
    }
    check_sendrecv(c, SRT_F32);
    check_sendrecv(c, SRT_BF16);
    check_p2p_lazy(c);
    check_big_allreduce(c);
    check_xent(c);
    check_norm(c);
    int bad = g_fail, checks = g_checks;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) printf("%s: %d checks per rank, %d failures over all ranks, %lld races\n",
                            mode, checks, bad, (long long)chk_races(c));
    ctx_destroy(c);
    MPI_Finalize();
    return bad ? 1 : 0;
}
