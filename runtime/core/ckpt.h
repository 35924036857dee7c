/* ckpt.h — layout-independent, atomic checkpoints in safetensors.
 *
 * On disk (DIR is --ckpt-dir):
 *   DIR/latest                      "step-N\n": the newest complete checkpoint
 *   DIR/step-N/index.json           step, model, layout, spec text, state, and
 *                                   for every tensor its logical shape and which
 *                                   slices of it each rank file holds
 *   DIR/step-N/rank-RRRRR.safetensors   one file per rank: its pieces
 *
 * A piece is a slice of a FULL tensor, named by the tensor's full name: the
 * rectangle rows [r0, r1) x cols [c0, c1) of the logical [rows, cols] tensor
 * (a tp shard), and within that rectangle's row-major elements the flat range
 * [f0, f1) (a ZeRO shard of master weights or moments that covers part of a
 * tensor).  Rectangles may reach past the logical rows (the vocabulary padded
 * for tp): the reader ignores what lies outside the logical shape.  Pieces of
 * several ranks may overlap (replicas); any copy is read.  A vector (cols = 0)
 * uses c0 = 0, c1 = 1.
 *
 * Because pieces name full tensors and slices, a reader under another layout
 * assembles any slice it needs from whichever rank files hold it: train on
 * dp 4 ZeRO-3, resume on tp 2 pp 2.
 *
 * Saving is atomic and needs no communication inside this module; the caller
 * orders the three phases with barriers:
 *   rank 0:     ckpt_save_begin   creates DIR/step-N.tmp-TOKEN/ (TOKEN from
 *                                 ckpt_token() on rank 0, broadcast)
 *   every rank: ckpt_save_rank    writes and fsyncs its rank file there
 *   rank 0:     ckpt_save_commit  reads the rank files' headers, writes and
 *                                 fsyncs index.json and the directory, renames
 *                                 it to DIR/step-N/ (atomically replacing an
 *                                 existing one), then replaces DIR/latest
 *                                 through a temporary file, fsync and rename.
 * A crash at any point leaves DIR/latest naming a complete checkpoint (the
 * previous one until the final rename); leftovers of a crashed save are
 * removed by the next ckpt_save_begin, or by ckpt_save_abort on an error.
 * One trainer writes into a checkpoint directory at a time: ckpt_lock.
 *
 * Integrity.  Every piece's bytes carry a checksum (XXH3-64, in the rank
 * file's __metadata__.shardc beside the piece's geometry), and every rank
 * file says which rank, step, model and save (a random token, also in the
 * index) wrote it.  The reader parses the index and the rank files strictly
 * (runtime/core/safetensors.c for the files: exact sizes, contiguous data,
 * no trailing bytes), checks each rank file's identity against the index,
 * and compares a piece's checksum before its first use; ckpt_verify checks
 * every piece and that every state of every tensor is whole.  Every refusal
 * names the file, and the tensor where one is at fault.
 *
 * Kinds of state: "param" (fp32 master weights; the working copy when
 * training in fp32), "adam_m", "adam_v".  Scalars (the data position, the
 * seed, the loss-scale state, ...) are key/value numbers in ckpt_meta.state.
 *
 * Little-endian hosts only (safetensors is little-endian).  Depends on libc
 * and cJSON only: the compiler links it too (`shardc export`).
 */
#ifndef SHARDRT_CKPT_H
#define SHARDRT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_PARAM "param"
#define CKPT_ADAM_M "adam_m"
#define CKPT_ADAM_V "adam_v"

typedef enum ckpt_dtype { CKPT_F32, CKPT_BF16, CKPT_F16 } ckpt_dtype;

typedef enum ckpt_err {
    CKPT_OK = 0,
    CKPT_E_IO,          /* a system call failed (the message says which file) */
    CKPT_E_MISSING,     /* no checkpoint there                                */
    CKPT_E_CORRUPT,     /* an unreadable index or rank file                   */
    CKPT_E_MODEL,       /* the checkpoint holds another model                 */
    CKPT_E_COVER,       /* no rank file holds a requested element             */
    CKPT_E_ARGS,        /* a bad piece or request (a caller bug)              */
    CKPT_E_BUSY,        /* another process holds the directory's lock         */
} ckpt_err;

/* One slice of one tensor's state, as a rank holds it. */
typedef struct ckpt_piece {
    const char *kind;           /* CKPT_PARAM, CKPT_ADAM_M, CKPT_ADAM_V         */
    const char *tensor;         /* the full tensor's name                       */
    int64_t rows, cols;         /* its logical shape; cols = 0 for a vector     */
    int64_t r0, r1, c0, c1;     /* the rectangle (a vector: c0 = 0, c1 = 1)     */
    int64_t f0, f1;             /* the flat range in it; f1 <= f0: all of it    */
    ckpt_dtype dtype;
    const void *data;           /* the piece's elements, in order               */
} ckpt_piece;

typedef struct ckpt_kv { const char *key; double value; } ckpt_kv;

/* What the index records besides the tensors. */
typedef struct ckpt_meta {
    const char *model;          /* the spec's name                              */
    const char *family;         /* "gpt" or "llama" (export's naming)           */
    const char *spec_text;      /* the resolved spec                            */
    const ckpt_kv *layout;      /* tp, pp, dp, zero, world, ...                 */
    int nlayout;
    const ckpt_kv *state;       /* data position, seed, loss scale, ...         */
    int nstate;
} ckpt_meta;

/* A tensor the model has: for the identity check. */
typedef struct ckpt_tensor_desc { const char *name; int64_t rows, cols; } ckpt_tensor_desc;

/* Test seam: when set, called at each named point of a save ("rank-half",
 * "rank-written", "index-written", "renamed", "latest-written"); a test
 * _exits there to simulate a crash. */
extern void (*ckpt_crash_hook)(const char *point);

/* ---- saving ---------------------------------------------------------------- */

/* A token that names this save's temporary directory (rank 0; broadcast it). */
uint64_t ckpt_token(void);
/* Rank 0: creates DIR (if needed) and DIR/step-N.tmp-TOKEN/, removing what
 * crashed saves left behind. */
int ckpt_save_begin(const char *dir, int64_t step, uint64_t token, char *err, size_t errlen);
/* Every rank: writes rank-RRRRR.safetensors with its n pieces (and their
 * checksums, and its identity: rank, step, model, token) into the temporary
 * directory and fsyncs it. */
int ckpt_save_rank(const char *dir, int64_t step, uint64_t token, int rank, const char *model,
                   const ckpt_piece *pieces, int n, char *err, size_t errlen);
/* Rank 0, after every rank wrote: index, fsync, rename, DIR/latest. */
int ckpt_save_commit(const char *dir, int64_t step, uint64_t token, int nranks,
                     const ckpt_meta *meta, char *err, size_t errlen);
/* Rank 0, after a failure anywhere: removes the temporary directory. */
void ckpt_save_abort(const char *dir, int64_t step, uint64_t token);
/* One process writing everything as rank 0 of 1: begin, rank, commit. */
int ckpt_save(const char *dir, int64_t step, const ckpt_piece *pieces, int n,
              const ckpt_meta *meta, char *err, size_t errlen);

/* ---- reading --------------------------------------------------------------- */

typedef struct ckpt_reader ckpt_reader;

/* The newest complete checkpoint under dir into path: the step-N with an
 * index that was committed last (its index's saved_at_us).  DIR/latest
 * names it unless its own update failed, so latest is taken when no
 * checkpoint with a higher number exists; otherwise the indexes of latest's
 * and the higher ones are read, and the one saved last is taken (a higher
 * number saved before latest belongs to a run that was resumed from an
 * earlier step).  When the choice is not latest's, or a candidate's index is
 * unreadable, note says so (else it is "").  dir itself may be a step-N.
 * CKPT_E_MISSING when there is none (--resume auto then starts afresh). */
int ckpt_find(const char *dir, char *path, size_t pathlen, char *note, size_t notelen, char *err, size_t errlen);
/* Opens a checkpoint: a step-N directory, or a DIR whose newest one is taken
 * (ckpt_find; ckpt_note says what it said).  Checks the index and every
 * rank file as the top of this file says; maps the files. */
int ckpt_open(ckpt_reader **out, const char *path, char *err, size_t errlen);
const char *ckpt_note(const ckpt_reader *r);
void ckpt_close(ckpt_reader *r);
int64_t ckpt_step(const ckpt_reader *r);
const char *ckpt_path(const ckpt_reader *r);       /* the step-N directory     */
const char *ckpt_model(const ckpt_reader *r);
const char *ckpt_family(const ckpt_reader *r);
const char *ckpt_spec_text(const ckpt_reader *r);
int ckpt_nranks(const ckpt_reader *r);
/* A layout / state value recorded at save time; false if absent. */
bool ckpt_layout(const ckpt_reader *r, const char *key, double *v);
bool ckpt_state(const ckpt_reader *r, const char *key, double *v);
/* The tensors, in the order they were first saved. */
int ckpt_ntensors(const ckpt_reader *r);
const char *ckpt_tensor(const ckpt_reader *r, int i, int64_t *rows, int64_t *cols);
/* Whether some rank file holds state `kind` of tensor `name`. */
bool ckpt_has(const ckpt_reader *r, const char *kind, const char *name);
/* The model identity check: the same tensor names and shapes, no more, no
 * fewer.  CKPT_E_MODEL with a message naming the first difference. */
int ckpt_check_model(const ckpt_reader *r, const ckpt_tensor_desc *t, int n, char *err,
                     size_t errlen);
/* Reads elements [f0, f1) (f1 <= f0: all) of the rectangle [r0, r1) x [c0, c1)
 * of state `kind` of tensor `name` as fp32 into out, from whichever rank
 * files hold them; elements outside the logical shape read as 0.  A piece
 * is compared with its checksum before its first use (CKPT_E_CORRUPT). */
int ckpt_read(ckpt_reader *r, const char *kind, const char *name, int64_t r0, int64_t r1,
              int64_t c0, int64_t c1, int64_t f0, int64_t f1, float *out, char *err,
              size_t errlen);

/* What ckpt_verify checked (pieces and bytes: those hashed so far). */
typedef struct ckpt_verify_stats { int files, tensors; int64_t pieces, bytes; } ckpt_verify_stats;
/* The whole checkpoint: every piece against its checksum, and every state of
 * every tensor readable whole (a "param" state for each). */
int ckpt_verify(ckpt_reader *r, ckpt_verify_stats *stats, char *err, size_t errlen);

/* One writer per checkpoint directory: creates DIR if needed and takes an
 * exclusive flock(2) on DIR/.lock (noting "pid P on HOST" in it), held until
 * *fd is closed or the process ends.  CKPT_E_BUSY, naming the holder, when
 * another process holds it. */
int ckpt_lock(const char *dir, int *fd, char *err, size_t errlen);

/* fp32 -> bf16 / fp16 (round to nearest even; NaN stays NaN) and back. */
uint16_t ckpt_bf16_from_f32(float f);
float ckpt_f32_from_bf16(uint16_t h);
uint16_t ckpt_f16_from_f32(float f);
float ckpt_f32_from_f16(uint16_t h);

#endif
