#include "cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* About 50-100 microseconds of spinning before a worker sleeps. */
#define SPIN_ROUNDS 4000

typedef struct worker {
    cpu_pool *pool;
    int index;
    pthread_t thread;
} worker;

struct cpu_pool {
    int n;
    worker *workers;      /* [n-1]                                      */
    cpu_job_fn fn;
    void *ctx;
    atomic_uint gen;      /* bumped once per job                         */
    atomic_int pending;   /* workers still running the current job       */
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *arg)
{
    worker *w = arg;
    cpu_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ROUNDS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        p->fn(p->ctx, w->index, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

int cpu_pool_create(int n_threads, cpu_pool **out, inf_err *err)
{
    *out = NULL;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return inf_fail(err, INF_ERR_NOMEM, "cpu: out of memory for thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        cpu_pool_destroy(p);
        return inf_fail(err, INF_ERR_NOMEM, "cpu: out of memory for thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker *w = &p->workers[i - 1];
        w->pool = p;
        w->index = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            p->n = i; /* destroy joins only the ones started */
            cpu_pool_destroy(p);
            return inf_fail(err, INF_ERR_NOMEM, "cpu: cannot start thread %d of %d",
                            i, n_threads);
        }
    }
    *out = p;
    return INF_OK;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int cpu_pool_size(const cpu_pool *p) { return p->n; }

void cpu_pool_run(cpu_pool *p, cpu_job_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    /* the bump under the mutex pairs with the sleepers' check, so no wakeup
     * is lost; spinning workers see it without the lock */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        cpu_relax();
}

void cpu_pool_split(int n, int align, int t, int nt, int *lo, int *hi)
{
    if (align < 1)
        align = 1;
    int units = (n + align - 1) / align;
    int per = units / nt, extra = units % nt;
    int u0 = t * per + (t < extra ? t : extra);
    int u1 = u0 + per + (t < extra ? 1 : 0);
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}
