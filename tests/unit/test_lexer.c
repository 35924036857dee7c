/* test_lexer.c — token kinds, values and locations for every literal form,
 * and the lexer's error messages. */
#include "shardc.h"
#include "check.h"
#include "parser.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static SrcFile src;
static Lexer lx;

/* Lexes text from the start; returns the first token. */
static Token lex1(const char *text)
{
    capture();
    src.path = "t.tspec";
    src.text = arena_strdup(&g_arena, text);
    src.len = strlen(text);
    lex_init(&lx, &src);
    return lex_next(&lx);
}

/* The first token of text, which must be an exact integer count. */
static void check_int(const char *text, int64_t want)
{
    Token t = lex1(text);
    if (t.kind != TK_NUMBER || !t.is_int || t.i != want || t.unit != U_NONE || diag_errors) {
        fprintf(stderr, "  %s: kind %d is_int %d i %lld unit %d errors %d\n", text, t.kind, t.is_int,
                (long long)t.i, t.unit, diag_errors);
        failures++;
    }
}

/* The first token of text, which must be a non-integral number. */
static void check_float(const char *text, double want)
{
    Token t = lex1(text);
    if (t.kind != TK_NUMBER || t.is_int || t.f != want || t.unit != U_NONE || diag_errors) {
        fprintf(stderr, "  %s: kind %d is_int %d f %.17g errors %d\n", text, t.kind, t.is_int, t.f, diag_errors);
        failures++;
    }
}

/* The first token of text, which must be a byte size. */
static void check_bytes(const char *text, int64_t want)
{
    Token t = lex1(text);
    if (t.kind != TK_NUMBER || t.unit != U_BYTES || !t.is_int || t.i != want || diag_errors) {
        fprintf(stderr, "  %s: kind %d unit %d i %lld errors %d\n", text, t.kind, t.unit, (long long)t.i, diag_errors);
        failures++;
    }
}

/* The first token of text, which must be a bandwidth in bytes/s. */
static void check_bw(const char *text, double want)
{
    Token t = lex1(text);
    if (t.kind != TK_NUMBER || t.unit != U_BANDWIDTH || t.f != want || diag_errors) {
        fprintf(stderr, "  %s: kind %d unit %d f %.17g errors %d\n", text, t.kind, t.unit, t.f, diag_errors);
        failures++;
    }
}

/* Lexing text reports exactly one error whose text contains `msg`. */
static void check_error(const char *text, const char *msg)
{
    lex1(text);
    while (lx.cur < lx.lim) lex_next(&lx);
    if (diag_errors != 1 || !strstr(captured(), msg)) {
        fprintf(stderr, "  %s: %d errors, want one with '%s':\n%s", text, diag_errors, msg, captured());
        failures++;
    }
}

static void test_numbers(void)
{
    check_int("12", 12);
    check_int("0", 0);
    check_int("-3", -3);
    check_int("100K", 100000);
    check_int("1.5M", 1500000);
    check_int("2G", 2000000000);
    check_int("3T", 3000000000000);
    check_int("5e8", 500000000);
    check_int("1e5", 100000);
    check_int("1.0", 1);
    check_int("2.5e3", 2500);
    check_int("9223372036854775807", INT64_MAX);
    check_int("0.5K", 500);
    check_float("0.9", 0.9);
    check_float("6e-4", 6e-4);
    check_float("1e-8", 1e-8);
    check_float("-0.25", -0.25);
    check_float("1.5e-3", 1.5e-3);
    check_float("0.0001K", 0.1);
    check_bytes("1.5GB", 1500000000);
    check_bytes("32MiB", 33554432);
    check_bytes("80GB", 80000000000);
    check_bytes("2TiB", 2199023255552);
    check_bytes("512B", 512);
    check_bytes("4KiB", 4096);
    check_bytes("1.1GB", 1100000000);
    check_bw("450GB/s", 450e9);
    check_bw("200Gb/s", 25e9);
    check_bw("3.5GB/s", 3.5e9);
    check_bw("100Mb/s", 12.5e6);
    check_bw("10KB/s", 10e3);

    /* A word led by digits with a digit after its letters is a name. */
    Token t = lex1("1f1b");
    CHECK(t.kind == TK_IDENT && strcmp(t.str, "1f1b") == 0 && diag_errors == 0);

    /* The number ends where its word ends. */
    t = lex1("5e8,6");
    CHECK(t.kind == TK_NUMBER && t.i == 500000000);
    t = lex_next(&lx);
    CHECK(t.kind == TK_COMMA);
}

static void test_number_errors(void)
{
    char big[420];
    memset(big, '7', 400);
    big[400] = 0;
    check_error(big, "number too large");
    check_error("9223372036854775808", "number too large");
    check_error("10000000T", "number too large");
    check_error("1e999", "number too large");
    check_error("1e30", "number too large");
    check_error("0.3B", "whole number of bytes");
    check_error("12XB", "unknown unit 'XB'");
    check_error("10Gib", "did you mean 'GiB'?");
    check_error("1e", "malformed number '1e'");
    check_error("1e+", "malformed number '1e+'");
    check_error("3.4.5", "malformed number '3.4.5'");
    check_error("1.", "malformed number '1.'");
    check_error("1_000", "malformed number '1_000'");
    CHECK(strstr(captured(), "hint: a number is digits"));
    check_error("12XB", "units are K M G T");
    /* A malformed number is still a number to the parser. */
    Token t = lex1("3.4.5");
    CHECK(t.kind == TK_NUMBER);
}

static void test_words_and_strings(void)
{
    Token t = lex1("h100_sxm_80gb");
    CHECK(t.kind == TK_IDENT && strcmp(t.str, "h100_sxm_80gb") == 0);
    t = lex1("_x");
    CHECK(t.kind == TK_IDENT);
    t = lex1("on");
    CHECK(t.kind == TK_BOOL && t.i == 1);
    t = lex1("true");
    CHECK(t.kind == TK_BOOL && t.i == 1);
    t = lex1("off");
    CHECK(t.kind == TK_BOOL && t.i == 0);
    t = lex1("false");
    CHECK(t.kind == TK_BOOL && t.i == 0);
    t = lex1("online");
    CHECK(t.kind == TK_IDENT);
    t = lex1("include");
    CHECK(t.kind == TK_INCLUDE);
    t = lex1("extern");
    CHECK(t.kind == TK_EXTERN);

    t = lex1("\"data/train_*.bin\"");
    CHECK(t.kind == TK_STRING && strcmp(t.str, "data/train_*.bin") == 0 && t.loc.len == 18);
    t = lex1("\"a\\\"b\\\\c\\nd\\te\"");
    CHECK(t.kind == TK_STRING && strcmp(t.str, "a\"b\\c\nd\te") == 0 && diag_errors == 0);
    t = lex1("\"\"");
    CHECK(t.kind == TK_STRING && t.str[0] == 0);
    t = lex1("\"caf\xc3\xa9\"");
    CHECK(t.kind == TK_STRING && strcmp(t.str, "caf\xc3\xa9") == 0 && diag_errors == 0);

    check_error("\"abc", "unterminated string");
    check_error("\"abc\nx", "newline in a string");
    check_error("\"a\\qb\"", "unknown escape '\\q'");
    check_error("x @ y", "unexpected character '@'");
    check_error("\x01", "unexpected character '\\x01'");
    check_error("x\xc3\xa9", "unexpected characters '\\xc3\\xa9'");
    check_error("x ; y", "new lines or ','");
    check_error("- 1", "unexpected character '-'");

    /* The bad string still reaches the parser as a string. */
    t = lex1("\"abc\ny");
    CHECK(t.kind == TK_STRING && strcmp(t.str, "abc") == 0);
    t = lex_next(&lx);
    CHECK(t.kind == TK_IDENT && t.loc.line == 2);
}

static void test_punctuation_and_locations(void)
{
    const char *text = "model gpt {  # comment\n\tlayers = [1, (2)]\n}\n";
    Token t = lex1(text);
    int kinds[] = {TK_IDENT, TK_IDENT, TK_LBRACE, TK_IDENT, TK_EQ, TK_LBRACKET, TK_NUMBER, TK_COMMA,
                   TK_LPAREN, TK_NUMBER, TK_RPAREN, TK_RBRACKET, TK_RBRACE, TK_EOF};
    int n = (int)(sizeof kinds / sizeof kinds[0]);
    for (int i = 0; i < n; i++) {
        if (t.kind != kinds[i]) {
            fprintf(stderr, "  token %d: kind %d, want %d\n", i, t.kind, kinds[i]);
            failures++;
        }
        if (i == 1) CHECK(t.loc.line == 1 && t.loc.col == 7 && t.loc.len == 3 && strcmp(t.str, "gpt") == 0);
        if (i == 3) CHECK(t.loc.line == 2 && t.loc.col == 2 && t.loc.len == 6 && t.loc.pos == src.text + 24);
        if (i == 12) CHECK(t.loc.line == 3 && t.loc.col == 1);
        if (i == 13) CHECK(t.loc.line == 3 && t.loc.col == 2);   /* just past the last line */
        t = lex_next(&lx);
    }
    /* Past the end the lexer keeps saying so. */
    CHECK(t.kind == TK_EOF);
    CHECK(diag_errors == 0);

    t = lex1("");
    CHECK(t.kind == TK_EOF && t.loc.line == 1 && t.loc.col == 1);
    t = lex1("\xEF\xBB\xBFx");
    CHECK(t.kind == TK_IDENT && t.loc.col == 1);
}

static void test_nul_and_garbage(void)
{
    /* A NUL inside the file is an error; the one at the end is the end. */
    static const char with_nul[] = "a = 1\0\nb = 2\n";
    capture();
    src.path = "t.tspec";
    src.text = with_nul;
    src.len = sizeof with_nul - 1;
    lex_init(&lx, &src);
    int idents = 0;
    for (Token t = lex_next(&lx); t.kind != TK_EOF; t = lex_next(&lx)) idents += t.kind == TK_IDENT;
    CHECK(idents == 2 && diag_errors == 1 && strstr(captured(), "NUL byte"));

    /* Binary garbage: diag_max_errors errors, then one "too many errors". */
    static char junk[1 << 16];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof junk - 1; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (char)(x >> 16);
    }
    capture();
    src.text = junk;
    src.len = sizeof junk - 1;
    lex_init(&lx, &src);
    int tokens = 0;
    while (lex_next(&lx).kind != TK_EOF) tokens++;
    const char *out = captured();
    CHECK(diag_errors > diag_max_errors);
    const char *too = strstr(out, "too many errors");
    CHECK(too && !strstr(too + 1, "too many errors"));
    /* Nothing but that line after the limit. */
    CHECK(too && !strstr(too, "error:"));
}

int main(void)
{
    test_numbers();
    test_number_errors();
    test_words_and_strings();
    test_punctuation_and_locations();
    test_nul_and_garbage();
    fclose(diag_stream);
    diag_stream = NULL;
    free(diag_buf);
    arena_free(&g_arena);
    if (failures) {
        fprintf(stderr, "test_lexer: %d failures\n", failures);
        return 1;
    }
    printf("test_lexer: ok\n");
    return 0;
}
