/* rt_check.h — assertions of the runtime's unit tests (rt_test_*.c), which
 * link the runtime's pure core and not the compiler.  A failed CHECK prints
 * file:line and the expression and counts; main returns `failures != 0`. */
#ifndef RT_CHECK_H
#define RT_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            failures++;                                                               \
        }                                                                             \
    } while (0)
#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        long long a_ = (long long)(a), b_ = (long long)(b);                           \
        if (a_ != b_) {                                                               \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__, \
                    __LINE__, #a, a_, #b, b_);                                        \
            failures++;                                                               \
        }                                                                             \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                         \
    do {                                                                              \
        double a_ = (double)(a), b_ = (double)(b);                                    \
        if (!(fabs(a_ - b_) <= (tol))) {                                              \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.17g, %s = %.17g\n",      \
                    __FILE__, __LINE__, #a, a_, #b, b_);                              \
            failures++;                                                               \
        }                                                                             \
    } while (0)
/* a contains the substring b */
#define CHECK_HAS(a, b)                                                               \
    do {                                                                              \
        const char *a_ = (a), *b_ = (b);                                              \
        if (!a_ || !strstr(a_, b_)) {                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s = \"%s\" lacks \"%s\"\n",         \
                    __FILE__, __LINE__, #a, a_ ? a_ : "(null)", b_);                  \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#endif
