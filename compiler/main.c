/* main.c — shardc: the driver (driver.c) on the command line. */
#include "shardc.h"

#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    /* A plan allocates and frees a few hundred MB in 1 MB arena blocks, and
     * `plan` and `tune` build several plans in a row (period.c, tune.c): keep
     * the freed memory in the heap for the next one instead of returning it to
     * the kernel and faulting it in again (a third of the 1008B row's time). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    diag_color = isatty(2) && getenv("NO_COLOR") == NULL;
    int rc = drv_main(argc, argv);
    arena_free(&g_arena);
    return rc;
}
