/* code.h — what `shardc build` makes of a plan before it is C text: each rank
 * class's step as a list of calls of the trainer's functions (lower.c,
 * prefix lower_), folded into loops where iterations repeat (loops.c,
 * prefix loops_), printed by emit.c.  Private to the three.
 *
 * A call's arguments are typed: an integer, a buffer (by its family and its
 * layer, microbatch, chunk or index: the memory plan's arithmetic turns them
 * into an offset, which the generated code computes the same way), a row of
 * the part tables, an event, or fixed text.  Calls fold into a loop when
 * they repeat with every integer advancing by the same step each time.
 */
#ifndef SHARDC_CODE_H
#define SHARDC_CODE_H

#include "emit.h"

/* The kinds of calls a step is made of: one function of the generated file
 * each (tr_NAME, its arguments a tr_NAME_t), but for the class's own helpers
 * (sN_owned, sN_part), the event calls and one-off code. */
typedef enum CallKind {
    K_LOAD, K_EMBED_FWD, K_FWD, K_RECOMPUTE, K_ATTN, K_HEAD, K_HEAD_EVAL, K_BWD, K_EMBED_BWD, K_GATHER,
    K_REDUCE, K_PARAM_GATHER, K_ZERO, K_TP, K_PP, K_CKPT, K_FETCH,
    NFNKINDS,                   /* the trainer's functions end here               */
    K_PART = NFNKINDS,          /* the class's shard-part helper (offload)         */
    K_RECORD, K_WAIT,           /* srt_event_record / srt_event_wait               */
    K_CODE,                     /* code of its own (the end of the step's once-only calls) */
    NKINDS
} CallKind;

typedef enum ArgKind {
    A_INT,                      /* v[0]                                            */
    A_BUF,                      /* a buffer: name (BufName), v = layer, mb, chunk, index, extra bytes */
    A_ROW,                      /* a part table's row: name 0 the embeddings, 1 the head, 2 layer v[0] */
    A_EVENT,                    /* an event: name the stream, v[0] its record's number on it in
                                   the step; v[1] (lower_events) -1 for a record, for a wait
                                   how many records back on the stream its record is */
    A_TEXT,                     /* text, part of the call's identity               */
} ArgKind;

enum { MAX_ARGS = 12, ARG_INTS = 5 };

typedef struct Arg {
    int kind;                   /* ArgKind                                         */
    int name;                   /* A_BUF, A_ROW, A_EVENT                           */
    int64_t v[ARG_INTS];
    const char *text;           /* A_TEXT                                          */
} Arg;

typedef struct Call {
    int kind;                   /* CallKind                                        */
    int nargs;
    Arg *args;                  /* nargs of them (the arena's)                     */
    const char *code;           /* K_CODE                                          */
    const char *label;          /* the op it serves, for the comments: "fwd L3 mb0" */
    int op;                     /* the schedule's op, or -1                        */
} Call;

/* What the generated code calls a family of buffers: one macro, its
 * arithmetic from the memory plan (or, indexed by segment, bucket or slot,
 * one small table). */
typedef struct BufName {
    int role, sub, chunk, space;
    bool indexed;               /* one family per index: a table of bases          */
    int fam;                    /* not indexed: its family                         */
    int *fams;                  /* indexed: the family of each index (-1 none)     */
    int nidx;
    const char *c;              /* the macro's name: "SAVED", "BUCKET"             */
    bool uses_l, uses_mb, uses_c;   /* the arguments it takes                      */
    int *cfams;                 /* one family per chunk alike but for its base (a
                                   table of bases by chunk), else NULL            */
} BufName;

enum { MAX_UNITS = OP_MAX_UNITS, MAX_SLOTS = R_NROLES };

/* The parameters of one part of the model (embeddings, a layer, the head):
 * for each role its class tensor and the device offsets (bytes) of its
 * parameter (its gathered unit's under ZeRO-3) and of its gradient (its
 * bucket's under ZeRO 2-3). */
typedef struct Group {
    int ct[R_NROLES];
    int64_t woff[R_NROLES], goff[R_NROLES];
    int gw[R_NROLES];           /* a bucket's places (its microbatches live at once) */
    int64_t gsize[R_NROLES];    /* and the bytes between them                      */
    int unit_seg[MAX_UNITS], nunits;        /* ZeRO 3: the segments gathered for it */
    int slot_bucket[MAX_SLOTS], nslots;     /* ZeRO 2-3: the buckets its gradients go to */
} Group;

/* One rank class made into calls. */
typedef struct CE {
    const Spec *spec;
    const CatalogExtern *ext;   /* the user-defined activation, or NULL            */
    const Plan *mp;
    const Model *m;
    const Partition *p;
    const ClassMem *cm;
    const Sched *s;
    const RankClass *rc;
    int ci;
    char px[16], PX[16];        /* "s0", "S0"                                      */
    int wb, gb;                 /* bytes of a working / gradient element           */
    /* the persistent buffers (-1 none) */
    int b_params, b_pshard, b_persist, b_grads, b_gshard, b_gwhole, b_master, b_mom1, b_mom2;
    /* offload (-1 none): the host's fp32 gradients and optimizer states, the
     * NVMe states, the parameters' host staging (h2d, NVMe); where params.shard is */
    int b_hgrads, b_hmaster, b_hmom1, b_hmom2, b_nvme, b_hstage, b_hswap, params_space;
    int64_t S_dev;              /* optimizer elements on the device               */
    int64_t S_host;             /* optimizer elements on the host: shard space [S_dev, S_dev + S_host) */
    int nstates;                /* fp32 states per host element: master, then the moments */
    int64_t *whole_rel;         /* per segment: element offset in grads.whole, or -1 */
    int64_t *persist_rel;       /* per segment: element offset in params.persistent  */
    int *seg_bucket;
    int *ct_of_tensor;          /* model tensor -> class tensor (not the head copy) */
    /* the model's parts */
    int nl;                     /* layers on this class                            */
    Group *layer, pre, post;
    /* the layer's buffers as the plan laid them out (act.c) */
    int pol;
    Carve saved, kept, attn, fscr, rscr, bscr, hscr;
    /* the buffers' names */
    BufName *names;
    int nnames;
    int *name_of_fam;           /* per family of the class                         */
    /* events: per stream a ring of ids, base + (record number % ring) */
    int ev_base[NSTREAMS], ev_ring[NSTREAMS];
    /* the step, and evaluation (microbatch 0's forward) */
    Call *calls, *eval;
    int ncalls, capcalls, neval;
    bool has_eval;
    bool uses[NKINDS];          /* the kinds the step (and eval) call              */
    bool uses_owned;            /* the step calls the owned-range helper           */
    bool grad_slots;            /* a gradient bucket has places for several microbatches */
    bool modwaits;              /* lower_module_waits: the layer calls take n->ev  */
    bool unit_role[R_NROLES];   /* the roles of a layer module's first tensor gathered
                                   as a unit of its own (not persistent)          */
    /* while lowering */
    int cur_op;                 /* the op being made into calls, or -1            */
    int head_call;              /* the first head's call (eval), or -1            */
    bool has_sumsq_op, has_norm_op;
    bool *reduced, *hreduced;   /* per segment: reduced (to the host) once this step */
    int prev_pgather;           /* the last segment of the previous param gather   */
    int64_t dev_lo, dev_hi;     /* the last device optimizer sub-group (for its param_d2h) */
} CE;

/* Makes class ci of a plan into calls (x: the user-defined op, or NULL);
 * lower_free frees them. */
void lower_class(const Plan *mp, const CatalogExtern *x, int ci, CE *e);
void lower_free(CE *e);
/* Numbers the records of calls[0, n) (the step's, or evaluation's) from 0 on
 * each stream, and each wait by how many records back on its stream it is. */
void lower_events(const CE *e, Call *calls, int n);
/* The model layer of layer slot li of the class. */
int lower_slot_layer(const CE *e, int li);
/* A buffer's arena offset. */
int64_t lower_off(const CE *e, int buf);
/* Sequence parallelism: activations are sequence shards between the collectives. */
bool lower_sp(const CE *e);
/* ZeRO-3 with per-module waits in some class (sched_waits_per_module: a
 * layer unit gathered, tp 1): the layer functions take the events of their
 * modules' gathers (tr_count's ev) and wait for each before its module. */
bool lower_module_waits(const Plan *mp);
/* The C name of a parameter role (its part tables' column): "QKV_W". */
const char *emit_role_name(int role);
/* Dies unless buffer buf holds exactly bytes (a planner/emitter disagreement). */
void lower_expect(const CE *e, int buf, int64_t bytes, const char *what);

/* What an integer of a call counts: a loop over it is named after it. */
typedef enum IntType { IT_LAYER, IT_MB, IT_CHUNK, IT_OTHER } IntType;

/* A folded list of calls: each element a call or a loop over elements. */
typedef struct Elem {
    bool loop;
    bool unit;                  /* a call of a unit's function (id: the unit)      */
    int id;                     /* the call, the loop, or the unit                 */
    int sym;                    /* what it is, integers aside: equal syms can repeat */
    int64_t *ints;              /* its integers (a loop's: its first iteration's)  */
    signed char *types;         /* IntType of each                                 */
    int nints;
    int64_t len;                /* calls it stands for                             */
    int64_t lines;              /* lines it takes written out (a loop: its body's + 2) */
    int first, last;            /* the first and the last call it stands for       */
    bool head;                  /* a unit of work (a microbatch's, a layer's) starts with it */
} Elem;

/* A loop: r iterations of its body; body element j runs in iterations
 * [lo[j], hi[j]) (all of them but where a pipeline's first or last
 * microbatch, or a chunk's last layer, differs: a guard in the code). */
typedef struct Loop {
    int r;                      /* iterations                                      */
    Elem *body;
    int n;
    int *lo, *hi;               /* per body element: the iterations it runs in     */
    int64_t *delta;             /* per integer of an iteration: its step           */
} Loop;

/* A unit of work that recurs (a microbatch's forward through a chunk, its
 * backward): a function of its own, called once per instance with the
 * integers that differ between instances as its parameters. */
enum { MAX_PARAMS = 6 };
typedef struct Unit {
    Elem *body;                 /* its elements (each from an instance that has it) */
    int n;
    unsigned *vmask;            /* per element: the variants it is in (bit v)      */
    int nvar;                   /* variants: instances that differ in a few elements */
    int nints;                  /* their integers: each a[j] · param[j] + b[j],     */
    int *param;                 /* or b[j] alone where param[j] = -1               */
    int64_t *a, *b;
    int nparams;                /* the last is the variant when there are several  */
    signed char ptype[MAX_PARAMS];  /* what each parameter counts (IntType)       */
    int first, last;            /* its first instance's first and last call        */
    int ninst;
} Unit;

typedef struct Folded {
    Elem *top;
    int ntop;
    Loop *loops;
    int nloops, caploops;
    Unit *units;
    int nunits;
} Folded;

/* Folds calls [0, n) into loops (none when !loops): runs of a body repeated
 * with each integer advancing by a fixed step, innermost first; an iteration
 * just before or after a loop that differs from its body in a few calls
 * joins it, those calls guarded.  Dies unless the loops unfold to exactly
 * the calls. */
void loops_fold(const CE *e, const Call *calls, int n, bool loops, Folded *out);
/* The integers of a call its text shows, in order, with what each counts
 * (up to cap); returns their number. */
int loops_ints(const CE *e, const Call *c, int64_t *out, signed char *types, int cap);

#endif
