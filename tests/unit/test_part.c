/* test_part.c — the partition plan: rank numbering, tp slices, pipeline
 * stages, ZeRO segments and ownership over a matrix of layouts (every
 * parameter element owned by exactly one dp rank, one tp rank per shard),
 * activation bytes against Korthikanti's table (without dropout, fused
 * attention), and the pipeline orders' microbatches in flight. */
#include "plan_fixture.h"

/* Ranks round-trip through coordinates; tp varies fastest. */
static void test_ranks(void)
{
    Spec s;
    Model m;
    Partition p;
    fx_spec(&s);
    s.parallel.tp = 2, s.parallel.pp = 2, s.parallel.dp = 4;
    fx_batch(&s);
    for (int order = 0; order < 2; order++) {
        s.parallel.rank_order = order;
        model_build(&s, &m);
        part_build(&s, &m, &p);
        CHECK_EQ(p.world, 16);
        bool *seen = calloc(16, 1);
        for (int64_t st = 0; st < 2; st++)
            for (int64_t d = 0; d < 4; d++)
                for (int64_t t = 0; t < 2; t++) {
                    int64_t r = part_rank(&p, t, d, st), t2, d2, s2;
                    CHECK(r >= 0 && r < 16 && !seen[r]);
                    seen[r] = true;
                    part_coords(&p, r, &t2, &d2, &s2);
                    CHECK(t2 == t && d2 == d && s2 == st);
                    CHECK(part_class_of(&p, r) == st);
                }
        free(seen);
        CHECK_EQ(part_rank(&p, 1, 0, 0), 1);
        CHECK_EQ(part_rank(&p, 0, 1, 0), order == ORDER_TP_DP_PP ? 2 : 4);
    }
}

/* Every flat element of a class is owned by exactly one dp rank (ZeRO >= 1):
 * the ranges of all dp ranks tile the flat space and part_owner agrees. */
static void check_ownership(const Partition *p, const RankClass *c)
{
    int64_t (*r)[2] = malloc(sizeof(int64_t[2]) * (size_t)c->nsegs);
    int64_t *cover = calloc((size_t)c->padded + 1, sizeof(int64_t));
    int64_t owned = 0;
    for (int64_t d = 0; d < p->dp; d++) {
        int n = part_shard_ranges(p, c, d, r, c->nsegs);
        CHECK_EQ(n, c->nsegs);
        for (int i = 0; i < n; i++) {
            owned += r[i][1] - r[i][0];
            for (int64_t e = r[i][0]; e < r[i][1]; e++) cover[e]++;
            if (r[i][1] > r[i][0]) {
                CHECK_EQ(part_owner(p, c, r[i][0]), d);
                CHECK_EQ(part_owner(p, c, r[i][1] - 1), d);
            }
        }
    }
    CHECK_EQ(owned, c->padded);
    int64_t bad = 0;
    for (int64_t e = 0; e < c->padded; e++) bad += cover[e] != 1;
    CHECK_EQ(bad, 0);
    CHECK_EQ(part_owner(p, c, c->padded), -1);
    free(cover);
    free(r);
}

/* Segments tile the flat space, are padded to a multiple of the pad unit
 * (dp · 128 with ZeRO), hold their tensors, and tensors do not overlap. */
static void check_segments(const Partition *p, const RankClass *c)
{
    int64_t off = 0, shard = 0, numel = 0;
    for (int i = 0; i < c->nsegs; i++) {
        const Segment *sg = &c->segs[i];
        CHECK_EQ(sg->offset, off);
        CHECK(sg->padded % p->pad_unit == 0 && sg->padded >= sg->numel);
        if (p->zero >= 1) CHECK(sg->padded % p->dp == 0 && sg->shard * p->dp == sg->padded);
        int64_t toff = sg->offset;
        for (int k = sg->first; k < sg->first + sg->n; k++) {
            CHECK_EQ(c->tensors[k].offset, toff);
            CHECK_EQ(c->tensors[k].seg, i);
            toff += c->tensors[k].numel;
        }
        CHECK_EQ(toff - sg->offset, sg->numel);
        off += sg->padded, shard += sg->shard, numel += sg->numel;
    }
    CHECK_EQ(off, c->padded);
    CHECK_EQ(shard, c->shard);
    CHECK_EQ(numel, c->numel);
}

/* The tp slices of every split tensor tile it: one tp rank per shard (a
 * shared kv head, SPLIT_KV: tp / kv consecutive ranks per shard). */
static void check_tp_slices(const Partition *p, const Model *m)
{
    for (int i = 0; i < m->nt; i++) {
        const Tensor *t = &m->t[i];
        int64_t next = 0, extent = t->split == SPLIT_COLS ? t->cols : t->rows_mem;
        int64_t rep = t->split == SPLIT_KV ? p->tp / m->kv : 1;
        for (int64_t r = 0; r < p->tp; r++) {
            int dim;
            int64_t b, e;
            part_tp_slice(p, t, r, &dim, &b, &e);
            if (t->split == SPLIT_NONE) {
                CHECK(b == 0 && e == extent);
                continue;
            }
            if (r % rep) {                  /* a replica of the previous rank's kv head */
                CHECK_EQ(e, next);
                continue;
            }
            CHECK_EQ(dim, t->split == SPLIT_COLS ? 1 : 0);
            CHECK_EQ(b, next);
            next = e;
        }
        if (t->split != SPLIT_NONE) CHECK_EQ(next, extent);
    }
}

/* Every element of the model lives on exactly one stage (the tied head's
 * copy aside): the classes' tp shards add up to the padded model. */
static void check_stages_cover(const Partition *p, const Model *m)
{
    int64_t total = 0;
    int *owner = calloc((size_t)m->nt, sizeof(int));
    for (int k = 0; k < p->nclasses; k++) {
        const RankClass *c = &p->classes[k];
        for (int i = 0; i < c->ntensors; i++) {
            const ClassTensor *ct = &c->tensors[i];
            if (ct->copy) continue;
            owner[ct->tensor]++;
            int split = m->t[ct->tensor].split;
            total += ct->numel * (split == SPLIT_NONE ? 1 : split == SPLIT_KV ? m->kv : p->tp);
        }
    }
    CHECK_EQ(total, m->params_mem);
    for (int i = 0; i < m->nt; i++) CHECK_EQ(owner[i], 1);
    free(owner);
}

/* The property matrix: tp {1,2,4} × pp {1,2,4} × dp {1,2,4,8} × ZeRO 0-3. */
static void test_matrix(void)
{
    int layouts = 0;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int pp = 1; pp <= 4; pp *= 2)
            for (int dp = 1; dp <= 8; dp *= 2)
                for (int zero = 0; zero <= 3; zero++) {
                    Spec s;
                    Model m;
                    Partition p;
                    fx_spec(&s);
                    s.model.layers = 8, s.model.vocab = 1000;
                    s.parallel.tp = tp, s.parallel.pp = pp, s.parallel.dp = dp;
                    s.parallel.microbatches = 2 * pp;
                    s.zero.stage = zero;
                    s.zero.reduce_bucket = 20000;           /* several buckets per stage */
                    s.zero.param_persistence_threshold = 200;
                    s.model.tie_embeddings = (tp + pp + dp + zero) % 2 == 0;
                    fx_batch(&s);
                    CHECK(part_check(&s, false));
                    model_build(&s, &m);
                    part_build(&s, &m, &p);
                    CHECK_EQ(p.nclasses, pp);
                    check_tp_slices(&p, &m);
                    check_stages_cover(&p, &m);
                    for (int k = 0; k < p.nclasses; k++) {
                        check_segments(&p, &p.classes[k]);
                        if (zero >= 1) check_ownership(&p, &p.classes[k]);
                        CHECK_EQ(p.classes[k].count, tp * dp);
                    }
                    layouts++;
                }
    CHECK_EQ(layouts, 144);
}

/* Stages: balanced (head counted), stage_layers honoured, interleaved chunks. */
static void test_stages(void)
{
    Spec s;
    Model m;
    Partition p;
    fx_spec(&s);
    fx_gpt(&s, 128, 25600, 160, 51200, 2048);
    s.parallel.tp = 8, s.parallel.pp = 64, s.parallel.dp = 1, s.parallel.microbatches = 64;
    fx_batch(&s);
    model_build(&s, &m);
    part_build(&s, &m, &p);
    for (int i = 0; i < 64; i++) CHECK_EQ(p.chunk_layers[i], 2);
    CHECK(p.classes[0].chunks[0].embed && p.classes[63].chunks[0].head);
    /* a head worth more than a layer moves a layer off the last stage */
    fx_gpt(&s, 8, 64, 4, 100000, 32);
    s.parallel.tp = 1, s.parallel.pp = 4;
    model_build(&s, &m);
    part_build(&s, &m, &p);
    CHECK(p.chunk_layers[3] < p.chunk_layers[0]);
    CHECK_EQ(p.chunk_layers[0] + p.chunk_layers[1] + p.chunk_layers[2] + p.chunk_layers[3], 8);
    int64_t given[] = {1, 3, 3, 1};
    s.parallel.stage_layers = (IntList){given, 4};
    CHECK(part_check(&s, false));
    part_build(&s, &m, &p);
    for (int i = 0; i < 4; i++) CHECK_EQ(p.chunk_layers[i], given[i]);
    given[3] = 2;                           /* 9 layers: rejected */
    CHECK(!part_check(&s, false));
    s.parallel.stage_layers.n = 0;
    s.parallel.schedule = SCHED_INTERLEAVED, s.parallel.virtual_stages = 2, s.parallel.microbatches = 8;
    fx_batch(&s);
    CHECK(part_check(&s, false));
    part_build(&s, &m, &p);
    CHECK_EQ(p.classes[1].nchunks, 2);
    CHECK_EQ(p.classes[1].chunks[1].model_chunk, 5);      /* chunk c of stage r is model chunk c·pp + r */
    CHECK_EQ(p.classes[1].chunks[1].first_layer, 5);
    CHECK(p.classes[3].chunks[1].head && !p.classes[3].chunks[0].head);
    s.parallel.microbatches = 6;            /* Megatron: microbatches % pp == 0 */
    fx_batch(&s);
    CHECK(!part_check(&s, false));
}

/* Activation bytes of one layer for a GPT of the given layout. */
static ActBytes acts(int64_t b, int64_t tp, bool sp, int pol)
{
    Spec s;
    Model m;
    Partition p;
    fx_spec(&s);
    fx_gpt(&s, 4, 1024, 16, 50304, 2048);
    s.train.micro_batch = b;
    s.parallel.tp = tp;
    s.parallel.sequence_parallel = sp;
    s.checkpointing.activations = pol;
    fx_batch(&s);
    model_build(&s, &m);
    part_build(&s, &m, &p);
    return p.act;
}

/* Korthikanti's table without dropout masks and with fused attention: 32sbh
 * bytes (16-bit) of tensors, LayerNorm statistics 2 × 8 bytes per token, the
 * softmax statistics 4 bytes per head and token instead of the s² terms. */
static void test_activations(void)
{
    const int64_t S = 2048, H = 1024, A = 16;
    for (int64_t b = 1; b <= 4; b *= 2) {
        ActBytes a = acts(b, 1, false, CKPT_NONE);
        CHECK_EQ(a.x + a.saved[CKPT_NONE], 32 * S * b * H + 16 * S * b + 4 * A * S * b);
        CHECK_EQ(a.attn, 2 * S * b * H + 4 * A * S * b);        /* selective recomputes o and lse */
        CHECK_EQ(a.saved[CKPT_SELECTIVE], a.saved[CKPT_NONE] - a.attn);
        CHECK_EQ(a.saved[CKPT_FULL], 0);
        CHECK_EQ(a.ckpt, 2 * S * b * H);                        /* full: the layer input only */
    }
    /* linear in the micro-batch, for every quantity */
    ActBytes a1 = acts(1, 2, true, CKPT_NONE), a3 = acts(3, 2, true, CKPT_NONE);
    CHECK_EQ(a3.x, 3 * a1.x);
    for (int pol = 0; pol < 3; pol++) {
        CHECK_EQ(a3.saved[pol], 3 * a1.saved[pol]);
        CHECK_EQ(a3.fwd_scratch[pol], 3 * a1.fwd_scratch[pol]);
    }
    CHECK_EQ(a3.bwd_scratch, 3 * a1.bwd_scratch);
    /* divided by t under tp + sequence parallelism */
    ActBytes one = acts(2, 1, false, CKPT_NONE);
    for (int64_t t = 2; t <= 8; t *= 2) {
        ActBytes a = acts(2, t, true, CKPT_NONE);
        CHECK_EQ((a.x + a.saved[CKPT_NONE]) * t, one.x + one.saved[CKPT_NONE]);
        CHECK_EQ(a.ckpt * t, one.ckpt);
        /* tp without sp: the norms' regions stay whole (8sbh + 24sbh/t) */
        ActBytes n = acts(2, t, false, CKPT_NONE);
        CHECK_EQ(n.x + n.saved[CKPT_NONE], 8 * S * 2 * H + 24 * S * 2 * H / t + 16 * S * 2 + 4 * A * S * 2 / t);
    }
    /* sp + checkpointing: the generated forward's scratch, laid out by lifetime, at
     * least the SP graph's peak (act.c's bound).  Under full, that is at fc1 (x2's shard,
     * the gathered norm output, fc1: sbh(1 + 5/t)) or at the activation (x2's shard,
     * fc1, act: 9sbh/t); never under sbh·2 + 8s·b, whatever the policy. */
    for (int64_t t = 2; t <= 8; t *= 2) {
        const int64_t sbh = S * 2 * H * 2;
        ActBytes f = acts(2, t, true, CKPT_FULL);
        CHECK_EQ(f.fwd_scratch[CKPT_FULL], (t + 5 > 9 ? t + 5 : 9) * sbh / t);
        for (int pol = 0; pol < 3; pol++) CHECK(f.fwd_scratch[pol] >= sbh + 8 * S * 2);
    }
}

/* The layer backward's scratch is what the generated backward packs (emit.c
 * carve_bwd): GPT's fused GELU backward has no dact; tp > 1 keeps x2's
 * gradient in d1; sp keeps the norms' output gradients in the parts'
 * partial sums and the weight GEMMs read the regathered norm outputs (the
 * norm's backward is an op of its own on the shard, with norm_scratch: its
 * statistics), so neither is scratch.  GPT (sbh = s·b·h·2 bytes): tp 1
 * peaks at fc1 (dx2, dln2, dfc1: 6sbh), tp t at fc1 without dx2 (sbh(1 +
 * 4/t)), sp without dln2 (4sbh/t).  SwiGLU peaks at the activation's
 * backward (dx2, dact, dgate, dup: s·b·(h + 3f)·2 at tp 1). */
static void test_bwd_scratch(void)
{
    const int64_t S = 2048, H = 1024, sb = S * 2, sbh = sb * H * 2;
    CHECK_EQ(acts(2, 1, false, CKPT_NONE).bwd_scratch, 6 * sbh);
    for (int64_t t = 2; t <= 8; t *= 2) {
        CHECK_EQ(acts(2, t, false, CKPT_NONE).bwd_scratch, sbh + 4 * sbh / t);
        CHECK_EQ(acts(2, t, true, CKPT_NONE).bwd_scratch, 4 * sbh / t);
        CHECK_EQ(acts(2, t, true, CKPT_FULL).bwd_scratch, 4 * sbh / t);
        CHECK_EQ(acts(2, t, true, CKPT_NONE).norm_scratch, 8 * sb / t);     /* mean and rstd of its tokens */
    }
    const int64_t LH = 1024, F = 2816, T = 4096;
    for (int64_t t = 1; t <= 4; t *= 2)
        for (int sp = 0; sp < 2; sp++) {
            Spec s;
            Model m;
            Partition p;
            fx_spec(&s);
            fx_llama(&s, 4, LH, 16, F);
            s.parallel.tp = t;
            s.parallel.sequence_parallel = sp;
            fx_batch(&s);
            model_build(&s, &m);
            part_build(&s, &m, &p);
            int64_t act = T * 2 * ((t == 1 ? LH : 0) + 3 * F / t);                 /* dx2, dact, dgate, dup */
            int64_t up = T * 2 * ((t == 1 ? LH : 0) + LH + 2 * F / t);              /* dx2, dln2, dgate, dup */
            int64_t qkv = T * 2 * (LH + 3 * LH / t);                                /* dqkv, dln1 */
            if (sp && t > 1) up -= T * 2 * LH, qkv -= T * 2 * LH;   /* dln2, dln1: the parts' partial sums */
            int64_t want = act > up ? act : up;
            CHECK_EQ(p.act.bwd_scratch, want > qkv ? want : qkv);
        }
}

/* Microbatches in flight: 1F1B p - stage, GPipe m, interleaved Megatron's
 * warm-up + 1; every order runs each forward before its backward. */
static void test_pipeline_orders(void)
{
    Spec s;
    Model m;
    Partition p;
    fx_spec(&s);
    s.model.layers = 8;
    s.parallel.pp = 4, s.parallel.microbatches = 8;
    fx_batch(&s);
    for (int sch = 0; sch < 3; sch++) {
        s.parallel.schedule = sch;
        s.parallel.virtual_stages = sch == SCHED_INTERLEAVED ? 2 : 1;
        model_build(&s, &m);
        part_build(&s, &m, &p);
        for (int st = 0; st < 4; st++) {
            int v = (int)p.v, want = sch == SCHED_GPIPE ? 8 : sch == SCHED_1F1B ? 4 - st
                                    : (4 - st - 1) * 2 + (v - 1) * 4 + 1;
            CHECK_EQ(sched_max_in_flight(&p, st), want);
            PipeUnit u[64];
            int n = sched_pipeline_order(&p, st, u);
            CHECK_EQ(n, 2 * 8 * v);
            int done[8][2] = {{0}};
            for (int i = 0; i < n; i++) {
                if (u[i].bwd) CHECK(done[u[i].mb][u[i].chunk] == 1);
                done[u[i].mb][u[i].chunk] += u[i].bwd ? 2 : 1;
            }
            for (int k = 0; k < 8; k++)
                for (int c = 0; c < v; c++) CHECK_EQ(done[k][c], 3);
        }
    }
    /* 1F1B with fewer microbatches than stages keeps all of them */
    s.parallel.schedule = SCHED_1F1B, s.parallel.virtual_stages = 1, s.parallel.microbatches = 2;
    fx_batch(&s);
    part_build(&s, &m, &p);
    CHECK_EQ(sched_max_in_flight(&p, 0), 2);
}

/* Grouped-query attention with fewer kv heads than tp (Megatron): Llama with
 * 8 heads, 2 kv heads (head dim 8) at tp 4 — k/v SPLIT_KV, kv head r / 2 on
 * tp rank r (rows [8·(r/2), 8·(r/2) + 8)), q split 4 ways; one kv head stays
 * SPLIT_NONE (every rank), kv = tp plain rows; kv 3 of tp 4 is refused. */
static void test_kv_split(void)
{
    static const int64_t want[4][2] = {{0, 8}, {0, 8}, {8, 16}, {8, 16}};
    for (int zero = 0; zero <= 3; zero += 3) {
        Spec s;
        Model m;
        Partition p;
        fx_spec(&s);
        fx_llama(&s, 2, 64, 8, 128);
        s.model.kv_heads = 2, s.model.vocab = 256, s.model.seq_len = 32;
        s.parallel.tp = 4, s.parallel.dp = 2, s.zero.stage = zero;
        fx_batch(&s);
        CHECK(part_check(&s, false));
        model_build(&s, &m);
        part_build(&s, &m, &p);
        CHECK_EQ(model_kv_rank(&m), 1);
        check_tp_slices(&p, &m);
        check_stages_cover(&p, &m);
        check_segments(&p, &p.classes[0]);
        if (zero) check_ownership(&p, &p.classes[0]);
        int kv_tensors = 0;
        for (int i = 0; i < m.nt; i++) {
            const Tensor *t = &m.t[i];
            int dim;
            int64_t b, e;
            if (t->role == R_Q_W) {
                CHECK_EQ(t->split, SPLIT_ROWS);
                part_tp_slice(&p, t, 3, &dim, &b, &e);
                CHECK(dim == 0 && b == 48 && e == 64);
            }
            if (t->role != R_K_W && t->role != R_V_W) continue;
            kv_tensors++;
            CHECK_EQ(t->split, SPLIT_KV);
            CHECK_EQ(t->rows_mem, 16);
            for (int64_t r = 0; r < 4; r++) {
                part_tp_slice(&p, t, r, &dim, &b, &e);
                CHECK(dim == 0 && b == want[r][0] && e == want[r][1]);
            }
            for (int k = 0; k < p.classes[0].ntensors; k++) {
                const ClassTensor *ct = &p.classes[0].tensors[k];
                if (ct->tensor == i) CHECK(ct->rows == 8 && ct->cols == 64 && ct->numel == 8 * 64);
            }
        }
        CHECK_EQ(kv_tensors, 4);
        /* one kv head: replicated on all of tp; four: one per rank */
        for (int64_t kv = 1; kv <= 4; kv *= 4) {
            s.model.kv_heads = kv;
            CHECK(part_check(&s, false));
            model_build(&s, &m);
            part_build(&s, &m, &p);
            check_tp_slices(&p, &m);
            check_stages_cover(&p, &m);
            for (int i = 0; i < m.nt; i++)
                if (m.t[i].role == R_K_W) CHECK_EQ(m.t[i].split, kv == 1 ? SPLIT_NONE : SPLIT_ROWS);
        }
        s.model.heads = 12, s.model.kv_heads = 3, s.model.hidden = 96;   /* 3 kv heads do not divide tp 4 */
        CHECK(!part_check(&s, false));
    }
}

/* Problems the planner reports at the key, and layouts it rejects. */
static void test_checks(void)
{
    Spec s;
    fx_spec(&s);
    s.parallel.tp = 3;                      /* 4 heads */
    CHECK(!part_check(&s, false));
    fx_spec(&s);
    s.parallel.pp = 8;                      /* 4 layers */
    fx_batch(&s);
    CHECK(!part_check(&s, false));
    fx_spec(&s);
    s.train.global_batch = 3;
    CHECK(!part_check(&s, false));
    fx_spec(&s);
    s.parallel.tp = 2, s.parallel.sequence_parallel = true, s.model.seq_len = 33;
    CHECK(!part_check(&s, false));
    fx_spec(&s);
    CHECK(part_check(&s, false));
    /* reported: the message says what and the hint how */
    char *text = NULL;
    size_t len = 0;
    diag_stream = open_memstream(&text, &len);
    diag_reset();
    s.parallel.tp = 3;
    CHECK(!part_check(&s, true));
    fclose(diag_stream);
    diag_stream = NULL;
    CHECK(strstr(text, "error: tp 3 does not divide heads 4") != NULL);
    CHECK(strstr(text, "hint: tp must divide the number of heads") != NULL);
    CHECK_EQ(diag_errors, 2);               /* heads, and ffn 256 */
    free(text);
}

int main(void)
{
    test_ranks();
    test_matrix();
    test_stages();
    test_activations();
    test_bwd_scratch();
    test_pipeline_orders();
    test_checks();
    test_kv_split();
    arena_free(&g_arena);
    return fx_done("test_part");
}
