/* pages.c — what the first access to a page costs after the page was left
 * alone for a while (tests/bench/pages/run.sh).
 *
 * A buffer of `mb` MB is written, then the process stays busy for `idle`
 * seconds reading a small buffer of its own (no sleep: the CPU is not
 * idle), then reads one byte of every 4 KB page of the big buffer twice.  On
 * bare metal both reads cost the same (TLB misses, a few tens of ns a page).
 * On a VM that drops the mappings of pages nobody touched (shadow paging, a
 * host reclaiming guest memory), the first read costs a fault a page and the
 * second does not.  Prints microseconds a page for both reads.
 * usage: pages MB IDLE_SECONDS */
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

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: pages MB IDLE_SECONDS\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) << 20, small = 256 << 10;
    double idle = atof(argv[2]);
    unsigned char *big = aligned_alloc(4096, n), *busy = aligned_alloc(4096, small);
    if (!big || !busy) {
        fprintf(stderr, "pages: out of memory\n");
        return 1;
    }
    memset(big, 1, n);
    memset(busy, 1, small);
    unsigned sink = 0;
    double t0 = now();
    while (now() - t0 < idle) read_pages(busy, small, &sink);   /* busy, elsewhere */
    double first = read_pages(big, n, &sink), again = read_pages(big, n, &sink);
    double pages = (double)(n / 4096);
    printf("%zu MB left alone %.2f s: first read %.3f us a page, again %.3f us a page (%u)\n", n >> 20, idle,
           first / pages * 1e6, again / pages * 1e6, sink & 1);
    free(big);
    free(busy);
    return 0;
}
