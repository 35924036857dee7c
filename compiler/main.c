/* main.c — shardc: the driver (driver.c) on the command line. */
#include "shardc.h"

#include <stdlib.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

int main(int argc, char **argv)
{
    /* the passes malloc and free scratch of a few MB per rank class (the
     * schedule's builder lists, its event state, the verifier's pools):
     * served from the heap and reused, not mapped fresh and unmapped each
     * time (a 64-stage plan faulted in some 16 000 pages more) */
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
    diag_color = isatty(2) && getenv("NO_COLOR") == NULL;
    int rc = drv_main(argc, argv);
    arena_free(&g_arena);
    return rc;
}
