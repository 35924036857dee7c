/* test_model.c — the model inventory against the published counts and
 * formulas (REFERENCE.md): GPT = 12lh² + 13lh + h(V + s) + 2h for every shape,
 * GPT-2 124M, Llama-2 7B and 13B exactly; the vocabulary padding; FLOPs per
 * layer and per step against Narayanan's and Korthikanti's formulas; the tp
 * split and weight-decay flag of every role. */
#include "plan_fixture.h"

/* The published GPT count: 12lh² + 13lh + h(V + s) + 2h (tied). */
static int64_t gpt_formula(int64_t l, int64_t h, int64_t V, int64_t s)
{
    return 12 * l * h * h + 13 * l * h + h * (V + s) + 2 * h;
}

/* GPT-2 124M exactly, and the formula for a spread of shapes and tp. */
static void test_gpt_counts(void)
{
    Spec s;
    Model m;
    fx_spec(&s);
    fx_gpt(&s, 12, 768, 12, 50257, 1024);
    model_build(&s, &m);
    CHECK_EQ(m.params, 124439808);
    CHECK_EQ(m.params, gpt_formula(12, 768, 50257, 1024));
    CHECK_EQ(m.nt, 2 + 12 * 12 + 2);       /* wte, wpe; 12 per layer; ln_f weight and bias */
    const int64_t shapes[][4] = {{1, 64, 256, 32}, {24, 2304, 51200, 2048}, {48, 1600, 50257, 1024},
                                 {96, 12288, 51200, 2048}, {128, 25600, 51200, 2048}, {5, 96, 1001, 77}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int64_t tp = 1; tp <= 8; tp *= 2) {
            fx_gpt(&s, shapes[i][0], shapes[i][1], shapes[i][1] / 32 > 0 ? shapes[i][1] / 32 : 1, shapes[i][2],
                   shapes[i][3]);
            s.parallel.tp = tp;
            model_build(&s, &m);
            CHECK_EQ(m.params, gpt_formula(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]));
            CHECK_EQ(m.params_layer, 12 * shapes[i][1] * shapes[i][1] + 13 * shapes[i][1]);
        }
}

/* Llama-2 7B and 13B (REFERENCE.md), untied, no biases, RMSNorm weights. */
static void test_llama_counts(void)
{
    Spec s;
    Model m;
    fx_spec(&s);
    fx_llama(&s, 32, 4096, 32, 11008);
    model_build(&s, &m);
    CHECK_EQ(m.params, 6738415616LL);
    CHECK_EQ(m.nt, 1 + 32 * 9 + 2);        /* embed; 9 per layer; norm, lm_head */
    fx_llama(&s, 40, 5120, 40, 13824);
    model_build(&s, &m);
    CHECK_EQ(m.params, 13015864320LL);
    s.parallel.tp = 8;                      /* counts do not depend on tp */
    model_build(&s, &m);
    CHECK_EQ(m.params, 13015864320LL);
    s.model.kv_heads = 8;                   /* grouped-query attention: k, v shrink */
    model_build(&s, &m);
    CHECK_EQ(m.params, 13015864320LL - 40 * 2 * 5120 * (5120 - 8 * 128));
}

/* The vocabulary is padded to a multiple of 128·tp in memory only. */
static void test_padding(void)
{
    Spec s;
    Model m;
    fx_spec(&s);
    fx_gpt(&s, 12, 768, 12, 50257, 1024);
    for (int64_t tp = 1; tp <= 8; tp *= 2) {
        s.parallel.tp = tp;
        model_build(&s, &m);
        CHECK(m.Vpad % (128 * tp) == 0 && m.Vpad >= m.V && m.Vpad - m.V < 128 * tp);
        CHECK_EQ(m.params, 124439808);
        CHECK_EQ(m.params_mem - m.params, (m.Vpad - m.V) * 768);     /* tied: one matrix */
    }
    CHECK_EQ(m.Vpad, 51200);                /* tp 8: 50257 -> 51200 */
    s.model.tie_embeddings = false;
    model_build(&s, &m);
    CHECK_EQ(m.params_mem - m.params, 2 * (m.Vpad - m.V) * 768);     /* embedding and head */
}

/* FLOPs: Narayanan's model FLOPs and full-recompute FLOPs exactly; the
 * selective count is the attention core's forward replayed (4·s²·h per layer
 * and sequence), which is 8·B·s²·h·l below Korthikanti's published formula
 * (it counts the replay at 3 × the forward; docs/memory-plan.md). */
static void test_flops(void)
{
    Spec s;
    Model m;
    fx_spec(&s);
    const int64_t rows[][4] = {{96, 12288, 96, 1536}, {24, 2304, 24, 512}, {128, 25600, 160, 3072}};
    for (int i = 0; i < 3; i++) {
        double l = (double)rows[i][0], h = (double)rows[i][1], B = (double)rows[i][3], sq = 2048, V = 51200;
        fx_gpt(&s, rows[i][0], rows[i][1], rows[i][2], 51200, 2048);
        s.train.global_batch = rows[i][3];
        model_build(&s, &m);
        double base = B * sq * l * h * h;
        CHECK_NEAR(m.flops_model_step, 72 * base * (1 + sq / (6 * h) + V / (12 * l * h)), 1e-12);
        CHECK_NEAR(m.flops_hw_full, 96 * base * (1 + sq / (6 * h) + V / (16 * l * h)), 1e-12);
        CHECK_NEAR(m.flops_hw_selective, m.flops_model_step + 4 * B * sq * sq * h * l, 1e-12);
        double published = 72 * base * (1 + sq / (3 * h) + V / (12 * l * h));
        CHECK_NEAR(published - m.flops_hw_selective, 8 * B * sq * sq * h * l, 1e-9);
        CHECK_NEAR(m.fl_layer_fwd, 24 * sq * h * h * (1 + sq / (6 * h)), 1e-12);
        CHECK_NEAR(m.fl_layer_bwd, 2 * m.fl_layer_fwd, 1e-15);
        CHECK_NEAR(m.fl_recompute_full, m.fl_layer_fwd, 1e-15);
        CHECK_NEAR(m.fl_head_fwd, 2 * sq * h * V, 1e-15);
    }
    /* what a recompute runs: selective the attention core, full the layers'
     * forwards but each group's last MLP down projection (the papers' full
     * count replays it too) */
    model_build(&s, &m);
    CHECK_NEAR(model_recompute_flops(&m, CKPT_SELECTIVE, 5, 2), 5 * m.fl_recompute_sel, 1e-15);
    CHECK_NEAR(model_recompute_flops(&m, CKPT_FULL, 5, 2), 5 * m.fl_recompute_full - 3 * m.fl_mlp_down, 1e-6);
    CHECK_NEAR(model_recompute_flops(&m, CKPT_FULL, 4, 1), 4 * (m.fl_recompute_full - m.fl_mlp_down), 1e-6);
    CHECK(model_recompute_flops(&m, CKPT_NONE, 4, 1) == 0);
    CHECK_NEAR(m.fl_mlp_down, 2.0 * (double)m.s * (double)m.h * (double)m.ffn, 1e-15);
    /* a Llama: 6 FLOPs per weight of every linear (head included, the lookup
     * and the norms excluded) and 12·l·h·s per token for attention (llm.c's
     * 6·P + 6·l·h·s halves the attention term for causal masking) */
    fx_llama(&s, 32, 4096, 32, 11008);
    s.train.global_batch = 1;
    model_build(&s, &m);
    double tokens = 4096, lin = (double)(m.params - m.params_pre - (2 * 32 * 4096 + 4096));
    CHECK_NEAR(m.flops_model_step, tokens * (6 * lin + 12 * 32 * 4096 * 4096.0), 1e-12);
}

/* Every role's tp split and weight decay (Megatron). */
static void test_roles(void)
{
    Spec s;
    Model m;
    fx_spec(&s);
    model_build(&s, &m);
    for (int i = 0; i < m.nt; i++) {
        const Tensor *t = &m.t[i];
        CHECK(t->decay == (t->cols != 0));
        switch (t->role) {
        case R_TOK_EMBED: case R_HEAD_W: case R_FC1_W: case R_FC1_B:
            CHECK(t->split == SPLIT_ROWS);
            break;
        case R_QKV_W: case R_QKV_B:
            CHECK(t->split == SPLIT_QKV);
            break;
        case R_ATTN_OUT_W: case R_FC2_W:
            CHECK(t->split == SPLIT_COLS);
            break;
        default:
            CHECK(t->split == SPLIT_NONE);
        }
        CHECK(strcmp(model_role_name(t->role), "?") != 0);
    }
    CHECK(strcmp(m.t[0].name, "wte.weight") == 0);
    CHECK(strcmp(m.t[m.nt - 1].name, "ln_f.bias") == 0);
    fx_llama(&s, 2, 256, 4, 688);
    model_build(&s, &m);
    CHECK(strcmp(m.t[m.nt - 1].name, "lm_head.weight") == 0 && m.t[m.nt - 1].split == SPLIT_ROWS);
    CHECK(strcmp(m.t[m.layer_first[2]].name, "model.layers.1.input_layernorm.weight") == 0);
}

int main(void)
{
    test_gpt_counts();
    test_llama_counts();
    test_padding();
    test_flops();
    test_roles();
    arena_free(&g_arena);
    return fx_done("test_model");
}
