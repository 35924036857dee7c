/* lexer.re — the re2c scanner of the spec language.
 *
 * The scanner runs over an in-memory buffer whose sentinel NUL sits at
 * lx->lim (re2c:yyfill:enable = 0, as in ninja's lexer): a NUL before lim is
 * a NUL byte in the file, the one at lim is the end.  Tokens point into the
 * source through their Loc; identifiers and strings are copied to g_arena.
 * Errors are reported here and the scan goes on, so the parser sees a
 * plausible token stream (a malformed number still yields a number).
 */
#include "shardc.h"
#include "parser.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef TK_EOF
#define TK_EOF 0
#endif

/* Where numbers, units and strings are explained in the error hints. */
#define LEX_UNITS_HINT \
    "units are K M G T (counts, x1000), B KB MB GB TB KiB MiB GiB TiB (bytes), " \
    "B/s KB/s MB/s GB/s TB/s (bytes/s), Kb/s Mb/s Gb/s Tb/s (bits/s)"
#define LEX_NUMBER_HINT \
    "a number is digits with an optional fraction and exponent (12, 0.9, 6e-4, 1.5e9), " \
    "then an optional unit (100K, 80GB, 32MiB, 450GB/s)"

/* One number suffix: value = number * mul / div. */
typedef struct LexUnit {
    const char *name;
    int64_t mul, div;
    NumUnit unit;
} LexUnit;

static const LexUnit lex_units[] = {
    {"K", 1000LL, 1, U_NONE},
    {"M", 1000000LL, 1, U_NONE},
    {"G", 1000000000LL, 1, U_NONE},
    {"T", 1000000000000LL, 1, U_NONE},
    {"B", 1, 1, U_BYTES},
    {"KB", 1000LL, 1, U_BYTES},
    {"MB", 1000000LL, 1, U_BYTES},
    {"GB", 1000000000LL, 1, U_BYTES},
    {"TB", 1000000000000LL, 1, U_BYTES},
    {"KiB", 1LL << 10, 1, U_BYTES},
    {"MiB", 1LL << 20, 1, U_BYTES},
    {"GiB", 1LL << 30, 1, U_BYTES},
    {"TiB", 1LL << 40, 1, U_BYTES},
    {"B/s", 1, 1, U_BANDWIDTH},
    {"KB/s", 1000LL, 1, U_BANDWIDTH},
    {"MB/s", 1000000LL, 1, U_BANDWIDTH},
    {"GB/s", 1000000000LL, 1, U_BANDWIDTH},
    {"TB/s", 1000000000000LL, 1, U_BANDWIDTH},
    {"Kb/s", 1000LL, 8, U_BANDWIDTH},
    {"Mb/s", 1000000LL, 8, U_BANDWIDTH},
    {"Gb/s", 1000000000LL, 8, U_BANDWIDTH},
    {"Tb/s", 1000000000000LL, 8, U_BANDWIDTH},
};

/* The location of n bytes starting at p, on the lexer's current line. */
static Loc lex_loc(const Lexer *lx, const char *p, size_t n)
{
    Loc l;
    l.file = lx->file;
    l.line = lx->line;
    l.col = (int)(p - lx->line_start) + 1;
    l.len = n < 1 ? 1 : n > (size_t)1 << 30 ? 1 << 30 : (int)n;
    l.pos = p;
    return l;
}

/* A token of kind k spanning [b, e). */
static Token lex_token(const Lexer *lx, int k, const char *b, const char *e)
{
    Token t;
    memset(&t, 0, sizeof t);
    t.kind = k;
    t.loc = lex_loc(lx, b, (size_t)(e - b));
    return t;
}

/* Starts scanning f from its first byte. */
void lex_init(Lexer *lx, const SrcFile *f)
{
    lx->file = f;
    lx->cur = f->text;
    lx->lim = f->text + f->len;
    lx->line_start = f->text;
    lx->line = 1;
    /* A UTF-8 byte-order mark is not part of the text. */
    if (f->len >= 3 && memcmp(f->text, "\xEF\xBB\xBF", 3) == 0) {
        lx->cur += 3;
        lx->line_start += 3;
    }
}

/* The end-of-file token: just past the last character of the last line, so
 * the caret lands on a line the user can see. */
static Token lex_eof(const Lexer *lx)
{
    Token t;
    memset(&t, 0, sizeof t);
    t.kind = TK_EOF;
    const char *text = lx->file->text, *p = lx->lim;
    if (p > text && p[-1] == '\n') {
        p--;
        const char *b = p;
        while (b > text && b[-1] != '\n') b--;
        t.loc = (Loc){lx->file, lx->line - 1, (int)(p - b) + 1, 1, p};
    } else {
        t.loc = lex_loc(lx, p, 1);
    }
    return t;
}

/* Writes byte c as it is shown in messages: itself if printable, else \xNN. */
static int lex_show_byte(char *out, unsigned char c)
{
    if (c >= 32 && c < 127 && c != '\'' && c != '\\') {
        out[0] = (char)c;
        return 1;
    }
    if (c == '\'' || c == '\\') {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    return sprintf(out, "\\x%02x", c);
}

/* True for a byte that can start no token (a run of them is one error). */
static bool lex_is_bad(unsigned char c)
{
    if (isalnum(c) || c == '_' || c == '\n' || c == 0) return false;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') return false;
    return !strchr("#\"={}[](),-", c);
}

/* Reports the run of bytes that can start no token at [b, e). */
static void lex_bad_bytes(Lexer *lx, const char *b, const char *e)
{
    char shown[80];
    int n = 0;
    const char *p = b;
    for (; p < e && n < 64; p++) n += lex_show_byte(shown + n, (unsigned char)*p);
    shown[n] = 0;
    Loc loc = lex_loc(lx, b, (size_t)(e - b));
    if (e - b == 1)
        diag_error(loc, "unexpected character '%s'", shown);
    else
        diag_error(loc, "unexpected characters '%s%s'", shown, p < e ? "..." : "");
    unsigned char c = (unsigned char)*b;
    if (c == ';' && e - b == 1)
        diag_hint("items are separated by new lines or ','");
    else if (c == ':' && e - b == 1)
        diag_hint("a key and its value are joined with '=': key = value");
    else if (c == '\'')
        diag_hint("strings are written in double quotes: \"...\"");
    else if (c >= 0x80)
        diag_hint("non-ASCII text is allowed only inside strings and comments");
}

/* Reports a NUL byte at p (spec files are text). */
static void lex_nul(Lexer *lx, const char *p)
{
    diag_error(lex_loc(lx, p, 1), "NUL byte in the file");
    diag_hint("a spec is a text file; is this a binary file?");
}

/* A comment runs to the end of the line; NUL bytes inside are still errors. */
static void lex_comment(Lexer *lx)
{
    while (lx->cur < lx->lim && *lx->cur != '\n') {
        if (*lx->cur == 0) lex_nul(lx, lx->cur);
        lx->cur++;
    }
}

/* Appends c to the growing buffer *buf of *cap bytes holding *n. */
static void lex_push(char **buf, size_t *cap, size_t *n, char c)
{
    if (*n + 1 >= *cap) {
        *cap *= 2;
        char *grown = realloc(*buf, *cap);
        if (!grown) die("out of memory");
        *buf = grown;
    }
    (*buf)[(*n)++] = c;
}

/* The character an escape \e stands for, or 0 if e is not an escape. */
static char lex_escape(char e)
{
    return e == '"' ? '"' : e == '\\' ? '\\' : e == 'n' ? '\n' : e == 't' ? '\t' : 0;
}

/* Scans a string whose opening quote is at q (lx->cur is past it).  A string
 * ends at its closing quote; it may not run past the end of its line. */
static Token lex_string(Lexer *lx, const char *q)
{
    size_t cap = 64, n = 0;
    char *buf = malloc(cap);
    if (!buf) die("out of memory");
    const char *p = lx->cur;
    bool closed = false;
    while (p < lx->lim && *p != '\n') {
        char c = *p;
        if (c == '"') {
            closed = true;
            p++;
            break;
        }
        if (c == 0) {
            lex_nul(lx, p++);
            continue;
        }
        if (c != '\\') {
            lex_push(&buf, &cap, &n, c);
            p++;
            continue;
        }
        /* A backslash at the end of the line is reported as the newline. */
        if (p + 1 >= lx->lim || p[1] == '\n') {
            p++;
            continue;
        }
        char out = lex_escape(p[1]);
        if (out) {
            lex_push(&buf, &cap, &n, out);
        } else {
            char shown[8];
            shown[lex_show_byte(shown, (unsigned char)p[1])] = 0;
            diag_error(lex_loc(lx, p, 2), "unknown escape '\\%s' in a string", shown);
            diag_hint("the escapes are \\\" \\\\ \\n \\t");
        }
        p += 2;
    }
    if (!closed) {
        if (p < lx->lim) {
            diag_error(lex_loc(lx, q, (size_t)(p - q)), "newline in a string");
            diag_hint("close the string with '\"' on the same line; write \\n for a newline");
        } else {
            diag_error(lex_loc(lx, q, (size_t)(p - q)), "unterminated string");
            diag_hint("the string has no closing '\"'");
        }
    }
    lx->cur = p;
    Token t = lex_token(lx, TK_STRING, q, p);
    t.str = arena_strndup(&g_arena, buf, n);
    free(buf);
    return t;
}

/* The unit named by [b, e), or NULL. */
static const LexUnit *lex_find_unit(const char *b, const char *e)
{
    for (size_t i = 0; i < sizeof lex_units / sizeof lex_units[0]; i++)
        if (strlen(lex_units[i].name) == (size_t)(e - b) && memcmp(lex_units[i].name, b, (size_t)(e - b)) == 0)
            return &lex_units[i];
    return NULL;
}

/* A unit spelled like [b, e) but for case (10Gib -> GiB), or NULL. */
static const LexUnit *lex_find_unit_nocase(const char *b, const char *e)
{
    for (size_t i = 0; i < sizeof lex_units / sizeof lex_units[0]; i++)
        if (strlen(lex_units[i].name) == (size_t)(e - b) && strncasecmp(lex_units[i].name, b, (size_t)(e - b)) == 0)
            return &lex_units[i];
    return NULL;
}

typedef unsigned __int128 lex_u128;
#define LEX_U128_MAX (~(lex_u128)0)

/* Appends the digits [b, e) to *mant; false past 36 significant digits,
 * where the exact arithmetic below stops. */
static bool lex_digits(const char *b, const char *e, lex_u128 *mant, int *sig)
{
    for (const char *q = b; q < e; q++) {
        if (*sig == 0 && *q == '0') continue;
        if (++*sig > 36) return false;
        *mant = *mant * 10 + (lex_u128)(*q - '0');
    }
    return true;
}

/* a * b, or false when it overflows 128 bits. */
static bool lex_mul(lex_u128 a, lex_u128 b, lex_u128 *out)
{
    if (a != 0 && b > LEX_U128_MAX / a) return false;
    *out = a * b;
    return true;
}

/* Turns the number-like word [b, e) into a number token (or, for 1f1b-style
 * names, an identifier).  The value is computed exactly as a fraction
 * digits * 10^exp * mul / div, so 1.5GB is 1500000000 bytes, not 1.4999.. */
static Token lex_number(Lexer *lx, const char *b, const char *e)
{
    Token t = lex_token(lx, TK_NUMBER, b, e);
    const char *p = b;
    bool neg = *p == '-';
    if (neg) p++;
    const char *ib = p;
    while (p < e && isdigit((unsigned char)*p)) p++;
    const char *ie = p, *fb = p, *fe = p;
    bool has_frac = false, has_exp = false, malformed = false;
    long exp10 = 0;
    if (p < e && *p == '.') {
        has_frac = true;
        fb = ++p;
        while (p < e && isdigit((unsigned char)*p)) p++;
        fe = p;
        if (fe == fb) malformed = true;
    }
    if (!malformed && p < e && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        bool eneg = false;
        if (q < e && (*q == '+' || *q == '-')) eneg = *q++ == '-';
        if (q < e && isdigit((unsigned char)*q)) {
            has_exp = true;
            while (q < e && isdigit((unsigned char)*q)) {
                if (exp10 < 100000) exp10 = exp10 * 10 + (*q - '0');
                q++;
            }
            if (eneg) exp10 = -exp10;
            p = q;
        } else if (q == e || !isalpha((unsigned char)*q) || q != p + 1) {
            malformed = true;       /* 1e, 1e+, 1e-x */
        }
    }
    const char *sb = p, *se = e;    /* the suffix */
    if (!malformed && !neg && !has_frac && !has_exp && sb < se && isalpha((unsigned char)*sb)) {
        /* A digit after the letters makes a name, not a unit: 1f1b. */
        const char *q = sb;
        while (q < se && isalpha((unsigned char)*q)) q++;
        if (q < se && isdigit((unsigned char)*q)) {
            bool word = true;
            for (const char *r = q; r < se; r++)
                if (!isalnum((unsigned char)*r) && *r != '_') word = false;
            if (word) {
                t.kind = TK_IDENT;
                t.str = arena_strndup(&g_arena, b, (size_t)(e - b));
                return t;
            }
        }
    }
    const LexUnit *u = NULL;
    if (!malformed && sb < se) {
        if (!isalpha((unsigned char)*sb)) {
            malformed = true;
        } else if (!(u = lex_find_unit(sb, se))) {
            int shown = se - sb > 40 ? 40 : (int)(se - sb);
            diag_error(lex_loc(lx, sb, (size_t)(se - sb)), "unknown unit '%.*s%s'", shown, sb,
                       se - sb > 40 ? "..." : "");
            const LexUnit *near = lex_find_unit_nocase(sb, se);
            if (near)
                diag_hint("did you mean '%s'? %s", near->name, LEX_UNITS_HINT);
            else
                diag_hint(LEX_UNITS_HINT);
            return t;
        }
    }
    if (malformed) {
        int shown = e - b > 40 ? 40 : (int)(e - b);
        diag_error(t.loc, "malformed number '%.*s%s'", shown, b, e - b > 40 ? "..." : "");
        diag_hint(LEX_NUMBER_HINT);
        return t;
    }
    int64_t mul = u ? u->mul : 1, div = u ? u->div : 1;
    t.unit = u ? u->unit : U_NONE;

    /* The digits without leading zeros, as one integer mantissa. */
    lex_u128 mant = 0;
    int sig = 0;
    bool exact = lex_digits(ib, ie, &mant, &sig) && lex_digits(fb, fe, &mant, &sig);
    long e10 = exp10 - (long)(fe - fb);
    lex_u128 num = 0, den = (lex_u128)div;
    if (exact && mant == 0) {
        num = 0;
    } else if (exact) {
        exact = lex_mul(mant, (lex_u128)mul, &num);
        for (long k = 0; exact && k < e10; k++) exact = lex_mul(num, 10, &num);
        for (long k = 0; exact && k < -e10; k++) exact = lex_mul(den, 10, &den);
    }
    if (exact && num % den == 0) {
        lex_u128 q = num / den;
        if (q > (lex_u128)INT64_MAX) {
            diag_error(t.loc, "number too large");
            diag_hint("the largest number is 9223372036854775807 (about 9.2e18)");
            return t;
        }
        t.is_int = true;
        t.i = neg ? -(int64_t)q : (int64_t)q;
        t.f = (double)t.i;
    } else if (!has_frac && !has_exp) {
        /* An integer literal with more digits than any int64 holds. */
        diag_error(t.loc, "number too large");
        diag_hint("the largest number is 9223372036854775807 (about 9.2e18)");
        return t;
    } else {
        /* Not integral (or too many digits to tell): strtod rounds correctly. */
        size_t n = (size_t)(p - b);
        char *s = malloc(n + 1);
        if (!s) die("out of memory");
        memcpy(s, b, n);
        s[n] = 0;
        double v = strtod(s, NULL);
        free(s);
        v = v * (double)mul / (double)div;
        if (isinf(v) || isnan(v)) {
            diag_error(t.loc, "number too large");
            diag_hint("the largest number is about 1.8e308, and integers stop at 9223372036854775807");
            return t;
        }
        if (v == floor(v) && fabs(v) >= 9.2233720368547758e18) {
            diag_error(t.loc, "number too large");
            diag_hint("the largest number is 9223372036854775807 (about 9.2e18)");
            return t;
        }
        t.f = v;
        if (v == floor(v)) {
            t.is_int = true;
            t.i = (int64_t)v;
        }
    }
    if (t.unit == U_BYTES && !t.is_int) {
        diag_error(t.loc, "a byte size must be a whole number of bytes");
        diag_hint("%.*s is %g bytes; write a whole number (1.5GB is fine, 0.3B is not)",
                  (int)(e - b > 40 ? 40 : e - b), b, t.f);
        t.is_int = true;
        t.i = (int64_t)t.f;
    }
    return t;
}

/* An identifier or keyword spanning [b, e). */
static Token lex_word(Lexer *lx, const char *b, const char *e)
{
    size_t n = (size_t)(e - b);
    Token t = lex_token(lx, TK_IDENT, b, e);
    if ((n == 2 && memcmp(b, "on", 2) == 0) || (n == 4 && memcmp(b, "true", 4) == 0)) {
        t.kind = TK_BOOL;
        t.i = 1;
    } else if ((n == 3 && memcmp(b, "off", 3) == 0) || (n == 5 && memcmp(b, "false", 5) == 0)) {
        t.kind = TK_BOOL;
        t.i = 0;
    } else if (n == 7 && memcmp(b, "include", 7) == 0) {
        t.kind = TK_INCLUDE;
    } else if (n == 6 && memcmp(b, "extern", 6) == 0) {
        t.kind = TK_EXTERN;
    }
    t.str = arena_strndup(&g_arena, b, n);
    return t;
}

/* The next token; errors on the way are reported and skipped. */
Token lex_next(Lexer *lx)
{
    for (;;) {
        const unsigned char *YYCURSOR = (const unsigned char *)lx->cur;
        const char *tok = lx->cur;
#define LEX_END() (lx->cur = (const char *)YYCURSOR)
        /*!re2c
        re2c:define:YYCTYPE = "unsigned char";
        re2c:yyfill:enable = 0;

        ws      = [ \t\r\v\f]+;
        ident   = [A-Za-z_][A-Za-z0-9_]*;
        numword = "-"? [0-9] ([0-9A-Za-z_.] | [eE][+-])* ("/" [A-Za-z0-9_]*)?;

        "\x00" {
            LEX_END();
            if (tok >= lx->lim) {
                lx->cur = lx->lim;
                return lex_eof(lx);
            }
            lex_nul(lx, tok);
            continue;
        }
        "\n"    { LEX_END(); lx->line++; lx->line_start = lx->cur; continue; }
        ws      { LEX_END(); continue; }
        "#"     { LEX_END(); lex_comment(lx); continue; }
        ident   { LEX_END(); return lex_word(lx, tok, lx->cur); }
        numword { LEX_END(); return lex_number(lx, tok, lx->cur); }
        ["]     { LEX_END(); return lex_string(lx, tok); }
        "="     { LEX_END(); return lex_token(lx, TK_EQ, tok, lx->cur); }
        ","     { LEX_END(); return lex_token(lx, TK_COMMA, tok, lx->cur); }
        "{"     { LEX_END(); return lex_token(lx, TK_LBRACE, tok, lx->cur); }
        "}"     { LEX_END(); return lex_token(lx, TK_RBRACE, tok, lx->cur); }
        "["     { LEX_END(); return lex_token(lx, TK_LBRACKET, tok, lx->cur); }
        "]"     { LEX_END(); return lex_token(lx, TK_RBRACKET, tok, lx->cur); }
        "("     { LEX_END(); return lex_token(lx, TK_LPAREN, tok, lx->cur); }
        ")"     { LEX_END(); return lex_token(lx, TK_RPAREN, tok, lx->cur); }
        "-"     {
            LEX_END();
            diag_error(lex_loc(lx, tok, 1), "unexpected character '-'");
            diag_hint("a negative number is written with the '-' against its digits: -1");
            continue;
        }
        [^]     {
            const char *p = tok + 1;
            while (p < lx->lim && lex_is_bad((unsigned char)*p)) p++;
            lx->cur = p;
            lex_bad_bytes(lx, tok, p);
            continue;
        }
        */
    }
}
