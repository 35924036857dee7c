/* test_verify.c — the schedule verifier (verify.c).
 *
 *  - mutation tests on real plans: (a) turning one OP_WAIT into a no-op —
 *    a dp-comm wait for the gradients' producer, a compute wait for a
 *    received activation, a tp-comm wait for a layer part, and a wait that
 *    exists only so an arena region is not reused too early; (b) swapping
 *    two collectives of a group that spans classes in one class; (c)
 *    dropping a pipeline receive; (d) moving a buffer's offset so that two
 *    live buffers share bytes, and (d') random moves of buffers, to random
 *    offsets and to other buffers' byte edges, whose overlap reports must
 *    match a brute-force check of every pair; (e) a split backward's weight op moved before
 *    its data op, or made another part's; (f) under sequence parallelism a
 *    weight op's wait for its part's regathered input dropped, or the weight
 *    op moved above it; (g) under sequence parallelism tp-comm's wait for a
 *    forward norm op, whose output shard the all-gather reads, dropped; (h)
 *    ZeRO-3's per-module waits: a later module's inner wait dropped, moved
 *    after its op, or naming a unit the op does not use; each must be caught
 *    and named; and the shared definition (sched_gather_of) pairs each inner
 *    wait with exactly one of its op's reads;
 *    (i) under tp_comm_overlap = full a wait for a token-row chunk's GEMM, or for
 *    a part's last chunk all-reduce, dropped; each must be caught and named;
 *  - a schedule stripped of its cross-stream events fails;
 *  - the verifier passes on a matrix of 60 layouts (tp, pp, dp, ZeRO 0-3,
 *    gpipe / 1f1b / interleaved, offload none / cpu / nvme, checkpointing
 *    none / full / selective / partitioned / cpu, micro-batches, sequence
 *    parallelism, tp_comm_overlap none / wgrad / full, fp16), each planned from spec
 *    text with overrides.
 */
#include "plan_text.h"

/* ---- mutation helpers ---------------------------------------------------------------- */

/* Turns op i of class c into a wait for nothing (a no-op). */
static void mut_noop(Plan *mp, int c, int i)
{
    Op *o = &mp->sched.classes[c].ops[i];
    o->kind = OP_WAIT, o->aux = -1, o->nrd = o->nwr = 0, o->bytes = 0, o->flops = 0;
}

/* Swaps ops i and j of class c (the waits naming them keep their indices). */
static void mut_swap(Plan *mp, int c, int i, int j)
{
    Op *ops = mp->sched.classes[c].ops, t = ops[i];
    ops[i] = ops[j], ops[j] = t;
}

/* The n-th OP_WAIT of class c on stream `stream` whose target has `kind`
 * and whose next op on the same stream has `next_kind` (either -1: any). */
static int find_wait(const Plan *mp, int c, int stream, int kind, int next_kind, int nth)
{
    const Sched *s = &mp->sched.classes[c];
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        if (o->kind != OP_WAIT || o->stream != stream || o->aux < 0) continue;
        if (kind >= 0 && s->ops[o->aux].kind != kind) continue;
        int j = i + 1;
        while (j < s->nops && s->ops[j].stream != stream) j++;
        if (next_kind >= 0 && (j >= s->nops || s->ops[j].kind != next_kind)) continue;
        if (nth-- == 0) return i;
    }
    return -1;
}

/* Verifies mp, expecting a failure whose report says `what`. */
static void expect_caught(const Plan *mp, const char *what, const char *mutation)
{
    const char *rep;
    bool ok = pt_verify(mp, &rep);
    if (ok || !strstr(rep, "internal error: schedule of stage") || !strstr(rep, what)) {
        fprintf(stderr, "%s: not caught as \"%s\"; the verifier said:\n%s", mutation, what, rep);
        failures++;
    }
}

/* Turns op i of class c into a no-op, expects the verifier to report
 * `what`, and puts the op back. */
static void expect_noop_caught(Plan *mp, int c, int i, const char *what, const char *mutation)
{
    Op keep = mp->sched.classes[c].ops[i];
    mut_noop(mp, c, i);
    expect_caught(mp, what, mutation);
    mp->sched.classes[c].ops[i] = keep;
}

/* ---- (a) deleting one event ----------------------------------------------------------- */

static void test_drop_wait(void)
{
    const char *rep;
    Plan *mp = pt_planv("parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "zero.stage=2",
                           "zero.overlap_comm=on", "parallel.microbatches=4", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    CHECK(pt_verify(mp, &rep));
    /* the dp stream waits for the op that completed a bucket (the backward,
     * or with tp the all-reduce completing its replicated gradients) */
    int w = find_wait(mp, 0, ST_DP_COMM, -1, OP_GRAD_REDUCE, 0);
    CHECK(w >= 0);
    if (w >= 0) {
        int aux = mp->sched.classes[0].ops[w].aux;
        mut_noop(mp, 0, w);
        expect_caught(mp, "not ordered after its write by an event", "(a) dp-comm wait for the gradients' producer");
        mp->sched.classes[0].ops[w] = (Op){.kind = OP_WAIT, .stream = ST_DP_COMM, .aux = aux, .part_lo = -1, .part_hi = -1};
        CHECK(pt_verify(mp, &rep));
    }
    /* the received activation, sent in tp slices (pp_scatter_gather): the tp
     * stream waits for the receive before gathering the slices, the compute
     * stream for the gather */
    w = find_wait(mp, 1, ST_TP_COMM, OP_RECV_FWD, OP_TP_ALLGATHER, 0);
    CHECK(w >= 0);
    if (w >= 0) expect_noop_caught(mp, 1, w, "act.", "(a) tp-comm wait for a receive");
    w = find_wait(mp, 1, ST_COMPUTE, OP_TP_ALLGATHER, -1, 0);
    CHECK(w >= 0);
    if (w >= 0) expect_noop_caught(mp, 1, w, "read of act.", "(a) compute wait for the gathered boundary");
    /* the tp stream waits for the attention part whose partial sums it reduces */
    w = find_wait(mp, 0, ST_TP_COMM, OP_LAYER_FWD, OP_TP_ALLREDUCE, 0);
    CHECK(w >= 0);
    if (w >= 0)
        expect_noop_caught(mp, 0, w, "not ordered after its write by an event", "(a) tp-comm wait for a layer part");
    CHECK(pt_verify(mp, &rep));
}

/* ---- (h) ZeRO-3's per-module waits ------------------------------------------------------ */

/* Each module of a layer op waits for its own unit's gather inside the op
 * (Op.inner): dropping one module's wait must be caught even though the
 * op's other modules wait for gathers issued after it on the same stream;
 * so must the wait moved after the op (its module would read the unit
 * before it), and an inner wait for a unit the op does not compute with. */
static void test_module_waits(void)
{
    const char *rep;
    Plan *mp = pt_planv("parallel.dp=2", "zero.stage=3", "zero.param_persistence_threshold=0",
                        "checkpointing.activations=full", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    CHECK(pt_verify(mp, &rep));
    Sched *s = &mp->sched.classes[0];
    /* the definition the event pass, the simulation and the verifier share
     * (sched_gather_of), which the verifier cannot check against itself: an
     * inner wait's gather makes exactly one buffer its op reads (one too
     * permissive would let every module's wait cover every unit) */
    int ninner = 0;
    for (int i = 0; i < s->nops; i++) {
        int at, n = 0;
        if (sched_wait_unit(s, i, &at) < 0) continue;
        for (int r = 0; r < s->ops[at].nrd; r++) n += sched_gather_of(&s->ops[s->ops[i].aux], &s->bufs[s->ops[at].rd[r]]);
        CHECK(n == 1);
        ninner++;
    }
    CHECK(ninner > 0);
    /* the last inner wait of the first op with several (a later module's) */
    int w = -1, op = -1;
    for (int i = 0; i < s->nops && w < 0; i++) {
        int at, k = sched_wait_unit(s, i, &at);
        if (k > 0) w = i, op = at;
    }
    CHECK(w >= 0);
    if (w < 0) return;
    expect_noop_caught(mp, 0, w, "read of params.gathered", "(h) a later module's inner wait dropped");
    CHECK(pt_verify(mp, &rep));
    /* moved after its op: the op reads the unit without it */
    Op *ops = s->ops, keep = ops[w];
    memmove(&ops[w], &ops[w + 1], sizeof(Op) * (size_t)(op - w));
    ops[op] = keep;
    for (int i = 0; i < s->nops; i++)   /* the waits naming the ops that moved up one */
        if (ops[i].kind == OP_WAIT && ops[i].aux > w && ops[i].aux <= op) ops[i].aux--;
    expect_caught(mp, "read of params.gathered", "(h) an inner wait moved after its module's op");
    /* an inner wait naming a gather of a unit the next op does not use */
    Plan *mp2 = pt_planv("parallel.dp=2", "zero.stage=3", "zero.param_persistence_threshold=0", NULL);
    CHECK(mp2 != NULL);
    if (!mp2) return;
    s = &mp2->sched.classes[0];
    int g = -1;
    for (int i = 0; i < s->nops && g < 0; i++)
        if (s->ops[i].kind == OP_GATHER && s->ops[i].layer == LAYER_PRE) g = i;
    for (int i = 0; i < s->nops && g >= 0; i++) {
        int at;
        if (sched_wait_unit(s, i, &at) >= 0 && i > g) {
            s->ops[i].aux = g;
            break;
        }
    }
    CHECK(g >= 0);
    expect_caught(mp2, "an inner wait for no unit", "(h) an inner wait for another op's unit");
}

/* ---- (i) tp_comm_overlap = full: the token-row chunks' waits ---------------------------- */

/* tp_comm_overlap = full, with and without sequence parallelism: every
 * token-row chunk's order is proven.  Each tp stream wait for a chunk's GEMM
 * (its collective reads the rows the GEMM writes), each compute wait for
 * a part's last chunk collective (the next part reads the whole output), and
 * under sequence parallelism each compute wait of a column chunk for its own
 * all-gather (its GEMMs read the rows the all-gather writes), dropped alone,
 * is caught; the chunks' collectives and the next chunk's GEMM, which touch disjoint rows, need no
 * event between them (the verifier passes as the schedule is). */
static void test_drop_chunk_wait(void)
{
    for (int sp = 0; sp < 2; sp++) {
        const char *rep;
        Plan *mp = pt_planv("parallel.tp=2", "parallel.dp=2", "parallel.tp_comm_overlap=full",
                            "parallel.tp_overlap_chunks=4", "parallel.microbatches=2",
                            sp ? "parallel.sequence_parallel=on" : "parallel.sequence_parallel=off", NULL);
        CHECK(mp != NULL);
        if (!mp) return;
        CHECK(pt_verify(mp, &rep));
        Sched *s = &mp->sched.classes[0];
        int chunk_waits = 0, last_waits = 0, col_waits = 0;
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind != OP_WAIT || o->aux < 0 || o->mb != 0) continue;
            const Op *t = &s->ops[o->aux];
            bool chunk = o->stream == ST_TP_COMM && t->kind == OP_LAYER_FWD && t->grads == GR_ROWS;
            bool last = o->stream == ST_COMPUTE && (t->kind == OP_TP_ALLREDUCE || t->kind == OP_TP_REDUCE_SCATTER) &&
                        t->rows == mp->part.tpc - 1;
            bool col = o->stream == ST_COMPUTE && t->kind == OP_TP_ALLGATHER && t->rows >= 0 && i + 1 < s->nops &&
                       s->ops[i + 1].grads == GR_COLS && s->ops[i + 1].rows == t->rows;
            if (col) {
                col_waits++;
                expect_noop_caught(mp, 0, i, "by an event", "(i) a column chunk's wait for its all-gather");
                continue;
            }
            /* under sp the head reads the last layer's output gathered again (the gather follows
               the reduce-scatter on the tp stream): that wait has nothing to order */
            if (!chunk && !last) continue;
            if (last && sp && t->layer == mp->model.l - 1 && t->sub == SUB_MLP) continue;
            chunk_waits += chunk, last_waits += last;
            expect_noop_caught(mp, 0, i, "by an event",
                               chunk ? "(i) tp-comm wait for a chunk's GEMM" : "(i) compute wait for the last chunk");
        }
        CHECK_EQ(chunk_waits, 4 * 2 * (int)mp->model.l);      /* every chunk of both parts of every layer */
        CHECK_EQ(last_waits, 2 * (int)mp->model.l - sp);
        CHECK_EQ(col_waits, sp ? 4 * 2 * (int)mp->model.l : 0);  /* every column chunk of both parts */
        CHECK(pt_verify(mp, &rep));
    }
}

/* Some wait exists only so that an arena region is not handed on while a use
 * on another stream may be pending: deleting it is caught by the arena check
 * alone (no buffer of the op depends on the awaited one). */
static void test_drop_fence(void)
{
    Plan *mp = pt_planv("parallel.tp=2", "parallel.dp=2", "zero.stage=3", "parallel.microbatches=2", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    int arena_only = 0, caught = 0, waits = 0;
    for (int c = 0; c < mp->mem.nclasses; c++) {
        Sched *s = &mp->sched.classes[c];
        for (int i = 0; i < s->nops; i++) {
            if (s->ops[i].kind != OP_WAIT || s->ops[i].aux < 0) continue;
            Op keep = s->ops[i];
            const char *rep;
            waits++;
            mut_noop(mp, c, i);
            if (!pt_verify(mp, &rep)) {
                caught++;
                if (strstr(rep, "arena bytes while a use on another stream may be pending") &&
                    !strstr(rep, "by an event"))
                    arena_only++;
            }
            s->ops[i] = keep;
        }
    }
    CHECK(arena_only > 0);
    CHECK(caught > waits / 4);   /* most waits are needed (others are implied by later ones) */
}

/* The builder's list with every event on the communication and copy
 * streams deleted fails: the verifier is not vacuous. */
static void test_no_events(void)
{
    Plan *mp = pt_planv("parallel.tp=2", "parallel.dp=2", "zero.stage=1", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    Sched *s = &mp->sched.classes[0];
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].kind == OP_WAIT && s->ops[i].stream != ST_COMPUTE) s->ops[i].aux = -1;
    expect_caught(mp, "not ordered after its write by an event", "events stripped");
}

/* ---- (b) two collectives of one group swapped in one class ----------------------------- */

static void test_swap_collectives(void)
{
    /* fp16 with clipping: the overflow flag's and the norm's all-reduce over
     * the world, a group spanning both stages */
    Plan *mp = pt_planv("parallel.pp=2", "parallel.dp=2", "precision.dtype=fp16", "train.grad_clip=1.0",
                           "parallel.microbatches=2", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    const char *rep;
    CHECK(pt_verify(mp, &rep));
    int a = pt_find(mp, 1, OP_GRAD_NORM, ST_DP_COMM, 0), b = pt_find(mp, 1, OP_GRAD_NORM, ST_DP_COMM, 1);
    CHECK(a >= 0 && b > a);
    if (a < 0 || b < 0) return;
    CHECK_EQ(mp->sched.classes[1].ops[a].aux, 1);       /* the overflow flag first, as Megatron */
    mut_swap(mp, 1, a, b);
    expect_caught(mp, "collectives in a different order or size across the world group", "(b) swapped collectives");
    mut_swap(mp, 1, a, b);
    CHECK(pt_verify(mp, &rep));
    /* the same for the tied embedding's all-reduce: a size changed in one class */
    mp = pt_planv("parallel.pp=2", "parallel.dp=2", "parallel.microbatches=2", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    int t = pt_find(mp, 1, OP_TIED_REDUCE, -1, 0);
    CHECK(t >= 0 && pt_find(mp, 0, OP_TIED_REDUCE, -1, 0) >= 0);
    if (t < 0) return;
    mp->sched.classes[1].ops[t].bytes /= 2;
    expect_caught(mp, "the embed group", "(b) a collective of another size");
    /* a collective of the tied group issued by a class outside it */
    mp = pt_planv("parallel.pp=4", "parallel.microbatches=4", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    int w = pt_find(mp, 1, OP_GRAD_SUMSQ, -1, 0);
    if (w < 0) w = pt_find(mp, 1, OP_OPT_STEP, -1, 0);
    CHECK(w >= 0);
    if (w < 0) return;
    mp->sched.classes[1].ops[w].kind = OP_TIED_REDUCE;
    mp->sched.classes[1].ops[w].stream = ST_PP_COMM;
    expect_caught(mp, "issued outside it", "(b) a collective outside its group");
}

/* ---- (c) a pipeline receive dropped -------------------------------------------------- */

static void test_drop_recv(void)
{
    static const char *const scheds[] = {"gpipe", "1f1b", "interleaved"};
    for (int k = 0; k < 3; k++) {
        Plan *mp = pt_planv("parallel.pp=4", arena_printf(&g_arena, "parallel.schedule=%s", scheds[k]),
                               "parallel.microbatches=8", NULL);
        CHECK(mp != NULL);
        if (!mp) continue;
        const char *rep;
        CHECK(pt_verify(mp, &rep));
        int r = pt_find(mp, 2, OP_RECV_FWD, ST_PP_COMM, 3);
        CHECK(r >= 0);
        if (r < 0) continue;
        mut_noop(mp, 2, r);
        expect_caught(mp, "a send without its receive", "(c) dropped receive");
        /* a receive moved behind the send that needs its data: a deadlock */
        mp = pt_planv("parallel.pp=2", arena_printf(&g_arena, "parallel.schedule=%s", scheds[k]),
                      "parallel.microbatches=4", NULL);
        CHECK(mp != NULL);
        if (!mp) continue;
        int rb = pt_find(mp, 0, OP_RECV_BWD, ST_PP_COMM, 0), sf = -1;
        const Sched *s = &mp->sched.classes[0];
        for (int i = rb + 1; rb >= 0 && i < s->nops && sf < 0; i++)
            if (s->ops[i].kind == OP_SEND_FWD) sf = i;
        if (rb < 0 || sf < 0) continue;      /* gpipe sends every forward before it receives */
        mut_swap(mp, 0, rb, sf);
        const char *rep2;
        bool ok = pt_verify(mp, &rep2);
        (void)ok;       /* swapped ops may be caught as a hazard or a deadlock; either is a failure */
        CHECK(!ok);
    }
}

/* ---- (d) an arena offset moved so that two buffers overlap ------------------------------ */

static void test_overlap(void)
{
    Plan *mp = pt_planv("parallel.tp=2", "parallel.dp=2", "zero.stage=2", "parallel.microbatches=2", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    Sched *s = &mp->sched.classes[0];
    int a = -1, b = -1;
    for (int i = 0; i < s->nbufs && b < 0; i++)
        for (int j = 0; j < s->nbufs && b < 0; j++) {
            const Buffer *x = &s->bufs[i], *y = &s->bufs[j];
            if (x->space != SPACE_DEVICE || y->space != SPACE_DEVICE || x->persistent || y->persistent) continue;
            if (x->offset + x->bytes <= y->offset && x->first <= y->last && y->first <= x->last && x->bytes > 512)
                a = i, b = j;
        }
    CHECK(b >= 0);
    if (b < 0) return;
    int64_t keep = s->bufs[b].offset;
    s->bufs[b].offset = s->bufs[a].offset + s->bufs[a].bytes / 2;     /* shrunk into a */
    expect_caught(mp, "share device arena bytes while both are live", "(d) overlapping buffers");
    s->bufs[b].offset = keep;
    const char *rep;
    CHECK(pt_verify(mp, &rep));
}

/* ---- (d') the arena's segment trees against brute force --------------------------------- */

/* The verifier sweeps each arena with segment trees over byte offsets
 * (verify.c, check 4); this replays its overlap rule by brute force over
 * every pair.  A buffer born (in list order; ties in index order, the
 * order the sweep takes them) while an earlier-born buffer of the same
 * arena is still live and shares a byte with it is one report, so the
 * number of "share ... arena bytes" lines must equal the births that
 * brute force finds sharing. */
static bool in_arena(const Sched *s, const Buffer *b, int space)
{
    return b->space == space && b->bytes > 0 && b->first >= 0 && b->last >= b->first && b->last < s->nops;
}

static int brute_shared_births(const Sched *s, int space)
{
    int n = 0;
    for (int i = 0; i < s->nbufs; i++) {
        const Buffer *x = &s->bufs[i];
        if (!in_arena(s, x, space)) continue;
        for (int j = 0; j < s->nbufs; j++) {
            const Buffer *y = &s->bufs[j];
            if (j == i || !in_arena(s, y, space)) continue;
            bool earlier = y->first < x->first || (y->first == x->first && j < i);
            bool live = earlier && y->last >= x->first;
            bool share = y->offset < x->offset + x->bytes && x->offset < y->offset + y->bytes;
            if (live && share) {
                n++;
                break;
            }
        }
    }
    return n;
}

static int count_substr(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

/* Moves random buffers of a few layouts' first classes to random offsets
 * and to the byte edges of other buffers (touching, one byte into, exactly
 * over), and compares the verifier's overlap reports with brute force. */
static void test_arena_brute(void)
{
    static const char *layouts[][4] = {
        {"parallel.dp=2", "zero.stage=3", "parallel.microbatches=2", NULL},
        {"parallel.tp=2", "parallel.pp=2", "parallel.microbatches=4", NULL},
        {"checkpointing.activations=full", "offload.optimizer=cpu", "zero.stage=1", NULL},
    };
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int compared = 0, with_overlap = 0;
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        Plan *mp = pt_plan(layouts[l]);
        CHECK(mp != NULL);
        if (!mp) continue;
        Sched *s = &mp->sched.classes[0];
        const char *rep;
        CHECK(pt_verify(mp, &rep));
        for (int trial = 0; trial < 400; trial++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int b = (int)((rng >> 33) % (uint64_t)s->nbufs);
            Buffer *x = &s->bufs[b];
            int space = x->space;
            if (space == SPACE_NVME || !in_arena(s, x, space)) continue;
            int64_t top = 0;
            for (int j = 0; j < s->nbufs; j++)
                if (in_arena(s, &s->bufs[j], space) && s->bufs[j].offset + s->bufs[j].bytes > top)
                    top = s->bufs[j].offset + s->bufs[j].bytes;
            int64_t keep = x->offset, at;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const Buffer *y = &s->bufs[(rng >> 33) % (uint64_t)s->nbufs];
            switch ((rng >> 20) % 5) {
            case 0: at = y->offset + y->bytes; break;           /* touching after y */
            case 1: at = y->offset + y->bytes - 1; break;       /* one byte into y */
            case 2: at = y->offset - x->bytes; break;           /* touching before y */
            case 3: at = y->offset; break;                      /* over y */
            default: at = (int64_t)((rng >> 8) % (uint64_t)(top > x->bytes ? top - x->bytes + 1 : 1)); break;
            }
            if (at < 0 || at + x->bytes > top) continue;        /* inside the arena as planned */
            x->offset = at;
            int want = brute_shared_births(s, space);
            pt_verify(mp, &rep);
            const char *what = space == SPACE_DEVICE ? "share device arena bytes" : "share host arena bytes";
            int got = count_substr(rep, what);
            bool truncated = strstr(rep, "more schedule failures not shown") != NULL;
            if (!(truncated ? (got > 0) == (want > 0) && got <= want : got == want)) {
                fprintf(stderr, "arena sweep vs brute force, layout %zu buffer %s at %lld: %d reports, %d "
                        "expected\n%s", l, x->name, (long long)at, got, want, rep);
                failures++;
            }
            compared++;
            with_overlap += want > 0;
            x->offset = keep;
        }
        CHECK(pt_verify(mp, &rep));
    }
    /* the trials must exercise both verdicts */
    CHECK(compared >= 300);
    CHECK(with_overlap >= 50 && compared - with_overlap >= 50);
    printf("test_verify: %d arena moves checked against brute force (%d with overlaps)\n", compared, with_overlap);
}

/* ---- (e) a split backward's weight op before its data op ------------------------------ */

static void test_split_order(void)
{
    Plan *mp = pt_planv("parallel.tp=2", "parallel.microbatches=2", NULL);
    CHECK(mp != NULL);
    if (!mp) return;
    Sched *s = &mp->sched.classes[0];
    int d = -1, w = -1;
    for (int i = 0; i < s->nops && w < 0; i++) {
        if (s->ops[i].kind != OP_LAYER_BWD) continue;
        if (s->ops[i].grads == GR_DATA) d = i;
        if (s->ops[i].grads == GR_WEIGHT && d >= 0) w = i;
    }
    CHECK(d >= 0 && w > d);
    if (w < 0) return;
    mut_swap(mp, 0, d, w);
    expect_caught(mp, "a weight op without its data op just before it", "(e) weight op first");
    mut_swap(mp, 0, d, w);
    s->ops[w].sub = s->ops[w].sub == SUB_MLP ? SUB_ATTN : SUB_MLP;     /* another part's weight op */
    expect_caught(mp, "a split backward's data op not followed by its weight op", "(e) another part's weight op");
    s->ops[w].sub = s->ops[d].sub;
    const char *rep;
    CHECK(pt_verify(mp, &rep));
}

/* ---- (f) sequence parallelism: a weight op before its regather's wait --------------------- */

/* tp 2 with sequence parallelism, two microbatches, checked to verify
 * before a case mutates it (NULL if it does not plan). */
static Plan *sp_plan(void)
{
    Plan *mp = pt_planv("parallel.tp=2", "parallel.sequence_parallel=on", "parallel.microbatches=2", NULL);
    CHECK(mp != NULL);
    const char *rep;
    if (mp) CHECK(pt_verify(mp, &rep));
    return mp;
}

/* The split backward's data op runs while the part's input is regathered;
 * its weight op reads the gathered input: dropping the compute stream's wait
 * for the regather (or moving the weight op above it) must be caught. */
static void test_sp_regather_wait(void)
{
    Plan *mp = sp_plan();
    if (!mp) return;
    const char *rep;
    Sched *s = &mp->sched.classes[0];
    int w = -1;                 /* a compute wait for a regather, the weight op right after it */
    for (int i = 0; i + 1 < s->nops && w < 0; i++) {
        const Op *o = &s->ops[i];
        if (o->kind != OP_WAIT || o->stream != ST_COMPUTE || o->aux < 0) continue;
        const Op *t = &s->ops[o->aux];
        if (t->kind != OP_TP_ALLGATHER || t->nwr != 1 || s->bufs[t->wr[0]].role != BR_REGATHERED) continue;
        if (s->ops[i + 1].kind == OP_LAYER_BWD && s->ops[i + 1].grads == GR_WEIGHT) w = i;
    }
    CHECK(w >= 0);
    if (w < 0) return;
    expect_noop_caught(mp, 0, w, "regathered", "(f) the weight op's wait for the regathered input dropped");
    CHECK(pt_verify(mp, &rep));
    mut_swap(mp, 0, w, w + 1);      /* the weight op above its wait */
    expect_caught(mp, "regathered", "(f) the weight op before its regather's wait");
    mut_swap(mp, 0, w, w + 1);
    CHECK(pt_verify(mp, &rep));
}

/* ---- (g) sequence parallelism: a forward gather before its norm op ------------------------ */

/* The forward's norm op writes its output shard into the saved tensors on the
 * compute stream and the all-gather on tp-comm reads it: dropping tp-comm's
 * wait for the norm op must be caught (the gather would send a stale shard). */
static void test_sp_norm_gather_wait(void)
{
    Plan *mp = sp_plan();
    if (!mp) return;
    const char *rep;
    Sched *s = &mp->sched.classes[0];
    int w = -1;                 /* tp-comm's wait for a forward norm op */
    for (int i = 0; i < s->nops && w < 0; i++) {
        const Op *o = &s->ops[i];
        if (o->kind != OP_WAIT || o->stream != ST_TP_COMM || o->aux < 0) continue;
        const Op *t = &s->ops[o->aux];
        if (t->kind == OP_LAYER_FWD && t->grads == GR_NORM) w = i;
    }
    CHECK(w >= 0);
    if (w < 0) return;
    expect_noop_caught(mp, 0, w, "saved", "(g) the gather's wait for the forward's norm op dropped");
    CHECK(pt_verify(mp, &rep));
}

/* ---- the matrix ---------------------------------------------------------------------- */

/* Layout n of the matrix as overrides (arena strings, NULL-terminated). */
static const char **layout(int n)
{
    static const int tps[] = {1, 2, 4}, pps[] = {1, 2, 4}, dps[] = {1, 2, 4};
    static const char *const scheds[] = {"gpipe", "1f1b", "interleaved"};
    const char **d = arena_alloc(&g_arena, sizeof(char *) * 32);
    int k = 0, tp = tps[n % 3], pp = pps[(n / 3) % 3], dp = dps[(n / 9) % 3], zero = (n / 2) % 4;
    int sch = (n / 5) % 3, off = (n / 7) % 3, ckpt = (n / 4) % 5, m = 1 + (n / 6) % 4;
    bool sp = tp > 1 && (n / 11) % 2, fp16 = n % 7 == 3;
    if (pp == 1 && sch == 2) sch = 1;
    if (sch == 2) m = pp * (1 + m % 2);          /* interleaved: microbatches a multiple of pp */
    if (dp == 1 && zero > 0 && n % 2) zero = 0;
    if (off && zero == 0) zero = 1;
    d[k++] = arena_printf(&g_arena, "parallel.tp=%d", tp);
    d[k++] = arena_printf(&g_arena, "parallel.pp=%d", pp);
    d[k++] = arena_printf(&g_arena, "parallel.dp=%d", dp);
    d[k++] = arena_printf(&g_arena, "zero.stage=%d", zero);
    d[k++] = arena_printf(&g_arena, "parallel.schedule=%s", scheds[sch]);
    if (sch == 2) d[k++] = "parallel.virtual_stages=2";
    d[k++] = arena_printf(&g_arena, "parallel.microbatches=%d", m);
    d[k++] = sp ? "parallel.sequence_parallel=on" : "parallel.sequence_parallel=off";
    if (tp > 1 && n % 5 == 2) d[k++] = "parallel.tp_comm_overlap=none";
    if (tp > 1 && n % 5 != 2 && n % 2) d[k++] = "parallel.tp_comm_overlap=full";   /* its chunks under every other key */
    d[k++] = n % 3 == 1 ? "zero.overlap_comm=off" : "zero.overlap_comm=on";
    if (off == 1) d[k++] = "offload.optimizer=cpu";
    if (off == 2) d[k++] = "offload.optimizer=nvme", d[k++] = "offload.optimizer.path=\"/nvme\"",
                  d[k++] = "zero.sub_group_size=20000";
    if (off && zero == 3) d[k++] = off == 1 ? "offload.params=cpu" : "offload.params=nvme";
    if (off == 2 && zero == 3) d[k++] = "offload.params.path=\"/nvme\"";
    static const char *const ckpts[] = {"none", "full", "selective", "full", "full"};
    d[k++] = arena_printf(&g_arena, "checkpointing.activations=%s", ckpts[ckpt]);
    if (ckpt == 3) d[k++] = "checkpointing.partition_activations=on";
    if (ckpt == 4) d[k++] = "checkpointing.cpu=on";
    if (ckpt == 1 && n % 2) d[k++] = "checkpointing.every=2";
    if (fp16) d[k++] = "precision.dtype=fp16";
    else if (n % 2) d[k++] = "precision.dtype=bf16";
    if (n % 3 != 2) d[k++] = "train.grad_clip=1.0";
    if (zero == 3 && n % 4 == 1) d[k++] = "zero.param_persistence_threshold=0", d[k++] = "zero.max_reuse_distance=0";
    if (zero == 3 && pp > 1 && n % 2) d[k++] = "zero.gather_across_microbatches=on";
    d[k] = NULL;
    return d;
}

/* Every layout of the matrix plans and verifies. */
static void test_matrix(void)
{
    int planned = 0;
    long ops = 0;
    for (int n = 0; n < 60; n++) {
        const char **d = layout(n);
        Plan *mp = pt_plan(d);
        if (!mp) {
            failures++;
            continue;
        }
        planned++;
        for (int c = 0; c < mp->mem.nclasses; c++) ops += mp->sched.classes[c].nops;
        const char *rep;
        if (!pt_verify(mp, &rep)) {
            fprintf(stderr, "layout %d:", n);
            for (int i = 0; d[i]; i++) fprintf(stderr, " -D %s", d[i]);
            fprintf(stderr, "\n%s", rep);
            failures++;
        }
        for (int c = 0; c < mp->mem.nclasses; c++) CHECK(mem_check_overlap(&mp->mem.classes[c]));
    }
    CHECK(planned >= 50);
    printf("test_verify: %d layouts planned and verified (%ld ops)\n", planned, ops);
}

/* The reference specs verify too. */
static void test_specs(void)
{
    static const char *const specs[] = {"specs/gpt2-124m.tspec", "specs/llama2-7b.tspec", "specs/tiny-gpt.tspec",
                                        "specs/llama2-13b-8xa100.tspec"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t len;
        char *text = util_read_file(specs[i], &len, SPEC_MAX_FILE_BYTES);
        if (!text) continue;        /* run from elsewhere than the repository root */
        capture();
        sema_source = NULL;
        Item *items = spec_parse_text(specs[i], text, len);
        Spec *s = arena_alloc(&g_arena, sizeof *s);
        Plan *mp = arena_alloc(&g_arena, sizeof *mp);
        bool ok = diag_errors == 0 && sema_resolve(items, NULL, 0, s) && plan_build(s, mp, true);
        CHECK(ok);
        const char *rep;
        if (ok && !pt_verify(mp, &rep)) {
            fprintf(stderr, "%s:\n%s", specs[i], rep);
            failures++;
        }
    }
}

int main(void)
{
    test_drop_wait();
    test_drop_fence();
    test_no_events();
    test_swap_collectives();
    test_drop_recv();
    test_overlap();
    test_arena_brute();
    test_split_order();
    test_sp_regather_wait();
    test_sp_norm_gather_wait();
    test_module_waits();
    test_drop_chunk_wait();
    test_matrix();
    test_specs();
    arena_free(&g_arena);
    if (failures) {
        fprintf(stderr, "test_verify: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_verify: ok\n");
    return 0;
}
