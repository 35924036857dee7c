/* test_sched.c — the schedule builder (sched.c) on real plans of a small GPT.
 *
 *  - pipeline orders for p = 4, m = 8: GPipe runs every forward first; 1F1B
 *    warms up with p − r − 1 forwards; interleaved (v = 2) with
 *    (p − r − 1)·2 + (v − 1)·p, its chunks switching every p microbatches
 *    (Megatron); the op list follows the order unit by unit;
 *  - TP: a layer's forward is attention part → all-reduce → MLP part →
 *    all-reduce, the compute stream waiting for each and the tp stream for
 *    each part; sequence parallelism all-gathers before and reduce-scatters
 *    after the parts, with the conjugates in backward; full recompute
 *    re-issues the forward's; partitioned activations all-gather the
 *    checkpoint before the recompute; op bytes are the full buffers';
 *  - ZeRO: each bucket's reduction on dp-comm waits for the op completing the
 *    bucket; the compute stream waits for it one op later with overlap_comm,
 *    at once without; ZeRO-3 gathers a unit before its first use in forward
 *    and again in backward, and keeps it across microbatches when asked;
 *  - offload: gradient D2H on the copy stream (of the reduced shard: the
 *    reduce writes the bucket it reads), AdamW on the host, parameters H2D;
 *    NVMe reads of the next sub-group run ahead of the current step in another
 *    staging slot; cpu checkpointing copies out after the forward and back
 *    before the recompute; under full recompute with every > 1 each layer's
 *    backward reads its recomputed tensors;
 *  - the global gradient norm: a local sum of squares, then the world
 *    all-reduce (under fp16 the overflow flag's first), before the optimizer;
 *  - every cross-stream read is ordered by a wait (checked by the verifier
 *    over each plan built here).
 */
#include "plan_text.h"

/* Plans, checks the verifier passes, and returns the plan (NULL: failed). */
static Plan *plan_ok(const char *const *defs)
{
    Plan *mp = pt_plan(defs);
    CHECK(mp != NULL);
    if (!mp) return NULL;
    const char *rep;
    if (!pt_verify(mp, &rep)) {
        fprintf(stderr, "the verifier rejects:");
        for (int i = 0; defs[i]; i++) fprintf(stderr, " -D %s", defs[i]);
        fprintf(stderr, "\n%s", rep);
        failures++;
    }
    return mp;
}

#define PLAN(...) plan_ok((const char *const[]){__VA_ARGS__, NULL})

/* ---- pipeline orders ------------------------------------------------------------------ */

/* "F0 F1 B0 …" of a stage's order (chunk shown as F1.0 when v > 1). */
static const char *order_text(const PipeUnit *u, int n, int v)
{
    char *out = "";
    for (int i = 0; i < n; i++)
        out = v > 1 ? arena_printf(&g_arena, "%s%s%c%d.%d", out, i ? " " : "", u[i].bwd ? 'B' : 'F', u[i].mb, u[i].chunk)
                    : arena_printf(&g_arena, "%s%s%c%d", out, i ? " " : "", u[i].bwd ? 'B' : 'F', u[i].mb);
    return out;
}

/* The units of class c in the order its op list runs them: a forward starts
 * at its first layer's forward, a backward at its last layer's. */
static int units_of_list(const Plan *mp, int c, PipeUnit *out)
{
    const Sched *s = &mp->sched.classes[c];
    const RankClass *rc = s->cls;
    int n = 0;
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->chunk < 0 || (o->sub != SUB_WHOLE && o->sub != SUB_ATTN && o->sub != SUB_MLP)) continue;
        const Chunk *ch = &rc->chunks[o->chunk];
        if (o->kind == OP_LAYER_FWD && o->layer == ch->first_layer && o->sub != SUB_MLP)
            out[n++] = (PipeUnit){false, o->mb, o->chunk};
        if (o->kind == OP_LAYER_BWD && o->layer == ch->first_layer + ch->nlayers - 1 && o->sub != SUB_ATTN)
            out[n++] = (PipeUnit){true, o->mb, o->chunk};
    }
    return n;
}

static void test_pipeline_orders(void)
{
    static const char *const names[] = {"gpipe", "1f1b", "interleaved"};
    const int p = 4, m = 8, v = 2;
    for (int sch = 0; sch < 3; sch++) {
        Plan *mp = sch == 2 ? PLAN("parallel.pp=4", "parallel.microbatches=8", "parallel.schedule=interleaved",
                                      "parallel.virtual_stages=2")
                               : PLAN("parallel.pp=4", "parallel.microbatches=8",
                                      arena_printf(&g_arena, "parallel.schedule=%s", names[sch]));
        if (!mp) continue;
        int vv = sch == 2 ? v : 1;
        PipeUnit *u = arena_alloc(&g_arena, sizeof(PipeUnit) * (size_t)(2 * m * vv));
        PipeUnit *l = arena_alloc(&g_arena, sizeof(PipeUnit) * (size_t)(2 * m * vv + 8));
        for (int st = 0; st < p; st++) {
            int n = sched_pipeline_order(&mp->part, st, u);
            CHECK_EQ(n, 2 * m * vv);
            int warm = 0;
            while (warm < n && !u[warm].bwd) warm++;
            /* forwards before the first backward: the warm-up, plus the
             * steady state's first forward (1F1B's 1F before its 1B) */
            int want = sch == 0 ? m : sch == 1 ? p - st - 1 + 1 : (p - st - 1) * 2 + (vv - 1) * p + 1;
            if (want > m * vv) want = m * vv;
            CHECK_EQ(warm, want);
            /* after the warm-up, one forward then one backward until the forwards run out */
            for (int k = want; sch > 0 && k < n; k++)
                if (k - want < 2 * (m * vv - want)) CHECK_EQ(u[k].bwd, (k - want) % 2 == 0);
            /* interleaved: chunks switch every p microbatches, backwards in reverse chunk order */
            for (int k = 0, f = 0, b = 0; sch == 2 && k < n; k++) {
                int j = u[k].bwd ? b++ : f++, chunk = (j / p) % vv;
                CHECK_EQ(u[k].chunk, u[k].bwd ? vv - 1 - chunk : chunk);
                CHECK_EQ(u[k].mb, (j / (p * vv)) * p + j % p);
            }
            /* the op list runs the units in this order */
            int nl = units_of_list(mp, st, l);
            CHECK_STR(order_text(l, nl, vv), order_text(u, n, vv));
        }
        /* the published orders of stage 0 */
        int n = sched_pipeline_order(&mp->part, 0, u);
        if (sch == 0)
            CHECK_STR(order_text(u, n, 1), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
        if (sch == 1)
            CHECK_STR(order_text(u, n, 1), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
        if (sch == 2)
            CHECK_STR(order_text(u, n, 2), "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 "
                                           "F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 "
                                           "B4.0 B5.0 B6.0 B7.0");
        /* the last stage: 1F1B has no warm-up */
        n = sched_pipeline_order(&mp->part, 3, u);
        if (sch == 1) CHECK_STR(order_text(u, n, 1), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    }
}

/* ---- tensor parallelism ---------------------------------------------------------------- */

/* Whether compute op `at` of class c is preceded, since op `from`, by a
 * compute-stream wait for op `target`. */
static bool compute_waits(const Sched *s, int from, int at, int target)
{
    for (int i = from; i < at; i++)
        if (s->ops[i].kind == OP_WAIT && s->ops[i].stream == ST_COMPUTE && s->ops[i].aux == target) return true;
    return false;
}

/* The ops of layer L, microbatch mb, on the compute and tp streams in list
 * order (waits and the replicated gradients' all-reduce left out), as
 * "fwd.attn tp_allreduce.attn …". */
static const char *layer_ops(const Plan *mp, int c, int L, int mb)
{
    static const char *const subs[] = {"", ".attn", ".mlp", ".grads"};
    static const char *const grads[] = {"", ".data", ".wgrad", ".norm", ".head", ".rows", ".cols", ".noout"};
    const Sched *s = &mp->sched.classes[c];
    char *out = "";
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->kind == OP_WAIT || o->layer != L || o->mb != mb || o->sub == SUB_GRADS) continue;
        if (o->stream != ST_COMPUTE && o->stream != ST_TP_COMM) continue;
        out = arena_printf(&g_arena, "%s%s%s%s%s", out, out[0] ? " " : "", sched_op_kind_name(o->kind), subs[o->sub],
                           grads[o->grads]);
    }
    return out;
}

static void test_tp_split(void)
{
    /* tp 2: g after each part in forward, f's all-reduce after each in
     * backward, between the part's data and weight ops (tp_comm_overlap) */
    Plan *mp = PLAN("parallel.tp=2", "parallel.microbatches=2");
    if (mp) {
        const Sched *s = &mp->sched.classes[0];
        CHECK_STR(layer_ops(mp, 0, 3, 0), "fwd.attn tp_allreduce.attn fwd.mlp tp_allreduce.mlp bwd.mlp.data tp_allreduce.mlp "
                                          "bwd.mlp.wgrad bwd.attn.data tp_allreduce.attn bwd.attn.wgrad");
        int A = -1, M = -1, R = -1;
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->layer != 2 || o->mb != 0) continue;
            if (o->kind == OP_LAYER_FWD && o->sub == SUB_ATTN) A = i;
            if (o->kind == OP_LAYER_FWD && o->sub == SUB_MLP) M = i;
            if (o->kind == OP_TP_ALLREDUCE && o->sub == SUB_ATTN && A >= 0 && R < 0) R = i;
        }
        CHECK(A >= 0 && R > A && M > R);
        if (A >= 0 && R > A && M > R) {
            CHECK(compute_waits(s, R, M, R));                   /* the MLP part waits for the all-reduce */
            CHECK(s->ops[R - 1].kind == OP_WAIT && s->ops[R - 1].stream == ST_TP_COMM && s->ops[R - 1].aux == A);
            CHECK_EQ(s->ops[R].bytes, mp->part.act.full);       /* the full [T, h] buffer */
            CHECK_EQ(s->ops[R].stream, ST_TP_COMM);
            CHECK_NEAR(s->ops[A].flops + s->ops[M].flops, mp->model.fl_layer_fwd * mp->part.b / 2, 1e-9);
        }
        /* the replicated gradients complete over tp before the dp reduction */
        CHECK(pt_find(mp, 0, OP_TP_ALLREDUCE, ST_TP_COMM, 0) >= 0);
        int g = -1;
        for (int i = 0; i < s->nops && g < 0; i++)
            if (s->ops[i].kind == OP_TP_ALLREDUCE && s->ops[i].sub == SUB_GRADS) g = i;
        CHECK(g >= 0);
    }
    /* sequence parallelism: the norm on the shard and the all-gather of its
     * output before, reduce-scatter after each part; in backward the output
     * gradient and the regathered norm output, then the reduce-scatter of
     * the norm output's gradient, the weight op, and the norm's backward on
     * the shard */
    mp = PLAN("parallel.tp=2", "parallel.sequence_parallel=on", "parallel.microbatches=2");
    if (mp) {
        CHECK_STR(layer_ops(mp, 0, 3, 1),
                  "fwd.attn.norm tp_allgather.attn fwd.attn tp_reduce_scatter.attn fwd.mlp.norm tp_allgather.mlp fwd.mlp "
                  "tp_reduce_scatter.mlp "
                  "tp_allgather.mlp tp_allgather.mlp bwd.mlp.data tp_reduce_scatter.mlp bwd.mlp.wgrad bwd.mlp.norm "
                  "tp_allgather.attn tp_allgather.attn bwd.attn.data tp_reduce_scatter.attn bwd.attn.wgrad "
                  "bwd.attn.norm");
        int ag = pt_find(mp, 0, OP_TP_ALLGATHER, ST_TP_COMM, 0);
        CHECK(ag >= 0 && mp->sched.classes[0].ops[ag].bytes == mp->part.act.full);
        CHECK(mp->part.act.x * 2 == mp->part.act.full);         /* the shard is half the sequence */
    }
    /* full recompute re-issues the forward's collectives before the backward */
    mp = PLAN("parallel.tp=2", "checkpointing.activations=full", "checkpointing.every=2");
    if (mp) {
        const char *fwd = "fwd.attn tp_allreduce.attn fwd.mlp tp_allreduce.mlp ";
        const char *bwd = " bwd.mlp.data tp_allreduce.mlp bwd.mlp.wgrad bwd.attn.data tp_allreduce.attn bwd.attn.wgrad";
        CHECK_STR(layer_ops(mp, 0, 6, 0), arena_printf(&g_arena, "%srecompute.attn tp_allreduce.attn recompute.mlp "
                                                                  "tp_allreduce.mlp%s", fwd, bwd));
        /* the group's last layer needs no output: its MLP runs no down
           projection, priced so, and is not reduced */
        CHECK_STR(layer_ops(mp, 0, 7, 0), arena_printf(&g_arena, "%srecompute.attn tp_allreduce.attn recompute.mlp.noout%s",
                                                       fwd, bwd));
        const Sched *s = &mp->sched.classes[0];
        double full = 0, cut = 0;   /* the MLP part's FLOPs, the down projection's short */
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind != OP_RECOMPUTE || o->mb != 0 || o->sub != SUB_MLP) continue;
            if (o->layer == 6) full = o->flops;
            if (o->layer == 7) cut = o->flops;
        }
        double down = mp->model.fl_mlp_down * (double)mp->part.b / (double)mp->part.tp;
        CHECK(full > 0 && down > 0);
        CHECK_NEAR(full - cut, down, 1e-9 * full);
    }
    /* every layer's backward reads its recomputed tensors, not only the
     * group's last (a reset once dropped them when every > 1) */
    mp = PLAN("checkpointing.activations=full", "checkpointing.every=4");
    if (mp) {
        const Sched *s = &mp->sched.classes[0];
        int bwds = 0;
        for (int i = 0; i < s->nops; i++) {
            if (s->ops[i].kind != OP_LAYER_BWD) continue;
            bool rc = false;
            for (int k = 0; k < s->ops[i].nrd; k++) rc |= strstr(s->bufs[s->ops[i].rd[k]].name, ".recomputed") != NULL;
            CHECK(rc);
            bwds++;
        }
        CHECK_EQ(bwds, 8);
    }
    /* partitioned activations: the checkpoint slice is all-gathered before the recompute */
    mp = PLAN("parallel.tp=2", "checkpointing.activations=full", "checkpointing.partition_activations=on");
    if (mp) {
        const Sched *s = &mp->sched.classes[0];
        int ag = -1, rc = -1;
        for (int i = 0; i < s->nops; i++) {
            if (s->ops[i].layer != 5) continue;
            if (s->ops[i].kind == OP_TP_ALLGATHER && s->ops[i].sub == SUB_WHOLE && ag < 0) ag = i;
            if (s->ops[i].kind == OP_RECOMPUTE && rc < 0) rc = i;
        }
        CHECK(ag >= 0 && rc > ag);
        if (ag >= 0 && rc > ag) {
            CHECK(compute_waits(s, ag, rc, ag));
            CHECK_EQ(s->ops[ag].bytes, mp->part.act.x);
            CHECK(mp->part.act.ckpt * 2 == mp->part.act.x);
        }
    }
}

/* ---- ZeRO ------------------------------------------------------------------------------ */

/* Compute ops between op a and the compute stream's wait for it (-1: none). */
static int compute_ops_before_wait(const Sched *s, int a)
{
    int n = 0;
    for (int i = a + 1; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->stream != ST_COMPUTE) continue;
        if (o->kind == OP_WAIT && o->aux == a) return n;
        if (o->kind != OP_WAIT) n++;
    }
    return -1;
}

static void test_zero(void)
{
    for (int overlap = 0; overlap < 2; overlap++) {
        Plan *mp = PLAN("parallel.dp=2", "zero.stage=2", "zero.reduce_bucket=20000", "parallel.microbatches=2",
                           overlap ? "zero.overlap_comm=on" : "zero.overlap_comm=off");
        if (!mp) continue;
        const Sched *s = &mp->sched.classes[0];
        int reduces = 0, overlapped = 0;
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind != OP_GRAD_REDUCE || o->mb < 0) continue;
            reduces++;
            CHECK_EQ(o->stream, ST_DP_COMM);
            /* the dp stream waited for the backward that completed the bucket */
            int w = i - 1;
            while (w >= 0 && s->ops[w].stream != ST_DP_COMM) w--;
            bool waited = w >= 0 && s->ops[w].kind == OP_WAIT && s->ops[s->ops[w].aux].stream == ST_COMPUTE;
            bool chained = w >= 0 && s->ops[w].kind == OP_GRAD_REDUCE;   /* an earlier bucket of the same op */
            CHECK(waited || chained);
            int k = compute_ops_before_wait(s, i);
            CHECK(k >= 0);
            if (k > 0) overlapped++;
            if (!overlap) CHECK_EQ(k, 0);
        }
        CHECK(reduces >= 4);        /* several buckets, every microbatch (ZeRO-2) */
        if (overlap) CHECK(overlapped > 0);
    }
    /* ZeRO-3: every unit gathered before its use in forward and again in backward */
    Plan *mp = PLAN("parallel.dp=2", "zero.stage=3", "zero.param_persistence_threshold=0",
                       "zero.max_reuse_distance=0", "zero.prefetch_bucket=1");
    if (mp) {
        const Sched *s = &mp->sched.classes[0];
        for (int u = 0; u < s->cls->nsegs; u++) {
            int n = 0;
            for (int i = 0; i < s->nops; i++) n += s->ops[i].kind == OP_GATHER && s->ops[i].aux == u;
            /* a layer's unit for its forward and its backward; the head runs
             * both in one op, the embedding's backward needs no parameters */
            int L = s->cls->segs[u].layer;
            if (L >= 0 && L < mp->model.l) CHECK(n >= 2);
            else CHECK(n >= 1);
        }
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind != OP_GATHER) continue;
            CHECK_EQ(o->stream, ST_DP_COMM);
            /* the compute op using it waits for it first */
            int user = -1;
            for (int j = i + 1; j < s->nops && user < 0; j++)
                for (int k = 0; k < s->ops[j].nrd; k++)
                    if (s->ops[j].kind != OP_WAIT && s->ops[j].rd[k] == o->wr[0]) user = j;
            CHECK(user > i && compute_waits(s, i, user, i));
        }
    }
    /* with pp > 1 a unit may stay gathered across microbatches */
    int gathers[2] = {0, 0};
    for (int keep = 0; keep < 2; keep++) {
        mp = PLAN("parallel.pp=2", "parallel.dp=2", "zero.stage=3", "parallel.microbatches=4",
                  "zero.param_persistence_threshold=0", "zero.max_reuse_distance=0",
                  keep ? "zero.gather_across_microbatches=on" : "zero.gather_across_microbatches=off");
        if (mp) gathers[keep] = pt_find(mp, 0, OP_GATHER, -1, 0) >= 0;
        for (int i = 0; mp && i < mp->sched.classes[0].nops; i++) gathers[keep] += mp->sched.classes[0].ops[i].kind == OP_GATHER;
    }
    CHECK(gathers[1] < gathers[0]);
}

/* ---- offload, checkpointing, the norm ----------------------------------------------------- */

static void test_offload(void)
{
    Plan *mp = PLAN("parallel.dp=2", "zero.stage=2", "offload.optimizer=cpu");
    if (mp) {
        int d = pt_find(mp, 0, OP_GRAD_D2H, -1, 0), o = pt_find(mp, 0, OP_OPT_STEP, -1, 0);
        int h = pt_find(mp, 0, OP_PARAM_H2D, -1, 0);
        CHECK(d >= 0 && o > d && h > o);
        if (d >= 0 && o > d && h > o) {
            const Op *ops = mp->sched.classes[0].ops;
            CHECK_EQ(ops[d].stream, ST_COPY);
            CHECK_EQ(ops[o].stream, ST_HOST);
            CHECK_EQ(ops[h].stream, ST_COPY);
            /* the copy reads the bucket the reduce-scatter left its shard in
             * (it once copied the unreduced bucket: no dependency between them) */
            int r = d - 1;
            while (r >= 0 && ops[r].kind != OP_GRAD_REDUCE) r--;
            CHECK(r >= 0);
            bool wrote = false;
            for (int k = 0; r >= 0 && k < ops[r].nwr; k++) wrote |= ops[r].wr[k] == ops[d].rd[0];
            CHECK(wrote);
        }
    }
    /* NVMe: sub-group g + 1 is read while g steps, into another slot */
    mp = PLAN("parallel.dp=2", "zero.stage=2", "offload.optimizer=nvme", "offload.optimizer.path=\"/nvme\"",
              "zero.sub_group_size=20000");
    if (mp) {
        const Sched *s = &mp->sched.classes[0];
        int steps = 0;
        for (int i = 0; i < s->nops; i++) steps += s->ops[i].kind == OP_OPT_STEP;
        CHECK(steps >= 3);
        for (int g = 0; g + 1 < steps; g++) {
            int step = -1, next_read = -1;
            for (int i = 0; i < s->nops; i++) {
                if (s->ops[i].kind == OP_OPT_STEP && s->ops[i].aux == g) step = i;
                if (s->ops[i].kind == OP_OPT_READ && s->ops[i].chunk == g + 1) next_read = i;
            }
            CHECK(next_read >= 0 && next_read < step);
            if (next_read >= 0 && step >= 0) CHECK(s->ops[next_read].wr[0] != s->ops[step].wr[s->ops[step].nwr - 1]);
        }
        CHECK(pt_find(mp, 0, OP_OPT_WRITE, ST_COPY, 0) >= 0);
    }
    /* cpu checkpointing: out after the forward, back before the recompute */
    mp = PLAN("checkpointing.activations=full", "checkpointing.cpu=on");
    if (mp) {
        const Sched *s = &mp->sched.classes[0];
        int fwd = -1, out = -1, in = -1, rc = -1;
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->layer != 4) continue;
            if (o->kind == OP_LAYER_FWD && fwd < 0) fwd = i;
            if (o->kind == OP_CKPT_D2H) out = i;
            if (o->kind == OP_CKPT_H2D) in = i;
            if (o->kind == OP_RECOMPUTE && rc < 0) rc = i;
        }
        CHECK(fwd >= 0 && out > fwd && in > out && rc > in);
        if (out >= 0 && in >= 0) CHECK(s->ops[out].stream == ST_COPY && s->ops[in].stream == ST_COPY);
        if (in >= 0 && rc > in) CHECK(compute_waits(s, in, rc, in));
    }
}

static void test_grad_norm(void)
{
    for (int fp16 = 0; fp16 < 2; fp16++) {
        Plan *mp = PLAN("parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "zero.stage=1", "train.grad_clip=1.0",
                           fp16 ? "precision.dtype=fp16" : "precision.dtype=bf16");
        if (!mp) continue;
        for (int c = 0; c < mp->mem.nclasses; c++) {
            int sq = pt_find(mp, c, OP_GRAD_SUMSQ, ST_COMPUTE, 0), n0 = pt_find(mp, c, OP_GRAD_NORM, ST_DP_COMM, 0);
            int n1 = pt_find(mp, c, OP_GRAD_NORM, ST_DP_COMM, 1), opt = pt_find(mp, c, OP_OPT_STEP, -1, 0);
            CHECK(sq >= 0 && n0 > sq && opt > n0);
            CHECK_EQ(n1 >= 0, fp16);
            const Op *ops = mp->sched.classes[c].ops;
            if (n0 >= 0) CHECK_EQ(ops[n0].aux, fp16 ? 1 : 0);
            if (n0 >= 0 && opt > n0) CHECK(compute_waits(&mp->sched.classes[c], n0, opt, fp16 ? n1 : n0));
        }
    }
    /* no clipping, not fp16: no norm at all */
    Plan *mp = PLAN("parallel.dp=2", "train.grad_clip=0");
    if (mp) CHECK(pt_find(mp, 0, OP_GRAD_SUMSQ, -1, 0) < 0 && pt_find(mp, 0, OP_GRAD_NORM, -1, 0) < 0);
}

/* The tied embedding's gradient all-reduce between the first and last stage. */
static void test_tied(void)
{
    Plan *mp = PLAN("parallel.pp=4", "parallel.microbatches=4");
    if (!mp) return;
    CHECK(pt_find(mp, 0, OP_TIED_REDUCE, ST_PP_COMM, 0) >= 0);
    CHECK(pt_find(mp, 3, OP_TIED_REDUCE, ST_PP_COMM, 0) >= 0);
    CHECK(pt_find(mp, 1, OP_TIED_REDUCE, -1, 0) < 0);
    CHECK(pt_find(mp, 2, OP_TIED_REDUCE, -1, 0) < 0);
}

/* Every op's stream is set; every wait names an earlier op; op labels. */
static void test_streams_and_labels(void)
{
    Plan *mp = PLAN("parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "zero.stage=3", "parallel.schedule=interleaved",
                       "parallel.virtual_stages=2", "parallel.microbatches=4", "offload.optimizer=cpu");
    if (!mp) return;
    bool used[NSTREAMS] = {false};
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const Sched *s = &mp->sched.classes[c];
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            CHECK(o->stream >= 0 && o->stream < NSTREAMS);
            if (o->stream >= 0 && o->stream < NSTREAMS) used[o->stream] = true;
            if (o->kind == OP_WAIT) CHECK(o->aux >= 0 && o->aux < i);
            CHECK(strcmp(sched_op_kind_name(o->kind), "?") != 0);
        }
    }
    for (int st = 0; st < NSTREAMS; st++) CHECK(used[st]);
    const Sched *s = &mp->sched.classes[0];
    int r = pt_find(mp, 1, OP_RECV_FWD, -1, 0), t = pt_find(mp, 0, OP_TP_ALLREDUCE, -1, 0);
    CHECK(r >= 0 && t >= 0);
    if (r >= 0) CHECK_STR(sched_op_label(&mp->sched.classes[1], r), "recv_fwd mb0 chunk0");
    const char *label = t >= 0 ? sched_op_label(s, t) : "";
    CHECK(strncmp(label, "tp_allreduce embed mb0", 22) == 0);
}

/* Whether op i of s reads (rd) or writes a buffer of role r. */
static bool touches(const Sched *s, int i, bool rd, int r)
{
    const Op *o = &s->ops[i];
    for (int k = 0; k < (rd ? o->nrd : o->nwr); k++)
        if (s->bufs[rd ? o->rd[k] : o->wr[k]].role == r) return true;
    return false;
}

/* Sequence parallelism's backward parts: the regather of a part's input is
 * issued before its data op; split, the data op neither reads it nor waits
 * for it, the weight op does both (Megatron's asynchronous all-gather);
 * unsplit, the op waits for it first.  Then the norm op (GR_NORM, no FLOPs)
 * after a wait for the reduce-scatter into the shard it reads. */
static void sp_regather_overlap(const Sched *s, bool split)
{
    int parts = 0;
    for (int n = 0; n < s->nops; n++) {
        if (s->ops[n].kind != OP_LAYER_BWD || s->ops[n].grads != GR_NORM) continue;
        parts++;
        int L = s->ops[n].layer, mb = s->ops[n].mb, sub = s->ops[n].sub, rg = -1, d = -1, w = -1, rs = -1;
        for (int j = 0; j < n; j++) {
            const Op *o = &s->ops[j];
            if (o->layer != L || o->mb != mb || o->sub != sub || o->kind == OP_WAIT) continue;
            if (o->kind == OP_TP_ALLGATHER && touches(s, j, false, BR_REGATHERED)) rg = j;
            if (o->kind == OP_TP_REDUCE_SCATTER && touches(s, j, false, BR_DNORM)) rs = j;
            if (o->kind == OP_LAYER_BWD && o->grads != GR_WEIGHT) d = j;
            if (o->kind == OP_LAYER_BWD && o->grads == GR_WEIGHT) w = j;
        }
        CHECK(rg >= 0 && d > rg && rs > d && n > rs);
        if (!(rg >= 0 && d > rg && rs > d && n > rs)) return;
        CHECK(s->ops[d].grads == (split ? GR_DATA : GR_ALL));
        CHECK(touches(s, d, true, BR_REGATHERED) == !split);
        CHECK(compute_waits(s, rg, d, rg) == !split);
        if (split) {
            CHECK(w > rs && w < n && touches(s, w, true, BR_REGATHERED) && compute_waits(s, d, w, rg));
        }
        CHECK(compute_waits(s, rs, n, rs) && touches(s, n, true, BR_DNORM) && s->ops[n].flops == 0);
        CHECK(touches(s, n, false, sub == SUB_MLP ? BR_DRESID1 : BR_DX));
    }
    CHECK(parts > 0);
}

/* Sequence parallelism's forward parts (Megatron's layout), under each
 * checkpoint policy: a norm op (GR_NORM, no FLOPs) on the part's input
 * shard writes the norm's output shard, the all-gather reads that and
 * writes the part's gathered input, which the part (or its full recompute)
 * reads after waiting for it; the backward's regather reads the very buffer
 * the norm op wrote (the kept tensors, or full checkpointing's recomputed
 * ones): nothing computes the norm on all tokens. */
static void test_sp_norm_fwd(void)
{
    const char *pols[3] = {[CKPT_NONE] = "checkpointing.activations=none", [CKPT_FULL] = "checkpointing.activations=full",
                           [CKPT_SELECTIVE] = "checkpointing.activations=selective"};
    for (int pol = 0; pol < 3; pol++) {
        Plan *mp = PLAN("parallel.tp=2", "parallel.sequence_parallel=on", "parallel.microbatches=2", pols[pol]);
        if (!mp) continue;
        const Sched *s = &mp->sched.classes[0];
        int norms = 0, regathers = 0;
        for (int n = 0; n < s->nops; n++) {
            const Op *o = &s->ops[n];
            if ((o->kind == OP_LAYER_FWD || o->kind == OP_RECOMPUTE) && o->grads == GR_NORM) {
                norms++;
                CHECK(o->flops == 0 && o->sub != SUB_WHOLE);
                int out = -1, ag = -1, part = -1;
                for (int k = 0; k < o->nwr; k++)
                    if (s->bufs[o->wr[k]].cat != CAT_WORKSPACE) out = o->wr[k];
                CHECK(out >= 0);
                for (int j = n + 1; j < s->nops && part < 0; j++) {
                    const Op *q = &s->ops[j];
                    if (q->layer != o->layer || q->mb != o->mb || q->sub != o->sub) continue;
                    if (ag < 0 && q->kind == OP_TP_ALLGATHER) ag = j;
                    if (q->kind == o->kind && q->grads != GR_NORM) part = j;
                }
                CHECK(ag > n && part > ag);
                if (!(ag > n && part > ag)) continue;
                CHECK(s->ops[ag].rd[0] == out && touches(s, ag, false, BR_TP_GATHERED));
                CHECK(compute_waits(s, ag, part, ag) && touches(s, part, true, BR_TP_GATHERED));
                CHECK(touches(s, n, false, pol == CKPT_FULL && o->kind == OP_LAYER_FWD ? BR_NORM_SHARD
                                           : o->kind == OP_RECOMPUTE ? s->bufs[out].role : BR_SAVED));
            }
            if (o->kind == OP_TP_ALLGATHER && touches(s, n, false, BR_REGATHERED)) {
                regathers++;
                int w = -1;     /* the latest norm op of its part before it wrote what it gathers */
                for (int j = 0; j < n; j++)
                    if ((s->ops[j].kind == OP_LAYER_FWD || s->ops[j].kind == OP_RECOMPUTE) && s->ops[j].grads == GR_NORM &&
                        s->ops[j].layer == o->layer && s->ops[j].mb == o->mb && s->ops[j].sub == o->sub)
                        w = j;
                CHECK(w >= 0);
                bool wrote = false;
                for (int k = 0; w >= 0 && k < s->ops[w].nwr; k++) wrote |= s->ops[w].wr[k] == o->rd[0];
                CHECK(wrote);
            }
        }
        CHECK_EQ(norms, 2 * (int)(mp->part.m * mp->model.l) * (pol == CKPT_FULL ? 2 : 1));
        CHECK_EQ(regathers, 2 * (int)(mp->part.m * mp->model.l));
    }
}

/* tp_comm_overlap: each part's backward is a data op, then its collective,
 * then the part's weight op, which runs while the collective does: the
 * compute stream waits for the collective only after the weight op; the
 * split moves FLOPs between the ops but never changes a layer's or the
 * step's; the weight op reads its data op's scratch; none keeps one op. */
static void test_tp_comm_overlap(void)
{
    const char *sps[2] = {"parallel.sequence_parallel=off", "parallel.sequence_parallel=on"};
    for (int sp = 0; sp < 2; sp++) {
        Plan *on = PLAN("parallel.tp=2", "parallel.microbatches=2", sps[sp]);
        Plan *off = PLAN("parallel.tp=2", "parallel.microbatches=2", sps[sp], "parallel.tp_comm_overlap=none");
        if (!on || !off) continue;
        const Sched *s = &on->sched.classes[0], *s0 = &off->sched.classes[0];
        CHECK_NEAR(s->flops, s0->flops, 1e-9 * s0->flops);
        int split = 0;
        for (int i = 0; i < s->nops; i++) {
            const Op *w = &s->ops[i];
            if (w->kind != OP_LAYER_BWD || w->grads != GR_WEIGHT) continue;
            split++;
            int d = -1, red = -1, wait = -1;     /* its data op, the collective after it, the wait for that */
            for (int j = i - 1; j >= 0 && d < 0; j--)
                if (s->ops[j].kind == OP_LAYER_BWD) d = j;
            CHECK(d >= 0 && s->ops[d].grads == GR_DATA && s->ops[d].layer == w->layer && s->ops[d].mb == w->mb &&
                  s->ops[d].sub == w->sub);
            if (d < 0) continue;
            for (int j = d + 1; j < i; j++)
                if (s->ops[j].stream == ST_TP_COMM && s->ops[j].kind != OP_WAIT && s->ops[j].sub == w->sub) red = j;
            CHECK(red > d);
            /* the compute stream waits for it (or a later tp op: the stream runs in order) after the weight op */
            for (int j = d + 1; j < s->nops && wait < 0; j++)
                if (s->ops[j].kind == OP_WAIT && s->ops[j].stream == ST_COMPUTE && s->ops[j].aux >= red &&
                    s->ops[s->ops[j].aux].stream == ST_TP_COMM)
                    wait = j;
            CHECK(wait > i);
            bool scr = false;                       /* the weight op reads what the data op left */
            for (int a = 0; a < w->nrd; a++)
                for (int b = 0; b < s->ops[d].nwr; b++)
                    scr |= w->rd[a] == s->ops[d].wr[b] && s->bufs[w->rd[a]].cat == CAT_WORKSPACE;
            CHECK(scr);
            int L = w->layer, mb = w->mb;
            double fl = 0, fl0 = 0;
            for (int j = 0; j < s->nops; j++)
                if (s->ops[j].kind == OP_LAYER_BWD && s->ops[j].layer == L && s->ops[j].mb == mb) fl += s->ops[j].flops;
            for (int j = 0; j < s0->nops; j++)
                if (s0->ops[j].kind == OP_LAYER_BWD && s0->ops[j].layer == L && s0->ops[j].mb == mb) fl0 += s0->ops[j].flops;
            CHECK_NEAR(fl, fl0, 1e-9 * fl0);
            /* the data GEMMs are the weight GEMMs' FLOPs; the attention part adds its core's backward */
            CHECK(w->flops > 0);
            if (w->sub == SUB_MLP) CHECK_NEAR(s->ops[d].flops, w->flops, 1e-9 * w->flops);
            else CHECK(s->ops[d].flops > w->flops);
        }
        CHECK_EQ(split, 2 * (int)(on->part.m * on->model.l));    /* two parts a layer */
        for (int i = 0; i < s0->nops; i++) CHECK(s0->ops[i].grads == GR_ALL || (sp && s0->ops[i].grads == GR_NORM));
        if (sp) {
            sp_regather_overlap(s, true);
            sp_regather_overlap(s0, false);
        }
        CHECK_STR(layer_ops(off, 0, 3, 0), sp ? "fwd.attn.norm tp_allgather.attn fwd.attn tp_reduce_scatter.attn "
                                                "fwd.mlp.norm tp_allgather.mlp fwd.mlp "
                                                "tp_reduce_scatter.mlp tp_allgather.mlp tp_allgather.mlp bwd.mlp "
                                                "tp_reduce_scatter.mlp bwd.mlp.norm tp_allgather.attn "
                                                "tp_allgather.attn bwd.attn tp_reduce_scatter.attn bwd.attn.norm"
                                              : "fwd.attn tp_allreduce.attn fwd.mlp tp_allreduce.mlp bwd.mlp tp_allreduce.mlp "
                                                "bwd.attn tp_allreduce.attn");
    }
    /* tp 1 has no collective to overlap: one backward op, whatever the key */
    Plan *mp = PLAN("parallel.tp=1", "parallel.tp_comm_overlap=wgrad");
    if (mp)
        for (int i = 0; i < mp->sched.classes[0].nops; i++) CHECK(mp->sched.classes[0].ops[i].grads == GR_ALL);
}

/* tp_comm_overlap = full: each forward part is its head, then k chunks of
 * its row-parallel GEMM, each followed by its own collective (1/k of the
 * bytes, chunk index in Op.rows) on the tp stream, with no compute wait
 * between the chunks (the next chunk runs while the collective does) and one
 * after the last chunk's collective; the part's output (and under sequence
 * parallelism its partial sums) is accessed by chunk; under sequence
 * parallelism the part opens with k all-gathers (1/k of the bytes each, all
 * issued first) and k column chunks, chunk j waiting for all-gather j and no
 * later one, the gathered buffer accessed by chunk; the step's FLOPs and the
 * backward are wgrad's; a full recompute's replay is not chunked. */
static void test_tp_comm_overlap_full(void)
{
    const char *sps[2] = {"parallel.sequence_parallel=off", "parallel.sequence_parallel=on"};
    for (int sp = 0; sp < 2; sp++) {
        Plan *full = PLAN("parallel.tp=2", "parallel.microbatches=2", sps[sp], "parallel.tp_comm_overlap=full",
                          "parallel.tp_overlap_chunks=4");
        Plan *w = PLAN("parallel.tp=2", "parallel.microbatches=2", sps[sp]);
        if (!full || !w) continue;
        CHECK_EQ(full->part.tpc, 4);
        const Sched *s = &full->sched.classes[0], *s0 = &w->sched.classes[0];
        CHECK_NEAR(s->flops, s0->flops, 1e-9 * s0->flops);
        const char *rows = sp ? "fwd.attn.rows tp_reduce_scatter.attn " : "fwd.attn.rows tp_allreduce.attn ";
        const char *mrows = sp ? "fwd.mlp.rows tp_reduce_scatter.mlp " : "fwd.mlp.rows tp_allreduce.mlp ";
        const char *ag = "tp_allgather.attn tp_allgather.attn tp_allgather.attn tp_allgather.attn ";
        const char *mag = "tp_allgather.mlp tp_allgather.mlp tp_allgather.mlp tp_allgather.mlp ";
        const char *cols = "fwd.attn.cols fwd.attn.cols fwd.attn.cols fwd.attn.cols ";
        const char *mcols = "fwd.mlp.cols fwd.mlp.cols fwd.mlp.cols fwd.mlp.cols ";
        const char *fwd = sp ? arena_printf(&g_arena, "fwd.attn.norm %s%sfwd.attn.head %s%s%s%s"
                                            "fwd.mlp.norm %s%sfwd.mlp.head %s%s%s%s", ag, cols, rows, rows, rows, rows,
                                            mag, mcols, mrows, mrows, mrows, mrows)
                             : arena_printf(&g_arena, "fwd.attn.head %s%s%s%sfwd.mlp.head %s%s%s%s", rows, rows, rows, rows,
                                            mrows, mrows, mrows, mrows);
        const char *all = layer_ops(full, 0, 3, 0), *ref = layer_ops(w, 0, 3, 0);
        const char *bwd = strstr(ref, "bwd") ? strstr(ref, sp ? "tp_allgather.mlp tp_allgather.mlp bwd" : "bwd") : ref;
        CHECK_STR(all, arena_printf(&g_arena, "%s%s", fwd, bwd));
        for (int sub = SUB_ATTN; sub <= SUB_MLP; sub++) {
            int64_t bytes = 0, bytes0 = 0, gbytes = 0, gbytes0 = 0;
            int next = 0, first = -1, last = -1, ag[4] = {-1, -1, -1, -1}, ncols = 0;
            for (int i = 0; i < s->nops; i++) {
                const Op *o = &s->ops[i];
                if (o->layer != 3 || o->mb != 0 || o->sub != sub || o->kind == OP_WAIT) continue;
                if (o->kind == OP_TP_ALLGATHER && o->rows >= 0) {   /* sp: the part's chunked all-gather */
                    CHECK(sp && o->rows < 4);
                    if (o->rows >= 0 && o->rows < 4) ag[o->rows] = i;
                    gbytes += o->bytes;
                    CHECK_EQ(s->bufs[o->wr[0]].rows, 4);
                    continue;
                }
                if (o->kind == OP_LAYER_FWD && o->grads == GR_COLS) {
                    /* chunk j waits for all-gather j, and for no later one, before it starts */
                    CHECK(sp && o->rows == ncols && ag[ncols] >= 0);
                    int waited = -1;
                    for (int w = i - 1; w >= 0 && s->ops[w].kind == OP_WAIT; w--)
                        if (s->ops[w].stream == ST_COMPUTE && s->ops[w].aux > waited) waited = s->ops[w].aux;
                    if (ncols < 4) {
                        CHECK_EQ(waited, ag[ncols]);
                        for (int j = ncols + 1; j < 4; j++) CHECK(ag[j] > waited);
                    }
                    ncols++;
                    continue;
                }
                if (o->kind == OP_LAYER_FWD && o->grads == GR_ROWS) {
                    CHECK_EQ(o->rows, next);
                    if (first < 0) first = i;
                    for (int k = 0; k < o->nwr; k++)    /* the part's output: by chunk */
                        if (s->bufs[o->wr[k]].cat == CAT_ACTIVATIONS) CHECK_EQ(s->bufs[o->wr[k]].rows, 4);
                } else if (o->stream == ST_TP_COMM && o->rows >= 0) {
                    CHECK_EQ(o->rows, next);
                    next++, bytes += o->bytes, last = i;
                }
            }
            for (int i = 0; i < s0->nops && !bytes0; i++) {    /* wgrad's: the part's first (forward) reduction */
                const Op *o = &s0->ops[i];
                if (o->layer == 3 && o->mb == 0 && o->sub == sub && o->stream == ST_TP_COMM &&
                    (o->kind == OP_TP_ALLREDUCE || o->kind == OP_TP_REDUCE_SCATTER))
                    bytes0 = o->bytes;
                if (o->layer == 3 && o->mb == 0 && o->sub == sub && o->kind == OP_TP_ALLGATHER && !gbytes0)
                    gbytes0 = o->bytes;     /* ... and its forward all-gather */
            }
            CHECK_EQ(next, 4);
            CHECK_EQ(bytes, bytes0);
            CHECK_EQ(ncols, sp ? 4 : 0);
            CHECK_EQ(gbytes, sp ? gbytes0 : 0);
            int waits = 0;          /* the compute stream never waits for tp between the chunks */
            for (int i = first; i <= last && first >= 0; i++)
                waits += s->ops[i].kind == OP_WAIT && s->ops[i].stream == ST_COMPUTE;
            CHECK_EQ(waits, 0);
        }
    }
    /* full checkpointing: the forward is chunked, the recompute is not */
    Plan *ck = PLAN("parallel.tp=2", "parallel.microbatches=2", "parallel.tp_comm_overlap=full",
                    "checkpointing.activations=full");
    if (ck) {
        int fwd_rows = 0, re_rows = 0;
        for (int i = 0; i < ck->sched.classes[0].nops; i++) {
            const Op *o = &ck->sched.classes[0].ops[i];
            fwd_rows += o->kind == OP_LAYER_FWD && o->grads == GR_ROWS;
            re_rows += o->kind == OP_RECOMPUTE && o->grads != GR_ALL && o->grads != GR_NO_OUTPUT;
        }
        CHECK_EQ(fwd_rows, 2 * 4 * (int)(ck->part.m * ck->model.l));
        CHECK_EQ(re_rows, 0);
    }
}

/* The schedule's FLOPs over every rank are the step's hardware FLOPs (the
 * HFU numerator, Partition.flops_hw_step): what the layer ops, the head and
 * the recompute run, a full recompute's each group's last layer without its
 * MLP down projection, whatever the layout and the groups. */
static void test_hw_flops(void)
{
    const char *const layouts[][5] = {
        {"checkpointing.activations=full", NULL},
        {"checkpointing.activations=full", "checkpointing.every=3", NULL},
        {"checkpointing.activations=full", "checkpointing.every=2", "parallel.pp=2", NULL},
        {"checkpointing.activations=full", "parallel.pp=2", "parallel.schedule=interleaved", "parallel.microbatches=4"},
        {"checkpointing.activations=full", "parallel.tp=2", "parallel.sequence_parallel=on", NULL},
        {"checkpointing.activations=selective", "parallel.tp=2", NULL},
        {"parallel.pp=2", NULL},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        Plan *mp = plan_ok(layouts[k]);
        if (!mp) continue;
        double sum = 0;
        for (int c = 0; c < mp->sched.nclasses; c++)
            sum += mp->sched.classes[c].flops * (double)mp->part.classes[c].count;
        CHECK_NEAR(sum, mp->part.flops_hw_step, 1e-9 * sum);
        if (mp->spec->checkpointing.activations == CKPT_FULL)
            CHECK(mp->part.flops_hw_step < mp->model.flops_hw_full);    /* the papers' count replays whole layers */
    }
}

int main(void)
{
    test_hw_flops();
    test_pipeline_orders();
    test_tp_split();
    test_tp_comm_overlap();
    test_tp_comm_overlap_full();
    test_sp_norm_fwd();
    test_zero();
    test_offload();
    test_grad_norm();
    test_tied();
    test_streams_and_labels();
    arena_free(&g_arena);
    if (failures) {
        fprintf(stderr, "test_sched: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_sched: ok\n");
    return 0;
}
