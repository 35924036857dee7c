/* export.c — `shardc export`: a checkpoint's full tensors as one Hugging Face
 * safetensors file.
 *
 *   shardc export CKPT_DIR -o model.safetensors [--dtype fp32|bf16]
 *
 * CKPT_DIR is a --ckpt-dir (its newest checkpoint is taken) or one step-N in
 * it.  Every tensor is assembled from the rank files of whatever layout wrote
 * it (runtime/core/ckpt.c, linked into the compiler) and written whole, at its
 * logical shape (the vocabulary unpadded), under the Hugging Face name:
 *
 *   GPT-2 (GPT2LMHeadModel): wte.weight -> transformer.wte.weight,
 *     h.N.attn.c_attn.weight -> transformer.h.N.attn.c_attn.weight, ln_f.* ->
 *     transformer.ln_f.*.  Hugging Face's GPT-2 uses Conv1D, whose weight is
 *     [in, out]; ours are [out, in] (nn.Linear), so the four Conv1D weights
 *     (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are transposed.  With
 *     tied embeddings there is no lm_head.weight (Hugging Face ties it to wte).
 *   Llama (LlamaForCausalLM): our names are Hugging Face's already
 *     (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
 *     model.norm.weight, lm_head.weight), nn.Linear [out, in], no transpose;
 *     our RoPE is Hugging Face's rotate-half, so q_proj and k_proj need no
 *     permutation.
 *
 * The file is written through a temporary name, fsynced and renamed: a reader
 * never sees half a model.  The whole checkpoint is verified first
 * (ckpt_verify: every piece against its checksum, moments included): a
 * damaged checkpoint is refused, naming the file and the tensor, and nothing
 * is written.
 *
 *   shardc ckpt verify CKPT_DIR
 *
 * checks a checkpoint without training or writing anything: the index and
 * every rank file strictly, every piece of every state (moments included)
 * against its checksum, every state of every tensor whole.
 */
#include "shardc.h"

#include "../runtime/core/ckpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char export_usage[] =
    "usage: shardc export CKPT_DIR -o model.safetensors [--dtype fp32|bf16]\n"
    "  writes the checkpoint's full tensors with Hugging Face GPT-2 or Llama names\n"
    "  CKPT_DIR   a --ckpt-dir (its newest checkpoint) or one step-N directory in it\n"
    "  -o FILE    the safetensors file to write (atomically)\n"
    "  --dtype    fp32 (default) or bf16 (rounded to nearest even)\n";

/* Where usage errors go: with the diagnostics (stderr unless a test captures them). */
static FILE *usage_out(void) { return diag_stream ? diag_stream : stderr; }

/* One tensor of the output: where it comes from and how it is written. */
typedef struct ExportTensor {
    const char *src;            /* our name, in the checkpoint           */
    const char *hf;             /* Hugging Face's name                   */
    int64_t rows, cols;         /* logical shape (cols 0: a vector)      */
    bool transpose;             /* Conv1D: written as [cols, rows]       */
    uint64_t begin, end;        /* byte range in the data section        */
} ExportTensor;

/* Whether our GPT tensor is one of Hugging Face GPT-2's Conv1D weights. */
static bool export_is_conv1d(const char *name)
{
    static const char *const suffixes[] = {".attn.c_attn.weight", ".attn.c_proj.weight",
                                           ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        size_t k = strlen(suffixes[i]);
        if (n > k && strcmp(name + n - k, suffixes[i]) == 0 && strncmp(name, "h.", 2) == 0) return true;
    }
    return false;
}

/* Hugging Face's name of one of our tensors. */
static const char *export_hf_name(bool gpt, const char *name, bool *transpose)
{
    *transpose = false;
    if (!gpt || strcmp(name, "lm_head.weight") == 0) return name;
    *transpose = export_is_conv1d(name);
    return arena_printf(&g_arena, "transformer.%s", name);
}

/* "gpt" or "llama": recorded in the index, else recognised by the embedding's name. */
static int export_family(ckpt_reader *r)
{
    const char *f = ckpt_family(r);
    if (strcmp(f, "gpt") == 0) return FAM_GPT;
    if (strcmp(f, "llama") == 0) return FAM_LLAMA;
    if (ckpt_has(r, CKPT_PARAM, "wte.weight")) return FAM_GPT;
    if (ckpt_has(r, CKPT_PARAM, "model.embed_tokens.weight")) return FAM_LLAMA;
    return -1;
}

/* The safetensors header: every tensor with its dtype, shape and byte range. */
static char *export_header(ExportTensor *t, int n, bool bf16, const ckpt_reader *r)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");     /* what transformers expects */
    cJSON_AddStringToObject(meta, "shardc_model", ckpt_model(r));
    cJSON_AddStringToObject(meta, "shardc_step", arena_printf(&g_arena, "%lld", (long long)ckpt_step(r)));
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = (uint64_t)t[i].rows * (uint64_t)(t[i].cols ? t[i].cols : 1);
        t[i].begin = off;
        t[i].end = off += numel * (bf16 ? 2 : 4);
        cJSON *e = cJSON_AddObjectToObject(h, t[i].hf);
        cJSON_AddStringToObject(e, "dtype", bf16 ? "BF16" : "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        int64_t d0 = t[i].transpose ? t[i].cols : t[i].rows, d1 = t[i].transpose ? t[i].rows : t[i].cols;
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)d0));
        if (t[i].cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)d1));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)t[i].begin));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)t[i].end));
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    return text;
}

/* write(2) until every byte is out. */
static bool export_write(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

/* Reads one full tensor and writes it (transposed, converted) to fd.  The
 * buffers are malloc'ed and freed per tensor: a 7B model must not stay in
 * the compiler's arena until exit. */
static int export_tensor(ckpt_reader *r, const ExportTensor *t, bool bf16, int fd, const char *out)
{
    int64_t numel = t->rows * (t->cols ? t->cols : 1);
    float *a = malloc((size_t)numel * sizeof(float));
    float *b = t->transpose ? malloc((size_t)numel * sizeof(float)) : a;
    char err[1024];
    int rc = EXIT_OK;
    if (!a || !b) {
        diag_plain("export: no memory for tensor '%s' (%lld elements)", t->src, (long long)numel);
        rc = EXIT_USER;
    } else if (ckpt_read(r, CKPT_PARAM, t->src, 0, t->rows, 0, t->cols ? t->cols : 1, 0, 0, a, err,
                         sizeof err) != CKPT_OK) {
        diag_plain("%s", err);
        rc = EXIT_USER;
    } else {
        if (t->transpose)           /* [rows, cols] -> [cols, rows] */
            for (int64_t i = 0; i < t->rows; i++)
                for (int64_t j = 0; j < t->cols; j++) b[j * t->rows + i] = a[i * t->cols + j];
        if (bf16) {
            uint16_t *h = (uint16_t *)(void *)a;   /* in place: a is no longer needed */
            for (int64_t i = 0; i < numel; i++) h[i] = ckpt_bf16_from_f32(b[i]);
        }
        if (!export_write(fd, bf16 ? (void *)a : (void *)b, (size_t)numel * (bf16 ? 2 : 4))) {
            diag_plain("%s: cannot write: %s", out, strerror(errno));
            rc = EXIT_USER;
        }
    }
    if (b != a) free(b);
    free(a);
    return rc;
}

/* Writes the whole file to tmp: length, header (padded to 8 bytes), data. */
static int export_file(ckpt_reader *r, ExportTensor *t, int n, bool bf16, const char *tmp, const char *out)
{
    char *hdr = export_header(t, n, bf16, r);
    if (!hdr) die("export: cannot format the safetensors header");
    size_t len = strlen(hdr), padded = (len + 7) & ~(size_t)7;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(hdr);
        diag_plain("%s: cannot create: %s", out, strerror(errno));
        return EXIT_USER;
    }
    int rc = EXIT_OK;
    if (!export_write(fd, le, 8) || !export_write(fd, hdr, len) || !export_write(fd, "        ", padded - len)) {
        diag_plain("%s: cannot write: %s", out, strerror(errno));
        rc = EXIT_USER;
    }
    free(hdr);
    for (int i = 0; i < n && rc == EXIT_OK; i++) rc = export_tensor(r, &t[i], bf16, fd, out);
    if (rc == EXIT_OK && fsync(fd) != 0) {
        diag_plain("%s: cannot write: %s", out, strerror(errno));
        rc = EXIT_USER;
    }
    if (close(fd) != 0 && rc == EXIT_OK) {
        diag_plain("%s: cannot write: %s", out, strerror(errno));
        rc = EXIT_USER;
    }
    return rc;
}

/* Opens the checkpoint dir names (reported when it cannot be); says which
 * one was taken when it was not the one `latest` names. */
static ckpt_reader *export_open(const char *dir)
{
    char err[2048];
    ckpt_reader *r;
    if (ckpt_open(&r, dir, err, sizeof err) != CKPT_OK) {
        diag_plain("%s", err);
        diag_hint("give the --ckpt-dir of a training run, or one step-N directory in it");
        return NULL;
    }
    if (*ckpt_note(r)) fprintf(diag_stream ? diag_stream : stderr, "shardc: note: %s\n", ckpt_note(r));
    return r;
}

static const char ckpt_usage[] =
    "usage: shardc ckpt verify CKPT_DIR\n"
    "  checks a checkpoint without training: the index and the rank files strictly, every piece\n"
    "  against its checksum, every tensor's every state whole\n"
    "  CKPT_DIR   a --ckpt-dir (its newest checkpoint) or one step-N directory in it\n";

/* shardc ckpt verify CKPT_DIR; argv holds the arguments after `ckpt`. */
int export_ckpt_main(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        fputs(ckpt_usage, stdout);
        return EXIT_OK;
    }
    if (argc != 2 || strcmp(argv[0], "verify") != 0 || argv[1][0] == '-') {
        fprintf(usage_out(), "shardc: ckpt: %s\n\n%s", argc < 1 || strcmp(argv[0], "verify") != 0
                ? "the only subcommand is 'verify'" : "verify takes one checkpoint directory", ckpt_usage);
        return EXIT_USAGE;
    }
    ckpt_reader *r = export_open(argv[1]);
    if (!r) return EXIT_USER;
    char err[2048];
    ckpt_verify_stats st;
    int rc = ckpt_verify(r, &st, err, sizeof err);
    if (rc != CKPT_OK) diag_plain("%s", err);
    else
        printf("%s: ok: step %lld of '%s', %d rank files, %d tensors, %lld pieces (%lld bytes) match their "
               "checksums, every state whole\n", ckpt_path(r), (long long)ckpt_step(r), ckpt_model(r), st.files,
               st.tensors, (long long)st.pieces, (long long)st.bytes);
    ckpt_close(r);
    return rc == CKPT_OK ? EXIT_OK : EXIT_USER;
}

/* shardc export CKPT_DIR -o FILE [--dtype fp32|bf16]; argv holds the arguments after `export`. */
int export_main(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *dtype = "fp32";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(export_usage, stdout);
            return EXIT_OK;
        } else if ((strcmp(a, "-o") == 0 || strcmp(a, "--dtype") == 0) && i + 1 < argc) {
            *(a[1] == 'o' ? &out : &dtype) = argv[++i];
        } else if (a[0] != '-' && !dir) {
            dir = a;
        } else {
            fprintf(usage_out(), "shardc: export: unexpected argument '%s'\n\n%s", a, export_usage);
            return EXIT_USAGE;
        }
    }
    bool bf16 = strcmp(dtype, "bf16") == 0;
    if (!dir || !out || (!bf16 && strcmp(dtype, "fp32") != 0)) {
        fprintf(usage_out(), "shardc: export: %s\n\n%s",
                !dir ? "which checkpoint directory?" : !out ? "-o FILE is required" : "--dtype is fp32 or bf16",
                export_usage);
        return EXIT_USAGE;
    }
    ckpt_reader *r = export_open(dir);
    if (!r) return EXIT_USER;
    char err[2048];
    if (ckpt_verify(r, NULL, err, sizeof err) != CKPT_OK) {   /* all of it: a damaged checkpoint is not exported */
        diag_plain("%s", err);
        ckpt_close(r);
        return EXIT_USER;
    }
    int fam = export_family(r);
    if (fam < 0) {
        diag_plain("%s: cannot tell whether this is a GPT or a Llama checkpoint", ckpt_path(r));
        ckpt_close(r);
        return EXIT_USER;
    }
    int n = ckpt_ntensors(r);
    ExportTensor *t = arena_alloc(&g_arena, sizeof *t * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        t[i].src = ckpt_tensor(r, i, &t[i].rows, &t[i].cols);
        t[i].hf = export_hf_name(fam == FAM_GPT, t[i].src, &t[i].transpose);
    }
    char *tmp = arena_printf(&g_arena, "%s.tmp-%ld", out, (long)getpid());
    int rc = export_file(r, t, n, bf16, tmp, out);
    if (rc == EXIT_OK && rename(tmp, out) != 0) {
        diag_plain("%s: cannot rename %s to it: %s", out, tmp, strerror(errno));
        rc = EXIT_USER;
    }
    if (rc != EXIT_OK) unlink(tmp);
    ckpt_close(r);
    return rc;
}
