/* tools/aah_bench.c — benchmarks measured side by side in one run: this machine's streaming-read bandwidth,
 * then prefill and decode speed of a model with the weight bytes per token and the bandwidth they imply. */
#include <getopt.h>
#include <math.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/cpu/threadpool.h"
#include "models/aah_config.h"
#include "models/model_config.h"

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
	int64_t kv0 = engine_seq_kv_bytes(e, seq);
	int32_t tok = sampler_argmax(logits, c->vocab_size);
	for (int32_t i = 0; i < n_gen; i++) {
		engine_item step = { seq, &tok, 1, false };
		engine_forward(e, &step, 1, logits, err, sizeof err);
		tok = sampler_argmax(logits, c->vocab_size);
	}
	double t2 = now_s();
	double prefill = n_prompt / (t1 - t0), decode = n_gen / (t2 - t1);
	int64_t wbytes = engine_weight_bytes_per_token(e);
	/* each decode step also reads the sequence's whole KV cache: on average its size halfway through */
	double kvbytes = 0.5 * (double)(kv0 + engine_seq_kv_bytes(e, seq));
	double implied = ((double)wbytes + kvbytes) * decode / 1e9;
	printf("model %s: hidden %d, %d layers, %d/%d heads, vocab %d; backend %s, %d threads\n", dir, c->hidden_size,
	       c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, engine_backend_desc(e), threads);
	printf("  prefill  %4d tokens: %8.1f tokens/s\n", n_prompt, prefill);
	printf("  decode   %4d tokens: %8.1f tokens/s (batch 1, after the prompt)\n", n_gen, decode);
	printf("  read per decoded token: %.1f MB of weights + %.1f MB of KV cache; implied bandwidth %.2f GB/s = %.0f%% "
	       "of measured %.2f GB/s\n",
	       (double)wbytes / 1e6, kvbytes / 1e6, implied, bw > 0 ? 100 * implied / bw : 0, bw);
	engine_seq_close(e, seq);
	free(ids);
	free(logits);
	engine_free(e);
	return 0;
}

/* ---- AAH against full attention at long context ---- */

/* Σ over KV heads of the regime's capacity ÷ (heads · T): what the trimmed cache should hold relative to full
 * attention once the sequence is T long. */
static double capacity_ratio(const char *dir, const char *regime)
{
	if (!strcmp(regime, AAH_FULL_ATTENTION))
		return 1.0;
	model_config mc;
	aah_config a;
	char err[512];
	if (model_config_load(&mc, dir, err, sizeof err) != 0 || aah_config_load(&a, dir, &mc, err, sizeof err) != 0)
		return 0;
	const aah_regime *r = aah_config_regime(&a, regime);
	double num = 0, den = 0;
	for (int32_t l = 0; r && l < mc.n_layers; l++)
		for (int32_t g = 0; g < r->layers[l].n_groups; g++) {
			num += (double)r->layers[l].groups[g].n_kv_heads * r->layers[l].groups[g].capacity;
			den += (double)r->layers[l].groups[g].n_kv_heads * a.context_length;
		}
	aah_config_free(&a);
	return den > 0 ? num / den : 0;
}

#define N_STAGES 4
static const int32_t stage_ctx[N_STAGES] = { 512, 1024, 2048, 4096 };

typedef struct ctx_result {
	double prefill_tps;                 /* the prompt up to 4096 − gen */
	double decode_tps[N_STAGES];        /* decode speed ending at each stage's context */
	engine_seq_stats st;
	double cap_ratio;
} ctx_result;

/* Prefill in stages, decoding `probe` tokens at the end of each (the last stage decodes gen): decode speed as the
 * context grows, and the headline prompt (4096 − gen) + gen. */
static int bench_context_regime(engine *e, const char *regime, int32_t gen, int32_t probe, ctx_result *out)
{
	char err[512];
	const int32_t V = engine_config(e)->vocab_size;
	int32_t seq = engine_seq_open(e, regime, err, sizeof err);
	if (seq < 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return -1;
	}
	int32_t *ids = malloc(4096 * sizeof *ids);
	float *logits = malloc((size_t)V * sizeof *logits);
	for (int32_t i = 0; i < 4096; i++)
		ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
	int32_t len = 0;
	double prefill_time = 0;
	int32_t prefill_tokens = 0;
	for (int32_t s = 0; s < N_STAGES; s++) {
		int32_t n_dec = s == N_STAGES - 1 ? gen : probe;
		int32_t target = stage_ctx[s] - n_dec;
		double t0 = now_s();
		engine_item it = { seq, ids + len, target - len, false };
		if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0) {
			fprintf(stderr, "aah-bench: %s\n", err);
			return -1;
		}
		prefill_time += now_s() - t0;
		prefill_tokens += target - len;
		len = target;
		double t1 = now_s();
		for (int32_t i = 0; i < n_dec; i++) {
			int32_t tok = sampler_argmax(logits, V);
			engine_item step = { seq, &tok, 1, false };
			if (engine_forward(e, &step, 1, logits, err, sizeof err) != 0) {
				fprintf(stderr, "aah-bench: %s\n", err);
				return -1;
			}
		}
		out->decode_tps[s] = n_dec / (now_s() - t1);
		len += n_dec;
	}
	out->prefill_tps = prefill_tokens / prefill_time;
	engine_seq_stats_get(e, seq, &out->st);
	engine_seq_close(e, seq);
	free(ids);
	free(logits);
	return 0;
}

static int bench_context(const char *dir, int32_t threads, const char *regime, int32_t gen)
{
	engine_params p = { .n_threads = threads, .max_seqs = 1, .max_batch_tokens = 512, .kv_dtype = AAH_DTYPE_F32,
	                    .ctx_len = 4096 };
	engine *e;
	char err[512];
	if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	const model_config *c = engine_config(e);
	const char *names[2] = { AAH_FULL_ATTENTION, regime ? regime : engine_default_regime(e) };
	ctx_result res[2];
	printf("AAH at long context: %s (hidden %d, %d layers, %d/%d heads, head_dim %d, vocab %d); %s, %d threads\n",
	       dir, c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
	       engine_backend_desc(e), threads);
	printf("prompt %d + %d generated = 4096; decode speed also measured ending at 512, 1024 and 2048 positions\n",
	       4096 - gen, gen);
	printf("%-16s %7s %7s %12s %8s %8s %9s %9s %9s %9s %9s\n", "regime", "ACR", "work", "KV bytes/seq", "KV ratio",
	       "cap-wtd", "prefill/s", "dec@512", "dec@1024", "dec@2048", "dec@4096");
	for (int i = 0; i < 2; i++) {
		if (bench_context_regime(e, names[i], gen, 32, &res[i]) != 0) {
			engine_free(e);
			return 1;
		}
		res[i].cap_ratio = capacity_ratio(dir, names[i]);
		const engine_seq_stats *st = &res[i].st;
		printf("%-16s %7.4f %7.4f %12lld %8.4f %8.4f %9.1f %9.2f %9.2f %9.2f %9.2f\n", names[i], st->acr,
		       (double)st->attn_products / (double)st->attn_products_full, (long long)st->kv_bytes_peak,
		       (double)st->kv_bytes_peak / (double)res[0].st.kv_bytes_peak, res[i].cap_ratio, res[i].prefill_tps,
		       res[i].decode_tps[0], res[i].decode_tps[1], res[i].decode_tps[2], res[i].decode_tps[3]);
	}
	double kv_ratio = (double)res[1].st.kv_bytes_peak / (double)res[0].st.kv_bytes_peak;
	printf("%s / full_attention: KV bytes %.4f (capacity-weighted window ratio %.4f, off by %.1f%%); decode speed",
	       names[1], kv_ratio, res[1].cap_ratio, 100 * fabs(kv_ratio / res[1].cap_ratio - 1));
	for (int s = 0; s < N_STAGES; s++)
		printf(" %.2fx@%d", res[1].decode_tps[s] / res[0].decode_tps[s], stage_ctx[s]);
	printf("; prefill %.2fx\n", res[1].prefill_tps / res[0].prefill_tps);
	engine_free(e);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: aah-bench [--threads N] [--prompt N] [--gen N] [--no-bandwidth] MODEL_DIR...\n"
	           "       aah-bench --context [--regime NAME] [--threads N] [--gen N] MODEL_DIR\n"
	           "Prints this machine's streaming-read bandwidth, then for each model prefill tokens/s (a prompt of N\n"
	           "tokens, default 512), decode tokens/s at batch 1 (default 64 tokens), the weight bytes read per\n"
	           "decoded token and the bandwidth that implies, as a share of the measured one.\n"
	           "--context: full attention against an AAH regime (default: the model's default regime) at 4096\n"
	           "context (prompt 4096 - gen, then gen tokens; default gen 512): ACR, attention work ratio, KV bytes per\n"
	           "sequence against the capacity-weighted window ratio, prefill speed, decode speed at 512..4096.\n");
}

int main(int argc, char **argv)
{
	int32_t threads = 2, n_prompt = 512, n_gen = 64;
	int no_bw = 0, context = 0, gen_set = 0;
	const char *regime = NULL;
	static const struct option opts[] = {
		{ "context", no_argument, 0, 'c' }, { "regime", required_argument, 0, 'r' },
		{ "threads", required_argument, 0, 't' }, { "prompt", required_argument, 0, 'p' },
		{ "gen", required_argument, 0, 'g' }, { "no-bandwidth", no_argument, 0, 'B' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': threads = atoi(optarg); break;
		case 'p': n_prompt = atoi(optarg); break;
		case 'g': n_gen = atoi(optarg); gen_set = 1; break;
		case 'c': context = 1; break;
		case 'r': regime = optarg; break;
		case 'B': no_bw = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc || threads < 1 || threads > 256 || n_prompt < 1 || n_gen < 1) {
		usage(stderr);
		return 2;
	}
	if (context) {
		int32_t gen = gen_set ? n_gen : 512;
		if (gen < 1 || gen > 4096 - 2048 || optind != argc - 1) {
			usage(stderr);
			return 2;
		}
		return bench_context(argv[optind], threads, regime, gen);
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
