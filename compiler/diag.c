/* diag.c — diagnostics: `file:line:col: error: msg`, the source line, a caret, a hint. */
#include "shardc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int diag_errors, diag_warnings;
int diag_max_errors = 20;
FILE *diag_stream;
bool diag_color;
static bool stopped_note;       /* "too many errors" printed once */

static FILE *out(void) { return diag_stream ? diag_stream : stderr; }

void diag_reset(void)
{
    diag_errors = diag_warnings = 0;
    stopped_note = false;
}

bool diag_too_many(void) { return diag_errors >= diag_max_errors; }

static const char *col(const char *c) { return diag_color ? c : ""; }

/* Prints the line holding loc and a caret line under its span. */
static void show_line(Loc loc)
{
    if (!loc.file || !loc.pos || loc.line <= 0) return;
    const char *text = loc.file->text, *end = text + loc.file->len;
    const char *b = loc.pos, *e = loc.pos;
    while (b > text && b[-1] != '\n') b--;
    while (e < end && *e != '\n') e++;
    FILE *f = out();
    fprintf(f, "  ");
    int width = 0;
    for (const char *p = b; p < e && width < 200; p++, width++) {
        unsigned char c = (unsigned char)*p;
        fputc(c == '\t' ? ' ' : (c < 32 || c == 127) ? '?' : c, f);
    }
    fputc('\n', f);
    int caret_col = (int)(loc.pos - b);
    if (caret_col > 200) return;
    int len = loc.len > 0 ? loc.len : 1;
    if (caret_col + len > width + 1) len = width + 1 - caret_col > 0 ? width + 1 - caret_col : 1;
    fprintf(f, "  %*s%s^", caret_col, "", col("\033[1;32m"));
    for (int i = 1; i < len; i++) fputc('~', f);
    fprintf(f, "%s\n", col("\033[0m"));
}

/* The common body of error, warning and note. */
static void report(Loc loc, const char *kind, const char *color, const char *fmt, va_list ap)
{
    FILE *f = out();
    if (loc.file) fprintf(f, "%s%s:%d:%d: ", col("\033[1m"), loc.file->path, loc.line, loc.col);
    else fprintf(f, "%sshardc: ", col("\033[1m"));
    fprintf(f, "%s%s:%s ", col(color), kind, col("\033[0;1m"));
    vfprintf(f, fmt, ap);
    fprintf(f, "%s\n", col("\033[0m"));
    show_line(loc);
}

void diag_error(Loc loc, const char *fmt, ...)
{
    if (diag_too_many()) {
        if (!stopped_note) {
            stopped_note = true;
            fprintf(out(), "shardc: too many errors (%d), stopping\n", diag_errors);
        }
        diag_errors++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", "\033[1;31m", fmt, ap);
    va_end(ap);
    diag_errors++;
}

void diag_warning(Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(loc, "warning", "\033[1;35m", fmt, ap);
    va_end(ap);
    diag_warnings++;
}

void diag_note(Loc loc, const char *fmt, ...)
{
    if (diag_too_many() && stopped_note) return;
    va_list ap;
    va_start(ap, fmt);
    report(loc, "note", "\033[1;36m", fmt, ap);
    va_end(ap);
}

void diag_hint(const char *fmt, ...)
{
    if (diag_too_many() && stopped_note) return;
    FILE *f = out();
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "  %shint:%s ", col("\033[1;36m"), col("\033[0m"));
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    va_end(ap);
}

void diag_plain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report((Loc){0}, "error", "\033[1;31m", fmt, ap);
    va_end(ap);
    diag_errors++;
}

_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shardc: internal error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nThis is a bug in shardc; please report it with the spec that caused it.\n");
    va_end(ap);
    exit(EXIT_INTERNAL);
}
