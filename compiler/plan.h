/* plan.h — the planner: model inventory (model_), partition plan (part_),
 * the ordered ops of one training step (sched_), the memory plan (mem_), the
 * changes that would make a plan fit (fix_), the `shardc plan` report
 * (report_), and the planning passes run in order (plan_).
 *
 * Data flows one way, each pass taking the one before's output:
 *   resolved Spec -> Model (model_build) -> Partition (part_build: one
 *   RankClass per pipeline stage) -> Schedule (sched_build: the ops and
 *   buffers of each rank class) -> MemPlan (mem_plan: buffer lifetimes, arena
 *   offsets, the verdict).  A Plan holds them all (plan_build runs the four).
 * Everything is allocated from g_arena; nothing here holds global mutable state.
 *
 * Units: elements are counted per tensor-parallel shard unless a comment says
 * "logical"; bytes are exact; FLOPs are doubles.
 */
#ifndef SHARDC_PLAN_H
#define SHARDC_PLAN_H

#include "shardc.h"

/* ---- model.c: parameter inventory, FLOPs, the layer's activation graph -- */

/* What a parameter tensor is for; the emitter and the importers key on it. */
typedef enum TensorRole {
    R_TOK_EMBED, R_POS_EMBED,
    R_NORM1_W, R_NORM1_B, R_QKV_W, R_QKV_B, R_Q_W, R_K_W, R_V_W, R_Q_B, R_K_B, R_V_B,
    R_ATTN_OUT_W, R_ATTN_OUT_B, R_NORM2_W, R_NORM2_B,
    R_FC1_W, R_FC1_B, R_GATE_W, R_UP_W, R_GATE_B, R_UP_B, R_FC2_W, R_FC2_B,
    R_NORMF_W, R_NORMF_B, R_HEAD_W,
    R_NROLES
} TensorRole;

/* How tensor parallelism splits a tensor (Megatron). */
typedef enum TpSplit {
    SPLIT_NONE,     /* replicated on every tp rank (norms, row-parallel biases, positions) */
    SPLIT_ROWS,     /* dim 0: column-parallel linears, vocab-parallel embedding/head     */
    SPLIT_COLS,     /* dim 1: row-parallel linears                                        */
    SPLIT_QKV,      /* dim 0 per head: GPT's fused c_attn, each rank its heads' q, k, v rows */
    SPLIT_KV,       /* Llama k/v with 1 < kv < tp: dim 0 in kv parts, kv head r / (tp / kv) on
                       tp rank r, replicated on the tp / kv ranks sharing it (SRT_TP_KV) */
} TpSplit;

/* Where a tensor sits in the layer order. */
enum { LAYER_PRE = -1 };        /* embeddings; the final norm and head use layer = l */

typedef struct Tensor {
    const char *name;           /* "h.3.attn.c_attn.weight" (the family's usual name) */
    const char *local;          /* a layer's: its name after Model.layer_prefix and the
                                   layer ("attn.c_attn.weight"); else NULL          */
    int layer;                  /* LAYER_PRE, 0..l-1, or l (final norm, head)      */
    int role;                   /* TensorRole                                      */
    int64_t rows, cols;         /* logical shape [out, in]; cols = 0 for vectors   */
    int64_t rows_mem;           /* rows in memory: the vocabulary padded, else rows */
    int64_t numel;              /* logical elements                                */
    int split;                  /* TpSplit                                         */
    bool decay;                 /* weight decay applies (matrices, embeddings)      */
    int module;                 /* the submodule it belongs to (a linear with its bias,
                                   a norm, an embedding, the head): the index of the
                                   module's first tensor; ZeRO-3 gathers by module */
} Tensor;

typedef struct Model {
    int family;                 /* enum Family                                     */
    int64_t l, h, a, kv, hd;    /* layers, hidden, heads, kv heads, head dim       */
    int64_t V, Vpad, s, ffn;    /* vocab (logical / padded to 128·tp), seq, MLP    */
    int64_t tp;                 /* the tp the padding was computed for             */
    bool gated;                 /* SwiGLU: gate and up projections                 */
    bool dgelu;                 /* GELU's backward fused into the down projection's data
                                   GEMM (matmul_bwd_dgelu), which adds c_fc's bias
                                   gradient with dfc1 (not SwiGLU, not an extern op) */
    bool layernorm;             /* LayerNorm (mean + rstd) vs RMSNorm (rstd)       */
    bool bias, tied, learned_pos;
    const char *layer_prefix;   /* a layer tensor's name: this, its layer, ".", its local name */
    Tensor *t;                  /* every parameter tensor, in forward order        */
    int nt;
    int *layer_first;           /* [l + 3]: [0] = 0 (embeddings), [L + 1] = layer L's first
                                   tensor, [l + 1] = the final norm's, [l + 2] = nt      */
    int64_t params;             /* logical parameter count                         */
    int64_t params_layer;       /* one transformer layer                           */
    int64_t params_pre, params_post;        /* embeddings; final norm + untied head */
    int64_t params_mem;         /* elements in memory with the padded vocabulary   */
    int64_t linear_layer;       /* weight elements of the linears of one layer     */
    /* FLOPs for one sequence of s tokens (multiply by sequences). */
    double fl_layer_fwd, fl_layer_bwd;      /* one layer                           */
    double fl_recompute_full, fl_recompute_sel;   /* one layer                     */
    double fl_mlp_down;         /* one layer's MLP down projection (its GEMM's FLOPs) */
    double fl_head_fwd, fl_head_bwd;        /* the output projection               */
    /* FLOPs per optimizer step (global batch). */
    double flops_model_step;    /* no recompute: the MFU numerator                 */
    double flops_hw_full, flops_hw_selective;   /* hardware FLOPs under each policy, as
                                   the papers count them (a recompute replays whole layers;
                                   the step's own: Partition.flops_hw_step)        */
} Model;

/* The layer's activations as a small graph of kernel steps, so the saved set
 * and the transient peaks are computed, not hand-summed.  Widths are per token
 * and logical (before the tp split). */
typedef enum ActShard {
    AS_SEQ,         /* [T/t, w] under sequence parallelism, else [T, w]               */
    AS_FULL,        /* [T, w] on every tp rank (SP gathers, partial sums)             */
    AS_TP,          /* [T, w/t]: heads or MLP columns split over tp                  */
} ActShard;

typedef enum ActKind {
    AK_INPUT,       /* the layer input x (residual stream)                           */
    AK_OUTPUT,      /* the layer output (the next layer's input)                     */
    AK_SAVED,       /* kept for backward unless fully recomputed                     */
    AK_SAVED_ATTN,  /* kept for backward; recomputed under selective (attention core) */
    AK_TEMP,        /* transient in forward                                          */
    AK_REGATHER,    /* transient; gathered again in backward (SP linear inputs)      */
} ActKind;

/* The tensors the scratch rules single out (act.c's bounds and layouts),
 * so that they find them by role, not by name. */
typedef enum ActRole {
    AR_NONE,
    AR_NORM,        /* a norm's output or statistics (its own op on the shard under sp)  */
    AR_RESIDUAL,    /* x2, the attention residual's sum (its gradient is d1 under tp)    */
    AR_ACT,         /* the MLP activation's output (no gradient with the fused dGELU)    */
} ActRole;

/* Every tensor a layer's buffers hold, by what it is: the graph's tensors,
 * then the pieces the generated code adds (act.c lays them all out; the
 * emitter prints where each is). */
typedef enum ActPiece {
    AP_X, AP_NORM1_STATS, AP_NORM1_OUT, AP_NORM1_GATHERED, AP_QKV, AP_ATTN_OUT, AP_ATTN_LSE,
    AP_PROJ_PARTIAL, AP_PROJ_SCATTERED, AP_X2, AP_NORM2_STATS, AP_NORM2_OUT, AP_NORM2_GATHERED,
    AP_FC1,             /* fc1, or SwiGLU's gate                                         */
    AP_UP, AP_ACT, AP_FC2_PARTIAL, AP_FC2_SCATTERED, AP_Y,
    /* the backward's gradients inside the layer */
    AP_DX2, AP_DACT, AP_DGATE, AP_DUP, AP_DFC1, AP_DLN2, AP_DATT, AP_DQKV, AP_DLN1,
    /* the head's scratch */
    AP_LNF_STATS, AP_LOSSES, AP_LNF, AP_DLNF,
    NACTPIECES
} ActPiece;

typedef struct ActTensor {
    const char *name;           /* for people                                      */
    int id;                     /* ActPiece                                        */
    int64_t width;
    bool fp32;                  /* fp32 statistics; else the working dtype          */
    int shard;                  /* ActShard                                        */
    int kind;                   /* ActKind                                         */
    bool grad;                  /* has a gradient in backward                      */
    int role;                   /* ActRole                                         */
} ActTensor;

enum { ACT_MAX_TENSORS = 24, ACT_MAX_STEPS = 16 };
typedef struct ActStep { const char *name; int in[3], nin, out[2], nout; } ActStep;
typedef struct LayerGraph {
    ActTensor t[ACT_MAX_TENSORS];
    int nt;
    ActStep st[ACT_MAX_STEPS];
    int nst;
} LayerGraph;

/* Builds the inventory and FLOPs of the spec's model (vocabulary padded for
 * the spec's tp). */
void model_build(const Spec *s, Model *m);
/* The activation graph of one transformer layer of m; sp: sequence
 * parallelism with tp > 1 (adds the gathers and reduce-scatters). */
void model_layer_graph(const Model *m, bool sp, LayerGraph *g);
const char *model_role_name(int role);
/* The kv heads one tp rank holds: kv / tp, or (kv < tp) one kv head, replicated
 * on the tp / kv consecutive tp ranks that share it, as Megatron does for fewer
 * kv groups than tp (kv_heads = 1: on every tp rank). */
int64_t model_kv_rank(const Model *m);
/* FLOPs one sequence's recompute of `layers` consecutive layers runs under
 * checkpointing policy pol (enum CkptPolicy) in groups of `every`: full
 * replays every layer's forward but the MLP down projection of each group's
 * last layer (its output, the next group's checkpoint, exists); selective the
 * attention core; none nothing. */
double model_recompute_flops(const Model *m, int pol, int64_t layers, int64_t every);
/* Bytes of one element of a dtype (enum DType). */
int model_dtype_bytes(int dtype);

/* ---- part.c: ranks, TP slices, pipeline stages, ZeRO flat segments ------- */

/* Bytes of one layer's activations for one microbatch on one rank. */
typedef struct ActBytes {
    int64_t x;                  /* the layer input [T_sp, h]                       */
    int64_t ckpt;               /* the checkpointed input under full recompute     */
    int64_t saved[3];           /* kept for backward besides x, by CkptPolicy      */
    int64_t attn;               /* recreated by the selective recompute (o, lse)   */
    int64_t fwd_scratch[3];     /* transient peak of a forward, by CkptPolicy      */
    int64_t bwd_scratch;        /* transient peak of a backward                    */
    int64_t norm_scratch;       /* sp: a norm op's statistics (GR_NORM), this rank's tokens */
    int64_t boundary;           /* a stage boundary tensor [T_sp, h]              */
    int64_t boundary_slices;    /* tp under pp_scatter_gather (each tp rank sends
                                   1/tp of the boundary, the receiver all-gathers
                                   it over tp), else 1                            */
    int64_t full;               /* [T, h] in the working dtype                     */
    int64_t head_scratch;       /* the head op's transients                        */
} ActBytes;

/* A tensor inside a layer's buffer: bytes at an offset; while it is laid
 * out, its lifetime [born, dies] in steps of the op that uses it. */
typedef struct Piece { int id; int64_t off, bytes; int born, dies; } Piece;   /* id: ActPiece */
enum { ACT_MAX_PIECES = 32 };
typedef struct Carve { Piece p[ACT_MAX_PIECES]; int n; int64_t total; } Carve;

/* Where each tensor of a layer (and of the head) lies in its buffers, for the
 * spec's checkpoint policy (act.c). */
typedef struct ActLayout {
    Carve saved;                /* all a forward keeps without checkpointing (full
                                   checkpointing's recomputed buffer)              */
    Carve kept;                 /* what the forward keeps: the saved buffer       */
    Carve attn;                 /* selective: the recomputed attention core        */
    Carve fscr;                 /* the forward's scratch                            */
    Carve rscr;                 /* full: the recompute's scratch                    */
    Carve bscr;                 /* the backward's scratch                           */
    Carve hscr;                 /* the head's scratch                               */
} ActLayout;

/* One parameter tensor as one rank class holds it. */
typedef struct ClassTensor {
    int tensor;                 /* index into Model.t                              */
    int64_t rows, cols;         /* this tp rank's shard shape (rows padded)        */
    int64_t numel;              /* this tp rank's elements                         */
    int64_t offset;             /* into the class's flat parameter space           */
    int seg;                    /* the segment holding it                          */
    int chunk;                  /* model chunk (virtual stage) on this rank        */
    bool copy;                  /* the tied head's copy of the embedding (pp > 1)  */
} ClassTensor;

/* A flat buffer: the unit of padding and of dp sharding.  ZeRO 0-2: one
 * gradient bucket; ZeRO 3: one fetch unit (a layer, the embedding, the head)
 * or the persistent small parameters. */
typedef struct Segment {
    int first, n;               /* its ClassTensors                                */
    int64_t numel;              /* elements of its tensors                         */
    int64_t padded;             /* numel padded to the pad unit                    */
    int64_t shard;              /* padded / dp (ZeRO >= 1), else padded            */
    int64_t offset;             /* into the flat parameter space                   */
    int64_t shard_offset;       /* into one rank's shard space                     */
    int layer;                  /* the lowest layer whose grads it holds (LAYER_PRE..l) */
    int chunk;
    bool persistent;            /* ZeRO-3: small parameters kept gathered          */
    bool tied;                  /* the tied embedding copy: full grads, pp all-reduce */
} Segment;

/* A gradient reduction: consecutive segments reduced together, in the order
 * backward completes them. */
typedef struct Bucket { int first_seg, nseg; int64_t padded; int chunk; } Bucket;

/* A model chunk held by a pipeline rank (v > 1 with the interleaved schedule). */
typedef struct Chunk {
    int model_chunk;            /* 0 .. pp·v-1 in model order                      */
    int first_layer, nlayers;
    bool embed, head;           /* first chunk of the model / last                  */
} Chunk;

/* Ranks that differ only in their tp or dp index share one plan. */
typedef struct RankClass {
    int stage;                  /* pipeline rank                                   */
    int64_t count;              /* ranks in the class: tp · dp                     */
    Chunk *chunks;
    int nchunks;
    ClassTensor *tensors;
    int ntensors;
    Segment *segs;
    int nsegs;
    Bucket *buckets;            /* in backward order                               */
    int nbuckets;
    int64_t numel;              /* parameter elements on one rank (tp shard)       */
    int64_t padded;             /* the flat parameter space                        */
    int64_t shard;              /* elements this rank owns (ZeRO >= 1)              */
    int64_t persistent_numel;   /* ZeRO-3 persistent small parameters (padded)      */
    int64_t tied_padded;        /* the tied embedding's segment (unless persistent) */
    int64_t tied_numel;         /* elements of the tied embedding (or its copy) here */
    double cost;                /* FLOPs per microbatch (fwd + bwd + recompute)    */
} RankClass;

typedef struct Partition {
    const Spec *spec;
    const Model *model;
    int64_t tp, pp, dp, v, world;
    int64_t m, b;               /* microbatches per step, sequences per microbatch */
    int order;                  /* enum RankOrder                                  */
    int zero;
    int wbytes, gbytes;         /* working dtype, gradient-reduction dtype         */
    int64_t pad_unit;           /* segments are padded to a multiple of this       */
    int64_t *chunk_layers;      /* [pp·v]: layers of each model chunk              */
    int64_t *chunk_first;       /* [pp·v]: first layer of each model chunk         */
    double flops_hw_step;       /* hardware FLOPs a step runs: the model's, and the
                                   recompute of every chunk in its groups
                                   (model_recompute_flops), the HFU numerator      */
    RankClass *classes;         /* [pp]                                            */
    int nclasses;
    ActBytes act;               /* act_plan                                        */
    ActLayout layout;           /* act_plan                                        */
    int64_t T, T_sp;            /* tokens per microbatch, per rank under SP        */
    bool wsplit;                /* tp_comm_overlap with tp > 1: each tp part's backward is a
                                   data op and a weight op (OpGrads), its collective between */
    int64_t tpc;                /* tp_comm_overlap full with tp > 1: each forward part's
                                   row-parallel GEMM and all-reduce in tpc token-row chunks
                                   (GR_HEAD, GR_ROWS); else 1                      */
} Partition;

/* tp_comm_overlap full under sequence parallelism: each forward part's
 * all-gather and the column-parallel GEMMs reading it also run in tpc
 * token-row chunks (GR_COLS), the all-gathered norm output laid out chunk by
 * chunk (chunk j: tp rank r's local rows j, r = 0 .. tp-1). */
static inline bool part_tp_cols(const Partition *p) { return p->tpc > 1 && p->T_sp < p->T; }

/* Checks what the planner needs of a spec (divisibility, stage lists).  With
 * report, each problem is a diagnostic at the offending key; returns false if
 * the spec cannot be planned. */
bool part_check(const Spec *s, bool report);
/* Builds the partition plan (call part_check first). */
void part_build(const Spec *s, const Model *m, Partition *p);
/* Partition.flops_hw_step of p's spec, model and chunks (part_build; the step
 * of a few microbatches sets it again for the spec's). */
void part_hw_flops(Partition *p);
/* Whether the data op of a split backward part (wsplit, OpGrads GR_DATA) of
 * part sub (OpSub) writes weight gradients. */
bool part_data_grads(const Partition *p, int sub);
/* Whether the spec's NVMe parameter staging (offload.params buffer_count x
 * buffer_size) holds what passes through it on every rank: the largest
 * fetch unit's shard and a host optimizer sub-group (after part_build). */
bool part_check_staging(const Spec *s, const Partition *p, bool report);
/* Rank <-> (tp, dp, pp) coordinates under the spec's rank order. */
int64_t part_rank(const Partition *p, int64_t t, int64_t d, int64_t st);
void part_coords(const Partition *p, int64_t rank, int64_t *t, int64_t *d, int64_t *st);
/* The rows (SPLIT_ROWS) or columns (SPLIT_COLS) of a tensor tp rank t holds:
 * [*begin, *end) of dimension *dim; the whole tensor for SPLIT_NONE; for
 * SPLIT_QKV the rank's fraction, taken of each of the q, k and v blocks. */
void part_tp_slice(const Partition *p, const Tensor *t, int64_t tp_rank,
                   int *dim, int64_t *begin, int64_t *end);
/* The dp rank that owns a flat element of a class (ZeRO >= 1), or -1 past the end. */
int64_t part_owner(const Partition *p, const RankClass *c, int64_t flat);
/* The ranges of the flat space dp rank d owns: up to cap [begin, end) pairs. */
int part_shard_ranges(const Partition *p, const RankClass *c, int64_t d,
                      int64_t (*ranges)[2], int cap);
/* The class of a rank. */
int part_class_of(const Partition *p, int64_t rank);
/* Model layer L's index among class c's layers (its chunks' in chunk order:
 * with interleaved virtual stages they are not contiguous), or -1. */
int part_layer_slot(const RankClass *c, int L);
/* ZeRO-3: the role of the module a fetch unit (segment seg of class c) holds,
 * its first tensor's (a linear's weight, a norm's weight): what the trainer's
 * layer function and the cost model know the module by. */
int part_unit_role(const Partition *p, const RankClass *c, int seg);

/* ---- act.c: a layer's activations, kept and transient, laid out ---------- */

/* Does the forward keep graph tensor t for the backward under policy pol? */
bool act_kept(const ActTensor *t, int pol);
/* The step of g producing tensor i (-1: the layer input); the last step
 * reading it (prod when none does). */
int act_producer(const LayerGraph *g, int i);
int act_last_use(const LayerGraph *g, int i, int prod);
/* Sizes one layer's buffers (p->act) and lays out their tensors (p->layout)
 * for the partition's tp, micro-batch and the spec's policy (part_build). */
void act_plan(const Spec *s, Partition *p);
/* The piece id (ActPiece) of a carved buffer, or NULL. */
const Piece *act_piece(const Carve *cv, int id);

/* ---- sched.c: the ordered ops of one training step of a rank class ------ */

/* Streams: each op runs on one; ops of a stream run in list order, and every
 * dependency between streams is an explicit OP_WAIT (sim.h states the rules). */
typedef enum Stream { ST_COMPUTE, ST_TP_COMM, ST_DP_COMM, ST_PP_COMM, ST_COPY, ST_HOST, NSTREAMS } Stream;

typedef enum OpKind {
    OP_LOAD_BATCH,      /* tokens / targets of a microbatch to the device             */
    OP_RECV_FWD, OP_SEND_FWD, OP_RECV_BWD, OP_SEND_BWD,
    OP_EMBED_FWD, OP_LAYER_FWD, OP_HEAD,        /* head: final norm, logits, loss, backward */
    OP_RECOMPUTE,       /* full: replay a layer's forward; selective: the attention core */
    OP_LAYER_BWD, OP_EMBED_BWD,
    OP_CKPT_D2H, OP_CKPT_H2D,                   /* cpu checkpointing                 */
    OP_PARAM_FETCH,     /* offloaded parameter shard to the device (NVMe -> host -> device) */
    OP_GATHER,          /* ZeRO-3 all-gather of a fetch unit                          */
    OP_GRAD_REDUCE,     /* bucket all-reduce / reduce-scatter across dp               */
    OP_GRAD_D2H,        /* gradient shard to the host optimizer                        */
    OP_TIED_REDUCE,     /* tied embedding grads all-reduced between first and last stage */
    OP_GRAD_NORM,       /* all-reduce of the squared-norm partial sums over the world (aux 0;
                           aux 1: fp16's overflow flag, max) on ST_DP_COMM: clipping, overflow */
    OP_OPT_READ, OP_OPT_STEP, OP_OPT_WRITE,     /* per sub-group; reads/writes: NVMe  */
    OP_PARAM_H2D,       /* updated parameter shard from the host                       */
    OP_PARAM_D2H,       /* updated parameter shard to host-resident parameters         */
    OP_PARAM_GATHER,    /* ZeRO 1/2: all-gather updated parameters (in place)          */
    OP_WAIT,            /* the compute stream waits for an async op                    */
    OP_TP_ALLREDUCE,    /* Megatron's g (and f in backward): all-reduce across tp      */
    OP_TP_ALLGATHER,    /* sequence parallelism: gather the sequence-sharded input     */
    OP_TP_REDUCE_SCATTER, /* sequence parallelism: reduce-scatter the partial output   */
    OP_GRAD_SUMSQ,      /* this rank's share of the squared gradient norm (compute or host) */
    NOPKINDS
} OpKind;

enum { OP_MAX_RD = 16, OP_MAX_WR = 24 };
/* ZeRO-3 fetch units one op computes with: a layer's submodules (Llama with
 * every parameter partitioned: two norms and seven linears), or the head's
 * final norm, head and tied embedding. */
enum { OP_MAX_UNITS = 10 };

/* Which part of a transformer layer an op runs when tp > 1 splits the layer
 * around its TP collectives (compute parts and the collectives alike). */
typedef enum OpSub {
    SUB_WHOLE,          /* the whole layer (tp = 1), or not a layer op              */
    SUB_ATTN,           /* norm1, qkv, attention core, output projection           */
    SUB_MLP,            /* norm2, MLP in, activation, MLP out                      */
    SUB_GRADS,          /* the tp all-reduce completing replicated tensors' gradients */
    SUB_BOUNDARY,       /* the tp all-gather of a received stage boundary's slices */
} OpSub;

/* Which gradients a layer backward op computes: parallel.tp_comm_overlap
 * splits each tp part's backward around its tp collective (Megatron's
 * asynchronous input-gradient all-reduce / reduce-scatter). */
typedef enum OpGrads {
    GR_ALL,             /* the input gradient and the weight gradients              */
    GR_DATA,            /* the input gradient: data GEMMs, attention, norms (their
                           weights' gradients too), residual; what the collective needs
                           (sp: down to the norm's output; GR_NORM does the norm) */
    GR_WEIGHT,          /* the linears' weight and bias gradients, dW += dY^T·X     */
    GR_NORM,            /* sp: the part's norm on this rank's tokens.  Forward (and full
                           recompute): its output shard, all-gathered next; backward: the
                           norm's backward (its weights' partial gradients) and residual,
                           after the reduce-scatter of its output's partial gradient   */
    GR_HEAD,            /* tp_comm_overlap full, a forward part: all of it up to its
                           row-parallel GEMM (attention output projection, MLP down
                           projection), whose token-row chunks are GR_ROWS ops     */
    GR_ROWS,            /* ... one token-row chunk (Op.rows) of that GEMM and of the
                           residual added to it, all-reduced on its own next        */
    GR_COLS,            /* ... and under sequence parallelism one token-row chunk of the
                           part's column-parallel GEMMs (qkv; the MLP's input linears,
                           GELU in the epilogue), from that chunk of the all-gathered
                           norm output as soon as its all-gather is done (part_tp_cols);
                           the head then runs without them                          */
    GR_NO_OUTPUT,       /* full recompute, the last layer of its checkpoint group (its MLP
                           part under tp): the forward without the MLP's down projection
                           and the residual after it, whose output, the next group's
                           checkpoint, the forward kept (the trainer's y < 0)       */
} OpGrads;

typedef struct Op {
    int kind;                   /* OpKind                                          */
    int stream;                 /* Stream                                          */
    int layer;                  /* model layer, or -1                              */
    int mb;                     /* microbatch, or -1                               */
    int chunk;                  /* chunk index on this rank, or -1                 */
    int aux;                    /* bucket, segment or sub-group index; OP_WAIT: the op waited for */
    int16_t sub;                /* OpSub                                           */
    int16_t grads;              /* OpGrads (layer ops; GR_ALL elsewhere)            */
    int16_t rows;               /* tp_comm_overlap full: the token-row chunk (of
                                   Partition.tpc) of the row-chunked buffers (Buffer.rows)
                                   it touches; -1: all of them                     */
    int16_t nunit;              /* how many of unit are used (at most OP_MAX_UNITS) */
    int part_lo, part_hi;       /* the parts of parted buffers (Buffer.nparts) it touches,
                                   inclusive; -1: every part                       */
    int nrd, nwr;               /* how many of rd and wr are used (at most OP_MAX_RD, OP_MAX_WR) */
    double flops;               /* on this rank                                    */
    int64_t bytes;              /* communicated or copied, on this rank            */
    /* the scalars above fill one 64-byte cache line, which is all that most
       passes over a schedule's ops read; the lists follow, each exactly as
       long as its count in the final list (the builder gives every op room for
       the most, and sched_events packs them: an op is 96 bytes, not 264) */
    bool inner;                 /* OP_WAIT for a ZeRO-3 gather (OP_GATHER) that the next op on
                                   its stream makes itself, just before its first module that
                                   computes with the gathered unit (sched_wait_unit), as
                                   DeepSpeed waits per module; false: before that op starts */
    int *unit;                  /* [nunit] ZeRO-3 fetch units (segments) it computes with, in
                                   the order the op runs their modules (a backward's reversed) */
    int *rd;                    /* [nrd] buffers read                              */
    int *wr;                    /* [nwr] buffers written                           */
} Op;

typedef enum BufCat {
    CAT_PARAMS, CAT_GRADS, CAT_OPTIMIZER, CAT_ACTIVATIONS, CAT_LOGITS, CAT_WORKSPACE, CAT_COMM,
    NCATS
} BufCat;
typedef enum BufSpace { SPACE_DEVICE, SPACE_HOST, SPACE_NVME, NSPACES } BufSpace;

/* What a buffer holds.  The passes after the scheduler key on this and on
 * the buffer's layer, microbatch and index, never on its name (names are for
 * people: the trace, the report, the generated code's comments). */
typedef enum BufRole {
    /* persistent: model states, staging, workspaces */
    BR_PARAMS,              /* ZeRO 0-2: the working parameters, the whole flat space      */
    BR_PARAMS_SHARD,        /* ZeRO 3: this rank's shard (device, host or NVMe)            */
    BR_PARAMS_PERSIST,      /* ZeRO 3: the persistent small parameters, gathered           */
    BR_PARAMS_NVME_STAGING, /* host staging of parameters on NVMe                          */
    BR_PARAMS_H2D_STAGING,  /* host staging of the host optimizer's updated parameters     */
    BR_GRADS,               /* ZeRO 0-1: the gradients, the whole flat space (by bucket)   */
    BR_GRADS_SHARD,         /* ZeRO 2-3: this rank's reduced gradients                     */
    BR_GRADS_WHOLE,         /* ZeRO 2-3: the tied and persistent segments' gradients       */
    BR_GRADS_HOST,          /* offload: the host optimizer's fp32 gradients                */
    BR_OPT_MASTER, BR_OPT_MOM1, BR_OPT_MOM2,        /* on the device or the host            */
    BR_OPT_NVME,            /* the optimizer states in the NVMe file                       */
    BR_OPT_SLOT,            /* host staging of one NVMe sub-group (idx: the slot)          */
    BR_CUBLAS_WS, BR_CUDNN_WS, BR_SCALARS,
    /* transient: the step's own */
    BR_SCRATCH,             /* one compute op's transients                                 */
    BR_OPT_GRADS32,         /* fp32 gradients of a device optimizer sub-group (idx)         */
    BR_PARAMS_D2H_STAGING,  /* a device sub-group's updated parameters, leaving            */
    BR_PARAMS_FETCH_STAGING,/* an offloaded fetch unit's shard, arriving (idx: segment)    */
    BR_GATHERED,            /* ZeRO 3: a gathered fetch unit (idx: its segment)            */
    BR_BUCKET,              /* ZeRO 2-3: a gradient bucket of a microbatch (idx: bucket)   */
    BR_TOKENS, BR_TARGETS,  /* a microbatch's tokens and targets                           */
    BR_LOGITS,              /* the head's logits (their gradient in place)                 */
    BR_X,                   /* a layer's input, kept for its backward                      */
    BR_CKPT,                /* full checkpointing: a group's first input, kept whole       */
    BR_X_TRANSIENT,         /* full checkpointing: an input not kept (or kept as a slice)  */
    BR_CKPT_SLICE,          /* partitioned activations: this tp rank's slice of a checkpoint */
    BR_CKPT_HOST,           /* cpu checkpointing: a checkpoint in the host arena           */
    BR_CKPT_GATHERED,       /* a partitioned checkpoint gathered again over tp             */
    BR_SAVED,               /* what a layer's forward keeps for its backward               */
    BR_ATTN,                /* selective checkpointing: the recomputed attention core      */
    BR_RECOMPUTED,          /* full: a group's first layer's recomputed tensors            */
    BR_RECOMPUTED_IN,       /* full: a later layer's recomputed input, then its tensors    */
    BR_TP_GATHERED,         /* sp: a part's norm output gathered over tp (sub: the part)   */
    BR_NORM_SHARD,          /* sp: a part's norm output on this rank's tokens, when the layer
                               keeps none (full checkpointing's forward) (sub)             */
    BR_TP_PARTIAL,          /* sp: a part's partial sums, reduce-scattered (sub)           */
    BR_RESID1,              /* tp: the attention part's output, all-reduced                */
    BR_DRESID1,             /* tp: the MLP part's input gradient, all-reduced              */
    BR_DY_GATHERED,         /* sp: a part's output gradient gathered (sub)                 */
    BR_REGATHERED,          /* sp: a part's saved norm output gathered again in backward (sub) */
    BR_DPARTIAL,            /* sp: a part's partial gradient of its norm's output (sub)    */
    BR_DNORM,               /* sp: that gradient reduce-scattered to this rank's tokens (sub) */
    BR_DX,                  /* a layer's input gradient                                    */
    BR_Y,                   /* the last layer's output: the head's input                   */
    BR_Y_GATHERED,          /* sp: the head's input gathered                               */
    BR_DY,                  /* the head's gradient of the last layer's output             */
    BR_DY_PARTIAL,          /* sp: its partial sums, reduce-scattered                      */
    BR_EMBED_PARTIAL,       /* sp: the embedding's partial sums, reduce-scattered          */
    BR_EMBED_DX_GATHERED,   /* sp: the embedding's output gradient gathered                */
    BR_SEND_FWD,            /* pp: a chunk's output, sent to the next stage                */
    BR_RECV_BWD,            /* pp: a chunk's output gradient, received                     */
    BR_SEND_BWD,            /* pp: a chunk's input gradient, sent to the previous stage    */
    NBUFROLES
} BufRole;

enum { NO_LAYER = -2 };         /* a buffer of no layer (LAYER_PRE: the embedding's) */

typedef struct Buffer {
    const char *name;           /* for people                                      */
    int role;                   /* BufRole                                         */
    int layer;                  /* the model layer it serves, or NO_LAYER          */
    int mb;                     /* its microbatch, or -1                           */
    int chunk;                  /* its model chunk on this rank, or -1             */
    int idx;                    /* BR_GATHERED, BR_PARAMS_FETCH_STAGING: segment;
                                   BR_BUCKET: bucket; BR_OPT_SLOT, BR_OPT_GRADS32: slot
                                   or sub-group; else -1                           */
    int sub;                    /* OpSub: the part of a layer it serves            */
    int cat;                    /* BufCat                                          */
    int space;                  /* BufSpace                                        */
    int64_t bytes;
    bool persistent;            /* lives across steps (params, grads, optimizer)  */
    int first, last;            /* lifetime in op indices (sched_: its uses; mem_: model states the whole step) */
    int64_t offset;             /* in its arena or NVMe file (filled by mem_)      */
    int fam;                    /* its BufFamily (filled by mem_; -1: persistent)  */
    int nparts;                 /* > 0: accessed by part (ZeRO 0-1's flat gradients, one
                                   part per bucket), so ops on disjoint parts of it may
                                   run on different streams at once                 */
    int rows;                   /* > 0: accessed by token-row chunk (tp_comm_overlap full:
                                   a part's output, chunk Op.rows of Partition.tpc), the
                                   same way; never with nparts                     */
} Buffer;

/* The parts [*lo, *hi] of buffer b that op o touches, when it touches b by
 * part (a bucket of Buffer.nparts, a token-row chunk of Buffer.rows); false:
 * the whole buffer.  The scheduler's events, the verifier and the
 * simulation all ask this. */
static inline bool buf_op_parts(const Buffer *b, const Op *o, int *lo, int *hi)
{
    if (b->nparts > 0 && o->part_lo >= 0) {
        *lo = o->part_lo < b->nparts ? o->part_lo : b->nparts - 1;
        *hi = o->part_hi < b->nparts ? o->part_hi : b->nparts - 1;
        return true;
    }
    if (b->rows > 0 && o->rows >= 0) {
        *lo = *hi = o->rows < b->rows ? o->rows : b->rows - 1;
        return true;
    }
    return false;
}
/* Parts a buffer is accessed by (0: none). */
static inline int buf_parts(const Buffer *b) { return b->nparts > 0 ? b->nparts : b->rows; }

typedef struct Sched {
    const Partition *part;
    const RankClass *cls;
    Op *ops;
    int nops, capops;
    Buffer *bufs;
    int nbufs, capbufs;
    double flops;               /* compute FLOPs of the step on this rank          */
} Sched;

/* The schedule pass's output: one Sched per rank class (pipeline stage). */
typedef struct Schedule {
    Sched *classes;
    int nclasses;
    bool unnamed;               /* figures only (plan_figures): the activations' names,
                                   for people, are not formatted */
} Schedule;

/* One forward or backward of a model chunk for one microbatch. */
typedef struct PipeUnit { bool bwd; int mb; int chunk; } PipeUnit;

/* The pipeline order of stage st: 2·m·v units into out (room for that many). */
int sched_pipeline_order(const Partition *p, int st, PipeUnit *out);
/* Microbatches whose activations are alive at once on stage st (forwards
 * done, backwards not yet), the maximum over the step. */
int sched_max_in_flight(const Partition *p, int st);
/* Builds the ops and buffers of one training step of every rank class. */
void sched_build(const Partition *p, Schedule *out);
const char *sched_op_kind_name(int kind);
const char *sched_stream_name(int stream);
/* "B mb3 L12" — a short label of an op (arena string). */
const char *sched_op_label(const Sched *s, int op);
/* Whether op o waits for each ZeRO-3 unit just before the module that uses
 * it (inner waits) rather than for all of them before it starts: a whole
 * layer's forward, full recompute or backward (tp 1: one call of the
 * trainer's layer function, which waits module by module). */
bool sched_waits_per_module(const Partition *p, const Op *o);
/* An inner wait w (Op.inner): the op it belongs to (the next op on its
 * stream) in *op and the position in that op's unit[] of the unit it waits
 * for; -1 if w is not an inner wait of a unit that op computes with. */
int sched_wait_unit(const Sched *s, int w, int *op);
/* Whether buffer b is the gathered copy of the unit that op gather (an
 * OP_GATHER) all-gathers: the one read an inner wait for that gather orders.
 * The definition only; the event pass, the simulation and the verifier
 * each keep their own account of which inner waits are pending.  Inline:
 * the three ask it for every read while an op's inner waits are pending. */
static inline bool sched_gather_of(const Op *gather, const Buffer *b)
{
    return gather->kind == OP_GATHER && b->role == BR_GATHERED && b->idx == gather->aux;
}

/* ---- mem.c: lifetimes, the arenas, the verdict --------------------------- */

/* A kind of transient buffer of one rank class, laid out by arithmetic: the
 * instance of (layer li, microbatch mb) is at
 *   base + (li % lm) · w · size + (mb % w) · size
 * where li counts the layers of the family's chunk (0 for a buffer of no
 * layer of the class) and mb is 0 for a buffer of no microbatch: lm layers
 * and w microbatches have places of their own, the fewest for which no two
 * instances sharing a place are ever live at once.  A family is a role (and
 * a part of the layer, an index, a model chunk) in one space; families share
 * bytes when they are never live at once. */
typedef struct BufFamily {
    int role, sub, idx, chunk, space;   /* chunk -1: every chunk's (slot) */
    int lm, w;
    int *slot;                  /* NULL: the places above; else the instance of
                                   (chunk, mb) is at base + (slot[chunk·m + mb]·lm
                                   + li)·size: the chunks of an interleaved stage,
                                   whose windows peak at different times, share
                                   w places by a colouring of their lifetimes    */
    int m;                      /* the microbatches (slot's stride)              */
    int64_t size;               /* one place: the largest instance, aligned        */
    int64_t base;               /* in its arena                                    */
    int ninst;                  /* its buffers                                     */
} BufFamily;

typedef struct ClassMem {
    const RankClass *cls;
    const Sched *sched;         /* the class's schedule (its buffers carry the layout) */
    BufFamily *fams;            /* the transient buffers' families                  */
    int nfams;
    int64_t arena[NSPACES];     /* device arena, pinned host arena, NVMe bytes     */
    int64_t peak[NSPACES];      /* peak live bytes (the lower bound)               */
    int peak_op;                /* the op at the device peak                       */
    int64_t at_peak[NCATS];     /* device bytes by category live at the peak       */
    int64_t max_cat[NCATS];     /* device bytes by category, maximum over the step */
    int64_t host_cat[NCATS];    /* host bytes by category (maximum)                */
    int64_t model_states;       /* device params + grads + optimizer (persistent)  */
    int64_t reserve;            /* runtime reserve (outside the arena)             */
    int64_t device_total;       /* arena + reserve                                 */
    double ratio;               /* device arena / device peak                      */
} ClassMem;

/* The memory pass's output: per rank class its arenas and peaks, and the
 * verdict against the cluster. */
typedef struct MemPlan {
    ClassMem *classes;
    int nclasses;
    int worst;                  /* the class with the largest device total         */
    int64_t host_node, nvme_node;       /* per node (worst class × gpus per node)  */
    int64_t cluster_gpus;
    bool fits_gpus, fits_device, fits_host, fits_nvme, fits;
} MemPlan;

/* The memory plan of a schedule: each buffer's lifetime (Buffer.first, .last)
 * from the op list and its offset in its arena (Buffer.offset), then the
 * arenas, the peaks and the verdict against the spec's cluster. */
void mem_plan(const Partition *p, Schedule *sc, MemPlan *out);
/* Lifetimes from the op list, then offsets by interval packing. */
void mem_layout(ClassMem *cm, Sched *s, int64_t reserve);
/* Where buffer b is in class c's layout: its family's chunk (a chunk of the
 * class, or its own: -1 none) and its layer's index among that chunk's (0
 * for a buffer of no layer of the class). */
void mem_place(const RankClass *c, const Buffer *b, int *chunk, int *li);
/* False if two live buffers of one arena overlap (a planner bug). */
bool mem_check_overlap(const ClassMem *cm);
const char *mem_cat_name(int cat);
const char *mem_space_name(int space);
/* Bytes live in a space at an op. */
int64_t mem_live_at(const ClassMem *cm, int space, int op);

/* ---- plan.c: the planning passes, in order -------------------------------- */

enum { FIX_MAX = 16 };
typedef struct Fix {
    const char *change;         /* "-D zero.stage=2"                               */
    const char *why;            /* one line                                        */
    bool fits;
    int64_t device_total;       /* the worst class after the change                */
    int64_t saves;              /* device bytes saved on the worst class           */
    int kind;                   /* which change (fix.c), to combine them           */
    int64_t arg;                /* its argument (the micro-batch)                  */
} Fix;

/* Every pass's output for one spec. */
typedef struct Plan {
    const Spec *spec;
    Model model;                /* model_build                                     */
    Partition part;             /* part_build                                      */
    Schedule sched;             /* sched_build                                     */
    MemPlan mem;                /* mem_plan                                        */
    Fix *fixes;                 /* fix_find (shardc plan, when it does not fit)    */
    int nfixes;
    /* period_plan (sim.h): the schedule and memory plan hold period_m of the
     * step's part.m microbatches; per class the step's op count and its op at
     * the device peak (NULL: the schedule is the whole step) */
    int64_t period_m;
    int *step_nops, *step_peak_op;
} Plan;

/* The planning passes in order: model -> partition -> schedule -> memory
 * plan.  pl must stay where it is (the passes' outputs point into it).
 * Returns false (with diagnostics when report) if the spec cannot be planned. */
bool plan_build(const Spec *s, Plan *pl, bool report);
/* The same, silent, for a plan whose figures alone are read (period.c's
 * scratch plans): the activation buffers go unnamed. */
bool plan_figures(const Spec *s, Plan *pl);
/* Class c's op count in the whole step and the index of its op at the device
 * peak (period_plan's plan holds fewer microbatches than the step). */
int plan_step_ops(const Plan *pl, int c);
int plan_peak_op(const Plan *pl, int c);

/* ---- fix.c: what would make a plan fit ------------------------------------ */

/* The changes that would make a plan that does not fit fit, each found by
 * planning a changed copy of the spec (pl->fixes). */
void fix_find(Plan *pl);

/* ---- report.c: `shardc plan` --------------------------------------------- */

void report_text(FILE *out, const Plan *mp);
void report_rank(FILE *out, const Plan *mp, int64_t rank);
/* What would make a plan that does not fit fit (fix_find's changes), as text. */
void report_fixes(FILE *out, const Plan *mp);
/* The plan as JSON (cJSON text, arena-owned): the memory plan, the fixes,
 * the simulated step (sim.h's Sim; NULL: none); rank < 0: no buffer list. */
struct Sim;
char *report_json(const Plan *mp, const struct Sim *sim, int64_t rank);
/* The fixes as a cJSON array (caller-owned): change, why, fits, device_bytes, saves_bytes. */
struct cJSON;
struct cJSON *report_json_fixes(const Plan *mp);

#endif
