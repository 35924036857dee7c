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

/* Blocks of freed arenas, kept for the next arenas (period.c's scratch plans
   free and refill some 200 MB each): their pages are already faulted in.  At
   most POOL_MAX bytes are kept; the rest go back to the kernel (tune frees
   hundreds of plans: keeping every block held 1.1 GB for a 175B search). */
static ArenaBlock *pool;
static size_t pool_bytes;
enum { POOL_MAX_MB = 384 };
/* Requests of this many bytes or more that do not fit the current block get
   a block of their own (below) instead of abandoning the current block's room. */
enum { BIG = 256 << 10 };
enum { BLOCK_MIN = 4 << 20 };   /* bytes of a block of small requests */

/* A block with room for n bytes (exact: the pages n needs; else at least
   BLOCK_MIN, which only a block that big serves), all zero (but for the first n
   bytes when !clear): from the pool, its used prefix
   cleared (the bytes past `used` were never written), or straight from the
   kernel, whose pages come zeroed.  Small pages: huge ones (MADV_HUGEPAGE) saved
   TLB misses on a warm machine, but each had the kernel compact memory or fault
   in a page it had handed back, and on a busy one the 1008B row's plan took
   1.0-1.4 s, once 4.8 s, against 0.87-0.89 s.  Out of memory is not a user
   error: the compiler cannot go on. */
static ArenaBlock *block_new(size_t n, bool exact, bool clear)
{
    size_t size = sizeof(ArenaBlock) + n;
    size = size < BLOCK_MIN && !exact ? BLOCK_MIN : (size + 4095) & ~(size_t)4095;
    size_t cap = size - sizeof(ArenaBlock);
    ArenaBlock **best = NULL;   /* the smallest pooled block that fits: a big one stays for a big request */
    for (ArenaBlock **pp = &pool; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= cap && (!best || (*pp)->cap < (*best)->cap)) best = pp;
    /* a block with BIG more room than asked is split, its tail pooled for the
       exact requests (its pages stay resident: mapping new ones instead held
       both, and the three scratch plans of gpt3-175b with the column chunks,
       each op list a third smaller than the last one's block, 411 MB at
       peak); with less, an exact request leaves a block of much more room to
       the requests it suits */
    if (best && (*best)->cap - cap < BIG && exact && (*best)->cap - cap > cap / 4) best = NULL;
    if (best) {
        ArenaBlock *b = *best;
        *best = b->next;
        pool_bytes -= b->cap + sizeof *b;
        if (b->cap - cap >= BIG) {
            /* the tail from byte `size` on (page-aligned: munmap frees it alone);
               its dirty prefix is what b had written past there */
            ArenaBlock *t = (ArenaBlock *)((unsigned char *)b + size);
            size_t dirty = b->used + sizeof *b;     /* b's written bytes, from b */
            t->cap = b->cap - size;
            t->used = dirty > size + sizeof *t ? dirty - size - sizeof *t : 0;
            t->next = pool;
            pool = t;
            pool_bytes += t->cap + sizeof *t;
            b->cap = cap;
            if (b->used > cap) b->used = cap;
        }
        /* !clear: the caller writes its n bytes itself; only those past them are cleared */
        size_t keep = clear ? 0 : ((n + 15) & ~(size_t)15);
        if (b->used > keep) memset(b->data + keep, 0, b->used - keep);
        b->used = 0;
        return b;
    }
    ArenaBlock *b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) die("out of memory (%zu bytes)", size);
    b->used = 0;
    b->cap = cap;
    return b;
}

/* n bytes aligned to 16, from the current block or a new one; zeroed unless
   !clear (a big request the caller writes in full).  Every block's bytes past
   `used` are zero, so no allocation has to clear its bytes. */
static void *alloc(Arena *a, size_t n, bool clear)
{
    n = (n + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (b && b->cap - b->used < n && n >= BIG) {
        /* a big request gets a block behind the current one, which keeps its
           room for the small ones after it */
        ArenaBlock *big = block_new(n, true, clear);
        big->next = b->next;
        b->next = big;
        a->total += big->cap;
        big->used = n;
        return big->data;
    }
    if (!b || b->cap - b->used < n) {
        b = block_new(n, false, true);
        b->next = a->head;
        a->head = b;
        a->total += b->cap;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

/* Returns n zeroed bytes aligned to 16. */
void *arena_alloc(Arena *a, size_t n) { return alloc(a, n, true); }

/* Returns n bytes aligned to 16 that the caller writes in full before reading
   them (a schedule's op list, some hundred MB at scale): a block reused from
   the pool is not cleared for them. */
void *arena_alloc_raw(Arena *a, size_t n) { return alloc(a, n, false); }

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
    if (room) memset(b->data + b->used, 0, room);    /* keeps the free space zero */
    char *p = arena_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

/* Frees every block at once, into the pool. */
void arena_free(Arena *a)
{
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        size_t size = b->cap + sizeof *b;
        if (pool_bytes + size > (size_t)POOL_MAX_MB << 20) {
            munmap(b, size);
            continue;
        }
        b->next = pool;
        pool = b;
        pool_bytes += size;
    }
    a->head = NULL;
    a->total = 0;
}
