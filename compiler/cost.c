/* cost.c — how long each op of a schedule takes on the spec's cluster.
 *
 *  - GEMM-bearing compute (layer forward / backward / recompute, the head):
 *    FLOPs against the GPU's dense peak times an efficiency that depends on
 *    the shape of each GEMM the op runs (cost_gemm_eff), plus the
 *    memory-bound kernels around them (norms, residual adds, activations,
 *    cross-entropy) by bytes against HBM, plus a launch cost per kernel;
 *  - memory-bound ops (embedding, the optimizer step, the gradient norm):
 *    bytes against HBM (or the host's bandwidth for the host optimizer);
 *  - collectives: latency + bytes · NCCL's bus factor / bandwidth of the link
 *    the group spans (NVLink inside a node, the network across nodes);
 *  - copies: PCIe, NVMe.
 *
 * The compute constants form one profile per GPU generation (CostProfile),
 * fitted on a named calibration set and checked on a disjoint validation set
 * (tests/bench/costmodel, docs/cost-model.md); no per-row fudge.
 *
 * A spec whose cluster.profile measured the CPU backend (shardc calibrate) is
 * priced by the CPU model instead ("the CPU backend" below): the same pieces
 * at the profile's measured rates, ranks sharing the node's cores, and the
 * backend's execution, every op run when it is issued (cost_at_issue).
 */
#include "sim.h"

#include <math.h>

/* ---- the calibrated constants (docs/cost-model.md) ---------------------------- */

/* Per GPU generation (and the software stack its calibration set ran), the
 * compute constants; the rest (peaks, HBM, links) comes from the spec's
 * cluster.  A100: fitted on Narayanan et al. Table 1 (7 rows; Megatron-LM
 * 2021, attention unfused).  Hopper (H100, H200, H800): Megatron-Core with
 * Transformer Engine and cuDNN's fused attention, fitted on 3 rows of the
 * Megatron-Core H100 table.  A CPU profile (cluster.profile) prices the CPU
 * backend by its own measured rates instead (below). */
static const CostProfile cost_profiles[] = {
    {"a100", 0.67, 128.0, 0.40, 0.80, 4e-6},
    {"hopper", 0.80, 256.0, 0.80, 0.80, 4e-6},
};

/* The compute constants of a GPU (enum GpuProfile). */
const CostProfile *cost_profile_gpu(int gpu)
{
    switch (gpu) {
    case GPU_H100_SXM_80GB: case GPU_H200_141GB: case GPU_H800_80GB: return &cost_profiles[1];
    default: return &cost_profiles[0];
    }
}

/* The compute constants of the spec's GPU. */
const CostProfile *cost_profile(const Spec *s) { return cost_profile_gpu(s->cluster.gpu); }

/* Setup of one PCIe or NVMe transfer, seconds. */
#define COST_COPY_S 10e-6

/* ---- the op's class and the spec --------------------------------------------- */

/* The dense peak the step computes at, FLOP/s: bf16 (fp16) or fp32. */
double cost_peak(const Spec *s)
{
    double tf = s->precision.dtype == DT_FP32 ? s->cluster.fp32_tflops : s->cluster.bf16_tflops;
    return tf * 1e12;
}

/* FLOP/s per GPU that MFU and HFU are counted against: cost_peak, except
 * that a CUDA profile's fitted peak prices and the data sheet counts. */
double cost_mfu_peak(const Spec *s)
{
    double tf = s->precision.dtype == DT_FP32 ? s->cluster.mfu_fp32_tflops : s->cluster.mfu_bf16_tflops;
    return tf > 0 ? tf * 1e12 : cost_peak(s);
}

/* One factor of the shape curve. */
static double dim_factor(const CostProfile *cp, double x) { return x > 0 ? x / (x + cp->gemm_dim) : 0; }

/* Fraction of peak an M×K by K×N GEMM reaches. */
double cost_gemm_eff(const CostProfile *cp, double M, double N, double K)
{
    return cp->gemm_eff * dim_factor(cp, M) * dim_factor(cp, N) * dim_factor(cp, K);
}

/* Fraction of peak the attention core reaches with head dimension hd. */
double cost_attn_eff(const CostProfile *cp, double hd) { return cp->attn_eff * dim_factor(cp, hd); }

/* Seconds to stream bytes through HBM. */
static double hbm_time(const Spec *s, double bytes) { return bytes / (s->cluster.hbm_bandwidth * cost_profile(s)->hbm_eff); }

/* Launch and tail of n kernels, seconds. */
static double kernels_time(const Spec *s, double n) { return n * cost_profile(s)->kernel_s; }

/* The pieces of a transformer layer (bits of a mask). */
enum { PC_QKV = 1, PC_PROJ = 2, PC_CORE = 4, PC_MLP_IN = 8, PC_MLP_OUT = 16,
       PC_ATTN = PC_QKV | PC_PROJ | PC_CORE, PC_MLP = PC_MLP_IN | PC_MLP_OUT, PC_ALL = PC_ATTN | PC_MLP };

/* The pieces an op runs: a whole layer, its attention or MLP half (tp > 1
 * splits the layer around its collectives), or the attention core alone
 * (selective recompute); a backward's weight op (tp_comm_overlap) runs only
 * the linears' weight GEMMs; tp_comm_overlap full splits a forward half into
 * its op up to the row-parallel GEMM (GR_HEAD) and that GEMM's token-row
 * chunks (GR_ROWS); a full recompute of its group's last layer runs no MLP
 * down projection (GR_NO_OUTPUT). */
static int op_pieces(const Partition *p, const Op *o)
{
    if (o->kind == OP_RECOMPUTE && p->spec->checkpointing.activations == CKPT_SELECTIVE) return PC_CORE;
    int pc = o->sub == SUB_ATTN ? PC_ATTN : o->sub == SUB_MLP ? PC_MLP : PC_ALL;
    if (o->grads == GR_HEAD) return pc & ~(PC_PROJ | PC_MLP_OUT);
    if (o->grads == GR_NO_OUTPUT) return pc & ~PC_MLP_OUT;
    if (o->grads == GR_ROWS) return pc & (PC_PROJ | PC_MLP_OUT);
    if (o->grads == GR_COLS) return pc & (PC_QKV | PC_MLP_IN);
    return o->grads == GR_WEIGHT ? pc & ~PC_CORE : pc;
}

/* Whether op o is the head of a forward part whose column-parallel GEMMs
 * ran in token-row chunks before it (part_tp_cols): its pieces' norm and
 * residual stay its own, their first GEMMs (and GELU, in their epilogue)
 * are the chunks'. */
static bool is_cols_head(const Partition *p, const Op *o) { return o->grads == GR_HEAD && part_tp_cols(p); }

/* Whether forward op o stops before a half's row-parallel GEMM and the
 * residual added to its output: the op up to it of tp_comm_overlap full
 * (GR_HEAD; the chunks run them), or a recompute group's last layer, which
 * runs neither of the MLP's (GR_NO_OUTPUT). */
static bool stops_before_rows(const Op *o) { return o->grads == GR_HEAD || o->grads == GR_NO_OUTPUT; }

/* The pieces whose linears' GEMMs op o runs: its pieces, but for such a head. */
static int op_gemms(const Partition *p, const Op *o, int pieces)
{
    return is_cols_head(p, o) ? pieces & ~(PC_QKV | PC_MLP_IN) : pieces;
}

/* Whether the MLP's activation is GELU in its input GEMM's epilogue (and so
 * moves with that GEMM into the column chunks). */
static bool act_in_gemm(const Partition *p) { return p->spec->model.activation == ACT_GELU; }

/* The GEMM calls of a chunk (GR_ROWS, GR_COLS) on a backend, per linear:
 * one, except on the CPU under sequence parallelism, where
 * srt_matmul_fwd_batched runs its tp blocks (each tp rank's rows of the
 * chunk) as tp calls (OpenBLAS has no batched sgemm); cuBLASLt runs the
 * strided batch as one kernel. */
static int rows_calls(const Partition *p, bool cpu) { return cpu && p->T_sp < p->T ? (int)p->tp : 1; }

/* The token rows of each of an op's GEMM calls: a microbatch's, or one
 * chunk's (tp_comm_overlap full's GR_ROWS), T / k, split among its calls
 * (rows_calls): the smaller GEMMs reach a lower efficiency, which is what
 * chunking costs.  A GPU's strided batch is priced as one GEMM of its
 * T / k rows: the approximation that the batch's kernel reaches the
 * efficiency of one matrix of all its rows (the tiles of a batch's matrices
 * fill the SMs together, as one matrix's do). */
static double op_rows(const Partition *p, const Op *o, bool cpu)
{
    if (o->grads != GR_ROWS && o->grads != GR_COLS) return (double)p->T;
    return (double)p->T / (double)p->tpc / (double)rows_calls(p, cpu);
}

/* The kernels of a chunk (GR_ROWS): its GEMM calls and the residual's add. */
static int rows_kernels(const Partition *p, bool cpu) { return rows_calls(p, cpu) + 1; }

/* Bytes of the residual folded into a forward half's row-parallel GEMM's
 * partial sums (one pass of [T_sp, h] read twice and written): the chunks
 * of tp_comm_overlap full add it row by row, the head does not. */
static double resid_bytes(const Partition *p) { return 3.0 * (double)p->T_sp * (double)p->model->h * p->wbytes; }

/* The attention core's FLOPs against the linears' in an op, relative to a
 * forward's: a backward's data op (tp_comm_overlap) runs each linear's data
 * GEMM once and the attention core's backward, twice its forward. */
static double op_core_weight(const Op *o) { return o->grads == GR_DATA ? 2 : 1; }

/* The GEMM kernels of an op's weight GEMMs (tp_comm_overlap's weight op: two
 * a half, the linears in and out), which the data op does not launch. */
static int weight_kernels(const Op *o, int pieces)
{
    int k = (pieces & PC_ATTN ? 2 : 0) + (pieces & PC_MLP ? 2 : 0);
    return o->grads == GR_DATA || o->grads == GR_WEIGHT ? k : 0;     /* (a forward head launches them all) */
}

/* ---- the CPU backend, from a measured profile ------------------------------------
 * A rank's kernels run at the profile's rates for the threads it has (the
 * README's launch: cores / ranks on the node), slowed by the sharing test's
 * factor for that many ranks on the node (or the cores' share, w·threads /
 * cores, where it was not measured); an op costs its kernels' GEMM seconds
 * (the measured FLOP/s at each GEMM's shape), attention seconds, streamed
 * bytes at the measured bandwidth for their size, and a fixed cost per
 * kernel; collectives the alpha-beta measured for their op, group size and
 * ranks per node, plus, where the ranks oversubscribe the cores, the arrival
 * skew measured after the compute before them (cpu_skew). */

/* What prices a rank on the CPU backend. */
typedef struct CpuRank {
    const Profile *pf;
    int dt;                     /* enum DType                                   */
    double threads;
    double share_gemm, share_ew;/* slowdowns of sharing the node's cores         */
    int64_t w;                  /* ranks on a node                              */
    double warm;                /* the fraction of its GEMMs' operands found in the
                                   last-level cache (cpu_warm)                   */
} CpuRank;

/* Whether the spec is priced by the CPU model (a CPU profile). */
bool cost_cpu_priced(const Spec *s) { return s->cluster.profile && s->cluster.profile->backend == PROFILE_CPU; }

/* Whether the backend runs every op when it is issued (sim.c then orders a
 * rank's ops as they are issued; sends and receives are only posted then). */
bool cost_at_issue(const Spec *s) { return cost_cpu_priced(s); }

/* The bytes a rank of class c touches between two uses of one of its
 * weights (the forward of one microbatch and the next, or its backward): its
 * weights and their gradients, and one microbatch's activations of its
 * layers, the layer input and what the checkpointing policy keeps. */
static double cpu_rank_bytes(const Partition *p, const RankClass *c)
{
    int64_t layers = 0;
    for (int i = 0; i < c->nchunks; i++) layers += c->chunks[i].nlayers;
    int pol = p->spec->checkpointing.activations;
    return (double)c->numel * (double)(p->wbytes + p->gbytes) + (double)layers * (double)(p->act.x + p->act.saved[pol]);
}

/* The fraction of a rank's GEMM operands that stay in the node's last-level
 * cache between their uses: the w ranks on the node (each its class's
 * bytes, the mean over the classes weighted by their ranks) share the cache
 * (profile_warm_fraction); 0 without warm rows in the profile. */
static double cpu_warm(const Partition *p, int64_t w)
{
    double bytes = 0, ranks = 0;
    for (int c = 0; c < p->nclasses; c++) {
        bytes += (double)p->classes[c].count * cpu_rank_bytes(p, &p->classes[c]);
        ranks += (double)p->classes[c].count;
    }
    return profile_warm_fraction(p->spec->cluster.profile, ranks > 0 ? (double)w * bytes / ranks : 0);
}

static CpuRank cpu_rank(const Partition *p)
{
    const Spec *s = p->spec;
    const Profile *pf = s->cluster.profile;
    int64_t w = p->world < s->cluster.gpus_per_node ? p->world : s->cluster.gpus_per_node;
    int t = profile_threads(pf, w);
    return (CpuRank){pf, s->precision.dtype, t, profile_sharing(pf, w, t, true), profile_sharing(pf, w, t, false), w,
                     cpu_warm(p, w)};
}

/* The step of ranks that share their node's cores in time (CPU profile, W
 * ranks of t threads with W·t > cores): the simulation priced every op at
 * the sharing measured with all W ranks busy, share = W·t / cores times a
 * slice each, but a rank that waits (a pipeline bubble, a late peer) yields
 * its core, and the busy ones then run faster.  Processor sharing bounds the
 * step below by the chain at one slice a rank (the timeline over share) and
 * by the node's work over its cores (the mean rank's busy seconds, priced at
 * share already); the step is the larger.  With every rank busy the whole
 * step the second is the timeline itself (no change), with a core per rank
 * (share <= 1) nothing changes. */
double cost_shared_step(const Plan *mp, double timeline, const double *busy)
{
    if (!cost_cpu_priced(mp->spec) || timeline <= 0) return timeline;
    CpuRank r = cpu_rank(&mp->part);
    double share = (double)r.w * r.threads / (double)r.pf->cores;
    if (share <= 1) return timeline;
    double work = 0, ranks = 0;
    for (int c = 0; c < mp->mem.nclasses; c++) {
        double n = (double)mp->mem.classes[c].cls->count;
        work += n * busy[c], ranks += n;
    }
    double mean = ranks > 0 ? work / ranks : 0;
    return fmin(timeline, fmax(timeline / share, mean));
}

/* Seconds of one GEMM (bwd: srt_matmul_bwd's two, 4·M·N·K FLOPs): the
 * cold rate's seconds, less the warm fraction of the difference to the warm
 * rate's (never more than cold, never less than warm). */
static double cpu_gemm(const CpuRank *r, bool bwd, double M, double N, double K)
{
    double f = (bwd ? 4 : 2) * M * N * K;
    if (!(f > 0)) return 0;
    double cold = f / profile_gemm_rate(r->pf, r->dt, bwd, r->threads, M, N, K);
    double warm = r->warm > 0 ? f / profile_gemm_warm_rate(r->pf, r->dt, bwd, r->threads, M, N, K) : cold;
    return (cold - r->warm * (cold - warm)) * r->share_gemm;
}

/* Seconds of kernels streaming `bytes` in the working dtype, `each` bytes a kernel. */
static double cpu_stream(const CpuRank *r, double bytes, double each)
{
    return bytes > 0 ? bytes / profile_stream_rate(r->pf, r->dt, r->threads, each > 0 ? each : bytes) * r->share_ew : 0;
}

/* Seconds of n kernels' fixed cost. */
static double cpu_kernels(const CpuRank *r, double n) { return n * profile_launch(r->pf, r->threads) * r->share_ew; }

/* One linear of a layer on this rank: its piece and its GEMM, out(M,N) =
 * in(M,K) . w^T. */
typedef struct Linear { int piece; double M, N, K; } Linear;

/* The four linears of a layer on this rank (qkv, attention output, MLP in,
 * MLP out). */
static void layer_linears(const Partition *p, Linear g[4])
{
    const Model *m = p->model;
    double T = (double)p->T, t = (double)p->tp, h = (double)m->h, hd = (double)m->hd;
    double a = (double)m->a, kv = (double)m->kv, ffn = (double)m->ffn;
    g[0] = (Linear){PC_QKV, T, (a + 2 * kv) * hd / t, h};           /* column-parallel            */
    g[1] = (Linear){PC_PROJ, T, h, a * hd / t};                     /* row-parallel               */
    g[2] = (Linear){PC_MLP_IN, T, (m->gated ? 2 : 1) * ffn / t, h}; /* gate and up, column-par.  */
    g[3] = (Linear){PC_MLP_OUT, T, h, ffn / t};                     /* row-parallel               */
}

/* The piece of a layer whose GEMM multiplies by a tensor of this role (0: no
 * linear's weight). */
static int linear_piece(int role)
{
    switch (role) {
    case R_QKV_W: case R_Q_W: case R_K_W: case R_V_W: return PC_QKV;
    case R_ATTN_OUT_W: return PC_PROJ;
    case R_FC1_W: case R_GATE_W: case R_UP_W: return PC_MLP_IN;
    case R_FC2_W: return PC_MLP_OUT;
    default: return 0;
    }
}

/* The GEMMs of one layer as the CPU trainer runs them, a call per linear of
 * the model's inventory (Llama's q, k, v and gate, up apart, GPT's fused
 * c_attn one), out(T, N) = in(T, K) . w^T on this rank's tp slice; returns
 * how many (at most 8). */
static int cpu_layer_gemms(const Partition *p, Linear g[8])
{
    const Model *m = p->model;
    int n = 0;
    for (int i = m->layer_first[1]; i < m->layer_first[2] && n < 8; i++) {
        const Tensor *x = &m->t[i];
        int piece = linear_piece(x->role);
        if (!piece) continue;
        double N = (double)x->rows, K = (double)x->cols;
        if (x->split == SPLIT_ROWS || x->split == SPLIT_QKV) N /= (double)p->tp;
        else if (x->split == SPLIT_COLS) K /= (double)p->tp;
        else if (x->split == SPLIT_KV) N = (double)(model_kv_rank(m) * m->hd);
        g[n++] = (Linear){piece, (double)p->T, N, K};
    }
    return n;
}

/* How many more GEMM calls the CPU trainer makes for the pieces than the
 * layer's four linears: Llama's k, v and up projections. */
static int cpu_extra_gemms(const Partition *p, int pieces)
{
    Linear g[8], f[4];
    int n = cpu_layer_gemms(p, g), extra = 0;
    layer_linears(p, f);
    for (int i = 0; i < n; i++) extra += (pieces & g[i].piece) != 0;
    for (int i = 0; i < 4; i++) extra -= (pieces & f[i].piece) != 0;
    return extra > 0 ? extra : 0;
}

/* Seconds per FLOP of the given pieces of one transformer layer's forward on
 * this rank: its linears (qkv, attention output, MLP in, MLP out) and the
 * attention core, each at its own efficiency, FLOP-weighted.  bwd: the
 * backward's own measured rates (the CPU model; the GPU's curve is the same
 * both ways). */
static double layer_sec_per_flop(const Partition *p, int pieces, bool bwd, double core_w, double rows)
{
    const Model *m = p->model;
    double T = (double)p->T, t = (double)p->tp, hd = (double)m->hd, a = (double)m->a;
    double peak = cost_peak(p->spec);
    Linear g[4];
    layer_linears(p, g);
    bool cpu = cost_cpu_priced(p->spec);
    CpuRank r = cpu ? cpu_rank(p) : (CpuRank){0};
    const CostProfile *cp = cost_profile(p->spec);
    double flops = 0, sec = 0;
    for (int i = 0; i < 4; i++) {
        if (!(pieces & g[i].piece)) continue;
        double f = 2 * rows * g[i].N * g[i].K;
        flops += f;
        if (!cpu) sec += f / (peak * cost_gemm_eff(cp, rows, g[i].N, g[i].K));
    }
    if (cpu) {   /* the same FLOPs, at the rates of the GEMMs the trainer calls */
        Linear x[8];
        int n = cpu_layer_gemms(p, x);
        for (int i = 0; i < n; i++)
            if (pieces & x[i].piece) sec += cpu_gemm(&r, bwd, rows, x[i].N, x[i].K) / (bwd ? 2 : 1);
    }
    if (pieces & PC_CORE) {
        double fa = core_w * 4 * T * (double)m->s * a * hd / t;  /* QK^T and P·V, as model.c counts */
        flops += fa;
        /* the backward's rate counts its 2·fa FLOPs, and its seconds are halved as the GEMMs' */
        sec += cpu ? fa / profile_attn_rate(r.pf, r.dt, bwd, r.threads, (double)m->s, hd) * r.share_gemm
                   : fa / (peak * cost_attn_eff(cp, hd));
    }
    return sec / flops;
}

/* Elements of the MLP's activation on this rank: its output, [T, ffn/t]. */
static double act_elems(const Partition *p) { return (double)p->T * (double)p->model->ffn / (double)p->tp; }

/* Bytes the MLP's activation moves (bwd: its backward): GELU is a cuBLASLt
 * epilogue that also writes its input; SwiGLU reads two and writes one. */
static double act_bytes(const Partition *p, bool bwd)
{
    double actf = p->model->gated ? (bwd ? 5 : 3) : (bwd ? 3 : 1);
    return (double)p->wbytes * actf * act_elems(p);
}

/* Bytes the memory-bound kernels of the pieces of one layer's forward (bwd:
 * backward) move: per half a norm and a bias + residual add on [T_sp, h];
 * the MLP's activation on [T, ffn/t] (GELU is a cuBLASLt epilogue that also
 * writes its input; SwiGLU reads two and writes one). */
static double layer_elementwise_bytes(const Partition *p, int pieces, bool bwd)
{
    const Model *m = p->model;
    double rows = (double)p->T_sp * (double)m->h;
    double norm = bwd ? 3 : 2, resid = 3;
    double half = (norm + resid) * rows, bytes = 0;
    if (pieces & PC_QKV) bytes += half;
    if (pieces & PC_MLP_IN) bytes += half;
    return (double)p->wbytes * bytes + (pieces & PC_MLP_IN ? act_bytes(p, bwd) : 0);
}

/* Bytes the CPU backend moves beyond layer_elementwise_bytes: Llama's rotary
 * embedding of q and k (read and written, forward and backward), and in the
 * backward the gradients the trainer zeroes before kernels that add into them
 * and the residual copies, as emit.c's tr_bwd writes them: the MLP half zeroes
 * the norm output's gradient [T, h] and, gated, SwiGLU's three [T, ffn/t]
 * (GELU's is written by its GEMM); the attention half the attention output's
 * [T, a·hd/t], q, k and v's [T, (a + 2kv)·hd/t] and the norm output's [T, h];
 * each half copies its residual's gradient, [T, h] read and written (under
 * sequence parallelism the norm op's, norm_op_time). */
static double cpu_extra_bytes(const Partition *p, int pieces, bool bwd)
{
    const Model *m = p->model;
    double T = (double)p->T, h = (double)m->h, t = (double)p->tp, hd = (double)m->hd, b = 0;
    if ((pieces & PC_QKV) && m->family == FAM_LLAMA) b += 2 * T * (double)(m->a + m->kv) * hd / t;
    if (!bwd) return (double)p->wbytes * b;
    double resid = p->T_sp < p->T ? 0 : 2 * T * h;
    if (pieces & PC_MLP_IN) b += T * h + (m->gated ? 3 * T * (double)m->ffn / t : 0) + resid;
    if (pieces & PC_QKV) b += T * (double)m->a * hd / t + T * (double)(m->a + 2 * m->kv) * hd / t + T * h + resid;
    return (double)p->wbytes * b;
}

/* Seconds of the MLP's activation on the CPU backend at the profile's
 * measured rate for it (GELU and SwiGLU take an exp per element: computed,
 * not streamed); -1 for another activation or a profile without activation
 * rows, which stream its bytes instead. */
static double cpu_act_time(const Partition *p, const CpuRank *r, bool bwd)
{
    int act = p->spec->model.activation;
    if (act != ACT_GELU && act != ACT_SWIGLU) return -1;
    double rate = profile_act_rate(r->pf, act == ACT_GELU ? PROFILE_GELU : PROFILE_SWIGLU, r->dt, bwd, r->threads);
    return rate > 0 ? act_elems(p) / rate * r->share_ew : -1;
}

/* Seconds of `rows` token rows of a layer's norm (layernorm, or RMSNorm) on
 * the CPU backend, forward or backward, at the profile's measured rate for
 * that shape: its row sums are computed row by row, so a norm over a few
 * hundred rows takes several times what its bytes stream in (gpt-1 of the
 * fidelity benchmark: 15.7 µs forward and 20.0 µs backward a call at one
 * thread, against 1.6 and 2.0 µs as bytes and a kernel's fixed cost; the
 * measured call includes that cost).  -1 for a profile without norm rows,
 * which streams its bytes instead. */
static double cpu_norm_time(const Partition *p, const CpuRank *r, bool bwd, double rows)
{
    double h = (double)p->model->h;
    double rate = profile_norm_rate(r->pf, p->model->layernorm ? PROFILE_LAYERNORM : PROFILE_RMSNORM, r->dt, bwd,
                                    r->threads, rows, h);
    return rate > 0 ? rows * h / rate * r->share_ew : -1;
}

/* Seconds of the biases of the linears in `pieces` on the CPU backend:
 * kc_matmul_forward writes the bias into every output row before the GEMM
 * adds its product there (so the GEMM also reads its output), and
 * kc_matmul_backward sums the output gradient's columns; fp32 (staged) bytes
 * at the measured bandwidth, and a parallel loop each. */
static double cpu_bias_time(const Partition *p, const CpuRank *r, int pieces, bool bwd, double rows)
{
    if (!p->model->bias) return 0;
    Linear g[4];
    layer_linears(p, g);
    CpuRank f = *r;
    f.dt = DT_FP32;
    double t = 0;
    for (int i = 0; i < 4; i++) {
        if (!(pieces & g[i].piece)) continue;
        double out = rows * g[i].N * 4;
        t += cpu_stream(&f, (bwd ? 1 : 2) * out, out) + cpu_kernels(&f, 1);
    }
    return t;
}

/* Bytes and kernels of a layer op's memory-bound work that sequence
 * parallelism moves into the parts' norm ops: per half the forward's norm
 * (two passes, one kernel), the backward's norm and residual (six, one). */
static void sp_norm_share(const Partition *p, int pieces, bool bwd, double *bytes, int *kernels)
{
    if (p->T_sp == p->T) return;
    int halves = (pieces & PC_QKV ? 1 : 0) + (pieces & PC_MLP_IN ? 1 : 0);
    *bytes -= halves * (bwd ? 6.0 : 2.0) * (double)p->T_sp * (double)p->model->h * p->wbytes;
    *kernels -= halves;
}

/* A token-row chunk of a forward part's column-parallel GEMMs (GR_COLS,
 * part_tp_cols): for each of its linears (Llama's q, k, v and gate, up
 * apart) the chunk's strided batch, rows_calls GEMMs of op_rows rows each
 * at their own shape (the cost of chunking), with its bias, and GELU on the
 * chunk's rows where the GEMM's epilogue computes it; either backend. */
static double cols_time(const Partition *p, const Op *o, int pieces)
{
    bool cpu = cost_cpu_priced(p->spec);
    double rows = op_rows(p, o, cpu), calls = (double)rows_calls(p, cpu), k = (double)p->tpc;
    double t = o->flops * layer_sec_per_flop(p, pieces, false, 1, rows);
    double gemms = calls * (1 + cpu_extra_gemms(p, pieces));
    double ab = (pieces & PC_MLP_IN) && act_in_gemm(p) ? act_bytes(p, false) / k : 0;
    if (!cpu) return t + hbm_time(p->spec, ab) + kernels_time(p->spec, gemms);
    CpuRank r = cpu_rank(p);
    double act = ab > 0 ? cpu_act_time(p, &r, false) : -1;
    return t + (act >= 0 ? act / k : cpu_stream(&r, ab, ab)) + calls * cpu_bias_time(p, &r, pieces, false, rows) +
           cpu_kernels(&r, gemms);
}

/* A layer op on the CPU backend: its GEMMs and attention at the measured
 * rates, the linears' biases, the MLP's activation at its measured rate, its
 * other memory-bound kernels at the measured bandwidth for their size, and
 * each kernel's fixed cost. */
static double cpu_layer_time(const Partition *p, const Op *o, bool bwd, int pieces)
{
    CpuRank r = cpu_rank(p);
    double rows = op_rows(p, o, true);
    int gemms = op_gemms(p, o, pieces), moved = pieces & ~gemms;    /* moved: a head's, into the column chunks */
    /* (a head whose every GEMM is the chunks' has no FLOPs left but rounding) */
    double t = gemms && o->flops > 0 ? o->flops * layer_sec_per_flop(p, gemms, bwd, op_core_weight(o), rows) : 0;
    if (o->grads == GR_WEIGHT) return t + cpu_kernels(&r, weight_kernels(o, pieces));
    if (o->grads == GR_ROWS) {   /* a chunk: its GEMM calls (and biases), the residual on its rows */
        double rb = resid_bytes(p) / (double)p->tpc;
        double calls = (double)rows_calls(p, true);      /* its GEMM calls, each with its bias */
        return t + cpu_stream(&r, rb, rb) + calls * cpu_bias_time(p, &r, pieces, bwd, rows) +
               cpu_kernels(&r, rows_kernels(p, true));
    }
    if (o->grads == GR_COLS) return cols_time(p, o, pieces);
    int kernels = pieces == PC_CORE ? 1 : (pieces & PC_ATTN ? 5 : 0) + (pieces & PC_MLP ? 4 : 0) + cpu_extra_gemms(p, gemms);
    if (bwd) kernels += kernels + 2 - weight_kernels(o, pieces);
    if (stops_before_rows(o)) kernels -= 2;     /* the GEMM and the residual: the chunks', or none */
    kernels -= (moved & PC_QKV ? 1 : 0) + (moved & PC_MLP_IN ? 1 : 0);    /* the column GEMMs: the chunks' */
    double each = (double)p->T * (double)p->model->h * p->wbytes;
    double bytes = pieces == PC_CORE ? 0 : layer_elementwise_bytes(p, pieces, bwd) + cpu_extra_bytes(p, pieces, bwd);
    if (stops_before_rows(o)) bytes -= resid_bytes(p);
    sp_norm_share(p, pieces, bwd, &bytes, &kernels);   /* sp: the parts' norm ops' */
    bool act_here = (pieces & PC_MLP_IN) && !((moved & PC_MLP_IN) && act_in_gemm(p));
    if ((pieces & PC_MLP_IN) && !act_here) bytes -= act_bytes(p, bwd);     /* GELU: the column chunks' */
    double act = act_here ? cpu_act_time(p, &r, bwd) : -1;
    if (act >= 0) bytes -= act_bytes(p, bwd);   /* priced by its own rate instead */
    /* the halves' norms, where sequence parallelism has not moved them to the norm ops */
    int norms = p->T_sp < p->T || pieces == PC_CORE ? 0 : (pieces & PC_QKV ? 1 : 0) + (pieces & PC_MLP_IN ? 1 : 0);
    double norm = norms ? cpu_norm_time(p, &r, bwd, (double)p->T) : -1;
    if (norm >= 0) {   /* priced by their own rate instead, each call's fixed cost included */
        bytes -= norms * (bwd ? 3.0 : 2.0) * each;
        kernels -= norms;
    }
    return t + cpu_stream(&r, bytes, 3 * each) + fmax(act, 0) + norms * fmax(norm, 0) +
           cpu_bias_time(p, &r, gemms, bwd, rows) + cpu_kernels(&r, kernels);
}

/* Sequence parallelism's norm op (GR_NORM), on this rank's tokens.  A
 * forward part's (or a full recompute's): the norm, x read and its output
 * written, two [T/tp, h] passes, one kernel.  A backward part's: the norm's
 * statistics again (x read, the output written and dropped), the residual
 * copied, the norm's backward (its output's gradient, x and dx read, dx
 * written): eight passes, three kernels. */
static double norm_op_time(const Partition *p, bool bwd)
{
    double bytes = (bwd ? 8.0 : 2.0) * (double)p->T_sp * (double)p->model->h * p->wbytes;
    int kernels = bwd ? 3 : 1;
    if (cost_cpu_priced(p->spec)) {
        CpuRank r = cpu_rank(p);
        double rows = (double)p->T_sp, fwd = cpu_norm_time(p, &r, false, rows);
        if (fwd >= 0) {   /* the norm (twice backward: its statistics again) and its backward at their rates */
            double resid = 2 * rows * (double)p->model->h * p->wbytes;   /* backward: the residual copied */
            return fwd + (bwd ? cpu_norm_time(p, &r, true, rows) + cpu_stream(&r, resid, resid) + cpu_kernels(&r, 1) : 0);
        }
        return cpu_stream(&r, bytes, bytes / (bwd ? 4 : 2)) + cpu_kernels(&r, kernels);
    }
    return hbm_time(p->spec, bytes) + kernels_time(p->spec, kernels);
}

/* A layer op running `pieces` of a layer (forward, backward or recompute; all or part of the layer). */
static double layer_time_of(const Partition *p, const Op *o, bool bwd, int pieces)
{
    if (cost_cpu_priced(p->spec)) return cpu_layer_time(p, o, bwd, pieces);
    if (o->grads == GR_COLS) return cols_time(p, o, pieces);
    int gemms = op_gemms(p, o, pieces), moved = pieces & ~gemms;    /* moved: a head's, into the column chunks */
    double t = gemms && o->flops > 0 ? o->flops * layer_sec_per_flop(p, gemms, false, op_core_weight(o), op_rows(p, o, false))
                                     : 0;
    if (pieces == PC_CORE) return t + kernels_time(p->spec, 1);
    if (o->grads == GR_WEIGHT) return t + kernels_time(p->spec, weight_kernels(o, pieces));
    /* tp_comm_overlap full: a chunk is its GEMM call at its own shape and the residual on its rows */
    if (o->grads == GR_ROWS)
        return t + hbm_time(p->spec, resid_bytes(p) / (double)p->tpc) + kernels_time(p->spec, rows_kernels(p, false));
    /* the column GEMMs moved to the chunks, and GELU in their epilogue */
    int kernels = (pieces & PC_ATTN ? 4 : 0) + (pieces & PC_MLP ? 4 : 0) - (stops_before_rows(o) ? 2 : 0) -
                  (moved & PC_QKV ? 1 : 0) - (moved & PC_MLP_IN ? 1 : 0);
    double bytes = layer_elementwise_bytes(p, pieces, bwd) - (stops_before_rows(o) ? resid_bytes(p) : 0) -
                   ((moved & PC_MLP_IN) && act_in_gemm(p) ? act_bytes(p, bwd) : 0);
    sp_norm_share(p, pieces, bwd, &bytes, &kernels);   /* sp: the norm ops' */
    return t + hbm_time(p->spec, bytes) + kernels_time(p->spec, (bwd ? 2 : 1) * kernels - weight_kernels(o, pieces));
}

/* A layer op (forward, backward or recompute; all or part of the layer). */
static double layer_time(const Partition *p, const Op *o, bool bwd)
{
    if (o->grads == GR_NORM) return norm_op_time(p, bwd);
    return layer_time_of(p, o, bwd, op_pieces(p, o));
}

/* The forward FLOPs of a layer's pieces on this rank, as layer_sec_per_flop
 * counts them: the linears' GEMMs and the attention core. */
static double pieces_flops(const Partition *p, int pieces, double core_w)
{
    const Model *m = p->model;
    Linear g[4];
    layer_linears(p, g);
    double f = 0;
    for (int i = 0; i < 4; i++)
        if (pieces & g[i].piece) f += 2 * g[i].M * g[i].N * g[i].K;
    if (pieces & PC_CORE) f += core_w * 4 * (double)p->T * (double)m->s * (double)m->a * (double)m->hd / (double)p->tp;
    return f;
}

/* The pieces a layer's trainer function runs before the first kernel that
 * reads a parameter of `role` (the module's first tensor's): forward (and
 * full recompute) norm1, qkv, core, output projection, norm2, MLP in, MLP
 * out; backward the reverse.  A norm's memory-bound work counts with the
 * half it opens (layer_elementwise_bytes). */
static int pieces_before(int role, bool bwd)
{
    switch (role) {
    case R_NORM1_W: case R_NORM1_B: return bwd ? PC_ALL : 0;
    case R_QKV_W: case R_QKV_B: case R_Q_W: case R_K_W: case R_V_W: case R_Q_B: case R_K_B: case R_V_B:
        return bwd ? PC_MLP | PC_PROJ | PC_CORE : 0;
    case R_ATTN_OUT_W: case R_ATTN_OUT_B: return bwd ? PC_MLP : PC_QKV | PC_CORE;
    case R_NORM2_W: case R_NORM2_B: return bwd ? PC_MLP : PC_ATTN;
    case R_FC1_W: case R_FC1_B: case R_GATE_W: case R_UP_W: case R_GATE_B: case R_UP_B:
        return bwd ? PC_MLP_OUT : PC_ATTN;
    case R_FC2_W: case R_FC2_B: return bwd ? 0 : PC_ATTN | PC_MLP_IN;
    default: return 0;
    }
}

double cost_unit_start(const Sched *s, int op, int k)
{
    const Op *o = &s->ops[op];
    const Partition *p = s->part;
    bool bwd = o->kind == OP_LAYER_BWD;
    if (!sched_waits_per_module(p, o) || k < 0 || k >= o->nunit) return 0;
    int all = op_pieces(p, o), before = pieces_before(part_unit_role(p, s->cls, o->unit[k]), bwd) & all;
    if (!before) return 0;
    double fa = pieces_flops(p, all, op_core_weight(o));
    if (!(fa > 0)) return 0;
    Op part = *o;       /* the pieces before, at their share of the op's FLOPs */
    part.flops = o->flops * pieces_flops(p, before, op_core_weight(o)) / fa;
    double t = layer_time_of(p, &part, bwd, before), all_t = layer_time_of(p, o, bwd, all);
    return all_t > 0 ? fmin(t / all_t, 1.0) : 0;
}

/* The head: final norm, logits GEMM, fused cross-entropy and their backward. */
static double head_time(const Partition *p, const Op *o)
{
    const Model *m = p->model;
    double T = (double)p->T, h = (double)m->h, vt = (double)m->Vpad / (double)p->tp;
    double bytes = (double)p->wbytes * (5 * (double)p->T_sp * h + 3 * T * vt);
    if (cost_cpu_priced(p->spec)) {
        CpuRank r = cpu_rank(p);
        double fwd = cpu_norm_time(p, &r, false, (double)p->T_sp), norm = 0;
        int kernels = 8;
        if (fwd >= 0) {   /* the final norm and its backward at their rates, not 5 passes of bytes */
            norm = fwd + cpu_norm_time(p, &r, true, (double)p->T_sp);
            bytes -= (double)p->wbytes * 5 * (double)p->T_sp * h;
            kernels -= 2;
        }
        return cpu_gemm(&r, false, T, vt, h) + cpu_gemm(&r, true, T, vt, h) + norm +
               cpu_stream(&r, bytes, 3 * T * vt * p->wbytes) + cpu_kernels(&r, kernels);
    }
    double t = o->flops / (cost_peak(p->spec) * cost_gemm_eff(cost_profile(p->spec), T, vt, h));
    return t + hbm_time(p->spec, bytes) + kernels_time(p->spec, 8);
}

/* Elements of the optimizer sub-group an OP_OPT_READ / OP_OPT_WRITE moves:
 * the matching OP_OPT_STEP's (it does 16 FLOPs per element). */
static double subgroup_elems(const Sched *s, int op)
{
    int g = s->ops[op].chunk;
    for (int i = op + 1; i < s->nops; i++)
        if (s->ops[i].kind == OP_OPT_STEP && s->ops[i].aux == g && s->ops[i].stream == ST_HOST)
            return s->ops[i].flops / 16.0;
    for (int i = op - 1; i >= 0; i--)
        if (s->ops[i].kind == OP_OPT_STEP && s->ops[i].aux == g && s->ops[i].stream == ST_HOST)
            return s->ops[i].flops / 16.0;
    return 0;
}

/* Bytes an NVMe op reads or writes: the op's bytes when the schedule gives
 * them, else the sub-group's optimizer state (plus its 16-bit parameters
 * when they live on NVMe too). */
static double nvme_bytes(const Sched *s, int op)
{
    const Op *o = &s->ops[op];
    if (o->bytes > 0) return (double)o->bytes;
    const Spec *sp = s->part->spec;
    double per = (sp->precision.dtype == DT_FP32 ? 0 : 4) + (sp->train.optimizer == OPT_SGD ? 4 : 8);
    bool params = false;
    for (int i = 0; i < o->nwr; i++)
        if (s->bufs[o->wr[i]].space == SPACE_NVME && s->bufs[o->wr[i]].cat == CAT_PARAMS) params = true;
    return subgroup_elems(s, op) * (per + (params ? s->part->wbytes : 0));
}

/* Bytes of the device (or host) buffers an op reads: the gradient norm's input. */
static double read_bytes(const Sched *s, const Op *o, int space)
{
    double b = 0;
    for (int i = 0; i < o->nrd; i++)
        if (s->bufs[o->rd[i]].space == space) b += (double)s->bufs[o->rd[i]].bytes;
    return b;
}

/* ---- links ------------------------------------------------------------------- */

/* How a group's members sit on nodes: the members, whether they span nodes,
 * and how many share a node (those on the first member's node: the most for
 * a group aligned to nodes, fewer, so conservative, otherwise). */
typedef struct Span { int64_t n; bool cross; int64_t per_node; } Span;

/* The span of the group of ranks r0 + i·stride, i < n (stride > 0). */
static Span span_of(const Spec *s, int64_t r0, int64_t stride, int64_t n)
{
    int64_t G = s->cluster.gpus_per_node, k = 0;
    while (k < n && (r0 + k * stride) / G == r0 / G) k++;
    return (Span){n, k < n, k > 0 ? k : 1};
}

/* Whether the rank pairs (t, d, st) - (t, d, st2) of a class cross nodes:
 * any one crossing paces the class (its members run in lock step). */
static bool pair_crosses(const Partition *p, int64_t st, int64_t st2)
{
    int64_t G = p->spec->cluster.gpus_per_node, dmax = p->dp < G ? p->dp : G;
    for (int64_t d = 0; d < dmax; d++)
        for (int64_t t = 0; t < p->tp; t += p->tp > 1 ? p->tp - 1 : 1)
            if (part_rank(p, t, d, st) / G != part_rank(p, t, d, st2) / G) return true;
    return false;
}

/* The span of the op's group, for the rank class of pipeline stage `stage`. */
static Span group_span(const Partition *p, int stage, int group, int op_kind)
{
    int64_t r0 = part_rank(p, 0, 0, stage);
    switch (group) {
    case GRP_TP:
        return span_of(p->spec, r0, p->tp > 1 ? part_rank(p, 1, 0, stage) - r0 : 1, p->tp);
    case GRP_DP:
        return span_of(p->spec, r0, p->dp > 1 ? part_rank(p, 0, 1, stage) - r0 : 1, p->dp);
    case GRP_EMBED:
        return (Span){2, pair_crosses(p, 0, p->pp - 1), 1};
    case GRP_PP: {
        /* the neighbour a send or receive talks to (the interleaved
         * schedule wraps from the last stage to the first) */
        bool next = op_kind == OP_SEND_FWD || op_kind == OP_RECV_BWD;
        int64_t st2 = ((int64_t)stage + (next ? 1 : p->pp - 1)) % p->pp;
        return (Span){2, pair_crosses(p, stage, st2), 1};
    }
    default:
        return (Span){1, false, 1};
    }
}

/* Seconds of latency per ring step of a span's collective, averaged over the
 * n - 1 steps a chunk travels round the ring (NCCL's ring model): with its
 * members on `nodes` nodes (per_node on each), nodes - 1 of the steps cross
 * the network and the others stay on NVLink.  A group with one member per
 * node crosses the network at every step; one inside a node never. */
static double hop_latency(const Spec *s, const Span *sp)
{
    double nvl = cluster_nets[NET_NVLINK].latency_us * 1e-6, net = s->cluster.network_latency_us * 1e-6;
    if (!sp->cross || sp->n < 2) return nvl;
    double n = (double)sp->n, nodes = ceil(n / (double)(sp->per_node > 0 ? sp->per_node : 1));
    if (nodes < 2) nodes = 2;
    return ((n - nodes) * nvl + (nodes - 1) * net) / (n - 1);
}

/* Bytes/s of the link a span uses: NVLink inside a node; across nodes each GPU
 * brings its own NIC (cluster.inter_node is per GPU), so a group with k
 * members per node moves k NICs' worth, never more than NVLink feeds them. */
double cost_link_bandwidth(const Spec *s, bool cross, int64_t per_node)
{
    if (!cross) return s->cluster.intra_node;
    double bw = (double)per_node * s->cluster.inter_node;
    return bw < s->cluster.intra_node ? bw : s->cluster.intra_node;
}

/* NCCL's collective time: latency + bytes · bus factor / bandwidth. */
double cost_collective(int kind, double bytes, int64_t n, double bandwidth, double hop_s)
{
    if (n <= 1 && kind != COLL_SENDRECV) return 0;
    double nn = (double)n;
    switch (kind) {
    case COLL_ALLREDUCE: return 2 * (nn - 1) * hop_s + bytes * 2 * (nn - 1) / nn / bandwidth;
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER: return (nn - 1) * hop_s + bytes * (nn - 1) / nn / bandwidth;
    default: return hop_s + bytes / bandwidth;
    }
}

/* The collective an op performs (COLL_NONE for compute and copies). */
static int coll_of(const Sched *s, const Op *o)
{
    const Partition *p = s->part;
    switch (o->kind) {
    case OP_TP_ALLREDUCE: case OP_TIED_REDUCE: return COLL_ALLREDUCE;
    case OP_TP_ALLGATHER: case OP_GATHER: case OP_PARAM_GATHER: return COLL_ALLGATHER;
    case OP_TP_REDUCE_SCATTER: return COLL_REDUCE_SCATTER;
    case OP_GRAD_REDUCE:
        return p->zero >= 1 ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE;     /* as lower.c's reduce_op does */
    case OP_SEND_FWD: case OP_SEND_BWD: case OP_RECV_FWD: case OP_RECV_BWD: return COLL_SENDRECV;
    default: return COLL_NONE;
    }
}

/* ---- the entry points -------------------------------------------------------- */

/* The group an op communicates in (GRP_NONE for compute and copies). */
int cost_group(const Sched *s, int op)
{
    switch (s->ops[op].kind) {
    case OP_TP_ALLREDUCE: case OP_TP_ALLGATHER: case OP_TP_REDUCE_SCATTER: return GRP_TP;
    case OP_GATHER: case OP_GRAD_REDUCE: case OP_PARAM_GATHER: return GRP_DP;
    case OP_SEND_FWD: case OP_SEND_BWD: case OP_RECV_FWD: case OP_RECV_BWD: return GRP_PP;
    case OP_TIED_REDUCE: return GRP_EMBED;
    case OP_GRAD_NORM: return s->ops[op].stream == ST_DP_COMM ? GRP_DP : GRP_NONE;
    default: return GRP_NONE;
    }
}

/* The group's name as the reports print it. */
const char *cost_group_name(int group)
{
    static const char *const names[NGROUPS] = {"none", "tp", "dp", "pp", "embed"};
    return group >= 0 && group < NGROUPS ? names[group] : "?";
}

/* The profile's name of a Collective (PROFILE_ALLREDUCE ..). */
static int profile_op(int coll)
{
    return coll == COLL_ALLREDUCE ? PROFILE_ALLREDUCE : coll == COLL_ALLGATHER ? PROFILE_ALLGATHER
           : coll == COLL_REDUCE_SCATTER ? PROFILE_REDUCE_SCATTER : PROFILE_SENDRECV;
}

/* Seconds of a collective on the CPU backend: the profile's alpha-beta for
 * its op, span and group size at the ranks per node (scaled from another
 * group size when that one was not measured); -1 when the profile has none. */
static double cpu_coll_time(const Partition *p, int coll, bool cross, int64_t n, double bytes)
{
    if (n <= 1 && coll != COLL_SENDRECV) return 0;
    double sa, sb;
    const ProfFit *f = profile_coll(p->spec->cluster.profile, profile_op(coll), cross, cpu_rank(p).w, n, &sa, &sb);
    return f ? f->alpha * sa + f->beta * sb * bytes : -1;
}

/* Seconds a collective or point-to-point op of class stage takes. */
static double comm_time(const Sched *s, const Op *o, int group)
{
    const Partition *p = s->part;
    Span sp = group_span(p, s->cls->stage, group, o->kind);
    if (cost_cpu_priced(p->spec)) {
        double t = cpu_coll_time(p, coll_of(s, o), sp.cross, sp.n, (double)o->bytes);
        if (t >= 0) return t;
    }
    double bw = cost_link_bandwidth(p->spec, sp.cross, sp.per_node);
    return cost_collective(coll_of(s, o), (double)o->bytes, sp.n, bw, hop_latency(p->spec, &sp));
}

/* Seconds of a scalar all-reduce over every rank (the gradient norm, fp16's
 * overflow flag): latency only, NCCL's tree, 2·log2(world) hops. */
static double world_scalar_time(const Partition *p)
{
    const Spec *sp = p->spec;
    if (p->world <= 1) return 0;
    Span all = {p->world, p->world > sp->cluster.gpus_per_node, 1};
    if (cost_cpu_priced(sp)) {
        double t = cpu_coll_time(p, COLL_ALLREDUCE, all.cross, p->world, 8);
        if (t >= 0) return t;
    }
    return 2 * ceil(log2((double)p->world)) * hop_latency(sp, &all);
}

/* The trainer's calls over the owned range [lo, hi) of the class's shard
 * space (emit.c's owned helper: one srt_grad_sumsq or srt_optimizer_step per
 * piece of a tensor in a segment's shard), as on dp rank 0, and the elements
 * of those pieces (*elems); sumsq: the head's copy of the tied embedding
 * skipped, as the helper skips it. */
static int owned_calls(const Sched *s, int64_t lo, int64_t hi, bool sumsq, double *elems)
{
    const RankClass *rc = s->cls;
    int n = 0;
    *elems = 0;
    for (int k = 0; k < rc->nsegs; k++) {
        const Segment *sg = &rc->segs[k];
        int64_t a0 = lo > sg->shard_offset ? lo : sg->shard_offset;
        int64_t a1 = hi < sg->shard_offset + sg->shard ? hi : sg->shard_offset + sg->shard;
        if (a0 >= a1) continue;
        int64_t f0 = sg->offset + (a0 - sg->shard_offset), f1 = f0 + (a1 - a0);
        for (int t = sg->first; t < sg->first + sg->n; t++) {
            const ClassTensor *ct = &rc->tensors[t];
            int64_t b0 = f0 > ct->offset ? f0 : ct->offset, b1 = f1 < ct->offset + ct->numel ? f1 : ct->offset + ct->numel;
            if (b0 >= b1 || (sumsq && ct->copy)) continue;
            n++, *elems += (double)(b1 - b0);
        }
    }
    return n;
}

/* Elements of the class's shard space (ZeRO >= 1: this rank's shard; else
 * the whole flat space): what the owned helper ranges over. */
static int64_t shard_space(const Sched *s) { return s->part->zero >= 1 ? s->cls->shard : s->cls->padded; }

/* Seconds of this rank's squared gradient norm: read its gradients, a call
 * (a launch on a GPU) per tensor piece (owned_calls), each summing its squares
 * exactly into integer bins per exponent (kc_sumsq_add, kg_sumsq_add).  On the
 * CPU backend at the profile's measured rate per element, or its bytes
 * streamed with a profile that did not measure it. */
static double sumsq_time(const Sched *s, const Op *o)
{
    const Spec *sp = s->part->spec;
    double elems;
    int calls = owned_calls(s, 0, shard_space(s), true, &elems);
    if (calls < 1) calls = 1;
    if (cost_cpu_priced(sp)) {
        CpuRank r = cpu_rank(s->part);
        r.dt = DT_FP32;   /* the gradients' sums are read in their dtype; fp32's rate bounds it */
        double rate = profile_sumsq_rate(r.pf, r.threads);
        double work = rate > 0 ? elems / rate * r.share_ew
                               : cpu_stream(&r, read_bytes(s, o, o->stream == ST_HOST ? SPACE_HOST : SPACE_DEVICE), 0);
        return work + cpu_kernels(&r, calls);
    }
    if (o->stream == ST_HOST) return read_bytes(s, o, SPACE_HOST) / sp->cluster.host_bandwidth;
    return hbm_time(sp, read_bytes(s, o, SPACE_DEVICE)) + kernels_time(sp, calls);
}

/* Seconds of one optimizer sub-group's AdamW step: on the device fp32 master,
 * m, v read and written, the gradient read, the 16-bit parameters written; on
 * the host params, grads, m, v read and written in fp32 (32 bytes per element). */
static double opt_time(const Sched *s, const Op *o)
{
    const Partition *p = s->part;
    double n = o->flops / 16.0;
    bool cpu = cost_cpu_priced(p->spec);   /* the host's steps run the same kernel on the CPU backend */
    if (!cpu && o->stream == ST_HOST) return n * 32.0 / p->spec->cluster.host_bandwidth;
    /* a call per tensor piece in the sub-group's range (emit.c's owned helper):
     * device sub-groups from 0, host ones after the device's part of the shard space */
    int64_t lo = (int64_t)o->aux * p->spec->zero.sub_group_size;
    if (o->stream == ST_HOST) {
        double host = 0;
        for (int i = 0; i < s->nops; i++)
            if (s->ops[i].kind == OP_OPT_STEP && s->ops[i].stream == ST_HOST) host += s->ops[i].flops / 16.0;
        lo += shard_space(s) - (int64_t)host;
    }
    double elems;
    int calls = owned_calls(s, lo, lo + (int64_t)n, false, &elems);
    if (calls < 1) calls = 1;
    if (cpu) {
        CpuRank r = cpu_rank(p);
        return n / profile_opt_rate(r.pf, r.threads) * r.share_ew + cpu_kernels(&r, calls);
    }
    /* on the device each step follows its 16-bit gradient's conversion to fp32
     * (GPT-2 124M on an H200: 148 steps and 148 conversions a step) */
    bool staged = p->gbytes < 4 && p->spec->precision.dtype != DT_FP32;
    double per = 24.0 + (staged ? 4 : p->gbytes) + p->wbytes;
    return hbm_time(p->spec, n * per) + kernels_time(p->spec, calls * (staged ? 2 : 1));
}

/* Seconds of a copy, NVMe transfer or embedding on the CPU backend (the
 * profile's memcpy and swap-file fits, the streamed bytes); -1 for the other ops. */
static double cpu_io_time(const Sched *s, int op)
{
    const Op *o = &s->ops[op];
    const Partition *p = s->part;
    const Profile *pf = p->spec->cluster.profile;
    double bytes = (double)o->bytes;
    switch (o->kind) {
    case OP_LOAD_BATCH: case OP_CKPT_H2D: case OP_PARAM_H2D: return profile_io_seconds(pf, PROFILE_H2D, bytes);
    case OP_CKPT_D2H: case OP_GRAD_D2H: case OP_PARAM_D2H: return profile_io_seconds(pf, PROFILE_D2H, bytes);
    case OP_PARAM_FETCH: {
        double t = profile_io_seconds(pf, PROFILE_H2D, bytes);
        if (p->spec->offload.params == OFF_NVME) t = fmax(t, profile_io_seconds(pf, PROFILE_NVME_READ, bytes));
        return t;
    }
    case OP_OPT_READ: return profile_io_seconds(pf, PROFILE_NVME_READ, nvme_bytes(s, op));
    case OP_OPT_WRITE: return profile_io_seconds(pf, PROFILE_NVME_WRITE, nvme_bytes(s, op));
    case OP_EMBED_FWD: case OP_EMBED_BWD: {
        CpuRank r = cpu_rank(p);
        double b = 3.0 * (double)p->T * (double)p->model->h * p->wbytes;
        return cpu_stream(&r, b, b) + cpu_kernels(&r, 2);
    }
    default: return -1;
    }
}

/* Seconds a CPU rank's collective `op` waits for the other members of its
 * group, which take turns with it on the node's cores (0 with a core per
 * rank): the profile's arrival skew after the compute the rank ran since its
 * previous communication op (the ops between, priced at the all-busy
 * sharing, over the GEMM sharing factor: the reference GEMM time alone that
 * calibrate's compute_seconds counts).  The members of a group share a rank
 * class, which the simulation runs in lock step, so it cannot see them arrive
 * apart; a group of one waits for nobody.  A send or receive waits for a
 * rank of another class, whose timeline the simulation plays (the receive
 * ends with the send), so it is charged no skew: the CPU backend posts a
 * send without waiting, and a pipeline's ranks in a bubble are not taking
 * turns with anyone. */
static double cpu_skew(const Sched *s, int op)
{
    const Partition *p = s->part;
    const Op *o = &s->ops[op];
    if (!cost_cpu_priced(p->spec)) return 0;
    CpuRank r = cpu_rank(p);
    if (r.w * r.threads <= r.pf->cores) return 0;
    int coll = coll_of(s, o), group = cost_group(s, op);
    int64_t members = o->kind == OP_GRAD_NORM ? p->world : group_span(p, s->cls->stage, group, o->kind).n;
    if (coll == COLL_SENDRECV || members <= 1) return 0;
    double compute = 0;
    for (int i = op - 1; i >= 0 && cost_group(s, i) == GRP_NONE; i--) compute += cost_op_time(NULL, s, i);
    return profile_skew(r.pf, r.w, (int)r.threads, false, true, compute / r.share_gemm);
}

/* Seconds the op occupies its stream once it has started. */
double cost_op_time(const Plan *mp, const Sched *s, int op)
{
    (void)mp;
    const Op *o = &s->ops[op];
    const Partition *p = s->part;
    const Spec *sp = p->spec;
    double pcie = sp->cluster.pcie, bytes = (double)o->bytes;
    int group = cost_group(s, op);
    if (group != GRP_NONE && o->kind != OP_GRAD_NORM) return comm_time(s, o, group) + cpu_skew(s, op);
    if (cost_cpu_priced(sp)) {
        double t = cpu_io_time(s, op);
        if (t >= 0) return t;
    }
    switch (o->kind) {
    case OP_WAIT: return 0;
    case OP_LAYER_FWD: case OP_RECOMPUTE: return layer_time(p, o, false);
    case OP_LAYER_BWD: return layer_time(p, o, true);
    case OP_HEAD: return head_time(p, o);
    case OP_EMBED_FWD: case OP_EMBED_BWD:
        /* a row gather (or scatter-add) of [T, h] plus the positions */
        return hbm_time(sp, 3.0 * (double)p->T * (double)p->model->h * p->wbytes) + kernels_time(sp, 2);
    case OP_OPT_STEP: return opt_time(s, o);
    case OP_GRAD_SUMSQ: return sumsq_time(s, o);
    case OP_GRAD_NORM:
        /* the all-reduce of the partial sums; an older schedule also summed here */
        return world_scalar_time(p) + (o->stream == ST_DP_COMM ? cpu_skew(s, op) : sumsq_time(s, o));
    case OP_LOAD_BATCH: case OP_CKPT_D2H: case OP_CKPT_H2D: case OP_GRAD_D2H:
    case OP_PARAM_H2D: case OP_PARAM_D2H:
        return COST_COPY_S + bytes / pcie;
    case OP_PARAM_FETCH: {
        /* NVMe -> pinned host -> device is pipelined: the slower link paces it */
        double bw = sp->offload.params == OFF_NVME && sp->cluster.nvme < pcie ? sp->cluster.nvme : pcie;
        return COST_COPY_S + bytes / bw;
    }
    case OP_OPT_READ: case OP_OPT_WRITE: return COST_COPY_S + nvme_bytes(s, op) / sp->cluster.nvme;
    default: die("cost: no model for op kind %d (%s)", o->kind, sched_op_kind_name(o->kind));
    }
}
