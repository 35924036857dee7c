/* model.c — the model inventory: every parameter tensor of the GPT and Llama
 * families with its logical shape, layer, role, tp split and weight-decay
 * flag; exact parameter counts; FLOPs per layer and per step; and the
 * activation graph of one layer (what each kernel step produces, what backward
 * keeps), from which part.c sizes activations.
 *
 * Counts are on the logical vocabulary.  The vocabulary is padded to a
 * multiple of 128·tp for memory only (rows_mem), as Megatron pads it.
 * FLOPs follow Narayanan et al. 2021 / Korthikanti et al. 2022: 2 FLOPs per
 * multiply-add of every linear, 4·s²·h per layer for the attention scores and
 * the weighted sum, backward = 2 × forward; norms, biases, activations and the
 * softmax are not counted (as in the published formulas).
 */
#include "plan.h"

#include <string.h>

/* Bytes of one element of a dtype. */
int model_dtype_bytes(int dtype)
{
    return dtype == DT_FP32 ? 4 : 2;
}

static const char *const role_names[R_NROLES] = {
    [R_TOK_EMBED] = "tok_embed", [R_POS_EMBED] = "pos_embed",
    [R_NORM1_W] = "norm1.weight", [R_NORM1_B] = "norm1.bias",
    [R_QKV_W] = "qkv.weight", [R_QKV_B] = "qkv.bias",
    [R_Q_W] = "q.weight", [R_K_W] = "k.weight", [R_V_W] = "v.weight",
    [R_Q_B] = "q.bias", [R_K_B] = "k.bias", [R_V_B] = "v.bias",
    [R_ATTN_OUT_W] = "attn_out.weight", [R_ATTN_OUT_B] = "attn_out.bias",
    [R_NORM2_W] = "norm2.weight", [R_NORM2_B] = "norm2.bias",
    [R_FC1_W] = "fc1.weight", [R_FC1_B] = "fc1.bias",
    [R_GATE_W] = "gate.weight", [R_UP_W] = "up.weight",
    [R_GATE_B] = "gate.bias", [R_UP_B] = "up.bias",
    [R_FC2_W] = "fc2.weight", [R_FC2_B] = "fc2.bias",
    [R_NORMF_W] = "final_norm.weight", [R_NORMF_B] = "final_norm.bias",
    [R_HEAD_W] = "head.weight",
};

/* The role's short name ("qkv.weight"). */
const char *model_role_name(int role)
{
    return role >= 0 && role < R_NROLES ? role_names[role] : "?";
}

/* The kv heads one tp rank holds (plan.h). */
int64_t model_kv_rank(const Model *m)
{
    return m->kv < m->tp ? 1 : m->kv / m->tp;
}

/* Appends one tensor; cols = 0 makes a vector. */
static void add_tensor(Model *m, int cap, const char *name, int layer, int role,
                       int64_t rows, int64_t cols, int split)
{
    if (m->nt >= cap) die("model: tensor table overflow");
    Tensor *t = &m->t[m->nt++];
    t->name = name;
    t->layer = layer;
    t->role = role;
    t->rows = rows;
    t->cols = cols;
    bool vocab = role == R_TOK_EMBED || role == R_HEAD_W;
    t->rows_mem = vocab ? m->Vpad : rows;
    t->numel = rows * (cols ? cols : 1);
    t->split = split;
    t->decay = cols != 0;       /* matrices and embeddings decay; biases and norms do not */
    t->module = m->nt - 1;
}

/* The tensor just added belongs to the module of the one before it (a bias
 * to its linear's or norm's weight). */
static void join_module(Model *m)
{
    m->t[m->nt - 1].module = m->t[m->nt - 2].module;
}

/* Appends a tensor of layer L under the family's usual name
 * ("h.3.attn.c_attn.weight"): the layer prefix, L, the local name gpt or
 * llama followed by suffix (".weight", ".bias"). */
static void add_layer_tensor(Model *m, int cap, int L, const char *gpt, const char *llama, const char *suffix, int role,
                             int64_t rows, int64_t cols, int split)
{
    const char *local = arena_printf(&g_arena, "%s%s", m->family == FAM_LLAMA ? llama : gpt, suffix);
    add_tensor(m, cap, arena_printf(&g_arena, "%s%d.%s", m->layer_prefix, L, local), L, role, rows, cols, split);
    m->t[m->nt - 1].local = local;
}

/* The norm of a layer: weight, and bias for LayerNorm with biases. */
static void add_norm(Model *m, int cap, int L, int rw, int rb, const char *gpt, const char *llama)
{
    add_layer_tensor(m, cap, L, gpt, llama, ".weight", rw, m->h, 0, SPLIT_NONE);
    if (m->layernorm && m->bias) {
        add_layer_tensor(m, cap, L, gpt, llama, ".bias", rb, m->h, 0, SPLIT_NONE);
        join_module(m);
    }
}

/* A linear layer's weight [out, in] and optional bias; column-parallel
 * linears split rows (and their bias), row-parallel split columns. */
static void add_linear(Model *m, int cap, int L, int rw, int rb, int64_t out, int64_t in,
                       bool column, const char *gpt, const char *llama)
{
    add_layer_tensor(m, cap, L, gpt, llama, ".weight", rw, out, in, column ? SPLIT_ROWS : SPLIT_COLS);
    if (m->bias) {
        add_layer_tensor(m, cap, L, gpt, llama, ".bias", rb, out, 0, column ? SPLIT_ROWS : SPLIT_NONE);
        join_module(m);
    }
}

/* The tensors of transformer layer L, in forward order. */
static void add_layer(Model *m, int cap, int L)
{
    int64_t h = m->h, kvd = m->kv * m->hd;
    add_norm(m, cap, L, R_NORM1_W, R_NORM1_B, "ln_1", "input_layernorm");
    if (m->family == FAM_GPT) {
        int first = m->nt;
        add_linear(m, cap, L, R_QKV_W, R_QKV_B, h + 2 * kvd, h, true, "attn.c_attn", "");
        /* a rank's heads' q, k and v rows, not one contiguous range of [q; k; v] */
        for (int i = first; i < m->nt; i++) m->t[i].split = SPLIT_QKV;
    } else {
        add_linear(m, cap, L, R_Q_W, R_Q_B, h, h, true, "", "self_attn.q_proj");
        int first = m->nt;
        add_linear(m, cap, L, R_K_W, R_K_B, kvd, h, true, "", "self_attn.k_proj");
        add_linear(m, cap, L, R_V_W, R_V_B, kvd, h, true, "", "self_attn.v_proj");
        /* one kv head for several tp ranks: replicated, its gradients summed over
         * the ranks sharing it (each rank's share is that of its query heads) —
         * kv_heads = 1 over all of tp like a norm's, else over SRT_TP_KV */
        if (m->kv < m->tp)
            for (int i = first; i < m->nt; i++) m->t[i].split = m->kv == 1 ? SPLIT_NONE : SPLIT_KV;
    }
    add_linear(m, cap, L, R_ATTN_OUT_W, R_ATTN_OUT_B, h, h, false, "attn.c_proj", "self_attn.o_proj");
    add_norm(m, cap, L, R_NORM2_W, R_NORM2_B, "ln_2", "post_attention_layernorm");
    if (m->gated) {
        add_linear(m, cap, L, R_GATE_W, R_GATE_B, m->ffn, h, true, "mlp.gate_proj", "mlp.gate_proj");
        add_linear(m, cap, L, R_UP_W, R_UP_B, m->ffn, h, true, "mlp.up_proj", "mlp.up_proj");
    } else {
        add_linear(m, cap, L, R_FC1_W, R_FC1_B, m->ffn, h, true, "mlp.c_fc", "mlp.up_proj");
    }
    add_linear(m, cap, L, R_FC2_W, R_FC2_B, h, m->ffn, false, "mlp.c_proj", "mlp.down_proj");
}

/* Embeddings before the first layer; final norm and (untied) head after the last. */
static void add_pre_post(Model *m, int cap, bool pre)
{
    bool gpt = m->family == FAM_GPT;
    if (pre) {
        add_tensor(m, cap, gpt ? "wte.weight" : "model.embed_tokens.weight", LAYER_PRE,
                   R_TOK_EMBED, m->V, m->h, SPLIT_ROWS);
        if (m->learned_pos)
            add_tensor(m, cap, gpt ? "wpe.weight" : "model.embed_positions.weight", LAYER_PRE,
                       R_POS_EMBED, m->s, m->h, SPLIT_NONE);
        return;
    }
    int L = (int)m->l;
    add_tensor(m, cap, gpt ? "ln_f.weight" : "model.norm.weight", L, R_NORMF_W, m->h, 0, SPLIT_NONE);
    if (m->layernorm && m->bias) {
        add_tensor(m, cap, gpt ? "ln_f.bias" : "model.norm.bias", L, R_NORMF_B, m->h, 0, SPLIT_NONE);
        join_module(m);
    }
    if (!m->tied)
        add_tensor(m, cap, "lm_head.weight", L, R_HEAD_W, m->V, m->h, SPLIT_ROWS);
}

/* Shape parameters of the model from the spec. */
static void model_shape(const Spec *s, Model *m)
{
    memset(m, 0, sizeof *m);
    m->family = s->model.family;
    m->layer_prefix = m->family == FAM_LLAMA ? "model.layers." : "h.";
    m->l = s->model.layers;
    m->h = s->model.hidden;
    m->a = s->model.heads;
    m->kv = s->model.kv_heads > 0 ? s->model.kv_heads : s->model.heads;
    m->hd = m->h / m->a;
    m->V = s->model.vocab;
    m->s = s->model.seq_len;
    m->ffn = s->model.ffn_hidden > 0 ? s->model.ffn_hidden : 4 * m->h;
    m->tp = s->parallel.tp > 0 ? s->parallel.tp : 1;
    int64_t q = 128 * m->tp;
    m->Vpad = (m->V + q - 1) / q * q;
    m->gated = s->model.activation == ACT_SWIGLU;
    m->dgelu = !m->gated && s->model.activation != ACT_EXTERN;
    m->layernorm = m->family == FAM_GPT;
    m->learned_pos = m->family == FAM_GPT;
    m->bias = s->model.bias;
    m->tied = s->model.tie_embeddings;
}

/* Sums the counts of the inventory. */
static void model_count(Model *m)
{
    for (int i = 0; i < m->nt; i++) {
        const Tensor *t = &m->t[i];
        m->params += t->numel;
        m->params_mem += t->rows_mem * (t->cols ? t->cols : 1);
        if (t->layer == LAYER_PRE) m->params_pre += t->numel;
        else if (t->layer == m->l) m->params_post += t->numel;
        else if (t->layer == 0) m->params_layer += t->numel;
        if (t->layer == 0 && t->cols) m->linear_layer += t->numel;
    }
}

/* FLOPs per sequence and per step (REFERENCE.md: Narayanan / Korthikanti). */
static void model_flops(const Spec *s, Model *m)
{
    double sq = (double)m->s, h = (double)m->h;
    /* 2 FLOPs per weight per token; the scores QK^T and the sum over V: 2·2·s²·h */
    double core = 4.0 * sq * sq * h;
    m->fl_layer_fwd = 2.0 * sq * (double)m->linear_layer + core;
    m->fl_layer_bwd = 2.0 * m->fl_layer_fwd;
    m->fl_recompute_full = m->fl_layer_fwd;
    m->fl_recompute_sel = core;     /* the attention core's forward, replayed */
    m->fl_mlp_down = 2.0 * sq * h * (double)m->ffn;  /* ffn -> h (Llama's down_proj, GPT's c_proj) */
    m->fl_head_fwd = 2.0 * sq * h * (double)m->V;
    m->fl_head_bwd = 2.0 * m->fl_head_fwd;
    double B = (double)s->train.global_batch, l = (double)m->l;
    m->flops_model_step = 3.0 * B * (l * m->fl_layer_fwd + m->fl_head_fwd);
    m->flops_hw_full = m->flops_model_step + B * l * m->fl_recompute_full;
    m->flops_hw_selective = m->flops_model_step + B * l * m->fl_recompute_sel;
}

double model_recompute_flops(const Model *m, int pol, int64_t layers, int64_t every)
{
    if (pol == CKPT_SELECTIVE) return (double)layers * m->fl_recompute_sel;
    if (pol != CKPT_FULL || layers <= 0) return 0;
    int64_t groups = every > 0 ? (layers + every - 1) / every : layers;
    return (double)layers * m->fl_recompute_full - (double)groups * m->fl_mlp_down;
}

/* Builds the inventory, the counts and the FLOPs of the spec's model. */
void model_build(const Spec *s, Model *m)
{
    model_shape(s, m);
    int per_layer = 20, cap = (int)m->l * per_layer + 8;
    m->t = arena_alloc(&g_arena, sizeof(Tensor) * (size_t)cap);
    m->layer_first = arena_alloc(&g_arena, sizeof(int) * (size_t)(m->l + 3));
    m->layer_first[0] = 0;
    add_pre_post(m, cap, true);
    for (int L = 0; L < m->l; L++) {
        m->layer_first[L + 1] = m->nt;
        add_layer(m, cap, L);
    }
    m->layer_first[m->l + 1] = m->nt;
    add_pre_post(m, cap, false);
    m->layer_first[m->l + 2] = m->nt;
    model_count(m);
    model_flops(s, m);
}

/* ---- the activation graph of one layer ---------------------------------- */

/* Adds a tensor to the graph; returns its id. */
static int g_tensor(LayerGraph *g, int id, const char *name, int64_t width, bool fp32, int shard,
                    int kind, bool grad)
{
    if (g->nt >= ACT_MAX_TENSORS) die("model: layer graph tensor overflow");
    g->t[g->nt] = (ActTensor){name, id, width, fp32, shard, kind, grad, AR_NONE};
    return g->nt++;
}

/* Adds a step reading in[] (-1 ends the list) and writing out[]. */
static void g_step(LayerGraph *g, const char *name, int i0, int i1, int o0, int o1)
{
    if (g->nst >= ACT_MAX_STEPS) die("model: layer graph step overflow");
    ActStep *st = &g->st[g->nst++];
    st->name = name;
    st->nin = st->nout = 0;
    if (i0 >= 0) st->in[st->nin++] = i0;
    if (i1 >= 0) st->in[st->nin++] = i1;
    if (o0 >= 0) st->out[st->nout++] = o0;
    if (o1 >= 0) st->out[st->nout++] = o1;
}

/* A norm step: statistics (fp32, kept) and the normalised output (kept, the
 * next linear's input); with sp, the output is gathered to all tokens.  id:
 * the statistics' ActPiece (the output's and the gathered one's follow). */
static int g_norm(LayerGraph *g, const Model *m, bool sp, int in, int id, const char *name, int *gathered)
{
    int64_t nstats = m->layernorm ? 2 : 1;          /* mean + rstd, or rstd */
    int stats = g_tensor(g, id, arena_printf(&g_arena, "%s.stats", name), nstats, true, AS_SEQ, AK_SAVED, false);
    int out = g_tensor(g, id + 1, arena_printf(&g_arena, "%s.out", name), m->h, false, AS_SEQ, AK_SAVED, true);
    g->t[stats].role = g->t[out].role = AR_NORM;
    g_step(g, name, in, -1, stats, out);
    *gathered = out;
    if (sp) {   /* Megatron keeps the shard and gathers it again in backward */
        *gathered = g_tensor(g, id + 2, arena_printf(&g_arena, "%s.gathered", name), m->h, false, AS_FULL,
                             AK_REGATHER, true);
        g_step(g, arena_printf(&g_arena, "allgather(%s)", name), out, -1, *gathered, -1);
    }
    return out;
}

/* A row-parallel linear's output: partial sums on all tokens, reduced (all-
 * reduce in place, or reduce-scatter to the sequence shard under sp).  id:
 * the partial sums' ActPiece (the scattered shard's follows). */
static int g_rowpar(LayerGraph *g, const Model *m, bool sp, int in, int id, const char *name)
{
    int part = g_tensor(g, id, arena_printf(&g_arena, "%s.partial", name), m->h, false, AS_FULL, AK_TEMP, true);
    g_step(g, name, in, -1, part, -1);
    if (!sp) return part;
    int red = g_tensor(g, id + 1, arena_printf(&g_arena, "%s.scattered", name), m->h, false, AS_SEQ, AK_TEMP, true);
    g_step(g, arena_printf(&g_arena, "reducescatter(%s)", name), part, -1, red, -1);
    return red;
}

/* The graph of one layer: pre-norm attention then pre-norm MLP, residuals;
 * no dropout (so no masks), fused attention (no s² tensor: the core keeps
 * its output and the fp32 log-sum-exp per head and token). */
void model_layer_graph(const Model *m, bool sp, LayerGraph *g)
{
    memset(g, 0, sizeof *g);
    int64_t kvd = model_kv_rank(m) * m->tp * m->hd;     /* a replicated kv head counts on every rank */
    int x = g_tensor(g, AP_X, "x", m->h, false, AS_SEQ, AK_INPUT, true);
    int n1g, n2g;
    g_norm(g, m, sp, x, AP_NORM1_STATS, "norm1", &n1g);
    int qkv = g_tensor(g, AP_QKV, "qkv", m->h + 2 * kvd, false, AS_TP, AK_SAVED, true);   /* (T, (h+2kvd)/t) */
    g_step(g, "qkv", n1g, -1, qkv, -1);
    int o = g_tensor(g, AP_ATTN_OUT, "attn.out", m->h, false, AS_TP, AK_SAVED_ATTN, true);    /* (T, h/t) */
    int lse = g_tensor(g, AP_ATTN_LSE, "attn.lse", m->a, true, AS_TP, AK_SAVED_ATTN, false);  /* (a/t, T) fp32 */
    g_step(g, "attention", qkv, -1, o, lse);
    int pr = g_rowpar(g, m, sp, o, AP_PROJ_PARTIAL, "proj");
    int x2 = g_tensor(g, AP_X2, "x2", m->h, false, AS_SEQ, AK_SAVED, true);            /* residual 1 */
    g->t[x2].role = AR_RESIDUAL;
    g_step(g, "add1", x, pr, x2, -1);
    g_norm(g, m, sp, x2, AP_NORM2_STATS, "norm2", &n2g);
    int f1 = g_tensor(g, AP_FC1, m->gated ? "gate" : "fc1", m->ffn, false, AS_TP, AK_SAVED, true);
    int up = m->gated ? g_tensor(g, AP_UP, "up", m->ffn, false, AS_TP, AK_SAVED, true) : -1;
    g_step(g, m->gated ? "gate+up" : "fc1", n2g, -1, f1, up);
    int act = g_tensor(g, AP_ACT, "act", m->ffn, false, AS_TP, AK_SAVED, true);         /* fc2 input */
    g->t[act].role = AR_ACT;
    g_step(g, "activation", f1, up, act, -1);
    int fr = g_rowpar(g, m, sp, act, AP_FC2_PARTIAL, "fc2");
    int y = g_tensor(g, AP_Y, "y", m->h, false, AS_SEQ, AK_OUTPUT, true);
    g_step(g, "add2", x2, fr, y, -1);
}
