/* cpu_pool: a fixed set of worker threads for the CPU backend's parallel
 * loops. The calling thread takes part as thread 0, so a pool of n threads
 * starts n-1 workers. Workers spin briefly between jobs (a forward pass runs
 * hundreds of short jobs back to back) and then sleep on a condition variable
 * so an idle server burns no CPU. */
#ifndef INFERD_CPU_POOL_H
#define INFERD_CPU_POOL_H

#include "engine/common.h"

typedef struct cpu_pool cpu_pool;

/* fn(ctx, t, n) runs once on each thread t in [0, n). */
typedef void (*cpu_job_fn)(void *ctx, int t, int n);

/* n_threads <= 0 means one per online CPU. */
int cpu_pool_create(int n_threads, cpu_pool **out, inf_err *err);
void cpu_pool_destroy(cpu_pool *p); /* joins the workers; NULL-safe */

int cpu_pool_size(const cpu_pool *p);

/* Runs fn on every thread and returns when all are done. Not reentrant: one
 * caller at a time (the engine thread). */
void cpu_pool_run(cpu_pool *p, cpu_job_fn fn, void *ctx);

/* [*lo, *hi) of n items for thread t of nt, boundaries on multiples of
 * align (the last range takes the remainder). */
void cpu_pool_split(int n, int align, int t, int nt, int *lo, int *hi);

#endif
