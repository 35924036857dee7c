/* test_arena.c — the compiler's arena: every allocation comes back zeroed,
 * whether its block is new or reused from the pool of freed arenas, and a
 * raw allocation (arena_alloc_raw: the caller writes it in full) leaves the
 * bytes after it zero for the allocations that follow; a pooled block much
 * bigger than a request is split, not passed over for new pages. */
#include "check.h"
#include "shardc.h"

/* Whether n bytes at p are all zero. */
static bool zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

/* Blocks freed dirty and reused by the next arenas: a block of small
 * requests, and a big request's own block, first dirtied in full, then
 * reused raw for fewer bytes (the bytes past them must be cleared), then
 * reused zeroed: every zeroed allocation is zero. */
static void test_reuse(void)
{
    enum { MB = 1 << 20, HEAD = 4 * MB - 64 * 1024, BIG = 3 * MB / 2, LESS = BIG - 64 * 1024 };
    for (int round = 0; round < 3; round++) {
        Arena a = {0};
        unsigned char *head = arena_alloc(&a, HEAD), *small = arena_alloc(&a, 100);
        CHECK(zero(head, HEAD) && zero(small, 100));
        memset(head, 0xab, HEAD), memset(small, 0xcd, 100);
        unsigned char *raw = arena_alloc_raw(&a, BIG);      /* a block of its own */
        memset(raw, 0xef, BIG);
        char *text = arena_printf(&a, "op %d of %s", 7, "x");
        CHECK(!strcmp(text, "op 7 of x"));
        arena_free(&a);

        Arena b = {0};
        head = arena_alloc(&b, HEAD);
        CHECK(zero(head, HEAD));
        memset(head, 0x22, HEAD);
        raw = arena_alloc_raw(&b, LESS);                    /* the dirty block, not cleared for it */
        memset(raw, 0x11, LESS);
        unsigned char *after = arena_alloc(&b, 5000);
        CHECK(zero(after, 5000));
        arena_free(&b);

        Arena c = {0};
        head = arena_alloc(&c, HEAD);
        unsigned char *big = arena_alloc(&c, BIG);          /* the same block, zeroed past LESS too */
        CHECK(zero(head, HEAD));
        CHECK(zero(big, BIG));
        arena_free(&c);
    }
}

/* A freed block of 12 MB, dirtied in full, serves the next arena's 5 MB and
 * then its next 5 MB from the tail split off it (before, neither took it: each
 * mapped new pages while the pool held these, and the plan's peak memory
 * counted both), each zeroed.  Runs first, on an empty pool. */
static void test_split(void)
{
    enum { MB = 1 << 20, WHOLE = 12 * MB, PART = 5 * MB, REST = 5 * MB };
    Arena a = {0};
    (void)arena_alloc(&a, 100);                             /* a block of small requests */
    unsigned char *whole = arena_alloc_raw(&a, WHOLE);      /* a block of its own */
    memset(whole, 0x5a, WHOLE);
    arena_free(&a);

    Arena b = {0};
    (void)arena_alloc(&b, 100);
    unsigned char *part = arena_alloc(&b, PART), *rest = arena_alloc(&b, REST);
    CHECK(part == whole);
    CHECK(rest > part + PART && rest + REST <= whole + WHOLE);
    CHECK(zero(part, PART) && zero(rest, REST));
    arena_free(&b);
}

int main(void)
{
    test_split();
    test_reuse();
    if (failures) fprintf(stderr, "test_arena: %d failures\n", failures);
    return failures != 0;
}
