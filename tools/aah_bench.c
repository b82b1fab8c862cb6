/* tools/aah_bench.c — benchmarks measured side by side in one run: this machine's streaming-read bandwidth,
 * then prefill and decode speed of a model with the weight bytes per token and the bandwidth they imply. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/parse_num.h"
#include "engine/engine.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/grammar/json_schema.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kernels/argmax.h"
#include "models/weight_quant.h"
#include "kernels/cpu/cpu_peak.h"
#include "kernels/quant.h"
#include "kernels/cpu/threadpool.h"
#include "models/aah_config.h"
#include "models/model_config.h"

/* --cpu-time: every speed in this process's CPU time instead of wall time. With --threads 1 that is the work done,
 * whatever else the machine runs (time slices taken by other processes do not count); with more threads it would
 * count the workers' spinning too. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(bench_clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *backend_name;   /* --backend: auto, cpu or cuda (engine_params.backend; NULL = cpu) */

/* --kv-dtype: the KV element types every mode runs, side by side, in this order (default f32 alone). */
static aah_dtype kv_types[3] = { AAH_DTYPE_F32 };
static int32_t n_kv_types = 1;

/* "f32,bf16" → kv_types; returns 0, or -1 on a name that is not a KV element type or a repeat. */
static int parse_kv_types(const char *list)
{
	char buf[64];
	snprintf(buf, sizeof buf, "%s", list);
	n_kv_types = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		aah_dtype d;
		if (aah_dtype_from_name(t, &d) != 0)
			return -1;
		for (int32_t i = 0; i < n_kv_types; i++)   /* no repeats: at most the three types, kv_types' size */
			if (kv_types[i] == d)
				return -1;
		kv_types[n_kv_types++] = d;
	}
	return n_kv_types > 0 ? 0 : -1;
}

/* --weights: the weight types every model mode runs, side by side, in this order: "bf16" (also f16, f32) is the float
 * weights as the model files hold them (the bench models are BF16); a GGUF type (q8_0, q4_k_m, …) quantizes them as
 * they load (engine_params.quantize). Default: the files' weights alone, rows unlabelled. */
#define MAX_WEIGHT_TYPES 6
static const char *weight_types[MAX_WEIGHT_TYPES] = { NULL };
static int32_t n_weight_types = 0;

static int parse_weight_types(char *list)
{
	n_weight_types = 0;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		weight_mix mix;
		aah_dtype ft;
		if (n_weight_types == MAX_WEIGHT_TYPES || (aah_dtype_from_name(tok, &ft) != 0 && weight_mix_parse(tok, &mix) != 0))
			return -1;
		weight_types[n_weight_types++] = tok;
	}
	return n_weight_types ? 0 : -1;
}

/* engine_params.quantize for weight type i: NULL for a float type (the files' weights). */
static const char *weight_quantize(int32_t i)
{
	aah_dtype ft;
	return i < n_weight_types && aah_dtype_from_name(weight_types[i], &ft) != 0 ? weight_types[i] : NULL;
}

/* "w q4_k_m " before a row when --weights is given, else nothing. */
static const char *weight_label(int32_t i, char *buf, size_t len)
{
	if (!n_weight_types)
		return "";
	snprintf(buf, len, "w %-6s ", weight_types[i]);
	return buf;
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
		/* software prefetch as the decode kernels do: the hardware prefetcher alone left a fifth of it unused */
		_mm_prefetch((const char *)p + i + 2048, _MM_HINT_T0);
		_mm_prefetch((const char *)p + i + 2048 + 64, _MM_HINT_T0);
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

static double load_average(void);

/* This process's resident memory now (VmRSS) and at its peak (VmHWM), in MiB; -1 when /proc says nothing. */
static void resident_mib(double *now, double *peak)
{
	*now = *peak = -1;
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		long kb;
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			*now = kb / 1024.0;
		else if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			*peak = kb / 1024.0;
	}
	if (f)
		fclose(f);
}

/* ---- model speed ---- */

/* On the CUDA backend: whether decode steps ran as CUDA graphs (AAH_CUDA_GRAPHS=0 turns them off), and how often,
 * summed over the engines of one mode (graph_use_add before each engine_free, graph_use_print at the end). */
static aah_cuda_graph_stats graph_total;
static int32_t graph_engines;

static void graph_use_add(engine *e)
{
	if (strncmp(engine_backend_desc(e), "cuda", 4) != 0)
		return;
	aah_cuda_graph_stats g;
	aah_backend_cuda_graph_stats(engine_backend(e), &g);
	graph_total.enabled |= g.enabled;
	graph_total.captured += g.captured;
	graph_total.replayed += g.replayed;
	graph_total.eager += g.eager;
	graph_engines++;
}

static void graph_use_print(const char *indent)
{
	const aah_cuda_graph_stats g = graph_total;
	if (graph_engines == 0)
		return;
	graph_total = (aah_cuda_graph_stats){ 0 };
	graph_engines = 0;
	if (!g.enabled) {
		printf("%sCUDA graphs: off (AAH_CUDA_GRAPHS=0): every decode step launched op by op\n", indent);
		return;
	}
	printf("%sCUDA graphs: on; %llu captured (one per decode batch size), %llu decode steps replayed, %llu run "
	       "eagerly again while buffers grew%s\n",
	       indent, (unsigned long long)g.captured, (unsigned long long)g.replayed, (unsigned long long)g.eager,
	       g.replayed == 0 ? " (no step was replayed)" : "");
}

/* ---- prefill against the dot-product peaks: each product's instruction timed alone (kernels/cpu/cpu_peak.h) ---- */

/* The peaks measured at the start (ops/s, a multiply-add counting 2), by the instruction; 0: not measured (--no-peak,
 * the CUDA backend, or a CPU without it). */
static double peak_ops[AAH_CPU_PRODUCT_COUNT];
static int32_t peak_threads;

/* Every peak loop this CPU can run, on `threads` threads at once, printed on one line. */
static void measure_peaks(int32_t threads)
{
	threadpool *tp = threadpool_init(threads);
	if (!tp)
		return;
	peak_threads = threads;
	int printed = 0;
	printf("dot-product peaks (%d thread%s at once, register-only loops, best of 5; a multiply-add counts 2):", threads,
	       threads == 1 ? "" : "s");
	for (int32_t p = 1; p < AAH_CPU_PRODUCT_COUNT; p++) {
		peak_ops[p] = cpu_peak_measure((aah_cpu_product)p, tp);
		if (peak_ops[p] > 0)
			printf("%s %s %.3g T%s", printed++ ? "," : "", cpu_peak_name((aah_cpu_product)p), peak_ops[p] / 1e12,
			       cpu_peak_unit((aah_cpu_product)p));
	}
	printf("\nprefill's rate below: 2 x the multiply-adds of every layer's projections (q, k, v, o, gate, up, down) for each "
	       "prompt token, plus the output head for the last token alone (the one row that needs logits); the embedding "
	       "lookup and attention's q.k and p.v not counted\n");
	threadpool_free(tp);
}

/* The multiply-adds of one prefill of n_prompt tokens with weight type wi, by the instruction the backend multiplies
 * each matrix with (aah_backend_cpu_product): the type of each matrix is the mix's (models/weight_quant.h), as the
 * engine's import gives it. */
static void prefill_macs(engine *e, int32_t n_prompt, double macs[AAH_CPU_PRODUCT_COUNT])
{
	const model_config *c = engine_config(e);
	const aah_backend *be = engine_backend(e);
	const double h = c->hidden_size, q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim,
	             ff = c->intermediate_size;
	/* each matrix's shape, in engine_matrix_type's order, and its type as the engine holds it (a GGUF file's own, or
	 * --weights' load-time quantization) */
	const double rows[] = { q, kv, kv, h, ff, ff, h }, cols[] = { h, h, h, q, h, h, ff };
	for (int32_t p = 0; p < AAH_CPU_PRODUCT_COUNT; p++)
		macs[p] = 0;
	for (int32_t l = 0; l < c->n_layers; l++)
		for (int32_t i = 0; i < 7; i++)
			macs[aah_backend_cpu_product(be, engine_matrix_type(e, l, i), (int64_t)cols[i], n_prompt)] +=
				(double)n_prompt * rows[i] * cols[i];
	macs[aah_backend_cpu_product(be, engine_matrix_type(e, 0, 7), c->hidden_size, 1)] += h * c->vocab_size;
}

/* Ends a prefill line: the rate its products achieved and its share of the peak of the instructions they ran on.
 * Where the matrices take more than one instruction (q4_k_m's Q6_K beside its Q4_K can), the peak is what the prefill
 * would take with each part at its own instruction's peak: Σ ops / Σ (ops_p / peak_p). */
static void print_prefill_peak(engine *e, int32_t n_prompt, double tps)
{
	if (strncmp(engine_backend_desc(e), "cpu", 3) != 0) {
		printf(" (dot-product peak not measured on this backend)\n");
		return;
	}
	double macs[AAH_CPU_PRODUCT_COUNT], total = 0, bound_s = 0;
	prefill_macs(e, n_prompt, macs);
	aah_cpu_product top = AAH_CPU_PRODUCT_OTHER;
	int32_t paths = 0, unmeasured = 0;
	for (int32_t p = 0; p < AAH_CPU_PRODUCT_COUNT; p++) {
		if (macs[p] <= 0)
			continue;
		total += macs[p];
		paths++;
		if (macs[p] > macs[top] || macs[top] <= 0)
			top = (aah_cpu_product)p;
		if (peak_ops[p] > 0)
			bound_s += 2 * macs[p] / peak_ops[p];
		else
			unmeasured = 1;
	}
	const double ops = 2 * total * tps / n_prompt, peak = unmeasured ? 0 : 2 * total / bound_s;
	printf(" = %.3g T%s", ops / 1e12, cpu_peak_unit(top));
	if (peak <= 0)
		printf(" (%s: no peak measured)", cpu_peak_name(top));
	else if (paths == 1)
		printf(" = %.1f%% of the %s peak %.3g T%s (%d thread%s)", 100 * ops / peak, cpu_peak_name(top), peak / 1e12,
		       cpu_peak_unit(top), peak_threads, peak_threads == 1 ? "" : "s");
	else {
		printf(" = %.1f%% of its paths' peak %.3g T%s (%d thread%s:", 100 * ops / peak, peak / 1e12, cpu_peak_unit(top),
		       peak_threads, peak_threads == 1 ? "" : "s");
		for (int32_t p = 0, k = 0; p < AAH_CPU_PRODUCT_COUNT; p++)
			if (macs[p] > 0)
				printf("%s %s %.1f%% of the multiply-adds", k++ ? ";" : "", cpu_peak_name((aah_cpu_product)p),
				       100 * macs[p] / total);
		printf(")");
	}
	printf("\n");
}

/* Prefill of the prompt measured as calibration measures it (engine_seq_measure: band mass in 5 bands and entropy, full
 * attention), against the same prefill unmeasured, interleaved, best of 3 each; tokens/s of both. */
static int bench_measure(engine *e, const int32_t *ids, int32_t n_prompt, float *logits, double *plain_tps,
                         double *measured_tps)
{
	char err[512];
	const model_config *c = engine_config(e);
	const int32_t edges[4] = { 16, 128, 512, 1024 };
	double *band = calloc((size_t)c->n_layers * c->n_heads * 5, sizeof *band);
	double *ent = calloc((size_t)c->n_layers * c->n_heads, sizeof *ent);
	*plain_tps = *measured_tps = 0;
	int rc = band && ent ? 0 : -1;
	for (int rep = 0; rep < 6 && rc == 0; rep++) {
		int32_t seq = engine_seq_open(e, AAH_FULL_ATTENTION, err, sizeof err);
		engine_measure m = { .n_bands = 5, .band_edges = edges, .band_mass = band, .entropy = ent };
		if (seq < 0 || (rep % 2 && engine_seq_measure(e, seq, &m, err, sizeof err) != 0)) {
			fprintf(stderr, "aah-bench: %s\n", err);
			rc = -1;
			break;
		}
		double t0 = now_s();
		engine_item it = { seq, ids, n_prompt, false, false, false };
		rc = engine_forward(e, &it, 1, logits, err, sizeof err);
		double tps = n_prompt / (now_s() - t0);
		double *best = rep % 2 ? measured_tps : plain_tps;
		*best = tps > *best ? tps : *best;
		engine_seq_close(e, seq);
	}
	free(band);
	free(ent);
	return rc;
}

/* What bench_model measured, for the ratios between weight types. */
typedef struct model_result {
	double prefill, decode, rss_mib, weight_bytes;
} model_result;

/* Ends a "implied bandwidth" line: its share of the measured bandwidth, when one was measured (not --no-bandwidth). */
static void print_bandwidth_share(double implied, double bw)
{
	if (bw > 0)
		printf(" = %.0f%% of measured %.2f GB/s", 100 * implied / bw, bw);
	printf("\n");
}

static int bench_model(const char *dir, int32_t threads, int32_t n_prompt, int32_t n_gen, double bw, int measure,
                       aah_dtype kv, int32_t wi, model_result *res)
{
	char wl[32];
	const char *w = weight_label(wi, wl, sizeof wl);
	engine_params p = { .backend = backend_name, .n_threads = threads, .max_seqs = 1, .max_batch_tokens = 512,
	                    .kv_dtype = kv, .ctx_len = n_prompt + n_gen + 16, .quantize = weight_quantize(wi) };
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
	engine_item warm = { seq, ids, n_prompt < 16 ? n_prompt : 16, false, false, false };
	engine_forward(e, &warm, 1, logits, err, sizeof err);
	engine_seq_close(e, seq);

	seq = engine_seq_open(e, NULL, err, sizeof err);
	double t0 = now_s();
	engine_item it = { seq, ids, n_prompt, false, false, false };
	if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	double t1 = now_s();
	int64_t kv0 = engine_seq_kv_bytes(e, seq);
	int32_t tok = sampler_argmax(logits, c->vocab_size);
	for (int32_t i = 0; i < n_gen; i++) {
		engine_item step = { seq, &tok, 1, false, false, false };
		engine_forward(e, &step, 1, logits, err, sizeof err);
		tok = sampler_argmax(logits, c->vocab_size);
	}
	double t2 = now_s();
	double prefill = n_prompt / (t1 - t0), decode = n_gen / (t2 - t1);
	int64_t wbytes = engine_weight_bytes_per_token(e);
	/* each decode step also reads the sequence's whole KV cache: on average its size halfway through */
	double kvbytes = 0.5 * (double)(kv0 + engine_seq_kv_bytes(e, seq));
	double implied = ((double)wbytes + kvbytes) * decode / 1e9;
	printf("model %s: hidden %d, %d layers, %d/%d heads, vocab %d; backend %s, %d threads, %skv %s\n", dir,
	       c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, engine_backend_desc(e), threads,
	       n_weight_types ? wl : "", aah_dtype_name(kv));
	printf("  %skv %-4s prefill  %4d tokens: %8.1f tokens/s", w, aah_dtype_name(kv), n_prompt, prefill);
	print_prefill_peak(e, n_prompt, prefill);
	printf("  %skv %-4s decode   %4d tokens: %8.1f tokens/s (batch 1, after the prompt)\n", w, aah_dtype_name(kv),
	       n_gen, decode);
	printf("  %skv %-4s read per decoded token: %.1f MB of weights + %.1f MB of KV cache; implied bandwidth %.2f GB/s",
	       w, aah_dtype_name(kv), (double)wbytes / 1e6, kvbytes / 1e6, implied);
	print_bandwidth_share(implied, bw);
	double rss, rss_peak;
	resident_mib(&rss, &rss_peak);
	printf("  %skv %-4s resident with the sequence open: %.0f MiB (weights %.0f MiB as stored, KV %.0f MiB; process "
	       "peak so far %.0f MiB)\n", w, aah_dtype_name(kv), rss, (double)wbytes / (1 << 20),
	       (double)engine_seq_kv_bytes(e, seq) / (1 << 20), rss_peak);
	*res = (model_result){ prefill, decode, rss, (double)wbytes };
	engine_seq_close(e, seq);
	if (measure) {
		double plain, measured;
		if (bench_measure(e, ids, n_prompt, logits, &plain, &measured) != 0)
			return 1;
		printf("  %skv %-4s prefill  %4d tokens measured (band mass, entropy; full attention): %.1f tokens/s against %.1f "
		       "unmeasured (%.3fx), best of 3 each, interleaved\n", w, aah_dtype_name(kv), n_prompt, measured, plain,
		       measured / plain);
	}
	graph_use_add(e);
	graph_use_print("  ");
	free(ids);
	free(logits);
	engine_free(e);
	return 0;
}

/* The weight types of --weights side by side on one model: every type's engine loaded at once (each one's resident
 * memory the process's growth while it loads), then `reps` rounds that each run the prompt and the decode on every
 * type, the best round of each kept. */
/* Decode tokens per type before the next type's turn (bench_weights). */
#define WEIGHT_SEGMENT 16

static int bench_weights(const char *dir, int32_t threads, int32_t n_prompt, int32_t n_gen, double bw, aah_dtype kv,
                         int32_t reps)
{
	engine *e[MAX_WEIGHT_TYPES] = { NULL };
	model_result r[MAX_WEIGHT_TYPES];
	char err[512], wl[32];
	int rc = 0;
	for (int32_t wi = 0; wi < n_weight_types && rc == 0; wi++) {
		engine_params p = { .backend = backend_name, .n_threads = threads, .max_seqs = 1, .max_batch_tokens = 512,
		                    .kv_dtype = kv, .ctx_len = n_prompt + n_gen + 16, .quantize = weight_quantize(wi) };
		double rss0, rss1, peak;
		resident_mib(&rss0, &peak);
		if (engine_init(&e[wi], dir, &p, err, sizeof err) != 0) {
			fprintf(stderr, "aah-bench: %s\n", err);
			rc = 1;
			break;
		}
		resident_mib(&rss1, &peak);
		r[wi] = (model_result){ 0, 0, rss1 - rss0, (double)engine_weight_bytes_per_token(e[wi]) };
	}
	const model_config *c = rc == 0 ? engine_config(e[0]) : NULL;
	int32_t *ids = c ? malloc((size_t)n_prompt * sizeof *ids) : NULL;
	float *logits = c ? malloc((size_t)c->vocab_size * sizeof *logits) : NULL;
	for (int32_t i = 0; ids && i < n_prompt; i++)
		ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % c->vocab_size);
	/* Each round prefills every type in turn, then decodes them WEIGHT_SEGMENT tokens at a time in rotation, each
	 * type's decode time the sum of its segments: the types share every second of the round, so a neighbour's load on
	 * the memory, which comes and goes over seconds on a shared machine, falls on their ratios alike (when each type
	 * decoded its 128 tokens alone, single runs of the q8_0 ratio spread over 1.56–2.20x). */
	int32_t seq[MAX_WEIGHT_TYPES], tok[MAX_WEIGHT_TYPES];
	for (int32_t rep = 0; rc == 0 && rep <= reps; rep++) {   /* round 0 warms the caches and the workers up */
		double dt[MAX_WEIGHT_TYPES] = { 0 };
		for (int32_t wi = 0; wi < n_weight_types; wi++)
			seq[wi] = -1;
		for (int32_t wi = 0; wi < n_weight_types && rc == 0; wi++) {
			seq[wi] = engine_seq_open(e[wi], NULL, err, sizeof err);
			engine_item it = { seq[wi], ids, rep ? n_prompt : (n_prompt < 16 ? n_prompt : 16), false, false, false };
			double t0 = now_s();
			if (seq[wi] < 0 || engine_forward(e[wi], &it, 1, logits, err, sizeof err) != 0) {
				fprintf(stderr, "aah-bench: %s\n", err);
				rc = 1;
				break;
			}
			if (rep)
				r[wi].prefill = fmax(r[wi].prefill, n_prompt / (now_s() - t0));
			tok[wi] = sampler_argmax(logits, c->vocab_size);
		}
		for (int32_t done = 0; rc == 0 && rep && done < n_gen; done += WEIGHT_SEGMENT)
			for (int32_t wi = 0; wi < n_weight_types && rc == 0; wi++) {
				double t0 = now_s();
				for (int32_t i = done; i < n_gen && i < done + WEIGHT_SEGMENT; i++) {
					engine_item step = { seq[wi], &tok[wi], 1, false, false, false };
					if (engine_forward(e[wi], &step, 1, logits, err, sizeof err) != 0) {
						fprintf(stderr, "aah-bench: %s\n", err);
						rc = 1;
						break;
					}
					tok[wi] = sampler_argmax(logits, c->vocab_size);
				}
				dt[wi] += now_s() - t0;
			}
		for (int32_t wi = 0; wi < n_weight_types; wi++) {
			if (seq[wi] >= 0)
				engine_seq_close(e[wi], seq[wi]);
			if (rc == 0 && rep)
				r[wi].decode = fmax(r[wi].decode, n_gen / dt[wi]);
		}
	}
	if (rc == 0) {
		printf("model %s: hidden %d, %d layers, %d/%d heads, vocab %d; backend %s, %d threads, kv %s; weight types "
		       "side by side, decoded %d tokens at a time in turn, best of %d rounds each; load average %.2f\n", dir,
		       c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, engine_backend_desc(e[0]), threads,
		       aah_dtype_name(kv), WEIGHT_SEGMENT, reps,
		       load_average());
		for (int32_t wi = 0; wi < n_weight_types; wi++) {
			const char *w = weight_label(wi, wl, sizeof wl);
			const double implied = r[wi].weight_bytes * r[wi].decode / 1e9;
			printf("  %skv %-4s prefill  %4d tokens: %8.1f tokens/s", w, aah_dtype_name(kv), n_prompt, r[wi].prefill);
			print_prefill_peak(e[wi], n_prompt, r[wi].prefill);
			printf("  %skv %-4s decode   %4d tokens: %8.1f tokens/s (batch 1, after the prompt)\n", w,
			       aah_dtype_name(kv), n_gen, r[wi].decode);
			printf("  %skv %-4s read per decoded token: %.1f MB of weights; implied bandwidth %.2f GB/s", w,
			       aah_dtype_name(kv), r[wi].weight_bytes / 1e6, implied);
			print_bandwidth_share(implied, bw);
			printf("  %skv %-4s resident with the sequence open: %.0f MiB (the process's growth while this engine "
			       "loaded; weights %.0f MiB as stored)\n", w, aah_dtype_name(kv), r[wi].rss_mib,
			       r[wi].weight_bytes / (1 << 20));
		}
		for (int32_t wi = 1; wi < n_weight_types; wi++)
			printf("  kv %-4s w %s / w %s: prefill %.2fx, decode %.2fx, weights read per token %.2fx, resident "
			       "%.2fx\n", aah_dtype_name(kv), weight_types[wi], weight_types[0], r[wi].prefill / r[0].prefill,
			       r[wi].decode / r[0].decode, r[wi].weight_bytes / r[0].weight_bytes, r[wi].rss_mib / r[0].rss_mib);
	}
	for (int32_t wi = 0; wi < n_weight_types; wi++)
		if (e[wi])
			engine_free(e[wi]);
	free(ids);
	free(logits);
	return rc;
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
	double rss_mib;                     /* resident at 4096 positions, the sequence open */
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
		engine_item it = { seq, ids + len, target - len, false, false, false };
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
			engine_item step = { seq, &tok, 1, false, false, false };
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
	double peak;
	resident_mib(&out->rss_mib, &peak);
	engine_seq_close(e, seq);
	free(ids);
	free(logits);
	return 0;
}

static int bench_context(const char *dir, int32_t threads, const char *regime, int32_t gen)
{
	static ctx_result all[MAX_WEIGHT_TYPES][3][2];   /* (weight type, kv type, full attention | regime) */
	char reg[128];          /* the regime's name, kept beyond the engine that names its default */
	const char *names[2] = { AAH_FULL_ATTENTION, reg };
	snprintf(reg, sizeof reg, "%s", regime ? regime : "");
	const int32_t n_w = n_weight_types ? n_weight_types : 1;
	for (int32_t wi = 0; wi < n_w; wi++) {
		char wl[32];
		const char *w = weight_label(wi, wl, sizeof wl);
		ctx_result (*res)[2] = all[wi];
		for (int32_t k = 0; k < n_kv_types; k++) {
			engine_params p = { .backend = backend_name, .n_threads = threads, .max_seqs = 1, .max_batch_tokens = 512,
			                    .kv_dtype = kv_types[k], .ctx_len = 4096, .quantize = weight_quantize(wi) };
			engine *e;
			char err[512];
			if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
				fprintf(stderr, "aah-bench: %s\n", err);
				return 1;
			}
			if (k == 0 && wi == 0) {
				const model_config *c = engine_config(e);
				if (!regime)
					snprintf(reg, sizeof reg, "%s", engine_default_regime(e));
				printf("AAH at long context: %s (hidden %d, %d layers, %d/%d heads, head_dim %d, vocab %d); %s, %d "
				       "threads\n", dir, c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
				       c->vocab_size, engine_backend_desc(e), threads);
				printf("prompt %d + %d generated = 4096; decode speed also measured ending at 512, 1024 and 2048 positions;"
				       " load average %.2f\n", 4096 - gen, gen, load_average());
				printf("%s%-16s %-4s %7s %7s %12s %8s %8s %9s %9s %9s %9s %9s %8s\n", n_weight_types ? "weight " : "",
				       "regime", "kv", "ACR", "work", "KV bytes/seq", "KV ratio", "cap-wtd", "prefill/s", "dec@512", "dec@1024", "dec@2048", "dec@4096",
				       "RSS MiB");
			}
			for (int i = 0; i < 2; i++) {
				ctx_result *r = &res[k][i];
				if (bench_context_regime(e, names[i], gen, 32, r) != 0) {
					engine_free(e);
					return 1;
				}
				r->cap_ratio = capacity_ratio(dir, names[i]);
				const engine_seq_stats *st = &r->st;
				printf("%s%-16s %-4s %7.4f %7.4f %12lld %8.4f %8.4f %9.1f %9.2f %9.2f %9.2f %9.2f %8.0f\n",
				       n_weight_types ? wl + 2 : "", names[i],
				       aah_dtype_name(kv_types[k]), st->acr, (double)st->attn_products / (double)st->attn_products_full,
				       (long long)st->kv_bytes_peak, (double)st->kv_bytes_peak / (double)res[k][0].st.kv_bytes_peak,
				       r->cap_ratio, r->prefill_tps, r->decode_tps[0], r->decode_tps[1], r->decode_tps[2],
				       r->decode_tps[3], r->rss_mib);
				fflush(stdout);
			}
			graph_use_add(e);
			engine_free(e);
		}
		for (int32_t k = 0; k < n_kv_types; k++) {
			const ctx_result *f = &res[k][0], *a = &res[k][1];
			double kv_ratio = (double)a->st.kv_bytes_peak / (double)f->st.kv_bytes_peak;
			printf("%skv %-4s %s / full_attention: KV bytes %.4f (capacity-weighted window ratio %.4f, off by %.1f%%); "
			       "decode speed", w, aah_dtype_name(kv_types[k]), names[1], kv_ratio, a->cap_ratio,
			       100 * fabs(kv_ratio / a->cap_ratio - 1));
			for (int s = 0; s < N_STAGES; s++)
				printf(" %.2fx@%d", a->decode_tps[s] / f->decode_tps[s], stage_ctx[s]);
			printf("; prefill %.2fx\n", a->prefill_tps / f->prefill_tps);
		}
		for (int32_t k = 1; k < n_kv_types; k++)
			for (int i = 0; i < 2; i++) {
				const ctx_result *r = &res[k][i], *b = &res[0][i];
				printf("%s%s kv %s / kv %s: prefill %.2fx, decode", w, names[i], aah_dtype_name(kv_types[k]),
				       aah_dtype_name(kv_types[0]), r->prefill_tps / b->prefill_tps);
				for (int s = 0; s < N_STAGES; s++)
					printf(" %.2fx@%d", r->decode_tps[s] / b->decode_tps[s], stage_ctx[s]);
				printf("\n");
			}
	}
	/* across weight types: the regime's decode speed-up at 4096 for each, and each type's speeds against the first */
	for (int32_t k = 0; n_weight_types > 1 && k < n_kv_types; k++) {
		printf("kv %-4s %s / full_attention decode speed at 4096 by weight type:", aah_dtype_name(kv_types[k]), names[1]);
		for (int32_t wi = 0; wi < n_weight_types; wi++)
			printf(" %s %.2fx", weight_types[wi], all[wi][k][1].decode_tps[3] / all[wi][k][0].decode_tps[3]);
		printf("\n");
		for (int32_t wi = 1; wi < n_weight_types; wi++)
			for (int i = 0; i < 2; i++)
				printf("kv %-4s %s w %s / w %s: prefill %.2fx, decode %.2fx@4096, resident %.2fx\n",
				       aah_dtype_name(kv_types[k]), names[i], weight_types[wi], weight_types[0],
				       all[wi][k][i].prefill_tps / all[0][k][i].prefill_tps,
				       all[wi][k][i].decode_tps[3] / all[0][k][i].decode_tps[3],
				       all[wi][k][i].rss_mib / all[0][k][i].rss_mib);
	}
	printf("load average %.2f\n", load_average());
	graph_use_print("");
	return 0;
}

/* ---- continuous batching: aggregate decode speed against concurrency, under one KV budget ---- */

#define N_CONC 4
static const int32_t batch_conc[N_CONC] = { 1, 4, 16, 64 };

typedef struct batch_row {
	double tps[N_CONC];          /* aggregate decode tokens/s at each concurrency */
	int32_t ran[N_CONC];         /* sequences decoded together: the concurrency, or fewer when only that many fit */
	int64_t seq_bytes;           /* worst-case KV bytes of one sequence of ctx positions (what admission reserves) */
	int32_t fits;                /* sequences of ctx positions the budget admits at once */
	double acr;
} batch_row;

/* One model, context and regime. A template sequence is prefilled once with ctx - gen tokens; for each concurrency c,
 * min(c, what the budget admits) forks of it decode gen tokens together, one engine_forward (one matrix product per
 * projection) per step, greedy. Timed: the steps after the first; the best of `reps` runs. Admission is the scheduler's rule: a sequence
 * reserves its worst-case pages (engine_regime_kv_pages at ctx positions) out of budget bytes; the template's own
 * pages come on top of the budget. */
static int bench_batch_row(const char *dir, int32_t threads, int32_t ctx, const char *regime, aah_dtype kv,
                           int32_t gen, int32_t reps, int64_t budget, batch_row *out)
{
	char err[512];
	engine_params p = { .backend = backend_name, .n_threads = threads, .max_seqs = 1, .ctx_len = ctx,
	                    .max_batch_tokens = 512, .kv_dtype = kv, .kv_budget_bytes = 4 << 20 };
	engine *e;
	/* a first engine only to learn the page sizes; the real one gets the budget plus the template's pages */
	if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return -1;
	}
	int64_t page = engine_kv_page_bytes(e), pages = engine_regime_kv_pages(e, regime, ctx);
	engine_free(e);
	if (pages < 0) {
		fprintf(stderr, "aah-bench: %s has no regime '%s'\n", dir, regime);
		return -1;
	}
	out->seq_bytes = pages * page;
	int64_t fits = budget / page / pages;
	out->fits = fits > batch_conc[N_CONC - 1] ? batch_conc[N_CONC - 1] : (int32_t)fits;
	p.max_seqs = batch_conc[N_CONC - 1] + 1;
	p.kv_budget_bytes = (budget / page + pages) * page;
	if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return -1;
	}
	const int32_t V = engine_config(e)->vocab_size, n_prompt = ctx - gen;
	int32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
	float *logits = malloc((size_t)batch_conc[N_CONC - 1] * V * sizeof *logits);
	int32_t seqs[64], toks[64];
	const float *rows[64];
	engine_item items[64];
	int rc = -1;
	if (!ids || !logits)
		goto done;
	for (int32_t i = 0; i < n_prompt; i++)
		ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
	int32_t tmpl = engine_seq_open(e, regime, err, sizeof err);
	engine_item it = { tmpl, ids, n_prompt, false, false, false };
	if (tmpl < 0 || engine_forward(e, &it, 1, logits, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		goto done;
	}
	engine_seq_stats st;
	engine_seq_stats_get(e, tmpl, &st);
	out->acr = st.acr;
	int32_t first = sampler_argmax(logits, V);
	for (int32_t ci = 0; ci < N_CONC; ci++) {
		out->ran[ci] = batch_conc[ci] < out->fits ? batch_conc[ci] : out->fits;
		out->tps[ci] = 0;
	}
	/* Rounds of one run per concurrency, so that every concurrency meets the same moments of a shared machine: at
	 * least `reps` rounds and, while they are short, up to 10 within 3 s. Each keeps its best run. */
	double spent = 0;
	for (int32_t round = 0; round < reps || (round < 10 && spent < 3.0); round++)
		for (int32_t ci = 0; ci < N_CONC; ci++) {
			const int32_t n = out->ran[ci];
			if (n < 1 || (ci > 0 && n == out->ran[ci - 1]))
				continue;   /* nothing fits, or the budget capped this concurrency to the previous one's run */
			for (int32_t i = 0; i < n; i++) {
				seqs[i] = engine_seq_fork(e, tmpl, err, sizeof err);
				if (seqs[i] < 0) {
					fprintf(stderr, "aah-bench: %s\n", err);
					goto done;
				}
				toks[i] = first;
				items[i] = (engine_item){ seqs[i], &toks[i], 1, false, false, false };
			}
			double t0 = 0;
			for (int32_t step = 0; step < gen; step++) {
				if (step == 1)
					t0 = now_s();   /* the first step warms the caches and the thread pool */
				if (engine_forward(e, items, n, logits, err, sizeof err) != 0) {
					fprintf(stderr, "aah-bench: %s\n", err);
					goto done;
				}
				for (int32_t i = 0; i < n; i++)
					rows[i] = logits + (int64_t)i * V;
				engine_argmax_rows(e, toks, rows, n, V);   /* greedy, as the scheduler picks it */
			}
			double dt = now_s() - t0, tps = (double)n * (gen - 1) / dt;
			spent += dt;
			out->tps[ci] = tps > out->tps[ci] ? tps : out->tps[ci];
			for (int32_t i = 0; i < n; i++)
				engine_seq_close(e, seqs[i]);
		}
	for (int32_t ci = 1; ci < N_CONC; ci++)
		if (out->ran[ci] == out->ran[ci - 1])
			out->tps[ci] = out->tps[ci - 1];
	rc = 0;
	graph_use_add(e);
done:
	free(ids);
	free(logits);
	engine_free(e);
	return rc;
}

static double load_average(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

static void batch_print(const char *label, int32_t ctx, const char *regime, aah_dtype kv, const batch_row *r)
{
	printf("%-10s %5d  %-15s %-4s %6.4f %9.1f %5d ", label, ctx, regime, aah_dtype_name(kv), r->acr,
	       (double)r->seq_bytes / (1 << 20), r->fits);
	for (int32_t i = 0; i < N_CONC; i++) {
		char cell[32];
		if (r->ran[i] < 1)
			snprintf(cell, sizeof cell, "-");
		else if (r->ran[i] < batch_conc[i])
			snprintf(cell, sizeof cell, "%.1f (%d)", r->tps[i], r->ran[i]);
		else
			snprintf(cell, sizeof cell, "%.1f", r->tps[i]);
		printf(" %13s", cell);
	}
	printf("  %6.2fx\n", r->ran[2] > 0 && r->tps[0] > 0 ? r->tps[2] / r->tps[0] : 0);
	fflush(stdout);
}

/* demo at 512 (full attention); the AAH model at 512 and 4096, full attention against `regime`; each for every
 * --kv-dtype. */
static int bench_batch(const char *demo, const char *aah, const char *regime, int32_t threads, int32_t gen,
                       int32_t reps, int64_t budget)
{
	printf("Continuous batching: aggregate decode tokens/s with c sequences decoding together (one forward per step),\n"
	       "each at ctx positions (prefilled once, forked); KV budget %.0f MiB, admission by worst-case pages; %d\n"
	       "threads; %d decode steps, the first untimed; best of %d rounds or more (short ones: up to 10 within 3 s),\n"
	       "each round one run per concurrency. (n): only n sequences fit the budget. Load average\n"
	       "%.2f\n",
	       (double)budget / (1 << 20), threads, gen, reps, load_average());
	printf("%-10s %5s  %-15s %-4s %6s %9s %5s  %13s %13s %13s %13s  %7s\n", "model", "ctx", "regime", "kv", "ACR",
	       "MiB/seq", "fits", "c=1", "c=4", "c=16", "c=64", "16 vs 1");
	batch_row rows[3][5];
	for (int32_t k = 0; k < n_kv_types; k++) {
		const aah_dtype kv = kv_types[k];
		if (bench_batch_row(demo, threads, 512, AAH_FULL_ATTENTION, kv, gen, reps, budget, &rows[k][0]) != 0)
			return 1;
		batch_print("demo", 512, AAH_FULL_ATTENTION, kv, &rows[k][0]);
		const int32_t ctxs[2] = { 512, 4096 };
		const char *regs[2] = { AAH_FULL_ATTENTION, regime };
		for (int32_t r = 0; aah && r < 4; r++) {
			if (bench_batch_row(aah, threads, ctxs[r / 2], regs[r % 2], kv, gen, reps, budget, &rows[k][1 + r]) != 0)
				return 1;
			batch_print("0.6B-8L", ctxs[r / 2], regs[r % 2], kv, &rows[k][1 + r]);
		}
	}
	graph_use_print("");
	for (int32_t k = 0; k < n_kv_types; k++) {
		printf("kv %-4s demo at 512: c=16 gives %.2fx the aggregate tokens/s of c=1 (target 4x)\n",
		       aah_dtype_name(kv_types[k]), rows[k][0].tps[2] / rows[k][0].tps[0]);
		if (!aah)
			continue;
		const batch_row *f = &rows[k][3], *a = &rows[k][4];
		double best_f = 0, best_a = 0;
		for (int32_t i = 0; i < N_CONC; i++) {
			best_f = f->tps[i] > best_f ? f->tps[i] : best_f;
			best_a = a->tps[i] > best_a ? a->tps[i] : best_a;
		}
		printf("kv %-4s at 4096 under %.0f MiB: %s admits %d sequences, full_attention %d (%.2fx; target 2.5x); best "
		       "aggregate %.1f against %.1f tokens/s (%.2fx; target 1.5x)\n",
		       aah_dtype_name(kv_types[k]), (double)budget / (1 << 20), regime, a->fits, f->fits,
		       f->fits > 0 ? (double)a->fits / f->fits : 0, best_a, best_f, best_f > 0 ? best_a / best_f : 0);
	}
	printf("load average %.2f\n", load_average());
	return 0;
}

/* ---- the CPU attention op alone ---- */

static double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CPU backend's attention on one thread, timed in this thread's CPU time (so that other processes' load costs
 * less than in wall time), best of `reps`, for every --kv-dtype: a 512-row prompt chunk at positions 3072 … 3583
 * and a decode row at 3071, both with window W, over a cache of 3072 positions written by kv_store; the Qwen3-0.6B
 * attention shape (16 query heads, 8 KV heads, head_dim 128). AAH_CPU_ISA picks the kernel table. */
static int bench_attention(int32_t window, int32_t reps)
{
	enum { NH = 16, NKV = 8, HD = 128, CTX = 4096, SLOTS = CTX / AAH_PAGE_LEN + 1, ROWS = 512, HIST = 3072 };
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *b = aah_backend_cpu_init(&bp);
	int32_t *rings = malloc(sizeof(int32_t) * NKV * SLOTS), n_slots[NKV], win[NKV];
	float *q = malloc(sizeof(float) * ROWS * NH * HD), *k = malloc(sizeof(float) * ROWS * NKV * HD);
	float *v = malloc(sizeof(float) * ROWS * NKV * HD), *out = malloc(sizeof(float) * ROWS * NH * HD);
	if (!b || !rings || !q || !k || !v || !out) {
		fprintf(stderr, "aah-bench: out of memory\n");
		return 1;
	}
	for (int32_t h = 0; h < NKV; h++) {
		n_slots[h] = SLOTS;
		win[h] = window;
		for (int32_t r = 0; r < SLOTS; r++)
			rings[h * SLOTS + r] = h * SLOTS + (r * 37) % SLOTS;   /* a ring's pages anywhere in the pool */
	}
	for (int64_t i = 0; i < (int64_t)ROWS * NH * HD; i++)
		q[i] = (float)((i * 7919 % 1000) / 500.0 - 1);
	for (int64_t i = 0; i < (int64_t)ROWS * NKV * HD; i++) {
		k[i] = (float)((i * 104729 % 1000) / 500.0 - 1);
		v[i] = (float)((i * 31 % 1000) / 500.0 - 1);
	}
	const double keys = (double)ROWS * (window < HIST + ROWS / 2 ? window : HIST + ROWS / 2);   /* about */
	printf("CPU attention op (%s), one thread, thread CPU time, best of %d; %d/%d heads, head_dim %d, window %d; load "
	       "average %.2f\n", aah_backend_cpu_isa(b), reps, NH, NKV, HD, window, load_average());
	for (int32_t t = 0; t < n_kv_types; t++) {
		const size_t bytes = (size_t)NKV * SLOTS * 2 * AAH_PAGE_LEN * HD * aah_dtype_size(kv_types[t]);
		aah_kv_pool pool = { malloc(bytes), kv_types[t], NKV * SLOTS, HD };
		if (!pool.data) {
			fprintf(stderr, "aah-bench: out of memory\n");
			return 1;
		}
		memset(pool.data, 0, bytes);
		for (int32_t p0 = 0; p0 < HIST; p0 += ROWS) {   /* the history, as the engine writes it */
			aah_attn_seq s = { .row0 = 0, .n_new = ROWS, .pos0 = p0, .ring_stride = SLOTS, .rings = rings,
			                   .n_slots = n_slots, .windows = win };
			b->iface.kv_store(b, &pool, k, v, &s, 1, NKV);
		}
		double best_p = 1e30, best_d = 1e30;
		for (int32_t r = 0; r < reps; r++) {
			aah_attn_seq s = { .row0 = 0, .n_new = ROWS, .pos0 = HIST, .ring_stride = SLOTS, .rings = rings,
			                   .n_slots = n_slots, .windows = win };
			double t0 = thread_cpu_s();
			b->iface.attention(b, out, q, k, v, &pool, &s, 1, NH, NKV, 1.0f / sqrtf((float)HD), NULL);
			const double dp = thread_cpu_s() - t0;
			best_p = dp < best_p ? dp : best_p;
			aah_attn_seq d = { .row0 = 0, .n_new = 1, .pos0 = HIST - 1, .ring_stride = SLOTS, .rings = rings,
			                   .n_slots = n_slots, .windows = win };
			t0 = thread_cpu_s();
			for (int32_t i = 0; i < 20; i++)
				b->iface.attention(b, out, q, k, v, &pool, &d, 1, NH, NKV, 1.0f / sqrtf((float)HD), NULL);
			const double dd = (thread_cpu_s() - t0) / 20;
			best_d = dd < best_d ? dd : best_d;
		}
		printf("  kv %-4s prompt chunk of %d rows at %d: %8.1f ms (%.1f GFLOP/s of products); decode row at %d: %.3f "
		       "ms\n", aah_dtype_name(kv_types[t]), ROWS, HIST, best_p * 1e3, 4.0 * HD * NH * keys / best_p / 1e9,
		       HIST - 1, best_d * 1e3);
		free(pool.data);
	}
	b->iface.free(b);
	free(rings);
	free(q);
	free(k);
	free(v);
	free(out);
	return 0;
}

/* ---- the packed quantized products alone: vpdpbusd against the AMX tiles ---- */

/* A CPU backend with AAH_AMX set to amx ("0": the VNNI kernels; NULL: the defaults), one thread. The switch is read
 * at init, so it is set around it only. */
static aah_backend *products_backend(const char *amx)
{
	const char *old = getenv("AAH_AMX");
	char keep[32];
	snprintf(keep, sizeof keep, "%s", old ? old : "");
	if (amx)
		setenv("AAH_AMX", amx, 1);
	else
		unsetenv("AAH_AMX");
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *b = aah_backend_cpu_init(&bp);
	if (old)
		setenv("AAH_AMX", keep, 1);
	else
		unsetenv("AAH_AMX");
	return b;
}

/* For each packed weight type, a product of n activation rows with a 3072 × 1024 matrix (the 0.6B shape's gate and
 * up; the reference quantizer's blocks of random values) on one thread, timed in its CPU time, best of `reps`
 * alternations of the two backends: the VNNI kernels (AAH_AMX=0) and the defaults (AMX tiles where the CPU has them,
 * from the row count each type's tiles start at); with the product instruction each took and the ratio. The outputs
 * are compared: the same bits, or the run fails. */
static int bench_products(int32_t reps)
{
	enum { M = 3072, K = 1024, NMAX = 512 };
	static const aah_dtype types[] = { AAH_DTYPE_Q8_0, AAH_DTYPE_Q4_0, AAH_DTYPE_Q4_K, AAH_DTYPE_Q5_K, AAH_DTYPE_Q6_K };
	static const int32_t rows[] = { 1, 5, 12, 16, 32, 64, 512 };
	aah_backend *b[2] = { products_backend("0"), products_backend(NULL) };
	if (!b[0] || !b[1]) {
		fprintf(stderr, "aah-bench: no CPU backend\n");
		return 1;
	}
	float *w = malloc(sizeof(float) * M * K), *x = malloc(sizeof(float) * NMAX * K);
	float *out[2] = { malloc(sizeof(float) * NMAX * M), malloc(sizeof(float) * NMAX * M) };
	void *q = malloc(aah_dtype_row_bytes(AAH_DTYPE_Q8_0, K) * M);   /* the largest of the types */
	if (!w || !x || !out[0] || !out[1] || !q) {
		fprintf(stderr, "aah-bench: out of memory\n");
		return 1;
	}
	uint64_t r = 0x9e3779b97f4a7c15u;
	for (int64_t i = 0; i < (int64_t)M * K; i++) {
		r = r * 6364136223846793005u + 1442695040888963407u;
		w[i] = (float)((int64_t)(r >> 40) % 2001 - 1000) / 8000.0f;
	}
	for (int64_t i = 0; i < (int64_t)NMAX * K; i++) {
		r = r * 6364136223846793005u + 1442695040888963407u;
		x[i] = (float)((int64_t)(r >> 40) % 2001 - 1000) / 500.0f;
	}
	printf("packed quantized products %d x %d, one thread, thread CPU time, best of %d; %s; load average %.2f\n", M, K,
	       reps, aah_backend_cpu_paths(b[1]), load_average());
	int rc = 0;
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		const aah_dtype t = types[ti];
		const size_t rb = aah_dtype_row_bytes(t, K);
		for (int64_t m = 0; m < M; m++)
			aah_quantize_row_ref(t, (char *)q + m * rb, w + m * K, K);
		aah_tensor wt[2];
		for (int i = 0; i < 2; i++)
			if (b[i]->iface.weight_import(b[i], &wt[i], q, t, M, K) != 0) {
				fprintf(stderr, "aah-bench: %s: the backend refused the matrix\n", aah_dtype_name(t));
				return 1;
			}
		for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
			const int32_t n = rows[ri];
			double best[2] = { 1e30, 1e30 };
			for (int32_t rep = 0; rep < reps; rep++)
				for (int i = 0; i < 2; i++) {
					const double t0 = thread_cpu_s();
					b[i]->iface.matmul(b[i], out[i], x, n, &wt[i]);
					const double d = thread_cpu_s() - t0;
					best[i] = d < best[i] ? d : best[i];
				}
			if (memcmp(out[0], out[1], sizeof(float) * (size_t)n * M)) {
				fprintf(stderr, "aah-bench: %s, %d rows: the default products differ from the VNNI kernels'\n",
				        aah_dtype_name(t), n);
				rc = 1;
			}
			const double gop = 2.0 * M * K * n / 1e9;
			printf("  %-5s %3d rows: vpdpbusd %8.3f ms (%6.1f GOP/s); default (%s) %8.3f ms (%6.1f GOP/s) = %.2fx\n",
			       aah_dtype_name(t), n, best[0] * 1e3, gop / best[0],
			       cpu_peak_name(aah_backend_cpu_product(b[1], t, K, n)), best[1] * 1e3, gop / best[1],
			       best[0] / best[1]);
		}
		for (int i = 0; i < 2; i++)
			b[i]->iface.weight_release(b[i], &wt[i]);
	}
	for (int i = 0; i < 2; i++) {
		b[i]->iface.free(b[i]);
		free(out[i]);
	}
	free(w);
	free(x);
	free(q);
	return rc;
}

/* ---- shared prefixes: many requests with one long beginning, the prefix cache off and on ---- */

typedef struct prefix_run {
	double wall_s;               /* submit → every request done */
	double ttft_mean, ttft_max;  /* seconds */
	uint64_t prefilled;          /* prompt tokens the engine computed */
	uint64_t cached;             /* prompt tokens the cache gave */
	uint64_t sent;               /* prompt tokens sent */
	int32_t *first;              /* (requests) each request's token */
} prefix_run;

/* The workload of a prefix run: rounds of per_round requests, request q of a round = beginning q mod n_begin
 * (n_prefix ids, the same in every round) + a tail of its own (n_tail ids), one greedy token each. A round's requests
 * are submitted at once, the next round when they are done. */
typedef struct prefix_load {
	int32_t n_prefix, n_tail, n_begin, per_round, rounds, slots;
	int64_t budget;              /* the engine's KV budget; 0: the default (slots full contexts) */
} prefix_load;

static int32_t prefix_token(int32_t begin, int32_t i, int32_t req, int32_t n_prefix, int32_t V)
{
	int64_t x = i < n_prefix ? (int64_t)i + (int64_t)begin * 1000003 : (int64_t)i * 31 + (int64_t)req * 7717 + 77;
	return (int32_t)((x * 7919 + 13) % (V - 8));
}

/* Runs the load on an engine with the cache on or off. prefix_bytes (cache on, optional): what one beginning alone
 * costs the cache in this regime. */
static int prefix_bench_run(const char *dir, int32_t threads, const char *regime, aah_dtype kv, int32_t prefix_on,
                            const prefix_load *ld, prefix_run *out, int64_t *prefix_bytes)
{
	char err[512];
	const int32_t n = ld->n_prefix + ld->n_tail, n_req = ld->per_round;
	engine_params ep = { .backend = backend_name, .n_threads = threads, .max_seqs = ld->slots, .ctx_len = n + 8,
	                     .max_batch_tokens = 256 + ld->slots, .kv_dtype = kv, .prefix_cache = prefix_on,
	                     .kv_budget_bytes = ld->budget };
	engine *e;
	if (engine_init(&e, dir, &ep, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return -1;
	}
	const int32_t V = engine_config(e)->vocab_size;
	sched_params sp = { .max_seqs = ld->slots, .queue_length = n_req, .step_tokens = 256 };
	sched *s;
	if (sched_init(&s, e, &ep, &sp, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		engine_free(e);
		return -1;
	}
	int32_t *ids = malloc((size_t)n_req * n * sizeof *ids);
	sched_request_params *rp = calloc((size_t)n_req, sizeof *rp);
	sched_request **r = calloc((size_t)n_req, sizeof *r);
	int rc = -1;
	out->ttft_mean = out->ttft_max = 0;
	out->sent = 0;
	double t0 = now_s();
	for (int32_t round = 0; round < ld->rounds; round++) {
		if (!ids || !rp || !r)
			goto done;
		for (int32_t q = 0; q < n_req; q++) {
			int32_t *p = ids + (int64_t)q * n;
			for (int32_t i = 0; i < n; i++)
				p[i] = prefix_token(q % ld->n_begin, i, round * n_req + q, ld->n_prefix, V);
			rp[q] = (sched_request_params){ .prompt = p, .n_prompt = n, .max_tokens = 1, .regime = regime,
			                                .logprobs = -1 };
			rp[q].sampling.top_p = 1;
		}
		if (sched_submit(s, rp, n_req, r, err, sizeof err) != SCHED_OK) {
			fprintf(stderr, "aah-bench: %s\n", err);
			memset(r, 0, (size_t)n_req * sizeof *r);
			goto done;
		}
		for (int32_t q = 0; q < n_req; q++) {
			sched_view v = { 0 };
			while (v.finish == SCHED_FINISH_NONE)
				sched_request_wait(r[q], v.version, 1000, &v);
			sched_result res;
			sched_request_result(r[q], &res);
			if (res.finish != SCHED_FINISH_LENGTH) {
				fprintf(stderr, "aah-bench: request %d ended with %d: %s\n", q, res.finish, res.err);
				goto done;
			}
			out->first[(int64_t)round * n_req + q] = sched_request_tokens(r[q])[0];
			out->ttft_mean += res.ttft_s / (n_req * ld->rounds);
			out->ttft_max = res.ttft_s > out->ttft_max ? res.ttft_s : out->ttft_max;
			out->sent += (uint64_t)n;
		}
		for (int32_t q = 0; q < n_req; q++)
			sched_request_release(r[q]);
		memset(r, 0, (size_t)n_req * sizeof *r);
	}
	out->wall_s = now_s() - t0;
	sched_metrics m;
	sched_metrics_get(s, &m);
	out->prefilled = m.prompt_tokens;
	out->cached = m.prefix.hit_tokens;
	rc = 0;
done:
	for (int32_t q = 0; r && q < n_req; q++)
		if (r[q])
			sched_request_release(r[q]);
	sched_free(s);
	/* what one beginning costs the cache in this regime: it alone, prefilled as the scheduler does (256-token chunks,
	 * its blocks inserted after each) and kept */
	if (rc == 0 && prefix_on && prefix_bytes) {
		engine_prefix_clear(e);
		int32_t seq = engine_seq_open(e, regime, err, sizeof err);
		float *logits = malloc((size_t)V * sizeof *logits);
		engine_prefix_stats st = { 0 };
		int ok = seq >= 0 && logits;
		for (int32_t at = 0; ok && at < ld->n_prefix;) {
			int32_t c = ld->n_prefix - at < 256 ? ld->n_prefix - at : 256;
			if (ld->n_prefix - at - c == 1)
				c--;   /* never a one-token chunk past position 0 (scheduler.c) */
			engine_item it = { seq, ids + at, c, false, true, false };
			ok = engine_forward(e, &it, 1, logits, err, sizeof err) == 0;
			at += c;
			if (ok)
				engine_prefix_insert(e, seq, NULL, ids, NULL);
		}
		if (ok) {
			engine_seq_close(e, seq);
			engine_prefix_stats_get(e, &st);
		}
		*prefix_bytes = st.bytes;
		free(logits);
	}
	free(ids);
	free(rp);
	free(r);
	engine_free(e);
	return rc;
}

/* Full attention and `regime` side by side, for every tail length, each with the cache off and on: n_req requests
 * of one beginning and a different tail each, at once; prompt tokens/s (sent ÷ wall), prefill tokens/s (computed ÷
 * wall), time to first token, tokens prefilled and taken from the cache, and how many beginnings fit in `budget`. */
static int bench_shared_prefix(const char *dir, int32_t threads, const char *regime, int32_t n_prefix,
                               const int32_t *tails, int32_t n_tails, int32_t n_req, int64_t budget)
{
	const int32_t slots = 8;
	printf("Shared prefix: %d requests of one %d-token beginning + a different tail each (%d tail lengths), submitted\n"
	       "at once, one greedy token each; %d slots, 256-token prompt chunks, %d threads, KV %s; the prefix cache off\n"
	       "and on. prompt tok/s = tokens sent / wall time; prefill tok/s = tokens computed / wall time. Load average "
	       "%.2f\n",
	       n_req, n_prefix, n_tails, slots, threads, aah_dtype_name(kv_types[0]), load_average());
	printf("%-15s %5s %-5s %8s %12s %12s %10s %10s %10s %10s %6s\n", "regime", "tail", "cache", "wall s",
	       "prompt tok/s", "prefill t/s", "TTFT mean", "TTFT max", "prefilled", "cached", "same");
	const char *regs[2] = { AAH_FULL_ATTENTION, regime };
	int64_t bytes[2] = { 0, 0 };
	for (int32_t ti = 0; ti < n_tails; ti++)
		for (int32_t g = 0; g < 2; g++) {
			prefix_run runs[2];
			int32_t *first = calloc((size_t)2 * n_req, sizeof *first);
			if (!first)
				return 1;
			for (int32_t on = 0; on < 2; on++) {
				runs[on].first = first + (int64_t)on * n_req;
				prefix_load one = { n_prefix, tails[ti], 1, n_req, 1, slots, 0 };
				if (prefix_bench_run(dir, threads, regs[g], kv_types[0], on, &one, &runs[on],
				                     on && ti == 0 ? &bytes[g] : NULL) != 0) {
					free(first);
					return 1;
				}
				const prefix_run *pr = &runs[on];
				printf("%-15s %5d %-5s %8.2f %12.1f %12.1f %10.3f %10.3f %10llu %10llu %6s\n", regs[g], tails[ti],
				       on ? "on" : "off", pr->wall_s, (double)pr->sent / pr->wall_s, (double)pr->prefilled / pr->wall_s,
				       pr->ttft_mean, pr->ttft_max, (unsigned long long)pr->prefilled, (unsigned long long)pr->cached,
				       on ? (memcmp(runs[0].first, runs[1].first, (size_t)n_req * sizeof *first) ? "NO" : "yes") : "");
				fflush(stdout);
			}
			printf("%-15s %5d cache on: %.2fx the prompt tokens/s, %.2fx shorter mean TTFT, %.2fx fewer tokens "
			       "prefilled\n",
			       regs[g], tails[ti], runs[0].wall_s / runs[1].wall_s, runs[0].ttft_mean / runs[1].ttft_mean,
			       (double)runs[0].prefilled / (double)runs[1].prefilled);
			free(first);
		}
	for (int32_t g = 0; g < 2; g++)
		printf("%-15s one cached %d-token beginning holds %.2f MiB: %lld fit in %.0f MiB\n", regs[g], n_prefix,
		       (double)bytes[g] / (1 << 20), bytes[g] > 0 ? (long long)(budget / bytes[g]) : 0LL,
		       (double)budget / (1 << 20));
	printf("load average %.2f\n", load_average());
	return 0;
}

/* How the hit rate falls as the pool fills: B beginnings (each with a different tail per round), rounds of B
 * requests at once, the pool (budget) sized so that the B beginnings cached whole take `fill` of it. Reports the
 * prompt tokens taken from the cache against what an unbounded cache would give (every round after the first restores
 * each beginning's whole blocks). */
static int bench_prefix_fill(const char *dir, int32_t threads, const char *regime, int32_t n_prefix, int32_t n_tail,
                             const double *fills, int32_t n_fills, int32_t rounds)
{
	const int32_t slots = 8;
	printf("Prefix cache under a filling pool: B beginnings of %d tokens, %d rounds of B requests at once (each a\n"
	       "beginning + a different %d-token tail), %d slots, %d threads, KV %s; the pool sized so that the B\n"
	       "beginnings, cached whole, take the given share of it. ideal = what an unbounded cache restores. Load %.2f\n",
	       n_prefix, rounds, n_tail, slots, threads, aah_dtype_name(kv_types[0]), load_average());
	printf("%-15s %5s %4s %10s %10s %10s %10s %8s %9s\n", "regime", "fill", "B", "pool MiB", "prefilled", "cached",
	       "ideal", "of ideal", "wall s");
	const char *regs[2] = { AAH_FULL_ATTENTION, regime };
	for (int32_t g = 0; g < 2; g++) {
		/* one beginning's bytes in this regime, and the KV a running request may take at most */
		prefix_run probe = { 0 };
		int32_t tok;
		probe.first = &tok;
		int64_t one = 0;
		prefix_load pl = { n_prefix, n_tail, 1, 1, 1, slots, 0 };
		if (prefix_bench_run(dir, threads, regs[g], kv_types[0], 1, &pl, &probe, &one) != 0 || one <= 0)
			return 1;
		for (int32_t fi = 0; fi < n_fills; fi++) {
			/* B beginnings: 16, the pool = B · one / fill (at least what the slots need running) */
			const int32_t B = 16;
			int64_t pool = (int64_t)((double)B * (double)one / fills[fi]);
			prefix_load ld = { n_prefix, n_tail, B, B, rounds, slots, pool };
			prefix_run run = { 0 };
			run.first = calloc((size_t)B * rounds, sizeof *run.first);
			if (!run.first || prefix_bench_run(dir, threads, regs[g], kv_types[0], 1, &ld, &run, NULL) != 0) {
				free(run.first);
				return 1;
			}
			const uint64_t ideal = (uint64_t)(rounds - 1) * B * (uint64_t)((n_prefix / AAH_PAGE_LEN) * AAH_PAGE_LEN - 1);
			printf("%-15s %4.0f%% %4d %10.1f %10llu %10llu %10llu %7.1f%% %9.2f\n", regs[g], fills[fi] * 100, B,
			       (double)pool / (1 << 20), (unsigned long long)run.prefilled, (unsigned long long)run.cached,
			       (unsigned long long)ideal, ideal ? 100.0 * (double)run.cached / (double)ideal : 0.0, run.wall_s);
			fflush(stdout);
			free(run.first);
		}
	}
	printf("load average %.2f\n", load_average());
	return 0;
}


/* ---- --constrained: decode with and without a grammar (engine/grammar/) ---- */

typedef struct cons_schema {
	char name[128];
	char *gbnf;
} cons_schema;

static int strcmp_ptr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The schemas of PATH: one file (a JSON Schema, or a corpus file {"schema": …}), or every *.json of a folder. */
static int32_t cons_load(const char *path, cons_schema **out)
{
	char err[512];
	struct stat st;
	char **files = NULL;
	int32_t n_files = 0;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "aah-bench: --constrained %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			size_t l = strlen(de->d_name);
			if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) {
				files = realloc(files, (size_t)(n_files + 1) * sizeof *files);
				files[n_files] = malloc(strlen(path) + l + 2);
				sprintf(files[n_files++], "%s/%s", path, de->d_name);
			}
		}
		if (d)
			closedir(d);
		qsort(files, (size_t)n_files, sizeof *files, strcmp_ptr);
	} else {
		files = malloc(sizeof *files);
		files[n_files++] = strdup(path);
	}
	cons_schema *cs = calloc((size_t)(n_files ? n_files : 1), sizeof *cs);
	int32_t n = 0;
	for (int32_t i = 0; i < n_files; i++) {
		json_error_t je;
		json_t *j = json_load_file(files[i], JSON_DECODE_ANY, &je);
		const json_t *schema = j && json_is_object(j) && json_object_get(j, "schema") ? json_object_get(j, "schema") : j;
		char *g = schema ? json_schema_to_gbnf(schema, err, sizeof err) : NULL;
		if (!g)
			fprintf(stderr, "aah-bench: %s: skipped: %s\n", files[i], j ? err : je.text);
		else {
			const char *base = strrchr(files[i], '/');
			snprintf(cs[n].name, sizeof cs[n].name, "%s", base ? base + 1 : files[i]);
			cs[n++].gbnf = g;
		}
		json_decref(j);
		free(files[i]);
	}
	free(files);
	*out = cs;
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One request through the scheduler: decode tokens/s (first token to last), the tokens. */
static int cons_run(sched *s, const int32_t *prompt, int32_t n_prompt, int32_t n_gen, grammar *g, uint64_t seed,
                    double *tps, int32_t *out, int32_t *n_out)
{
	char err[512];
	sched_request_params rp = { .prompt = prompt, .n_prompt = n_prompt, .max_tokens = n_gen, .logprobs = -1,
	                            .grammar = g };
	rp.sampling.temperature = 1;
	rp.sampling.top_p = 1;
	rp.sampling.seed = seed;
	sched_request *r;
	double t0 = now_s();
	if (sched_submit(s, &rp, 1, &r, err, sizeof err) != SCHED_OK) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return -1;
	}
	sched_view v = { 0 };
	while (v.finish == SCHED_FINISH_NONE)
		sched_request_wait(r, v.version, 10000, &v);
	double t1 = now_s();
	sched_result res;
	sched_request_result(r, &res);
	*n_out = res.n_tokens;
	memcpy(out, sched_request_tokens(r), (size_t)res.n_tokens * sizeof *out);
	/* wall: first token to last; --cpu-time: the process's CPU time of the whole request (its short prompt too) */
	if (bench_clock != CLOCK_MONOTONIC)
		*tps = res.n_tokens / (t1 - t0);
	else
		*tps = res.n_tokens > 1 ? (res.n_tokens - 1) / (res.duration_s - res.ttft_s) : 0;
	sched_request_release(r);
	return res.finish == SCHED_FINISH_ERROR ? -1 : 0;
}

static int bench_constrained(const char *schema_path, const char *dir, int32_t threads, int32_t n_gen, int32_t reps)
{
	char err[512];
	cons_schema *cs = NULL;
	int32_t n_cs = cons_load(schema_path, &cs);
	if (n_cs <= 0)
		return 1;
	const char *q = n_weight_types ? weight_quantize(0) : NULL;
	engine_params ep = { .backend = backend_name, .n_threads = threads, .max_seqs = 1, .ctx_len = n_gen + 64,
	                     .max_batch_tokens = 64, .kv_dtype = kv_types[0], .quantize = q };
	engine *e;
	if (engine_init(&e, dir, &ep, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	char mdir[4096];
	tokenizer *tk = aah_resolve_model_dir(dir, -1, mdir, sizeof mdir, err, sizeof err) == 0
	                        ? tokenizer_load(mdir, err, sizeof err) : NULL;
	if (!tk || model_config_check_tokenizer(engine_config(e), tk, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		tokenizer_free(tk);
		engine_free(e);
		return 1;
	}
	const int32_t V = engine_config(e)->vocab_size;
	double t0 = now_s();
	grammar_vocab *gv = grammar_vocab_new(tk, V, err, sizeof err);
	double vocab_s = now_s() - t0;
	sched_params sp = { .max_seqs = 1, .queue_length = 4, .step_tokens = 64, .tok = tk };
	sched *s;
	if (!gv || sched_init(&s, e, &ep, &sp, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	printf("constrained decoding: %s, %s weights, vocabulary %d (trie built in %.1f ms), batch 1, temperature 1, up "
	       "to %d tokens, best of %d; %d schema%s from %s\n", dir, n_weight_types ? weight_types[0] : "the files'",
	       V, vocab_s * 1e3, n_gen, reps, n_cs, n_cs == 1 ? "" : "s", schema_path);
	printf("%-34s %9s %9s %7s %9s %9s %6s %10s %10s %7s\n", "schema", "compile", "cached", "tokens", "free t/s",
	       "cons t/s", "ratio", "mask mean", "mask p99", "masks");
	const char *prompt_text = "Here is the record as JSON:";
	int32_t prompt[64];
	int64_t n_prompt = tokenizer_encode(tk, prompt_text, strlen(prompt_text), true, prompt, 64, err, sizeof err);
	int32_t *toks = malloc((size_t)n_gen * sizeof *toks);
	uint32_t *bits = malloc((size_t)(V + 31) / 32 * sizeof *bits);
	double *all_mask = NULL;
	int64_t n_all = 0;
	double max_compile = 0, sum_ratio = 0, free_total = 0, cons_total = 0;
	int rc = 0;
	for (int32_t k = 0; k < n_cs && n_prompt > 0; k++) {
		grammar_cache *gc = grammar_cache_new(gv, 4);
		bool hit;
		t0 = now_s();
		grammar *g = grammar_cache_get(gc, cs[k].gbnf, strlen(cs[k].gbnf), &hit, err, sizeof err);
		double compile_s = now_s() - t0;
		t0 = now_s();
		grammar *g2 = g ? grammar_cache_get(gc, cs[k].gbnf, strlen(cs[k].gbnf), &hit, err, sizeof err) : NULL;
		double cached_s = now_s() - t0;
		grammar_unref(g2);
		if (!g) {
			printf("%-34s refused: %s\n", cs[k].name, err);
			grammar_cache_free(gc);
			continue;
		}
		if (compile_s > max_compile)
			max_compile = compile_s;
		/* free and constrained in turn, reps times: the best of each */
		double best_free = 0, best_cons = 0;
		int32_t n_tok = 0;
		for (int32_t rep = 0; rep < reps; rep++) {
			double tps;
			int32_t n;
			if (cons_run(s, prompt, (int32_t)n_prompt, n_gen, NULL, 7 + (uint64_t)rep, &tps, toks, &n) != 0)
				rc = 1;
			if (tps > best_free)
				best_free = tps;
			if (cons_run(s, prompt, (int32_t)n_prompt, n_gen, g, 7 + (uint64_t)rep, &tps, toks, &n) != 0)
				rc = 1;
			if (tps > best_cons)
				best_cons = tps;
			n_tok = n;
		}
		/* the masks of the last constrained output again, each timed, on a grammar compiled afresh (its caches
		 * cold but for the compile's warm-up): what a new schema's first request pays */
		grammar *fresh = grammar_compile(gv, cs[k].gbnf, strlen(cs[k].gbnf), err, sizeof err);
		grammar_matcher *m = fresh ? grammar_matcher_new(fresh) : NULL;
		double *mt = malloc((size_t)(n_tok + 1) * sizeof *mt);
		int32_t n_mt = 0;
		for (int32_t i = 0; m && i <= n_tok; i++) {
			if (grammar_matcher_must_end(m))
				break;
			double a = now_s();
			grammar_matcher_mask(m, bits);
			mt[n_mt++] = now_s() - a;
			if (i < n_tok && grammar_matcher_accept(m, toks[i]) != 0)
				break;
		}
		double mean = 0;
		for (int32_t i = 0; i < n_mt; i++)
			mean += mt[i] / n_mt;
		all_mask = realloc(all_mask, (size_t)(n_all + n_mt) * sizeof *all_mask);
		memcpy(all_mask + n_all, mt, (size_t)n_mt * sizeof *mt);
		n_all += n_mt;
		qsort(mt, (size_t)n_mt, sizeof *mt, cmp_double);
		double p99 = n_mt ? mt[(int32_t)(0.99 * (n_mt - 1) + 0.5)] : 0;
		printf("%-34s %7.2fms %7.3fms %7d %9.1f %9.1f %5.3fx %8.1fus %8.1fus %7d\n", cs[k].name, compile_s * 1e3,
		       cached_s * 1e3, n_tok, best_free, best_cons, best_free > 0 ? best_cons / best_free : 0, mean * 1e6,
		       p99 * 1e6, n_mt);
		sum_ratio += best_free > 0 ? best_cons / best_free : 0;
		free_total += best_free;
		cons_total += best_cons;
		free(mt);
		grammar_matcher_free(m);
		grammar_unref(fresh);
		grammar_unref(g);
		grammar_cache_free(gc);
	}
	if (n_all > 0) {
		double mean = 0;
		for (int64_t i = 0; i < n_all; i++)
			mean += all_mask[i] / (double)n_all;
		qsort(all_mask, (size_t)n_all, sizeof *all_mask, cmp_double);
		printf("all: %lld masks, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us; compile max %.2f ms; decode "
		       "tokens/s constrained / free: mean of ratios %.3fx, of sums %.3fx\n", (long long)n_all, mean * 1e6,
		       all_mask[n_all / 2] * 1e6, all_mask[(int64_t)(0.99 * (double)(n_all - 1) + 0.5)] * 1e6,
		       all_mask[n_all - 1] * 1e6, max_compile * 1e3, sum_ratio / n_cs, free_total > 0 ? cons_total / free_total
		                                                                                        : 0);
	}
	free(all_mask);
	free(toks);
	free(bits);
	for (int32_t k = 0; k < n_cs; k++)
		free(cs[k].gbnf);
	free(cs);
	sched_free(s);
	engine_free(e);
	grammar_vocab_free(gv);
	tokenizer_free(tk);
	return rc;
}

/* ---- speculative decoding (docs/speculative.md) ---- */

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The machinery's ceiling on one model, at the engine (no scheduler): a verify pass of k + 1 positions against one
 * decode step at the same length (each timed, then taken back, interleaved, the median of many), and greedy decoding
 * with an oracle draft — an earlier greedy run's tokens replayed as the draft, every one accepted — against plain
 * greedy decoding. Both decoders pick every row's token (engine_argmax_rows), as the scheduler does. */
static int spec_mechanics(const char *dir, int32_t threads, int32_t wi, int32_t n_prompt, int32_t n_gen, int32_t k,
                          int32_t reps)
{
	char err[512], wl[32];
	const int32_t ctx = ((n_prompt + n_gen + 2 * k + 16 + 15) / 16) * 16;
	engine_params p = { .backend = backend_name, .n_threads = threads, .max_seqs = 2, .max_batch_tokens = 512,
	                    .kv_dtype = AAH_DTYPE_F16, .ctx_len = ctx, .quantize = weight_quantize(wi), .aah_path = "",
	                    .rollback = ENGINE_MAX_ROLLBACK };
	engine *e;
	if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	const int32_t V = engine_config(e)->vocab_size;
	int32_t *ids = malloc((size_t)(n_prompt + n_gen + k + 2) * sizeof *ids), *row_ids = malloc((size_t)(k + 1) *
	                                                                                             sizeof *row_ids);
	float *logits = malloc((size_t)(k + 1) * V * sizeof *logits);
	const float **rows = malloc((size_t)(k + 1) * sizeof *rows);
	double *t_step = malloc((size_t)reps * 20 * sizeof(double)), *t_verify = malloc((size_t)reps * 20 * sizeof(double));
	uint32_t x = 12345;
	for (int32_t i = 0; i < n_prompt; i++) {
		x = x * 1664525u + 1013904223u;
		ids[i] = (int32_t)((x >> 8) % (uint32_t)(V < 32000 ? V : 32000));
	}
	for (int32_t i = 0; i <= k; i++)
		rows[i] = logits + (int64_t)i * V;
	int rc = 0, mismatches = 0;
	double plain_s = 0, oracle_s = 0;
	/* plain greedy decoding: the reference tokens */
	int32_t a = engine_seq_open(e, NULL, err, sizeof err), b = engine_seq_open(e, NULL, err, sizeof err);
	engine_item it = { a, ids, n_prompt, false, false, false };
	if (a < 0 || b < 0 || engine_seq_allow_rollback(e, b, err, sizeof err) != 0 ||
	    engine_forward(e, &it, 1, logits, err, sizeof err) != 0)
		goto fail;
	ids[n_prompt] = aah_argmax(logits, V);
	double t0 = now_s();
	for (int32_t i = 0; i < n_gen - 1; i++) {
		it = (engine_item){ a, &ids[n_prompt + i], 1, false, false, false };
		if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0)
			goto fail;
		engine_argmax_rows(e, &ids[n_prompt + i + 1], rows, 1, V);
	}
	plain_s = now_s() - t0;
	/* the oracle: the same prompt, then [next, the next k reference tokens] a pass */
	it = (engine_item){ b, ids, n_prompt, false, false, false };
	if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0)
		goto fail;
	t0 = now_s();
	int32_t done = 1;   /* tokens produced: the first came from the prompt */
	while (done < n_gen) {
		int32_t kk = n_gen - done - 1 < k ? n_gen - done - 1 : k;
		it = (engine_item){ b, &ids[n_prompt + done - 1], kk + 1, kk > 0, false, kk > 0 };
		if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0)
			goto fail;
		engine_argmax_rows(e, row_ids, rows, kk + 1, V);
		for (int32_t j = 0; j <= kk; j++)
			mismatches += row_ids[j] != ids[n_prompt + done + j];
		done += kk + 1;
	}
	oracle_s = now_s() - t0;
	/* a decode step against a verify pass, at the oracle sequence's length, each taken back */
	const int32_t len = engine_seq_len(e, b);
	for (int32_t r = 0; r < reps * 20; r++) {
		it = (engine_item){ b, &ids[n_prompt], 1, false, false, false };
		t0 = now_s();
		if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0)
			goto fail;
		engine_argmax_rows(e, row_ids, rows, 1, V);
		t_step[r] = now_s() - t0;
		if (engine_seq_truncate(e, b, len, err, sizeof err) != 0)
			goto fail;
		it = (engine_item){ b, &ids[n_prompt], k + 1, true, false, true };
		t0 = now_s();
		if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0)
			goto fail;
		engine_argmax_rows(e, row_ids, rows, k + 1, V);
		t_verify[r] = now_s() - t0;
		if (engine_seq_truncate(e, b, len, err, sizeof err) != 0)
			goto fail;
	}
	qsort(t_step, (size_t)reps * 20, sizeof *t_step, cmp_dbl);
	qsort(t_verify, (size_t)reps * 20, sizeof *t_verify, cmp_dbl);
	double step = t_step[reps * 10], verify = t_verify[reps * 10];
	printf("  %-7s at %d positions: decode step %.2f ms, verify pass of %d positions %.2f ms = %.2fx a step\n",
	       weight_label(wi, wl, sizeof wl), len, 1e3 * step, k + 1, 1e3 * verify, verify / step);
	printf("  %-7s greedy %d tokens: plain %.1f tok/s; oracle draft k=%d %.1f tok/s = %.2fx (%d rows disagreed with "
	       "plain decoding)\n", weight_label(wi, wl, sizeof wl), n_gen, (n_gen - 1) / plain_s, k, (n_gen - 1) / oracle_s,
	       plain_s / oracle_s, mismatches);
	goto out;
fail:
	fprintf(stderr, "aah-bench: %s\n", err);
	rc = 1;
out:
	engine_free(e);
	free(ids);
	free(row_ids);
	free(logits);
	free(rows);
	free(t_step);
	free(t_verify);
	return rc;
}

/* One request at a time through the scheduler (batch-1 decoding, what speculation is for), greedy: decode tokens/s
 * (first token to last), its drafts' figures, and its tokens for the comparison. */
static int spec_run(sched *s, const char *regime, const int32_t *prompt, int32_t n_prompt, int32_t n_gen,
                    sched_spec spec, double *gen_s, int32_t *n_tok, sched_result *res, int32_t *out)
{
	char err[512];
	sched_request_params rp = { .prompt = prompt, .n_prompt = n_prompt, .max_tokens = n_gen, .logprobs = -1,
	                            .spec = spec, .regime = regime };
	rp.sampling.top_p = 1;
	sched_request *r;
	if (sched_submit(s, &rp, 1, &r, err, sizeof err) != SCHED_OK) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return -1;
	}
	sched_view v = { 0 };
	while (v.finish == SCHED_FINISH_NONE)
		sched_request_wait(r, v.version, 10000, &v);
	sched_request_result(r, res);
	*n_tok = res->n_tokens;
	*gen_s = res->duration_s - res->ttft_s;
	memcpy(out, sched_request_tokens(r), (size_t)res->n_tokens * sizeof *out);
	sched_request_release(r);
	return res->finish == SCHED_FINISH_ERROR ? -1 : 0;
}

/* Real acceptance, end to end: the prompts (a file of prompts separated by lines of "---", or copies of a random
 * phrase) decoded without speculation, with prompt lookup and, with draft_regime, drafted by the model under that
 * regime; rounds interleave the kinds. */
static int spec_e2e(const char *dir, int32_t threads, const char *regime, const char *draft_regime,
                    const char *prompt_file, int32_t n_synthetic, int32_t n_prompt, int32_t n_gen, int32_t k,
                    int32_t rounds)
{
	char err[512];
	engine_params p = { .backend = backend_name, .n_threads = threads, .max_seqs = 2, .max_batch_tokens = 512,
	                    .kv_dtype = AAH_DTYPE_F16, .rollback = ENGINE_MAX_ROLLBACK };
	engine *e;
	if (engine_init(&e, dir, &p, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", err);
		return 1;
	}
	const int32_t V = engine_config(e)->vocab_size, ctx = engine_ctx_len(e);
	enum { MAX_PROMPTS = 16 };
	int32_t *prompts[MAX_PROMPTS] = { NULL }, lens[MAX_PROMPTS], n_prompts = 0;
	if (prompt_file) {
		char dirbuf[4096];
		tokenizer *tok = aah_resolve_model_dir(dir, -1, dirbuf, sizeof dirbuf, err, sizeof err) == 0
		                         ? tokenizer_load(dirbuf, err, sizeof err) : NULL;
		FILE *f = tok ? fopen(prompt_file, "r") : NULL;
		if (!f) {
			fprintf(stderr, "aah-bench: --spec-prompts: %s\n", tok ? strerror(errno) : err);
			engine_free(e);
			return 1;
		}
		static char text[1 << 20];
		size_t n = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		text[n] = 0;
		for (char *t = text; t && *t && n_prompts < MAX_PROMPTS;) {
			char *sep = strstr(t, "\n---\n");
			size_t len = sep ? (size_t)(sep - t) : strlen(t);
			prompts[n_prompts] = malloc((size_t)ctx * sizeof(int32_t));
			int64_t m = tokenizer_encode(tok, t, len, true, prompts[n_prompts], ctx - n_gen - 1, err, sizeof err);
			if (m > ctx - n_gen - 1)
				m = ctx - n_gen - 1;   /* the prompt's beginning: what the context holds beside the output */
			if (m > 0)
				lens[n_prompts++] = (int32_t)m;
			else
				free(prompts[n_prompts]);
			t = sep ? sep + 5 : NULL;
		}
		tokenizer_free(tok);
	} else {
		uint32_t x = 777;
		for (; n_prompts < n_synthetic; n_prompts++) {
			int32_t phrase[24];
			for (int32_t i = 0; i < 24; i++) {
				x = x * 1664525u + 1013904223u;
				phrase[i] = (int32_t)((x >> 8) % (uint32_t)(V < 32000 ? V : 32000));
			}
			prompts[n_prompts] = malloc((size_t)n_prompt * sizeof(int32_t));
			for (int32_t i = 0; i < n_prompt; i++)
				prompts[n_prompts][i] = phrase[i % 24];
			lens[n_prompts] = n_prompt;
		}
	}
	sched *s = NULL;
	sched_params sp = { .max_seqs = 1, .queue_length = 4, .step_tokens = 512 };
	sp.spec = (sched_spec){ SCHED_DRAFT_OFF, k, 1, draft_regime };
	engine_params ep = p;
	ep.max_seqs = 2;
	int rc = 0;
	if (n_prompts == 0 || sched_init(&s, e, &ep, &sp, err, sizeof err) != 0) {
		fprintf(stderr, "aah-bench: %s\n", n_prompts ? err : "--spec-prompts: no prompt");
		rc = 1;
		goto out;
	}
	const sched_draft kinds[] = { SCHED_DRAFT_OFF, SCHED_DRAFT_NGRAM, SCHED_DRAFT_REGIME };
	const int32_t n_kinds = draft_regime ? 3 : 2;
	double gen_s[3] = { 0 };
	int64_t toks[3] = { 0 }, drafted[3] = { 0 }, accepted[3] = { 0 }, passes[3] = { 0 }, differ[3] = { 0 };
	int32_t *outs = malloc((size_t)3 * ctx * sizeof *outs), n_out[3];
	for (int32_t round = 0; round < rounds && rc == 0; round++)
		for (int32_t pi = 0; pi < n_prompts && rc == 0; pi++) {
			for (int32_t q = 0; q < n_kinds && rc == 0; q++) {
				int32_t kq = (round + q) % n_kinds;   /* a rotating order: no kind always runs first */
				sched_spec sq = { kinds[kq], k, 1, NULL };
				double g;
				sched_result res;
				if (spec_run(s, regime, prompts[pi], lens[pi], n_gen, sq, &g, &n_out[kq], &res,
				             outs + (int64_t)kq * ctx) != 0) {
					rc = 1;
					break;
				}
				gen_s[kq] += g;
				toks[kq] += n_out[kq] > 1 ? n_out[kq] - 1 : 0;
				drafted[kq] += res.spec_drafted;
				accepted[kq] += res.spec_accepted;
				passes[kq] += res.spec_passes;
			}
			/* every kind's output against the one without speculation */
			for (int32_t kq = 1; kq < n_kinds && rc == 0; kq++)
				differ[kq] += n_out[kq] != n_out[0] ||
				              memcmp(outs, outs + (int64_t)kq * ctx, (size_t)n_out[0] * sizeof *outs) != 0;
		}
	if (rc == 0) {
		printf("  %d prompt%s (%s), %d tokens each, greedy, one request at a time, k=%d adaptive, %d round%s:\n",
		       n_prompts, n_prompts == 1 ? "" : "s", prompt_file ? prompt_file : "a random phrase repeated", n_gen, k,
		       rounds, rounds == 1 ? "" : "s");
		for (int32_t kq = 0; kq < n_kinds; kq++) {
			char name[96];
			snprintf(name, sizeof name, "%s%s%s%s", sched_draft_name(kinds[kq]), kq == 2 ? " (" : "",
			         kq == 2 ? draft_regime : "", kq == 2 ? ")" : "");
			double tps = toks[kq] / gen_s[kq];
			printf("    %-22s %7.1f tok/s = %.2fx", name, tps, tps / (toks[0] / gen_s[0]));
			if (kq > 0)
				printf("; accepted %lld of %lld drafted (%.0f%%), %.2f tokens a verify pass; outputs %s", (long long)
				       accepted[kq], (long long)drafted[kq], drafted[kq] ? 100.0 * accepted[kq] / drafted[kq] : 0.0,
				       passes[kq] ? 1 + (double)accepted[kq] / passes[kq] : 0.0,
				       differ[kq] ? "DIFFER" : "identical");
			printf("\n");
			if (differ[kq])
				rc = 1;
		}
	}
	free(outs);
out:
	sched_free(s);
	engine_free(e);
	for (int32_t i = 0; i < n_prompts; i++)
		free(prompts[i]);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: aah-bench [--backend B] [--kv-dtype LIST] [--threads N] [--prompt N] [--gen N] [--no-bandwidth] "
	           "[--no-peak] [--measure] MODEL_DIR...\n"
	           "       aah-bench --context [--kv-dtype LIST] [--regime NAME] [--threads N] [--gen N] MODEL_DIR\n"
	           "       aah-bench --attention [--kv-dtype LIST] [--window W] [--reps N]\n"
	           "       aah-bench --products [--reps N]\n"
	           "       aah-bench --shared-prefix [--prefix N] [--tail LIST] [--requests N] [--kv-budget BYTES] "
	           "[--regime NAME] [--threads N] MODEL_DIR\n"
	           "       aah-bench --shared-prefix --fill LIST [--prefix N] [--tail N] [--rounds N] [--regime NAME] MODEL_DIR\n"
	           "       aah-bench --constrained SCHEMA [--weights TYPE] [--gen N] [--reps N] [--threads N] MODEL_DIR\n"
	           "       aah-bench --spec [--weights LIST] [--prompt N] [--gen N] [--spec-k N] [--regime NAME] "
	           "[--draft-regime NAME] [--spec-prompts FILE] [--requests N] [--reps N] MODEL_DIR\n"
	           "       aah-bench --batch [--kv-dtype LIST] [--kv-budget BYTES] [--regime NAME] [--threads N] [--gen N] "
	           "MODEL_DIR [AAH_DIR]\n"
	           "Prints this machine's streaming-read bandwidth, then for each model prefill tokens/s (a prompt of N\n"
	           "tokens, default 512), decode tokens/s at batch 1 (default 64 tokens), the weight bytes read per\n"
	           "decoded token and the bandwidth that implies, as a share of the measured one; --measure adds the prefill\n"
	           "measured as calibration does (engine_seq_measure: band mass and entropy) against it unmeasured.\n"
	           "Beside the bandwidth, the dot-product peak of every product instruction this CPU has (vfmadd231ps,\n"
	           "vpdpbusd, vdpbf16ps, AMX tdpbusd / tdpbf16ps: register-only loops on every thread at once; --no-peak skips\n"
	           "them), and on each prefill line the instruction that weight type's products take on this backend, the\n"
	           "rate the prefill's projections achieved and its share of that peak.\n"
	           "--context: full attention against an AAH regime (default: the model's default regime) at 4096\n"
	           "context (prompt 4096 - gen, then gen tokens; default gen 512): ACR, attention work ratio, KV bytes per\n"
	           "sequence against the capacity-weighted window ratio, prefill speed, decode speed at 512..4096.\n"
	           "--batch: aggregate decode tokens/s of 1, 4, 16 and 64 sequences decoding together under one KV budget\n"
	           "(--kv-budget BYTES, default 1 GiB; --gen steps, default 16, best of --reps, default 3): the first model\n"
	           "at 512 positions with full\n"
	           "attention; the second (optional, with aah.json) at 512 and 4096 with full attention and --regime\n"
	           "(default: its default regime), with the sequences each admits and the ratios.\n"
	           "--products [--reps N]: the packed quantized products alone (q8_0, q4_0, q4_k, q5_k, q6_k; 3072 x 1024;\n"
	           "1 to 512 activation rows; one thread, thread CPU time, best of --reps, default 3): the VNNI kernels\n"
	           "(AAH_AMX=0) against the defaults (AMX tiles where the CPU has them and they are faster); every output\n"
	           "compared bit for bit.\n"
	           "--attention [--window W] [--reps N]: the CPU attention op alone (one thread, thread CPU time): a 512-row\n"
	           "prompt chunk and a decode row at about 3k positions, window W (default 4096), for every --kv-dtype.\n"
	           "--shared-prefix: --requests N (default 16) prompts of one --prefix N (default 1024) tokens and a different\n"
	           "tail each, at once, for every tail length of --tail LIST (default 20,200,1000), with the prefix cache off\n"
	           "and on, in full attention and --regime (default the model's default regime): prompt and prefill tokens/s,\n"
	           "TTFT, tokens prefilled and cached, whether the tokens agree, and the bytes of one cached beginning (how\n"
	           "many fit in --kv-budget, default 1 GiB); the first --kv-dtype. With --fill LIST (e.g. 0.25,0.9): 16\n"
	           "beginnings, --rounds N (default 3) rounds of 16 requests each with a new tail (the first --tail), the pool\n"
	           "sized so the 16 beginnings cached whole take each share of it: cached tokens against an unbounded cache's.\n"
	           "--constrained SCHEMA: a JSON Schema file (or a folder of them, tests/data/grammar/schemas): per schema\n"
	           "the compile time (cold, and again through the grammar cache), decode tokens/s at batch 1 and temperature 1\n"
	           "without and with the schema's grammar (best of --reps, default 3, taken in turn), and each token mask of\n"
	           "the constrained output timed again on a fresh grammar (mean, p99); --weights TYPE quantizes at load.\n"
	           "--cpu-time (every mode): speeds in this process's CPU time, not wall time: with --threads 1 the work\n"
	           "done, whatever else the machine runs.\n"
	           "--kv-dtype LIST (every mode): the KV element types to run side by side, e.g. f32,bf16 (default f32);\n"
	           "every row says its type.\n"
	           "--weights LIST (the first mode and --context): the weight types to run side by side, e.g.\n"
	           "bf16,q8_0,q4_k_m: bf16 (f16, f32) is the files' weights, a GGUF type quantizes them at load (llama.cpp's\n"
	           "mixes); all of them loaded at once, each round decoding them 16 tokens at a time in turn, best of --reps\n"
	           "rounds (default 3); each type's speeds and resident memory against the first's (--measure is not run then).\n"
	           "--backend auto|cpu|cuda (every mode): the engine's backend (default auto: CUDA when a device is present);\n"
	           "on CUDA the first mode measures the device's copy bandwidth instead of this machine's read bandwidth.\n"
	           "--spec: speculative decoding (docs/speculative.md). For each --weights type: a verify pass of k + 1\n"
	           "positions against a decode step (median of 20 x --reps, each taken back), and greedy decoding of --gen\n"
	           "tokens (default 128) after --prompt N (default 128) plainly and with an oracle draft (that run's tokens\n"
	           "replayed: every one accepted). Then end to end through the scheduler, one request at a time: no\n"
	           "speculation, prompt lookup and (--draft-regime) the model under a smaller-window regime, on the prompts\n"
	           "of --spec-prompts FILE (separated by lines of ---; default: --requests N (4) random phrases repeated), --reps\n"
	           "rounds interleaved: decode tokens/s, acceptance, tokens per verify pass, and whether the outputs are\n"
	           "identical.\n");
}

/* --name N: a whole integer in [lo, hi], else a message and exit 2 (atoi read "12x" as 12 and "x" as 0). */
static int32_t int_arg(const char *name, const char *s, int64_t lo, int64_t hi)
{
	int64_t v;
	if (!aah_parse_i64(s, lo, hi, &v)) {
		fprintf(stderr, "aah-bench: --%s takes an integer from %lld to %lld, not '%s'\n", name, (long long)lo,
		        (long long)hi, s);
		exit(2);
	}
	return (int32_t)v;
}

int main(int argc, char **argv)
{
	int32_t threads = 2, n_prompt = 512, n_gen = 64;
	const char *constrained = NULL;   /* --constrained SCHEMA */
	int spec = 0, prompt_set = 0, requests_set = 0;     /* --spec [--spec-k N] [--draft-regime NAME] [--spec-prompts FILE] */
	int32_t spec_k = 4;
	const char *draft_regime = NULL, *spec_prompts = NULL;
	int no_bw = 0, no_peak = 0, context = 0, gen_set = 0, batch = 0, measure = 0, attention = 0, shared_prefix = 0,
	    products = 0;
	int32_t sp_prefix = 1024, sp_requests = 16, sp_rounds = 3;   /* --spec: --requests prompts (at most 16) */
	int32_t sp_tails[8] = { 20, 200, 1000 }, sp_n_tails = 3;
	double sp_fills[8];
	int32_t sp_n_fills = 0;
	int32_t window = 4096;
	int64_t budget = (int64_t)1 << 30;
	int32_t reps = 3;
	const char *regime = NULL;
	static const struct option opts[] = {
		{ "context", no_argument, 0, 'c' }, { "regime", required_argument, 0, 'r' },
		{ "threads", required_argument, 0, 't' }, { "prompt", required_argument, 0, 'p' },
		{ "gen", required_argument, 0, 'g' }, { "no-bandwidth", no_argument, 0, 'B' },
		{ "no-peak", no_argument, 0, 'Q' },
		{ "batch", no_argument, 0, 'b' }, { "kv-budget", required_argument, 0, 'k' },
		{ "reps", required_argument, 0, 'R' }, { "backend", required_argument, 0, 'x' },
		{ "measure", no_argument, 0, 'm' }, { "kv-dtype", required_argument, 0, 'K' },
		{ "attention", no_argument, 0, 'a' }, { "window", required_argument, 0, 'w' },
		{ "products", no_argument, 0, 'U' },
		{ "cpu-time", no_argument, 0, 'C' }, { "shared-prefix", no_argument, 0, 'S' },
		{ "prefix", required_argument, 0, 'P' }, { "tail", required_argument, 0, 'T' },
		{ "fill", required_argument, 0, 'F' }, { "rounds", required_argument, 0, 'O' },
		{ "requests", required_argument, 0, 'N' }, { "weights", required_argument, 0, 'W' },
		{ "constrained", required_argument, 0, 'J' }, { "spec", no_argument, 0, 'e' },
		{ "spec-k", required_argument, 0, 'E' }, { "draft-regime", required_argument, 0, 'D' },
		{ "spec-prompts", required_argument, 0, 'X' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': threads = int_arg("threads", optarg, 1, 256); break;
		case 'p': n_prompt = int_arg("prompt", optarg, 1, 1 << 20); prompt_set = 1; break;
		case 'g': n_gen = int_arg("gen", optarg, 1, 1 << 20); gen_set = 1; break;
		case 'c': context = 1; break;
		case 'b': batch = 1; break;
		case 'k': {
			uint64_t v;
			if (!aah_parse_size(optarg, &v) || v < 1 || v > ((uint64_t)1 << 50)) {
				fprintf(stderr, "aah-bench: --kv-budget takes a byte count (K, M, G allowed), not '%s'\n", optarg);
				return 2;
			}
			budget = (int64_t)v;
			break;
		}
		case 'R': reps = int_arg("reps", optarg, 1, 1000); break;
		case 'x': backend_name = optarg; break;
		case 'r': regime = optarg; break;
		case 'B': no_bw = 1; break;
		case 'Q': no_peak = 1; break;
		case 'm': measure = 1; break;
		case 'a': attention = 1; break;
		case 'U': products = 1; break;
		case 'C': bench_clock = CLOCK_PROCESS_CPUTIME_ID; break;
		case 'w': window = int_arg("window", optarg, 1, 4096); break;
		case 'S': shared_prefix = 1; break;
		case 'P': sp_prefix = int_arg("prefix", optarg, 0, 1 << 20); break;
		case 'T': {   /* a list: 20,200,1000 */
			char buf[256];
			snprintf(buf, sizeof buf, "%s", optarg);
			sp_n_tails = 0;
			for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				if (sp_n_tails == 8) {
					fprintf(stderr, "aah-bench: --tail: at most 8 lengths\n");
					return 2;
				}
				sp_tails[sp_n_tails++] = int_arg("tail", t, 2, 4096);
			}
			break;
		}
		case 'F': {   /* a list of shares of the pool: 0.25,0.9 */
			char buf[256];
			snprintf(buf, sizeof buf, "%s", optarg);
			sp_n_fills = 0;
			for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				char *end;
				double f = strtod(t, &end);
				if (*end || !(f > 0.01 && f <= 4) || sp_n_fills == 8) {
					fprintf(stderr, "aah-bench: --fill takes up to 8 shares in (0.01, 4], e.g. 0.25,0.9\n");
					return 2;
				}
				sp_fills[sp_n_fills++] = f;
			}
			break;
		}
		case 'O': sp_rounds = int_arg("rounds", optarg, 2, 100); break;
		case 'N': sp_requests = int_arg("requests", optarg, 1, 4096); requests_set = 1; break;
		case 'K':
			if (parse_kv_types(optarg) != 0) {
				fprintf(stderr, "aah-bench: --kv-dtype takes a list of f32, f16 and bf16, e.g. f32,bf16\n");
				return 2;
			}
			break;
		case 'W':
			if (parse_weight_types(optarg) != 0) {
				fprintf(stderr, "aah-bench: --weights takes a list of at most %d of bf16, f16, f32 (the files' weights) "
				        "and q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k, q6_k, e.g. bf16,q8_0,q4_k_m\n", MAX_WEIGHT_TYPES);
				return 2;
			}
			break;
		case 'J': constrained = optarg; break;
		case 'e': spec = 1; break;
		case 'E': spec_k = int_arg("spec-k", optarg, 1, 15); break;
		case 'D': draft_regime = optarg; break;
		case 'X': spec_prompts = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (bench_clock != CLOCK_MONOTONIC)
		printf("speeds in this process's CPU time (--cpu-time), %d thread%s; load average %.2f\n", threads,
		       threads == 1 ? "" : "s (the workers' spinning counts too)", load_average());
	if (products) {
		if (reps < 1 || optind != argc) {
			usage(stderr);
			return 2;
		}
		return bench_products(reps);
	}
	if (attention) {
		if (window < 1 || window > 4096 || reps < 1 || optind != argc) {
			usage(stderr);
			return 2;
		}
		return bench_attention(window, reps);
	}
	if (optind >= argc || threads < 1 || threads > 256 || n_prompt < 1 || n_gen < 1) {
		usage(stderr);
		return 2;
	}
	if (spec) {
		if (optind != argc - 1 || n_prompt < 1 || n_gen < 2) {
			usage(stderr);
			return 2;
		}
		int32_t gen = gen_set ? n_gen : 128, np = prompt_set ? n_prompt : 128;
		int rc = 0;
		printf("speculative decoding, %s, %d thread%s (docs/speculative.md):\n", argv[optind], threads,
		       threads == 1 ? "" : "s");
		for (int32_t wi = 0; wi < (n_weight_types ? n_weight_types : 1) && rc == 0; wi++)
			rc = spec_mechanics(argv[optind], threads, wi, np, gen, spec_k, reps);
		if (rc == 0)
			rc = spec_e2e(argv[optind], threads, regime, draft_regime, spec_prompts,
			              requests_set ? (sp_requests < 16 ? sp_requests : 16) : 4, np, gen, spec_k, reps);
		return rc;
	}
	if (constrained) {
		if (optind != argc - 1 || n_weight_types > 1) {
			usage(stderr);
			return 2;
		}
		return bench_constrained(constrained, argv[optind], threads, gen_set ? n_gen : 256, reps);
	}
	if (shared_prefix || batch) {   /* the AAH model's default regime, unless --regime names one */
		const char *m = shared_prefix ? argv[optind] : optind + 1 < argc ? argv[optind + 1] : NULL;
		static char def[64];
		snprintf(def, sizeof def, "%s", AAH_FULL_ATTENTION);
		if (m && !regime) {
			model_config mc;
			aah_config a;
			char err[512];
			if (model_config_load(&mc, m, err, sizeof err) == 0 && aah_config_load(&a, m, &mc, err, sizeof err) == 0) {
				snprintf(def, sizeof def, "%s", a.default_regime);
				aah_config_free(&a);
			}
		}
		if (!regime)
			regime = def;
	}
	if (shared_prefix) {
		if (sp_prefix < 16 || sp_prefix > 1 << 16 || sp_n_tails < 1 || sp_requests < 1 || sp_requests > 4096 ||
		    budget < 1 || optind != argc - 1) {
			usage(stderr);
			return 2;
		}
		if (sp_n_fills > 0)
			return bench_prefix_fill(argv[optind], threads, regime, sp_prefix, sp_tails[0], sp_fills, sp_n_fills,
			                         sp_rounds);
		return bench_shared_prefix(argv[optind], threads, regime, sp_prefix, sp_tails, sp_n_tails, sp_requests,
		                           budget);
	}
	if (batch) {
		int32_t gen = gen_set ? n_gen : 16;
		if (gen < 2 || gen > 256 || budget < 1 || reps < 1 || argc - optind > 2) {
			usage(stderr);
			return 2;
		}
		const char *aah = optind + 1 < argc ? argv[optind + 1] : NULL;
		return bench_batch(argv[optind], aah, regime, threads, gen, reps, budget);
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
	const int on_gpu = backend_name ? !strcmp(backend_name, "cuda") || (!strcmp(backend_name, "auto") &&
	                                                                    aah_backend_cuda_available())
	                                : aah_backend_cuda_available();
	if (!no_bw && on_gpu) {   /* the ceiling of a memory-bound decode step on the device */
		bw = aah_cuda_copy_bandwidth(0, (size_t)4 << 30);
		printf("device copy bandwidth (4 GiB device to device, bytes read + written, median of 11): %.1f GB/s\n", bw);
	} else if (!no_bw) {
		bw = measure_read_bandwidth(threads);
		printf("streaming read bandwidth (%d threads, 1 GiB buffer): %.2f GB/s\n", threads, bw);
	}
	if (!no_peak && on_gpu)
		printf("dot-product peaks: not measured on CUDA (the peak loops are the CPU's instructions)\n");
	else if (!no_peak)
		measure_peaks(threads);
	int rc = 0;
	for (int i = optind; i < argc; i++)
		for (int32_t k = 0; k < n_kv_types; k++) {
			model_result r;
			rc |= n_weight_types ? bench_weights(argv[i], threads, n_prompt, n_gen, bw, kv_types[k], reps)
			                     : bench_model(argv[i], threads, n_prompt, n_gen, bw, measure, kv_types[k], 0, &r);
		}
	return rc;
}
