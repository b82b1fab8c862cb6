/* kernels/cpu/threadpool.c — worker threads woken per parallel loop; they spin briefly before sleeping,
 * because a decode step issues hundreds of short loops and a futex wake-up per loop would dominate. */
#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin a little (a decode step's loops come microseconds apart), then yield, then sleep: on a machine with more
 * runnable threads than cores, a long spin steals the very core the thread being waited for needs. */
#define SPIN_ROUNDS 4000
#define YIELD_ROUNDS 64

struct threadpool {
	int32_t n;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic uint64_t generation;   /* bumped once per run */
	_Atomic int32_t pending;       /* workers still running the current loop */
	_Atomic bool stop;
	threadpool_fn fn;
	void *ctx;
};

typedef struct worker_arg {
	threadpool *tp;
	int32_t index;
} worker_arg;

static void *worker_main(void *p)
{
	worker_arg a = *(worker_arg *)p;
	free(p);
	threadpool *tp = a.tp;
	uint64_t seen = 0;
	for (;;) {
		uint64_t g;
		int spins = 0;
		while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
		       !atomic_load(&tp->stop)) {
			if (++spins < SPIN_ROUNDS) {
				cpu_relax();
				continue;
			}
			if (spins < SPIN_ROUNDS + YIELD_ROUNDS) {
				sched_yield();
				continue;
			}
			pthread_mutex_lock(&tp->mu);
			while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
				pthread_cond_wait(&tp->cv, &tp->mu);
			pthread_mutex_unlock(&tp->mu);
		}
		if (atomic_load(&tp->stop))
			return NULL;
		seen = g;
		tp->fn(tp->ctx, a.index, tp->n);
		atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel);
	}
}

threadpool *threadpool_init(int32_t n_threads)
{
	if (n_threads < 1)
		n_threads = 1;
	threadpool *tp = calloc(1, sizeof *tp);
	if (!tp)
		return NULL;
	tp->n = n_threads;
	pthread_mutex_init(&tp->mu, NULL);
	pthread_cond_init(&tp->cv, NULL);
	tp->threads = calloc((size_t)n_threads, sizeof *tp->threads);
	if (!tp->threads) {
		free(tp);
		return NULL;
	}
	for (int32_t i = 1; i < n_threads; i++) {
		worker_arg *a = malloc(sizeof *a);
		if (!a || (a->tp = tp, a->index = i, pthread_create(&tp->threads[i], NULL, worker_main, a) != 0)) {
			free(a);
			tp->n = i;   /* join what started */
			threadpool_free(tp);
			return NULL;
		}
	}
	return tp;
}

void threadpool_free(threadpool *tp)
{
	if (!tp)
		return;
	pthread_mutex_lock(&tp->mu);
	atomic_store(&tp->stop, true);
	pthread_cond_broadcast(&tp->cv);
	pthread_mutex_unlock(&tp->mu);
	for (int32_t i = 1; i < tp->n; i++)
		pthread_join(tp->threads[i], NULL);
	pthread_mutex_destroy(&tp->mu);
	pthread_cond_destroy(&tp->cv);
	free(tp->threads);
	free(tp);
}

int32_t threadpool_size(const threadpool *tp)
{
	return tp->n;
}

void threadpool_run(threadpool *tp, threadpool_fn fn, void *ctx)
{
	if (tp->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	tp->fn = fn;
	tp->ctx = ctx;
	atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_release);
	pthread_mutex_lock(&tp->mu);
	atomic_fetch_add_explicit(&tp->generation, 1, memory_order_acq_rel);
	pthread_cond_broadcast(&tp->cv);
	pthread_mutex_unlock(&tp->mu);
	fn(ctx, 0, tp->n);
	for (int spins = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) != 0; spins++) {
		if (spins < SPIN_ROUNDS)
			cpu_relax();
		else
			sched_yield();
	}
}
