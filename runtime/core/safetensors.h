/* safetensors.h — a strict reader of safetensors files (prefix st_).
 *
 * The format (https://github.com/huggingface/safetensors): 8 bytes, the
 * little-endian length N of a JSON header; N bytes of header (a JSON object,
 * possibly padded with spaces); the data.  Each header member but
 * "__metadata__" is a tensor: {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, the offsets relative to the start of the
 * data.  "__metadata__", when present, maps strings to strings.
 *
 * st_open refuses, with a message naming the file (and the tensor when one
 * is at fault), what the safetensors library refuses — a header length past
 * the file or over 100 MB, a header that is not UTF-8 JSON starting with
 * '{', a byte size that is not the shape's element count times the dtype's
 * size, tensors whose data do not follow one another from the start of the
 * data without gaps or overlaps, bytes after the last tensor's data — and,
 * stricter than it, what no writer produces: a path that is not a regular
 * file (a FIFO, a device, a socket: refused without blocking), a NUL byte in
 * the header or anything but whitespace after its object, a repeated member,
 * a tensor entry with a member other than the three, an unknown dtype, a
 * shape or offsets that are not non-negative integers, more than
 * ST_MAX_DIMS dimensions, a metadata value that is not a string.
 *
 * The file is mapped read-only; st_data points into the mapping and
 * st_read copies a byte range.  The reader checks structure only: what the
 * tensors mean (and any checksum a writer recorded in the metadata) is the
 * caller's business (runtime/core/ckpt.c for shardc's checkpoints, `shardc
 * export`).  Depends on libc and cJSON.
 */
#ifndef SHARDRT_SAFETENSORS_H
#define SHARDRT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum { ST_MAX_DIMS = 8 };

/* The dtypes of the format, as its header names them. */
#define ST_DTYPES(X)                                                                               \
    X(BOOL, 1) X(U8, 1) X(I8, 1) X(F8_E5M2, 1) X(F8_E4M3, 1) X(I16, 2) X(U16, 2) X(F16, 2)       \
    X(BF16, 2) X(I32, 4) X(U32, 4) X(F32, 4) X(F64, 8) X(I64, 8) X(U64, 8)
typedef enum st_dtype {
#define ST_ENUM(name, size) ST_##name,
    ST_DTYPES(ST_ENUM)
#undef ST_ENUM
    ST_NDTYPES
} st_dtype;

/* One tensor of the file. */
typedef struct st_tensor {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;        /* bytes [begin, end) of the data section */
} st_tensor;

typedef struct st_file st_file;

/* Opens and checks path (see the top of the file): 0, or -1 with a message
 * in err naming the file. */
int st_open(st_file **out, const char *path, char *err, size_t errlen);
/* The same over bytes in memory (borrowed, not copied: they must outlive the
 * st_file); name is the file name the messages use. */
int st_open_mem(st_file **out, const void *bytes, size_t len, const char *name, char *err, size_t errlen);
void st_close(st_file *f);

const char *st_path(const st_file *f);
/* The tensors in the order of their data (offsets ascending). */
int st_count(const st_file *f);
const st_tensor *st_tensor_at(const st_file *f, int i);
/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *st_meta(const st_file *f, const char *key);
/* The tensor's bytes in the mapping. */
const void *st_data(const st_file *f, const st_tensor *t);
/* Copies bytes [off, off + len) of the tensor's data to out: 0, or -1 (a
 * range outside the tensor) with a message. */
int st_read(const st_file *f, const st_tensor *t, uint64_t off, uint64_t len, void *out, char *err,
            size_t errlen);

/* A dtype's header name ("F32") and bytes per element. */
const char *st_dtype_name(st_dtype dt);
int st_dtype_size(st_dtype dt);

#endif
