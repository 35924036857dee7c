/* calibrate.c — prints the cost model's calibration set and its validation
 * set, row by row with each row's source, the mean error of each per GPU, and
 * the ZeRO-3 network case (run by tests/bench/costmodel/run.sh). */
#include "calib.h"

int main(void)
{
    static const struct { CalSet set; bool h100; const char *title; } tables[] = {
        {SET_CAL, false, "A100 calibration set (constants fitted on these rows)"},
        {SET_VAL, false, "A100 validation set (not used in fitting)"},
        {SET_CAL, true, "H100 calibration set (constants fitted on these rows)"},
        {SET_VAL, true, "H100 validation set (not used in fitting)"},
    };
    double mae[4], exposed[3];
    for (int i = 0; i < 4; i++) {
        printf("%s%s:\n", i ? "\n" : "", tables[i].title);
        fflush(stdout);
        if ((mae[i] = cal_table(stdout, tables[i].set, tables[i].h100)) < 0) return 1;
    }
    printf("\nmean absolute error: A100 calibration %.1f%%, validation %.1f%%; H100 calibration %.1f%%, validation %.1f%%\n",
           100 * mae[0], 100 * mae[1], 100 * mae[2], 100 * mae[3]);
    if (!cal_zero3(stdout, exposed)) return 1;
    return mae[0] < 0.10 ? 0 : 1;       /* the A100 calibration, as test_cost.c asserts */
}
