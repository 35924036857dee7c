/* data.h — the training data loader: the same global batch in every layout.
 *
 * Inputs: llm.c token shards (int32[256] header; [0] = 20240520, [1] = 1,
 * [2] = token count, then uint16 tokens; or [0] = 20240801, [1] = 7 with
 * uint32 tokens), a glob of them, or a raw text file whose bytes are the
 * tokens (vocabulary 256).
 *
 * The order.  The files matching the pattern are sorted by name.  Each file
 * is cut into windows of seq_len + 1 tokens starting every seq_len tokens
 * (window j of a file covers its tokens [j·T, j·T + T], so consecutive
 * windows share one token, as in llm.c); a window never crosses a file
 * boundary, and a file's last partial window is dropped.  The windows of all
 * files, in file order, are the sequences 0 .. N-1 of the loader's part.
 *
 * The batches.  Global sequence g (counted from 0 over the whole run) is
 * window g mod N: after N sequences the order wraps around to window 0 (one
 * epoch; no shuffling).  Step k's global batch is the G = global_batch
 * sequences k·G .. k·G + G - 1.  With dp ranks, micro-batch B and M = G / (dp·B)
 * microbatches, row b of microbatch mb of dp rank r is sequence
 *     k·G + r·(M·B) + mb·B + b,
 * so every rank takes one contiguous block of the global batch and the set of
 * sequences in a step does not depend on dp, tp, pp or M.  tokens are the
 * window's first T tokens, targets its last T.
 *
 * Validation.  A separate --val pattern is a loader of its own (part ALL).
 * Without one, `holdout` splits one set of windows: the train part is the
 * first N - Nv windows and the val part the last Nv = max(1, floor(N·holdout)).
 * Evaluation uses val batches 0, 1, .. (data_batch with step = i on the val
 * loader), the same batches at every evaluation.
 *
 * Errors (missing, empty, truncated, wrong magic or version, a token outside
 * the vocabulary, a file too short for one sequence) are returned as a
 * DATA_E_* code with a message naming the file; nothing is printed.  Tokens
 * are checked against the vocabulary when the loader opens (one pass over the
 * data, DATA_CHECK_OPEN) or, for data too large to scan up front, every step
 * over the step's whole global batch (DATA_CHECK_STEP) so that every rank
 * reports the same error at the same step.
 *
 * Files are memory-mapped read-only; the loader allocates at open and never
 * in data_batch.
 */
#ifndef SHARDRT_DATA_H
#define SHARDRT_DATA_H

#include <stddef.h>
#include <stdint.h>

enum { DATA_FMT_LLMC = 0, DATA_FMT_TEXT = 1 };          /* = srt_program.data_format */
enum { DATA_PART_ALL, DATA_PART_TRAIN, DATA_PART_VAL };
enum { DATA_CHECK_OPEN, DATA_CHECK_STEP };

#define DATA_LLMC_MAGIC16 20240520
#define DATA_LLMC_VERSION16 1
#define DATA_LLMC_MAGIC32 20240801
#define DATA_LLMC_VERSION32 7
#define DATA_LLMC_HEADER_INTS 256
/* The validation fraction held out of the training data when no --val is given. */
#define DATA_DEFAULT_HOLDOUT 0.05

typedef enum data_err {
    DATA_OK = 0,
    DATA_E_MISSING,     /* no file matches, or the file cannot be opened     */
    DATA_E_EMPTY,       /* a file of zero bytes                              */
    DATA_E_TRUNCATED,   /* shorter than its header says (or than the header) */
    DATA_E_MAGIC,       /* not an llm.c shard, or an unknown version         */
    DATA_E_TOKEN,       /* a token >= vocab                                  */
    DATA_E_SHORT,       /* fewer than seq_len + 1 tokens                     */
    DATA_E_ARGS,        /* bad options or batch coordinates (a caller bug)   */
    DATA_E_IO,          /* mmap / read failure                               */
} data_err;

typedef struct data_opts {
    const char *pattern;        /* a file or a glob ("data/train_*.bin")      */
    int format;                 /* DATA_FMT_*                                 */
    int64_t seq_len;            /* T                                          */
    int64_t vocab;              /* tokens must be < vocab                     */
    int64_t global_batch;       /* G: sequences per step                      */
    int part;                   /* DATA_PART_*                                */
    double holdout;             /* the val fraction for PART_TRAIN / PART_VAL  */
    int check;                  /* DATA_CHECK_*                               */
} data_opts;

typedef struct data_loader data_loader;

/* Opens, validates and maps the files; on failure returns a DATA_E_* code and
 * writes a message naming the file into err (errlen bytes). */
int data_open(data_loader **out, const data_opts *o, char *err, size_t errlen);
/* A loader over n tokens in memory, as one file called name (the trainer's
 * --sample: the window it extends).  The tokens are borrowed, not copied:
 * data_batch reads them as they are at the call. */
int data_open_tokens(data_loader **out, const int32_t *tokens, int64_t n, const char *name, const data_opts *o,
                     char *err, size_t errlen);
/* Rows 0..micro_batch-1 of microbatch mb of step `step` (from 0) for dp rank
 * dp_rank of dp: tokens and targets (micro_batch, seq_len).  Returns DATA_OK
 * or a DATA_E_* code; the message is then data_error(d). */
int data_batch(data_loader *d, int64_t step, int64_t dp_rank, int64_t dp, int64_t mb,
               int64_t micro_batch, int32_t *tokens, int32_t *targets);
/* Checks every token of step `step`'s global batch (DATA_CHECK_STEP); every
 * rank, including those that load no data, calls it to fail together. */
int data_check_step(data_loader *d, int64_t step);
/* The window (0 .. N-1) that global sequence g reads. */
int64_t data_window(const data_loader *d, int64_t g);
int64_t data_num_sequences(const data_loader *d);      /* N                      */
int64_t data_num_tokens(const data_loader *d);         /* in every file          */
int data_num_files(const data_loader *d);
const char *data_file_name(const data_loader *d, int i);
const char *data_error(const data_loader *d);          /* the last error message */
void data_close(data_loader *d);

#endif
