/* metrics.c — the progress line, the JSONL log and the Chrome trace (see metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct metrics {
    metrics_cfg cfg;
    FILE *out, *log;
    bool tty;
    bool open_line;             /* a terminal line not yet ended by '\n' */
    bool has_scale, skipped;    /* metrics_note_scale, for the next step only */
    double scale;
};

/* Monotonic wall clock in microseconds. */
double metrics_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* The log for appending or from scratch; opened without blocking, so that a
 * FIFO nobody reads is an error (ENXIO), not a trainer that never starts. */
static FILE *metrics_open_log(const char *path, bool append)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) return NULL;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) close(fd);
    return f;
}

/* Opens the JSONL log and decides whether the progress line is a terminal's. */
metrics *metrics_open(const metrics_cfg *cfg, char *err, size_t errlen)
{
    metrics *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "metrics: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->out = cfg->out ? cfg->out : stdout;
    m->tty = cfg->tty == METRICS_TTY_AUTO ? isatty(fileno(m->out)) : cfg->tty == METRICS_TTY_ON;
    if (m->cfg.log_every < 1) m->cfg.log_every = 1;
    if (cfg->jsonl && *cfg->jsonl && !(m->log = metrics_open_log(cfg->jsonl, cfg->append))) {
        snprintf(err, errlen, "%s: cannot create the log: %s", cfg->jsonl,
                 errno == ENXIO ? "a FIFO that no process reads" : strerror(errno));
        free(m);
        return NULL;
    }
    return m;
}

/* A number for JSON: null when not finite. */
static void json_num(FILE *f, const char *key, double v, const char *fmt)
{
    fprintf(f, ",\"%s\":", key);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

/* Bytes with a binary unit ("1.50 GiB"), into buf. */
static const char *fmt_bytes(char *buf, size_t len, double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(buf, len, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* fp16: the next step's loss scale and whether the step was skipped. */
void metrics_note_scale(metrics *m, double scale, bool skipped)
{
    m->has_scale = true;
    m->scale = scale;
    m->skipped = skipped;
}

/* One step: the progress line (when due) and the JSONL record. */
void metrics_step(metrics *m, int64_t step, double loss, double lr, double grad_norm,
                  double seconds, int64_t arena_bytes)
{
    double tps = seconds > 0 ? m->cfg.tokens_per_step / seconds : 0;
    double mfu = seconds > 0 && m->cfg.peak_flops > 0 && m->cfg.flops_per_step > 0
                     ? m->cfg.flops_per_step / seconds / m->cfg.peak_flops : NAN;
    bool last = step == m->cfg.steps;
    if (m->tty || step == 1 || step % m->cfg.log_every == 0 || last) {
        char mem[32], mfus[32] = "-";
        if (isfinite(mfu)) snprintf(mfus, sizeof mfus, "%.1f%%", 100 * mfu);
        char ls[64] = "";
        if (m->has_scale) snprintf(ls, sizeof ls, " | scale %g%s", m->scale, m->skipped ? " (overflow: skipped)" : "");
        fprintf(m->out, "%sstep %lld/%lld | loss %.4f | lr %.2e | norm %.3f%s | %.0f tok/s | mfu %s | mem %s | %.0f ms%s",
                m->tty ? "\r" : "", (long long)step, (long long)m->cfg.steps, loss, lr, grad_norm, ls, tps,
                mfus, fmt_bytes(mem, sizeof mem, (double)arena_bytes), seconds * 1e3,
                m->tty ? "\033[K" : "\n");
        m->open_line = m->tty;
        if (m->tty && last) {
            fputc('\n', m->out);
            m->open_line = false;
        }
        fflush(m->out);
    }
    if (m->log) {
        fprintf(m->log, "{\"step\":%lld", (long long)step);
        json_num(m->log, "loss", loss, "%.17g");
        json_num(m->log, "lr", lr, "%.17g");
        json_num(m->log, "grad_norm", grad_norm, "%.17g");
        if (m->has_scale) {
            json_num(m->log, "loss_scale", m->scale, "%.17g");
            fprintf(m->log, ",\"skipped\":%s", m->skipped ? "true" : "false");
        }
        json_num(m->log, "tokens_per_s", tps, "%.1f");
        json_num(m->log, "mfu", mfu, "%.6f");
        fprintf(m->log, ",\"arena_bytes\":%lld", (long long)arena_bytes);
        json_num(m->log, "step_ms", seconds * 1e3, "%.3f");
        fputs("}\n", m->log);
        fflush(m->log);
    }
    m->has_scale = false;
}

/* An evaluation: its own line, and a JSONL record. */
void metrics_eval(metrics *m, int64_t step, double val_loss)
{
    if (m->open_line) fputc('\n', m->out);
    m->open_line = false;
    fprintf(m->out, "step %lld/%lld | val loss %.4f\n", (long long)step, (long long)m->cfg.steps, val_loss);
    fflush(m->out);
    if (m->log) {
        fprintf(m->log, "{\"step\":%lld", (long long)step);
        json_num(m->log, "val_loss", val_loss, "%.17g");
        fputs("}\n", m->log);
        fflush(m->log);
    }
}

/* Every rank's allocations into the log. */
void metrics_allocated(metrics *m, int64_t step, const int64_t *v, int64_t world)
{
    static const char *const names[] = {"stage", "device_arena", "host_arena", "total"};
    if (!m->log) return;
    fprintf(m->log, "{\"step\":%lld,\"allocated\":{", (long long)step);
    for (int k = 0; k < 4; k++) {
        fprintf(m->log, "%s\"%s\":[", k ? "," : "", names[k]);
        for (int64_t r = 0; r < world; r++) fprintf(m->log, "%s%lld", r ? "," : "", (long long)v[4 * r + k]);
        fputc(']', m->log);
    }
    fputs("}}\n", m->log);
    fflush(m->log);
}

/* The sample's token ids into the log. */
void metrics_sample(metrics *m, int64_t step, const int32_t *ids, int64_t n)
{
    if (!m->log) return;
    fprintf(m->log, "{\"step\":%lld,\"sample\":[", (long long)step);
    for (int64_t i = 0; i < n; i++) fprintf(m->log, "%s%d", i ? "," : "", (int)ids[i]);
    fputs("]}\n", m->log);
    fflush(m->log);
}

/* Ends an open terminal line and closes the log (NULL is fine). */
void metrics_close(metrics *m)
{
    if (!m) return;
    if (m->open_line) fputc('\n', m->out);
    fflush(m->out);
    if (m->log) fclose(m->log);
    free(m);
}

/* ---- the Chrome trace ---------------------------------------------------------- */

typedef struct trace_ev {
    const char *name;
    int tid;                    /* -1: a counter sample                      */
    double ts, dur;             /* dur holds a counter's value               */
} trace_ev;

enum { TRACE_MAX_TIDS = 64 };

struct metrics_trace {
    char *path;
    int pid;
    trace_ev *ev;
    int64_t n, cap, dropped;
    const char *tid_name[TRACE_MAX_TIDS];
    double t0;                  /* timestamps are written relative to open   */
};

/* A trace buffer of `capacity` events, allocated now and never again. */
metrics_trace *metrics_trace_open(const char *path, int pid, int64_t capacity, char *err, size_t errlen)
{
    metrics_trace *t = calloc(1, sizeof *t);
    if (t) t->path = strdup(path);
    if (t && capacity > 0) t->ev = malloc((size_t)capacity * sizeof *t->ev);
    if (!t || !t->path || !t->ev) {
        if (t) free(t->path), free(t->ev);
        free(t);
        snprintf(err, errlen, "%s: no memory for a trace of %lld events", path, (long long)capacity);
        return NULL;
    }
    t->pid = pid;
    t->cap = capacity;
    t->t0 = metrics_now_us();
    return t;
}

/* Names tid in the viewer (the stream's name). */
void metrics_trace_thread(metrics_trace *t, int tid, const char *name)
{
    if (tid >= 0 && tid < TRACE_MAX_TIDS) t->tid_name[tid] = name;
}

/* Appends one event, or counts it as dropped. */
static void trace_push(metrics_trace *t, const char *name, int tid, double ts, double dur)
{
    if (t->n == t->cap) {
        t->dropped++;
        return;
    }
    t->ev[t->n++] = (trace_ev){name, tid, ts, dur};
}

/* One op: begin and end on the metrics_now_us clock. */
void metrics_trace_event(metrics_trace *t, const char *name, int tid, double begin_us, double end_us)
{
    trace_push(t, name, tid, begin_us, end_us - begin_us);
}

/* One counter sample. */
void metrics_trace_counter(metrics_trace *t, const char *name, double ts_us, double value)
{
    trace_push(t, name, -1, ts_us, value);
}

/* Events lost to a full buffer. */
int64_t metrics_trace_dropped(const metrics_trace *t) { return t->dropped; }

/* A JSON string literal. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Writes the trace file and frees the trace. */
bool metrics_trace_close(metrics_trace *t, char *err, size_t errlen)
{
    FILE *f = fopen(t->path, "w");
    bool ok = f != NULL;
    if (f) {
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%lld},\"traceEvents\":[\n",
                (long long)t->dropped);
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                t->pid, t->pid);
        for (int i = 0; i < TRACE_MAX_TIDS; i++) {
            if (!t->tid_name[i]) continue;
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                    t->pid, i);
            json_str(f, t->tid_name[i]);
            fputs("}}", f);
        }
        for (int64_t i = 0; i < t->n; i++) {
            const trace_ev *e = &t->ev[i];
            fputs(",\n{\"name\":", f);
            json_str(f, e->name);
            if (e->tid >= 0)
                fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d}", e->ts - t->t0,
                        e->dur, t->pid, e->tid);
            else
                fprintf(f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"value\":%.9g}}", e->ts - t->t0,
                        t->pid, isfinite(e->dur) ? e->dur : 0.0);
        }
        fputs("\n]}\n", f);
        ok = !ferror(f);
        ok = fclose(f) == 0 && ok;
    }
    if (!ok) snprintf(err, errlen, "%s: cannot write the trace: %s", t->path, strerror(errno));
    free(t->ev);
    free(t->path);
    free(t);
    return ok;
}

/* PATH for one rank; PATH.rankN.json (or PATH.rankN) for each of several. */
void metrics_trace_path(char *out, size_t len, const char *path, int rank, int world)
{
    size_t n = strlen(path);
    if (world <= 1) snprintf(out, len, "%s", path);
    else if (n > 5 && strcmp(path + n - 5, ".json") == 0)
        snprintf(out, len, "%.*s.rank%d.json", (int)(n - 5), path, rank);
    else snprintf(out, len, "%s.rank%d", path, rank);
}
