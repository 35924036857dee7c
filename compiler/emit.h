/* emit.h — the code generator (compiler/emit.c, prefix emit_): `shardc build`
 * turns a memory plan into one readable C file that calls runtime/include/
 * shardrt.h in schedule order, and compiles and links it into a trainer.
 * docs/codegen.md describes the generated file.
 */
#ifndef SHARDC_EMIT_H
#define SHARDC_EMIT_H

#include "plan.h"

/* The driver's entry: `shardc build FILE -o TRAINER [--backend cpu|cuda]
 * [--emit-c OUT.c] [--runtime DIR] [-D key=value ...]`.  Returns the exit code. */
int emit_build_main(int argc, char **argv);

/* Whether the code generator handles what the spec asks for; with report,
 * each unsupported feature is a diagnostic at its key. */
bool emit_supported(const Spec *s, bool report);

/* The trainer's C source for a plan of a supported spec (an arena string).
 * name: the program's name (the spec's file name); loops: fold regular runs
 * of ops into loops (off only for the tests that compare both forms). */
char *emit_c(MemPlan *mp, const char *name, bool loops);

/* A file of the runtime (shardrt_calibrate, a library): under dir when
 * given, else in the build tree this shardc runs from; NULL when absent. */
const char *emit_runtime_file(const char *dir, const char *name);

#endif
