/* sim.h — what the schedule costs and how it is inspected: the cost model
 * (cost_), the discrete-event simulation of one step (sim_), the schedule
 * verifier (verify_), and the trace / HTML views (trace_, html_).
 *
 * Input: a Plan (plan.h), whose classes each hold the ordered ops of one
 * training step.  The schedule's conventions, which every module here relies on:
 *  - ops on one stream run in list order, one at a time;
 *  - an OP_WAIT on stream X with aux = T holds stream X until op T has ended
 *    (an event recorded after T, waited on X); every cross-stream dependency is
 *    such a wait;
 *  - OP_SEND_FWD of stage i matches OP_RECV_FWD of stage i+1 with the same
 *    microbatch and model chunk (OP_SEND_BWD / OP_RECV_BWD the other way); a
 *    receive ends no earlier than its send's transfer;
 *  - members of a tp or dp group share a rank class, so they issue the same
 *    collectives in the same order at the same simulated times.
 */
#ifndef SHARDC_SIM_H
#define SHARDC_SIM_H

#include "plan.h"

/* ---- cost.c: how long each op takes on the spec's cluster ---------------- */

typedef enum CommGroup { GRP_NONE, GRP_TP, GRP_DP, GRP_PP, GRP_EMBED, NGROUPS } CommGroup;

/* The group an op communicates in (GRP_NONE for compute and copies). */
int cost_group(const Sched *s, int op);
/* Seconds the op occupies its stream once it has started. */
double cost_op_time(const Plan *mp, const Sched *s, int op);
const char *cost_group_name(int group);
/* ZeRO-3's per-module waits: the share (0..1) of layer op `op`'s seconds
 * that its trainer function runs before the first kernel of the module of
 * its unit[k] (its GEMMs, attention core and memory-bound work, each priced
 * as cost_op_time prices them); 0 for an op that waits up front
 * (sched_waits_per_module). */
double cost_unit_start(const Sched *s, int op, int k);

/* The collectives of the alpha-beta model (NCCL's ring algorithms). */
typedef enum Collective { COLL_NONE, COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_SENDRECV } Collective;
/* Whether the CPU backend's ops are priced from a measured profile's rates
 * (cluster.profile of the CPU backend) rather than from a peak and the
 * efficiency curves. */
bool cost_cpu_priced(const Spec *s);
/* The step of a timeline of `timeline` seconds whose rank class c is busy
 * busy[c] seconds (every stream), when the ranks share their node's cores
 * in time (a CPU profile, more threads than cores): processor sharing's
 * bound (cost.c); the timeline itself otherwise. */
double cost_shared_step(const Plan *mp, double timeline, const double *busy);
/* Dense peak FLOP/s of the spec's GPU at the training dtype (fp32 or bf16/fp16). */
double cost_peak(const Spec *s);
double cost_mfu_peak(const Spec *s);   /* MFU and HFU's denominator: the data sheet on a GPU */
/* The compute constants of one GPU generation (cost.c, docs/cost-model.md):
 * a GEMM of M×K by K×N reaches gemm_eff · Π f(x) of peak, f(x) = x / (x +
 * gemm_dim); the attention core attn_eff · f(head dim); a streaming kernel
 * hbm_eff of HBM bandwidth; each kernel launch and tail costs kernel_s. */
typedef struct CostProfile {
    const char *name;
    double gemm_eff, gemm_dim, attn_eff, hbm_eff, kernel_s;
} CostProfile;
/* The profile of a GPU (enum GpuProfile), of the spec's GPU. */
const CostProfile *cost_profile_gpu(int gpu);
const CostProfile *cost_profile(const Spec *s);
/* Fraction of peak an M×K by K×N GEMM reaches (the calibrated shape curve). */
double cost_gemm_eff(const CostProfile *cp, double M, double N, double K);
/* Fraction of peak of the attention core with head dimension hd. */
double cost_attn_eff(const CostProfile *cp, double hd);
/* Whether the spec's backend runs each op when it is issued (the CPU backend
 * priced from a profile): a rank's ops then follow one another in schedule
 * order, whatever their streams; sends and receives are only posted. */
bool cost_at_issue(const Spec *s);
/* Bytes/s of a group's link: NVLink inside a node, else per_node NICs
 * (cluster.inter_node each), capped by NVLink. */
double cost_link_bandwidth(const Spec *s, bool cross, int64_t per_node);
/* Seconds of a Collective over n ranks of bytes (the full buffer): ring
 * latency hop_s per hop and phase + bytes · bus factor / bandwidth. */
double cost_collective(int coll, double bytes, int64_t n, double bandwidth, double hop_s);

/* ---- sim.c: a discrete-event simulation of one step ---------------------- */

typedef struct SimOp { double start, end; } SimOp;
typedef struct SimRef { int cls, op; } SimRef;

typedef struct SimClass {
    SimOp *ops;                 /* [sched.nops], seconds from the step's start  */
    double busy[NSTREAMS];      /* seconds each stream is busy                  */
    double exposed[NGROUPS];    /* communication not overlapped by compute      */
    double end;                 /* the class's last op ends                     */
    double work;                /* seconds of pipeline compute: embedding, layer
                                   forward / recompute / backward, head         */
    double bubble;              /* seconds the compute stream idles for the
                                   pipeline: the idle stretches (and the tail)
                                   where the chain that held it runs through
                                   other stages' compute, not communication     */
    double nvme;                /* seconds of NVMe transfers                    */
} SimClass;

typedef struct Sim {
    SimClass *classes;          /* [mp->nclasses]                               */
    double step_time;           /* seconds: the timeline's end, or less where
                                   CPU ranks share their cores in time
                                   (cost_shared_step)                           */
    double timeline;            /* seconds: when the simulated timeline ends
                                   (the ops as priced at the all-busy sharing);
                                   the bubble, exposure and critical path are
                                   shares of it                                 */
    double tokens_per_s;        /* global batch tokens / step time              */
    double mfu, hfu;            /* model / hardware FLOPs over peak             */
    double bubble;              /* pipeline bubble: idle over ideal compute
                                   (work), the paper's (p-1)/m; the average over
                                   stages                                       */
    double exposed[NGROUPS];    /* exposed communication, fraction of the step,
                                   the average over rank classes                */
    double copy_time, nvme_time;/* seconds on the copy stream, of it NVMe (the
                                   worst class)                                 */
    SimRef *critical;           /* the critical path, first op to last (NULL
                                   from period_plan: the step was not expanded)  */
    int ncritical;
    double critical_kind[NOPKINDS];     /* the critical path's seconds by op kind */
} Sim;

/* Simulates one step of every rank class of the plan; a deadlock (no op can
 * progress: a schedule bug) is an internal error naming the stuck ops. */
void sim_run(const Plan *mp, Sim *out);

typedef struct SimOpts {
    bool eager;                 /* sends never wait for their receive (as if it
                                   were posted ahead or the message buffered);
                                   default: rendezvous, as NCCL: a send starts
                                   only once its receive is posted               */
} SimOpts;
/* sim_run with options; returns NULL, or on a deadlock a message naming the
 * stuck ops (then *out holds what ran). */
const char *sim_simulate(const Plan *mp, const SimOpts *opts, Sim *out);
/* The step's figures from its classes' (busy, exposed, work, bubble, nvme)
 * and out->timeline: step time, bubble, exposed fractions, copies, tokens/s,
 * MFU, HFU. */
void sim_step_figures(const Plan *mp, Sim *out);
/* The schedule summary of `shardc plan`: per stream busy time, bubble,
 * exposed communication, step time, tokens/s, MFU. */
void sim_summary(FILE *out, const Plan *mp, const Sim *sim);
/* The critical path's seconds by op kind: each op on it adds the time from
 * its predecessor's end to its own (the stretches add up to the step);
 * by[NOPKINDS]. */
void sim_critical_by_kind(const Plan *mp, const Sim *sim, double *by);

/* ---- period.c: a step of many microbatches from a few ------------------- */

/* Plans (verifies, with verify) and simulates the spec's step from plans of
 * a few microbatches when its schedule's steady state is periodic (1F1B,
 * interleaved) and every figure shows it: *pl then holds the few's schedule
 * and memory plan (the same as the step's) with the spec's model and
 * microbatches, *sim the step's figures (no per-op times, no critical-path
 * ops).  False (nothing promised of *pl) when the whole step must be planned:
 * gpipe, a figure that is not periodic, too few microbatches to pay, or
 * SHARDC_EXPANDED set in the environment. */
bool period_plan(const Spec *s, bool verify, Plan *pl, Sim *sim);

/* ---- verify.c: the schedule verifier -------------------------------------- */

/* Checks every class's schedule (collective order and sizes per group, sends
 * matched by receives without deadlock, cross-stream uses ordered by events,
 * no arena region reused while a use on another stream may be pending).
 * Each failure is reported naming the ops; returns false on any. */
bool verify_plan(const Plan *mp, FILE *report);

/* ---- trace.c, html.c: inspection ----------------------------------------- */

/* Chrome trace event JSON (Perfetto, chrome://tracing), streamed to f event
 * by event; false if writing failed. */
bool trace_write(FILE *f, const Plan *mp, const Sim *sim);
/* One self-contained HTML page: memory bars, live-bytes curve, Gantt chart. */
char *html_report(const Plan *mp, const Sim *sim);
/* Bytes live in one space of rank class cls over the simulated step: a buffer
 * is live from the start of its first user to the end of its last (on any
 * stream), persistent ones throughout.  The points where the value changes,
 * by time, from 0 to the class's end; op: the op whose start allocated there,
 * or -1 (shared by the trace's counter track and the report's curve). */
typedef struct LivePoint { double t; int64_t bytes; int op; } LivePoint;
LivePoint *trace_live_curve(const Plan *mp, const Sim *sim, int cls, int space, int *npoints);

#endif
