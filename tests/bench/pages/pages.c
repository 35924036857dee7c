/* pages.c — what the first access to a page costs after the page was left
 * alone for a while (tests/bench/pages/run.sh).
 *
 * A buffer of MB megabytes is written; then, ROUNDS times (1 by default),
 * the process stays busy for IDLE seconds reading a small buffer of its own
 * (no sleep: the CPU is not idle) and reads one byte of every 4 KB page of
 * the big buffer twice.  On bare metal both reads cost about the same (TLB
 * misses, a few tens of ns a page).  On a VM that drops the mappings of pages
 * nobody touched (shadow paging, a host reclaiming guest memory), the first
 * read costs a fault a page and the second does not.  With several rounds
 * the buffer is touched every IDLE seconds, as a trainer touches its arena
 * every step.  Prints microseconds a page for both reads (the median round
 * after the first).
 * usage: pages MB IDLE_SECONDS [ROUNDS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds to read a byte of each page of p[0, n). */
static double read_pages(const volatile unsigned char *p, size_t n, unsigned *sink)
{
    double t0 = now();
    unsigned x = 0;
    for (size_t i = 0; i < n; i += 4096) x += p[i];
    *sink += x;
    return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: pages MB IDLE_SECONDS [ROUNDS]\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) << 20, small = 256 << 10;
    double idle = atof(argv[2]);
    int rounds = argc == 4 ? atoi(argv[3]) : 1;
    unsigned char *big = aligned_alloc(4096, n), *busy = aligned_alloc(4096, small);
    double *first = malloc(sizeof(double) * (size_t)(rounds > 0 ? rounds : 1)), again = 0;
    if (!big || !busy || !first || rounds < 1 || n == 0) {
        fprintf(stderr, "pages: bad arguments or out of memory\n");
        return 1;
    }
    memset(big, 1, n);
    memset(busy, 1, small);
    unsigned sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        while (now() - t0 < idle) read_pages(busy, small, &sink);   /* busy, elsewhere */
        first[r] = read_pages(big, n, &sink);
        again = read_pages(big, n, &sink);
    }
    int from = rounds > 1 ? 1 : 0;   /* the rounds after the first: the buffer touched IDLE s before */
    qsort(first + from, (size_t)(rounds - from), sizeof(double), cmp_double);
    double pages = (double)(n / 4096), med = first[from + (rounds - from) / 2];
    printf("%zu MB left alone %.3f s%s: first read %.3f us a page (%.2f ms the buffer), again %.3f us a page (%u)\n",
           n >> 20, idle, rounds > 1 ? " between touches" : "", med / pages * 1e6, med * 1e3, again / pages * 1e6,
           sink & 1);
    free(first);
    free(big);
    free(busy);
    return 0;
}
