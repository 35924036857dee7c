/* threads.h — the CPU backend's choice of OpenMP threads and its check of a
 * launch (threads.c), as pure functions of the ranks' affinity masks, so
 * that tests can give them any node.  cpu_set_t needs _GNU_SOURCE defined
 * before the first system header of the including file. */
#ifndef SHARDRT_CPU_THREADS_H
#define SHARDRT_CPU_THREADS_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The threads rank r of a node's n ranks (affinity masks[n]) runs when
 * OMP_NUM_THREADS is unset: its CPUs over the ranks whose masks overlap
 * its own, at least 1. */
int cpu_threads_auto(const cpu_set_t *masks, int n, int r);
/* Whether the n ranks of a node of node_cpus CPUs (world ranks ranks[n],
 * running threads[n] OpenMP threads on masks[n]; from_env: the counts came
 * from OMP_NUM_THREADS) leave CPUs idle or make threads share them; if so,
 * msg holds one line saying so and what to launch instead. */
bool cpu_threads_check(const cpu_set_t *masks, const int *threads, const int64_t *ranks, int n, int node_cpus,
                       bool from_env, char *msg, size_t cap);

/* The CPUs of a cpuset list such as "0-3,8,10-11\n" (7), -1 if malformed. */
int cpu_list_count(const char *s);

#endif
