/* shardc.h — the one header of the shardc compiler's front end.
 *
 * Data flows one way: text -> tokens (lex_) -> AST (spec_) -> resolved Spec
 * (sema_, driven by the schema_ table) -> canonical text (canon_) / planner.
 * The planner's types live in plan.h.  Every module owns one prefix.
 */
#ifndef SHARDC_H
#define SHARDC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio.h>

/* ---- exit codes ------------------------------------------------------- */
enum { EXIT_OK = 0, EXIT_USER = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 3 };

/* ---- arena.c: bump allocation, freed in one call ---------------------- */
typedef struct ArenaBlock ArenaBlock;
typedef struct Arena { ArenaBlock *head; size_t total; } Arena;

void *arena_alloc(Arena *a, size_t n);           /* zeroed, 16-byte aligned */
void *arena_alloc_raw(Arena *a, size_t n);       /* the same, not zeroed: the caller writes all n */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* The compiler's global arena: everything that lives until exit. */
extern Arena g_arena;

/* ---- diag.c: diagnostics with file:line:col, source line and caret ---- */
typedef struct SrcFile {
    const char *path;       /* as given by the user (or the include)        */
    const char *text;       /* NUL-terminated contents                      */
    size_t len;             /* bytes, excluding the sentinel NUL            */
} SrcFile;

typedef struct Loc {
    const SrcFile *file;    /* NULL for locations that are not in a file   */
    int line, col;          /* 1-based                                      */
    int len;                /* span length in bytes on that line (>= 1)     */
    const char *pos;        /* start of the span in file->text              */
} Loc;

extern int diag_errors;     /* errors reported so far                       */
extern int diag_warnings;
extern int diag_max_errors; /* stop after this many (default 20)           */
extern FILE *diag_stream;   /* where diagnostics go (default stderr)        */
extern bool diag_color;     /* ANSI colours (default: stderr is a tty)      */
void diag_reset(void);      /* zero the counters (the fuzzer, the tests)    */

/* `file:line:col: error: msg`, the source line, a caret under the span.
 * A hint, if any, follows with diag_hint() right after. */
void diag_error(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_warning(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_note(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An error with no source location (bad command line, unreadable file). */
void diag_plain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool diag_too_many(void);   /* true once diag_max_errors has been reached  */
/* Internal compiler error: names the compiler's own source file and line. */
_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)

/* ---- lexer.re: tokens ------------------------------------------------- */
/* Token kinds are Lemon's TK_* from parser.h; the lexer adds TK_EOF = 0. */
typedef enum NumUnit { U_NONE, U_BYTES, U_BANDWIDTH } NumUnit;

typedef struct Token {
    int kind;
    Loc loc;
    /* numbers: the value after the suffix is applied */
    bool is_int;            /* integral value (i is exact)                  */
    int64_t i;
    double f;
    NumUnit unit;
    const char *str;        /* identifiers and strings (arena copy)         */
} Token;

typedef struct Lexer {
    const SrcFile *file;
    const char *cur, *lim;  /* lim points at the sentinel NUL               */
    const char *line_start;
    int line;
} Lexer;

void lex_init(Lexer *lx, const SrcFile *f);
Token lex_next(Lexer *lx);  /* reports its own errors; never fails         */

/* ---- spec.c: the AST and the parse driver ----------------------------- */
typedef struct Item Item;

typedef enum ValKind {
    V_INT,          /* 12, 100K, 5e8 (integral)                           */
    V_FLOAT,        /* 6e-4, 0.9                                           */
    V_BYTES,        /* 80GB, 32MiB: i holds bytes                          */
    V_BANDWIDTH,    /* 450GB/s, 200Gb/s: f holds bytes per second          */
    V_BOOL,         /* on/off/true/false                                   */
    V_IDENT,        /* gpt, cosine, h100_sxm_80gb                          */
    V_STRING,       /* "data/train_*.bin"                                  */
    V_LIST,         /* [a, b, c]                                           */
    V_TUPLE,        /* (a, b)                                              */
} ValKind;

typedef struct Value {
    ValKind kind;
    Loc loc;
    int64_t i;
    double f;
    bool b;
    const char *s;              /* V_IDENT, V_STRING                        */
    struct Value **elems;       /* V_LIST, V_TUPLE                          */
    int n;
    struct Value *arg;          /* `extern "name" {..}`: the string after   */
    Item *block;                /* a value that carries a block: adamw {..} */
    bool has_block;
} Value;

typedef enum ItemKind { I_ASSIGN, I_BLOCK } ItemKind;

struct Item {
    ItemKind kind;
    Loc loc;                    /* the key                                  */
    const char *key;
    Value *value;               /* I_ASSIGN                                 */
    const char *label;          /* I_BLOCK: `model gpt {` -> "gpt"          */
    Loc label_loc;
    Item *body;                 /* I_BLOCK                                  */
    Item *next;
};

/* Parses a file and the files it includes (each include's items are
 * spliced in place).  Returns the item list; errors are reported and
 * counted in diag_errors.  `path` "-" reads standard input. */
Item *spec_parse_file(const char *path);
/* Parses text held in memory (the fuzzer and the tests use this). */
Item *spec_parse_text(const char *name, const char *text, size_t len);
/* Largest spec file accepted, in bytes. */
#define SPEC_MAX_FILE_BYTES (16u << 20)
/* Deepest nesting of blocks, lists and tuples accepted. */
#define SPEC_MAX_DEPTH 64

const char *spec_valkind_name(ValKind k);

/* Front-end internals shared by spec.c and grammar/parser.y. */
#ifndef TK_EOF
#define TK_EOF 0                /* the token kind the lexer ends with        */
#endif
#define SPEC_MAX_INCLUDE_DEPTH 16
typedef struct SpecChain SpecChain;    /* the files being parsed (include cycles) */
/* Lexes and parses one file (parser.y); includes go through spec_include. */
Item *spec_parse_src(const SrcFile *f, SpecChain *chain);
/* Parses the file an `include "path"` names; returns its items, *tail the last. */
Item *spec_include(const Token *path, SpecChain *chain, Item **tail);
/* false: `include` is an error (the fuzzer must not open files). */
extern bool spec_allow_include;

/* ---- schema.c / schema.def: every key of the language ------------------ */
typedef enum SchemaType {
    T_INT,          /* integer, count suffixes allowed                      */
    T_FLOAT,        /* real number                                          */
    T_BOOL,
    T_ENUM,         /* one of `enums` ("a|b|c"), stored as its index        */
    T_STRING,
    T_BYTES,        /* a byte size: 80GB, 32MiB (a bare integer is bytes)   */
    T_BANDWIDTH,    /* bytes per second: 450GB/s, 200Gb/s                   */
    T_INTLIST,      /* [int, ...]                                           */
    T_FLOAT2,       /* (float, float)                                       */
} SchemaType;

typedef struct SchemaKey {
    const char *path;       /* "train.optimizer.lr"                         */
    SchemaType type;
    size_t offset;          /* into Spec                                    */
    const char *unit;       /* "elements", "bytes", "" ...                  */
    const char *def;        /* default as spec text, or "derived"           */
    double min, max;        /* range (numbers); ignored when min > max      */
    const char *enums;      /* T_ENUM: "gpipe|1f1b|interleaved"             */
    const char *when;       /* applies only when the parent enum is one of
                               these ("nvme", "cpu|nvme"); "" = always      */
    const char *doc;        /* one line                                     */
} SchemaKey;

extern const SchemaKey schema_keys[];
extern const int schema_nkeys;

const SchemaKey *schema_find(const char *path);
int schema_index(const SchemaKey *k);
/* The enum's n-th name, or NULL. */
const char *schema_enum_name(const SchemaKey *k, int idx);
int schema_enum_index(const SchemaKey *k, const char *name);   /* -1 if none */
/* Closest match for a misspelled name among candidates (NULL if none). */
const char *schema_suggest(const char *name, const char *const *cands, int n);
/* Writes docs/spec-reference.md from the table. */
void schema_write_reference(FILE *out);
/* Walking the table (sema.c, canon.c). */
int schema_enum_count(const SchemaKey *k);
const char *schema_enum_list(const SchemaKey *k, const char *sep);   /* "a, b, c" */
bool schema_is_block(const char *path);         /* some key lies under path  */
/* Names one level under prefix ("" = the top-level blocks), in table order. */
int schema_children(const char *prefix, const char **out, int cap);
const SchemaKey *schema_parent(const SchemaKey *k);     /* enum above k, or NULL */
/* The enum whose value decides whether k applies (k->when), or NULL. */
const SchemaKey *schema_governor(const SchemaKey *k);
const char *schema_when_values(const SchemaKey *k);     /* "cpu|nvme"         */
bool schema_when_holds(const SchemaKey *k, int governor_value);
const char *schema_type_phrase(const SchemaKey *k);     /* "a byte size such as 80GB ..." */
const char *schema_fmt_range(const SchemaKey *k);       /* "[1, 65536]" or "" */
/* Canonical spellings (arena strings) that the lexer reads back exactly. */
const char *schema_fmt_double(double v);        /* shortest round-trip: 6e-4 */
void schema_tidy_exponent(char *s);             /* printf's "e+08" as "e8" */
const char *schema_fmt_bytes(int64_t b);        /* largest exact unit: 80GiB */
const char *schema_fmt_bandwidth(double bps);   /* 450GB/s                   */

/* ---- the resolved spec ------------------------------------------------- */
enum Family       { FAM_GPT, FAM_LLAMA };
enum Activation   { ACT_GELU, ACT_SWIGLU, ACT_RELU, ACT_EXTERN };
enum PipeSchedule { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED };
enum RankOrder    { ORDER_TP_DP_PP, ORDER_TP_PP_DP };
enum TpCommOverlap { TPO_NONE, TPO_WGRAD, TPO_FULL };
enum OffloadDev   { OFF_NONE, OFF_CPU, OFF_NVME };
enum DType        { DT_FP32, DT_BF16, DT_FP16 };
enum LossScale    { LS_DYNAMIC, LS_STATIC };
enum CkptPolicy   { CKPT_NONE, CKPT_FULL, CKPT_SELECTIVE };
enum Optimizer    { OPT_ADAMW, OPT_ADAM, OPT_SGD };
enum LrSchedule   { LR_CONSTANT, LR_COSINE, LR_LINEAR };
enum DataFormat   { DATA_LLMC, DATA_TEXT };
enum GpuProfile   { GPU_A100_40GB, GPU_A100_80GB, GPU_H100_SXM_80GB, GPU_H200_141GB,
                    GPU_H800_80GB, GPU_CPU };
enum Network      { NET_IB400, NET_IB200, NET_ETH100, NET_ETH400, NET_NVLINK };

typedef struct IntList { int64_t *v; int n; } IntList;

/* A layout key left open for `shardc tune`: `tp = auto` (every value tune
 * considers) or `zero.stage = (1, 3)` (the values to try).  Values are stored
 * as the key's type stores them: an enum's index, 0/1, an integer. */
typedef struct OpenKey {
    int key;                    /* index into schema_keys                   */
    Loc loc;                    /* the value: `auto` or the tuple           */
    Loc key_loc;                /* the key                                  */
    bool any;                   /* auto                                     */
    int64_t *v;                 /* the set (any: NULL)                      */
    int n;
} OpenKey;
/* tune's "leave this key to its default or derived value" in sema_bind. */
#define SEMA_UNBOUND INT64_MIN

typedef struct Spec {
    struct {
        int family;             /* enum Family                              */
        int64_t layers, hidden, heads, kv_heads, vocab, seq_len, ffn_hidden;
        int activation;         /* enum Activation                          */
        const char *extern_name;        /* activation = extern "name" {..}  */
        const char *extern_header, *extern_cpu, *extern_cuda;
        bool bias, tie_embeddings;
        double norm_eps, rope_theta, init_std;
    } model;
    struct {
        int64_t tp, pp, dp;
        bool sequence_parallel, pp_scatter_gather;
        int schedule;           /* enum PipeSchedule                        */
        int64_t microbatches;   /* per step per pipeline (= grad_accum)     */
        int64_t virtual_stages;
        IntList stage_layers;
        int rank_order;         /* enum RankOrder                           */
        int tp_comm_overlap;    /* enum TpCommOverlap                       */
        int64_t tp_overlap_chunks;      /* TPO_FULL: token-row chunks     */
    } parallel;
    struct {
        int64_t stage;
        bool overlap_comm, overlap_param_gather, contiguous_gradients, reduce_scatter;
        int64_t reduce_bucket, allgather_bucket, prefetch_bucket;   /* elements */
        int64_t param_persistence_threshold, max_live_parameters, max_reuse_distance;
        int64_t sub_group_size;
        bool gather_across_microbatches;
    } zero;
    struct {
        int optimizer;          /* enum OffloadDev                          */
        bool optimizer_pin_memory;
        const char *optimizer_path;
        int64_t optimizer_buffer_count;
        double optimizer_ratio;
        bool optimizer_pipeline_read, optimizer_pipeline_write;
        int params;             /* enum OffloadDev                          */
        bool params_pin_memory;
        const char *params_path;
        int64_t params_buffer_count, params_buffer_size, params_max_in_cpu;
        int64_t aio_block_size, aio_queue_depth;
    } offload;
    struct {
        int dtype;              /* enum DType                               */
        int master_weights;     /* enum DType (fp32)                        */
        int grad_reduce;        /* enum DType: dtype of gradient reduction  */
        int loss_scale;         /* enum LossScale (fp16 only)               */
        int64_t initial_scale_power, window, hysteresis;
        double min_scale, static_scale;
    } precision;
    struct {
        int activations;        /* enum CkptPolicy                          */
        int64_t every;
        bool partition_activations, cpu;
    } checkpointing;
    struct {
        int64_t global_batch, micro_batch, grad_accum, steps, seed;
        double grad_clip;
        int optimizer;          /* enum Optimizer                           */
        double lr, beta1, beta2, eps, weight_decay, momentum;
        int lr_schedule;        /* enum LrSchedule                          */
        int64_t warmup, decay_steps;
        double min_lr;
        int64_t eval_every, log_every;
        double comm_timeout;    /* seconds: the trainer's collective watchdog */
    } train;
    struct {
        const char *train, *val;
        int format;             /* enum DataFormat                          */
    } data;
    struct {
        int64_t nodes, gpus_per_node;
        int gpu;                /* enum GpuProfile                          */
        int64_t gpu_memory;     /* bytes                                    */
        double bf16_tflops, fp32_tflops;
        /* the MFU's peak: the GPU's data sheet (or the spec's keys) even where a
         * CUDA profile rescales bf16/fp32_tflops for pricing (sema.c) */
        double mfu_bf16_tflops, mfu_fp32_tflops;
        double hbm_bandwidth, intra_node, inter_node, pcie;   /* bytes/s     */
        int network;            /* enum Network                             */
        double network_latency_us;
        int64_t host_memory, nvme_capacity;                   /* bytes       */
        double nvme, host_bandwidth;                          /* bytes/s     */
        int64_t runtime_reserve;                              /* bytes       */
        const char *profile_path;       /* cluster.profile, as written      */
        const struct Profile *profile;  /* it, read (profile.c); NULL: none */
    } cluster;

    /* Which keys the user (or an include, or -D) set, and where. */
#define SPEC_MAX_KEYS 256
    bool set[SPEC_MAX_KEYS];
    Loc loc[SPEC_MAX_KEYS];
    const char *source;         /* path of the top-level file               */

    /* Keys left open for `shardc tune` (nopen > 0: the spec is a search space,
     * resolved only as far as its items; sema_bind resolves one choice). */
    const OpenKey *open;
    int nopen;
    struct Sema *pending;       /* the checker's state, for sema_bind         */
} Spec;

/* ---- cluster.c: named GPU profiles ------------------------------------- */
typedef struct GpuInfo {
    const char *name;
    int64_t memory;             /* bytes                                    */
    double bf16_tflops, fp32_tflops;
    double hbm_bandwidth, nvlink;       /* bytes/s, per direction           */
    double pcie;                        /* bytes/s                          */
    const char *doc;
} GpuInfo;
extern const GpuInfo cluster_gpus[];
extern const int cluster_ngpus;
typedef struct NetInfo { const char *name; double bandwidth, latency_us; const char *doc; } NetInfo;
extern const NetInfo cluster_nets[];
extern const int cluster_nnets;

/* ---- profile.c: a machine's measured profile (shardc calibrate) -------- */
enum { PROFILE_CPU, PROFILE_CUDA };
enum { PROFILE_H2D, PROFILE_D2H, PROFILE_NVME_READ, PROFILE_NVME_WRITE };
/* The collectives as the profile names them (its "op" of a collective row). */
enum { PROFILE_ALLREDUCE, PROFILE_ALLGATHER, PROFILE_REDUCE_SCATTER, PROFILE_SENDRECV };
/* The activations the profile times (its "op" of an activation row). */
enum { PROFILE_GELU, PROFILE_SWIGLU };
/* The norms the profile times (its "op" of a norm row). */
enum { PROFILE_LAYERNORM, PROFILE_RMSNORM };
#define PROFILE_MAX_THREADS 16
/* A rate on a grid of up to 3 axes (the logarithms of the coordinates and of
 * the rate), interpolated multilinearly. */
typedef struct ProfGrid { int nd, n[3]; double *ax[3]; double *v; } ProfGrid;
/* seconds = alpha + beta · bytes, least squares over `points` measurements. */
typedef struct ProfFit { double alpha, beta; int points; } ProfFit;
typedef struct ProfColl { int op; bool inter; int ranks_per_node, group; ProfFit fit; } ProfColl;
/* The sharing test: seconds of the reference GEMM and elementwise op when
 * ranks_per_node ranks (each with `threads`) run them at once (until the
 * last is done), and when one runs them alone while the others wait in MPI. */
typedef struct ProfShare { int ranks_per_node, threads; double gemm_s, ew_s, alone_gemm_s, alone_ew_s; } ProfShare;
/* The arrival skew (shardc calibrate): seconds a small collective (p2p: a
 * send/receive, one way) takes beyond its alpha-beta time when each of
 * ranks_per_node ranks (each with `threads`) computes compute_s before it;
 * excess: what it added to the wall time of the compute and the op beyond
 * that compute with every rank busy (the step's loss; -1 in a profile
 * written before it was measured). */
typedef struct ProfSkew { bool p2p; int ranks_per_node, threads; double compute_s, seconds, excess; } ProfSkew;
typedef struct Profile {
    const char *path, *device;
    int backend;                /* PROFILE_CPU, PROFILE_CUDA                    */
    int cores, nodes;           /* the cores a node's ranks share; nodes measured */
    const char *grid;           /* "full", "quick" or "smoke" (shardc calibrate) */
    int threads[PROFILE_MAX_THREADS], nthreads;   /* thread counts measured     */
    /* by (thread index · 2 + dtype) · 2 + pass (fp32 0, bf16 1; fwd 0, bwd 1):
     * FLOP/s (gemm, attention), bytes/s (ew, pass 0) */
    ProfGrid gemm[PROFILE_MAX_THREADS * 4], attn[PROFILE_MAX_THREADS * 4], ew[PROFILE_MAX_THREADS * 4];
    /* the GEMM rows with "cache": "warm" (operands cycling through a few MB
     * of the last-level cache, not memory), keyed as gemm; has_warm false in
     * a profile without them (written before they were measured) */
    ProfGrid gemm_warm[PROFILE_MAX_THREADS * 4];
    bool has_warm;
    double llc_bytes;           /* the node's last-level cache; 0: not recorded */
    double launch[PROFILE_MAX_THREADS];       /* seconds of an op's fixed cost */
    double opt_rate[PROFILE_MAX_THREADS];     /* AdamW elements/s              */
    /* [PROFILE_GELU, _SWIGLU][key as above]: output elements/s of the
     * activation (srt_gelu_*, srt_swiglu_*); all 0 in a profile without
     * activation rows (written before they were measured) */
    double act_rate[2][PROFILE_MAX_THREADS * 4];
    bool has_act;
    /* [PROFILE_LAYERNORM, _RMSNORM][key as above]: elements/s of one call
     * over rows × cols (srt_layernorm_*, srt_rmsnorm_*); has_norm false in a
     * profile without norm rows (written before they were measured) */
    ProfGrid norm[2][PROFILE_MAX_THREADS * 4];
    bool has_norm;
    double sumsq_rate[PROFILE_MAX_THREADS];   /* srt_grad_sumsq fp32 elements/s; 0: not measured */
    bool has_sumsq;
    ProfFit io[4];              /* PROFILE_H2D .. PROFILE_NVME_WRITE            */
    ProfColl *coll;
    int ncoll;
    ProfShare *share;
    int nshare;
    ProfSkew *skew;
    int nskew;
} Profile;
/* Reads and checks a profile; NULL on an error (reported at its line and
 * column in the profile, the spec's key spec_loc named in a note). */
const Profile *profile_load(const char *path, Loc spec_loc);
/* Interpolated rates: GEMM FLOP/s of an m×k by k×n product (bwd: srt_matmul_bwd,
 * 4mnk FLOPs); attention FLOP/s counted as cost.c counts them; bytes/s of a
 * streaming kernel moving `bytes`.  dtype: enum DType (fp16 reads bf16's rows). */
double profile_gemm_rate(const Profile *pf, int dtype, bool bwd, double threads, double m, double n, double k);
/* The same GEMM with warm operands (in the last-level cache): the warm rows'
 * rate, never below the cold one; the cold rate without warm rows. */
double profile_gemm_warm_rate(const Profile *pf, int dtype, bool bwd, double threads, double m, double n, double k);
/* The fraction of a GEMM's operands found in the last-level cache when the
 * node's ranks touch `node_bytes` between two uses of them: 1 up to the
 * cache's size, cache / node_bytes beyond (never rising with node_bytes);
 * 0 without warm rows or a recorded cache size. */
double profile_warm_fraction(const Profile *pf, double node_bytes);
double profile_attn_rate(const Profile *pf, int dtype, bool bwd, double threads, double seq, double head_dim);
double profile_stream_rate(const Profile *pf, int dtype, double threads, double bytes);
double profile_launch(const Profile *pf, double threads);      /* seconds per op */
double profile_opt_rate(const Profile *pf, double threads);    /* elements/s     */
/* Output elements/s of an activation (PROFILE_GELU, _SWIGLU) forward or
 * backward; 0 when the profile has no activation rows. */
double profile_act_rate(const Profile *pf, int act, int dtype, bool bwd, double threads);
/* Elements/s of a norm (PROFILE_LAYERNORM, _RMSNORM) call over rows × cols,
 * forward or backward; 0 when the profile has no norm rows. */
double profile_norm_rate(const Profile *pf, int op, int dtype, bool bwd, double threads, double rows, double cols);
/* fp32 elements/s of the gradient norm's sum of squares; 0 when not measured. */
double profile_sumsq_rate(const Profile *pf, double threads);
double profile_io_seconds(const Profile *pf, int which, double bytes);
/* The alpha-beta of a collective (PROFILE_ALLREDUCE ..) over n ranks with w a
 * node; *scale_a, *scale_b scale it when only another group size was measured.
 * NULL when the profile has none of that op and span. */
const ProfFit *profile_coll(const Profile *pf, int op, bool inter, int64_t w, int64_t n, double *scale_a,
                            double *scale_b);
/* The slowdown of a rank's GEMMs (gemm) or streaming kernels when w ranks of
 * `threads` threads share the node's cores (>= 1). */
double profile_sharing(const Profile *pf, int64_t w, int threads, bool gemm);
/* Seconds a collective (p2p: a send or receive) waits for its late peers
 * when w ranks of `threads` threads take turns on the node's cores and each
 * computed `compute` seconds (alone) since its previous one: the measured
 * arrival skew (0 without oversubscription, compute or rows); loss: what
 * the waiting adds to the ranks' wall time instead (the rows' excess, where
 * every row has one; else the wait). */
double profile_skew(const Profile *pf, int64_t w, int threads, bool p2p, bool loss, double compute);
/* The threads a rank runs with when w ranks share a node (cores / w, >= 1). */
int profile_threads(const Profile *pf, int64_t w);
/* The cluster keys a profile derives (0: it has nothing for that one), for
 * ranks_per_node ranks on a node: a CPU profile gives a rank its share of the
 * node's best GEMM rate and streaming bandwidth; a CUDA profile the peak and
 * HBM bandwidth at which the GPU model (gpu's CostProfile, sim.h) reproduces
 * its largest GEMM and its streaming rate; both the copy, NVMe and link
 * bandwidths they measured. */
typedef struct ProfCluster {
    double fp32_tflops, bf16_tflops, hbm_bandwidth, host_bandwidth, pcie, nvme;
    double intra_node, inter_node, network_latency_us;
} ProfCluster;
ProfCluster profile_cluster(const Profile *pf, int gpu, int64_t ranks_per_node);
/* shardc calibrate (calibrate.c), its options parsed by the driver. */
enum { CALIB_MAX_RANKS = 16 };
typedef enum CalibGrid { CALIB_FULL, CALIB_QUICK, CALIB_SMOKE } CalibGrid;
typedef struct CalibOpts {
    const char *out;                    /* -o PROFILE.json                          */
    const char *backend;                /* "cpu" or "cuda"                          */
    const char *runtime;                /* --runtime DIR, or NULL: the build tree   */
    const char *mpirun, *nvme_dir;      /* the launcher; NULL: $TMPDIR or /tmp      */
    CalibGrid grid;                     /* --quick, --smoke, or the full grid       */
    int64_t ranks[CALIB_MAX_RANKS];     /* ranks per node to measure (0: defaults)  */
    int nranks;
    int64_t nodes;
} CalibOpts;
/* Measures, writes o->out and reads it back; returns the exit code. */
int calibrate_run(const CalibOpts *o);

/* ---- sema.c: resolve and check ---------------------------------------- */
/* One -D key.path=value override, parsed as spec text. */
typedef struct Override { const char *path; const char *text; } Override;

/* Resolves the items (and overrides) against the schema, fills defaults,
 * derives what is derivable and runs every semantic rule.  Returns false
 * if any error was reported. */
bool sema_resolve(Item *items, const Override *ov, int nov, Spec *out);
/* True if key k applies under the resolved enum values of s (a key inside an
 * enum's block applies only for the values in its `when`); canon.c prints these. */
bool sema_applies(const Spec *s, const SchemaKey *k);
/* True if key k may be left open (`auto` or a set of values) for shardc tune. */
bool sema_tunable(const SchemaKey *k);
/* The value of a tunable key in s as OpenKey keeps values (enum index, 0/1, integer). */
int64_t sema_value(const Spec *s, const SchemaKey *k);
/* The tunable keys' paths, NULL-terminated. */
extern const char *const sema_tunable_keys[];
/* Resolves one choice of an open spec (open->nopen > 0): val[i] for
 * open->open[i] (SEMA_UNBOUND: its default or derived value), then the
 * defaults, derived values and every rule, as sema_resolve does.  Returns
 * false after reporting the errors that choice has. */
bool sema_bind(const Spec *open, const int64_t *val, Spec *out);
/* Where the user (an include, or -D) set key path, or no location. */
Loc sema_key_loc(const Spec *s, const char *path);
/* The top-level spec's path as given to spec_parse_file ("-" = stdin); the
 * driver sets it before sema_resolve.  File-wide errors ("no model block",
 * also for an empty file) point at its line 1 and Spec.source names it.
 * NULL: the file of the first item is taken. */
extern const char *sema_source;

/* ---- canon.c: the resolved spec as canonical text ---------------------- */
void canon_print(FILE *out, const Spec *s);

/* ---- import.c: DeepSpeed and Hugging Face configurations -------------- */
typedef struct ImportOpts {
    const char *ds_path, *hf_path, *out_path;
    int64_t nodes, gpus_per_node;       /* 0 = not given                    */
    const Override *ov;                 /* -D key=value, applied last       */
    int nov;
} ImportOpts;
int import_deepspeed(const ImportOpts *o);      /* returns an exit code     */
int import_hf_main(const ImportOpts *o);        /* shardc import hf         */
/* config.json of the model s describes, for `shardc export` to a directory:
 * written through the key table `import hf` reads by (one mapping both
 * ways); NULL (reported) when Hugging Face has no class for it. */
struct cJSON *import_hf_config(const Spec *s, const char *torch_dtype);

/* ---- util ------------------------------------------------------------- */
/* Reads a whole file with a NUL sentinel; NULL (errno set) on failure. */
char *util_read_file(const char *path, size_t *len, size_t limit);
/* util_read_file's errno for a FIFO, a device or a socket (refused unread). */
#define UTIL_ENOTREG ENOTSUP
/* strerror, with UTIL_ENOTREG's own words. */
const char *util_strerror(int e);
/* Formats a byte count with its binary unit ("1.50 GiB"). */
const char *util_bytes(int64_t b);
/* Writes `data` to `path` atomically (temporary file, fsync, rename). */
bool util_write_atomic(const char *path, const char *data, size_t len);
/* The same for a writer that streams: the temporary beside path (*tmp names
 * it), then util_atomic_close(f, tmp, path, the writer's success). */
FILE *util_atomic_open(const char *path, const char **tmp);
bool util_atomic_close(FILE *f, const char *tmp, const char *path, bool ok);
/* path made absolute (an arena string); an internal error if it does not resolve. */
const char *util_abs_path(const char *path);
/* ---- driver.c: the tools and the passes in order ----------------------- */
/* shardc's command line (argv[1] the tool); returns the exit code. */
int drv_main(int argc, char **argv);
/* Runs tool name (check, plan, build, ops) on a spec already resolved, with
 * the tool's options in argv; returns the exit code. */
int drv_run_spec(const char *name, const Spec *spec, int argc, char **argv);
/* export.c: `shardc export CKPT_DIR -o FILE [--dtype fp32|bf16]`; argv holds
 * the arguments after `export`.  Returns the exit code. */
int export_main(int argc, char **argv);
int export_ckpt_main(int argc, char **argv);   /* shardc ckpt verify */

#endif
