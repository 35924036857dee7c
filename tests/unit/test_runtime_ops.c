/* test_runtime_ops.c — every op of shardrt.h through the srt_* API on a
 * context created for a 1-rank program (libshardrt_cpu.a, checking on),
 * against direct calls of the kc_* kernels:
 *  - fp32: bit-identical results for every compute op, the optimizer, the
 *    norm, casts, the 1-rank collectives, copies, NVMe round trips (O_DIRECT
 *    through io_uring, and the pread fallback on tmpfs), the data loader;
 *  - bf16 emulation: 16-bit storage, fp32 compute, one rounding per write —
 *    each op equals the kernel on the widened inputs, rounded once (fused
 *    and overlapping operands included), and the rounding is nearest-even;
 *  - no allocation after creation: the context's counter is unchanged by
 *    every op, and an allocation after start-up is an internal error;
 *  - an op larger than the program's shapes is an internal error naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data.h"
#include "cpu.h"   /* internal.h + kernels.h, and which NVMe path a context took */

static int g_checks, g_failed;

static void check(int ok, const char *what)
{
    g_checks++;
    if (!ok) {
        g_failed++;
        printf("FAIL %s\n", what);
    }
}

/* ---- inputs ------------------------------------------------------------------------- */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 40) / 16777216.0 * 2.0 - 1.0);
}

/* n random floats in [-1, 1), scaled. */
static float *rnd(int64_t n, float scale)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static float *fdup(const float *x, int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    memcpy(p, x, sizeof(float) * (size_t)n);
    return p;
}

/* x rounded to bf16 and back, in place (what 16-bit storage keeps). */
static void bf16ify(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = kc_f32_from_bf16(kc_bf16_from_f32(x[i]));
}

/* ---- views in the device arena: a bump pointer, reset per test ---------------------------- */

static int64_t g_top;

static srt_t view(srt_ctx *c, int64_t n, srt_dtype dt)
{
    srt_t t = srt_dview(c, g_top, n, dt);
    g_top += (n * ops_dtype_size(dt) + 63) / 64 * 64;
    return t;
}

/* A view holding x (converted to dt). */
static srt_t put(srt_ctx *c, const float *x, int64_t n, srt_dtype dt)
{
    srt_t t = view(c, n, dt);
    if (dt == SRT_F32) memcpy(t.p, x, sizeof(float) * (size_t)n);
    else kc_cast_f32_to_bf16(t.p, x, (size_t)n);
    return t;
}

/* Whether view t holds exactly x (fp32 bits, or bf16(x) bits). */
static int same(srt_t t, const float *x, int64_t n)
{
    if (t.dt == SRT_F32) return memcmp(t.p, x, sizeof(float) * (size_t)n) == 0;
    for (int64_t i = 0; i < n; i++)
        if (((uint16_t *)t.p)[i] != kc_bf16_from_f32(x[i])) return 0;
    return 1;
}

static const srt_t NONE = { NULL, 0, SRT_F32 };

/* The host waits for every stream: what a step boundary does; the tests
 * reuse arena offsets on other streams afterwards. */
static void sync_all(srt_ctx *c)
{
    for (int s = 0; s < SRT_NSTREAMS; s++) srt_stream_sync(c, (srt_stream)s);
}

/* ---- the program -------------------------------------------------------------------------- */

enum { B = 2, T = 8, C = 32, NH = 4, HS = 8, H = 128, V = 60, VP = 64, N = B * T };

static const srt_param g_params[] = {
    { "wte", -1, V, C, VP, SRT_SPLIT_NONE, VP, C, 0, true, 0.02f, false },
    { "wpe", -1, T, C, T, SRT_SPLIT_NONE, T, C, VP * C, true, 0.02f, false },
    { "h.0.attn.c_attn.weight", 0, 3 * C, C, 3 * C, SRT_SPLIT_NONE, 3 * C, C, 0, true, 0.02f, false },
    { "h.0.mlp.c_fc.weight", 0, 2 * H, C, 2 * H, SRT_SPLIT_NONE, 2 * H, C, 0, true, 0.02f, false },
    { "h.0.mlp.c_proj.weight", 0, C, H, C, SRT_SPLIT_NONE, C, H, 0, true, 0.02f, false },
    { "h.0.ln_1.weight", 0, C, 0, C, SRT_SPLIT_NONE, C, 0, 0, false, 0.0f, true },
    { "ln_f.weight", 1, C, 0, C, SRT_SPLIT_NONE, C, 0, 0, false, 0.0f, true },   /* the head's stage */
};
static const srt_buffer g_buffers[] = { { "acts", 0, 0, 1 << 20 } };
static srt_class g_class;
static srt_program g_prog;

static void make_program(srt_dtype dt, int64_t nvme)
{
    memset(&g_class, 0, sizeof g_class);
    g_class.params = g_params, g_class.nparams = (int)(sizeof g_params / sizeof g_params[0]);
    g_class.buffers = g_buffers, g_class.nbuffers = 1;
    g_class.device_arena = 32 << 20, g_class.host_arena = 1 << 20, g_class.nvme_bytes = nvme;
    memset(&g_prog, 0, sizeof g_prog);
    g_prog.abi = SRT_ABI_VERSION, g_prog.name = "test_runtime_ops";
    g_prog.layers = 1, g_prog.hidden = C, g_prog.heads = NH, g_prog.kv_heads = NH;
    g_prog.vocab = V, g_prog.vocab_pad = VP, g_prog.seq_len = T, g_prog.ffn = H;
    g_prog.tp = g_prog.pp = g_prog.dp = g_prog.world = 1;
    g_prog.dtype = dt;
    g_prog.micro_batch = B, g_prog.microbatches = 2, g_prog.global_batch = 2 * B;
    g_prog.steps = 10, g_prog.seed = 1, g_prog.warmup = 2;
    g_prog.lr = 1e-2, g_prog.min_lr = 1e-3, g_prog.lr_schedule = 1;
    g_prog.beta1 = 0.9, g_prog.beta2 = 0.95, g_prog.eps = 1e-8, g_prog.weight_decay = 0.1;
    g_prog.grad_clip = 1.0;
    g_prog.classes = &g_class;
}

static srt_ctx *make_ctx(srt_dtype dt, const char *nvme_dir)
{
    make_program(dt, 16 << 20);
    ctx_options o = { .check = 1, .nvme_dir = nvme_dir };
    return ctx_create(&g_prog, &o);
}

/* ---- fp32: every op against its kernel, bit for bit ---------------------------------------- */

static void test_linear_and_norms(srt_ctx *c)
{
    g_top = 0;
    float *inp = rnd(N * C, 1), *w = rnd(3 * C * C, 0.2f), *bias = rnd(3 * C, 0.1f);
    float *ref = malloc(sizeof(float) * N * 3 * C);
    kc_matmul_forward(ref, inp, w, bias, N, C, 3 * C);
    srt_t vin = put(c, inp, N * C, SRT_F32), vw = put(c, w, 3 * C * C, SRT_F32);
    srt_t vb = put(c, bias, 3 * C, SRT_F32), vout = view(c, N * 3 * C, SRT_F32);
    srt_matmul_fwd(c, SRT_COMPUTE, vout, vin, vw, vb, N, C, 3 * C);
    check(same(vout, ref, N * 3 * C), "matmul_fwd f32 = kc_matmul_forward");

    float *dout = rnd(N * 3 * C, 1), *dinp = rnd(N * C, 1), *dw = rnd(3 * C * C, 1), *db = rnd(3 * C, 1);
    srt_t vdout = put(c, dout, N * 3 * C, SRT_F32), vdinp = put(c, dinp, N * C, SRT_F32);
    srt_t vdw = put(c, dw, 3 * C * C, SRT_F32), vdb = put(c, db, 3 * C, SRT_F32);
    kc_matmul_backward(dinp, dw, db, dout, inp, w, N, C, 3 * C);
    srt_matmul_bwd(c, SRT_COMPUTE, vdinp, vdw, vdb, vdout, vin, vw, N, C, 3 * C);
    check(same(vdinp, dinp, N * C) && same(vdw, dw, 3 * C * C) && same(vdb, db, 3 * C),
          "matmul_bwd f32 accumulates = kc_matmul_backward");

    float *lw = rnd(C, 1), *lb = rnd(C, 1), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    float *lo = malloc(sizeof(float) * N * C);
    kc_layernorm_forward(lo, mean, rstd, inp, lw, lb, N, C, 1e-5f);
    srt_t vlw = put(c, lw, C, SRT_F32), vlb = put(c, lb, C, SRT_F32), vlo = view(c, N * C, SRT_F32);
    srt_t vmean = view(c, N, SRT_F32), vrstd = view(c, N, SRT_F32);
    srt_layernorm_fwd(c, SRT_COMPUTE, vlo, vmean, vrstd, vin, vlw, vlb, N, C, 1e-5f);
    check(same(vlo, lo, N * C) && same(vmean, mean, N) && same(vrstd, rstd, N), "layernorm_fwd f32");
    float *g = rnd(N * C, 1), *gi = rnd(N * C, 1), *gw = rnd(C, 1), *gb = rnd(C, 1);
    srt_t vg = put(c, g, N * C, SRT_F32), vgi = put(c, gi, N * C, SRT_F32);
    srt_t vgw = put(c, gw, C, SRT_F32), vgb = put(c, gb, C, SRT_F32);
    kc_layernorm_backward(gi, gw, gb, g, inp, lw, mean, rstd, N, C);
    srt_layernorm_bwd(c, SRT_COMPUTE, vgi, vgw, vgb, vg, vin, vlw, vmean, vrstd, N, C);
    check(same(vgi, gi, N * C) && same(vgw, gw, C) && same(vgb, gb, C), "layernorm_bwd f32");

    kc_rmsnorm_forward(lo, rstd, inp, lw, N, C, 1e-6f);
    srt_rmsnorm_fwd(c, SRT_COMPUTE, vlo, vrstd, vin, vlw, N, C, 1e-6f);
    check(same(vlo, lo, N * C) && same(vrstd, rstd, N), "rmsnorm_fwd f32");
    kc_rmsnorm_backward(gi, gw, g, inp, lw, rstd, N, C);
    srt_rmsnorm_bwd(c, SRT_COMPUTE, vgi, vgw, vg, vin, vlw, vrstd, N, C);
    check(same(vgi, gi, N * C) && same(vgw, gw, C), "rmsnorm_bwd f32");
    free(inp), free(w), free(bias), free(ref), free(dout), free(dinp), free(dw), free(db);
    free(lw), free(lb), free(mean), free(rstd), free(lo), free(g), free(gi), free(gw), free(gb);
}

/* A check's name with a format (one at a time: check copies nothing it keeps). */
static const char *msg(const char *fmt, const char *what)
{
    static char buf[256];
    snprintf(buf, sizeof buf, fmt, what);
    return buf;
}

/* The fused GELU MLP ops against the unfused sequence of ops they replace
 * (what the emitter wrote before them), bit for bit, in dtype dt, over rows
 * token rows: matmul_gelu_fwd = matmul_fwd + gelu_fwd; matmul_bwd_dgelu =
 * zero, matmul_bwd (dinp), zero, gelu_bwd, matmul_bwd (dbias).  dpre starts
 * as garbage (overwritten), the bias gradient as random values (+=). */
static void test_gelu_fused(srt_ctx *c, srt_dtype dt, int rows, const char *what)
{
    g_top = 0;
    int64_t nb = ops_dtype_size(dt);
    float *inp = rnd((int64_t)rows * C, 1), *w1 = rnd(H * C, 0.3f), *b1 = rnd(H, 0.2f), *w2 = rnd(C * H, 0.2f);
    float *dout = rnd((int64_t)rows * C, 1), *db = rnd(H, 1), *junk = rnd((int64_t)rows * H, 5);
    srt_t vin = put(c, inp, (int64_t)rows * C, dt), vw1 = put(c, w1, H * C, dt), vb1 = put(c, b1, H, dt);
    srt_t vw2 = put(c, w2, C * H, dt), vdout = put(c, dout, (int64_t)rows * C, dt);
    srt_t pre = view(c, (int64_t)rows * H, dt), act = view(c, (int64_t)rows * H, dt);
    srt_t pre_r = view(c, (int64_t)rows * H, dt), act_r = view(c, (int64_t)rows * H, dt);
    srt_matmul_fwd(c, SRT_COMPUTE, pre_r, vin, vw1, vb1, rows, C, H);
    srt_gelu_fwd(c, SRT_COMPUTE, act_r, pre_r);
    srt_matmul_gelu_fwd(c, SRT_COMPUTE, act, pre, vin, vw1, vb1, rows, C, H);
    check(memcmp(pre.p, pre_r.p, (size_t)(rows * H * nb)) == 0 && memcmp(act.p, act_r.p, (size_t)(rows * H * nb)) == 0,
          msg("matmul_gelu_fwd %s = matmul_fwd + gelu_fwd, bit for bit", what));
    srt_matmul_gelu_fwd(c, SRT_COMPUTE, act, pre, vin, vw1, NONE, rows, C, H);
    srt_matmul_fwd(c, SRT_COMPUTE, pre_r, vin, vw1, NONE, rows, C, H);
    srt_gelu_fwd(c, SRT_COMPUTE, act_r, pre_r);
    check(memcmp(pre.p, pre_r.p, (size_t)(rows * H * nb)) == 0 && memcmp(act.p, act_r.p, (size_t)(rows * H * nb)) == 0,
          msg("matmul_gelu_fwd %s without a bias", what));

    srt_t dpre = put(c, junk, (int64_t)rows * H, dt), vdb = put(c, db, H, SRT_F32);
    srt_t dact_r = view(c, (int64_t)rows * H, dt), dpre_r = view(c, (int64_t)rows * H, dt);
    srt_t vdb_r = put(c, db, H, SRT_F32);
    srt_zero(c, SRT_COMPUTE, dact_r);
    srt_matmul_bwd(c, SRT_COMPUTE, dact_r, NONE, NONE, vdout, NONE, vw2, rows, H, C);
    srt_zero(c, SRT_COMPUTE, dpre_r);
    srt_gelu_bwd(c, SRT_COMPUTE, dpre_r, pre_r, dact_r);
    srt_matmul_bwd(c, SRT_COMPUTE, NONE, NONE, vdb_r, dpre_r, NONE, NONE, rows, C, H);
    srt_matmul_bwd_dgelu(c, SRT_COMPUTE, dpre, vdb, vdout, vw2, pre, rows, H, C);
    check(memcmp(dpre.p, dpre_r.p, (size_t)(rows * H * nb)) == 0,
          msg("matmul_bwd_dgelu %s: dpre (overwritten) = matmul_bwd + gelu_bwd", what));
    check(memcmp(vdb.p, vdb_r.p, H * 4) == 0,
          msg("matmul_bwd_dgelu %s: dbias_pre += its rows' sums, as matmul_bwd", what));
    float *d0 = malloc(sizeof(float) * (size_t)rows * H);
    if (dt == SRT_F32) memcpy(d0, dpre.p, sizeof(float) * (size_t)rows * H);
    else for (int64_t i = 0; i < (int64_t)rows * H; i++) d0[i] = kc_f32_from_bf16(((uint16_t *)dpre.p)[i]);
    int nz = 0;
    for (int64_t i = 0; i < (int64_t)rows * H; i++) nz += d0[i] != 0.0f && fabsf(d0[i]) < 1e3f;
    check(nz > rows * H / 2, msg("matmul_bwd_dgelu %s: a non-trivial gradient", what));
    srt_matmul_bwd_dgelu(c, SRT_COMPUTE, dpre, NONE, vdout, vw2, pre, rows, H, C);   /* no bias gradient */
    check(memcmp(dpre.p, dpre_r.p, (size_t)(rows * H * nb)) == 0,
          msg("matmul_bwd_dgelu %s: overwrites again without a bias", what));
    free(inp), free(w1), free(b1), free(w2), free(dout), free(db), free(junk), free(d0);
}

static void test_pointwise(srt_ctx *c)
{
    g_top = 0;
    int64_t n = N * H;
    float *x = rnd(n, 3), *y = malloc(sizeof(float) * n), *d = rnd(n, 1), *dx = rnd(n, 1);
    kc_gelu_forward(y, x, (size_t)n);
    srt_t vx = put(c, x, n, SRT_F32), vy = view(c, n, SRT_F32);
    srt_gelu_fwd(c, SRT_COMPUTE, vy, vx);
    check(same(vy, y, n), "gelu_fwd f32");
    srt_t vd = put(c, d, n, SRT_F32), vdx = put(c, dx, n, SRT_F32);
    kc_gelu_backward(dx, x, d, (size_t)n);
    srt_gelu_bwd(c, SRT_COMPUTE, vdx, vx, vd);
    check(same(vdx, dx, n), "gelu_bwd f32");

    float *a = fdup(x, n);   /* add in place: out aliases a */
    kc_residual_forward(a, a, d, (size_t)n);
    srt_add_fwd(c, SRT_COMPUTE, vx, vx, vd);
    check(same(vx, a, n), "add_fwd f32 in place");
    float *da = rnd(n, 1), *db = rnd(n, 1);
    srt_t vda = put(c, da, n, SRT_F32), vdb = put(c, db, n, SRT_F32);
    kc_residual_backward(da, db, d, (size_t)n);
    srt_add_bwd(c, SRT_COMPUTE, vda, vdb, vd);
    check(same(vda, da, n) && same(vdb, db, n), "add_bwd f32");

    /* swiglu on the two halves of one fused (N, 2H) row */
    float *ab = rnd(N * 2 * H, 2), *o = malloc(sizeof(float) * N * H), *dab = rnd(N * 2 * H, 1);
    kc_swiglu_forward(o, ab, ab + H, N, H, 2 * H);
    srt_t vab = put(c, ab, N * 2 * H, SRT_F32), vo = view(c, N * H, SRT_F32);
    srt_t va = vab, vb = vab;
    vb.p = (float *)vab.p + H, vb.n -= H;
    srt_swiglu_fwd(c, SRT_COMPUTE, vo, va, vb, N, H, 2 * H);
    check(same(vo, o, N * H), "swiglu_fwd f32 fused halves");
    srt_t vdab = put(c, dab, N * 2 * H, SRT_F32), vda2 = vdab, vdb2 = vdab;
    vdb2.p = (float *)vdab.p + H, vdb2.n -= H;
    srt_t vdo = put(c, d, N * H, SRT_F32);
    kc_swiglu_backward(dab, dab + H, d, ab, ab + H, N, H, 2 * H);
    srt_swiglu_bwd(c, SRT_COMPUTE, vda2, vdb2, vdo, va, vb, N, H, 2 * H);
    check(same(vdab, dab, N * 2 * H), "swiglu_bwd f32 fused halves");
    free(x), free(y), free(d), free(dx), free(a), free(da), free(db), free(ab), free(o), free(dab);
}

/* q, k, v inside one fused (B,T,3C) qkv: rows 3C apart, as llm.c. */
static srt_t sub(srt_t t, int64_t off)
{
    t.p = (uint8_t *)t.p + off * ops_dtype_size(t.dt);
    t.n -= off;
    return t;
}

static void test_attention_rope(srt_ctx *c, srt_dtype dt)
{
    g_top = 0;
    int64_t nq = (int64_t)N * 3 * C;
    float *qkv = rnd(nq, 1), *out = malloc(sizeof(float) * N * C), *lse = malloc(sizeof(float) * B * NH * T);
    if (dt == SRT_BF16) bf16ify(qkv, nq);
    KcAttnShape sh = { B, T, NH, NH, HS, 3 * C, 3 * C };
    kc_attention_forward(out, lse, qkv, qkv + C, qkv + 2 * C, sh);
    srt_t vqkv = put(c, qkv, nq, dt), vout = view(c, N * C, dt), vlse = view(c, B * NH * T, SRT_F32);
    srt_attention_fwd(c, SRT_COMPUTE, vout, vlse, vqkv, sub(vqkv, C), sub(vqkv, 2 * C), B, T, NH, NH,
                      HS, 3 * C, 3 * C);
    check(same(vout, out, N * C) && same(vlse, lse, B * NH * T),
          dt == SRT_F32 ? "attention_fwd f32 fused qkv" : "attention_fwd bf16 = kernel on widened inputs, rounded once");

    float *dout = rnd(N * C, 1), *dqkv = rnd(nq, 1);
    if (dt == SRT_BF16) bf16ify(dout, N * C), bf16ify(dqkv, nq), bf16ify(out, N * C);
    srt_t vdout = put(c, dout, N * C, dt), vdqkv = put(c, dqkv, nq, dt);
    kc_attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, out, lse, qkv, qkv + C, qkv + 2 * C, sh);
    srt_attention_bwd(c, SRT_COMPUTE, vdqkv, sub(vdqkv, C), sub(vdqkv, 2 * C), vdout, vout, vlse,
                      vqkv, sub(vqkv, C), sub(vqkv, 2 * C), B, T, NH, NH, HS, 3 * C, 3 * C);
    check(same(vdqkv, dqkv, nq),
          dt == SRT_F32 ? "attention_bwd f32 into one dqkv" : "attention_bwd bf16 into one dqkv (merged staging)");

    /* rope in place on q and on k inside qkv; the v columns stay */
    float *r = fdup(qkv, nq);
    kc_rope_forward(r, r, B, T, NH, HS, 3 * C, 0, 10000.0f);
    kc_rope_forward(r + C, r + C, B, T, NH, HS, 3 * C, 0, 10000.0f);
    srt_rope_fwd(c, SRT_COMPUTE, vqkv, B, T, NH, HS, 3 * C, 10000.0f);
    srt_rope_fwd(c, SRT_COMPUTE, sub(vqkv, C), B, T, NH, HS, 3 * C, 10000.0f);
    if (dt == SRT_BF16) {   /* each op rounds what it wrote: q after the first, k after the second */
        for (int64_t i = 0; i < N; i++) bf16ify(r + i * 3 * C, 2 * C);
    }
    check(same(vqkv, r, nq), dt == SRT_F32 ? "rope_fwd f32 in place on q and k" : "rope_fwd bf16 in place");
    if (dt == SRT_BF16) bf16ify(dqkv, nq);   /* what the arena holds now */
    float *gq = fdup(dqkv, nq), *zero = fdup(dqkv, nq);
    for (int64_t i = 0; i < N; i++) memset(zero + i * 3 * C, 0, sizeof(float) * C);   /* q columns to 0 */
    kc_rope_backward(zero, gq, B, T, NH, HS, 3 * C, 0, 10000.0f);
    if (dt == SRT_BF16) bf16ify(zero, nq);
    srt_rope_bwd(c, SRT_COMPUTE, vdqkv, B, T, NH, HS, 3 * C, 10000.0f);
    check(same(vdqkv, zero, nq), dt == SRT_F32 ? "rope_bwd f32 in place (R^T dx), other columns kept"
                                               : "rope_bwd bf16 in place");
    free(qkv), free(out), free(lse), free(dout), free(dqkv), free(r), free(gq), free(zero);
}

static void test_embed_xent(srt_ctx *c)
{
    g_top = 0;
    int v0 = 16, v1 = 48;   /* a vocab-parallel slice */
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7 + 3) % V;
    float *wte = rnd((v1 - v0) * C, 1), *wpe = rnd(T * C, 1), *out = malloc(sizeof(float) * N * C);
    kc_embedding_forward(out, tok, wte, wpe, B, T, C, v0, v1);
    srt_t vtok = view(c, N, SRT_I32);
    memcpy(vtok.p, tok, sizeof tok);
    srt_t vwte = put(c, wte, (v1 - v0) * C, SRT_F32), vwpe = put(c, wpe, T * C, SRT_F32);
    srt_t vout = view(c, N * C, SRT_F32);
    srt_embed_fwd(c, SRT_COMPUTE, vout, vtok, vwte, vwpe, B, T, C, v0, v1);
    check(same(vout, out, N * C), "embed_fwd f32 vocab slice + positions");
    float *dout = rnd(N * C, 1), *dwte = rnd((v1 - v0) * C, 1), *dwpe = rnd(T * C, 1);
    srt_t vdout = put(c, dout, N * C, SRT_F32), vdwte = put(c, dwte, (v1 - v0) * C, SRT_F32);
    srt_t vdwpe = put(c, dwpe, T * C, SRT_F32);
    kc_embedding_backward(dwte, dwpe, dout, tok, B, T, C, v0, v1);
    srt_embed_bwd(c, SRT_COMPUTE, vdwte, vdwpe, vdout, vtok, B, T, C, v0, v1);
    check(same(vdwte, dwte, (v1 - v0) * C) && same(vdwpe, dwpe, T * C), "embed_bwd f32");

    float *logits = rnd(N * VP, 4), *st = malloc(sizeof(float) * 6 * N), *loss = malloc(sizeof(float) * N);
    int32_t tg[N];
    for (int i = 0; i < N; i++) tg[i] = i == 5 ? -1 : (i * 11 + 1) % V;
    srt_t vlog = put(c, logits, N * VP, SRT_F32), vtg = view(c, N, SRT_I32), vloss = view(c, N, SRT_F32);
    memcpy(vtg.p, tg, sizeof tg);
    kc_xent_partial(st, st + N, st + 2 * N, logits, tg, N, VP, 0, V);
    kc_xent_combine(st + 3 * N, st + 4 * N, st + 5 * N, st, st + N, st + 2 * N, 1, N);
    kc_xent_loss(loss, tg, st + 3 * N, st + 4 * N, st + 5 * N, N);
    kc_xent_backward(logits, tg, st + 3 * N, st + 4 * N, 0.5f, N, VP, 0, V);
    srt_xent_fwd_bwd(c, SRT_COMPUTE, vloss, vlog, vtg, N, VP, 0, V, 0.5f);
    check(same(vloss, loss, N) && same(vlog, logits, N * VP), "xent_fwd_bwd f32 = kc_xent phases");

    /* the step's loss: mean over rows / microbatches, summed in double */
    ctx_begin_step(c, 1);
    srt_loss_add(c, SRT_COMPUTE, vloss, N);
    srt_loss_add(c, SRT_COMPUTE, vloss, N);
    double want = 0.0;
    for (int i = 0; i < N; i++) want += loss[i];
    want = want / N / 2.0 * 2.0;
    check(fabs(c->loss - want) < 1e-12 * fabs(want), "loss_add accumulates mean / microbatches");
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(logits), free(st), free(loss);
}

/* The fused head: in fp32 the kc_head phases (bit for bit); in bf16 the
 * three ops it stands for (matmul_fwd, xent_fwd_bwd, matmul_bwd), bit for
 * bit; evaluation (no gradients) gives the same losses. */
static void test_head_xent(srt_ctx *c, srt_dtype dt)
{
    g_top = 0;
    float *inp = rnd(N * C, 1), *w = rnd(VP * C, 0.5f), *dinp = rnd(N * C, 0.1f), *dw = rnd(VP * C, 0.1f);
    memset(w + V * C, 0, sizeof(float) * (VP - V) * C);   /* padding rows */
    if (dt == SRT_BF16) bf16ify(inp, N * C), bf16ify(w, VP * C), bf16ify(dinp, N * C), bf16ify(dw, VP * C);
    int32_t tg[N];
    for (int i = 0; i < N; i++) tg[i] = i == 3 ? -1 : (i * 13 + 2) % V;
    srt_t vin = put(c, inp, N * C, dt), vw = put(c, w, VP * C, dt), vdin = put(c, dinp, N * C, dt);
    srt_t vdw = put(c, dw, VP * C, dt), vlog = view(c, N * VP, dt), vloss = view(c, N, SRT_F32);
    srt_t vtg = view(c, N, SRT_I32), vevloss = view(c, N, SRT_F32);
    memcpy(vtg.p, tg, sizeof tg);
    srt_head_xent(c, SRT_COMPUTE, vloss, vdin, vdw, vlog, vin, vw, vtg, N, C, VP, 0, V, 0.25f);
    srt_head_xent(c, SRT_COMPUTE, vevloss, NONE, NONE, view(c, N * VP, dt), vin, vw, vtg, N, C, VP, 0, V, 0.25f);
    float *loss = malloc(sizeof(float) * N), *logits = malloc(sizeof(float) * N * VP);
    if (dt == SRT_F32) {
        KcHeadShape sh = { N, C, VP, 0, V };
        float *sc = calloc(kc_head_scratch_floats(sh), sizeof(float)), *st = malloc(sizeof(float) * 6 * N);
        kc_head_forward(logits, st, st + N, st + 2 * N, sc, inp, w, tg, sh);
        kc_xent_combine(st + 3 * N, st + 4 * N, st + 5 * N, st, st + N, st + 2 * N, 1, N);
        kc_xent_loss(loss, tg, st + 3 * N, st + 4 * N, st + 5 * N, N);
        kc_head_backward(dinp, dw, logits, sc, inp, w, tg, st + 3 * N, st + 4 * N, 0.25f, sh);
        free(sc), free(st);
    } else {   /* the three ops on copies */
        srt_t rin = put(c, inp, N * C, dt), rw = put(c, w, VP * C, dt), rdin = put(c, dinp, N * C, dt);
        srt_t rdw = put(c, dw, VP * C, dt), rlog = view(c, N * VP, dt), rloss = view(c, N, SRT_F32);
        srt_matmul_fwd(c, SRT_COMPUTE, rlog, rin, rw, NONE, N, C, VP);
        srt_xent_fwd_bwd(c, SRT_COMPUTE, rloss, rlog, vtg, N, VP, 0, V, 0.25f);
        srt_matmul_bwd(c, SRT_COMPUTE, rdin, rdw, NONE, rlog, rin, rw, N, C, VP);
        memcpy(loss, rloss.p, sizeof(float) * N);
        for (int64_t i = 0; i < N * VP; i++) logits[i] = kc_f32_from_bf16(((uint16_t *)rlog.p)[i]);
        for (int64_t i = 0; i < N * C; i++) dinp[i] = kc_f32_from_bf16(((uint16_t *)rdin.p)[i]);
        for (int64_t i = 0; i < VP * C; i++) dw[i] = kc_f32_from_bf16(((uint16_t *)rdw.p)[i]);
    }
    check(same(vloss, loss, N) && same(vlog, logits, N * VP) && same(vdin, dinp, N * C) && same(vdw, dw, VP * C),
          dt == SRT_F32 ? "head_xent f32 = kc_head phases" : "head_xent bf16 = matmul_fwd, xent_fwd_bwd, matmul_bwd");
    check(same(vevloss, loss, N), dt == SRT_F32 ? "head_xent f32 without gradients: the same losses"
                                                : "head_xent bf16 without gradients: the same losses");
    free(inp), free(w), free(dinp), free(dw), free(loss), free(logits);
}

static void test_convert_zero_copy(srt_ctx *c)
{
    g_top = 0;
    int64_t n = 1000;
    float *x = rnd(n, 100);
    x[0] = 1.0f + 1.0f / 256, x[1] = 1.0f + 3.0f / 256, x[2] = NAN, x[3] = INFINITY;
    srt_t vx = put(c, x, n, SRT_F32), vb = view(c, n, SRT_BF16), vh = view(c, n, SRT_F16);
    srt_t vback = view(c, n, SRT_F32), vh2 = view(c, n, SRT_F16);
    srt_convert(c, SRT_COMPUTE, vb, vx);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= ((uint16_t *)vb.p)[i] == kc_bf16_from_f32(x[i]);
    check(ok, "convert f32 -> bf16 = kc_bf16_from_f32");
    check(((uint16_t *)vb.p)[0] == 0x3f80 && ((uint16_t *)vb.p)[1] == 0x3f82,
          "bf16 rounding: ties to even (1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6)");
    srt_convert(c, SRT_COMPUTE, vback, vb);
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
        float w = kc_f32_from_bf16(kc_bf16_from_f32(x[i]));
        ok &= isnan(w) ? isnan(((float *)vback.p)[i]) : ((float *)vback.p)[i] == w;
    }
    check(ok, "convert bf16 -> f32 is exact");
    srt_convert(c, SRT_COMPUTE, vh, vx);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= ((uint16_t *)vh.p)[i] == kc_fp16_from_f32(x[i]);
    check(ok, "convert f32 -> f16 = kc_fp16_from_f32");
    srt_convert(c, SRT_COMPUTE, vh2, vb);
    ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= ((uint16_t *)vh2.p)[i] == kc_fp16_from_f32(kc_f32_from_bf16(((uint16_t *)vb.p)[i]));
    check(ok, "convert bf16 -> f16 through fp32");
    srt_zero(c, SRT_COMPUTE, vb);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= ((uint16_t *)vb.p)[i] == 0;
    check(ok, "zero bf16");

    srt_t vhost = srt_hview(c, 4096, n, SRT_F32);
    srt_copy(c, SRT_COPY, vhost, vx);
    srt_event_record(c, SRT_COPY, 3);
    srt_event_wait(c, SRT_COMPUTE, 3);
    check(memcmp(vhost.p, vx.p, sizeof(float) * n) == 0, "copy device -> host");
    free(x);
}

static void test_optimizer(srt_ctx *c)
{
    g_top = 0;
    int64_t n = 3000;
    float *p = rnd(n, 1), *g = rnd(n, 30), *m = rnd(n, 0.1f), *v = rnd(n, 0.1f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    srt_t vp = put(c, p, n, SRT_F32), vw = view(c, n, SRT_F32), vg = put(c, g, n, SRT_F32);
    srt_t vm = put(c, m, n, SRT_F32), vv = put(c, v, n, SRT_F32);
    ctx_begin_step(c, 3);
    check(srt_step(c) == 3 && srt_lr(c) != 0.0, "step and lr from the schedule");
    srt_grad_sumsq(c, SRT_COMPUTE, sub(vg, 0));
    srt_grad_norm_finish(c, SRT_COMPUTE, SRT_WORLD);
    double norm = kc_global_norm(g, (size_t)n);
    float coef = (float)(1.0 / (norm + 1e-6));
    check(c->grad_norm == norm && c->clip_scale == coef && norm > 1.0, "grad norm exact; clip = 1/(norm+1e-6)");
    KcAdamW h = { c->lr, 0.9, 0.95, 1e-8, 0.1, 3, coef };
    kc_adamw_step(p, NULL, g, m, v, (size_t)n, h);
    srt_optimizer_step(c, SRT_COMPUTE, vw, vp, vg, vm, vv, true);
    check(same(vp, p, n) && same(vm, m, n) && same(vv, v, n) && same(vw, p, n),
          "optimizer_step adamw = kc_adamw_step (decay, clipping), working copy written");
    h.weight_decay = 0.0;
    kc_adamw_step(p, NULL, g, m, v, (size_t)n, h);
    srt_optimizer_step(c, SRT_COMPUTE, vp, vp, vg, vm, vv, false);
    check(same(vp, p, n), "optimizer_step adamw without decay, params = master");
    /* the accumulator restarted: a second finish of nothing is a zero norm */
    srt_grad_norm_finish(c, SRT_COMPUTE, SRT_WORLD);
    check(c->grad_norm == 0.0 && c->clip_scale == 1.0f, "norm accumulator cleared by finish");

    /* Adam: torch.optim.Adam adds the L2 term to the gradient (a double reference) */
    g_prog.optimizer = 1;
    float *p0 = fdup(vp.p, n), *m0 = fdup(vm.p, n), *v0 = fdup(vv.p, n);
    srt_optimizer_step(c, SRT_COMPUTE, vp, vp, vg, vm, vv, true);
    double err = 0.0, lr = c->lr;
    for (int64_t i = 0; i < n; i++) {
        double gi = (double)g[i] + 0.1 * p0[i];
        double mi = 0.9 * m0[i] + 0.1 * gi, vi = 0.95 * v0[i] + 0.05 * gi * gi;
        double den = sqrt(vi) / sqrt(1.0 - pow(0.95, 3)) + 1e-8;
        double pi = p0[i] - lr / (1.0 - pow(0.9, 3)) * mi / den;
        err = fmax(err, fabs(((float *)vp.p)[i] - pi) / fmax(1e-3, fabs(pi)));
    }
    check(err < 1e-5, "optimizer_step adam: L2 weight decay joins the gradient (torch.optim.Adam)");
    /* SGD with momentum: kc_sgd_step, the buffer in m; the first step copies the gradient */
    g_prog.optimizer = 2, g_prog.momentum = 0.9;
    ctx_begin_step(c, 1);
    memcpy(p, vp.p, sizeof(float) * n);
    KcSGD sh = { c->lr, 0.9, 0.0, 0.1, 0, 1, 1.0f };
    kc_sgd_step(p, g, m, (size_t)n, sh);
    srt_optimizer_step(c, SRT_COMPUTE, vp, vp, vg, vm, NONE, true);
    sh.first_step = 0;
    ctx_begin_step(c, 2);
    sh.lr = c->lr;
    kc_sgd_step(p, g, m, (size_t)n, sh);
    srt_optimizer_step(c, SRT_COMPUTE, vp, vp, vg, vm, NONE, true);
    check(same(vp, p, n) && same(vm, m, n), "optimizer_step sgd with momentum = kc_sgd_step");
    g_prog.optimizer = 0, g_prog.momentum = 0.0;
    free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0);
}

static void test_collectives_1rank(srt_ctx *c)
{
    g_top = 0;
    int64_t n = 777;
    float *x = rnd(n, 1);
    srt_t vx = put(c, x, n, SRT_F32), vo = view(c, n, SRT_F32);
    for (int g = 0; g < SRT_NGROUPS; g++) {
        check(srt_group_size(c, (srt_group)g) == 1 && srt_group_rank(c, (srt_group)g) == 0, "1-rank groups");
        srt_all_reduce(c, SRT_DP_COMM, (srt_group)g, vx, SRT_SUM);
        srt_broadcast(c, SRT_DP_COMM, (srt_group)g, vx, 0);
        srt_all_gather(c, SRT_DP_COMM, (srt_group)g, vo, vx);
        srt_reduce_scatter(c, SRT_DP_COMM, (srt_group)g, vo, vx);
    }
    srt_stream_sync(c, SRT_DP_COMM);
    check(same(vx, x, n) && same(vo, x, n), "1-rank all_reduce/broadcast unchanged, all_gather/reduce_scatter copy");
    free(x);
}

/* Writes then reads back views at unaligned offsets of the swap file. */
static void test_nvme(srt_ctx *c, const char *what, bool direct, bool uring)
{
    g_top = 0;
    check(cpu_st(c)->nvme.direct == direct && cpu_st(c)->nvme.uring == uring, what);
    int64_t n = 50001;
    float *x = rnd(n, 1), *y = rnd(n, 1);
    srt_t vx = put(c, x, n, SRT_F32), vy = put(c, y, n, SRT_F32), back = view(c, n, SRT_F32);
    srt_nvme_write(c, SRT_COPY, vx, 4093);
    srt_nvme_write(c, SRT_COPY, vy, 4093 + n * 4);   /* right after: the shared block is kept */
    srt_nvme_read(c, SRT_COPY, back, 4093);
    int ok = same(back, x, n);
    srt_t small = view(c, 3, SRT_F32);
    srt_nvme_read(c, SRT_COPY, small, 4093 + 2 * 4);
    ok &= memcmp(small.p, x + 2, 12) == 0;
    srt_nvme_read(c, SRT_COPY, back, 4093 + n * 4);   /* last: the bounce buffer now holds y */
    ok &= same(back, y, n);
    /* 10.4 MB: eleven 1 MiB requests, more than the queue holds at once; then
     * x written into its middle and 3 floats of y over x's start, both
     * unaligned (read-modify-writes of the blocks at their ends) */
    int64_t nb = 2600001, at = 1234567;
    float *z = rnd(nb, 1);
    srt_t vz = put(c, z, nb, SRT_F32), bz = view(c, nb, SRT_F32);
    srt_nvme_write(c, SRT_COPY, vz, 8191);
    srt_nvme_write(c, SRT_COPY, vx, 8191 + 4 * at);
    srt_t three = vy;
    three.n = 3;
    srt_nvme_write(c, SRT_COPY, three, 8191 + 4 * at);
    srt_nvme_read(c, SRT_COPY, bz, 8191);
    memcpy(z + at, x, sizeof(float) * (size_t)n);
    memcpy(z + at, y, 12);
    ok &= same(bz, z, nb);
    srt_nvme_read(c, SRT_COPY, small, 4093 + 4 * 1000);   /* x before z's first block: kept */
    ok &= memcmp(small.p, x + 1000, 12) == 0;
    srt_stream_sync(c, SRT_COPY);
    check(ok, what);
    free(x), free(y), free(z);
}

/* The data loader writes a microbatch straight into the arena. */
static void test_load_batch(srt_ctx *c)
{
    g_top = 0;
    char path[] = "/tmp/test_runtime_ops_XXXXXX";
    int fd = mkstemp(path);
    char text[4096];
    for (int i = 0; i < (int)sizeof text; i++) text[i] = (char)('a' + (i * 7) % 26);
    check(fd >= 0 && write(fd, text, sizeof text) == (ssize_t)sizeof text, "temporary text file");
    close(fd);
    data_opts o = { path, DATA_FMT_TEXT, T, 256, 2 * B, DATA_PART_ALL, 0.0, DATA_CHECK_OPEN };
    data_loader *d = NULL;
    char err[256];
    int e = data_open(&d, &o, err, sizeof err);
    check(e == DATA_OK, "data_open on raw text");
    if (e != DATA_OK) { unlink(path); return; }
    c->data = d, c->data_step = 1;
    srt_t tok = view(c, N, SRT_I32), tgt = view(c, N, SRT_I32);
    srt_load_batch(c, SRT_COPY, 1, tok, tgt);
    int32_t want_tok[N], want_tgt[N];
    data_batch(d, 1, 0, 1, 1, B, want_tok, want_tgt);
    check(!memcmp(tok.p, want_tok, sizeof want_tok) && !memcmp(tgt.p, want_tgt, sizeof want_tgt) &&
          ((int32_t *)tgt.p)[0] == ((int32_t *)tok.p)[1], "load_batch = data_batch of this step");
    srt_load_batch(c, SRT_COPY, 0, NONE, tgt);   /* a last stage: the targets only */
    data_batch(d, 1, 0, 1, 0, B, want_tok, want_tgt);
    check(!memcmp(tgt.p, want_tgt, sizeof want_tgt), "load_batch of the targets alone");
    srt_stream_sync(c, SRT_COPY);
    c->data = NULL;
    data_close(d);
    unlink(path);
}

/* ---- bf16 emulation: the kernel on widened inputs, each write rounded once ------------------ */

static void test_bf16(srt_ctx *c)
{
    g_top = 0;
    float *inp = rnd(N * C, 1), *w = rnd(2 * H * C, 0.2f), *bias = rnd(2 * H, 0.1f);
    bf16ify(inp, N * C), bf16ify(w, 2 * H * C), bf16ify(bias, 2 * H);
    float *out = malloc(sizeof(float) * N * 2 * H);
    kc_matmul_forward(out, inp, w, bias, N, C, 2 * H);
    srt_t vin = put(c, inp, N * C, SRT_BF16), vw = put(c, w, 2 * H * C, SRT_BF16);
    srt_t vb = put(c, bias, 2 * H, SRT_BF16), vout = view(c, N * 2 * H, SRT_BF16);
    srt_matmul_fwd(c, SRT_COMPUTE, vout, vin, vw, vb, N, C, 2 * H);
    check(same(vout, out, N * 2 * H), "matmul_fwd bf16 = kernel on widened inputs, rounded once");
    float *dout = rnd(N * 2 * H, 1), *dinp = rnd(N * C, 1), *dw = rnd(2 * H * C, 1);
    bf16ify(dout, N * 2 * H), bf16ify(dinp, N * C), bf16ify(dw, 2 * H * C);
    srt_t vdout = put(c, dout, N * 2 * H, SRT_BF16), vdinp = put(c, dinp, N * C, SRT_BF16);
    srt_t vdw = put(c, dw, 2 * H * C, SRT_BF16);
    kc_matmul_backward(dinp, dw, NULL, dout, inp, w, N, C, 2 * H);
    srt_matmul_bwd(c, SRT_COMPUTE, vdinp, vdw, NONE, vdout, vin, vw, N, C, 2 * H);
    check(same(vdinp, dinp, N * C) && same(vdw, dw, 2 * H * C), "matmul_bwd bf16 accumulates, rounded once");

    /* a residual add longer than one chunk, in place */
    int64_t n = 150001;
    float *a = rnd(n, 1), *b = rnd(n, 1e-2f);
    bf16ify(a, n), bf16ify(b, n);
    srt_t va = put(c, a, n, SRT_BF16), vbb = put(c, b, n, SRT_BF16);
    kc_residual_forward(a, a, b, (size_t)n);
    srt_add_fwd(c, SRT_COMPUTE, va, va, vbb);
    check(same(va, a, n), "add_fwd bf16 in place over several chunks");
    float one[2] = { 1.0f, 1.0f }, tiny[2] = { 1.0f / 256, 3.0f / 256 };
    srt_t v1 = put(c, one, 2, SRT_BF16), vt = view(c, 2, SRT_F32);
    memcpy(vt.p, tiny, sizeof tiny);
    srt_t vt16 = view(c, 2, SRT_BF16);
    srt_convert(c, SRT_COMPUTE, vt16, vt);
    srt_add_fwd(c, SRT_COMPUTE, v1, v1, vt16);
    check(((uint16_t *)v1.p)[0] == 0x3f80 && ((uint16_t *)v1.p)[1] == 0x3f82,
          "bf16 add rounds the fp32 sum to nearest even");

    /* the optimizer with bf16 gradients and a bf16 working copy, over several chunks */
    int64_t m = 100003;
    float *p = rnd(m, 1), *g = rnd(m, 1e-2f), *mm = calloc((size_t)m, 4), *vv = calloc((size_t)m, 4);
    bf16ify(g, m);
    srt_t vp = view(c, m, SRT_F32), vwork = view(c, m, SRT_BF16), vg = put(c, g, m, SRT_BF16);
    srt_t vm = view(c, m, SRT_F32), vv2 = view(c, m, SRT_F32);
    memcpy(vp.p, p, sizeof(float) * m);
    ctx_begin_step(c, 1);
    srt_grad_sumsq(c, SRT_COMPUTE, vg);
    srt_grad_norm_finish(c, SRT_COMPUTE, SRT_WORLD);
    double norm = kc_global_norm(g, (size_t)m);
    check(c->grad_norm == norm, "grad norm of bf16 gradients exact");
    KcAdamW h = { c->lr, 0.9, 0.95, 1e-8, 0.1, 1, c->clip_scale };
    kc_adamw_step(p, NULL, g, mm, vv, (size_t)m, h);
    srt_optimizer_step(c, SRT_COMPUTE, vwork, vp, vg, vm, vv2, true);
    check(same(vp, p, m) && same(vm, mm, m) && same(vv2, vv, m) && same(vwork, p, m),
          "optimizer_step bf16 grads: fp32 master = kc_adamw_step, bf16 copy = its rounding");
    free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(a), free(b);
    free(p), free(g), free(mm), free(vv);
}

/* ---- the strided-batched forward GEMM ------------------------------------------------------------ */

/* srt_matmul_fwd_batched as tp_comm_overlap = full runs a token-row chunk
 * under sequence parallelism: 3 blocks of 5 rows, the input blocks 2 blocks
 * apart (the rows between belong to other chunks: NaN, so a read of them
 * would show), the output blocks 7 elements apart (the gaps must stay), the
 * weight and the bias shared; each block equals srt_matmul_fwd's on it, bit
 * for bit (the CPU backend's batch is those calls), with and without a bias. */
static void test_matmul_batched(srt_ctx *c, srt_dtype dt, const char *what)
{
    g_top = 0;
    enum { R = 5, NB = 3, OCB = 2 * C };
    const int64_t is = 2 * R * C, os = R * OCB + 7;
    float *inp = rnd(is * NB, 1), *w = rnd(OCB * C, 0.2f), *bias = rnd(OCB, 0.1f), *gap = malloc(sizeof(float) * os * NB);
    for (int64_t i = 0; i < is * NB; i++)
        if (i % is >= R * C) inp[i] = NAN;
    for (int64_t i = 0; i < os * NB; i++) gap[i] = 3.0f;
    srt_t vin = put(c, inp, is * NB, dt), vw = put(c, w, OCB * C, dt), vb = put(c, bias, OCB, dt);
    for (int withb = 0; withb < 2; withb++) {
        srt_t b = withb ? vb : NONE;
        srt_t vout = put(c, gap, os * NB, dt), one = view(c, R * OCB, dt);
        srt_matmul_fwd_batched(c, SRT_COMPUTE, vout, vin, vw, b, R, C, OCB, NB, os, is);
        int ok = 1;
        for (int k = 0; k < NB; k++) {
            srt_t in_k = { (char *)vin.p + k * is * ops_dtype_size(dt), R * C, dt };
            srt_t out_k = { (char *)vout.p + k * os * ops_dtype_size(dt), R * OCB, dt };
            srt_matmul_fwd(c, SRT_COMPUTE, one, in_k, vw, b, R, C, OCB);
            ok &= memcmp(out_k.p, one.p, (size_t)(R * OCB * ops_dtype_size(dt))) == 0;
            srt_t gap_k = { (char *)out_k.p + R * OCB * ops_dtype_size(dt), 7, dt };
            ok &= same(gap_k, gap, 7);
            /* and finite: a NaN from the rows between the input blocks would compare equal above */
            for (int64_t i = 0; i < R * OCB; i++) {
                float v = dt == SRT_F32 ? ((float *)out_k.p)[i] : kc_f32_from_bf16(((uint16_t *)out_k.p)[i]);
                ok &= !!isfinite(v);
            }
        }
        check(ok, msg(withb ? "matmul_fwd_batched %s with a bias = matmul_fwd block by block, gaps kept"
                            : "matmul_fwd_batched %s = matmul_fwd block by block, gaps kept", what));
    }
    free(inp), free(w), free(bias), free(gap);
}

/* srt_matmul_gelu_fwd_batched as the column chunks of tp_comm_overlap = full
 * run GPT's c_fc under sequence parallelism: 3 blocks of 5 input rows
 * side by side, the pre and out blocks 2 blocks apart (the rows between
 * belong to other chunks and stay), the weight and bias shared; each block's
 * pre and out equal srt_matmul_gelu_fwd's on it, bit for bit. */
static void test_matmul_gelu_batched(srt_ctx *c, srt_dtype dt, const char *what)
{
    g_top = 0;
    enum { R = 5, NB = 3, OCB = 2 * C };
    const int64_t is = R * C, os = 2 * R * OCB;
    float *inp = rnd(is * NB, 1), *w = rnd(OCB * C, 0.2f), *bias = rnd(OCB, 0.1f), *gap = malloc(sizeof(float) * os * NB);
    for (int64_t i = 0; i < os * NB; i++) gap[i] = 3.0f;
    srt_t vin = put(c, inp, is * NB, dt), vw = put(c, w, OCB * C, dt), vb = put(c, bias, OCB, dt);
    srt_t vout = put(c, gap, os * NB, dt), vpre = put(c, gap, os * NB, dt);
    srt_t one = view(c, R * OCB, dt), one_pre = view(c, R * OCB, dt);
    srt_matmul_gelu_fwd_batched(c, SRT_COMPUTE, vout, vpre, vin, vw, vb, R, C, OCB, NB, os, is);
    int ok = 1;
    size_t es = (size_t)ops_dtype_size(dt);
    for (int k = 0; k < NB; k++) {
        srt_t in_k = { (char *)vin.p + k * is * es, R * C, dt };
        srt_matmul_gelu_fwd(c, SRT_COMPUTE, one, one_pre, in_k, vw, vb, R, C, OCB);
        ok &= memcmp((char *)vout.p + k * os * es, one.p, (size_t)R * OCB * es) == 0;
        ok &= memcmp((char *)vpre.p + k * os * es, one_pre.p, (size_t)R * OCB * es) == 0;
        srt_t gap_o = { (char *)vout.p + (k * os + R * OCB) * es, os - R * OCB, dt };
        srt_t gap_p = { (char *)vpre.p + (k * os + R * OCB) * es, os - R * OCB, dt };
        ok &= same(gap_o, gap, os - R * OCB) && same(gap_p, gap, os - R * OCB);
    }
    check(ok, msg("matmul_gelu_fwd_batched %s = matmul_gelu_fwd block by block, gaps kept", what));
    free(inp), free(w), free(bias), free(gap);
}

/* Output blocks that overlap: an internal error, not an order-dependent result. */
static void batched_overlap(srt_ctx *c)
{
    g_top = 0;
    srt_t out = view(c, 4 * 8, SRT_F32), inp = view(c, 4 * 8, SRT_F32), w = view(c, 8 * 8, SRT_F32);
    srt_matmul_fwd_batched(c, SRT_COMPUTE, out, inp, w, NONE, 2, 8, 8, 2, 8, 16);
}

/* ---- errors that must end the process: run in a child ------------------------------------------ */

/* Runs fn(c) in a child; returns its exit status (or -1) with its stderr in err. */
static int in_child(srt_ctx *c, void (*fn)(srt_ctx *), char *err, size_t len)
{
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        fn(c);
        _exit(0);
    }
    close(pfd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < len && (k = read(pfd[0], err + got, len - 1 - got)) > 0) got += (size_t)k;
    err[got] = 0;
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void late_alloc(srt_ctx *c) { ctx_alloc(c, 16, "a late buffer"); }

/* A direct host read of the device arena (faults while it is guarded). */
static void peek_dev(srt_ctx *c)
{
    volatile uint8_t *d = c->dev;
    printf("%d\n", d[100]);
}

/* ctx_dev_read past the end of the device arena. */
static void read_outside(srt_ctx *c)
{
    char b[8];
    ctx_dev_read(c, b, c->dev_bytes - 4, 8);
}

/* The host's only access to the device arena (ctx_dev_read / ctx_dev_write,
 * what srt_main uses), under SRT_DEV_GUARD: the accessors work, a direct
 * read faults, a range outside the arena is an internal error. */
static void test_dev_access(srt_ctx *c, char *err, size_t len)
{
    check(c->bounce && c->dev_guard, "a bounce buffer; SRT_DEV_GUARD=1 guards the device arena");
    ctx_dev_guard(c, true);
    static uint8_t in[3000], out[3000];
    for (int i = 0; i < 3000; i++) in[i] = (uint8_t)(i * 7 + 1);
    ctx_dev_write(c, 4093, in, sizeof in);
    ctx_dev_read(c, out, 4093, sizeof out);
    check(memcmp(in, out, sizeof in) == 0, "ctx_dev_write then ctx_dev_read round-trip (guarded arena)");
    check(in_child(c, peek_dev, err, len) != 0, "a direct host read of the guarded device arena faults");
    int code = in_child(c, read_outside, err, len);
    check(code == 3 && strstr(err, "outside the arena"), "ctx_dev_read outside the arena is an internal error");
    ctx_dev_guard(c, false);
    check(memcmp(c->dev + 4093, in, sizeof in) == 0, "unguarded: the bytes are in the arena");
}

/* A bf16 matmul wider than any weight of the program overflows the scratch. */
static void too_big(srt_ctx *c)
{
    g_top = 0;
    srt_t out = view(c, 64 * 2000, SRT_BF16), inp = view(c, 64 * 1000, SRT_BF16);
    srt_t w = view(c, 2000 * 1000, SRT_BF16);
    srt_matmul_fwd(c, SRT_COMPUTE, out, inp, w, NONE, 64, 1000, 2000);
}

int main(void)
{
    /* The deaths first, in forked children, while this process has not yet
     * started OpenMP's threads (libgomp does not survive a fork after). */
    char err[4096];
    srt_ctx *c = make_ctx(SRT_BF16, NULL);
    int code = in_child(c, late_alloc, err, sizeof err);
    check(code == 3 && strstr(err, "allocation of a late buffer (16 bytes) after start-up"),
          "an allocation after start-up is an internal error");
    code = in_child(c, batched_overlap, err, sizeof err);
    check(code == 3 && strstr(err, "matmul_fwd_batched: out_stride 8 (the blocks are 16 elements)"),
          "overlapping output blocks of a batched matmul are an internal error");
    code = in_child(c, too_big, err, sizeof err);
    check(code == 3 && strstr(err, "matmul_fwd needs") && strstr(err, "fp32 scratch"),
          "an op beyond the program's shapes is an internal error naming it");
    ctx_destroy(c);
    setenv("SRT_DEV_GUARD", "1", 1);
    c = make_ctx(SRT_F32, NULL);
    unsetenv("SRT_DEV_GUARD");
    test_dev_access(c, err, sizeof err);
    ctx_destroy(c);

    c = make_ctx(SRT_F32, NULL);
    int64_t allocs = c->nallocs;
    check(c->opt.check && c->chk, "checking on");
    check(c->world == 1 && !c->mpi, "a 1-rank context without MPI");
    test_linear_and_norms(c), sync_all(c);
    test_matmul_batched(c, SRT_F32, "f32"), sync_all(c);
    test_matmul_gelu_batched(c, SRT_F32, "f32"), sync_all(c);
    test_gelu_fused(c, SRT_F32, N, "f32"), sync_all(c);
    test_gelu_fused(c, SRT_F32, 77, "f32, 77 rows (past one GELU block)"), sync_all(c);
    test_pointwise(c), sync_all(c);
    test_attention_rope(c, SRT_F32), sync_all(c);
    test_embed_xent(c), sync_all(c);
    test_head_xent(c, SRT_F32), sync_all(c);
    test_convert_zero_copy(c), sync_all(c);
    test_optimizer(c), sync_all(c);
    test_collectives_1rank(c), sync_all(c);
    test_nvme(c, "nvme write/read at unaligned offsets (O_DIRECT, io_uring)", true, true), sync_all(c);
    test_load_batch(c), sync_all(c);
    check(chk_races(c) == 0, "no race in the fp32 tests");
    check(c->nallocs == allocs, "no allocation after creation (fp32 context)");
    printf("fp32 context: %lld allocations at creation (%lld bytes)\n", (long long)allocs,
           (long long)c->alloc_bytes);
    ctx_destroy(c);

    setenv("SRT_NVME_URING", "0", 1);   /* O_DIRECT through pread/pwrite */
    c = make_ctx(SRT_BF16, NULL);
    unsetenv("SRT_NVME_URING");
    allocs = c->nallocs;
    test_bf16(c), sync_all(c);
    test_matmul_batched(c, SRT_BF16, "bf16"), sync_all(c);
    test_matmul_gelu_batched(c, SRT_BF16, "bf16"), sync_all(c);
    test_gelu_fused(c, SRT_BF16, N, "bf16"), sync_all(c);
    test_head_xent(c, SRT_BF16), sync_all(c);
    test_attention_rope(c, SRT_BF16), sync_all(c);
    test_nvme(c, "nvme write/read on O_DIRECT without io_uring (pread/pwrite, bounce buffer)", true, false), sync_all(c);
    check(chk_races(c) == 0, "no race in the bf16 tests");
    check(c->nallocs == allocs, "no allocation after creation (bf16 context)");
    printf("bf16 context: %lld allocations at creation (%lld bytes)\n", (long long)allocs,
           (long long)c->alloc_bytes);
    ctx_destroy(c);

    setenv("SRT_NVME_DIRECT", "0", 1);   /* the page-cache path of file systems without O_DIRECT */
    c = make_ctx(SRT_F32, NULL);
    unsetenv("SRT_NVME_DIRECT");
    test_nvme(c, "nvme write/read without O_DIRECT (pread/pwrite)", false, false), sync_all(c);
    ctx_destroy(c);

    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
