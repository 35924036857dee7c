/* rt_test_metrics.c — progress line, JSONL log, Chrome trace (runtime/core/metrics.c):
 *  - not a terminal: one line on step 1, every log_every steps and the last;
 *    a terminal: every step rewritten in place, a newline at the end and
 *    before an evaluation's line;
 *  - every JSONL line parses, holds the documented keys, non-finite -> null;
 *  - the trace parses as Chrome trace JSON, keeps `capacity` events and
 *    counts the dropped ones; the per-rank trace paths. */
#include "metrics.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <unistd.h>

/* Counts occurrences of s in text. */
static int count(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)); p += strlen(s)) n++;
    return n;
}

/* Runs 12 steps and an evaluation into a memory stream; returns what was printed. */
static char *run(int tty, const char *jsonl)
{
    char *buf = NULL, err[256];
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    metrics_cfg cfg = {out, tty, jsonl, false, 12, 5, 4096, 1e9, 1e11};
    metrics *m = metrics_open(&cfg, err, sizeof err);
    CHECK(m != NULL);
    if (!m) return NULL;
    for (int s = 1; s <= 12; s++) {
        metrics_step(m, s, s == 3 ? NAN : 5.0 / s, 6e-4, 1.5, 0.25, 3 << 20);
        if (s == 10) metrics_eval(m, s, 2.5);
    }
    metrics_close(m);
    fclose(out);
    return buf;
}

/* The progress line on a file and on a terminal. */
static void test_progress(void)
{
    char *plain = run(METRICS_TTY_OFF, NULL);
    if (plain) {
        CHECK_EQ(count(plain, "\n"), 5);                   /* steps 1, 5, 10, 12 and the eval */
        CHECK_HAS(plain, "step 1/12 | loss 5.0000 | lr 6.00e-04 | norm 1.500 | 16384 tok/s | mfu 4.0% | mem 3.00 MiB | 250 ms\n");
        CHECK_HAS(plain, "step 5/12 |");
        CHECK_HAS(plain, "step 10/12 | val loss 2.5000\n");
        CHECK_HAS(plain, "step 12/12 |");
        CHECK(!strstr(plain, "step 2/12") && !strchr(plain, '\r') && !strstr(plain, "\033["));
    }
    char *tty = run(METRICS_TTY_ON, NULL);
    if (tty) {
        CHECK_EQ(count(tty, "\r"), 12);                    /* every step, in place */
        CHECK_EQ(count(tty, "\033[K"), 12);
        CHECK_HAS(tty, "250 ms\033[K\nstep 10/12 | val loss");   /* the eval starts a new line */
        size_t n = strlen(tty);
        CHECK(n > 0 && tty[n - 1] == '\n');                /* ended at the last step */
    }
    free(plain);
    free(tty);
}

/* The JSONL log: one object per step and per evaluation. */
static void test_jsonl(void)
{
    char path[] = "/tmp/rt_test_metrics.XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    free(run(METRICS_TTY_OFF, path));
    FILE *f = fopen(path, "r");
    char line[1024];
    int steps = 0, evals = 0;
    while (f && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        CHECK(j != NULL);
        if (!j) continue;
        if (cJSON_GetObjectItem(j, "val_loss")) {
            evals++;
            CHECK(cJSON_GetObjectItem(j, "step")->valuedouble == 10);
        } else {
            steps++;
            const char *keys[] = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "arena_bytes", "step_ms"};
            for (int k = 0; k < 8; k++) CHECK(cJSON_GetObjectItem(j, keys[k]) != NULL);
            double step = cJSON_GetObjectItem(j, "step")->valuedouble;
            cJSON *loss = cJSON_GetObjectItem(j, "loss");
            if (step == 3) CHECK(cJSON_IsNull(loss));
            else CHECK(loss && loss->valuedouble == 5.0 / step);   /* exact: %.17g */
            CHECK(cJSON_GetObjectItem(j, "tokens_per_s")->valuedouble == 16384);
            CHECK_ABS(cJSON_GetObjectItem(j, "mfu")->valuedouble, 0.04, 1e-9);
            CHECK(cJSON_GetObjectItem(j, "arena_bytes")->valuedouble == 3 << 20);
        }
        cJSON_Delete(j);
    }
    if (f) fclose(f);
    CHECK_EQ(steps, 12);
    CHECK_EQ(evals, 1);
    /* a resumed run appends; the allocations of two ranks, one a stage */
    metrics_cfg cfg = {stderr, METRICS_TTY_OFF, path, true, 13, 1000, 1, 0, 0};
    char err[256];
    metrics *m = metrics_open(&cfg, err, sizeof err);
    CHECK(m != NULL);
    const int64_t v[8] = {0, 4096, 0, 9000, 1, 8192, 512, 12000};
    if (m) metrics_allocated(m, 13, v, 2);
    metrics_close(m);
    f = fopen(path, "r");
    char last[1024] = "";
    while (f && fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    if (f) fclose(f);
    CHECK_STR(last, "{\"step\":13,\"allocated\":{\"stage\":[0,1],\"device_arena\":[4096,8192],\"host_arena\":[0,512],"
                    "\"total\":[9000,12000]}}\n");
    f = fopen(path, "r");
    int lines = 0;
    while (f && fgets(line, sizeof line, f)) lines++;
    if (f) fclose(f);
    CHECK_EQ(lines, 14);
    unlink(path);
    cfg.jsonl = "/nonexistent/dir/log.jsonl";
    CHECK(metrics_open(&cfg, err, sizeof err) == NULL);
    CHECK_HAS(err, "/nonexistent/dir/log.jsonl");
}

/* The trace: events, names, counters, capacity. */
static void test_trace(void)
{
    char path[] = "/tmp/rt_test_trace.XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    char err[256];
    metrics_trace *t = metrics_trace_open(path, 3, 4, err, sizeof err);
    CHECK(t != NULL);
    if (!t) return;
    metrics_trace_thread(t, 0, "compute");
    metrics_trace_thread(t, 2, "dp-comm");
    double t0 = metrics_now_us();
    metrics_trace_event(t, "matmul_fwd", 0, t0 + 10, t0 + 35.5);
    metrics_trace_event(t, "all_gather \"w\"", 2, t0 + 12, t0 + 20);
    metrics_trace_counter(t, "loss", t0 + 40, 3.25);
    metrics_trace_event(t, "gelu_fwd", 0, t0 + 36, t0 + 37);
    metrics_trace_event(t, "dropped1", 0, t0 + 38, t0 + 39);
    metrics_trace_event(t, "dropped2", 0, t0 + 39, t0 + 40);
    CHECK_EQ(metrics_trace_dropped(t), 2);
    CHECK(metrics_trace_close(t, err, sizeof err));
    FILE *f = fopen(path, "r");
    static char text[1 << 16];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    cJSON *j = cJSON_Parse(text);
    CHECK(j != NULL);
    cJSON *ev = cJSON_GetObjectItem(j, "traceEvents"), *e;
    int x = 0, c = 0, meta = 0;
    cJSON_ArrayForEach(e, ev) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        CHECK(cJSON_GetObjectItem(e, "pid")->valuedouble == 3);
        if (!strcmp(ph, "X")) {
            x++;
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
            double ts = cJSON_GetObjectItem(e, "ts")->valuedouble, dur = cJSON_GetObjectItem(e, "dur")->valuedouble;
            CHECK(ts >= 0 && dur >= 0);
            if (!strcmp(name, "matmul_fwd")) CHECK_ABS(dur, 25.5, 1e-3);
            if (!strcmp(name, "all_gather \"w\"")) CHECK(cJSON_GetObjectItem(e, "tid")->valuedouble == 2);
            CHECK(strncmp(name, "dropped", 7) != 0);
        } else if (!strcmp(ph, "C")) {
            c++;
            CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "value")->valuedouble == 3.25);
        } else if (!strcmp(ph, "M")) {
            meta++;
        }
    }
    CHECK_EQ(x, 3);
    CHECK_EQ(c, 1);
    CHECK_EQ(meta, 3);          /* the process and two streams */
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "otherData"), "dropped_events")->valuedouble == 2);
    cJSON_Delete(j);
    unlink(path);

    char p[256];
    metrics_trace_path(p, sizeof p, "run/trace.json", 0, 1);
    CHECK(!strcmp(p, "run/trace.json"));
    metrics_trace_path(p, sizeof p, "run/trace.json", 3, 4);
    CHECK(!strcmp(p, "run/trace.rank3.json"));
    metrics_trace_path(p, sizeof p, "trace", 1, 2);
    CHECK(!strcmp(p, "trace.rank1"));
    t = metrics_trace_open("/nonexistent/dir/t.json", 0, 1, err, sizeof err);
    CHECK(t != NULL);
    if (t) CHECK(!metrics_trace_close(t, err, sizeof err));
    CHECK_HAS(err, "/nonexistent/dir/t.json");
}

int main(void)
{
    test_progress();
    test_jsonl();
    test_trace();
    if (!failures) printf("rt_test_metrics: ok\n");
    return failures != 0;
}
