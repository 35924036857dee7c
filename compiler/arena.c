/* arena.c — bump allocation for the compiler: everything lives until arena_free. */
#include "shardc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

Arena g_arena;

/* A block of at least n bytes, straight from the kernel: its pages come zeroed,
   and in huge pages where the kernel allows (one fault per 2 MiB, not per 4 KiB;
   a large plan touches some 300 MB of arena).  Out of memory is not a user
   error: the compiler cannot go on. */
static ArenaBlock *block_new(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("out of memory (%zu bytes)", n);
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

/* Returns n zeroed bytes aligned to 16, from the current block or a new one.
   Blocks come zeroed from the kernel and are never reused before arena_free,
   so no allocation has to clear its bytes. */
void *arena_alloc(Arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t min = (size_t)4 << 20, size = sizeof *b + n;
        size = size < min ? min : (size + 4095) & ~(size_t)4095;
        b = block_new(size);
        b->next = a->head;
        b->used = 0;
        b->cap = size - sizeof *b;
        a->head = b;
        a->total += b->cap;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

/* Copies n bytes of s into the arena and terminates them. */
char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

/* printf into the arena: formatted once, straight into the current block's free
   space when the text fits there (the usual case), else measured and formatted again. */
char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    ArenaBlock *b = a->head;
    size_t room = b ? b->cap - b->used : 0;
    int n = vsnprintf(room ? (char *)b->data + b->used : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) die("arena_printf: bad format \"%s\"", fmt);
    if ((size_t)n < room) {
        char *p = arena_alloc(a, (size_t)n + 1);   /* claims the bytes just written */
        va_end(ap2);
        return p;
    }
    char *p = arena_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

/* Frees every block at once. */
void arena_free(Arena *a)
{
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        munmap(b, sizeof *b + b->cap);
    }
    a->head = NULL;
    a->total = 0;
}
