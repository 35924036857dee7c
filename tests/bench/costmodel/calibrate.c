/* calibrate.c — prints the cost model's calibration set and its validation
 * set, row by row with each row's source, the mean error of each per GPU, the
 * check rows of a later DeepSpeed and of MT-NLG, and the ZeRO-3 network case (run by
 * tests/bench/costmodel/run.sh).  With --zero3-rates it prints instead every
 * ZeRO-3 row priced as now and with the dp ring's bus bandwidth held to a few
 * rates per GPU (docs/cost-model.md, "Why the ZeRO-3 rows miss"). */
#include "calib.h"

/* Every ZeRO-3 row (Narayanan Table 2 and the Azure check): predicted TFLOP/s
 * per GPU as priced now and with cluster.inter_node = r/8, so that the dp
 * ring, eight ranks a node, moves r per GPU (the rows' only network traffic
 * is ZeRO-3's).  An experiment, not a pricing: nothing is fitted here. */
static bool zero3_rates(void)
{
    static const double rates[] = {55e9, 40e9, 30e9, 25e9, 20e9};
    enum { NR = (int)(sizeof rates / sizeof rates[0]) };
    printf("ZeRO-3 rows, predicted TFLOP/s per GPU (error) with the dp ring's bus bandwidth r per GPU:\n");
    printf("%-14s %6s %5s %2s %7s %14s", "source", "params", "gpus", "mb", "paper", "as priced");
    for (int j = 0; j < NR; j++) printf("  %14s", arena_printf(&g_arena, "r = %.0f GB/s", rates[j] / 1e9));
    printf("\n");
    for (int i = 0; i < CAL_NROWS; i++) {
        const CalRow *r = &cal_rows[i];
        if (r->src != SRC_ZERO3 && r->src != SRC_AZURE) continue;
        printf("%-14s %5.0fB %5d %2d %7s", r->cite, r->params_b, r->gpus, r->mb,
               arena_printf(&g_arena, "%s%.1f", r->at_least ? ">" : "", r->published));
        for (int j = -1; j < NR; j++) {
            Override ov = {"cluster.inter_node", j < 0 ? "" : arena_printf(&g_arena, "%.6gGB/s", rates[j] / 8e9)};
            Sim sim;
            const char *why = cal_simulate_with(cal_spec(r), &ov, j < 0 ? 0 : 1, &sim);
            if (why) {
                printf("\n%.1fB: %s\n", r->params_b, why);
                return false;
            }
            double pred = cal_tflops(r, sim.step_time);
            printf("  %14s", arena_printf(&g_arena, "%.1f (%+.0f%%)", pred, 100 * (pred - r->published) / r->published));
        }
        printf("\n");
        fflush(stdout);
    }
    return true;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--zero3-rates") == 0) return zero3_rates() ? 0 : 1;
    static const struct { CalSet set; bool h100; CalSource src; const char *title; } tables[] = {
        {SET_CAL, false, SRC_ANY, "A100 calibration set (constants fitted on these rows)"},
        {SET_VAL, false, SRC_ANY, "A100 validation set (not used in fitting)"},
        {SET_CAL, true, SRC_ANY, "H100 calibration set (constants fitted on these rows)"},
        {SET_VAL, true, SRC_ANY, "H100 validation set (not used in fitting)"},
        {SET_CHECK, false, SRC_AZURE, "A100 check: DeepSpeed 0.6.2's ZeRO-3 on Azure, 2022 (a later implementation; "
                                      "in neither set, not used in fitting)"},
        {SET_CHECK, false, SRC_MTNLG, "A100 check: MT-NLG 530B, Megatron-DeepSpeed's 3D parallelism on Selene, 2021 "
                                      "(another implementation; in neither set, not used in fitting)"},
    };
    enum { NT = (int)(sizeof tables / sizeof tables[0]) };
    double mae[NT], exposed[3];
    for (int i = 0; i < NT; i++) {
        printf("%s%s:\n", i ? "\n" : "", tables[i].title);
        fflush(stdout);
        if ((mae[i] = cal_table(stdout, tables[i].set, tables[i].h100, tables[i].src)) < 0) return 1;
    }
    printf("\nmean absolute error: A100 calibration %.1f%%, validation %.1f%%; H100 calibration %.1f%%, validation %.1f%%"
           "; A100 checks: DeepSpeed 0.6.2 %.1f%%, MT-NLG %.1f%%\n",
           100 * mae[0], 100 * mae[1], 100 * mae[2], 100 * mae[3], 100 * mae[4], 100 * mae[5]);
    if (!cal_zero3(stdout, exposed)) return 1;
    return mae[0] < 0.10 ? 0 : 1;       /* the A100 calibration, as test_cost.c asserts */
}
