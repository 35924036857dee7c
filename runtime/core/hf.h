/* hf.h — Hugging Face weights (prefix hf_): how shardc's GPT and Llama
 * tensors are named and laid out in a Hugging Face checkpoint (the one table
 * `shardc export` writes by and the trainer's --init reads by), and a reader
 * of such a checkpoint that hands out any slice of any tensor as fp32.
 *
 * The forms.  Llama (LlamaForCausalLM): our names are Hugging Face's
 * (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
 * lm_head.weight), nn.Linear [out, in], as ours.  GPT-2 (GPT2LMHeadModel):
 * ours with the prefix "transformer." (lm_head.weight without it); the four
 * Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored
 * [in, out], the transpose of ours.  A tied head has no lm_head.weight.
 *
 * The reader.  hf_open takes a model.safetensors file, or a directory holding
 * model.safetensors or model.safetensors.index.json (transformers' sharded
 * form: {"metadata": {...}, "weight_map": {tensor: file}}) and its shards.
 * Every file is opened by the strict safetensors reader (safetensors.h) and
 * memory-mapped: a reader touches only the pages of the slices it reads, so a
 * rank never holds a full tensor it does not own.  hf_bind checks the files
 * against the model (every tensor there, nothing else, the right shapes, F32,
 * BF16 or F16); GPT-2 names are taken with or without "transformer." (a
 * GPT2Model's save has none), and the buffers transformers itself ignores
 * (GPT-2's attn.bias and attn.masked_bias causal masks, Llama's
 * rotary_emb.inv_freq) are skipped.  Every refusal names the file and the
 * tensor; a wrong shape also names the spec key the dimension comes from.
 *
 * Depends on libc, cJSON, safetensors.c and ckpt.c (its fp16/bf16
 * conversions and ckpt_tensor_desc); linked into the compiler too.
 */
#ifndef SHARDRT_HF_H
#define SHARDRT_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

enum { HF_GPT = 0, HF_LLAMA = 1 };     /* = srt_program.family, enum Family */
enum { HF_NAME_MAX = 256 };

/* What one dimension of a tensor is, in the spec's words. */
typedef enum hf_dim { HF_DIM_ONE, HF_DIM_HIDDEN, HF_DIM_VOCAB, HF_DIM_SEQ, HF_DIM_FFN, HF_DIM_QKV,
                      HF_DIM_KV } hf_dim;

/* One of our tensors as a Hugging Face checkpoint holds it. */
typedef struct hf_form {
    char name[HF_NAME_MAX];     /* Hugging Face's name                         */
    bool transpose;             /* stored [cols, rows] (GPT-2's Conv1D)        */
    hf_dim dim[2];              /* what our rows and cols are                  */
} hf_form;

/* The form of our tensor `ours` of family fam; false when the family has no
 * such tensor. */
bool hf_form_of(int fam, const char *ours, hf_form *out);
/* The spec key a dimension comes from ("model.ffn_hidden"). */
const char *hf_dim_key(hf_dim d);

typedef struct hf_reader hf_reader;

/* Opens a file or a directory (see the top): 0, or -1 with a message naming
 * the file. */
int hf_open(hf_reader **out, const char *path, char *err, size_t errlen);
void hf_close(hf_reader *r);
const char *hf_path(const hf_reader *r);       /* what was opened           */
int hf_nfiles(const hf_reader *r);
/* The dtypes of the tensors bound ("F32", "BF16", "F32+BF16"). */
const char *hf_dtypes(const hf_reader *r);
/* Checks that the files hold exactly the model's n tensors (our names and
 * logical shapes) of family fam, and binds each to its Hugging Face tensor. */
int hf_bind(hf_reader *r, int fam, const ckpt_tensor_desc *t, int n, char *err, size_t errlen);
/* Reads elements [f0, f1) (f1 <= f0: all) of the rectangle [r0, r1) x [c0,
 * c1) of our logical tensor `ours` (bound) as fp32 into out, as ckpt_read
 * does: a vector is c0 = 0, c1 = 1; elements past the logical shape (the
 * padded vocabulary) read as 0. */
int hf_read(hf_reader *r, const char *ours, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t f0,
            int64_t f1, float *out, char *err, size_t errlen);

#endif
