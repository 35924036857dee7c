/* catalog.h — the op catalog: every op the runtime declares (read from
 * runtime/include/shardrt.h with libclang at build time by tools/opcatalog),
 * and user-defined ops (extern "name" { header = .. }) checked against the
 * ABI of their op kind with libclang when a spec is compiled.  Prefix catalog_. */
#ifndef SHARDC_CATALOG_H
#define SHARDC_CATALOG_H

#include "shardc.h"

/* One parameter of an op function: its name and type as written, and the
 * canonical type (typedefs resolved: int64_t -> long). */
typedef struct CatalogParam {
    const char *name, *type, *canon;
} CatalogParam;

/* One op function of the runtime (or of a user header). */
typedef struct CatalogOp {
    const char *name;           /* "srt_matmul_fwd"                                 */
    const char *op;             /* the SRT_OPS name: "matmul_fwd" (user ops: name)  */
    const char *ret;            /* return type as written                           */
    int nparams;
    const CatalogParam *params;
    int arity;                  /* SRT_OPS arity: parameters after (ctx, stream)    */
    const char *kind;           /* SRT_KIND_COMPUTE, ... (user ops: "activation")   */
    const char *section;        /* the header's section banner ("compute ops")      */
    const char *doc;            /* the comment above the declaration, markers gone  */
    const char *file;           /* where it is declared                             */
    int line, col;
} CatalogOp;

/* The generated table (build/gen/op_catalog.c, written by tools/opcatalog). */
extern const CatalogOp catalog_ops[];
extern const int catalog_nops;

/* The built-in op named `op` ("matmul_fwd" or "srt_matmul_fwd"), or NULL. */
const CatalogOp *catalog_find(const char *op);
/* `ret name(type a, type b, ...)` as an arena string. */
const char *catalog_signature(const CatalogOp *o);
/* Prints one op: its signature, then its doc comment indented. */
void catalog_print_op(FILE *out, const CatalogOp *o);

/* ---- user-defined ops: the op kinds' ABIs ------------------------------- */
#define CATALOG_MAX_PARAMS 8

/* One function an op kind requires: <name><suffix>(params) -> ret. */
typedef struct CatalogAbiFn {
    const char *suffix;         /* "_forward"                                       */
    const char *ret;            /* "void"                                           */
    int nparams;
    const char *types[CATALOG_MAX_PARAMS];      /* spelled as in the docs           */
    const char *names[CATALOG_MAX_PARAMS];      /* documentation only               */
    const char *doc;
} CatalogAbiFn;

/* An op kind: where it plugs into the model and the functions it needs. */
typedef struct CatalogAbi {
    const char *kind;           /* "activation"                                     */
    const char *spec_key;       /* "model.activation"                               */
    int nfns;
    CatalogAbiFn fns[2];        /* forward, backward                                */
    const char *doc;
} CatalogAbi;

extern const CatalogAbi catalog_abis[];
extern const int catalog_nabis;

/* The ABI of a kind, or NULL. */
const CatalogAbi *catalog_abi(const char *kind);
/* The expected declaration of fn for op `name`: "void sqrelu_forward(float *out, ...)". */
const char *catalog_abi_signature(const CatalogAbiFn *fn, const char *name);

/* A user-defined op of a spec, checked. */
typedef struct CatalogExtern {
    const CatalogAbi *abi;
    const char *name;                   /* "sqrelu"                                 */
    const char *header, *cpu, *cuda;    /* paths relative to the spec's directory
                                           resolved (NULL: not given)               */
    CatalogOp fns[2];                   /* as found in the header, in abi order     */
} CatalogExtern;

/* Checks the spec's user-defined op, if any: parses its header with libclang,
 * finds <name>_forward / <name>_backward, checks them against the kind's ABI
 * (canonical types, arity, return type) and that its sources exist.  Reports
 * errors with diag_error; returns false if there were any.  With no extern op,
 * returns true and sets x->abi = NULL.  x may be NULL. */
bool catalog_check_extern(const Spec *s, CatalogExtern *x);

/* ---- what the emitter needs for a user op -------------------------------- */
/* The C call of fn i (0 forward, 1 backward) on runtime views:
 * forward (out, inp), backward (dinp, inp, dout), e.g.
 * "sqrelu_forward((float *)act.p, (const float *)fc1.p, act.n);". */
const char *catalog_extern_call(const CatalogExtern *x, int fn, const char *const *views, int nviews);

/* `shardc ops [FILE]`: every op with its signature and doc comment, then the
 * spec's user-defined ops (x from catalog_check_extern, or NULL).  Returns the
 * exit code. */
int catalog_ops_print(FILE *out, const CatalogExtern *x);

#endif
