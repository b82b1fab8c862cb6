/* kernels/cpu/threadpool.h — a fixed set of worker threads that run one parallel loop at a time.
 * The caller is worker 0, so a pool of n threads starts n - 1; a run costs one wake-up, no allocation. */
#ifndef AAH_THREADPOOL_H
#define AAH_THREADPOOL_H

#include <stdint.h>

typedef struct threadpool threadpool;

/* fn(ctx, i, n) runs once on each worker i of n. */
typedef void (*threadpool_fn)(void *ctx, int32_t i, int32_t n);

/* n_threads ≥ 1. NULL when threads cannot be started. Free with threadpool_free. */
threadpool *threadpool_init(int32_t n_threads);
void threadpool_free(threadpool *tp);
int32_t threadpool_size(const threadpool *tp);
/* Runs fn on every worker and returns when all are done. Not reentrant: one caller at a time. */
void threadpool_run(threadpool *tp, threadpool_fn fn, void *ctx);

#endif
