/* emit.h — the last two passes of `shardc build`: the code generator
 * (compiler/emit.c, prefix emit_) turns a verified plan into one readable C
 * file that calls runtime/include/shardrt.h in schedule order; the build
 * driver (compiler/cc.c, prefix cc_) compiles and links that file into a
 * trainer.  docs/codegen.md describes the generated file.
 */
#ifndef SHARDC_EMIT_H
#define SHARDC_EMIT_H

#include "plan.h"
#include "catalog.h"

/* Whether the code generator handles what the spec asks for; with report,
 * each unsupported feature is a diagnostic at its key. */
bool emit_supported(const Spec *s, bool report);

/* The trainer's C source for a plan of a supported spec (an arena string).
 * x: the spec's user-defined op (catalog_check_extern's; NULL: none); name:
 * the program's name (the spec's file name); loops: fold regular runs of ops
 * into loops (off only for the tests that compare both forms). */
char *emit_c(const Plan *pl, const CatalogExtern *x, const char *name, bool loops);

/* ---- cc.c: the build driver ---------------------------------------------- */

typedef struct CcOpts {
    const char *out;            /* the trainer to write                            */
    const char *backend;        /* "cpu" or "cuda"                                  */
    const char *runtime;        /* --runtime DIR, or NULL: shardc's build tree      */
} CcOpts;

/* Compiles and links the trainer's C (the file c_path, or text written to a
 * temporary file when c_path is NULL) with the user's op x (or NULL) into
 * o->out.  Returns the exit code: 1 for a missing runtime or compiler, 3 when
 * the C compiler or the link fails on what shardc wrote. */
int cc_build(const CcOpts *o, const char *text, const char *c_path, const CatalogExtern *x);

/* A file of the runtime (shardrt_calibrate, a library): under dir when
 * given, else in the build tree this shardc runs from; NULL when absent. */
const char *cc_runtime_file(const char *dir, const char *name);

#endif
