/* plan_fixture.h — shared by the planner's unit tests (test_model.c,
 * test_part.c, test_mem.c): a CHECK macro and a Spec filled by hand with the
 * documented defaults, so the planner is tested without the front end. */
#ifndef PLAN_FIXTURE_H
#define PLAN_FIXTURE_H

#include "plan.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* global_batch = micro_batch · microbatches · dp, as sema derives it. */
static inline void fx_batch(Spec *s)
{
    s->train.grad_accum = s->parallel.microbatches;
    s->train.global_batch = s->train.micro_batch * s->parallel.microbatches * s->parallel.dp;
}

/* A tiny GPT (4 layers, hidden 64) on one H100 with the schema's defaults. */
static inline void fx_spec(Spec *s)
{
    memset(s, 0, sizeof *s);
    s->model.family = FAM_GPT;
    s->model.layers = 4, s->model.hidden = 64, s->model.heads = 4, s->model.kv_heads = 4;
    s->model.vocab = 256, s->model.seq_len = 32, s->model.ffn_hidden = 256;
    s->model.activation = ACT_GELU, s->model.bias = true, s->model.tie_embeddings = true;
    s->parallel.tp = s->parallel.pp = s->parallel.dp = 1;
    s->parallel.schedule = SCHED_1F1B, s->parallel.microbatches = 1, s->parallel.virtual_stages = 1;
    s->zero.stage = 0, s->zero.contiguous_gradients = true, s->zero.reduce_scatter = true;
    s->zero.reduce_bucket = 500000000, s->zero.allgather_bucket = 500000000;
    s->zero.prefetch_bucket = 50000000, s->zero.param_persistence_threshold = 100000;
    s->zero.max_live_parameters = 1000000000, s->zero.max_reuse_distance = 1000000000;
    s->zero.sub_group_size = 1000000000;
    s->offload.optimizer_ratio = 1.0, s->offload.optimizer_buffer_count = 4;
    s->offload.params_buffer_count = 5, s->offload.params_buffer_size = 100000000;
    s->precision.dtype = DT_BF16, s->precision.master_weights = DT_FP32, s->precision.grad_reduce = DT_BF16;
    s->checkpointing.activations = CKPT_NONE, s->checkpointing.every = 1;
    s->train.micro_batch = 1, s->train.optimizer = OPT_ADAMW;
    s->cluster.nodes = 1, s->cluster.gpus_per_node = 8, s->cluster.gpu = GPU_H100_SXM_80GB;
    s->cluster.gpu_memory = 80LL << 30, s->cluster.host_memory = 1LL << 40;
    s->cluster.nvme_capacity = 3840000000000LL, s->cluster.runtime_reserve = 1LL << 30;
    fx_batch(s);
}

/* GPT shape: layers, hidden, heads, vocab, seq (ffn 4h, biases, tied). */
static inline void fx_gpt(Spec *s, int64_t l, int64_t h, int64_t a, int64_t V, int64_t seq)
{
    s->model.family = FAM_GPT;
    s->model.layers = l, s->model.hidden = h, s->model.heads = a, s->model.kv_heads = a;
    s->model.vocab = V, s->model.seq_len = seq, s->model.ffn_hidden = 4 * h;
    s->model.activation = ACT_GELU, s->model.bias = true, s->model.tie_embeddings = true;
}

/* Llama shape: layers, hidden, heads, ffn (vocab 32000, seq 4096, untied, no biases). */
static inline void fx_llama(Spec *s, int64_t l, int64_t h, int64_t a, int64_t ffn)
{
    s->model.family = FAM_LLAMA;
    s->model.layers = l, s->model.hidden = h, s->model.heads = a, s->model.kv_heads = a;
    s->model.vocab = 32000, s->model.seq_len = 4096, s->model.ffn_hidden = ffn;
    s->model.activation = ACT_SWIGLU, s->model.bias = false, s->model.tie_embeddings = false;
}

/* Finishes a test program. */
static inline int fx_done(const char *name)
{
    if (failures) {
        fprintf(stderr, "%s: %d failure(s)\n", name, failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

#endif
