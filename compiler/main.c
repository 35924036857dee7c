/* main.c — shardc: the driver (driver.c) on the command line. */
#include "shardc.h"

#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    diag_color = isatty(2) && getenv("NO_COLOR") == NULL;
    int rc = drv_main(argc, argv);
    arena_free(&g_arena);
    return rc;
}
