/* html.c — the plan as one self-contained HTML page (`shardc plan --html FILE`).
 *
 * Everything is inline: CSS, SVG and a small script; the page fetches nothing
 * (no network, no fonts), so it can be mailed or opened offline.  Parts:
 *  - a header: the model, the layout, the verdict, and the simulation's
 *    summary (step time, tokens/s, MFU, bubble, exposed communication);
 *  - the memory plan: stacked bars by category per rank class at its device
 *    peak, with the GPU's capacity line (static SVG, drawn here);
 *  - the timeline of one rank class, chosen with a <select>: the device
 *    live-bytes curve with its peak marked, above a Gantt chart of the
 *    streams on the same time axis (drag to zoom; #class=N&from=US&to=US in
 *    the address selects a view).  The data is a JSON block
 *    (<script type="application/json">); the inline script draws it;
 *  - the memory table: the numbers behind the bars.
 *
 * Size: a stream of a class with more ops than its share of HTML_GANTT_OPS
 * (within [HTML_GANTT_MIN, HTML_GANTT_MAX]) has neighbouring ops (gaps under
 * 1/HTML_GANTT_RES of the step) merged into one bar, and the
 * live curve keeps at most HTML_LIVE_MAX points (bucket maxima, so the peak
 * survives); the page says when it did either.  All text is escaped.
 */
#include "sim.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum {
    HTML_GANTT_OPS = 60000,     /* ops of a stream drawn one bar each: this   */
    HTML_GANTT_MIN = 1500,      /* over the classes, within these bounds      */
    HTML_GANTT_MAX = 4000,
    HTML_GANTT_RES = 4000,      /* merge quantum: the class's step / this     */
    HTML_GANTT_SPAN = 4,        /* a merged bar spans at most this many quanta */
    HTML_LIVE_MAX = 2000,       /* points of one live-bytes curve             */
};

#define HTML_GIB (1024.0 * 1024.0 * 1024.0)

/* ---- a growing string ------------------------------------------------------------- */

typedef struct Html { char *p; size_t n, cap; } Html;

/* Appends n bytes. */
static void html_putn(Html *h, const char *s, size_t n)
{
    if (h->n + n + 1 > h->cap) {
        size_t cap = h->cap ? h->cap : 1 << 16;
        while (h->n + n + 1 > cap) cap *= 2;
        h->p = realloc(h->p, cap);
        if (!h->p) die("html: out of memory");
        h->cap = cap;
    }
    memcpy(h->p + h->n, s, n);
    h->n += n;
    h->p[h->n] = 0;
}

/* Appends markup as is. */
static void html_put(Html *h, const char *s)
{
    html_putn(h, s, strlen(s));
}

/* Appends formatted markup (the arguments must not hold user text). */
__attribute__((format(printf, 2, 3))) static void html_printf(Html *h, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) die("html: bad format");
    if ((size_t)n < sizeof small) {
        html_putn(h, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) die("html: out of memory");
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    html_putn(h, big, (size_t)n);
    free(big);
}

/* Appends text escaped for an element's content or a quoted attribute. */
static void html_text(Html *h, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': html_put(h, "&amp;"); break;
        case '<': html_put(h, "&lt;"); break;
        case '>': html_put(h, "&gt;"); break;
        case '"': html_put(h, "&quot;"); break;
        case '\'': html_put(h, "&#39;"); break;
        default: html_putn(h, s, 1);
        }
    }
}

/* ---- names, colours, numbers ------------------------------------------------------ */

/* What the Gantt colours an op by: the family of its kind. */
typedef enum HtmlFamily {
    HF_FWD, HF_BWD, HF_RECOMPUTE, HF_HEAD, HF_TP, HF_DP, HF_PP, HF_COPY, HF_OPT, HF_WAIT, HF_OTHER, NHF
} HtmlFamily;

static const struct { const char *name, *color; } html_families[NHF] = {
    [HF_FWD] = {"forward", "#4e79a7"},
    [HF_BWD] = {"backward", "#59a14f"},
    [HF_RECOMPUTE] = {"recompute", "#f28e2b"},
    [HF_HEAD] = {"head + loss", "#76b7b2"},
    [HF_TP] = {"tp collectives", "#b07aa1"},
    [HF_DP] = {"dp collectives (ZeRO)", "#e15759"},
    [HF_PP] = {"pipeline send / receive", "#9c755f"},
    [HF_COPY] = {"copies (PCIe, NVMe)", "#edc948"},
    [HF_OPT] = {"optimizer, grad norm", "#ff9da7"},
    [HF_WAIT] = {"waits on events", "#c9c3bd"},
    [HF_OTHER] = {"other", "#888888"},
};

/* The family an op kind is drawn in. */
static int html_family(int kind)
{
    switch (kind) {
    case OP_EMBED_FWD: case OP_LAYER_FWD: return HF_FWD;
    case OP_LAYER_BWD: case OP_EMBED_BWD: return HF_BWD;
    case OP_RECOMPUTE: return HF_RECOMPUTE;
    case OP_HEAD: return HF_HEAD;
    case OP_TP_ALLREDUCE: case OP_TP_ALLGATHER: case OP_TP_REDUCE_SCATTER: return HF_TP;
    case OP_GATHER: case OP_GRAD_REDUCE: case OP_PARAM_GATHER: return HF_DP;
    case OP_RECV_FWD: case OP_SEND_FWD: case OP_RECV_BWD: case OP_SEND_BWD: case OP_TIED_REDUCE: return HF_PP;
    case OP_LOAD_BATCH: case OP_CKPT_D2H: case OP_CKPT_H2D: case OP_PARAM_FETCH: case OP_GRAD_D2H:
    case OP_OPT_READ: case OP_OPT_WRITE: case OP_PARAM_H2D: case OP_PARAM_D2H: return HF_COPY;
    case OP_GRAD_NORM: case OP_OPT_STEP: return HF_OPT;
    case OP_WAIT: return HF_WAIT;
    default: return HF_OTHER;
    }
}

/* The memory chart's stacks: the categories live at the peak, then the
 * arena's slack over the peak and the runtime reserve outside the arena. */
enum { HTML_SLACK = NCATS, HTML_RESERVE, NSTACKS };
static const char *const html_stack_colors[NSTACKS] = {
    [CAT_PARAMS] = "#4e79a7", [CAT_GRADS] = "#f28e2b", [CAT_OPTIMIZER] = "#e15759",
    [CAT_ACTIVATIONS] = "#76b7b2", [CAT_LOGITS] = "#59a14f", [CAT_WORKSPACE] = "#edc948",
    [CAT_COMM] = "#b07aa1", [HTML_SLACK] = "#d9d9d9", [HTML_RESERVE] = "#9c755f",
};

/* A stack's name in the legend. */
static const char *html_stack_name(int k)
{
    return k == HTML_SLACK ? "arena slack over the peak" : k == HTML_RESERVE ? "runtime reserve" : mem_cat_name(k);
}

/* A stack's bytes for class cm. */
static int64_t html_stack_bytes(const ClassMem *cm, int k)
{
    if (k < NCATS) return cm->at_peak[k];
    if (k == HTML_SLACK) {
        int64_t slack = cm->arena[SPACE_DEVICE] - cm->peak[SPACE_DEVICE];
        return slack > 0 ? slack : 0;
    }
    return cm->reserve;
}

/* Seconds as a short readable duration. */
static const char *html_time(double s)
{
    if (s >= 1) return arena_printf(&g_arena, "%.3f s", s);
    if (s >= 1e-3) return arena_printf(&g_arena, "%.2f ms", s * 1e3);
    return arena_printf(&g_arena, "%.1f \xc2\xb5s", s * 1e6);
}

/* A count with a decimal suffix: "174.60 B", "124.44 M". */
static const char *html_count(int64_t n)
{
    if (n >= 1000000000) return arena_printf(&g_arena, "%.2f B", (double)n / 1e9);
    if (n >= 1000000) return arena_printf(&g_arena, "%.2f M", (double)n / 1e6);
    if (n >= 1000) return arena_printf(&g_arena, "%.2f K", (double)n / 1e3);
    return arena_printf(&g_arena, "%lld", (long long)n);
}

/* The table's unit: GiB, or MiB when every arena is under 1 GiB (as the text report). */
typedef struct HtmlUnit { double div; const char *name; } HtmlUnit;
static HtmlUnit html_unit(const Plan *mp)
{
    for (int c = 0; c < mp->mem.nclasses; c++)
        if (mp->mem.classes[c].arena[SPACE_DEVICE] >= (int64_t)HTML_GIB) return (HtmlUnit){HTML_GIB, "GiB"};
    return (HtmlUnit){HTML_GIB / 1024, "MiB"};
}

/* The name of an enum value of the schema, e.g. the pipeline schedule. */
static const char *html_enum(const char *path, int v)
{
    const SchemaKey *k = schema_find(path);
    const char *name = k ? schema_enum_name(k, v) : NULL;
    return name ? name : "?";
}

/* "stage 3 (ranks ×16)". */
static const char *html_class_name(const Plan *mp, int c)
{
    const RankClass *rc = mp->mem.classes[c].cls;
    return arena_printf(&g_arena, "stage %d (ranks \xc3\x97%lld)", rc->stage, (long long)rc->count);
}

/* ---- the page's parts -------------------------------------------------------------- */

static const char html_css[] =
    "*{box-sizing:border-box}\n"
    "body{margin:0;background:#f4f5f7;color:#1d2330;font:14px/1.45 system-ui,-apple-system,'Segoe UI',"
    "Roboto,'DejaVu Sans',sans-serif}\n"
    "main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}\n"
    "header{background:#1d2330;color:#f4f5f7;padding:18px 24px}\n"
    "header .in{max-width:1240px;margin:0 auto;padding:0 24px}\n"
    "h1{font-size:22px;margin:0 0 6px;font-weight:600}\n"
    "h1 .src{color:#9fb3d1;font-weight:400}\n"
    "h2{font-size:17px;margin:0 0 4px;font-weight:600}\n"
    ".facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0 10px;color:#d5dbe6}\n"
    ".facts b{color:#9fb3d1;font-weight:500}\n"
    ".verdict{display:inline-block;padding:5px 12px;border-radius:4px;font-weight:600;margin-top:4px}\n"
    ".fits{background:#2e7d32;color:#fff}.nofit{background:#c62828;color:#fff}\n"
    ".verdict-why{margin:6px 0 0;color:#ffcdd2}\n"
    "section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:16px 18px;margin-top:18px}\n"
    ".note{color:#5b6475;font-size:13px;margin:2px 0 10px}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px;margin-top:8px}\n"
    ".card{border:1px solid #dde1e8;border-radius:6px;padding:8px 12px;background:#fafbfc}\n"
    ".card .v{font-size:20px;font-weight:600}.card .k{color:#5b6475;font-size:12px}\n"
    ".legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:8px 0 0;font-size:13px}\n"
    ".legend span{display:inline-flex;align-items:center;gap:6px}\n"
    ".legend i{display:inline-block;width:12px;height:12px;border-radius:2px}\n"
    "table{border-collapse:collapse;font-size:12.5px;margin-top:12px;width:100%}\n"
    "th,td{padding:3px 8px;text-align:right;border-bottom:1px solid #eceff3;white-space:nowrap}\n"
    "th{color:#5b6475;font-weight:500;background:#fafbfc}td:first-child,th:first-child{text-align:left}\n"
    "tr.worst td{font-weight:600;background:#fff8e1}\n"
    ".controls{display:flex;flex-wrap:wrap;gap:12px;align-items:center;margin:8px 0}\n"
    "select,button{font:inherit;padding:4px 8px;border:1px solid #b8c0cc;border-radius:4px;background:#fff}\n"
    "button{cursor:pointer}\n"
    "#class-info{color:#3b4455;font-size:13px;margin:4px 0 6px}\n"
    "#live-warning{color:#b71c1c;background:#ffebee;border:1px solid #ffcdd2;border-radius:4px;padding:6px 10px;"
    "font-size:13px;margin:6px 0}\n"
    "svg{display:block;width:100%;height:auto;font-size:11px}\n"
    "svg text{fill:#3b4455}svg .axis{stroke:#b8c0cc}svg .grid{stroke:#eceff3}\n"
    "svg .cap{stroke:#c62828;stroke-dasharray:6 4;stroke-width:1.5}\n"
    "svg .arena{stroke:#5b6475;stroke-dasharray:4 3}\n"
    "svg .sel{fill:#4e79a7;fill-opacity:.15;stroke:#4e79a7}\n"
    "footer{color:#5b6475;font-size:12px;margin-top:18px}\n"
    "code{background:#eef1f5;padding:0 4px;border-radius:3px}\n";

/* The header: spec, model, layout, verdict. */
static void html_header(Html *h, const Plan *mp)
{
    const Spec *s = mp->spec;
    const Model *m = &mp->model;
    const Partition *p = &mp->part;
    const ClassMem *w = &mp->mem.classes[mp->mem.worst];
    html_put(h, "<header><div class=\"in\"><h1>shardc plan <span class=\"src\">");
    html_text(h, s->source ? s->source : "(spec)");
    html_put(h, "</span></h1><div class=\"facts\">");
    html_printf(h, "<b>model</b><span>%s, %lld layers, hidden %lld, %lld heads (%lld kv), ffn %lld, seq %lld, "
                   "vocab %lld; %s parameters</span>",
                m->family == FAM_LLAMA ? "llama" : "gpt", (long long)m->l, (long long)m->h, (long long)m->a,
                (long long)m->kv, (long long)m->ffn, (long long)m->s, (long long)m->V, html_count(m->params));
    html_printf(h, "<b>layout</b><span>tp %lld \xc3\x97 pp %lld \xc3\x97 dp %lld = %lld GPUs on %lld \xc3\x97 %lld ",
                (long long)p->tp, (long long)p->pp, (long long)p->dp, (long long)p->world,
                (long long)s->cluster.nodes, (long long)s->cluster.gpus_per_node);
    html_text(h, html_enum("cluster.gpu", s->cluster.gpu));
    html_put(h, " (");
    html_text(h, html_enum("cluster.network", s->cluster.network));
    html_printf(h, ")%s</span>", s->parallel.sequence_parallel && p->tp > 1 ? "; sequence parallel" : "");
    html_put(h, "<b>schedule</b><span>");
    html_text(h, html_enum("parallel.schedule", s->parallel.schedule));
    if (p->v > 1) html_printf(h, " (%lld virtual stages)", (long long)p->v);
    html_printf(h, ", %lld microbatches of %lld sequences (global batch %lld); ZeRO %d; checkpointing ",
                (long long)p->m, (long long)p->b, (long long)s->train.global_batch, p->zero);
    html_text(h, html_enum("checkpointing.activations", s->checkpointing.activations));
    html_put(h, "; ");
    html_text(h, html_enum("precision.dtype", s->precision.dtype));
    html_put(h, "; offload optimizer ");
    html_text(h, html_enum("offload.optimizer", s->offload.optimizer));
    html_put(h, ", params ");
    html_text(h, html_enum("offload.params", s->offload.params));
    html_put(h, "</span></div>");
    double frac = 100.0 * (double)w->device_total / (double)s->cluster.gpu_memory;
    if (mp->mem.fits) {
        html_printf(h, "<div id=\"verdict\" class=\"verdict fits\">FITS: the largest rank class needs %.2f GiB of "
                       "%.2f GiB per GPU (%.1f%%)</div>",
                    w->device_total / HTML_GIB, s->cluster.gpu_memory / HTML_GIB, frac);
    } else {
        html_put(h, "<div id=\"verdict\" class=\"verdict nofit\">DOES NOT FIT</div><div class=\"verdict-why\">");
        if (!mp->mem.fits_gpus)
            html_printf(h, "the layout needs %lld GPUs, the cluster has %lld. ", (long long)p->world,
                        (long long)mp->mem.cluster_gpus);
        if (!mp->mem.fits_device)
            html_printf(h, "Rank class %d needs %.2f GiB of %.2f GiB per GPU. ", mp->mem.worst,
                        w->device_total / HTML_GIB, s->cluster.gpu_memory / HTML_GIB);
        if (!mp->mem.fits_host) html_printf(h, "Host memory: %s per node. ", util_bytes(mp->mem.host_node));
        if (!mp->mem.fits_nvme) html_printf(h, "NVMe: %s per node. ", util_bytes(mp->mem.nvme_node));
        html_put(h, "</div>");
    }
    html_put(h, "</div></header>\n");
}

/* One summary card. */
static void html_card(Html *h, const char *value, const char *what)
{
    html_put(h, "<div class=\"card\"><div class=\"v\">");
    html_text(h, value);
    html_put(h, "</div><div class=\"k\">");
    html_text(h, what);
    html_put(h, "</div></div>");
}

/* The simulation's summary numbers (those it has). */
static void html_summary(Html *h, const Plan *mp, const Sim *sim)
{
    html_put(h, "<section id=\"summary\"><h2>Predicted step</h2>");
    if (sim->step_time <= 0) {
        html_put(h, "<p class=\"note\">The simulation has no step time for this plan.</p></section>\n");
        return;
    }
    html_put(h, "<p class=\"note\">From the cost model and a discrete-event simulation of every stream of every "
                "rank class (one step).</p><div class=\"cards\">");
    html_card(h, html_time(sim->step_time), "step time");
    if (sim->tokens_per_s > 0) {
        double t = sim->tokens_per_s;
        html_card(h, t >= 1e6   ? arena_printf(&g_arena, "%.2f M", t / 1e6)
                     : t >= 1e4 ? arena_printf(&g_arena, "%.1f K", t / 1e3)
                                : arena_printf(&g_arena, "%.0f", t),
                  "tokens / s");
    }
    if (sim->mfu > 0) html_card(h, arena_printf(&g_arena, "%.1f%%", 100 * sim->mfu), "MFU (model FLOPs / peak)");
    if (sim->hfu > 0) html_card(h, arena_printf(&g_arena, "%.1f%%", 100 * sim->hfu), "HFU (with recompute)");
    if (mp->part.pp > 1) html_card(h, arena_printf(&g_arena, "%.1f%%", 100 * sim->bubble), "pipeline bubble");
    for (int g = GRP_NONE + 1; g < NGROUPS; g++)
        if (sim->exposed[g] >= 0.0005)     /* what rounds to 0.0% says nothing */
            html_card(h, arena_printf(&g_arena, "%.1f%%", 100 * sim->exposed[g]),
                      arena_printf(&g_arena, "exposed %s communication", cost_group_name(g)));
    if (sim->copy_time > 0) html_card(h, html_time(sim->copy_time), "copy stream busy");
    if (sim->nvme_time > 0) html_card(h, html_time(sim->nvme_time), "of it NVMe");
    html_put(h, "</div></section>\n");
}

/* A "nice" axis step: 1, 2 or 5 times a power of ten, about range/n. */
static double html_nice_step(double range, int n)
{
    double raw = range / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* The memory chart: one stacked bar per rank class, the capacity line. */
static void html_memory_chart(Html *h, const Plan *mp)
{
    const Spec *s = mp->spec;
    int n = mp->mem.nclasses;
    double W = 1180, H = 340, L = 64, R = 16, T = 22, B = 44;
    double pw = W - L - R, ph = H - T - B;
    double top = (double)s->cluster.gpu_memory;
    for (int c = 0; c < n; c++)
        if ((double)mp->mem.classes[c].device_total > top) top = (double)mp->mem.classes[c].device_total;
    top *= 1.08;
    double step = html_nice_step(top / HTML_GIB, 5);
    html_printf(h, "<svg id=\"mem-chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
                   "aria-label=\"device memory per GPU by rank class\">", W, H);
    for (double g = 0; g * HTML_GIB <= top; g += step) {
        double y = T + ph - g * HTML_GIB / top * ph;
        html_printf(h, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", L, W - R, y, y);
        html_printf(h, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g GiB</text>", L - 6, y + 4, g);
    }
    double slot = pw / n, bw = slot * 0.68 < 56 ? slot * 0.68 : 56;
    int label_every = n <= 32 ? 1 : (n + 31) / 32;
    for (int c = 0; c < n; c++) {
        const ClassMem *cm = &mp->mem.classes[c];
        double x = L + slot * c + (slot - bw) / 2, acc = 0;
        const char *cname = html_class_name(mp, c);
        for (int k = 0; k < NSTACKS; k++) {
            int64_t b = html_stack_bytes(cm, k);
            if (b <= 0) continue;
            double y0 = T + ph - (acc + (double)b) / top * ph, hh = (double)b / top * ph;
            acc += (double)b;
            html_printf(h, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>", x, y0, bw,
                        hh > 0.3 ? hh : 0.3, html_stack_colors[k]);
            html_text(h, cname);
            html_printf(h, ": %s %.2f GiB</title></rect>", html_stack_name(k), b / HTML_GIB);
        }
        if (n <= 24)
            html_printf(h, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%.1f</text>", x + bw / 2,
                        T + ph - acc / top * ph - 4, acc / HTML_GIB);
        if (c % label_every == 0)
            html_printf(h, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%d</text>", x + bw / 2, T + ph + 15,
                        cm->cls->stage);
    }
    double yc = T + ph - (double)s->cluster.gpu_memory / top * ph;
    html_printf(h, "<line class=\"cap\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", L, W - R, yc, yc);
    html_printf(h, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" style=\"fill:#c62828\">GPU capacity %.2f GiB (",
                W - R, yc - 5, s->cluster.gpu_memory / HTML_GIB);
    html_text(h, html_enum("cluster.gpu", s->cluster.gpu));
    html_put(h, ")</text>");
    html_printf(h, "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", L, W - R, T + ph, T + ph);
    html_printf(h, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">pipeline stage (rank class)</text>",
                L + pw / 2, H - 6);
    html_put(h, "</svg>\n<div class=\"legend\" id=\"mem-legend\">");
    for (int k = 0; k < NSTACKS; k++)
        html_printf(h, "<span><i style=\"background:%s\"></i>%s</span>", html_stack_colors[k], html_stack_name(k));
    html_put(h, "<span><i style=\"background:#c62828;height:2px\"></i>GPU capacity</span></div>\n");
}

/* The memory table: GiB by category per rank class. */
static void html_memory_table(Html *h, const Plan *mp)
{
    HtmlUnit u = html_unit(mp);
    html_put(h, "<table id=\"mem-table\"><thead><tr><th>rank class</th>");
    for (int k = 0; k < NCATS; k++) html_printf(h, "<th>%s</th>", mem_cat_name(k));
    html_put(h, "<th>peak</th><th>arena</th><th>reserve</th><th>total</th><th>peak at</th></tr></thead><tbody>\n");
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const ClassMem *cm = &mp->mem.classes[c];
        html_printf(h, "<tr%s><td>", c == mp->mem.worst ? " class=\"worst\"" : "");
        html_text(h, html_class_name(mp, c));
        html_put(h, "</td>");
        for (int k = 0; k < NCATS; k++) html_printf(h, "<td>%.2f</td>", cm->at_peak[k] / u.div);
        html_printf(h, "<td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>", cm->peak[SPACE_DEVICE] / u.div,
                    cm->arena[SPACE_DEVICE] / u.div, cm->reserve / u.div, cm->device_total / u.div);
        if (cm->peak_op >= 0 && cm->peak_op < cm->sched->nops) html_text(h, sched_op_label(cm->sched, cm->peak_op));
        html_put(h, "</td></tr>\n");
    }
    html_printf(h, "</tbody></table><p class=\"note\">%s per GPU at each class's device peak (the memory plan's "
                "lower bound); the arena is the one device allocation, the reserve (CUDA context, NCCL) lies "
                "outside it; the largest class is highlighted.</p>\n", u.name);
}

/* The memory section. */
static void html_memory(Html *h, const Plan *mp)
{
    html_put(h, "<section id=\"memory\"><h2>Memory plan</h2><p class=\"note\">Device bytes per GPU of each rank "
                "class at its peak, by category, with the arena's slack and the runtime reserve on top; hover a "
                "bar for its bytes.</p>\n");
    html_memory_chart(h, mp);
    html_put(h, "</section>\n");
}

/* The timeline section: controls and the two charts the script draws. */
static void html_timeline(Html *h, const Plan *mp)
{
    html_put(h, "<section id=\"timeline\"><h2>Timeline of one step</h2><p class=\"note\">The simulated step of "
                "one rank class: the device bytes live over time (top) above what each stream runs (bottom), on "
                "one time axis. Drag across either chart to zoom, double-click or <b>Reset zoom</b> to see the "
                "whole step; hover a bar for the op.</p><div class=\"controls\"><label>Rank class "
                "<select id=\"class-select\">");
    for (int c = 0; c < mp->mem.nclasses; c++) {
        html_printf(h, "<option value=\"%d\"%s>", c, c == mp->mem.worst ? " selected" : "");
        html_text(h, html_class_name(mp, c));
        html_printf(h, " \xe2\x80\x94 %.2f GiB%s</option>", mp->mem.classes[c].device_total / HTML_GIB,
                    c == mp->mem.worst ? " (largest)" : "");
    }
    html_put(h, "</select></label><button id=\"zoom-reset\" type=\"button\">Reset zoom</button></div>"
                "<div id=\"class-info\"></div><p id=\"live-warning\" style=\"display:none\"></p>\n"
                "<svg id=\"live-chart\" viewBox=\"0 0 1180 230\" role=\"img\" aria-label=\"live bytes over the "
                "step\"></svg>\n<svg id=\"gantt\" viewBox=\"0 0 1180 120\" role=\"img\" aria-label=\"timeline "
                "per stream\"></svg>\n<div class=\"legend\" id=\"gantt-legend\">");
    bool used[NHF] = {false};
    for (int c = 0; c < mp->mem.nclasses; c++)
        for (int i = 0; i < mp->sched.classes[c].nops; i++) used[html_family(mp->sched.classes[c].ops[i].kind)] = true;
    for (int f = 0; f < NHF; f++)
        if (used[f])
            html_printf(h, "<span><i style=\"background:%s\"></i>%s</span>", html_families[f].color,
                        html_families[f].name);
    html_put(h, "<span><i style=\"background:#d62728;height:4px\"></i>critical path</span></div>"
                "<p class=\"note\" id=\"agg-note\"></p>"
                "<noscript><p class=\"note\">The timeline is drawn by the page's inline script; enable "
                "JavaScript to see it.</p></noscript></section>\n");
}

/* ---- the embedded data ----------------------------------------------------------- */

/* Microseconds rounded to 10 ns: the page's time unit. */
static double html_us(double s)
{
    return round(s * 1e8) / 100;
}

/* A bar of the Gantt chart: one op, or neighbouring ops merged. */
typedef struct Bar { double t0, t1; int first, last, n; bool crit; double fam_time[NHF]; } Bar;

/* Appends a finished bar as [gap, duration, family, label] and, for merged
 * or critical bars, [.., ops merged, critical]: times in µs to 10 ns, the
 * gap from the previous bar's end (*prev, in 10 ns units), so a busy stream
 * costs a few bytes per bar. */
static void html_emit_bar(cJSON *bars, const Sched *s, const Bar *b, long long *prev)
{
    int fam = 0;
    for (int f = 1; f < NHF; f++)
        if (b->fam_time[f] > b->fam_time[fam]) fam = f;
    if (b->n == 1) fam = html_family(s->ops[b->first].kind);
    const char *label = b->n == 1 ? sched_op_label(s, b->first)
                        : arena_printf(&g_arena, "%d ops: %s \xe2\x80\xa6 %s", b->n, sched_op_label(s, b->first),
                                       sched_op_label(s, b->last));
    cJSON *a = cJSON_CreateArray();
    long long t0 = llround(b->t0 * 1e8), t1 = llround(b->t1 * 1e8);
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(t0 - *prev) / 100));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(t1 - t0) / 100));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(fam));
    cJSON_AddItemToArray(a, cJSON_CreateString(label));
    if (b->n > 1 || b->crit) {
        cJSON_AddItemToArray(a, cJSON_CreateNumber(b->n));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(b->crit));
    }
    cJSON_AddItemToArray(bars, a);
    *prev = t1;
}

/* An op of a stream and its start, to sort by. */
typedef struct Start { double t; int op; } Start;

/* Orders ops by start time, then by list order. */
static int html_start_cmp(const void *a, const void *b)
{
    const Start *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->op - y->op;
}

/* The bars of one stream of class c, merging past cap ops; returns how many
 * ops were merged away. */
static int html_stream_bars(cJSON *bars, const Plan *mp, const Sim *sim, const bool *crit, int c, int stream,
                            double end, int cap)
{
    const Sched *s = &mp->sched.classes[c];
    const SimOp *so = sim->classes[c].ops;
    Start *idx = arena_alloc(&g_arena, sizeof(Start) * (size_t)(s->nops + 1));
    int n = 0;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].stream == stream) idx[n++] = (Start){so[i].start, i};
    qsort(idx, (size_t)n, sizeof *idx, html_start_cmp);
    double q = n > cap ? end / HTML_GANTT_RES : -1;
    Bar b = {0};
    int nbars = 0;
    long long prev = 0;
    for (int k = 0; k < n; k++) {
        int i = idx[k].op;
        double t0 = so[i].start, t1 = so[i].end > t0 ? so[i].end : t0;
        bool merge = b.n > 0 && t0 - b.t1 <= q && t1 - b.t0 <= HTML_GANTT_SPAN * q;
        if (!merge) {
            if (b.n) html_emit_bar(bars, s, &b, &prev), nbars++;
            memset(&b, 0, sizeof b);
            b.t0 = t0, b.first = i;
        }
        if (t1 > b.t1) b.t1 = t1;
        b.last = i, b.n++;
        b.crit |= crit[i];
        b.fam_time[html_family(s->ops[i].kind)] += t1 - t0;
    }
    if (b.n) html_emit_bar(bars, s, &b, &prev), nbars++;
    return n - nbars;
}

/* The live-bytes curve of class c, at most HTML_LIVE_MAX points: per time
 * bucket its highest point and its last, so the peak is never lost. */
static cJSON *html_live(const LivePoint *pt, int n, double end, bool *thinned)
{
    cJSON *a = cJSON_CreateArray();
    int buckets = HTML_LIVE_MAX / 2;
    *thinned = n > HTML_LIVE_MAX;
    for (int i = 0; i < n;) {
        int j = i, hi = i;
        if (*thinned) {
            int bk = (int)(pt[i].t / end * buckets);
            while (j + 1 < n && (int)(pt[j + 1].t / end * buckets) == bk) {
                j++;
                if (pt[j].bytes > pt[hi].bytes) hi = j;
            }
        }
        int keep[2] = {hi, j}, nk = hi == j ? 1 : 2;
        for (int k = 0; k < nk; k++) {
            cJSON *p = cJSON_CreateArray();
            cJSON_AddItemToArray(p, cJSON_CreateNumber(html_us(pt[keep[k]].t)));
            cJSON_AddItemToArray(p, cJSON_CreateNumber((double)pt[keep[k]].bytes));
            cJSON_AddItemToArray(a, p);
        }
        i = j + 1;
    }
    return a;
}

/* One rank class's timeline data. */
static cJSON *html_class_data(const Plan *mp, const Sim *sim, bool **crit, int c)
{
    const ClassMem *cm = &mp->mem.classes[c];
    const Sched *s = cm->sched;
    const SimClass *sc = &sim->classes[c];
    double end = sc->end > 0 ? sc->end : 0;
    for (int i = 0; i < s->nops; i++)
        if (sc->ops[i].end > end) end = sc->ops[i].end;
    if (end <= 0) end = 1e-9;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", html_class_name(mp, c));
    cJSON_AddNumberToObject(o, "end", html_us(end));
    cJSON_AddNumberToObject(o, "nops", s->nops);
    cJSON *rows = cJSON_AddArrayToObject(o, "rows");
    int merged = 0, cap = HTML_GANTT_OPS / mp->mem.nclasses;
    cap = cap < HTML_GANTT_MIN ? HTML_GANTT_MIN : cap > HTML_GANTT_MAX ? HTML_GANTT_MAX : cap;
    for (int st = 0; st < NSTREAMS; st++) {
        bool any = false;
        for (int i = 0; i < s->nops && !any; i++) any = s->ops[i].stream == st;
        if (!any) continue;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "stream", sched_stream_name(st));
        cJSON_AddNumberToObject(r, "busy", html_us(sc->busy[st]));
        merged += html_stream_bars(cJSON_AddArrayToObject(r, "bars"), mp, sim, crit[c], c, st, end, cap);
        cJSON_AddItemToArray(rows, r);
    }
    cJSON_AddNumberToObject(o, "merged", merged);
    cJSON_AddNumberToObject(o, "quantum", merged ? html_us(end / HTML_GANTT_RES) : 0);
    int n, at = 0;
    LivePoint *pt = trace_live_curve(mp, sim, c, SPACE_DEVICE, &n);
    for (int i = 1; i < n; i++)
        if (pt[i].bytes > pt[at].bytes) at = i;
    bool thinned;
    cJSON_AddItemToObject(o, "live", html_live(pt, n, pt[n - 1].t > 0 ? pt[n - 1].t : 1e-9, &thinned));
    cJSON_AddBoolToObject(o, "live_thinned", thinned);
    cJSON *pk = cJSON_AddObjectToObject(o, "peak");
    cJSON_AddNumberToObject(pk, "t", html_us(pt[at].t));
    cJSON_AddNumberToObject(pk, "bytes", (double)pt[at].bytes);
    cJSON_AddStringToObject(pk, "op", pt[at].op >= 0 ? sched_op_label(s, pt[at].op) : "start of step");
    cJSON_AddNumberToObject(o, "arena", (double)cm->arena[SPACE_DEVICE]);
    cJSON_AddNumberToObject(o, "plan_peak", (double)cm->peak[SPACE_DEVICE]);
    cJSON_AddStringToObject(o, "plan_peak_op",
                            cm->peak_op >= 0 && cm->peak_op < s->nops ? sched_op_label(s, cm->peak_op) : "");
    return o;
}

/* The JSON block the script draws from, escaped for a <script> element. */
static void html_data(Html *h, const Plan *mp, const Sim *sim)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *fams = cJSON_AddArrayToObject(root, "families");
    for (int f = 0; f < NHF; f++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", html_families[f].name);
        cJSON_AddStringToObject(o, "color", html_families[f].color);
        cJSON_AddItemToArray(fams, o);
    }
    cJSON_AddNumberToObject(root, "worst", mp->mem.worst);
    bool **crit = arena_alloc(&g_arena, sizeof(bool *) * (size_t)mp->mem.nclasses);
    for (int c = 0; c < mp->mem.nclasses; c++) crit[c] = arena_alloc(&g_arena, (size_t)mp->sched.classes[c].nops + 1);
    for (int k = 0; k < sim->ncritical; k++) {
        SimRef r = sim->critical[k];
        if (r.cls >= 0 && r.cls < mp->mem.nclasses && r.op >= 0 && r.op < mp->sched.classes[r.cls].nops)
            crit[r.cls][r.op] = true;
    }
    cJSON *cls = cJSON_AddArrayToObject(root, "classes");
    for (int c = 0; c < mp->mem.nclasses; c++) cJSON_AddItemToArray(cls, html_class_data(mp, sim, crit, c));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) die("html: out of memory printing the data");
    html_put(h, "<script type=\"application/json\" id=\"plan-data\">");
    /* '<', '>' and '&' only occur inside JSON strings, where \u escapes mean
     * the same: the block can never close its element or open a comment */
    for (const char *p = text; *p; p++) {
        if (*p == '<') html_put(h, "\\u003c");
        else if (*p == '>') html_put(h, "\\u003e");
        else if (*p == '&') html_put(h, "\\u0026");
        else html_putn(h, p, 1);
    }
    free(text);
    html_put(h, "</script>\n");
}

/* ---- the script ------------------------------------------------------------------- */

/* Draws the live curve and the Gantt chart of the selected class from the
 * JSON block; zoom by dragging.  Text goes in through textContent only. */
static const char html_js[] =
    "(function () {\n"
    "'use strict';\n"
    "var D = JSON.parse(document.getElementById('plan-data').textContent);\n"
    "var live = document.getElementById('live-chart'), gantt = document.getElementById('gantt');\n"
    "var NS = gantt.namespaceURI, W = 1180, L = 118, R = 36, PW = W - L - R;\n"
    "var sel = document.getElementById('class-select'), info = document.getElementById('class-info');\n"
    "var cls = D.worst, v0 = 0, v1 = 1, drag = null;\n"
    "function el(tag, attrs, parent, text) {\n"
    "  var e = document.createElementNS(NS, tag);\n"
    "  for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "  if (text !== undefined) e.textContent = text;\n"
    "  if (parent) parent.appendChild(e);\n"
    "  return e;\n"
    "}\n"
    "function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }\n"
    "var UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];\n"
    "function unitOf(b) { var k = 0; while (k < 4 && Math.abs(b) >= Math.pow(1024, k + 1)) k++; return k; }\n"
    "function gib(b) { var k = unitOf(b); return (b / Math.pow(1024, k)).toFixed(k ? 2 : 0) + ' ' + UNITS[k]; }\n"
    "function fmtT(us) {\n"
    "  var a = Math.abs(us);\n"
    "  if (a === 0) return '0';\n"
    "  if (a >= 1e6) return (us / 1e6).toFixed(a >= 1e7 ? 2 : 3) + ' s';\n"
    "  if (a >= 1e3) return (us / 1e3).toFixed(a >= 1e5 ? 1 : 2) + ' ms';\n"
    "  return us.toFixed(1) + ' \\u00b5s';\n"
    "}\n"
    "function nice(range, n) {\n"
    "  var raw = range / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;\n"
    "  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;\n"
    "}\n"
    "function X(t) { return L + (t - v0) / (v1 - v0) * PW; }\n"
    "function timeAxis(svg, y, y0) {\n"
    "  var st = nice(v1 - v0, 8), t = Math.ceil(v0 / st) * st;\n"
    "  el('line', {'class': 'axis', x1: L, x2: W - R, y1: y, y2: y}, svg);\n"
    "  for (; t <= v1 + 1e-9; t += st) {\n"
    "    el('line', {'class': 'grid', x1: X(t), x2: X(t), y1: y0, y2: y}, svg);\n"
    "    el('text', {x: X(t), y: y + 14, 'text-anchor': 'middle'}, svg, fmtT(t));\n"
    "  }\n"
    "}\n"
    "function drawLive() {\n"
    "  var C = D.classes[cls], H = 230, T = 26, B = 24, PH = H - T - B, pts = C.live;\n"
    "  clear(live);\n"
    "  var top = Math.max(C.arena, C.peak.bytes, 1) * 1.12;\n"
    "  var Y = function (b) { return T + PH - b / top * PH; };\n"
    "  var k = unitOf(top), u = Math.pow(1024, k), st = nice(top / u, 4);\n"
    "  for (var g = 0; g * u <= top; g += st) {\n"
    "    el('line', {'class': 'grid', x1: L, x2: W - R, y1: Y(g * u), y2: Y(g * u)}, live);\n"
    "    el('text', {x: L - 6, y: Y(g * u) + 4, 'text-anchor': 'end'}, live, +g.toPrecision(6) + ' ' + UNITS[k]);\n"
    "  }\n"
    "  el('text', {x: 4, y: 14}, live, 'device bytes live');\n"
    "  var clip = el('clipPath', {id: 'live-clip'}, el('defs', {}, live));\n"
    "  el('rect', {x: L, y: 0, width: PW, height: H}, clip);\n"
    "  var d = '', prev = null;\n"
    "  for (var i = 0; i < pts.length; i++) {\n"
    "    var t = pts[i][0], b = pts[i][1];\n"
    "    if (t < v0) { prev = pts[i]; continue; }\n"
    "    if (!d) d = 'M' + X(v0) + ' ' + Y(0) + 'V' + Y(prev ? prev[1] : b);\n"
    "    d += 'H' + X(Math.min(t, v1)) + 'V' + Y(b);\n"
    "    if (t > v1) break;\n"
    "  }\n"
    "  if (!d && prev) d = 'M' + X(v0) + ' ' + Y(0) + 'V' + Y(prev[1]);\n"
    "  d += 'H' + X(v1) + 'V' + Y(0) + 'Z';\n"
    "  el('path', {id: 'live-curve', d: d, fill: '#76b7b2', 'fill-opacity': 0.35, stroke: '#2f6f6a',\n"
    "              'stroke-width': 1.2, 'clip-path': 'url(#live-clip)'}, live);\n"
    "  el('line', {'class': 'arena', x1: L, x2: W - R, y1: Y(C.arena), y2: Y(C.arena)}, live);\n"
    "  var p = C.peak, shown = p.t >= v0 && p.t <= v1, right = !shown || X(p.t) < L + PW * 0.6;\n"
    "  /* the arena's label under its line, away from the peak's label */\n"
    "  el('text', {x: right ? W - R - 4 : L + 6, y: Y(C.arena) + 14, 'text-anchor': right ? 'end' : 'start'}, live,\n"
    "     'arena ' + gib(C.arena));\n"
    "  if (shown) {\n"
    "    var px = X(p.t), py = Y(p.bytes);\n"
    "    var g2 = el('g', {id: 'live-peak'}, live);\n"
    "    el('line', {x1: px, x2: px, y1: py, y2: T + PH, stroke: '#d62728', 'stroke-dasharray': '3 3'}, g2);\n"
    "    el('circle', {cx: px, cy: py, r: 4.5, fill: '#d62728'}, g2);\n"
    "    el('text', {x: px + (right ? 8 : -8), y: Math.max(py - 8, 12), 'text-anchor': right ? 'start' : 'end',\n"
    "                style: 'fill:#d62728;font-weight:600'}, g2,\n"
    "       'peak ' + gib(p.bytes) + ' at ' + fmtT(p.t) + ' \\u2014 ' + p.op);\n"
    "  }\n"
    "  timeAxis(live, T + PH, T);\n"
    "  live.appendChild(selRect(live, T, PH));\n"
    "}\n"
    "function drawGantt() {\n"
    "  var C = D.classes[cls], RH = 30, T = 8, H = T + C.rows.length * RH + 26;\n"
    "  clear(gantt);\n"
    "  gantt.setAttribute('viewBox', '0 0 ' + W + ' ' + H);\n"
    "  var minw = (v1 - v0) / PW * 0.6, eps = (v1 - v0) * 1e-9, nb = 0;\n"
    "  C.rows.forEach(function (r, k) {\n"
    "    var y = T + k * RH, g = el('g', {'class': 'row'}, gantt);\n"
    "    el('rect', {x: L, y: y, width: PW, height: RH - 6, fill: k % 2 ? '#f7f8fa' : '#fbfcfd'}, g);\n"
    "    el('text', {x: 4, y: y + 11, style: 'font-weight:600'}, g, r.stream);\n"
    "    el('text', {x: 4, y: y + 23}, g, (100 * r.busy / C.end).toFixed(0) + '% busy');\n"
    "    var end = 0;\n"
    "    r.bars.forEach(function (b) {\n"
    "      var t0 = end + b[0], t1 = t0 + Math.max(b[1], minw);\n"
    "      end = t0 + b[1];\n"
    "      if (t1 < v0 || t0 > v1 + eps) return;\n"
    "      var x0 = X(Math.max(t0, v0)), x1 = X(Math.min(t1, v1));\n"
    "      var f = D.families[b[2]], rc = el('rect', {'class': 'bar', x: x0, y: y + 1, width: Math.max(x1 - x0, 0.6),\n"
    "                                      height: RH - 10, fill: f.color}, g);\n"
    "      if (x1 - x0 > 4) { rc.setAttribute('stroke', '#fff'); rc.setAttribute('stroke-width', 0.6); }\n"
    "      el('title', {}, rc, b[3] + '\\n' + f.name + ': ' + fmtT(t0) + ' + ' + fmtT(b[1]) +\n"
    "         (b[4] > 1 ? '\\n' + b[4] + ' ops merged into one bar' : '') + (b[5] ? '\\non the critical path' : ''));\n"
    "      if (b[5]) el('rect', {x: x0, y: y + RH - 9, width: Math.max(x1 - x0, 0.6), height: 3, fill: '#d62728'}, g);\n"
    "      nb++;\n"
    "    });\n"
    "  });\n"
    "  timeAxis(gantt, T + C.rows.length * RH - 2, T);\n"
    "  gantt.appendChild(selRect(gantt, T, C.rows.length * RH - 6));\n"
    "  return nb;\n"
    "}\n"
    "function selRect(svg, y, h) {\n"
    "  var r = document.createElementNS(NS, 'rect');\n"
    "  r.setAttribute('class', 'sel'); r.setAttribute('y', y); r.setAttribute('height', h);\n"
    "  r.setAttribute('width', 0); r.setAttribute('x', 0); r.style.display = 'none';\n"
    "  return r;\n"
    "}\n"
    "function draw() {\n"
    "  var C = D.classes[cls];\n"
    "  drawLive();\n"
    "  var nb = drawGantt();\n"
    "  info.textContent = C.name + ': ' + C.nops + ' ops on ' + C.rows.length + ' streams, the step ends at ' +\n"
    "    fmtT(C.end) + '; showing ' + fmtT(v0) + ' \\u2013 ' + fmtT(v1) + ' (' + nb + ' bars). Memory plan peak ' +\n"
    "    gib(C.plan_peak) + (C.plan_peak_op ? ' at ' + C.plan_peak_op : '') + ', arena ' + gib(C.arena) + '.';\n"
    "  var notes = [];\n"
    "  if (C.merged) notes.push('This class has too many ops to draw one bar each: ' + C.merged + ' ops closer ' +\n"
    "    'than ' + fmtT(C.quantum) + ' to their neighbour on a busy stream are merged into the bar before ' +\n"
    "    'them (its colour is the kind that takes most of its time; hover for the ops).');\n"
    "  var warn = document.getElementById('live-warning');\n"
    "  warn.textContent = C.peak.bytes > C.arena ? 'Warning: in the simulated timing ' + gib(C.peak.bytes) +\n"
    "    ' are live at ' + fmtT(C.peak.t) + ' (' + C.peak.op + '), more than the arena of ' + gib(C.arena) +\n"
    "    ': ops on another stream run ahead of the releases the memory plan assumes, so some arena region is ' +\n"
    "    'reused while it is still in use. The schedule needs an event there.' : '';\n"
    "  warn.style.display = C.peak.bytes > C.arena ? '' : 'none';\n"
    "  if (C.live_thinned) notes.push('The live-bytes curve keeps the highest and the last point of each of ' +\n"
    "    'a thousand time slices; the peak is exact.');\n"
    "  document.getElementById('agg-note').textContent = notes.join(' ');\n"
    "  var whole = v0 <= 0 && v1 >= C.end;\n"
    "  try {\n"
    "    history.replaceState(null, '', '#class=' + cls + (whole ? '' : '&from=' + v0.toFixed(2) + '&to=' + v1.toFixed(2)));\n"
    "  } catch (e) { /* a page opened from some viewers cannot change its address */ }\n"
    "}\n"
    "function svgX(svg, ev) {\n"
    "  var r = svg.getBoundingClientRect();\n"
    "  return (ev.clientX - r.left) / r.width * W;\n"
    "}\n"
    "function tOf(x) { return v0 + (Math.min(Math.max(x, L), W - R) - L) / PW * (v1 - v0); }\n"
    "[live, gantt].forEach(function (svg) {\n"
    "  svg.addEventListener('mousedown', function (ev) {\n"
    "    drag = {svg: svg, x: svgX(svg, ev), r: svg.querySelector('rect.sel')};\n"
    "    ev.preventDefault();\n"
    "  });\n"
    "  svg.addEventListener('dblclick', function () { reset(); });\n"
    "});\n"
    "window.addEventListener('mousemove', function (ev) {\n"
    "  if (!drag || !drag.r) return;\n"
    "  var x = svgX(drag.svg, ev), a = Math.max(Math.min(drag.x, x), L), b = Math.min(Math.max(drag.x, x), W - R);\n"
    "  drag.r.style.display = ''; drag.r.setAttribute('x', a); drag.r.setAttribute('width', Math.max(b - a, 0));\n"
    "});\n"
    "window.addEventListener('mouseup', function (ev) {\n"
    "  if (!drag) return;\n"
    "  var x = svgX(drag.svg, ev), a = tOf(Math.min(drag.x, x)), b = tOf(Math.max(drag.x, x));\n"
    "  var wide = Math.abs(x - drag.x) > 4;\n"
    "  drag = null;\n"
    "  if (wide && b > a) { v0 = a; v1 = b; }\n"
    "  draw();\n"
    "});\n"
    "function reset() { v0 = 0; v1 = Math.max(D.classes[cls].end, 1e-3); draw(); }\n"
    "document.getElementById('zoom-reset').addEventListener('click', reset);\n"
    "sel.addEventListener('change', function () { cls = +sel.value; reset(); });\n"
    "/* #class=N&from=US&to=US selects a class and a time window (links, screenshots) */\n"
    "var q = {};\n"
    "location.hash.slice(1).split('&').forEach(function (kv) { var p = kv.split('='); q[p[0]] = +p[1]; });\n"
    "if (q['class'] >= 0 && q['class'] < D.classes.length) cls = Math.floor(q['class']);\n"
    "sel.value = String(cls);\n"
    "reset();\n"
    "if (q.to > q.from && q.from >= 0) { v0 = q.from; v1 = q.to; draw(); }\n"
    "})();\n";

/* ---- the page ---------------------------------------------------------------------- */

/* The whole page (arena-allocated). */
char *html_report(const Plan *mp, const Sim *sim)
{
    if (!sim || !sim->classes) die("html: no simulation to draw");
    Html h = {0};
    html_put(&h, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                 "<meta name=\"generator\" content=\"shardc " SHARDC_VERSION "\"><title>shardc plan: ");
    html_text(&h, mp->spec->source ? mp->spec->source : "(spec)");
    html_put(&h, "</title>\n<style>\n");
    html_put(&h, html_css);
    html_put(&h, "</style></head>\n<body>\n");
    html_header(&h, mp);
    html_put(&h, "<main>\n");
    html_summary(&h, mp, sim);
    html_memory(&h, mp);
    html_timeline(&h, mp);
    html_put(&h, "<section id=\"memory-classes\"><h2>Memory by rank class</h2>");
    html_memory_table(&h, mp);
    html_put(&h, "</section>\n");
    html_put(&h, "<footer>Generated by shardc " SHARDC_VERSION " (<code>shardc plan --html</code>); the same step "
                 "as a Chrome trace: <code>shardc plan --trace FILE</code>, opened in Perfetto. How to read this "
                 "page: docs/schedule.md.</footer>\n</main>\n");
    html_data(&h, mp, sim);
    html_put(&h, "<script>\n");
    html_put(&h, html_js);
    html_put(&h, "</script>\n</body></html>\n");
    char *out = arena_strndup(&g_arena, h.p, h.n);
    free(h.p);
    return out;
}
