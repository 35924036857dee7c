/* hf.c — Hugging Face weights: the naming table and the slice reader (see hf.h). */
#include "hf.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_INDEX "model.safetensors.index.json"
#define HF_SINGLE "model.safetensors"
#define HF_MAX_INDEX (64u << 20)        /* a 1T model's index is a few MB */

/* ---- the table ------------------------------------------------------------ */

/* One kind of tensor: its name (the part after the layer prefix for a layer's
 * tensors), whether Hugging Face stores it transposed, its dimensions. */
typedef struct hf_kind { const char *name; bool conv1d; hf_dim d0, d1; } hf_kind;

#define V HF_DIM_VOCAB
#define H HF_DIM_HIDDEN
#define F HF_DIM_FFN
#define O HF_DIM_ONE
static const hf_kind hf_gpt_top[] = {
    {"wte.weight", false, V, H}, {"wpe.weight", false, HF_DIM_SEQ, H}, {"ln_f.weight", false, H, O},
    {"ln_f.bias", false, H, O}, {"lm_head.weight", false, V, H},
};
static const hf_kind hf_gpt_layer[] = {
    {"ln_1.weight", false, H, O}, {"ln_1.bias", false, H, O}, {"ln_2.weight", false, H, O},
    {"ln_2.bias", false, H, O}, {"attn.c_attn.weight", true, HF_DIM_QKV, H}, {"attn.c_attn.bias", false, HF_DIM_QKV, O},
    {"attn.c_proj.weight", true, H, H}, {"attn.c_proj.bias", false, H, O}, {"mlp.c_fc.weight", true, F, H},
    {"mlp.c_fc.bias", false, F, O}, {"mlp.c_proj.weight", true, H, F}, {"mlp.c_proj.bias", false, H, O},
    /* a GPT with a gated MLP (activation = swiglu) has no Hugging Face class; named as Llama's */
    {"mlp.gate_proj.weight", false, F, H}, {"mlp.gate_proj.bias", false, F, O},
    {"mlp.up_proj.weight", false, F, H}, {"mlp.up_proj.bias", false, F, O},
};
static const hf_kind hf_llama_top[] = {
    {"model.embed_tokens.weight", false, V, H}, {"model.norm.weight", false, H, O}, {"lm_head.weight", false, V, H},
};
static const hf_kind hf_llama_layer[] = {
    {"input_layernorm.weight", false, H, O}, {"post_attention_layernorm.weight", false, H, O},
    {"self_attn.q_proj.weight", false, H, H}, {"self_attn.q_proj.bias", false, H, O},
    {"self_attn.k_proj.weight", false, HF_DIM_KV, H}, {"self_attn.k_proj.bias", false, HF_DIM_KV, O},
    {"self_attn.v_proj.weight", false, HF_DIM_KV, H}, {"self_attn.v_proj.bias", false, HF_DIM_KV, O},
    {"self_attn.o_proj.weight", false, H, H}, {"self_attn.o_proj.bias", false, H, O},
    {"mlp.gate_proj.weight", false, F, H}, {"mlp.gate_proj.bias", false, F, O},
    {"mlp.up_proj.weight", false, F, H}, {"mlp.up_proj.bias", false, F, O},
    {"mlp.down_proj.weight", false, H, F}, {"mlp.down_proj.bias", false, H, O},
};
#undef V
#undef H
#undef F
#undef O

/* The layer prefix of a family's layer tensors ("h.3." / "model.layers.3."). */
static const char *hf_layer_prefix(int fam)
{
    return fam == HF_LLAMA ? "model.layers." : "h.";
}

/* If name is a layer tensor of family fam ("h.3.ln_1.weight"): its layer, and
 * *rest the part after the prefix; else -1. */
static long hf_layer_of(int fam, const char *name, const char **rest)
{
    const char *pre = hf_layer_prefix(fam);
    size_t n = strlen(pre);
    if (strncmp(name, pre, n) != 0 || name[n] < '0' || name[n] > '9') return -1;
    char *end;
    long l = strtol(name + n, &end, 10);
    if (*end != '.') return -1;
    *rest = end + 1;
    return l;
}

bool hf_form_of(int fam, const char *ours, hf_form *out)
{
    const char *rest = NULL;
    bool layer = hf_layer_of(fam, ours, &rest) >= 0;
    const hf_kind *tab = fam == HF_LLAMA ? (layer ? hf_llama_layer : hf_llama_top) : (layer ? hf_gpt_layer : hf_gpt_top);
    size_t n = fam == HF_LLAMA ? (layer ? sizeof hf_llama_layer : sizeof hf_llama_top) / sizeof *tab
                               : (layer ? sizeof hf_gpt_layer : sizeof hf_gpt_top) / sizeof *tab;
    const char *key = layer ? rest : ours;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tab[i].name, key) != 0) continue;
        bool prefix = fam == HF_GPT && strcmp(ours, "lm_head.weight") != 0;
        snprintf(out->name, sizeof out->name, "%s%s", prefix ? "transformer." : "", ours);
        out->transpose = tab[i].conv1d;
        out->dim[0] = tab[i].d0, out->dim[1] = tab[i].d1;
        return true;
    }
    return false;
}

const char *hf_dim_key(hf_dim d)
{
    switch (d) {
    case HF_DIM_HIDDEN: return "model.hidden";
    case HF_DIM_VOCAB: return "model.vocab";
    case HF_DIM_SEQ: return "model.seq_len";
    case HF_DIM_FFN: return "model.ffn_hidden";
    case HF_DIM_QKV: return "model.hidden and model.kv_heads (hidden + 2 kv_heads x hidden / heads)";
    case HF_DIM_KV: return "model.kv_heads (kv_heads x hidden / heads)";
    default: return "";
    }
}

/* Whether a tensor of the file is a buffer transformers ignores on loading:
 * GPT-2's causal masks (h.N.attn.bias, h.N.attn.masked_bias), Llama's
 * rotary_emb.inv_freq. */
static bool hf_ignored(int fam, const char *name)
{
    if (fam == HF_GPT && strncmp(name, "transformer.", 12) == 0) name += 12;
    const char *rest;
    if (hf_layer_of(fam, name, &rest) < 0) return false;
    if (fam == HF_GPT) return strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0;
    return strcmp(rest, "self_attn.rotary_emb.inv_freq") == 0;
}

/* ---- the reader ----------------------------------------------------------- */

/* One tensor of the files. */
typedef struct hf_entry {
    const char *name;
    const st_file *f;
    const st_tensor *t;
    bool used;                  /* bound to one of ours */
} hf_entry;

/* One of our tensors, bound. */
typedef struct hf_bound {
    char *ours;
    const hf_entry *e;
    bool transpose;
    int64_t rows, cols;         /* our logical shape (cols 0: a vector) */
} hf_bound;

struct hf_reader {
    char *path;                 /* what was opened                       */
    char *src;                  /* the file messages about the set name   */
    st_file **files;
    int nf;
    hf_entry *e;                /* every tensor of the files, by name    */
    int ne;
    hf_bound *b;                /* ours, by name                         */
    int nb;
    char dtypes[32];
};

/* Formats a message into err; returns -1. */
static int hf_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int hf_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "dir/name" (malloc'ed). */
static char *hf_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return s;
}

/* Whether path is a regular file. */
static bool hf_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Opens one safetensors file into r->files. */
static int hf_add_file(hf_reader *r, const char *path, char *err, size_t errlen)
{
    st_file **fs = realloc(r->files, sizeof *fs * (size_t)(r->nf + 1));
    if (!fs) return hf_fail(err, errlen, "%s: out of memory", path);
    r->files = fs;
    if (st_open(&r->files[r->nf], path, err, errlen)) return -1;
    r->nf++;
    return 0;
}

static int hf_entry_cmp(const void *a, const void *b)
{
    return strcmp(((const hf_entry *)a)->name, ((const hf_entry *)b)->name);
}

static int hf_bound_cmp(const void *a, const void *b)
{
    return strcmp(((const hf_bound *)a)->ours, ((const hf_bound *)b)->ours);
}

/* Collects every tensor of every file, sorted by name; a name in two files is refused. */
static int hf_collect(hf_reader *r, char *err, size_t errlen)
{
    int n = 0;
    for (int i = 0; i < r->nf; i++) n += st_count(r->files[i]);
    r->e = calloc((size_t)n + 1, sizeof *r->e);
    if (!r->e) return hf_fail(err, errlen, "%s: out of memory", r->src);
    for (int i = 0; i < r->nf; i++)
        for (int j = 0; j < st_count(r->files[i]); j++) {
            const st_tensor *t = st_tensor_at(r->files[i], j);
            r->e[r->ne++] = (hf_entry){t->name, r->files[i], t, false};
        }
    qsort(r->e, (size_t)r->ne, sizeof *r->e, hf_entry_cmp);
    for (int i = 1; i < r->ne; i++)
        if (strcmp(r->e[i - 1].name, r->e[i].name) == 0)
            return hf_fail(err, errlen, "%s: tensor '%s' is in both %s and %s", r->src, r->e[i].name,
                           st_path(r->e[i - 1].f), st_path(r->e[i].f));
    return 0;
}

/* The entry called name, or NULL. */
static hf_entry *hf_entry_find(const hf_reader *r, const char *name)
{
    hf_entry key = {.name = name};
    return bsearch(&key, r->e, (size_t)r->ne, sizeof *r->e, hf_entry_cmp);
}

/* Reads a small file whole (NUL-terminated, malloc'ed). */
static char *hf_slurp(const char *path, size_t limit, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        hf_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *why = fstat(fd, &st) != 0 ? strerror(errno) : !S_ISREG(st.st_mode) ? "not a regular file"
                      : (size_t)st.st_size > limit ? "too large for an index" : NULL;
    char *buf = why ? NULL : malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (!why && (!buf || got != (size_t)st.st_size)) why = "cannot read it whole";
    if (why) {
        free(buf);
        hf_fail(err, errlen, "%s: %s", path, why);
        return NULL;
    }
    buf[got] = 0;
    return buf;
}

/* Opens the shards an index names and checks that the index and the files agree. */
static int hf_open_index(hf_reader *r, const char *index, char *err, size_t errlen)
{
    char *text = hf_slurp(index, HF_MAX_INDEX, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = 0;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root)) rc = hf_fail(err, errlen, "%s: not a JSON object", index);
    else if (!cJSON_IsObject(map)) rc = hf_fail(err, errlen, "%s: no \"weight_map\" object", index);
    char *dir = strdup(index);
    if (!dir && !rc) rc = hf_fail(err, errlen, "%s: out of memory", index);
    if (dir) *(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir) = 0;
    /* the shards, each once, in the order the map first names them */
    const char **names = NULL;
    int nn = 0;
    for (const cJSON *m = rc ? NULL : map->child; m && !rc; m = m->next) {
        const char *file = cJSON_GetStringValue(m);
        if (!file || !*file || strchr(file, '/') || strcmp(file, ".") == 0 || strcmp(file, "..") == 0) {
            rc = hf_fail(err, errlen, "%s: weight_map: tensor '%s' names no file of this directory", index, m->string);
            break;
        }
        int k = 0;
        while (k < nn && strcmp(names[k], file) != 0) k++;
        if (k < nn) continue;
        const char **nn2 = realloc(names, sizeof *names * (size_t)(nn + 1));
        if (!nn2) {
            rc = hf_fail(err, errlen, "%s: out of memory", index);
            break;
        }
        names = nn2;
        names[nn++] = file;
        char *p = hf_join(dir, file);
        rc = p ? hf_add_file(r, p, err, errlen) : hf_fail(err, errlen, "%s: out of memory", index);
        free(p);
    }
    if (!rc && nn == 0) rc = hf_fail(err, errlen, "%s: the weight_map is empty", index);
    /* every listed tensor is in its file, and every file's tensor is listed there */
    for (const cJSON *m = rc ? NULL : map->child; m && !rc; m = m->next) {
        int k = 0;
        while (strcmp(names[k], m->valuestring) != 0) k++;
        if (!st_find(r->files[k], m->string))
            rc = hf_fail(err, errlen, "%s: tensor '%s' is listed in %s, which does not hold it", index, m->string,
                         m->valuestring);
    }
    for (int k = 0; k < nn && !rc; k++)
        for (int j = 0; j < st_count(r->files[k]) && !rc; j++) {
            const char *t = st_tensor_at(r->files[k], j)->name;
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(map, t);
            if (!m || strcmp(cJSON_GetStringValue(m), names[k]) != 0)
                rc = hf_fail(err, errlen, "%s: tensor '%s' is not listed for it in %s", st_path(r->files[k]), t,
                             index);
        }
    free(names);
    free(dir);
    cJSON_Delete(root);
    return rc;
}

int hf_open(hf_reader **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    hf_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return hf_fail(err, errlen, "%s: out of memory", path);
    }
    struct stat st;
    int rc = 0;
    if (stat(path, &st) != 0) {
        rc = hf_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        char *single = hf_join(path, HF_SINGLE), *index = hf_join(path, HF_INDEX);
        if (!single || !index) rc = hf_fail(err, errlen, "%s: out of memory", path);
        else if (hf_is_file(single)) r->src = single, single = NULL;      /* transformers' order */
        else if (hf_is_file(index)) r->src = index, index = NULL;
        else rc = hf_fail(err, errlen, "%s: neither %s nor %s is in this directory (shardc reads safetensors weights)",
                          path, HF_SINGLE, HF_INDEX);
        free(single);
        free(index);
    } else {
        r->src = strdup(path);
        if (!r->src) rc = hf_fail(err, errlen, "%s: out of memory", path);
    }
    if (!rc) {
        size_t n = strlen(r->src);
        bool is_index = n > 11 && strcmp(r->src + n - 11, ".index.json") == 0;
        rc = is_index ? hf_open_index(r, r->src, err, errlen) : hf_add_file(r, r->src, err, errlen);
    }
    if (!rc) rc = hf_collect(r, err, errlen);
    if (rc) {
        hf_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void hf_close(hf_reader *r)
{
    if (!r) return;
    for (int i = 0; i < r->nf; i++) st_close(r->files[i]);
    for (int i = 0; i < r->nb; i++) free(r->b[i].ours);
    free(r->files);
    free(r->e);
    free(r->b);
    free(r->src);
    free(r->path);
    free(r);
}

const char *hf_path(const hf_reader *r) { return r->path; }
int hf_nfiles(const hf_reader *r) { return r->nf; }
const char *hf_dtypes(const hf_reader *r) { return r->dtypes; }

/* "[768, 2304]" */
static const char *hf_shape(char *buf, size_t n, int nd, const int64_t *d)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && at < n; i++) at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

/* Checks the shape and dtype of the file's tensor e against ours. */
static int hf_check_tensor(const hf_entry *e, const hf_form *fm, const ckpt_tensor_desc *d, char *err, size_t errlen)
{
    const st_tensor *t = e->t;
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return hf_fail(err, errlen, "%s: tensor '%s' is %s; shardc reads F32, BF16 and F16 weights", st_path(e->f),
                       e->name, st_dtype_name(t->dtype));
    int nd = d->cols ? 2 : 1;
    int64_t want[2] = {fm->transpose ? d->cols : d->rows, fm->transpose ? d->rows : d->cols};
    hf_dim dims[2] = {fm->transpose ? fm->dim[1] : fm->dim[0], fm->transpose ? fm->dim[0] : fm->dim[1]};
    int bad = t->ndim != nd ? -1 : t->shape[0] != want[0] ? 0 : nd == 2 && t->shape[1] != want[1] ? 1 : -2;
    if (bad == -2) return 0;
    char a[96], b[96];
    hf_shape(a, sizeof a, t->ndim, t->shape);
    hf_shape(b, sizeof b, nd, want);
    if (bad < 0)
        return hf_fail(err, errlen, "%s: tensor '%s' is %s there but %s in this model", st_path(e->f), e->name, a, b);
    return hf_fail(err, errlen, "%s: tensor '%s' is %s there but %s in this model%s: its dimension %d is %s, %lld in "
                   "the spec", st_path(e->f), e->name, a, b, fm->transpose ? " (GPT-2's Conv1D: [in, out])" : "", bad,
                   hf_dim_key(dims[bad]), (long long)want[bad]);
}

/* Why a tensor of the files is not ours, as a hint: a layer past the model's,
 * a bias the model lacks, an untied head. */
static const char *hf_extra_hint(int fam, const char *name, long layers, char *buf, size_t n)
{
    const char *s = fam == HF_GPT && strncmp(name, "transformer.", 12) == 0 ? name + 12 : name, *rest;
    long l = hf_layer_of(fam, s, &rest);
    size_t k = strlen(name);
    if (l >= layers) snprintf(buf, n, " (the file has layer %ld; this model has %ld: model.layers)", l, layers);
    else if (strcmp(name, "lm_head.weight") == 0)
        snprintf(buf, n, " (this model ties its head to the embedding: model.tie_embeddings = on)");
    else if (k > 5 && strcmp(name + k - 5, ".bias") == 0)
        snprintf(buf, n, " (this model has no such bias: model.bias)");
    else buf[0] = 0;
    return buf;
}

int hf_bind(hf_reader *r, int fam, const ckpt_tensor_desc *t, int n, char *err, size_t errlen)
{
    const char *other = fam == HF_GPT ? "model.embed_tokens.weight" : "transformer.wte.weight";
    if (hf_entry_find(r, other) || (fam == HF_LLAMA && hf_entry_find(r, "wte.weight")))
        return hf_fail(err, errlen, "%s: these are %s weights, but this model is a %s (model %s in the spec)", r->src,
                       fam == HF_GPT ? "Llama" : "GPT-2", fam == HF_GPT ? "GPT" : "Llama",
                       fam == HF_GPT ? "gpt" : "llama");
    r->b = calloc((size_t)n + 1, sizeof *r->b);
    if (!r->b) return hf_fail(err, errlen, "%s: out of memory", r->src);
    long layers = 0;
    bool f32 = false, bf16 = false, f16 = false;
    for (int i = 0; i < n; i++) {
        hf_form fm;
        const char *rest;
        long l = hf_layer_of(fam, t[i].name, &rest);
        if (l + 1 > layers) layers = l + 1;
        if (!hf_form_of(fam, t[i].name, &fm))
            return hf_fail(err, errlen, "%s: this model's tensor '%s' has no Hugging Face form", r->src, t[i].name);
        hf_entry *e = hf_entry_find(r, fm.name);
        if (!e && fam == HF_GPT && strncmp(fm.name, "transformer.", 12) == 0) e = hf_entry_find(r, fm.name + 12);
        if (!e) {
            bool head = strcmp(t[i].name, "lm_head.weight") == 0;
            return hf_fail(err, errlen, "%s: tensor '%s' is missing (this model's %s)%s", r->src, fm.name, t[i].name,
                           head ? "; this model has an untied head (model.tie_embeddings = off)" : "");
        }
        if (hf_check_tensor(e, &fm, &t[i], err, errlen)) return -1;
        if (e->used) continue;  /* a pipeline's second copy of a tied embedding: bound once */
        e->used = true;
        f32 |= e->t->dtype == ST_F32, bf16 |= e->t->dtype == ST_BF16, f16 |= e->t->dtype == ST_F16;
        hf_bound *b = &r->b[r->nb++];
        b->ours = strdup(t[i].name);
        if (!b->ours) return hf_fail(err, errlen, "%s: out of memory", r->src);
        b->e = e, b->transpose = fm.transpose, b->rows = t[i].rows, b->cols = t[i].cols;
    }
    for (int i = 0; i < r->ne; i++) {
        char hint[160];
        if (!r->e[i].used && !hf_ignored(fam, r->e[i].name))
            return hf_fail(err, errlen, "%s: tensor '%s' is not one of this model's%s", st_path(r->e[i].f),
                           r->e[i].name, hf_extra_hint(fam, r->e[i].name, layers, hint, sizeof hint));
    }
    qsort(r->b, (size_t)r->nb, sizeof *r->b, hf_bound_cmp);
    snprintf(r->dtypes, sizeof r->dtypes, "%s%s%s%s%s", f32 ? "F32" : "", f32 && (bf16 || f16) ? "+" : "",
             bf16 ? "BF16" : "", bf16 && f16 ? "+" : "", f16 ? "F16" : "");
    return 0;
}

/* Element i of tensor data at p as fp32. */
static float hf_elem(const unsigned char *p, st_dtype dt, int64_t i)
{
    if (dt == ST_F32) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == ST_BF16 ? ckpt_f32_from_bf16(h) : ckpt_f32_from_f16(h);
}

int hf_read(hf_reader *r, const char *ours, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t f0,
            int64_t f1, float *out, char *err, size_t errlen)
{
    hf_bound key = {.ours = (char *)ours};
    const hf_bound *b = bsearch(&key, r->b, (size_t)r->nb, sizeof *r->b, hf_bound_cmp);
    if (!b) return hf_fail(err, errlen, "%s: tensor '%s' was not bound (a shardc bug)", r->src, ours);
    if (r0 < 0 || r1 <= r0 || c0 < 0 || c1 <= c0 || (!b->cols && (c0 != 0 || c1 != 1)))
        return hf_fail(err, errlen, "%s: bad slice of '%s' (a shardc bug)", r->src, ours);
    int64_t rows = b->rows, cols = b->cols ? b->cols : 1;
    int64_t w = c1 - c0, area = (r1 - r0) * w;
    if (f1 <= f0) f0 = 0, f1 = area;
    if (f0 < 0 || f1 > area) return hf_fail(err, errlen, "%s: bad flat range of '%s' (a shardc bug)", r->src, ours);
    const unsigned char *p = st_data(b->e->f, b->e->t);
    st_dtype dt = b->e->t->dtype;
    for (int64_t e = f0; e < f1;) {
        int64_t row = r0 + e / w, col = c0 + e % w, end = col + (f1 - e);
        if (end > c1) end = c1;
        float *o = out + (e - f0);
        for (int64_t c = col; c < end; c++) {
            bool in = row < rows && c < cols;   /* else the padded vocabulary */
            o[c - col] = in ? hf_elem(p, dt, b->transpose ? c * rows + row : row * cols + c) : 0.0f;
        }
        e += end - col;
    }
    return 0;
}
