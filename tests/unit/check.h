/* check.h — the unit tests' assertions, and (for tests that can see the
 * compiler's shardc.h) diagnostic capture.  A failed CHECK prints
 * file:line and the expression and counts; main returns `failures != 0`.
 * Comparisons are written `!(err <= tol)`, so that a NaN fails them. */
#ifndef TEST_CHECK_H
#define TEST_CHECK_H

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
/* |a - b| <= rel·|b|; a NaN on either side fails (the comparison is written so). */
#define CHECK_NEAR(a, b, rel)                                                         \
    do {                                                                              \
        double a_ = (double)(a), b_ = (double)(b);                                    \
        if (!(fabs(a_ - b_) <= (rel) * fabs(b_))) {                                   \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.17g, %s = %.17g\n",      \
                    __FILE__, __LINE__, #a, a_, #b, b_);                              \
            failures++;                                                               \
        }                                                                             \
    } while (0)
#define CHECK_ABS(a, b, tol)                                                          \
    do {                                                                              \
        double a_ = (double)(a), b_ = (double)(b);                                    \
        if (!(fabs(a_ - b_) <= (tol))) {                                              \
            fprintf(stderr, "%s:%d: CHECK_ABS failed: %s = %.17g, %s = %.17g\n",       \
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
#define CHECK_STR(a, b)                                                               \
    do {                                                                              \
        const char *a_ = (a), *b_ = (b);                                              \
        if (strcmp(a_, b_) != 0) {                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s is \"%s\", want \"%s\"\n",        \
                    __FILE__, __LINE__, #a, a_, b_);                                  \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#if __has_include("shardc.h")
#include "shardc.h"
/* Diagnostics go to memory so tests can look at them. */
static char *diag_buf;
static size_t diag_len;

/* Starts capturing diagnostics afresh. */
static inline void capture(void)
{
    if (diag_stream) fclose(diag_stream);
    free(diag_buf);
    diag_buf = NULL;
    diag_stream = open_memstream(&diag_buf, &diag_len);
    diag_reset();
}

/* The diagnostics printed since capture(). */
static inline const char *captured(void)
{
    fflush(diag_stream);
    return diag_buf ? diag_buf : "";
}
#endif

#endif
