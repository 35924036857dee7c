/* test_check.c — the assertions of check.h fail on NaN (a test must not pass
 * by accident when a computation produced NaN), and pass on what they should. */
#include "check.h"

/* Runs one assertion; whether it counted a failure (the count is restored). */
#define FAILS(stmt)                                                                   \
    ({                                                                                \
        int before_ = failures;                                                       \
        stmt;                                                                         \
        int failed_ = failures > before_;                                             \
        failures = before_;                                                           \
        failed_;                                                                      \
    })

int main(void)
{
    int bad = 0;
    bad += !FAILS(CHECK_NEAR(NAN, 1.0, 1e-3));
    bad += !FAILS(CHECK_NEAR(1.0, NAN, 1e-3));
    bad += !FAILS(CHECK_NEAR(NAN, NAN, 1e-3));
    bad += !FAILS(CHECK_NEAR(INFINITY, INFINITY, 1e-3));
    bad += !FAILS(CHECK_NEAR(1.1, 1.0, 1e-3));
    bad += FAILS(CHECK_NEAR(1.0005, 1.0, 1e-3));
    bad += FAILS(CHECK_NEAR(0.0, 0.0, 1e-3));
    bad += !FAILS(CHECK_ABS(NAN, 0.0, 1.0));
    bad += FAILS(CHECK_ABS(0.5, 0.0, 1.0));
    fprintf(stderr, "(the CHECK failures above are expected: each is counted and undone)\n");
    if (bad) fprintf(stderr, "test_check: %d assertions did not behave\n", bad);
    else printf("test_check: ok\n");
    return bad != 0;
}
