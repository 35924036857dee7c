/* fuzz_spec.c — libFuzzer target over the lexer, the parser and the checker.
 *
 * Every input is parsed as a spec; if it parses, it is resolved against the
 * schema.  Nothing may crash, leak or hang, and a rejected input must have
 * said why (at least one error).  Includes are off: the fuzzer opens no files.
 * Build and run with scripts/run-fuzz.
 */
#include "shardc.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    spec_allow_include = false;
    diag_color = false;
    /* Diagnostics are printed in full (the printing is under test too), unseen. */
    diag_stream = fopen("/dev/null", "w");
    if (!diag_stream) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    diag_reset();
    Item *items = spec_parse_text("fuzz.tspec", (const char *)data, size);
    if (diag_errors == 0) {
        Spec *spec = calloc(1, sizeof *spec);
        if (!spec) abort();
        bool ok = sema_resolve(items, NULL, 0, spec);
        /* A rejected spec without a diagnostic is a bug. */
        if (!ok && diag_errors == 0) abort();
        if (ok && spec->nopen) {
            /* a search space (shardc tune): one choice resolved, its first values */
            int64_t val[SPEC_MAX_KEYS];
            for (int i = 0; i < spec->nopen; i++) val[i] = spec->open[i].any ? SEMA_UNBOUND : spec->open[i].v[0];
            Spec *one = calloc(1, sizeof *one);
            if (!one) abort();
            int before = diag_errors;
            if (!sema_bind(spec, val, one) && diag_errors == before) abort();
            free(one);
        }
        free(spec);
    }
    diag_reset();
    arena_free(&g_arena);
    return 0;
}
