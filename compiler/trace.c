/* trace.c — the simulated step as Chrome trace event JSON (`shardc plan
 * --trace FILE`), for Perfetto and chrome://tracing.
 *
 * Layout of the trace: one process per rank class ("stage 3 (ranks ×16)"),
 * one thread per stream that has ops (compute, tp-comm, dp-comm, pp-comm,
 * copy, host), every op a complete event "X" whose args say what it touches;
 * flow arrows ("s" → "f") from a waited op to the OP_WAIT that waits for it
 * and from each pipeline send to its receive on the next stage; counter
 * tracks "C" of the device and host bytes live over the step; an instant
 * event at each class's device peak.  Timestamps are microseconds rounded to
 * the nanosecond, so the file stays small and exact to what the eye can see.
 *
 * trace_live_curve (the live-bytes sweep) is shared with html.c.
 */
#include "sim.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Seconds as integer nanoseconds: the trace's resolution. */
static int64_t trace_ns(double seconds)
{
    return llround(seconds * 1e9);
}

/* Nanoseconds as the trace's microseconds. */
static double trace_us(int64_t ns)
{
    return (double)ns / 1e3;
}

/* ---- live bytes over the step ------------------------------------------------------ */

/* One change of the live bytes: +bytes when a buffer's first user starts,
 * -bytes when its last user ends. */
typedef struct LiveEv { double t; int64_t delta; int op; } LiveEv;

/* Orders changes by time. */
static int trace_ev_cmp(const void *a, const void *b)
{
    const LiveEv *x = a, *y = b;
    return (x->t > y->t) - (x->t < y->t);
}

/* The end of a class's step: its last op, or the whole step if later. */
static double trace_class_end(const Plan *mp, const Sim *sim, int c)
{
    const SimClass *sc = &sim->classes[c];
    double end = sc->end > sim->timeline ? sc->end : sim->timeline;
    const Sched *s = &mp->sched.classes[c];
    for (int i = 0; i < s->nops; i++)
        if (sc->ops[i].end > end) end = sc->ops[i].end;
    return end;
}

/* The bytes live in `space` of class c over the simulated step.  A buffer is
 * live from the start of the earliest op touching it to the end of the latest
 * (on any stream); persistent buffers are live throughout and never freed.
 * Returns the points where the value changes, by time, the first at 0 and the
 * last at the class's end; each point's op is the op whose start allocated
 * there (-1 if none).  Arena-allocated. */
LivePoint *trace_live_curve(const Plan *mp, const Sim *sim, int c, int space, int *npoints)
{
    const Sched *s = &mp->sched.classes[c];
    const SimOp *so = sim->classes[c].ops;
    double *t0 = arena_alloc(&g_arena, sizeof(double) * (size_t)(s->nbufs + 1));
    double *t1 = arena_alloc(&g_arena, sizeof(double) * (size_t)(s->nbufs + 1));
    int *op0 = arena_alloc(&g_arena, sizeof(int) * (size_t)(s->nbufs + 1));
    for (int k = 0; k < s->nbufs; k++) t0[k] = INFINITY, t1[k] = -INFINITY, op0[k] = -1;
    for (int i = 0; i < s->nops; i++) {
        const Op *o = &s->ops[i];
        for (int j = 0; j < o->nrd + o->nwr; j++) {
            int k = j < o->nrd ? o->rd[j] : o->wr[j - o->nrd];
            if (so[i].start < t0[k]) t0[k] = so[i].start, op0[k] = i;
            if (so[i].end > t1[k]) t1[k] = so[i].end;
        }
    }
    LiveEv *ev = arena_alloc(&g_arena, sizeof(LiveEv) * (size_t)(2 * s->nbufs + 1));
    int nev = 0;
    int64_t base = 0;
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        if (b->space != space) continue;
        if (b->persistent) {
            base += b->bytes;
        } else if (op0[k] >= 0) {
            ev[nev++] = (LiveEv){t0[k], b->bytes, op0[k]};
            ev[nev++] = (LiveEv){t1[k] > t0[k] ? t1[k] : t0[k], -b->bytes, -1};
        }
    }
    qsort(ev, (size_t)nev, sizeof *ev, trace_ev_cmp);
    double end = trace_class_end(mp, sim, c);
    LivePoint *pt = arena_alloc(&g_arena, sizeof(LivePoint) * (size_t)(nev + 2));
    int n = 0;
    int64_t live = base;
    pt[n++] = (LivePoint){0, base, -1};
    for (int i = 0; i < nev;) {
        /* every change at one instant is one point: a buffer freed as another
         * is allocated at the same time never coexists with it */
        double t = ev[i].t > 0 ? ev[i].t : 0;
        int op = -1;
        int64_t grow = 0;
        for (; i < nev && (ev[i].t > 0 ? ev[i].t : 0) == t; i++) {
            live += ev[i].delta;
            if (ev[i].delta > grow) grow = ev[i].delta, op = ev[i].op;
        }
        if (t == pt[n - 1].t) {
            pt[n - 1].bytes = live;
            if (op >= 0) pt[n - 1].op = op;
        } else {
            pt[n++] = (LivePoint){t, live, op};
        }
    }
    if (end > pt[n - 1].t) pt[n++] = (LivePoint){end, live, -1};
    *npoints = n;
    return pt;
}

/* ---- pipeline send → receive ---------------------------------------------------------- */

/* Where each model chunk lives: its class and chunk index there. */
typedef struct ChunkHome { int cls, chunk; } ChunkHome;

/* The receives of every class, by direction, local chunk and microbatch. */
typedef struct Recvs {
    ChunkHome *home;            /* [pp·v] model chunk -> class, local chunk */
    int nmodel;
    int **fwd, **bwd;           /* [class][chunk · m + mb] -> op, or -1     */
    int64_t m;
} Recvs;

/* Indexes the receives of a plan so each send finds its partner. */
static void trace_index_recvs(const Plan *mp, Recvs *r)
{
    const Partition *p = &mp->part;
    r->m = p->m;
    r->nmodel = (int)(p->pp * p->v);
    r->home = arena_alloc(&g_arena, sizeof(ChunkHome) * (size_t)(r->nmodel + 1));
    for (int i = 0; i < r->nmodel; i++) r->home[i] = (ChunkHome){-1, -1};
    r->fwd = arena_alloc(&g_arena, sizeof(int *) * (size_t)mp->mem.nclasses);
    r->bwd = arena_alloc(&g_arena, sizeof(int *) * (size_t)mp->mem.nclasses);
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const RankClass *rc = mp->mem.classes[c].cls;
        for (int k = 0; k < rc->nchunks; k++) {
            int mc = rc->chunks[k].model_chunk;
            if (mc >= 0 && mc < r->nmodel) r->home[mc] = (ChunkHome){c, k};
        }
        size_t n = (size_t)(rc->nchunks * r->m);
        r->fwd[c] = arena_alloc(&g_arena, sizeof(int) * (n + 1));
        r->bwd[c] = arena_alloc(&g_arena, sizeof(int) * (n + 1));
        for (size_t i = 0; i < n; i++) r->fwd[c][i] = r->bwd[c][i] = -1;
        const Sched *s = &mp->sched.classes[c];
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind != OP_RECV_FWD && o->kind != OP_RECV_BWD) continue;
            if (o->chunk < 0 || o->chunk >= rc->nchunks || o->mb < 0 || o->mb >= r->m) continue;
            int **tab = o->kind == OP_RECV_FWD ? r->fwd : r->bwd;
            tab[c][o->chunk * r->m + o->mb] = i;
        }
    }
}

/* The receive matching send op i of class c: *rc and the op, or false. */
static bool trace_find_recv(const Plan *mp, const Recvs *r, int c, int i, int *rc, int *rop)
{
    const Op *o = &mp->sched.classes[c].ops[i];
    const RankClass *cls = mp->mem.classes[c].cls;
    if (o->chunk < 0 || o->chunk >= cls->nchunks || o->mb < 0 || o->mb >= r->m) return false;
    int mc = cls->chunks[o->chunk].model_chunk + (o->kind == OP_SEND_FWD ? 1 : -1);
    if (mc < 0 || mc >= r->nmodel || r->home[mc].cls < 0) return false;
    ChunkHome h = r->home[mc];
    int **tab = o->kind == OP_SEND_FWD ? r->fwd : r->bwd;
    int op = tab[h.cls][h.chunk * r->m + o->mb];
    if (op < 0) return false;
    *rc = h.cls, *rop = op;
    return true;
}

/* ---- events ------------------------------------------------------------------------------- */

/* The trace's process of a class (pid 0 is avoided: some viewers treat it specially). */
static int trace_pid(int c)
{
    return c + 1;
}

/* A thread id unique across processes, so no viewer merges two classes' streams. */
static int trace_tid(int c, int stream)
{
    return trace_pid(c) * 16 + stream + 1;
}

/* "stage 3 (ranks ×16)": a class's process name. */
static const char *trace_class_name(const Plan *mp, int c)
{
    const RankClass *rc = mp->mem.classes[c].cls;
    return arena_printf(&g_arena, "stage %d (ranks \xc3\x97%lld)", rc->stage, (long long)rc->count);
}

/* The trace being written: events go out one by one, each printed by cJSON
 * and freed, so a step of millions of events never sits in memory whole. */
typedef struct TraceOut {
    FILE *f;
    bool first;     /* no event written yet: no comma before the next */
} TraceOut;

/* Writes one event (and frees it). */
static void trace_emit(TraceOut *t, cJSON *e)
{
    char *text = cJSON_PrintUnformatted(e);
    cJSON_Delete(e);
    if (!text) die("trace: out of memory printing an event");
    if (!t->first) fputc(',', t->f);
    fputs(text, t->f);
    free(text);
    t->first = false;
}

/* A metadata event ("M") naming or ordering a process or thread. */
static void trace_meta(TraceOut *t, const char *name, int pid, int tid, const char *key, cJSON *val)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddNumberToObject(e, "pid", pid);
    if (tid >= 0) cJSON_AddNumberToObject(e, "tid", tid);
    cJSON *args = cJSON_AddObjectToObject(e, "args");
    cJSON_AddItemToObject(args, key, val);
    trace_emit(t, e);
}

/* The names of a list of buffers. */
static cJSON *trace_buf_names(const Sched *s, const int *ids, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(s->bufs[ids[i]].name));
    return a;
}

/* An op's start and end in nanoseconds; a negative duration is a simulator bug. */
static void trace_op_ns(const Plan *mp, const Sim *sim, int c, int i, int64_t *start, int64_t *end)
{
    const SimOp *so = &sim->classes[c].ops[i];
    *start = trace_ns(so->start), *end = trace_ns(so->end);
    if (*end < *start || !isfinite(so->start) || !isfinite(so->end))
        die("trace: op %d (%s) of rank class %d runs from %g s to %g s", i,
            sched_op_label(&mp->sched.classes[c], i), c, so->start, so->end);
}

/* One op as a complete event with its args. */
static void trace_op(TraceOut *t, const Plan *mp, const Sim *sim, int c, int i, bool critical)
{
    const Sched *s = &mp->sched.classes[c];
    const Op *o = &s->ops[i];
    int64_t t0, t1;
    trace_op_ns(mp, sim, c, i, &t0, &t1);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", sched_op_label(s, i));
    cJSON_AddStringToObject(e, "cat", sched_op_kind_name(o->kind));
    cJSON_AddStringToObject(e, "ph", "X");
    cJSON_AddNumberToObject(e, "ts", trace_us(t0));
    cJSON_AddNumberToObject(e, "dur", trace_us(t1 - t0));
    cJSON_AddNumberToObject(e, "pid", trace_pid(c));
    cJSON_AddNumberToObject(e, "tid", trace_tid(c, o->stream));
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    cJSON_AddNumberToObject(a, "op", i);
    cJSON_AddNumberToObject(a, "layer", o->layer);
    cJSON_AddNumberToObject(a, "microbatch", o->mb);
    cJSON_AddNumberToObject(a, "chunk", o->chunk);
    cJSON_AddNumberToObject(a, "bytes", (double)o->bytes);
    cJSON_AddNumberToObject(a, "flops", o->flops);
    /* A wait touches the buffers of the op it waits for: name that op, not
     * its buffers again (waits are a third of a large trace's events). */
    if (o->kind == OP_WAIT && o->aux >= 0) {
        cJSON_AddStringToObject(a, "waits_for", sched_op_label(s, o->aux));
    } else {
        cJSON_AddItemToObject(a, "reads", trace_buf_names(s, o->rd, o->nrd));
        cJSON_AddItemToObject(a, "writes", trace_buf_names(s, o->wr, o->nwr));
    }
    if (critical) cJSON_AddTrueToObject(a, "critical_path");
    trace_emit(t, e);
}

/* A flow event: "s" inside the source slice, or "f" bound to the enclosing
 * destination slice. */
static void trace_flow_ev(TraceOut *t, const char *ph, const char *cat, const char *name, int id, int pid,
                          int tid, int64_t ts)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "cat", cat);
    cJSON_AddStringToObject(e, "ph", ph);
    cJSON_AddNumberToObject(e, "id", id);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON_AddNumberToObject(e, "ts", trace_us(ts));
    if (ph[0] == 'f') cJSON_AddStringToObject(e, "bp", "e");
    trace_emit(t, e);
}

/* An arrow from the end of op (c, i) into op (dc, di): where the data or the
 * event arrives, which is the source's end clamped into the destination
 * (a receive or a wait may be posted long before its partner ends). */
static void trace_flow(TraceOut *t, const Plan *mp, const Sim *sim, const char *cat, const char *name, int id,
                       int c, int i, int dc, int di)
{
    int64_t s0, s1, d0, d1;
    trace_op_ns(mp, sim, c, i, &s0, &s1);
    trace_op_ns(mp, sim, dc, di, &d0, &d1);
    /* one nanosecond inside the source slice, so it binds to that slice and
     * not to the one that follows it on the stream */
    int64_t from = s1 - s0 >= 2 ? s1 - 1 : s0;
    trace_flow_ev(t, "s", cat, name, id, trace_pid(c), trace_tid(c, mp->sched.classes[c].ops[i].stream), from);
    int64_t last = d1 - d0 >= 2 ? d1 - 1 : d0;     /* inside, as above */
    int64_t to = s1 < d0 ? d0 : s1 > last ? last : s1;
    trace_flow_ev(t, "f", cat, name, id, trace_pid(dc), trace_tid(dc, mp->sched.classes[dc].ops[di].stream), to);
}

/* A counter track of a class's live bytes in one space. */
static void trace_counter(TraceOut *t, const Plan *mp, const Sim *sim, int c, int space, const char *name)
{
    int n;
    LivePoint *pt = trace_live_curve(mp, sim, c, space, &n);
    bool any = false;
    for (int i = 0; i < n; i++) any |= pt[i].bytes != 0;
    if (!any) return;
    for (int i = 0; i < n; i++) {
        int64_t ts = trace_ns(pt[i].t);
        if (i + 1 < n && trace_ns(pt[i + 1].t) == ts) continue;    /* the later value wins */
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", name);
        cJSON_AddStringToObject(e, "ph", "C");
        cJSON_AddNumberToObject(e, "ts", trace_us(ts));
        cJSON_AddNumberToObject(e, "pid", trace_pid(c));
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(e, "args"), "bytes", (double)pt[i].bytes);
        trace_emit(t, e);
    }
}

/* An instant event at the class's device peak (the highest point of its curve). */
static void trace_peak(TraceOut *t, const Plan *mp, const Sim *sim, int c)
{
    int n, at = 0;
    LivePoint *pt = trace_live_curve(mp, sim, c, SPACE_DEVICE, &n);
    for (int i = 1; i < n; i++)
        if (pt[i].bytes > pt[at].bytes) at = i;
    const Sched *s = &mp->sched.classes[c];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", arena_printf(&g_arena, "device peak %s", util_bytes(pt[at].bytes)));
    cJSON_AddStringToObject(e, "cat", "memory");
    cJSON_AddStringToObject(e, "ph", "i");
    cJSON_AddStringToObject(e, "s", "p");
    cJSON_AddNumberToObject(e, "ts", trace_us(trace_ns(pt[at].t)));
    cJSON_AddNumberToObject(e, "pid", trace_pid(c));
    cJSON_AddNumberToObject(e, "tid", trace_tid(c, ST_COMPUTE));
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    cJSON_AddNumberToObject(a, "bytes", (double)pt[at].bytes);
    cJSON_AddNumberToObject(a, "arena", (double)mp->mem.classes[c].arena[SPACE_DEVICE]);
    if (pt[at].op >= 0) cJSON_AddStringToObject(a, "op", sched_op_label(s, pt[at].op));
    trace_emit(t, e);
}

/* The trace's "metadata": what was planned and what the simulation predicts. */
static cJSON *trace_metadata(const Plan *mp, const Sim *sim)
{
    const Partition *p = &mp->part;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "generator", "shardc " SHARDC_VERSION);
    if (mp->spec->source) cJSON_AddStringToObject(m, "spec", mp->spec->source);
    cJSON_AddStringToObject(m, "layout", arena_printf(&g_arena, "tp %lld x pp %lld x dp %lld = %lld GPUs",
                                                      (long long)p->tp, (long long)p->pp, (long long)p->dp,
                                                      (long long)p->world));
    cJSON_AddNumberToObject(m, "microbatches", (double)p->m);
    cJSON_AddNumberToObject(m, "step_time_s", sim->step_time);
    cJSON_AddNumberToObject(m, "tokens_per_s", sim->tokens_per_s);
    cJSON_AddNumberToObject(m, "mfu", sim->mfu);
    cJSON_AddNumberToObject(m, "hfu", sim->hfu);
    cJSON_AddNumberToObject(m, "bubble", sim->bubble);
    cJSON *ex = cJSON_AddObjectToObject(m, "exposed_comm");
    for (int g = GRP_NONE + 1; g < NGROUPS; g++) cJSON_AddNumberToObject(ex, cost_group_name(g), sim->exposed[g]);
    return m;
}

/* Marks the ops on the simulation's critical path: [class][op]. */
static bool **trace_critical(const Plan *mp, const Sim *sim)
{
    bool **crit = arena_alloc(&g_arena, sizeof(bool *) * (size_t)mp->mem.nclasses);
    for (int c = 0; c < mp->mem.nclasses; c++)
        crit[c] = arena_alloc(&g_arena, (size_t)mp->sched.classes[c].nops + 1);
    for (int k = 0; k < sim->ncritical; k++) {
        SimRef r = sim->critical[k];
        if (r.cls >= 0 && r.cls < mp->mem.nclasses && r.op >= 0 && r.op < mp->sched.classes[r.cls].nops)
            crit[r.cls][r.op] = true;
    }
    return crit;
}

/* The whole trace as JSON text written to f; false if writing failed. */
bool trace_write(FILE *f, const Plan *mp, const Sim *sim)
{
    if (!sim || !sim->classes) die("trace: no simulation to trace");
    TraceOut out = {f, true}, *t = &out;
    fputs("{\"traceEvents\":[", f);
    bool **crit = trace_critical(mp, sim);
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const Sched *s = &mp->sched.classes[c];
        int pid = trace_pid(c);
        trace_meta(t, "process_name", pid, -1, "name", cJSON_CreateString(trace_class_name(mp, c)));
        trace_meta(t, "process_sort_index", pid, -1, "sort_index", cJSON_CreateNumber(c));
        bool used[NSTREAMS] = {false};
        for (int i = 0; i < s->nops; i++)
            if (s->ops[i].stream >= 0 && s->ops[i].stream < NSTREAMS) used[s->ops[i].stream] = true;
            else die("trace: op %d of rank class %d is on stream %d", i, c, s->ops[i].stream);
        for (int st = 0; st < NSTREAMS; st++) {
            if (!used[st]) continue;
            trace_meta(t, "thread_name", pid, trace_tid(c, st), "name", cJSON_CreateString(sched_stream_name(st)));
            trace_meta(t, "thread_sort_index", pid, trace_tid(c, st), "sort_index", cJSON_CreateNumber(st));
        }
        for (int i = 0; i < s->nops; i++) trace_op(t, mp, sim, c, i, crit[c][i]);
    }
    /* flows: events between streams of a class, then sends to receives */
    int id = 1;
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const Sched *s = &mp->sched.classes[c];
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            if (o->kind == OP_WAIT && o->aux >= 0 && o->aux < s->nops)
                trace_flow(t, mp, sim, "event", "wait", id++, c, o->aux, c, i);
        }
    }
    Recvs r;
    trace_index_recvs(mp, &r);
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const Sched *s = &mp->sched.classes[c];
        for (int i = 0; i < s->nops; i++) {
            int kind = s->ops[i].kind, dc, di;
            if ((kind == OP_SEND_FWD || kind == OP_SEND_BWD) && trace_find_recv(mp, &r, c, i, &dc, &di))
                trace_flow(t, mp, sim, "pipeline", kind == OP_SEND_FWD ? "send_fwd" : "send_bwd", id++, c, i, dc, di);
        }
    }
    for (int c = 0; c < mp->mem.nclasses; c++) {
        trace_counter(t, mp, sim, c, SPACE_DEVICE, "device live bytes");
        trace_counter(t, mp, sim, c, SPACE_HOST, "host live bytes");
        trace_peak(t, mp, sim, c);
    }
    /* then what cJSON would print after the array: the root's other members */
    cJSON *meta = trace_metadata(mp, sim);
    char *text = cJSON_PrintUnformatted(meta);
    cJSON_Delete(meta);
    if (!text) die("trace: out of memory printing the trace");
    fprintf(f, "],\"displayTimeUnit\":\"ms\",\"metadata\":%s}", text);
    free(text);
    return !ferror(f);
}
