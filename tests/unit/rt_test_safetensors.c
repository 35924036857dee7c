/* rt_test_safetensors.c — the strict safetensors reader (runtime/core/safetensors.c):
 *  - a well-formed file lists its tensors by offset with dtype, shape and
 *    offsets, finds them by name, reads their bytes and a byte range, and its
 *    metadata;
 *  - every malformation is refused with a message naming the file (and the
 *    tensor at fault): each case below was accepted or misread by a lax
 *    reader (a header past the file, trailing bytes after the JSON or after
 *    the data, gaps and overlaps, sizes unlike the shape's, repeated names,
 *    unknown members and dtypes, non-integer shapes, metadata values that
 *    are not strings, invalid UTF-8, a NUL in the header);
 *  - a FIFO, a directory and /dev/null are refused at open without blocking. */
#include "safetensors.h"
#include "check.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

/* A file image: the 8-byte length, the header text, then `data` bytes of
 * value 0x11 and `extra` bytes of 0x22 (the same buffer each call). */
static const unsigned char *image(const char *header, size_t data, size_t extra, size_t *len)
{
    static unsigned char buf[1 << 16];
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, 0x11, data);
    memset(buf + 8 + h + data, 0x22, extra);
    *len = 8 + h + data + extra;
    return buf;
}

/* Opens the image of header + data + extra from memory: 0 or -1; the message in err. */
static int try_mem(const char *header, size_t data, size_t extra, char *err, size_t errlen)
{
    size_t len;
    const unsigned char *b = image(header, data, extra, &len);
    st_file *f;
    int rc = st_open_mem(&f, b, len, "x.safetensors", err, errlen);
    st_close(f);
    return rc;
}

/* The refusal of header (with data + extra bytes) must mention `want`. */
static void refused(const char *header, size_t data, size_t extra, const char *want)
{
    char err[512] = "";
    CHECK_EQ(try_mem(header, data, extra, err, sizeof err), -1);
    CHECK_HAS(err, "x.safetensors: ");
    CHECK_HAS(err, want);
}

static const char good[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"e\":{\"dtype\":\"I64\",\"shape\":[0,4],\"data_offsets\":[28,28]}}   ";

static void test_good(void)
{
    size_t len;
    const unsigned char *b = image(good, 28, 0, &len);
    unsigned char *copy = malloc(len);
    memcpy(copy, b, len);
    copy[8 + strlen(good) + 24] = 0x7f;     /* the first byte of b */
    char err[512] = "";
    st_file *f = NULL;
    CHECK_EQ(st_open_mem(&f, copy, len, "good.safetensors", err, sizeof err), 0);
    if (!f) {
        fprintf(stderr, "%s\n", err);
        failures++;
        free(copy);
        return;
    }
    CHECK_EQ(st_count(f), 3);
    CHECK_STR(st_tensor_at(f, 0)->name, "a");
    CHECK_STR(st_tensor_at(f, 1)->name, "b");
    CHECK_STR(st_tensor_at(f, 2)->name, "e");
    const st_tensor *a = st_find(f, "a"), *bt = st_find(f, "b"), *e = st_find(f, "e");
    CHECK(a && bt && e && !st_find(f, "c") && !st_find(f, "__metadata__"));
    if (a && bt && e) {
        CHECK_EQ(a->dtype, ST_F32);
        CHECK_EQ(a->ndim, 2);
        CHECK_EQ(a->shape[0], 2);
        CHECK_EQ(a->shape[1], 3);
        CHECK_EQ(a->begin, 0);
        CHECK_EQ(a->end, 24);
        CHECK_EQ(bt->dtype, ST_BF16);
        CHECK_EQ(st_dtype_size(bt->dtype), 2);
        CHECK_STR(st_dtype_name(bt->dtype), "BF16");
        CHECK_EQ(e->end - e->begin, 0);
        unsigned char got[4];
        CHECK_EQ(st_read(f, bt, 0, 4, got, err, sizeof err), 0);
        CHECK_EQ(got[0], 0x7f);
        CHECK_EQ(got[1], 0x11);
        CHECK_EQ(((const unsigned char *)st_data(f, bt))[0], 0x7f);
        CHECK_EQ(st_read(f, bt, 2, 3, got, err, sizeof err), -1);
        CHECK_HAS(err, "good.safetensors: tensor 'b': bytes [2, 5) are outside its 4 bytes");
    }
    CHECK_STR(st_meta(f, "format"), "pt");
    CHECK_STR(st_meta(f, "k"), "v");
    CHECK(st_meta(f, "none") == NULL);
    st_close(f);
    free(copy);
}

static void test_refusals(void)
{
    const char *t = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char h[512];
    /* the framing */
    char err[256];
    st_file *f;
    CHECK_EQ(st_open_mem(&f, "\x10\0\0\0", 4, "x.safetensors", err, sizeof err), -1);
    CHECK_HAS(err, "shorter than the header length");
    CHECK_EQ(st_open_mem(&f, "\xff\xff\xff\xff\0\0\0\0{}", 10, "x.safetensors", err, sizeof err), -1);
    CHECK_HAS(err, "a header of 4294967295 bytes in a file of 10");
    refused("[]", 0, 0, "does not start with '{'");
    refused(" {}", 0, 0, "does not start with '{'");
    refused("{\"t\":\"\xc3\x28\"}", 0, 0, "is not UTF-8");
    refused("{\"t\":\"\xed\xa0\x80\"}", 0, 0, "is not UTF-8");        /* a surrogate */
    refused("{\"t\":\"\xe0\x80\xaf\"}", 0, 0, "is not UTF-8");        /* overlong */
    size_t len;
    const unsigned char *b = image("{}      ", 0, 0, &len);
    unsigned char nul[32];
    memcpy(nul, b, len);
    nul[10] = 0;
    CHECK_EQ(st_open_mem(&f, nul, len, "x.safetensors", err, sizeof err), -1);
    CHECK_HAS(err, "byte 2 of the header is NUL");
    refused("{\"t\":1", 0, 0, "not a JSON object");
    snprintf(h, sizeof h, "{%s} x", t);
    refused(h, 8, 0, "the header has bytes after its object");
    snprintf(h, sizeof h, "{%s}{}", t);
    refused(h, 8, 0, "the header has bytes after its object");
    /* the entries */
    snprintf(h, sizeof h, "{%s,%s}", t, t);
    refused(h, 8, 0, "tensor 't' is listed twice");
    refused("{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, "__metadata__ given twice");
    refused("{\"__metadata__\":{\"a\":1}}", 0, 0, "__metadata__ member 'a' is not a string");
    refused("{\"__metadata__\":[]}", 0, 0, "__metadata__ is not an object");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, 0, "tensor 't': unknown member 'x'");
    refused("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0,
            "tensor 't': member 'dtype' given twice");
    refused("{\"t\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, "tensor 't': unknown dtype F33");
    refused("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, "tensor 't': no dtype");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 10, 0, "tensor 't': shape entry 0 is not a size");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0, "tensor 't': shape entry 0 is not a size");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, 0, "tensor 't': the shape is not a list");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0,
            "the shape is not a list of at most 8 sizes");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, 0, "data_offsets is not [begin, end]");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, 0, "data_offsets is not [begin, end]");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, "tensor 't': 8 bytes for 3 elements of F32");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, 0,
            "tensor 't': shape entry 1 is not a size");
    /* the data: a gap, an overlap, past the end, trailing bytes */
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, 0,
            "tensor 't': its data starts at byte 4 of the data, not at 0 where the data start");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, 0,
            "tensor 'u': its data starts at byte 4 of the data, not at 8 where the previous tensor's end");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16, 0, "tensor 'u': its data starts at byte 12");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, 0, "past the file's 4 bytes of data");
    refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 4096,
            "4096 bytes follow the last tensor's data");
    refused("{}", 0, 1, "1 bytes follow the last tensor's data");
    CHECK_EQ(try_mem("{}", 0, 0, err, sizeof err), 0);
}

/* Writes an image to dir/name. */
static void write_file(const char *name, const char *header, size_t data, size_t extra)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t len;
    const unsigned char *b = image(header, data, extra, &len);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK_EQ(fwrite(b, 1, len, f), len);
    fclose(f);
}

static void test_files(void)
{
    char p[128], err[512] = "";
    st_file *f = NULL;
    write_file("ok.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, 0);
    snprintf(p, sizeof p, "%s/ok.safetensors", dir);
    CHECK_EQ(st_open(&f, p, err, sizeof err), 0);
    if (f) {
        CHECK_STR(st_path(f), p);
        CHECK_EQ(((const unsigned char *)st_data(f, st_find(f, "t")))[2], 0x11);
        st_close(f);
    }
    write_file("tail.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, 4096);
    snprintf(p, sizeof p, "%s/tail.safetensors", dir);
    CHECK_EQ(st_open(&f, p, err, sizeof err), -1);
    CHECK_HAS(err, "tail.safetensors: 4096 bytes follow the last tensor's data");
    snprintf(p, sizeof p, "%s/missing.safetensors", dir);
    CHECK_EQ(st_open(&f, p, err, sizeof err), -1);
    CHECK_HAS(err, "missing.safetensors: cannot open: No such file or directory");
    /* not regular files: refused at open, without blocking on the FIFO */
    snprintf(p, sizeof p, "%s/fifo", dir);
    CHECK_EQ(mkfifo(p, 0600), 0);
    CHECK_EQ(st_open(&f, p, err, sizeof err), -1);
    CHECK_HAS(err, "fifo: not a regular file (a FIFO)");
    CHECK_EQ(st_open(&f, dir, err, sizeof err), -1);
    CHECK_HAS(err, "not a regular file (a directory)");
    CHECK_EQ(st_open(&f, "/dev/null", err, sizeof err), -1);
    CHECK_HAS(err, "/dev/null: not a regular file (a device)");
    snprintf(p, sizeof p, "%s/empty.safetensors", dir);
    fclose(fopen(p, "wb"));
    CHECK_EQ(st_open(&f, p, err, sizeof err), -1);
    CHECK_HAS(err, "empty.safetensors: not a safetensors file: 0 bytes");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/rt_test_st.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_good();
    test_refusals();
    test_files();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) failures++;
    if (!failures) printf("rt_test_safetensors: ok\n");
    return failures != 0;
}
