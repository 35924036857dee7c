/* test_trace.c — the inspection views (trace.c, html.c) on real plans of tiny
 * models, with a step simulated here (ops back to back on each stream, waits
 * honoured), so they are tested apart from the cost model.
 *
 *  - trace_live_curve agrees with the memory plan's mem_live_at when the ops
 *    run one after another in list order;
 *  - the Chrome trace parses back: every op once as an "X" event with its
 *    label and args, process and thread names, flows paired ("s" inside its
 *    source slice, "f" bound to its destination), one per OP_WAIT and one per
 *    pipeline send, no negative durations, counters strictly increasing in
 *    time and equal to the live curve;
 *  - the HTML page is self-contained (no external resources), escapes the
 *    spec's name, and embeds JSON that parses and holds every class.
 */
#include "plan_fixture.h"
#include "sim.h"

#include <cjson/cJSON.h>

/* Fills sim with a step of plan mp: in list order, each op starts when its
 * stream is free (an OP_WAIT also not before the op it waits for ends);
 * serial: one clock for all streams instead. */
static void fake_sim(const Plan *mp, Sim *sim, bool serial)
{
    memset(sim, 0, sizeof *sim);
    sim->classes = arena_alloc(&g_arena, sizeof(SimClass) * (size_t)mp->mem.nclasses);
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const Sched *s = &mp->sched.classes[c];
        SimClass *sc = &sim->classes[c];
        sc->ops = arena_alloc(&g_arena, sizeof(SimOp) * (size_t)(s->nops + 1));
        double clock[NSTREAMS] = {0}, serial_clock = 0;
        for (int i = 0; i < s->nops; i++) {
            const Op *o = &s->ops[i];
            double *clk = serial ? &serial_clock : &clock[o->stream];
            double start = *clk, end;
            if (o->kind == OP_WAIT) {
                double t = o->aux >= 0 && o->aux < i ? sc->ops[o->aux].end : start;
                end = t > start ? t : start;
                if (serial) end = start + 1e-6;
            } else {
                end = start + 2e-6 + o->flops / 1e12 + (double)o->bytes / 1e10;
            }
            sc->ops[i] = (SimOp){start, end};
            *clk = end;
            sc->busy[o->stream] += end - start;
            if (end > sc->end) sc->end = end;
        }
        if (sc->end > sim->timeline) sim->step_time = sim->timeline = sc->end;
    }
    /* the critical path: class 0's compute ops, enough to test the marks */
    const Sched *s0 = &mp->sched.classes[0];
    sim->critical = arena_alloc(&g_arena, sizeof(SimRef) * (size_t)(s0->nops + 1));
    for (int i = 0; i < s0->nops; i++)
        if (s0->ops[i].stream == ST_COMPUTE) sim->critical[sim->ncritical++] = (SimRef){0, i};
    sim->tokens_per_s = 12345, sim->mfu = 0.42, sim->hfu = 0.5, sim->bubble = 0.1;
    sim->exposed[GRP_DP] = 0.03;
}

/* Plans a spec; false (with a message) if it cannot be planned. */
static bool plan(Spec *s, Plan *mp)
{
    fx_batch(s);
    if (!part_check(s, false) || !plan_build(s, mp, false)) {
        fprintf(stderr, "could not plan tp %lld pp %lld dp %lld\n", (long long)s->parallel.tp,
                (long long)s->parallel.pp, (long long)s->parallel.dp);
        failures++;
        return false;
    }
    return true;
}

/* With ops run in list order, the curve at each op is mem_live_at there. */
static void test_live_curve(const Plan *mp)
{
    Sim sim;
    fake_sim(mp, &sim, true);
    for (int c = 0; c < mp->mem.nclasses; c++) {
        const ClassMem *cm = &mp->mem.classes[c];
        for (int space = SPACE_DEVICE; space <= SPACE_HOST; space++) {
            int n;
            LivePoint *pt = trace_live_curve(mp, &sim, c, space, &n);
            CHECK(n >= 1);
            CHECK(pt[0].t == 0);
            for (int k = 1; k < n; k++) CHECK(pt[k].t > pt[k - 1].t);
            int k = 0, bad = 0;
            for (int i = 0; i < cm->sched->nops; i++) {
                double mid = (sim.classes[c].ops[i].start + sim.classes[c].ops[i].end) / 2;
                while (k + 1 < n && pt[k + 1].t <= mid) k++;
                if (pt[k].bytes != mem_live_at(cm, space, i)) bad++;
            }
            CHECK_EQ(bad, 0);
            if (space == SPACE_DEVICE) {
                int64_t hi = 0;
                for (int j = 0; j < n; j++) hi = pt[j].bytes > hi ? pt[j].bytes : hi;
                CHECK_EQ(hi, cm->peak[SPACE_DEVICE]);
            }
        }
    }
}

/* The number of a JSON member, or -1e300 when it is missing. */
static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1e300;
}

/* The string of a JSON member, or "". */
static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

enum { MAX_FLOWS = 1 << 16 };
typedef struct Flow { int s, f; int spid, stid, fpid, ftid; double sts, fts; const char *name; } Flow;

/* Is there an "X" event on (pid, tid) whose slice contains ts? */
static bool in_slice(cJSON *evs, int pid, int tid, double ts)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, evs)
    {
        if (strcmp(str(e, "ph"), "X") || num(e, "pid") != pid || num(e, "tid") != tid) continue;
        double t0 = num(e, "ts"), d = num(e, "dur");
        if (t0 <= ts + 1e-9 && ts <= t0 + d + 1e-9) return true;
    }
    return false;
}

/* The trace of a plan parses back with every op, name, flow and counter. */
static void test_trace(const Plan *mp, const char *what)
{
    Sim sim;
    fake_sim(mp, &sim, false);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f && trace_write(f, mp, &sim));
    if (f) fclose(f);
    cJSON *root = cJSON_Parse(text);
    free(text);
    CHECK(root != NULL);
    if (!root) return;
    cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    CHECK(cJSON_IsArray(evs));
    CHECK(strcmp(str(root, "displayTimeUnit"), "ms") == 0);
    CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "metadata")));
    int nc = mp->mem.nclasses;
    int **seen = calloc((size_t)nc, sizeof(int *));
    bool *named = calloc((size_t)nc, sizeof(bool));
    const char *(*threads)[NSTREAMS] = calloc((size_t)nc, sizeof *threads);
    double *last_dev = calloc((size_t)nc, sizeof(double));
    int *ncounter = calloc((size_t)nc, sizeof(int));
    for (int c = 0; c < nc; c++) {
        seen[c] = calloc((size_t)mp->sched.classes[c].nops + 1, sizeof(int));
        last_dev[c] = -1;
    }
    Flow *flows = calloc(MAX_FLOWS, sizeof(Flow));
    int bad_x = 0, bad_label = 0, nwait_flows = 0, npp_flows = 0, ncrit = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs)
    {
        const char *ph = str(e, "ph");
        int pid = (int)num(e, "pid"), c = pid - 1;
        CHECK(c >= 0 && c < nc);
        if (c < 0 || c >= nc) continue;
        const Sched *s = &mp->sched.classes[c];
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (strcmp(ph, "M") == 0) {
            const char *name = str(e, "name");
            if (strcmp(name, "process_name") == 0) {
                const char *want = arena_printf(&g_arena, "stage %d (ranks \xc3\x97%lld)", mp->mem.classes[c].cls->stage,
                                                (long long)mp->mem.classes[c].cls->count);
                CHECK(strcmp(str(args, "name"), want) == 0);
                named[c] = true;
            } else if (strcmp(name, "thread_name") == 0) {
                int st = (int)num(e, "tid") - pid * 16 - 1;
                CHECK(st >= 0 && st < NSTREAMS);
                if (st >= 0 && st < NSTREAMS) threads[c][st] = str(args, "name");
            }
        } else if (strcmp(ph, "X") == 0) {
            int i = (int)num(args, "op");
            if (i < 0 || i >= s->nops) {
                bad_x++;
                continue;
            }
            seen[c][i]++;
            const Op *o = &s->ops[i];
            if (strcmp(str(e, "name"), sched_op_label(s, i)) || strcmp(str(e, "cat"), sched_op_kind_name(o->kind)))
                bad_label++;
            if (num(e, "tid") != pid * 16 + o->stream + 1) bad_x++;
            if (num(e, "dur") < 0 || num(e, "ts") < 0) bad_x++;
            if (num(args, "layer") != o->layer || num(args, "microbatch") != o->mb || num(args, "chunk") != o->chunk ||
                num(args, "bytes") != (double)o->bytes)
                bad_x++;
            const cJSON *rd = cJSON_GetObjectItemCaseSensitive(args, "reads");
            const cJSON *wr = cJSON_GetObjectItemCaseSensitive(args, "writes");
            if (o->kind == OP_WAIT) {
                /* a wait names the op it waits for instead of repeating its buffers */
                const char *wf = str(args, "waits_for");
                if (rd || wr || (o->aux >= 0 && strcmp(wf, sched_op_label(s, o->aux)))) bad_x++;
            } else {
                if (cJSON_GetArraySize(rd) != o->nrd || cJSON_GetArraySize(wr) != o->nwr) bad_x++;
                if (o->nrd && strcmp(cJSON_GetArrayItem(rd, 0)->valuestring, s->bufs[o->rd[0]].name)) bad_x++;
            }
            ncrit += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "critical_path"));
        } else if (strcmp(ph, "s") == 0 || strcmp(ph, "f") == 0) {
            int id = (int)num(e, "id");
            CHECK(id > 0 && id < MAX_FLOWS);
            if (id <= 0 || id >= MAX_FLOWS) continue;
            Flow *fl = &flows[id];
            if (ph[0] == 's') {
                fl->s++, fl->spid = pid, fl->stid = (int)num(e, "tid"), fl->sts = num(e, "ts");
                fl->name = str(e, "name");
            } else {
                fl->f++, fl->fpid = pid, fl->ftid = (int)num(e, "tid"), fl->fts = num(e, "ts");
                CHECK(strcmp(str(e, "bp"), "e") == 0);
            }
        } else if (strcmp(ph, "C") == 0) {
            if (strcmp(str(e, "name"), "device live bytes") == 0) {
                double ts = num(e, "ts");
                CHECK(ts > last_dev[c]);
                last_dev[c] = ts;
                CHECK(num(args, "bytes") >= 0);
                ncounter[c]++;
            }
        } else {
            CHECK(strcmp(ph, "i") == 0);
        }
    }
    for (int c = 0; c < nc; c++) {
        const Sched *s = &mp->sched.classes[c];
        CHECK(named[c]);
        int missing = 0;
        for (int i = 0; i < s->nops; i++) missing += seen[c][i] != 1;
        CHECK_EQ(missing, 0);
        bool used[NSTREAMS] = {false};
        for (int i = 0; i < s->nops; i++) used[s->ops[i].stream] = true;
        for (int st = 0; st < NSTREAMS; st++) {
            CHECK(used[st] == (threads[c][st] != NULL));
            if (threads[c][st]) CHECK(strcmp(threads[c][st], sched_stream_name(st)) == 0);
        }
        int n;
        trace_live_curve(mp, &sim, c, SPACE_DEVICE, &n);
        CHECK(ncounter[c] >= 2 && ncounter[c] <= n);
    }
    CHECK_EQ(bad_x, 0);
    CHECK_EQ(bad_label, 0);
    CHECK(ncrit > 0);
    /* flows: each id once as "s" and once as "f", both inside a slice */
    int unpaired = 0, outside = 0;
    for (int id = 1; id < MAX_FLOWS; id++) {
        Flow *fl = &flows[id];
        if (!fl->s && !fl->f) continue;
        if (fl->s != 1 || fl->f != 1) {
            unpaired++;
            continue;
        }
        if (!in_slice(evs, fl->spid, fl->stid, fl->sts) || !in_slice(evs, fl->fpid, fl->ftid, fl->fts)) outside++;
        if (strcmp(fl->name, "wait") == 0) {
            nwait_flows++;
            CHECK(fl->spid == fl->fpid);
        } else {
            npp_flows++;
            CHECK(fl->spid != fl->fpid);
        }
    }
    CHECK_EQ(unpaired, 0);
    CHECK_EQ(outside, 0);
    int nwaits = 0, nsends = 0;
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < mp->sched.classes[c].nops; i++) {
            int k = mp->sched.classes[c].ops[i].kind;
            nwaits += k == OP_WAIT, nsends += k == OP_SEND_FWD || k == OP_SEND_BWD;
        }
    CHECK_EQ(nwait_flows, nwaits);
    CHECK_EQ(npp_flows, nsends);
    CHECK(nwaits > 0);
    if (mp->part.pp > 1) CHECK(nsends > 0);
    if (failures) fprintf(stderr, "  (in the trace of %s)\n", what);
    for (int c = 0; c < nc; c++) free(seen[c]);
    free(seen), free(named), free(threads), free(last_dev), free(ncounter), free(flows);
    cJSON_Delete(root);
}

/* The page is self-contained, escaped, and its data block parses. */
static void test_html(const Plan *mp)
{
    Sim sim;
    fake_sim(mp, &sim, false);
    const char *page = html_report(mp, &sim);
    CHECK(strncmp(page, "<!DOCTYPE html>", 15) == 0);
    CHECK(strstr(page, "</html>") != NULL);
    /* nothing is fetched: no URL at all, no src or href attributes, no @import */
    CHECK(strstr(page, "http:") == NULL && strstr(page, "https:") == NULL && strstr(page, "//cdn") == NULL);
    CHECK(strstr(page, " src=") == NULL && strstr(page, " href=") == NULL && strstr(page, "@import") == NULL);
    /* the spec's name is escaped wherever it appears */
    CHECK(strstr(page, "<b>&") == NULL);
    CHECK(strstr(page, "&lt;b&gt;&amp;&quot;x&quot;.tspec") != NULL);
    const char *ids[] = {"id=\"mem-chart\"", "id=\"mem-table\"", "id=\"live-chart\"", "id=\"gantt\"",
                         "id=\"class-select\"", "id=\"plan-data\"", "id=\"verdict\"", "id=\"summary\""};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) CHECK(strstr(page, ids[i]) != NULL);
    int options = 0;
    for (const char *p = page; (p = strstr(p, "<option ")); p++) options++;
    CHECK_EQ(options, mp->mem.nclasses);
    /* the data block: JSON up to its closing tag, one entry per class */
    const char *open = strstr(page, "<script type=\"application/json\" id=\"plan-data\">");
    CHECK(open != NULL);
    if (!open) return;
    open = strchr(open, '>') + 1;
    const char *close = strstr(open, "</script>");
    CHECK(close != NULL);
    char *json = arena_strndup(&g_arena, open, (size_t)(close - open));
    CHECK(strchr(json, '<') == NULL);
    cJSON *d = cJSON_Parse(json);
    CHECK(d != NULL);
    if (!d) return;
    cJSON *classes = cJSON_GetObjectItemCaseSensitive(d, "classes");
    CHECK_EQ(cJSON_GetArraySize(classes), mp->mem.nclasses);
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, classes)
    {
        /* every op is in some bar: the bars' op counts add up */
        int ops = 0;
        const cJSON *r, *b;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(c, "rows"))
            cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(r, "bars"))
        {
            /* [gap, duration, family, label] or [.., ops merged, critical] */
            int len = cJSON_GetArraySize(b);
            CHECK(len == 4 || len == 6);
            ops += len == 6 ? cJSON_GetArrayItem(b, 4)->valueint : 1;
            CHECK(cJSON_GetArrayItem(b, 0)->valuedouble >= 0);
            CHECK(cJSON_GetArrayItem(b, 1)->valuedouble >= 0);
            CHECK(cJSON_IsString(cJSON_GetArrayItem(b, 3)));
        }
        CHECK_EQ(ops, mp->sched.classes[k].nops);
        const cJSON *peak = cJSON_GetObjectItemCaseSensitive(c, "peak");
        CHECK(num(peak, "bytes") > 0);
        CHECK(strlen(str(peak, "op")) > 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "live")) >= 2);
        k++;
    }
    cJSON_Delete(d);
}

int main(void)
{
    Spec s;
    Plan *mp;

    /* tp 2 (sequence parallel) x pp 2 x dp 2, 1f1b, ZeRO 1, 4 microbatches */
    fx_spec(&s);
    s.source = "tiny <b>&\"x\".tspec";
    s.parallel.tp = 2, s.parallel.pp = 2, s.parallel.dp = 2, s.parallel.microbatches = 4;
    s.parallel.sequence_parallel = true, s.zero.stage = 1, s.train.grad_clip = 1.0;
    mp = arena_alloc(&g_arena, sizeof *mp);
    if (plan(&s, mp)) {
        test_live_curve(mp);
        test_trace(mp, "tp2 pp2 dp2 1f1b");
        test_html(mp);
    }

    /* interleaved: pp 2 x v 2, 4 microbatches, full recompute */
    fx_spec(&s);
    s.source = "tiny <b>&\"x\".tspec";
    s.parallel.pp = 2, s.parallel.schedule = SCHED_INTERLEAVED, s.parallel.virtual_stages = 2;
    s.parallel.microbatches = 4, s.checkpointing.activations = CKPT_FULL;
    mp = arena_alloc(&g_arena, sizeof *mp);
    if (plan(&s, mp)) {
        test_live_curve(mp);
        test_trace(mp, "pp2 v2 interleaved");
        test_html(mp);
    }

    /* ZeRO-3 over dp 4 with the optimizer offloaded to the host: the host counter */
    fx_spec(&s);
    s.source = "tiny <b>&\"x\".tspec";
    s.parallel.dp = 4, s.zero.stage = 3, s.offload.optimizer = OFF_CPU, s.zero.param_persistence_threshold = 0;
    mp = arena_alloc(&g_arena, sizeof *mp);
    if (plan(&s, mp)) {
        test_live_curve(mp);
        test_trace(mp, "zero3 dp4 offload cpu");
        test_html(mp);
    }
    return fx_done("test_trace");
}
