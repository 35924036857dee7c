/* check.c — the checking mode: a race detector for the generated schedule.
 *
 * The CPU backend runs every op when it is issued, so a missing event never
 * corrupts a CPU run; it would on a GPU, where streams really overlap.  The
 * checker therefore treats streams as concurrent and proves each access
 * ordered after every conflicting earlier one.  Vector clocks: clock[X][Y] is
 * the last tick of stream Y that stream X is known to follow (clock[X][X] is
 * X's own tick, one per op).  Event record / wait and stream sync move those
 * clocks as the real streams would be ordered.
 *
 * Memory history is an interval map over addresses (and NVMe offsets): a
 * sorted array of disjoint byte ranges, each holding its last write (stream,
 * tick, op) and, per stream, the last read since.  Exact byte ranges, so that
 * two views side by side in one buffer (a bucket next to the next layer's
 * gradients) never look shared.  A range whose every access is ordered
 * before every stream's present can never conflict again: the collector
 * drops such history at every stream sync and whenever the table has
 * doubled, so its size follows the live cross-stream traffic, not the
 * length of the run.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* The history of one byte range. */
typedef struct chk_hist {
    uint64_t wtick;                     /* 0: no write recorded              */
    uint64_t rtick[SRT_NSTREAMS];       /* 0: no read since the write        */
    uint16_t wop, rop[SRT_NSTREAMS];
    int8_t wstream;
    uint8_t pad;                        /* no implicit padding: compared by memcmp */
} chk_hist;

typedef struct chk_iv {
    uint64_t lo, hi;                    /* [lo, hi) in the key space         */
    chk_hist h;
} chk_iv;

enum { CHK_CAP = 1 << 15 };             /* live ranges; ~3 MiB per table     */
#define CHK_NVME_KEY (1ull << 62)       /* NVMe offsets live above every address */

struct chk_state {
    uint64_t clock[SRT_NSTREAMS][SRT_NSTREAMS];
    uint64_t evclock[SRT_MAX_EVENTS][SRT_NSTREAMS];
    int op;                             /* the op being recorded             */
    srt_stream s;
    uint64_t tick;
    int64_t races;
    int nseen;                          /* earlier ops this op was reported against */
    uint64_t seen[8];                   /* (stream << 56 | tick) of each            */
    int64_t n;                          /* ranges in iv                      */
    int64_t gc_at;                      /* collect when n passes this        */
    chk_iv iv[CHK_CAP];
    chk_iv tmp[CHK_CAP];                /* the replacement of one access     */
    char msg[1024];
};

enum { CHK_GC_MIN = 1024 };

/* Allocates the checker (one counted allocation). */
void chk_create(srt_ctx *c)
{
    c->chk = ctx_alloc(c, (int64_t)sizeof(struct chk_state), "the race checker");
    c->chk->gc_at = CHK_GC_MIN;
}

/* Races reported so far. */
int64_t chk_races(const srt_ctx *c) { return c->chk ? c->chk->races : 0; }

/* Live ranges in the table. */
int64_t chk_ranges(const srt_ctx *c) { return c->chk ? c->chk->n : 0; }

/* Starts recording op on stream s: one tick of s. */
void chk_op(srt_ctx *c, int op, srt_stream s)
{
    struct chk_state *k = c->chk;
    k->op = op;
    k->s = s;
    k->tick = ++k->clock[s][s];
    k->nseen = 0;
}

static void chk_collect(struct chk_state *k);

/* ev := the clock of s. */
void chk_event_record(srt_ctx *c, srt_stream s, int ev)
{
    memcpy(c->chk->evclock[ev], c->chk->clock[s], sizeof c->chk->clock[s]);
}

/* s follows everything ev captured. */
void chk_event_wait(srt_ctx *c, srt_stream s, int ev)
{
    struct chk_state *k = c->chk;
    for (int y = 0; y < SRT_NSTREAMS; y++)
        if (k->evclock[ev][y] > k->clock[s][y]) k->clock[s][y] = k->evclock[ev][y];
}

/* The host waited for s: whatever is issued next, on any stream, follows it. */
void chk_stream_sync(srt_ctx *c, srt_stream s)
{
    struct chk_state *k = c->chk;
    for (int x = 0; x < SRT_NSTREAMS; x++)
        for (int y = 0; y < SRT_NSTREAMS; y++)
            if (k->clock[s][y] > k->clock[x][y]) k->clock[x][y] = k->clock[s][y];
    chk_collect(k);   /* a sync is where history becomes settled: drop it now */
}

/* ---- naming a range in a report ---------------------------------------------------- */

/* Appends "device buffer NAME bytes [a, b)" or the like for keys [lo, hi). */
static void chk_describe(const srt_ctx *c, uint64_t lo, uint64_t hi, char *out, size_t len)
{
    if (lo >= CHK_NVME_KEY) {
        snprintf(out, len, "NVMe bytes [%llu, %llu)", (unsigned long long)(lo - CHK_NVME_KEY),
                 (unsigned long long)(hi - CHK_NVME_KEY));
        return;
    }
    const uint8_t *p = (const uint8_t *)(uintptr_t)lo;
    if (p == (const uint8_t *)&c->acc_sumsq) { snprintf(out, len, "the gradient-norm accumulator"); return; }
    if (p == (const uint8_t *)&c->acc_clip) { snprintf(out, len, "the gradient clipping scale"); return; }
    if (p == (const uint8_t *)&c->acc_loss) { snprintf(out, len, "the step's loss"); return; }
    const char *arena = NULL;
    int space = 0;
    int64_t off = 0;
    if (c->dev && p >= c->dev && p < c->dev + c->dev_bytes) arena = "device", off = p - c->dev;
    else if (c->host && p >= c->host && p < c->host + c->host_bytes)
        arena = "host", space = 1, off = p - c->host;
    if (!arena) {
        snprintf(out, len, "memory [%p, +%llu)", (const void *)p, (unsigned long long)(hi - lo));
        return;
    }
    int64_t end = off + (int64_t)(hi - lo);
    for (int i = 0; i < c->cls->nbuffers; i++) {
        const srt_buffer *b = &c->cls->buffers[i];
        if (b->space == space && off >= b->offset && off < b->offset + b->bytes) {
            snprintf(out, len, "%s buffer %s bytes [%lld, %lld)", arena, b->name,
                     (long long)(off - b->offset), (long long)(end - b->offset));
            return;
        }
    }
    snprintf(out, len, "%s arena bytes [%lld, %lld)", arena, (long long)off, (long long)end);
}

/* Reports one race: the current op's access against an earlier one (op pop,
 * stream pstream, tick ptick).  One report per pair of ops: an accumulate
 * reads and writes the same range, and a race over several ranges is one
 * mistake. */
static void chk_report(srt_ctx *c, bool write, uint64_t lo, uint64_t hi, int pop, int pstream,
                       uint64_t ptick, bool pwrite)
{
    struct chk_state *k = c->chk;
    uint64_t id = (uint64_t)pstream << 56 | ptick;
    for (int i = 0; i < k->nseen; i++)
        if (k->seen[i] == id) return;
    if (k->nseen < (int)(sizeof k->seen / sizeof k->seen[0])) k->seen[k->nseen++] = id;
    char range[512];
    chk_describe(c, lo, hi, range, sizeof range);
    snprintf(k->msg, sizeof k->msg, "race: %s on %s %s %s %s by %s on %s without an event between them",
             ops_name(k->op), ops_stream_name(k->s), write ? "writes" : "reads", range,
             pwrite ? "written" : "read", ops_name(pop), ops_stream_name((srt_stream)pstream));
    k->races++;
    if (c->opt.on_race) c->opt.on_race(c->opt.race_ud, k->msg);
    else ctx_fatal(c, 3, "%s (the schedule lacks an event: a shardc bug)", k->msg);
}

/* Reports the first access of h that the current access conflicts with;
 * returns whether there was one. */
static bool chk_conflict(srt_ctx *c, const chk_hist *h, bool write, uint64_t lo, uint64_t hi)
{
    struct chk_state *k = c->chk;
    const uint64_t *mine = k->clock[k->s];
    if (h->wtick && h->wstream != (int)k->s && mine[h->wstream] < h->wtick) {
        chk_report(c, write, lo, hi, h->wop, h->wstream, h->wtick, true);
        return true;
    }
    if (!write) return false;
    for (int y = 0; y < SRT_NSTREAMS; y++)
        if (y != (int)k->s && h->rtick[y] && mine[y] < h->rtick[y]) {
            chk_report(c, write, lo, hi, h->rop[y], y, h->rtick[y], false);
            return true;
        }
    return false;
}

/* Drops every access that all streams are ordered after (it can no longer
 * conflict), then every range left without history, then merges equal
 * neighbours. */
static void chk_collect(struct chk_state *k)
{
    uint64_t settled[SRT_NSTREAMS];
    for (int y = 0; y < SRT_NSTREAMS; y++) {
        settled[y] = k->clock[0][y];
        for (int x = 1; x < SRT_NSTREAMS; x++)
            if (k->clock[x][y] < settled[y]) settled[y] = k->clock[x][y];
    }
    int64_t m = 0;
    for (int64_t i = 0; i < k->n; i++) {
        chk_iv v = k->iv[i];
        if (v.h.wtick && settled[v.h.wstream] >= v.h.wtick) v.h.wtick = 0, v.h.wop = 0, v.h.wstream = 0;
        bool any = v.h.wtick != 0;
        for (int y = 0; y < SRT_NSTREAMS; y++) {
            if (v.h.rtick[y] && settled[y] >= v.h.rtick[y]) v.h.rtick[y] = 0, v.h.rop[y] = 0;
            any |= v.h.rtick[y] != 0;
        }
        if (!any) continue;
        if (m > 0 && k->iv[m - 1].hi == v.lo && memcmp(&k->iv[m - 1].h, &v.h, sizeof v.h) == 0)
            k->iv[m - 1].hi = v.hi;
        else
            k->iv[m++] = v;
    }
    k->n = m;
    /* amortised: the next collection waits until the table has doubled */
    k->gc_at = 2 * m > CHK_GC_MIN ? 2 * m : CHK_GC_MIN;
}

/* The first range whose end is past key (k->n if none). */
static int64_t chk_find(const struct chk_state *k, uint64_t key)
{
    int64_t lo = 0, hi = k->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (k->iv[mid].hi <= key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Appends [lo, hi) with history h to the replacement list, merging with the
 * previous entry when they touch and agree. */
static void chk_emit(struct chk_state *k, int64_t *nt, uint64_t lo, uint64_t hi, const chk_hist *h)
{
    if (lo >= hi) return;
    if (*nt > 0 && k->tmp[*nt - 1].hi == lo && memcmp(&k->tmp[*nt - 1].h, h, sizeof *h) == 0) {
        k->tmp[*nt - 1].hi = hi;
        return;
    }
    k->tmp[*nt].lo = lo;
    k->tmp[*nt].hi = hi;
    k->tmp[*nt].h = *h;
    (*nt)++;
}

/* The history of a range after the current access. */
static chk_hist chk_after(const struct chk_state *k, const chk_hist *before, bool write)
{
    chk_hist h;
    if (write) {
        memset(&h, 0, sizeof h);
        h.wtick = k->tick, h.wop = (uint16_t)k->op, h.wstream = (int8_t)k->s;
    } else {
        h = *before;
        h.rtick[k->s] = k->tick, h.rop[k->s] = (uint16_t)k->op;
    }
    return h;
}

/* Checks and records the current op's access to keys [lo, hi). */
static void chk_access(srt_ctx *c, uint64_t lo, uint64_t hi, bool write)
{
    struct chk_state *k = c->chk;
    if (lo >= hi) return;
    int64_t i = chk_find(k, lo), j = i;
    while (j < k->n && k->iv[j].lo < hi) j++;
    /* the replacement of [i, j) has at most 2(j-i) + 1 entries */
    if (k->n > k->gc_at || k->n + (j - i) + 3 > CHK_CAP) {
        chk_collect(k);
        i = chk_find(k, lo), j = i;
        while (j < k->n && k->iv[j].lo < hi) j++;
        if (k->n + (j - i) + 3 > CHK_CAP)
            ctx_die(c, "the race checker tracks more than %d live byte ranges", (int)CHK_CAP);
    }
    bool reported = false;
    for (int64_t m = i; m < j && !reported; m++) {
        const chk_iv *a = &k->iv[m];
        uint64_t olo = a->lo > lo ? a->lo : lo, ohi = a->hi < hi ? a->hi : hi;
        reported = chk_conflict(c, &a->h, write, olo, ohi);
    }
    chk_hist none;
    memset(&none, 0, sizeof none);
    chk_hist fresh = chk_after(k, &none, write);
    int64_t nt = 0;
    if (i > 0 && k->iv[i - 1].hi == lo) {   /* may merge with the left neighbour */
        i--;
        chk_emit(k, &nt, k->iv[i].lo, k->iv[i].hi, &k->iv[i].h);
    }
    uint64_t pos = lo;
    for (int64_t m = (nt ? i + 1 : i); m < j; m++) {
        const chk_iv *a = &k->iv[m];
        if (a->lo < lo) chk_emit(k, &nt, a->lo, lo, &a->h);
        if (a->lo > pos) chk_emit(k, &nt, pos, a->lo, &fresh);
        uint64_t olo = a->lo > lo ? a->lo : lo, ohi = a->hi < hi ? a->hi : hi;
        chk_hist h = chk_after(k, &a->h, write);
        chk_emit(k, &nt, olo, ohi, &h);
        pos = ohi;
        if (a->hi > hi) chk_emit(k, &nt, hi, a->hi, &a->h);
    }
    if (pos < hi) chk_emit(k, &nt, pos, hi, &fresh);
    if (j < k->n && k->iv[j].lo == hi) {    /* and with the right one */
        chk_emit(k, &nt, k->iv[j].lo, k->iv[j].hi, &k->iv[j].h);
        j++;
    }
    memmove(&k->iv[i + nt], &k->iv[j], (size_t)(k->n - j) * sizeof k->iv[0]);
    memcpy(&k->iv[i], k->tmp, (size_t)nt * sizeof k->iv[0]);
    k->n += nt - (j - i);
}

/* Records a read of memory by the current op. */
void chk_read(srt_ctx *c, const void *p, int64_t bytes)
{
    if (p && bytes > 0) chk_access(c, (uintptr_t)p, (uintptr_t)p + (uint64_t)bytes, false);
}

/* Records a write of memory by the current op. */
void chk_write(srt_ctx *c, const void *p, int64_t bytes)
{
    if (p && bytes > 0) chk_access(c, (uintptr_t)p, (uintptr_t)p + (uint64_t)bytes, true);
}

/* Records an access to the NVMe file by the current op. */
void chk_nvme(srt_ctx *c, int64_t offset, int64_t bytes, bool write)
{
    if (bytes > 0)
        chk_access(c, CHK_NVME_KEY + (uint64_t)offset, CHK_NVME_KEY + (uint64_t)(offset + bytes), write);
}
