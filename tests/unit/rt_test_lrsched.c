/* rt_test_lrsched.c — learning-rate schedules (runtime/core/lrsched.c):
 * the documented formula at its landmarks (end of warm-up, mid-decay, the
 * decay's end and after), against an independent transcription of nanoGPT's
 * get_lr, and decay_steps = 0 falling back on steps. */
#include "lrsched.h"
#include "check.h"

/* A program with only the schedule's fields set. */
static srt_program prog(int sched, int64_t warmup, int64_t decay, int64_t steps)
{
    srt_program p;
    memset(&p, 0, sizeof p);
    p.lr = 1e-3, p.min_lr = 1e-4, p.lr_schedule = sched;
    p.warmup = warmup, p.decay_steps = decay, p.steps = steps;
    return p;
}

/* nanoGPT's get_lr(it) with it = step - 1 and its warm-up as llm.c's (it+1)/W. */
static double nanogpt(double lr, double min_lr, int64_t W, int64_t D, int64_t step)
{
    int64_t it = step - 1;
    if (it < W) return lr * (double)(it + 1) / (double)W;
    if (it + 1 > D) return min_lr;
    double ratio = (double)(it + 1 - W) / (double)(D - W);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return min_lr + coeff * (lr - min_lr);
}

int main(void)
{
    const double lr = 1e-3, m = 1e-4, eps = 1e-15;
    srt_program c = prog(LRSCHED_CONSTANT, 10, 0, 200);
    CHECK_ABS(lrsched_lr(&c, 1), lr / 10, eps);
    CHECK_ABS(lrsched_lr(&c, 5), lr / 2, eps);
    CHECK_ABS(lrsched_lr(&c, 10), lr, eps);
    CHECK_ABS(lrsched_lr(&c, 11), lr, eps);
    CHECK_ABS(lrsched_lr(&c, 1000), lr, eps);
    c.warmup = 0;
    CHECK_ABS(lrsched_lr(&c, 1), lr, eps);

    srt_program k = prog(LRSCHED_COSINE, 10, 110, 200);
    CHECK_ABS(lrsched_lr(&k, 10), lr, eps);
    CHECK_ABS(lrsched_lr(&k, 60), m + (lr - m) / 2, eps);     /* halfway through the decay */
    CHECK_ABS(lrsched_lr(&k, 110), m, eps);
    CHECK_ABS(lrsched_lr(&k, 150), m, eps);
    double prev = 1;
    for (int64_t s = 1; s <= 200; s++) {
        double v = lrsched_lr(&k, s);
        CHECK_ABS(v, nanogpt(lr, m, 10, 110, s), 1e-15);
        if (s > 10) CHECK(v <= prev);
        prev = v;
    }
    /* decay_steps 0: the decay ends at steps */
    srt_program k0 = prog(LRSCHED_COSINE, 10, 0, 110);
    for (int64_t s = 1; s <= 120; s++) CHECK_ABS(lrsched_lr(&k0, s), lrsched_lr(&k, s), 0);
    /* a decay that ends inside the warm-up: min_lr right after it */
    srt_program kw = prog(LRSCHED_COSINE, 10, 5, 100);
    CHECK_ABS(lrsched_lr(&kw, 10), lr, eps);
    CHECK_ABS(lrsched_lr(&kw, 11), m, eps);

    srt_program l = prog(LRSCHED_LINEAR, 10, 110, 200);
    CHECK_ABS(lrsched_lr(&l, 10), lr, eps);
    CHECK_ABS(lrsched_lr(&l, 35), lr - (lr - m) * 0.25, eps);
    CHECK_ABS(lrsched_lr(&l, 60), lr - (lr - m) * 0.5, eps);
    CHECK_ABS(lrsched_lr(&l, 110), m, eps);
    CHECK_ABS(lrsched_lr(&l, 111), m, eps);
    l.warmup = 0;
    CHECK_ABS(lrsched_lr(&l, 1), lr - (lr - m) / 110, eps);
    if (!failures) printf("rt_test_lrsched: ok\n");
    return failures != 0;
}
