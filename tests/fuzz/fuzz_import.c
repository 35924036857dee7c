/* fuzz_import.c — libFuzzer target over `shardc import deepspeed`: the
 * DeepSpeed JSON and the Hugging Face config.json.
 *
 * An input is the DeepSpeed config, then (after the first NUL byte, if any)
 * the Hugging Face config; both are written to files, as the importer reads
 * files, and imported for 1 node of 8 GPUs.  Nothing may crash, leak or hang,
 * the exit code is ok, a user error or a usage error, and a user error has
 * said why (at least one diagnostic).  Build and run with scripts/run-fuzz.
 */
#include "shardc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char ds_path[64], hf_path[64];

/* Writes n bytes to path (the importer reads files). */
static void put(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

/* Removes the two files at exit. */
static void cleanup(void)
{
    unlink(ds_path);
    unlink(hf_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    diag_color = false;
    diag_stream = fopen("/dev/null", "w");   /* the diagnostics are printed in full, unseen */
    if (!diag_stream || !freopen("/dev/null", "w", stdout)) abort();   /* the imported spec */
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(ds_path, sizeof ds_path, "%s/fuzz-import-%d-ds.json", dir, (int)getpid());
    snprintf(hf_path, sizeof hf_path, "%s/fuzz-import-%d-hf.json", dir, (int)getpid());
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t nds = nul ? (size_t)(nul - data) : size;
    put(ds_path, data, nds);
    if (nul) put(hf_path, nul + 1, size - nds - 1);
    diag_reset();
    ImportOpts o = {.ds_path = ds_path, .hf_path = nul ? hf_path : NULL, .nodes = 1, .gpus_per_node = 8};
    int rc = import_deepspeed(&o);
    if (rc != EXIT_OK && rc != EXIT_USER && rc != EXIT_USAGE) abort();
    if (rc == EXIT_USER && diag_errors == 0) abort();     /* refused without saying why */
    diag_reset();
    arena_free(&g_arena);
    return 0;
}
