/* export.c — `shardc export`: a checkpoint as Hugging Face weights, either a
 * directory that transformers' from_pretrained loads or one safetensors file.
 *
 *   shardc export CKPT_DIR -o OUT_DIR [--dtype fp32|bf16] [--max-shard-size 5GB]
 *   shardc export CKPT_DIR -o model.safetensors [--dtype fp32|bf16]
 *
 * CKPT_DIR is a --ckpt-dir (its newest checkpoint is taken) or one step-N in
 * it.  Every tensor is assembled from the rank files of whatever layout wrote
 * it (runtime/core/ckpt.c, linked into the compiler) and written whole, at its
 * logical shape (the vocabulary unpadded), in the form runtime/core/hf.c's
 * table gives it (the table the trainer's --init reads by): Hugging Face's
 * name, and GPT-2's four Conv1D weights transposed to [in, out].  With tied
 * embeddings there is no lm_head.weight (Hugging Face ties it to the
 * embedding).
 *
 * The directory holds config.json (the architecture, model_type and every
 * field the weights imply, from the checkpoint's resolved spec through the
 * key table `shardc import hf` reads by: compiler/import.c), a
 * generation_config.json, and the weights: model.safetensors, or above
 * --max-shard-size (transformers' size syntax and default, 5GB) the shards
 * model-0000K-of-0000N.safetensors and model.safetensors.index.json, split as
 * transformers splits (in order; a new shard when the next tensor would pass
 * the limit; a tensor larger than the limit alone).
 *
 * Nothing half-written is ever visible: a file is written under a temporary
 * name, fsynced and renamed; a directory is built as OUT_DIR.tmp-PID and
 * renamed to OUT_DIR, which must not exist or be empty.  The whole checkpoint
 * is verified first (ckpt_verify: every piece against its checksum, moments
 * included): a damaged checkpoint is refused, naming the file and the tensor,
 * and nothing is written.
 *
 *   shardc ckpt verify CKPT_DIR
 *
 * checks a checkpoint without training or writing anything: the index and
 * every rank file strictly, every piece of every state (moments included)
 * against its checksum, every state of every tensor whole.
 */
#include "shardc.h"

#include "../runtime/core/ckpt.h"
#include "../runtime/core/hf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char export_usage[] =
    "usage: shardc export CKPT_DIR -o OUT_DIR [--dtype fp32|bf16] [--max-shard-size SIZE]\n"
    "       shardc export CKPT_DIR -o FILE.safetensors [--dtype fp32|bf16]\n"
    "  writes the checkpoint as Hugging Face GPT-2 or Llama weights\n"
    "  CKPT_DIR          a --ckpt-dir (its newest checkpoint) or one step-N directory in it\n"
    "  -o OUT_DIR        a directory from_pretrained loads: config.json, generation_config.json,\n"
    "                    model.safetensors or shards with model.safetensors.index.json (it must\n"
    "                    not exist, or be empty)\n"
    "  -o FILE.safetensors  the weights alone, one file\n"
    "  --dtype           fp32 (default) or bf16 (rounded to nearest even)\n"
    "  --max-shard-size  the largest shard of a directory: bytes, or a number with KB, MB, GB\n"
    "                    (powers of 1000), KiB, MiB, GiB (of 1024), Kb, Mb, Gb (bits); default 5GB\n";

/* Where usage errors go: with the diagnostics (stderr unless a test captures them). */
static FILE *usage_out(void) { return diag_stream ? diag_stream : stderr; }

/* One tensor of the output: where it comes from and how it is written. */
typedef struct ExportTensor {
    const char *src;            /* our name, in the checkpoint           */
    const char *hf;             /* Hugging Face's name                   */
    int64_t rows, cols;         /* logical shape (cols 0: a vector)      */
    bool transpose;             /* Conv1D: written as [cols, rows]       */
    uint64_t begin, end;        /* byte range in its file's data section */
} ExportTensor;

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

/* The checkpoint's tensors in Hugging Face's form (hf.c's table); NULL (reported) on a tensor it lacks. */
static ExportTensor *export_tensors(ckpt_reader *r, int fam, int *n)
{
    *n = ckpt_ntensors(r);
    ExportTensor *t = arena_alloc(&g_arena, sizeof *t * (size_t)(*n + 1));
    for (int i = 0; i < *n; i++) {
        hf_form fm;
        t[i].src = ckpt_tensor(r, i, &t[i].rows, &t[i].cols);
        if (!hf_form_of(fam == FAM_LLAMA ? HF_LLAMA : HF_GPT, t[i].src, &fm)) {
            diag_plain("%s: tensor '%s' has no Hugging Face %s name", ckpt_path(r), t[i].src,
                       fam == FAM_LLAMA ? "Llama" : "GPT-2");
            return NULL;
        }
        t[i].hf = arena_strdup(&g_arena, fm.name);
        t[i].transpose = fm.transpose;
    }
    return t;
}

/* The bytes of tensor t in the output. */
static uint64_t export_bytes(const ExportTensor *t, bool bf16)
{
    return (uint64_t)t->rows * (uint64_t)(t->cols ? t->cols : 1) * (bf16 ? 2 : 4);
}

/* The safetensors header of tensors t[0..n): each with its dtype, shape and byte range. */
static char *export_header(ExportTensor *t, int n, bool bf16, const ckpt_reader *r)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");     /* what transformers expects */
    cJSON_AddStringToObject(meta, "shardc_model", ckpt_model(r));
    cJSON_AddStringToObject(meta, "shardc_step", arena_printf(&g_arena, "%lld", (long long)ckpt_step(r)));
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        t[i].begin = off;
        t[i].end = off += export_bytes(&t[i], bf16);
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

/* transformers' size syntax (convert_file_size_to_int): bytes, or an integer
 * with GiB, MiB, KiB (powers of 1024) or GB, MB, KB (of 1000), in any case;
 * a final lowercase b (Gb, Mb, Kb) counts bits.  -1 when it is none of these. */
static int64_t export_size(const char *s)
{
    static const struct { const char *unit; int64_t scale; } units[] = {
        {"GIB", 1LL << 30}, {"MIB", 1LL << 20}, {"KIB", 1LL << 10},
        {"GB", 1000000000LL}, {"MB", 1000000LL}, {"KB", 1000LL}, {"", 1}};
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v <= 0 || !(*s >= '0' && *s <= '9')) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].unit) != 0) continue;
        if (v > INT64_MAX / units[i].scale) return -1;
        int64_t b = v * units[i].scale;
        return *end && end[strlen(end) - 1] == 'b' && units[i].scale > 1 && strlen(end) == 2 ? b / 8 : b;
    }
    return -1;
}

/* The checkpoint's model as a resolved spec (the index keeps its canonical text). */
static bool export_spec(ckpt_reader *r, Spec *spec)
{
    const char *text = ckpt_spec_text(r);
    const char *name = arena_printf(&g_arena, "%s/index.json's spec", ckpt_path(r));
    int before = diag_errors;
    Item *items = text && *text ? spec_parse_text(name, text, strlen(text)) : NULL;
    if (!items || diag_errors != before || !sema_resolve(items, NULL, 0, spec) || diag_errors != before) {
        diag_plain("%s: the checkpoint's spec does not resolve, so config.json cannot be written", ckpt_path(r));
        return false;
    }
    return true;
}

/* Writes a JSON document to path, indented by two spaces as transformers
 * writes its own (cJSON indents with tabs; a tab inside a string is escaped,
 * so every raw tab is layout), and fsyncs it. */
static bool export_json(const char *path, const cJSON *doc)
{
    char *raw = cJSON_Print(doc);
    if (!raw) die("export: cannot format %s", path);
    char *text = malloc(2 * strlen(raw) + 1), *o = text;
    if (!text) die("export: out of memory");
    for (const char *p = raw; *p; p++) {
        if (*p != '\t') *o++ = *p;
        else if (p > raw && p[-1] == ':') *o++ = ' ';
        else *o++ = ' ', *o++ = ' ';
    }
    *o = 0;
    free(raw);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && export_write(fd, text, strlen(text)) && export_write(fd, "\n", 1) && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = false, e = errno;
    free(text);
    if (!ok) diag_plain("%s: cannot write: %s", path, strerror(e));
    return ok;
}

/* fsyncs a directory (its entries are then durable). */
static void export_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Removes the temporary directory of a failed export: the files it wrote. */
static void export_remove_tmp(const char *tmp)
{
    DIR *d = opendir(tmp);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlink(arena_printf(&g_arena, "%s/%s", tmp, e->d_name));
    closedir(d);
    rmdir(tmp);
}

/* Whether out may be created: absent, or an empty directory (reported otherwise). */
static bool export_dir_free(const char *out)
{
    struct stat st;
    if (stat(out, &st) != 0) {
        if (errno == ENOENT) return true;
        diag_plain("%s: %s", out, strerror(errno));
        return false;
    }
    DIR *d = S_ISDIR(st.st_mode) ? opendir(out) : NULL;
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));) entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d) closedir(d);
    if (d && entries == 0) return true;
    diag_plain("%s: %s", out, S_ISDIR(st.st_mode) ? "the directory exists and is not empty" : "exists and is not a directory");
    diag_hint("give a new directory (or -o NAME.safetensors for the weights alone)");
    return false;
}

static int export_by_hf_name(const void *a, const void *b)
{
    return strcmp((*(const ExportTensor *const *)a)->hf, (*(const ExportTensor *const *)b)->hf);
}

/* model.safetensors.index.json: the total size and, by name, the shard of every tensor. */
static cJSON *export_index(ExportTensor *t, int n, const int *shard_of, int nshards, bool bf16)
{
    const ExportTensor **by = arena_alloc(&g_arena, sizeof *by * (size_t)(n + 1));
    uint64_t total = 0;
    for (int i = 0; i < n; i++) by[i] = &t[i], total += export_bytes(&t[i], bf16);
    qsort(by, (size_t)n, sizeof *by, export_by_hf_name);
    cJSON *idx = cJSON_CreateObject();
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(idx, "metadata"), "total_size", (double)total);
    cJSON *map = cJSON_AddObjectToObject(idx, "weight_map");
    for (int i = 0; i < n; i++) {
        int k = shard_of[by[i] - t];
        cJSON_AddStringToObject(map, by[i]->hf, arena_printf(&g_arena, "model-%05d-of-%05d.safetensors", k + 1, nshards));
    }
    return idx;
}

/* The directory form into tmp: the shards (or model.safetensors), their index, the configs. */
static int export_dir_files(ckpt_reader *r, ExportTensor *t, int n, bool bf16, int64_t max_shard, const cJSON *cfg,
                            const char *tmp, const char *out)
{
    /* transformers' split: in order; a new shard when the next tensor would pass the limit */
    int *shard_of = arena_alloc(&g_arena, sizeof *shard_of * (size_t)(n + 1)), nshards = 0;
    uint64_t size = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = export_bytes(&t[i], bf16);
        if (nshards == 0 || (size > 0 && size + b > (uint64_t)max_shard)) nshards++, size = 0;
        shard_of[i] = nshards - 1;
        size += b;
    }
    int rc = EXIT_OK;
    for (int k = 0, i0 = 0; k < nshards && rc == EXIT_OK; k++) {
        int i1 = i0;
        while (i1 < n && shard_of[i1] == k) i1++;
        const char *name = nshards == 1 ? "model.safetensors"
                           : arena_printf(&g_arena, "model-%05d-of-%05d.safetensors", k + 1, nshards);
        rc = export_file(r, t + i0, i1 - i0, bf16, arena_printf(&g_arena, "%s/%s", tmp, name),
                         arena_printf(&g_arena, "%s/%s", out, name));
        i0 = i1;
    }
    cJSON *gen = cJSON_CreateObject();
    cJSON_AddTrueToObject(gen, "_from_model_config");
    cJSON *idx = nshards > 1 ? export_index(t, n, shard_of, nshards, bf16) : NULL;
    if (rc == EXIT_OK && idx && !export_json(arena_printf(&g_arena, "%s/model.safetensors.index.json", tmp), idx))
        rc = EXIT_USER;
    if (rc == EXIT_OK && !export_json(arena_printf(&g_arena, "%s/config.json", tmp), cfg)) rc = EXIT_USER;
    if (rc == EXIT_OK && !export_json(arena_printf(&g_arena, "%s/generation_config.json", tmp), gen)) rc = EXIT_USER;
    cJSON_Delete(idx);
    cJSON_Delete(gen);
    if (rc == EXIT_OK)
        printf("%s: %d tensor%s in %d file%s, config.json (%s)\n", out, n, n == 1 ? "" : "s", nshards,
               nshards == 1 ? " (model.safetensors)" : "s and model.safetensors.index.json",
               cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cfg, "architectures"), 0)));
    return rc;
}

/* A directory transformers loads, built in OUT.tmp-PID and renamed to out. */
static int export_dir(ckpt_reader *r, ExportTensor *t, int n, bool bf16, int64_t max_shard, const char *out)
{
    Spec spec;
    if (!export_spec(r, &spec)) return EXIT_USER;
    cJSON *cfg = import_hf_config(&spec, bf16 ? "bfloat16" : "float32");
    if (!cfg) return EXIT_USER;
    int rc = EXIT_USER;
    char *tmp = arena_printf(&g_arena, "%s.tmp-%ld", out, (long)getpid());
    if (!export_dir_free(out)) {
        /* reported */
    } else if (mkdir(tmp, 0755) != 0) {
        diag_plain("%s: cannot create: %s", tmp, strerror(errno));
    } else {
        rc = export_dir_files(r, t, n, bf16, max_shard, cfg, tmp, out);
        export_sync_dir(tmp);
        if (rc == EXIT_OK && rename(tmp, out) != 0) {
            diag_plain("%s: cannot rename %s to it: %s", out, tmp, strerror(errno));
            rc = EXIT_USER;
        }
        if (rc != EXIT_OK) export_remove_tmp(tmp);
        else {
            char *parent = arena_strdup(&g_arena, out), *slash = strrchr(parent, '/');
            export_sync_dir(slash ? (slash == parent ? "/" : (*slash = 0, parent)) : ".");
        }
    }
    cJSON_Delete(cfg);
    return rc;
}

/* One safetensors file, written to out.tmp-PID and renamed. */
static int export_single(ckpt_reader *r, ExportTensor *t, int n, bool bf16, const char *out)
{
    char *tmp = arena_printf(&g_arena, "%s.tmp-%ld", out, (long)getpid());
    int rc = export_file(r, t, n, bf16, tmp, out);
    if (rc == EXIT_OK && rename(tmp, out) != 0) {
        diag_plain("%s: cannot rename %s to it: %s", out, tmp, strerror(errno));
        rc = EXIT_USER;
    }
    if (rc != EXIT_OK) unlink(tmp);
    return rc;
}

/* shardc export CKPT_DIR -o OUT [--dtype fp32|bf16] [--max-shard-size SIZE]; argv holds the arguments after `export`. */
int export_main(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *dtype = "fp32", *shard = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(export_usage, stdout);
            return EXIT_OK;
        } else if ((strcmp(a, "-o") == 0 || strcmp(a, "--dtype") == 0 || strcmp(a, "--max-shard-size") == 0) &&
                   i + 1 < argc) {
            *(a[1] == 'o' ? &out : a[2] == 'd' ? &dtype : &shard) = argv[++i];
        } else if (a[0] != '-' && !dir) {
            dir = a;
        } else {
            fprintf(usage_out(), "shardc: export: unexpected argument '%s'\n\n%s", a, export_usage);
            return EXIT_USAGE;
        }
    }
    bool bf16 = strcmp(dtype, "bf16") == 0;
    size_t ol = out ? strlen(out) : 0;
    bool single = ol > 12 && strcmp(out + ol - 12, ".safetensors") == 0;
    int64_t max_shard = shard ? export_size(shard) : 5000000000LL;    /* transformers' "5GB" */
    const char *why = !dir ? "which checkpoint directory?" : !out ? "-o OUT_DIR (or -o FILE.safetensors) is required"
                      : !bf16 && strcmp(dtype, "fp32") != 0 ? "--dtype is fp32 or bf16"
                      : max_shard < 0 ? "--max-shard-size takes a size such as 5GB, 500MB, 2GiB or 1000000"
                      : shard && single ? "--max-shard-size applies to a directory, not to one .safetensors file" : NULL;
    if (why) {
        fprintf(usage_out(), "shardc: export: %s\n\n%s", why, export_usage);
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
    int fam = export_family(r), n = 0;
    ExportTensor *t = fam < 0 ? NULL : export_tensors(r, fam, &n);
    int rc = EXIT_USER;
    if (fam < 0) diag_plain("%s: cannot tell whether this is a GPT or a Llama checkpoint", ckpt_path(r));
    else if (t) rc = single ? export_single(r, t, n, bf16, out) : export_dir(r, t, n, bf16, max_shard, out);
    ckpt_close(r);
    return rc;
}
