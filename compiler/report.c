/* report.c — `shardc plan`: the plan as a readable report (layout, stages,
 * the memory table per rank class with the peak and where it happens, host
 * and NVMe, the verdict and the fixes), one rank's buffers (--rank R) and
 * the whole plan as JSON (--json FILE, written atomically; the schema is in
 * docs/plan-json.md).
 */
#include "sim.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Bytes as GiB. */
static double gib(int64_t b) { return (double)b / GIB; }

/* The table's unit: GiB, or MiB when every arena is under 1 GiB. */
typedef struct Unit { double div; const char *name; } Unit;
static Unit table_unit(const Plan *mp)
{
    for (int i = 0; i < mp->mem.nclasses; i++)
        if (mp->mem.classes[i].arena[SPACE_DEVICE] >= (int64_t)GIB) return (Unit){GIB, "GiB"};
    return (Unit){GIB / 1024, "MiB"};
}

static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved"};
static const char *const dtype_names[] = {"fp32", "bf16", "fp16"};
static const char *const ckpt_names[] = {"none", "full", "selective"};
static const char *const off_names[] = {"none", "cpu", "nvme"};

/* The name of the spec's GPU profile. */
static const char *gpu_name(const Spec *s)
{
    return s->cluster.gpu >= 0 && s->cluster.gpu < cluster_ngpus ? cluster_gpus[s->cluster.gpu].name : "?";
}

/* ---- text ---------------------------------------------------------------------- */

/* Model, FLOPs and layout lines. */
static void text_header(FILE *out, const Plan *mp)
{
    const Spec *s = mp->spec;
    const Model *m = &mp->model;
    const Partition *p = &mp->part;
    fprintf(out, "shardc plan: %s\n\n", s->source ? s->source : "(spec)");
    fprintf(out, "model     %s, %lld layers, hidden %lld, %lld heads (%lld kv), ffn %lld, seq %lld, vocab %lld "
            "(%lld in memory: a multiple of 128·tp)\n",
            m->family == FAM_LLAMA ? "llama" : "gpt", (long long)m->l, (long long)m->h, (long long)m->a,
            (long long)m->kv, (long long)m->ffn, (long long)m->s, (long long)m->V, (long long)m->Vpad);
    fprintf(out, "params    %lld (%.2f B); %lld per layer; %lld with the padded vocabulary\n", (long long)m->params,
            (double)m->params / 1e9, (long long)m->params_layer, (long long)m->params_mem);
    fprintf(out, "flops     %.4g per step (model, the MFU numerator); %.4g hardware with %s\n",
            m->flops_model_step, p->flops_hw_step,
            s->checkpointing.activations == CKPT_NONE ? "no recompute"
            : s->checkpointing.activations == CKPT_FULL ? "full recompute" : "selective recompute");
    fprintf(out, "layout    tp %lld x pp %lld x dp %lld = %lld GPUs; cluster %lld x %lld %s = %lld; rank order %s\n",
            (long long)p->tp, (long long)p->pp, (long long)p->dp, (long long)p->world, (long long)s->cluster.nodes,
            (long long)s->cluster.gpus_per_node, gpu_name(s), (long long)mp->mem.cluster_gpus,
            p->order == ORDER_TP_PP_DP ? "tp, pp, dp" : "tp, dp, pp");
    fprintf(out, "pipeline  %s%s, %lld microbatches of %lld sequences per step (global batch %lld)\n",
            sched_names[s->parallel.schedule],
            p->v > 1 ? arena_printf(&g_arena, " (%lld virtual stages)", (long long)p->v) : "",
            (long long)p->m, (long long)p->b, (long long)s->train.global_batch);
    fprintf(out, "precision %s params and activations, %s gradient reduction; checkpointing %s%s; "
            "offload optimizer %s, params %s\n",
            dtype_names[s->precision.dtype], dtype_names[s->precision.grad_reduce],
            ckpt_names[s->checkpointing.activations],
            s->checkpointing.activations == CKPT_FULL && s->checkpointing.every > 1
                ? arena_printf(&g_arena, " every %lld layers", (long long)s->checkpointing.every) : "",
            off_names[s->offload.optimizer], off_names[s->offload.params]);
}

/* One line per stage: its layers, embedding and head. */
static void text_stages(FILE *out, const Plan *mp)
{
    const Partition *p = &mp->part;
    const char *how = mp->spec->parallel.stage_layers.n ? "as stage_layers says"
                    : p->v > 1 ? "equal chunks" : "balanced by FLOPs, head counted";
    fprintf(out, "stages    (%s)\n", how);
    for (int i = 0; i < p->nclasses; i++) {
        if (p->nclasses > 12 && i == 4) {
            fprintf(out, "          ...\n");
            i = p->nclasses - 4;
        }
        const RankClass *c = &p->classes[i];
        fprintf(out, "          stage %d:", c->stage);
        for (int k = 0; k < c->nchunks; k++) {
            const Chunk *ch = &c->chunks[k];
            fprintf(out, "%s layers %d-%d (%d)%s%s", k ? ";" : "", ch->first_layer,
                    ch->first_layer + ch->nlayers - 1, ch->nlayers, ch->embed ? " + embedding" : "",
                    ch->head ? " + head" : "");
        }
        if (p->zero == 0)
            fprintf(out, "; %lld params per rank; no ZeRO: %d gradient buckets\n", (long long)c->numel, c->nbuckets);
        else
            fprintf(out, "; %lld params per rank; ZeRO %d: %d segments, %lld elements owned per rank\n",
                    (long long)c->numel, p->zero, c->nsegs, (long long)c->shard);
    }
}

/* The memory table: one row per rank class (elided past 12). */
static void text_table(FILE *out, const Plan *mp)
{
    Unit u = table_unit(mp);
    fprintf(out, "\nmemory per GPU, by rank class (%s live at the device peak; arena = the one device allocation)\n",
            u.name);
    fprintf(out, "class stage ranks  params   grads   optim   activ  logits    work    comm |   peak   arena  "
                 "ratio reserve   total\n");
    for (int i = 0; i < mp->mem.nclasses; i++) {
        if (mp->mem.nclasses > 12 && i == 4) {
            fprintf(out, "  ...\n");
            i = mp->mem.nclasses - 4;
        }
        const ClassMem *cm = &mp->mem.classes[i];
        fprintf(out, "%5d %5d %5lld", i, cm->cls->stage, (long long)cm->cls->count);
        for (int c = 0; c < NCATS; c++) fprintf(out, " %7.2f", (double)cm->at_peak[c] / u.div);
        fprintf(out, " | %6.2f %7.2f %6.3f %7.2f %7.2f%s\n", (double)cm->peak[SPACE_DEVICE] / u.div,
                (double)cm->arena[SPACE_DEVICE] / u.div, cm->ratio, (double)cm->reserve / u.div,
                (double)cm->device_total / u.div, i == mp->mem.worst ? "  <- largest" : "");
    }
}

/* The category with the most bytes at the peak. */
static int dominating(const ClassMem *cm)
{
    int best = 0;
    for (int c = 1; c < NCATS; c++)
        if (cm->at_peak[c] > cm->at_peak[best]) best = c;
    return best;
}

/* The largest class in words: its peak, the op, the dominating category. */
static void text_worst(FILE *out, const Plan *mp)
{
    const ClassMem *cm = &mp->mem.classes[mp->mem.worst];
    int d = dominating(cm), inflight = sched_max_in_flight(&mp->part, cm->cls->stage);
    int64_t peak = cm->peak[SPACE_DEVICE];
    fprintf(out, "\nrank class %d (stage %d): peak %s at op %d of %d (%s); dominated by %s: %s (%.0f%%)\n",
            mp->mem.worst, cm->cls->stage, util_bytes(peak), plan_peak_op(mp, mp->mem.worst),
            plan_step_ops(mp, mp->mem.worst),
            sched_op_label(cm->sched, cm->peak_op), mem_cat_name(d), util_bytes(cm->at_peak[d]),
            peak ? 100.0 * (double)cm->at_peak[d] / (double)peak : 0.0);
    fprintf(out, "  model states %s (params, grads, optimizer kept across steps) vs activations %s at the peak; "
            "at most %d microbatch%s in flight\n",
            util_bytes(cm->model_states), util_bytes(cm->at_peak[CAT_ACTIVATIONS] + cm->at_peak[CAT_LOGITS]),
            inflight, inflight == 1 ? "" : "es");
    fprintf(out, "  arena %s vs lower bound %s: ratio %.3f; plus %s runtime reserve = %s\n",
            util_bytes(cm->arena[SPACE_DEVICE]), util_bytes(peak), cm->ratio, util_bytes(cm->reserve),
            util_bytes(cm->device_total));
    const ClassMem *h = &mp->mem.classes[0];
    for (int i = 1; i < mp->mem.nclasses; i++)
        if (mp->mem.classes[i].arena[SPACE_HOST] > h->arena[SPACE_HOST]) h = &mp->mem.classes[i];
    fprintf(out, "host      %s pinned per rank (optimizer %s, params %s, activations %s); %s per node of %s\n",
            util_bytes(h->arena[SPACE_HOST]), util_bytes(h->host_cat[CAT_OPTIMIZER] + h->host_cat[CAT_GRADS]),
            util_bytes(h->host_cat[CAT_PARAMS]), util_bytes(h->host_cat[CAT_ACTIVATIONS]), util_bytes(mp->mem.host_node),
            util_bytes(mp->spec->cluster.host_memory));
    fprintf(out, "nvme      %s per rank; %s per node of %s\n", util_bytes(h->arena[SPACE_NVME]),
            util_bytes(mp->mem.nvme_node), util_bytes(mp->spec->cluster.nvme_capacity));
}

/* FITS or DOES NOT FIT, with every reason. */
static void text_verdict(FILE *out, const Plan *mp)
{
    const Spec *s = mp->spec;
    const ClassMem *w = &mp->mem.classes[mp->mem.worst];
    double frac = 100.0 * (double)w->device_total / (double)s->cluster.gpu_memory;
    if (mp->mem.fits) {
        fprintf(out, "\nverdict: FITS: the largest rank class needs %.2f GiB of %.2f GiB per GPU (%.1f%%)\n",
                gib(w->device_total), gib(s->cluster.gpu_memory), frac);
        return;
    }
    fprintf(out, "\nverdict: DOES NOT FIT\n");
    if (!mp->mem.fits_gpus)
        fprintf(out, "  the layout needs %lld GPUs, the cluster has %lld\n", (long long)mp->part.world,
                (long long)mp->mem.cluster_gpus);
    if (!mp->mem.fits_device)
        fprintf(out, "  rank class %d needs %.2f GiB of %.2f GiB per GPU (short by %.2f GiB)\n", mp->mem.worst,
                gib(w->device_total), gib(s->cluster.gpu_memory), gib(w->device_total - s->cluster.gpu_memory));
    if (!mp->mem.fits_host)
        fprintf(out, "  host memory: %s per node of %s\n", util_bytes(mp->mem.host_node), util_bytes(s->cluster.host_memory));
    if (!mp->mem.fits_nvme)
        fprintf(out, "  NVMe: %s per node of %s\n", util_bytes(mp->mem.nvme_node), util_bytes(s->cluster.nvme_capacity));
}

/* The fixes, each already re-planned (shardc tune prints them too). */
void report_fixes(FILE *out, const Plan *mp)
{
    if (mp->mem.fits) return;
    if (!mp->nfixes) {
        fprintf(out, "no change tried (ZeRO stage, offload, checkpointing, micro-batch, tp, pp) makes it fit\n");
        return;
    }
    fprintf(out, "changes, each checked by re-planning (saved on the largest rank class -> its new total):\n");
    for (int i = 0; i < mp->nfixes; i++) {
        const Fix *f = &mp->fixes[i];
        fprintf(out, "  %-5s saves %10s -> %10s  %s\n        %s\n", f->fits ? "FITS" : "short", util_bytes(f->saves),
                util_bytes(f->device_total), f->why, f->change);
    }
}

/* The readable report. */
void report_text(FILE *out, const Plan *mp)
{
    text_header(out, mp);
    text_stages(out, mp);
    text_table(out, mp);
    text_worst(out, mp);
    text_verdict(out, mp);
    report_fixes(out, mp);
}

/* One rank: its coordinates, the ranges it owns and every buffer of its class. */
void report_rank(FILE *out, const Plan *mp, int64_t rank)
{
    const Partition *p = &mp->part;
    int64_t t, d, st;
    part_coords(p, rank, &t, &d, &st);
    const ClassMem *cm = &mp->mem.classes[st];
    const RankClass *c = cm->cls;
    fprintf(out, "\nrank %lld: tp index %lld, dp index %lld, stage %lld (rank class %lld)\n", (long long)rank,
            (long long)t, (long long)d, (long long)st, (long long)st);
    int64_t (*r)[2] = arena_alloc(&g_arena, sizeof(int64_t[2]) * (size_t)(c->nsegs + 1));
    int n = part_shard_ranges(p, c, d, r, c->nsegs);
    fprintf(out, "owns %lld of %lld flat parameter elements in %d ranges:", (long long)c->shard, (long long)c->padded, n);
    for (int i = 0; i < n && i < 8; i++) fprintf(out, " [%lld, %lld)", (long long)r[i][0], (long long)r[i][1]);
    fprintf(out, "%s\n", n > 8 ? " ..." : "");
    const Sched *s = cm->sched;
    fprintf(out, "buffers (%d; %d ops in the step):\n", s->nbufs, s->nops);
    fprintf(out, "  %-6s %14s %14s  %-17s %-11s %s\n", "space", "offset", "bytes", "lifetime", "category", "name");
    for (int k = 0; k < s->nbufs; k++) {
        const Buffer *b = &s->bufs[k];
        const char *life = b->persistent ? "persistent" : arena_printf(&g_arena, "%d-%d", b->first, b->last);
        fprintf(out, "  %-6s %14lld %14lld  %-17s %-11s %s\n", mem_space_name(b->space), (long long)b->offset,
                (long long)b->bytes, life, mem_cat_name(b->cat), b->name);
    }
}

/* ---- JSON ---------------------------------------------------------------------------- */

/* Adds an integer-valued number. */
static void jnum(cJSON *o, const char *k, double v) { cJSON_AddNumberToObject(o, k, v); }

/* The model section. */
static cJSON *json_model(const Plan *mp)
{
    const Model *m = &mp->model;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "family", m->family == FAM_LLAMA ? "llama" : "gpt");
    jnum(o, "layers", (double)m->l);
    jnum(o, "hidden", (double)m->h);
    jnum(o, "heads", (double)m->a);
    jnum(o, "kv_heads", (double)m->kv);
    jnum(o, "ffn_hidden", (double)m->ffn);
    jnum(o, "seq_len", (double)m->s);
    jnum(o, "vocab", (double)m->V);
    jnum(o, "vocab_padded", (double)m->Vpad);
    jnum(o, "params", (double)m->params);
    jnum(o, "params_per_layer", (double)m->params_layer);
    jnum(o, "params_in_memory", (double)m->params_mem);
    jnum(o, "tensors", (double)m->nt);
    jnum(o, "flops_per_step", m->flops_model_step);
    jnum(o, "flops_hardware_per_step", mp->part.flops_hw_step);
    jnum(o, "flops_hardware_full_recompute", m->flops_hw_full);
    jnum(o, "flops_hardware_selective_recompute", m->flops_hw_selective);
    jnum(o, "flops_layer_forward_per_sequence", m->fl_layer_fwd);
    return o;
}

/* The layout section. */
static cJSON *json_layout(const Plan *mp)
{
    const Partition *p = &mp->part;
    const Spec *s = mp->spec;
    cJSON *o = cJSON_CreateObject();
    jnum(o, "tp", (double)p->tp);
    jnum(o, "pp", (double)p->pp);
    jnum(o, "dp", (double)p->dp);
    jnum(o, "world", (double)p->world);
    jnum(o, "virtual_stages", (double)p->v);
    jnum(o, "cluster_gpus", (double)mp->mem.cluster_gpus);
    cJSON_AddStringToObject(o, "rank_order", p->order == ORDER_TP_PP_DP ? "tp_pp_dp" : "tp_dp_pp");
    cJSON_AddStringToObject(o, "schedule", sched_names[s->parallel.schedule]);
    jnum(o, "microbatches", (double)p->m);
    jnum(o, "micro_batch", (double)p->b);
    jnum(o, "global_batch", (double)s->train.global_batch);
    jnum(o, "zero_stage", p->zero);
    cJSON_AddBoolToObject(o, "sequence_parallel", p->T_sp < p->T);
    return o;
}

/* Bytes by category (NCATS entries) into an object. */
static void json_cats(cJSON *o, const int64_t *v)
{
    for (int c = 0; c < NCATS; c++) jnum(o, mem_cat_name(c), (double)v[c]);
}

/* A class's bytes: device by category, the peak and its op, host, NVMe. */
static void json_class_bytes(cJSON *o, const ClassMem *cm)
{
    cJSON *d = cJSON_AddObjectToObject(o, "device_bytes");
    json_cats(d, cm->at_peak);
    jnum(d, "reserve", (double)cm->reserve);
    jnum(d, "peak", (double)cm->peak[SPACE_DEVICE]);
    jnum(d, "arena", (double)cm->arena[SPACE_DEVICE]);
    jnum(d, "total", (double)cm->device_total);
    jnum(d, "model_states", (double)cm->model_states);
    json_cats(cJSON_AddObjectToObject(o, "device_max_bytes"), cm->max_cat);
    jnum(o, "arena_ratio", cm->ratio);
    cJSON *pk = cJSON_AddObjectToObject(o, "peak_op");
    jnum(pk, "index", cm->peak_op);
    cJSON_AddStringToObject(pk, "label", sched_op_label(cm->sched, cm->peak_op));
    cJSON_AddStringToObject(o, "dominating", mem_cat_name(dominating(cm)));
    cJSON *h = cJSON_AddObjectToObject(o, "host_bytes");
    jnum(h, "optimizer", (double)(cm->host_cat[CAT_OPTIMIZER] + cm->host_cat[CAT_GRADS]));
    jnum(h, "params", (double)cm->host_cat[CAT_PARAMS]);
    jnum(h, "activations", (double)cm->host_cat[CAT_ACTIVATIONS]);
    jnum(h, "peak", (double)cm->peak[SPACE_HOST]);
    jnum(h, "total", (double)cm->arena[SPACE_HOST]);
    jnum(o, "nvme_bytes", (double)cm->arena[SPACE_NVME]);
}

/* One rank class. */
static cJSON *json_class(const Plan *mp, int i)
{
    const ClassMem *cm = &mp->mem.classes[i];
    const RankClass *c = cm->cls;
    cJSON *o = cJSON_CreateObject();
    jnum(o, "stage", c->stage);
    jnum(o, "count", (double)c->count);
    cJSON *chunks = cJSON_AddArrayToObject(o, "chunks");
    for (int k = 0; k < c->nchunks; k++) {
        cJSON *ch = cJSON_CreateObject();
        jnum(ch, "model_chunk", c->chunks[k].model_chunk);
        jnum(ch, "first_layer", c->chunks[k].first_layer);
        jnum(ch, "layers", c->chunks[k].nlayers);
        cJSON_AddBoolToObject(ch, "embedding", c->chunks[k].embed);
        cJSON_AddBoolToObject(ch, "head", c->chunks[k].head);
        cJSON_AddItemToArray(chunks, ch);
    }
    jnum(o, "param_elements", (double)c->numel);
    jnum(o, "flat_elements", (double)c->padded);
    jnum(o, "shard_elements", (double)c->shard);
    jnum(o, "segments", c->nsegs);
    jnum(o, "buckets", c->nbuckets);
    jnum(o, "ops", cm->sched->nops);
    jnum(o, "buffers", cm->sched->nbufs);
    jnum(o, "max_in_flight", sched_max_in_flight(&mp->part, c->stage));
    jnum(o, "flops_per_microbatch", c->cost);
    jnum(o, "flops_per_step", cm->sched->flops);
    json_class_bytes(o, cm);
    return o;
}

/* The fixes (also tune's, for the closest candidate when nothing fits). */
struct cJSON *report_json_fixes(const Plan *mp)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < mp->nfixes; i++) {
        const Fix *f = &mp->fixes[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "change", f->change);
        cJSON_AddStringToObject(o, "why", f->why);
        cJSON_AddBoolToObject(o, "fits", f->fits);
        jnum(o, "device_bytes", (double)f->device_total);
        jnum(o, "saves_bytes", (double)f->saves);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* One rank's ranges and buffers. */
static cJSON *json_rank(const Plan *mp, int64_t rank)
{
    const Partition *p = &mp->part;
    int64_t t, d, st;
    part_coords(p, rank, &t, &d, &st);
    const ClassMem *cm = &mp->mem.classes[st];
    cJSON *o = cJSON_CreateObject();
    jnum(o, "rank", (double)rank);
    jnum(o, "tp_index", (double)t);
    jnum(o, "dp_index", (double)d);
    jnum(o, "stage", (double)st);
    int64_t (*r)[2] = arena_alloc(&g_arena, sizeof(int64_t[2]) * (size_t)(cm->cls->nsegs + 1));
    int n = part_shard_ranges(p, cm->cls, d, r, cm->cls->nsegs);
    cJSON *ranges = cJSON_AddArrayToObject(o, "owned_ranges");
    for (int i = 0; i < n; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)r[i][0]));
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)r[i][1]));
        cJSON_AddItemToArray(ranges, pair);
    }
    cJSON *bufs = cJSON_AddArrayToObject(o, "buffers");
    for (int k = 0; k < cm->sched->nbufs; k++) {
        const Buffer *b = &cm->sched->bufs[k];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", b->name);
        cJSON_AddStringToObject(x, "category", mem_cat_name(b->cat));
        cJSON_AddStringToObject(x, "space", mem_space_name(b->space));
        jnum(x, "offset", (double)b->offset);
        jnum(x, "bytes", (double)b->bytes);
        cJSON_AddBoolToObject(x, "persistent", b->persistent);
        jnum(x, "first_op", b->first);
        jnum(x, "last_op", b->last);
        cJSON_AddItemToArray(bufs, x);
    }
    return o;
}

/* The whole plan as JSON text (arena copy). */
/* A simulated figure, to 6 significant digits: the model is not more precise
 * than that, and the golden plans do not churn on the last bits. */
static void jsim(cJSON *o, const char *k, double v)
{
    cJSON_AddNumberToObject(o, k, strtod(arena_printf(&g_arena, "%.6g", v), NULL));
}

/* The simulated step (docs/plan-json.md `simulation`): the figures of the
 * schedule summary, per rank class too. */
static cJSON *json_sim(const Plan *mp, const Sim *sim)
{
    cJSON *o = cJSON_CreateObject();
    jsim(o, "step_time_s", sim->step_time);
    jsim(o, "tokens_per_s", sim->tokens_per_s);
    jsim(o, "peak_flops_per_gpu", cost_mfu_peak(mp->spec));
    jsim(o, "mfu", sim->mfu);
    jsim(o, "hfu", sim->hfu);
    jsim(o, "bubble", sim->bubble);
    cJSON *ex = cJSON_AddObjectToObject(o, "exposed_comm");
    for (int g = GRP_NONE + 1; g < NGROUPS; g++) jsim(ex, cost_group_name(g), sim->exposed[g]);
    jsim(o, "copy_s", sim->copy_time);
    jsim(o, "nvme_s", sim->nvme_time);
    double by[NOPKINDS];
    sim_critical_by_kind(mp, sim, by);
    cJSON *crit = cJSON_AddObjectToObject(o, "critical_path");
    jnum(crit, "ops", sim->ncritical);
    cJSON *kinds = cJSON_AddObjectToObject(crit, "share_by_kind");
    for (int k = 0; k < NOPKINDS; k++)
        if (by[k] > 0 && sim->timeline > 0) jsim(kinds, sched_op_kind_name(k), by[k] / sim->timeline);
    cJSON *classes = cJSON_AddArrayToObject(o, "rank_classes");
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const SimClass *sc = &sim->classes[c];
        cJSON *e = cJSON_CreateObject();
        jnum(e, "stage", mp->mem.classes[c].cls->stage);
        jsim(e, "end_s", sc->end);
        cJSON *busy = cJSON_AddObjectToObject(e, "busy_s");
        for (int st = 0; st < NSTREAMS; st++) jsim(busy, sched_stream_name(st), sc->busy[st]);
        jsim(e, "work_s", sc->work);
        jsim(e, "bubble_s", sc->bubble);
        cJSON *cex = cJSON_AddObjectToObject(e, "exposed_comm_s");
        for (int g = GRP_NONE + 1; g < NGROUPS; g++) jsim(cex, cost_group_name(g), sc->exposed[g]);
        cJSON_AddItemToArray(classes, e);
    }
    return o;
}

char *report_json(const Plan *mp, const Sim *sim, int64_t rank)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "spec", mp->spec->source ? mp->spec->source : "");
    cJSON_AddItemToObject(root, "model", json_model(mp));
    cJSON_AddItemToObject(root, "layout", json_layout(mp));
    cJSON_AddBoolToObject(root, "fits", mp->mem.fits);
    cJSON *why = cJSON_AddObjectToObject(root, "fits_detail");
    cJSON_AddBoolToObject(why, "gpus", mp->mem.fits_gpus);
    cJSON_AddBoolToObject(why, "device", mp->mem.fits_device);
    cJSON_AddBoolToObject(why, "host", mp->mem.fits_host);
    cJSON_AddBoolToObject(why, "nvme", mp->mem.fits_nvme);
    jnum(root, "gpu_memory", (double)mp->spec->cluster.gpu_memory);
    jnum(root, "largest_class", mp->mem.worst);
    jnum(root, "host_bytes_per_node", (double)mp->mem.host_node);
    jnum(root, "nvme_bytes_per_node", (double)mp->mem.nvme_node);
    cJSON *classes = cJSON_AddArrayToObject(root, "rank_classes");
    for (int i = 0; i < mp->mem.nclasses; i++) cJSON_AddItemToArray(classes, json_class(mp, i));
    cJSON_AddItemToObject(root, "fixes", report_json_fixes(mp));
    if (sim) cJSON_AddItemToObject(root, "simulation", json_sim(mp, sim));
    if (rank >= 0) cJSON_AddItemToObject(root, "rank", json_rank(mp, rank));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) die("report: cJSON could not print the plan");
    char *copy = arena_printf(&g_arena, "%s\n", text);
    free(text);
    return copy;
}
