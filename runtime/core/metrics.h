/* metrics.h — what a training run reports: the progress line, the JSONL log,
 * and a measured Chrome trace.
 *
 * The progress line (rank 0): step, loss, lr, grad norm, tokens/s, MFU and
 * memory.  On a terminal it is rewritten in place every step ("\r" and
 * erase-to-end-of-line); otherwise one line is printed every log_every steps
 * (and on the first and the last step).  The JSONL log gets one object per
 * step, flushed at once so a crash leaves whole lines:
 *   {"step":12,"loss":3.4521,"lr":0.0006,"grad_norm":1.23,"tokens_per_s":12345.6,
 *    "mfu":0.123,"arena_bytes":1234567,"step_ms":41.5}
 * one per evaluation: {"step":100,"val_loss":3.21}, one for --sample's
 * tokens: {"step":100,"sample":[198,464,...]}, and after the last step what
 * every rank allocated (metrics_allocated).  Non-finite numbers are
 * written as null (JSON has no NaN).
 *
 * The trace: per op begin/end timestamps recorded by the runtime into a
 * buffer allocated at open (recording never allocates; events past the
 * capacity are counted and dropped), written at close as Chrome trace JSON
 * {"traceEvents": [{"name","ph":"X","ts","dur","pid","tid"}, ...]} in
 * microseconds; pid is the rank, tid the stream.  Perfetto and
 * chrome://tracing open it.
 */
#ifndef SHARDRT_METRICS_H
#define SHARDRT_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { METRICS_TTY_AUTO = -1, METRICS_TTY_OFF = 0, METRICS_TTY_ON = 1 };

typedef struct metrics_cfg {
    FILE *out;                  /* the progress line (NULL: stdout)             */
    int tty;                    /* METRICS_TTY_*: AUTO asks isatty(out)         */
    const char *jsonl;          /* the log path, or NULL                        */
    bool append;                /* append to it (a resumed run), else truncate  */
    int64_t steps;              /* the last step, for "step 12/1000"            */
    int64_t log_every;          /* progress lines when not a terminal           */
    double tokens_per_step;     /* global batch · seq_len                       */
    double flops_per_step;      /* model FLOPs of one step (the MFU numerator)  */
    double peak_flops;          /* peak FLOP/s of all ranks together            */
} metrics_cfg;

typedef struct metrics metrics;

/* Opens the log (truncating it unless cfg->append); NULL with a message on failure. */
metrics *metrics_open(const metrics_cfg *cfg, char *err, size_t errlen);
/* Reports one step: seconds = the step's wall time; arena_bytes = memory in use. */
void metrics_step(metrics *m, int64_t step, double loss, double lr, double grad_norm,
                  double seconds, int64_t arena_bytes);
/* fp16: the loss scale the next metrics_step was taken with, and whether it
 * was skipped (an overflow); both go into its line and its JSONL record. */
void metrics_note_scale(metrics *m, double scale, bool skipped);
/* Logs what each of the world's ranks allocated (the JSONL log only), four
 * numbers a rank in v: its pipeline stage, its device arena, its host arena
 * and all its allocations, in bytes:
 *   {"step":N,"allocated":{"stage":[..],"device_arena":[..],"host_arena":[..],"total":[..]}}
 * one element per rank. */
void metrics_allocated(metrics *m, int64_t step, const int64_t *v, int64_t world);
/* Reports an evaluation's loss. */
void metrics_eval(metrics *m, int64_t step, double val_loss);
/* Logs the n token ids of a sample (the JSONL log only). */
void metrics_sample(metrics *m, int64_t step, const int32_t *ids, int64_t n);
/* Ends the progress line and closes the log. */
void metrics_close(metrics *m);
/* Monotonic wall clock in microseconds. */
double metrics_now_us(void);

typedef struct metrics_trace metrics_trace;

/* A trace with room for `capacity` events; pid = the rank.  NULL with a message on failure. */
metrics_trace *metrics_trace_open(const char *path, int pid, int64_t capacity, char *err,
                                  size_t errlen);
/* Names a tid (a stream) in the viewer. */
void metrics_trace_thread(metrics_trace *t, int tid, const char *name);
/* Records one complete event; name must live until close (op names are static). */
void metrics_trace_event(metrics_trace *t, const char *name, int tid, double begin_us,
                         double end_us);
/* Records a counter sample (loss, memory) at ts_us. */
void metrics_trace_counter(metrics_trace *t, const char *name, double ts_us, double value);
/* Events dropped because the buffer was full. */
int64_t metrics_trace_dropped(const metrics_trace *t);
/* Writes the file and frees the trace; false with a message if writing failed. */
bool metrics_trace_close(metrics_trace *t, char *err, size_t errlen);
/* The path rank `rank` of `world` writes for --trace PATH: PATH itself for one
 * rank, else PATH with ".rankN" before its ".json" (or at the end). */
void metrics_trace_path(char *out, size_t len, const char *path, int rank, int world);

#endif
