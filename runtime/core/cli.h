/* cli.h — the trainer's command line: one option table, the parser and the
 * help text generated from it (so the help cannot drift from the flags).
 *
 * Values: `--opt VALUE` or `--opt=VALUE`.  --resume takes an optional value:
 * `--resume` alone (or followed by another option) means `--resume auto`.
 * Integers are decimal and range-checked.  A field of cli_opts is set only
 * when its option was given (given[CLI_OPT_x]); the caller falls back on the
 * program's (the spec's) values otherwise.  Errors are usage errors: the
 * caller prints the message and the help and exits 2.
 */
#ifndef SHARDRT_CLI_H
#define SHARDRT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* X(field, flag, value-name, kind, min, max, help) */
#define CLI_OPTIONS(X)                                                                          \
    X(data, "--data", "GLOB", CLI_STRING, 0, 0,                                                 \
      "training data: llm.c token shards (a file or a glob) or a text file (data.format = "     \
      "text); default: the spec's data.train")                                                  \
    X(val, "--val", "GLOB", CLI_STRING, 0, 0,                                                   \
      "validation data; default: the spec's data.val, else the last 5% of the training data")  \
    X(steps, "--steps", "N", CLI_INT, 1, 1e12, "train until step N; default: the spec's train.steps") \
    X(ckpt_dir, "--ckpt-dir", "DIR", CLI_STRING, 0, 0,                                          \
      "write checkpoints into DIR: at the end, and every --ckpt-every steps")                   \
    X(ckpt_every, "--ckpt-every", "N", CLI_INT, 0, 1e12,                                        \
      "checkpoint every N steps (needs --ckpt-dir); 0: only at the end (default)")              \
    X(resume, "--resume", "[DIR|auto]", CLI_OPTIONAL, 0, 0,                                     \
      "continue from a checkpoint: DIR (a checkpoint directory or one step-N in it), or auto: "  \
      "the newest in --ckpt-dir if there is one (the default value); any layout can resume "    \
      "any checkpoint of the same model")                                                       \
    X(init, "--init", "PATH", CLI_STRING, 0, 0,                                                 \
      "start from Hugging Face weights: a model.safetensors file, or a directory with it or "   \
      "with model.safetensors.index.json and its shards (F32, BF16, F16); the optimizer "       \
      "starts fresh at step 1; a checkpoint that --resume finds is taken instead")             \
    X(log, "--log", "FILE.jsonl", CLI_STRING, 0, 0,                                             \
      "write one JSON object per step (step, loss, lr, grad_norm, tokens_per_s, mfu, "          \
      "arena_bytes) to FILE.jsonl; a resumed run appends")                                      \
    X(trace, "--trace", "FILE", CLI_STRING, 0, 0,                                               \
      "write a measured Chrome trace of every op (FILE.rankN.json per rank with several "       \
      "ranks)")                                                                                 \
    X(eval_every, "--eval-every", "N", CLI_INT, 0, 1e12,                                        \
      "evaluate on the validation data every N steps, 0: never; default: the spec's "           \
      "train.eval_every")                                                                       \
    X(eval_batches, "--eval-batches", "N", CLI_INT, 1, 1e9,                                     \
      "validation batches (of global_batch sequences) per evaluation; default 4")               \
    X(sample, "--sample", "N", CLI_INT, 0, 1e6,                                                 \
      "print N generated tokens at the end: text with --tokenizer or for a byte-level model "  \
      "(data.format = text), else token ids")                                                   \
    X(tokenizer, "--tokenizer", "FILE", CLI_STRING, 0, 0,                                       \
      "a Hugging Face tokenizer.json (byte-level BPE as GPT-2's, or SentencePiece-style as "    \
      "Llama's) that --sample decodes with")                                                    \
    X(seed, "--seed", "N", CLI_INT, 0, 4294967295.0,                                            \
      "seed of the initialisation; default: the spec's train.seed")                            \
    X(help, "--help", "", CLI_FLAG, 0, 0, "print this help and exit")

enum { CLI_FLAG, CLI_INT, CLI_STRING, CLI_OPTIONAL };

/* One field per option: strings for CLI_STRING and CLI_OPTIONAL, int64 for CLI_INT, bool for CLI_FLAG. */
#define CLI_FIELD_CLI_STRING(f) const char *f;
#define CLI_FIELD_CLI_OPTIONAL(f) const char *f;
#define CLI_FIELD_CLI_INT(f) int64_t f;
#define CLI_FIELD_CLI_FLAG(f) bool f;
#define CLI_FIELD(f, flag, arg, kind, lo, hi, help) CLI_FIELD_##kind(f)
#define CLI_ENUM(f, flag, arg, kind, lo, hi, help) CLI_OPT_##f,

enum { CLI_OPTIONS(CLI_ENUM) CLI_NOPTS };

typedef struct cli_opts {
    CLI_OPTIONS(CLI_FIELD)
    bool given[CLI_NOPTS];
} cli_opts;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE = 2 };

/* Parses argv[1..argc-1] into o.  CLI_OK, CLI_HELP (--help was given), or
 * CLI_USAGE with a message in err. */
int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen);
/* The help text, generated from the option table. */
void cli_help(FILE *f, const char *prog);

#endif
