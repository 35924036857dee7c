/* parser.y — the Lemon grammar of the spec language, and the loop that
 * feeds it tokens from the lexer.
 *
 *   file   = { item | "," } ;
 *   item   = IDENT "=" value | IDENT [IDENT] "{" file "}" | "include" STRING ;
 *   value  = NUMBER | STRING | BOOL | IDENT ["{" file "}"]
 *          | "extern" STRING ["{" file "}"] | "[" elems "]" | "(" elems ")" ;
 *   elems  = { value | "," } ;
 *
 * Tokens are passed by value and point into the source (SQLite's way);
 * the parse state travels in %extra_context.  Error recovery: on a syntax
 * error Lemon pops back to the innermost list of items and shifts `error`;
 * the feeding loop (spec_parse_src, at the end) then skips the rest of the
 * offending line, and any bracketed group opened there, and sends SYNC to
 * end the broken item before it lets the next error be reported, so one
 * mistake gives one message and the rest of the file is still checked.
 */

%name spec_yy
%token_prefix TK_
%token_type {Token}
%extra_context {SpecParse *ctx}
%stack_size 1000

%include {
#include "shardc.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#ifndef TK_EOF
#define TK_EOF 0
#endif

/* A list of items under construction. */
typedef struct ItemList { Item *head, *tail; } ItemList;
/* The elements of a list or tuple under construction. */
typedef struct ValList { Value **v; int n, cap; } ValList;

/* The state of one file's parse. */
typedef struct SpecParse {
    const SrcFile *file;
    SpecChain *chain;       /* the include chain, for spec_include       */
    Item *root;             /* the file's items once it is accepted      */
    Token prev, prev2;      /* the last two tokens the parser took       */
    int nprev;              /* how many of them there are (0..2)         */
    bool error;             /* a syntax error happened on the last token */
    const char *lex_err_pos;/* the token that followed the latest lexer
                               error: a syntax error there is its echo   */
} SpecParse;

struct yyParser;
static void spec_yy_syntax_error(struct yyParser *p, SpecParse *ctx, int major, Token tok);
static int spec_yy_open_depth(struct yyParser *p);

/* Appends the items of b to a. */
static ItemList spec_items_join(ItemList a, ItemList b)
{
    if (!b.head) return a;
    if (!a.head) return b;
    a.tail->next = b.head;
    a.tail = b.tail;
    return a;
}

/* A list holding one item. */
static ItemList spec_items_one(Item *it)
{
    ItemList l = {it, it};
    return l;
}

/* A new item of kind k whose key is the token t. */
static Item *spec_new_item(ItemKind k, Token t)
{
    Item *it = arena_alloc(&g_arena, sizeof *it);
    it->kind = k;
    it->loc = t.loc;
    it->key = t.str;
    return it;
}

/* A new value of kind k at the token t. */
static Value *spec_new_value(ValKind k, Token t)
{
    Value *v = arena_alloc(&g_arena, sizeof *v);
    v->kind = k;
    v->loc = t.loc;
    return v;
}

/* The value of a number token: its unit decides the kind. */
static Value *spec_number_value(Token t)
{
    ValKind k = t.unit == U_BYTES ? V_BYTES : t.unit == U_BANDWIDTH ? V_BANDWIDTH
              : t.is_int ? V_INT : V_FLOAT;
    Value *v = spec_new_value(k, t);
    v->i = t.i;
    v->f = t.f;
    return v;
}

/* Appends v to the element list l (doubling in the arena). */
static ValList spec_vals_push(ValList l, Value *v)
{
    if (l.n == l.cap) {
        int cap = l.cap ? l.cap * 2 : 4;
        Value **grown = arena_alloc(&g_arena, (size_t)cap * sizeof *grown);
        if (l.n) memcpy(grown, l.v, (size_t)l.n * sizeof *grown);
        l.v = grown;
        l.cap = cap;
    }
    l.v[l.n++] = v;
    return l;
}

/* A list or tuple value from its elements, located at the opening bracket. */
static Value *spec_seq_value(ValKind k, Token open, ValList l)
{
    Value *v = spec_new_value(k, open);
    v->elems = l.v;
    v->n = l.n;
    return v;
}
}

%syntax_error {
    spec_yy_syntax_error(yypParser, ctx, yymajor, yyminor);
}

%stack_overflow {
    /* Unreachable: spec_parse_src stops at SPEC_MAX_DEPTH first. */
    die("parser stack overflow");
}

%type items {ItemList}
%type item {ItemList}
%type value {Value *}
%type elems {ValList}

file ::= items(A).                  { ctx->root = A.head; }

items(A) ::= .                      { A.head = A.tail = NULL; }
items(A) ::= items(B) item(C).      { A = spec_items_join(B, C); }
items(A) ::= items(B) COMMA.        { A = B; }

item(A) ::= IDENT(K) EQ value(V). {
    Item *it = spec_new_item(I_ASSIGN, K);
    it->value = V;
    A = spec_items_one(it);
}
item(A) ::= IDENT(K) LBRACE items(B) RBRACE. {
    Item *it = spec_new_item(I_BLOCK, K);
    it->body = B.head;
    A = spec_items_one(it);
}
item(A) ::= IDENT(K) IDENT(L) LBRACE items(B) RBRACE. {
    Item *it = spec_new_item(I_BLOCK, K);
    it->label = L.str;
    it->label_loc = L.loc;
    it->body = B.head;
    A = spec_items_one(it);
}
item(A) ::= INCLUDE(K) STRING(S). {
    A.head = A.tail = NULL;
    if (spec_yy_open_depth(yypParser) > 0) {
        diag_error(K.loc, "include is only allowed at the top level");
        diag_hint("move the include out of the block; the included items take its place");
    } else {
        A.head = spec_include(&S, ctx->chain, &A.tail);
    }
}
/* A broken item: the parser pops back to the innermost list of items and
 * waits for SYNC, which spec_parse_src sends once it has skipped the rest
 * of the offending line; every token in between is dropped. */
item(A) ::= error SYNC.             { A.head = A.tail = NULL; }

value(A) ::= NUMBER(T).             { A = spec_number_value(T); }
value(A) ::= STRING(T).             { A = spec_new_value(V_STRING, T); A->s = T.str; }
value(A) ::= BOOL(T).               { A = spec_new_value(V_BOOL, T); A->b = T.i != 0; }
value(A) ::= IDENT(T).              { A = spec_new_value(V_IDENT, T); A->s = T.str; }
value(A) ::= IDENT(T) LBRACE items(B) RBRACE. {
    A = spec_new_value(V_IDENT, T);
    A->s = T.str;
    A->has_block = true;
    A->block = B.head;
}
value(A) ::= EXTERN(T) STRING(S). {
    A = spec_new_value(V_IDENT, T);
    A->s = T.str;
    A->arg = spec_new_value(V_STRING, S);
    A->arg->s = S.str;
}
value(A) ::= EXTERN(T) STRING(S) LBRACE items(B) RBRACE. {
    A = spec_new_value(V_IDENT, T);
    A->s = T.str;
    A->arg = spec_new_value(V_STRING, S);
    A->arg->s = S.str;
    A->has_block = true;
    A->block = B.head;
}
value(A) ::= LBRACKET(T) elems(L) RBRACKET.  { A = spec_seq_value(V_LIST, T, L); }
value(A) ::= LPAREN(T) elems(L) RPAREN.      { A = spec_seq_value(V_TUPLE, T, L); }

elems(A) ::= .                      { A.v = NULL; A.n = A.cap = 0; }
elems(A) ::= elems(B) value(V).     { A = spec_vals_push(B, V); }
elems(A) ::= elems(B) COMMA.        { A = B; }

%code {

/* ---- what the parser expected: for the syntax error message ---------- */

/* True if the parser, in its current state, would shift terminal tok after
 * the reductions tok calls for: it runs Lemon's tables on a copy of the
 * state stack (a default reduction can hide an error until later). */
static bool spec_yy_would_shift(yyParser *p, int tok)
{
    YYACTIONTYPE st[YYSTACKDEPTH + 2];
    int n = (int)(p->yytos - p->yystack);
    for (int i = 0; i <= n; i++) st[i] = p->yystack[i].stateno;
    YYACTIONTYPE act = st[n];
    for (int steps = 0; steps < 10000; steps++) {
        act = yy_find_shift_action((YYCODETYPE)tok, act);
        if (act >= YY_MIN_REDUCE) {
            int rule = act - YY_MIN_REDUCE;
            n += yyRuleInfoNRhs[rule];
            if (n < 0 || n + 1 >= YYSTACKDEPTH) return false;
            act = yy_find_reduce_action(st[n], yyRuleInfoLhs[rule]);
            st[++n] = act;
        } else {
            return act <= YY_MAX_SHIFTREDUCE || act == YY_ACCEPT_ACTION;
        }
    }
    return false;
}

/* How a token is named in "found ..." */
static const char *spec_yy_token_text(Token t)
{
    switch (t.kind) {
    case TK_EOF: return "end of file";
    case TK_STRING: {
        int n = t.loc.len > 32 ? 32 : t.loc.len;
        return arena_printf(&g_arena, "string %.*s%s", n, t.loc.pos, t.loc.len > 32 ? "..." : "");
    }
    default: {
        int n = t.loc.len > 32 ? 32 : t.loc.len;
        return arena_printf(&g_arena, "'%.*s%s'", n, t.loc.pos, t.loc.len > 32 ? "..." : "");
    }
    }
}

/* Brackets: the three openers and the three closers. */
static bool spec_yy_is_open(int k) { return k == TK_LBRACE || k == TK_LBRACKET || k == TK_LPAREN; }
static bool spec_yy_is_close(int k) { return k == TK_RBRACE || k == TK_RBRACKET || k == TK_RPAREN; }

/* The closer an opener needs. */
static int spec_yy_closer_of(int open)
{
    return open == TK_LBRACE ? TK_RBRACE : open == TK_LBRACKET ? TK_RBRACKET : TK_RPAREN;
}

/* The opener a closer matches. */
static int spec_yy_opener_of(int close)
{
    return close == TK_RBRACE ? TK_LBRACE : close == TK_RBRACKET ? TK_LBRACKET : TK_LPAREN;
}

/* Open brackets on the parser's stack: the current nesting depth.  A closer
 * can sit on top, shifted with its rule's reduction still pending; it
 * cancels its opener. */
static int spec_yy_open_depth(yyParser *p)
{
    int d = 0;
    for (yyStackEntry *e = p->yystack + 1; e <= p->yytos; e++)
        d += spec_yy_is_open(e->major) ? 1 : spec_yy_is_close(e->major) ? -1 : 0;
    return d;
}

/* The innermost open bracket on the stack (of kind `kind`, or any if 0). */
static const yyStackEntry *spec_yy_innermost(yyParser *p, int kind)
{
    int closed = 0;
    for (yyStackEntry *e = p->yytos; e > p->yystack; e--) {
        if (spec_yy_is_close(e->major)) closed++;
        else if (spec_yy_is_open(e->major) && closed) closed--;
        else if (spec_yy_is_open(e->major) && (!kind || e->major == kind)) return e;
    }
    return NULL;
}

/* Describes the expected terminals in plain words: "'=' or '{'". */
static const char *spec_yy_expected(yyParser *p, bool *at_boundary)
{
    bool can[YYNTOKEN];
    for (int t = 0; t < YYNTOKEN; t++) can[t] = spec_yy_would_shift(p, t);
    *at_boundary = can[TK_COMMA];
    const char *words[12];
    int n = 0;
    bool value = can[TK_NUMBER];
    if (can[TK_IDENT] && !value && !can[TK_EQ]) words[n++] = "a key";
    else if (!can[TK_IDENT] && can[TK_INCLUDE]) words[n++] = "a key";
    if (value) words[n++] = "a value";
    if (can[TK_STRING] && !value) words[n++] = "a string";
    if (can[TK_EQ]) words[n++] = "'='";
    if (can[TK_LBRACE]) words[n++] = "'{'";
    if (can[TK_RBRACE]) words[n++] = "'}'";
    if (can[TK_RBRACKET]) words[n++] = "']'";
    if (can[TK_RPAREN]) words[n++] = "')'";
    if (n == 0) words[n++] = "end of file";
    const char *s = words[0];
    for (int i = 1; i < n; i++)
        s = arena_printf(&g_arena, "%s%s%s", s, i == n - 1 ? " or " : ", ", words[i]);
    return s;
}

/* Lemon's %syntax_error: names the unexpected token and what would have
 * been accepted, and points at an unclosed bracket when that is the cause. */
static void spec_yy_syntax_error(yyParser *p, SpecParse *ctx, int major, Token tok)
{
    ctx->error = true;
    /* Right after a lexer error (a dropped character, say) the parser's
     * complaint is an echo of it: say nothing more. */
    if (tok.loc.pos == ctx->lex_err_pos || (ctx->nprev && ctx->prev.loc.pos == ctx->lex_err_pos))
        return;
    /* `key =` at the end of a line: the next line's key became the value. */
    if (major == TK_EQ && ctx->nprev == 2 && ctx->prev.kind == TK_IDENT && ctx->prev2.kind == TK_EQ &&
        ctx->prev.loc.line > ctx->prev2.loc.line) {
        diag_error(ctx->prev2.loc, "missing value after '='");
        return;
    }
    /* A closer with no opener of its kind anywhere: a stray one. */
    if (spec_yy_is_close(major) && !spec_yy_innermost(p, spec_yy_opener_of(major))) {
        const char *c = major == TK_RBRACE ? "}" : major == TK_RBRACKET ? "]" : ")";
        const char *o = major == TK_RBRACE ? "{" : major == TK_RBRACKET ? "[" : "(";
        diag_error(tok.loc, "stray '%s' with no matching '%s'", c, o);
        return;
    }
    bool boundary;
    const char *want = spec_yy_expected(p, &boundary);
    const char *found = spec_yy_token_text(tok);
    if (!boundary && ctx->nprev) {
        Token pr = ctx->prev;
        int n = pr.loc.len > 32 ? 32 : pr.loc.len;
        diag_error(tok.loc, "expected %s after '%.*s%s', found %s", want, n, pr.loc.pos,
                   pr.loc.len > 32 ? "..." : "", found);
    } else {
        diag_error(tok.loc, "expected %s, found %s", want, found);
    }
    /* Point at the bracket left open, when it explains the error. */
    const yyStackEntry *open = spec_yy_innermost(p, 0);
    if (open) {
        Token o = open->minor.yy0;
        bool show = major == TK_EOF || spec_yy_is_close(major) ||
                    (o.kind != TK_LBRACE && o.loc.line < tok.loc.line);
        if (show) diag_note(o.loc, "this '%.*s' is not closed", 1, o.loc.pos);
    }
}

/* ---- the loop that feeds tokens from the lexer to the parser ---------- */

/* A closer that skips an open bracket of another kind (`[1 }`): reports it,
 * then closes the inner brackets for the user so that the closer still ends
 * its own block and the rest of the file parses as written.  Returns true
 * if it handled the error (the closer has been fed). */
static bool spec_yy_repair_closer(yyParser *p, SpecParse *ctx, Token t)
{
    int want = spec_yy_opener_of(t.kind);
    const yyStackEntry *open = spec_yy_innermost(p, 0);
    if (!open || open->major == want || !spec_yy_innermost(p, want)) return false;
    if (!spec_yy_would_shift(p, spec_yy_closer_of(open->major))) return false;
    spec_yy_syntax_error(p, ctx, t.kind, t);
    while ((open = spec_yy_innermost(p, 0)) && open->major != want) {
        int close = spec_yy_closer_of(open->major);
        if (!spec_yy_would_shift(p, close)) break;
        Token fake = t;
        fake.kind = close;
        spec_yy(p, close, fake);
    }
    ctx->error = false;
    spec_yy(p, t.kind, t);
    return true;
}

/* Feeds f's tokens to a fresh parser: recovery after errors, the nesting
 * limit, and the stop at the error limit happen here. */
Item *spec_parse_src(const SrcFile *f, SpecChain *chain)
{
    SpecParse ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.file = f;
    ctx.chain = chain;
    yyParser *p = spec_yyAlloc(malloc, &ctx);
    if (!p) die("out of memory");
    Lexer lx;
    lex_init(&lx, f);
    /* Once diag.c has said "too many errors" nothing more is worth reading;
     * but a parse that has made no error of its own (sema parsing a default
     * after the user's 20 errors) must still finish. */
    int start_errors = diag_errors;
#define SPEC_GAVE_UP() (diag_errors > diag_max_errors && diag_errors > start_errors)

    bool skipping = false;      /* after a syntax error: dropping tokens  */
    int skip_line = 0;          /* ... up to the end of this line         */
    int skip_depth = 0;         /* ... and through brackets opened there  */
    for (;;) {
        int errors = diag_errors;
        Token t = lex_next(&lx);
        if (diag_errors > errors) ctx.lex_err_pos = t.loc.pos;
        if (SPEC_GAVE_UP()) break;
        if (skipping && t.kind != TK_EOF) {
            if (skip_depth > 0) {
                skip_depth += spec_yy_is_open(t.kind) ? 1 : spec_yy_is_close(t.kind) ? -1 : 0;
                continue;
            }
            /* A closer whose block is open ends the skip: `m { a 1 }`. */
            bool closes = spec_yy_is_close(t.kind) && spec_yy_innermost(p, spec_yy_opener_of(t.kind));
            if (t.loc.line == skip_line && !closes) {
                if (spec_yy_is_open(t.kind)) skip_depth = 1;
                continue;
            }
        }
        if (skipping) {
            /* Close the broken item, and report the next error: this one is over. */
            Token sync = t;
            sync.kind = TK_SYNC;
            spec_yy(p, TK_SYNC, sync);
            skipping = false;
            p->yyerrcnt = -1;
        }
        int depth = spec_yy_open_depth(p);
        ctx.error = false;
        if (!spec_yy_is_close(t.kind) || !spec_yy_repair_closer(p, &ctx, t)) {
            if (spec_yy_is_open(t.kind) && depth >= SPEC_MAX_DEPTH) {
                diag_error(t.loc, "nesting deeper than %d levels", SPEC_MAX_DEPTH);
                diag_hint("blocks, lists and tuples nest at most %d deep", SPEC_MAX_DEPTH);
                break;
            }
            spec_yy(p, t.kind, t);
        }
        if (t.kind == TK_EOF || SPEC_GAVE_UP()) break;
        if (ctx.error) {
            skipping = true;
            skip_line = t.loc.line;
            /* The offending token was dropped; if it opened a bracket, skip
             * through its closer. */
            skip_depth = spec_yy_is_open(t.kind) ? 1 : 0;
            ctx.nprev = 0;
        } else {
            ctx.prev2 = ctx.prev;
            ctx.prev = t;
            ctx.nprev += ctx.nprev < 2;
        }
    }
#undef SPEC_GAVE_UP
    spec_yyFree(p, free);
    return ctx.root;
}
}
