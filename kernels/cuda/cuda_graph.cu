/* kernels/cuda/cuda_graph.cu — decode steps recorded once per shape as CUDA graphs and replayed (backend.h's step_begin
 * and step_end), with the two host-to-device arenas that carry everything a step varies.
 *
 * The engine brackets the layers of a decode step (every item one new token, no probe) with step_begin(key) …
 * step_end, the key naming its launch sequence (the number of rows). The first step of a key is captured: the ops
 * run their host-side planning as always, write their tables into the step arenas instead of the staging arena, and
 * launch into the capturing stream; at step_end the graph is instantiated, the arenas go up (two cudaMemcpyAsync
 * from pinned memory) and the graph is launched. A later step of the same key only plans: the ops refill the arenas
 * (the fixed one byte for byte in the same places, the packed one as long as its tables are) and launch nothing; at
 * step_end the arenas go up and the cached graph is launched. The kernels take whatever varies from those
 * arenas: ids, positions, kv_store entries and their count, and each attention call's plan (page lists, windows,
 * items, split-K partitions and their number), so their grids are sized by bounds of the key and surplus blocks
 * exit. A step that finds a buffer too small (the fixed or packed arena, the scratch that graphs name) is aborted:
 * nothing it planned is launched, its needs are recorded, and step_end returns 1 so that the engine runs the same
 * ops again eagerly; the buffers grow then, and the next step of the key captures. Work counting is unchanged: the
 * kernels add into the same device counter, and each op returns its plan's count as it plans. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "kernels/cuda/cuda_ctx.cuh"

#define GRAPH_CACHE 64   /* keys kept (decode batch sizes); the least recently used is replaced */
#define ROOT_BYTES 16    /* the step root at the start of the fixed arena: the packed arena's device address */

enum { STEP_NONE = 0, STEP_CAPTURE = 1, STEP_REPLAY = 2 };

typedef struct cuda_graph {
	uint64_t key;
	cudaGraphExec_t exec;   /* NULL: an empty entry */
	size_t fix_used;        /* the fixed arena its step fills: a replay must fill exactly as much */
	uint64_t last_use;
} cuda_graph;

bool step_launches(const cuda_ctx *c)
{
	return c->step_mode == STEP_NONE || (c->step_mode == STEP_CAPTURE && !c->step_abort);
}

void *step_fixed(cuda_ctx *c, size_t bytes, void **dev)
{
	const size_t at = c->fix_used;
	c->fix_used += align_up(bytes ? bytes : 1, 16);
	if (c->step_abort || c->fix_used > c->fix_cap) {
		c->step_abort = true;
		return NULL;
	}
	*dev = c->d_fix + at;
	return c->h_fix + at;
}

void *step_packed(cuda_ctx *c, size_t bytes, size_t *off)
{
	const size_t at = c->pack_used;
	c->pack_used += align_up(bytes ? bytes : 1, 16);
	if (c->step_abort || c->pack_used > c->pack_cap) {
		c->step_abort = true;
		return NULL;
	}
	*off = at;
	return c->h_pack + at;
}

const uint8_t *const *step_root(const cuda_ctx *c)
{
	return (const uint8_t *const *)c->d_fix;
}

/* Destroys one entry's graph after the stream has drained (the last step may still run it): a wait, but only when
 * a buffer grows or more keys than GRAPH_CACHE are in use. */
static void graph_destroy(cuda_ctx *c, cuda_graph *g)
{
	if (!g->exec)
		return;
	CUDA_CHECK(c, cudaStreamSynchronize(c->stream));
	CUDA_CHECK(c, cudaGraphExecDestroy(g->exec));
	g->exec = NULL;
}

void graphs_drop(cuda_ctx *c)
{
	for (int i = 0; c->graph_cache && i < GRAPH_CACHE; i++)
		graph_destroy(c, &c->graph_cache[i]);
}

/* Pinned host and device buffers of one arena, both at least `bytes` (contents are not kept). Outside any step. */
static bool arena_grow(cuda_ctx *c, uint8_t **h, uint8_t **d, size_t *cap, size_t bytes)
{
	if (bytes <= *cap)
		return true;
	const size_t n = align_up(std::max(bytes, *cap + *cap / 2), (size_t)64 << 10);
	/* the last step's uploads read the host side and its graph the device side: let them finish (growth only) */
	if (!CUDA_CHECK(c, cudaStreamSynchronize(c->stream)))
		return false;
	if (*h)
		CUDA_CHECK(c, cudaFreeHost(*h));
	if (*d)
		CUDA_CHECK(c, cudaFree(*d));
	*h = *d = NULL;
	*cap = 0;
	if (!CUDA_CHECK(c, cudaHostAlloc((void **)h, n, cudaHostAllocDefault)) ||
	    !CUDA_CHECK(c, cudaMalloc((void **)d, n)))
		return false;
	*cap = n;
	return true;
}

bool graphs_init(cuda_ctx *c)
{
	const char *g = getenv("AAH_CUDA_GRAPHS");
	c->graphs_on = !(g && !strcmp(g, "0"));
	c->graph_cache = (cuda_graph *)calloc(GRAPH_CACHE, sizeof *c->graph_cache);
	if (!c->graph_cache) {
		cuda_fail(c, "out of host memory");
		return false;
	}
	/* the arenas start empty: the first recorded step finds them too small, runs eagerly and sizes them */
	return CUDA_CHECK(c, cudaEventCreateWithFlags(&c->fix_done, cudaEventDisableTiming));
}

void graphs_free(cuda_ctx *c)
{
	graphs_drop(c);
	free(c->graph_cache);
	c->graph_cache = NULL;
	if (c->fix_done)
		cudaEventDestroy(c->fix_done);
	cudaFreeHost(c->h_fix);
	cudaFreeHost(c->h_pack);
	cudaFree(c->d_fix);
	cudaFree(c->d_pack);
}

int cuda_step_begin(cuda_ctx *c, uint64_t key)
{
	if (!c->graphs_on || c->failed || !c->graph_cache)
		return 0;
	/* the arenas are about to be written: the previous step's uploads must have read them (normally long done: the
	 * engine has read that step's logits since) */
	if (!CUDA_CHECK(c, cudaEventSynchronize(c->fix_done)))
		return 0;
	cuda_graph *g = NULL, *lru = &c->graph_cache[0];
	for (int i = 0; i < GRAPH_CACHE && !g; i++) {
		cuda_graph *e = &c->graph_cache[i];
		if (e->exec && e->key == key)
			g = e;
		else if (!e->exec || (lru->exec && e->last_use < lru->last_use))
			lru = e;
	}
	c->step_abort = false;
	c->fix_used = ROOT_BYTES;
	c->pack_used = 0;
	c->scratch_need = 0;
	c->work_at_step = c->work_expected;
	c->step_pos = NULL;
	c->step_freq = NULL;
	c->step_pos_n = c->step_freq_n = 0;
	if (g) {
		c->step_mode = STEP_REPLAY;
	} else {
		g = lru;
		graph_destroy(c, g);
		g->key = key;
		if (!CUDA_CHECK(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal)))
			return 0;
		c->step_mode = STEP_CAPTURE;
	}
	g->last_use = ++c->graph_clock;
	c->graph_cur = g;
	return 1;
}

int cuda_step_end(cuda_ctx *c)
{
	cuda_graph *g = c->graph_cur;
	const int mode = c->step_mode;
	c->step_mode = STEP_NONE;
	c->graph_cur = NULL;
	if (mode == STEP_CAPTURE) {
		cudaGraph_t graph = NULL;
		const cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
		if (!c->step_abort && CUDA_CHECK(c, e) && graph)
			CUDA_CHECK(c, cudaGraphInstantiate(&g->exec, graph, 0));
		if (graph)
			CUDA_CHECK(c, cudaGraphDestroy(graph));
		if (c->failed)
			return 0;   /* the backend's error says why; the engine reports it */
		if (!c->step_abort)
			c->n_captured++;
		g->fix_used = c->fix_used;
	} else if (mode == STEP_REPLAY && !c->step_abort && c->fix_used != g->fix_used) {
		/* the same key filled the fixed arena differently: its launches would read the wrong places */
		graph_destroy(c, g);
		c->step_abort = true;
	}
	if (c->step_abort) {
		/* nothing was launched: grow what was too small (outside the step now) and let the engine run it eagerly */
		if (c->fix_used > c->fix_cap) {
			graphs_drop(c);   /* they name the fixed arena */
			arena_grow(c, &c->h_fix, &c->d_fix, &c->fix_cap, c->fix_used);
		}
		arena_grow(c, &c->h_pack, &c->d_pack, &c->pack_cap, c->pack_used);
		if (c->scratch_need > 0)
			scratch_reserve(c, c->scratch_need);
		c->work_expected = c->work_at_step;
		c->step_abort = false;
		c->n_eager_steps++;
		return 1;
	}
	*(const uint8_t **)c->h_fix = c->d_pack;   /* the root */
	CUDA_CHECK(c, cudaMemcpyAsync(c->d_fix, c->h_fix, c->fix_used, cudaMemcpyHostToDevice, c->stream));
	if (c->pack_used > 0)
		CUDA_CHECK(c, cudaMemcpyAsync(c->d_pack, c->h_pack, c->pack_used, cudaMemcpyHostToDevice, c->stream));
	CUDA_CHECK(c, cudaEventRecord(c->fix_done, c->stream));
	if (CUDA_CHECK(c, cudaGraphLaunch(g->exec, c->stream)) && mode == STEP_REPLAY)
		c->n_replayed++;
	return 0;
}
