/* tools/aah_bench.c — benchmarks measured side by side in one run: this machine's streaming-read bandwidth,
 * then prefill and decode speed of a model with the weight bytes per token and the bandwidth they imply. */
#include <getopt.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/cpu/threadpool.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- streaming-read bandwidth: every thread sums its share of a buffer far larger than the caches ---- */

typedef struct bw_job {
	const uint8_t *buf;
	size_t bytes;
	uint64_t sink[256];
} bw_job;

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n)
{
	__m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256(), c = a, d = b;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
		b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
		c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
		d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
	return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

static void bw_worker(void *p, int32_t i, int32_t n)
{
	bw_job *j = p;
	size_t chunk = j->bytes / (size_t)n & ~(size_t)127;
	j->sink[i] = read_avx2(j->buf + chunk * (size_t)i, chunk);
}

/* Best of several passes over a 1 GiB buffer, in GB/s (1e9 bytes). */
static double measure_read_bandwidth(int32_t threads)
{
	size_t bytes = (size_t)1 << 30;
	uint8_t *buf = aligned_alloc(4096, bytes);
	if (!buf)
		return 0;
	memset(buf, 1, bytes);
	threadpool *tp = threadpool_init(threads);
	bw_job j = { buf, bytes, { 0 } };
	double best = 0;
	for (int r = 0; r < 5; r++) {
		double t0 = now_s();
		threadpool_run(tp, bw_worker, &j);
		double gbs = (double)bytes / (now_s() - t0) / 1e9;
		if (gbs > best)
			best = gbs;
	}
	threadpool_free(tp);
	free(buf);
	return best;
}

/* ---- model speed ---- */

static int bench_model(const char *dir, int32_t threads, int32_t n_prompt, int32_t n_gen, double bw)
{
	engine_params p = { .n_threads = threads, .max_seqs = 1, .max_batch_tokens = 512, .kv_dtype = AAH_DTYPE_F32,
	                    .ctx_len = n_prompt + n_gen + 16 };
	engine *e;
	char err[512];
	if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	const model_config *c = engine_config(e);
	int32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
	float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
	for (int32_t i = 0; i < n_prompt; i++)
		ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % c->vocab_size);
	/* A short warm-up brings the weights into the page cache and the thread pool up to speed. */
	int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
	engine_item warm = { seq, ids, n_prompt < 16 ? n_prompt : 16, false };
	engine_forward(e, &warm, 1, logits, err, sizeof err);
	engine_seq_close(e, seq);

	seq = engine_seq_open(e, NULL, err, sizeof err);
	double t0 = now_s();
	engine_item it = { seq, ids, n_prompt, false };
	if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	double t1 = now_s();
	int32_t tok = sampler_argmax(logits, c->vocab_size);
	for (int32_t i = 0; i < n_gen; i++) {
		engine_item step = { seq, &tok, 1, false };
		engine_forward(e, &step, 1, logits, err, sizeof err);
		tok = sampler_argmax(logits, c->vocab_size);
	}
	double t2 = now_s();
	double prefill = n_prompt / (t1 - t0), decode = n_gen / (t2 - t1);
	int64_t wbytes = engine_weight_bytes_per_token(e);
	double implied = (double)wbytes * decode / 1e9;
	printf("model %s: hidden %d, %d layers, %d/%d heads, vocab %d; backend %s, %d threads\n", dir, c->hidden_size,
	       c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, engine_backend_desc(e), threads);
	printf("  prefill  %4d tokens: %8.1f tokens/s\n", n_prompt, prefill);
	printf("  decode   %4d tokens: %8.1f tokens/s (batch 1, after the prompt)\n", n_gen, decode);
	printf("  weights read per decoded token: %.1f MB; implied bandwidth %.2f GB/s = %.0f%% of measured %.2f GB/s\n",
	       (double)wbytes / 1e6, implied, bw > 0 ? 100 * implied / bw : 0, bw);
	engine_seq_close(e, seq);
	free(ids);
	free(logits);
	engine_free(e);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: aah-bench [--threads N] [--prompt N] [--gen N] [--no-bandwidth] MODEL_DIR...\n"
	           "Prints this machine's streaming-read bandwidth, then for each model prefill tokens/s (a prompt of N\n"
	           "tokens, default 512), decode tokens/s at batch 1 (default 64 tokens), the weight bytes read per\n"
	           "decoded token and the bandwidth that implies, as a share of the measured one.\n");
}

int main(int argc, char **argv)
{
	int32_t threads = 2, n_prompt = 512, n_gen = 64;
	int no_bw = 0;
	static const struct option opts[] = {
		{ "threads", required_argument, 0, 't' }, { "prompt", required_argument, 0, 'p' },
		{ "gen", required_argument, 0, 'g' }, { "no-bandwidth", no_argument, 0, 'B' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': threads = atoi(optarg); break;
		case 'p': n_prompt = atoi(optarg); break;
		case 'g': n_gen = atoi(optarg); break;
		case 'B': no_bw = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc || threads < 1 || threads > 256 || n_prompt < 1 || n_gen < 1) {
		usage(stderr);
		return 2;
	}
	double bw = 0;
	if (!no_bw) {
		bw = measure_read_bandwidth(threads);
		printf("streaming read bandwidth (%d threads, 1 GiB buffer): %.2f GB/s\n", threads, bw);
	}
	int rc = 0;
	for (int i = optind; i < argc; i++)
		rc |= bench_model(argv[i], threads, n_prompt, n_gen, bw);
	return rc;
}
