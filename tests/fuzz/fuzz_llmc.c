/* fuzz_llmc.c — libFuzzer target over the trainer's data loader
 * (runtime/core/data.c) reading an llm.c token shard.
 *
 * The first 3 bytes of an input choose the loader's shape (sequence length
 * 1-16, vocabulary 256, 50257, 65536 or 100000, global batch 1-4, tokens
 * checked at open or per step); the rest is the shard, written to a file.
 * If it opens, steps 0-2 are checked and loaded for dp 1 and 2.  Nothing may
 * crash, leak or hang, a token out of the vocabulary is never returned, and
 * every refusal has a message.  Build and run with scripts/run-fuzz.
 */
#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

/* Removes the shard at exit. */
static void cleanup(void)
{
    unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(path, sizeof path, "%s/fuzz-llmc-%d.bin", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    static const int64_t vocabs[4] = {256, 50257, 65536, 100000};
    data_opts o = {.pattern = path, .format = DATA_FMT_LLMC, .seq_len = 1 + data[0] % 16,
                   .vocab = vocabs[data[1] % 4], .global_batch = 1 + data[2] % 4, .part = DATA_PART_ALL,
                   .check = data[2] & 0x80 ? DATA_CHECK_STEP : DATA_CHECK_OPEN};
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 3, 1, size - 3, f) != size - 3) abort();
    fclose(f);
    data_loader *d = NULL;
    char err[512] = "";
    if (data_open(&d, &o, err, sizeof err) != DATA_OK) {
        if (!*err) abort();
        return 0;
    }
    int32_t tok[4 * 16], tgt[4 * 16];
    for (int64_t step = 0; step < 3; step++) {
        if (data_check_step(d, step) != DATA_OK) {
            if (!*data_error(d)) abort();
            break;
        }
        for (int64_t dp = 1; dp <= 2; dp++) {
            if (o.global_batch % dp) continue;
            int64_t mb_rows = o.global_batch / dp;
            for (int64_t r = 0; r < dp; r++) {
                if (data_batch(d, step, r, dp, 0, mb_rows, tok, tgt) != DATA_OK) {
                    if (!*data_error(d)) abort();
                    continue;
                }
                for (int64_t i = 0; i < mb_rows * o.seq_len; i++)
                    if (tok[i] < 0 || tok[i] >= o.vocab || tgt[i] < 0 || tgt[i] >= o.vocab) abort();
            }
        }
    }
    data_close(d);
    return 0;
}
