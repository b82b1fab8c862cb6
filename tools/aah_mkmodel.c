/* tools/aah_mkmodel.c — aah-mkmodel: writes a random-weight Qwen3 or Llama model directory in the Hugging Face
 * layout (config.json, model.safetensors or shards + index, tokenizer files) for demos, tests and benchmarks. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/parse_num.h"
#include "models/model_config.h"
#include "models/tokenizer.h"
#include "tools/convert/aah_write.h"
#include "tools/convert/safetensors_write.h"

#define MK_EXIT_FAIL 1
#define MK_EXIT_USAGE 2
#define MK_MAX_THREADS 16

/* ---------------------------------------------------------------------------------------------------------
 * Shapes and presets
 * ------------------------------------------------------------------------------------------------------- */

typedef struct mk_shape {
	model_arch arch;
	int64_t vocab;
	int64_t hidden;
	int64_t layers;
	int64_t heads;            /* query heads */
	int64_t kv_heads;
	int64_t head_dim;
	int64_t intermediate;
	int64_t max_pos;
	double rope_theta;
	double eps;
	bool tied;
	st_dtype dtype;
	int64_t bos, eos;         /* -1: none (written as null) */
} mk_shape;

typedef struct mk_preset {
	const char *name;
	int64_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, max_pos;
	double rope_theta;
	bool tied;
	bool vocab_fixed;         /* a real model's vocabulary: kept even when --tokenizer is given */
} mk_preset;

/* demo: the embedded demo model. Shape: hidden 256, 4 layers, 8 query heads of 32 (q width 256), 4 KV heads
 * (so AAH can give four groups different windows), intermediate 768, max_pos 4096, rope_theta 1e6, tied
 * embeddings. Per layer 787,008 parameters; the embedding dominates: with the Qwen3 tokenizer (ids up to
 * 151,668 → vocab 151,672) the model has 41,976,320 parameters (84 MB in BF16), without a tokenizer (vocab
 * 151,936) 42,043,904. A decode step is ~42 M multiply-adds, 39 M of them the logits: fast on 2 cores. */
static const mk_preset mk_presets[] = {
	{"demo", 256, 4, 8, 4, 32, 768, 151936, 4096, 1e6, true, false},
	{"tiny", 64, 2, 4, 2, 16, 128, 512, 4096, 1e6, true, false},
	{"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1e6, true, true},
	{"qwen3-4b", 2560, 36, 32, 8, 128, 9728, 151936, 32768, 1e6, true, true},
};

static const mk_preset *mk_find_preset(const char *name)
{
	for (size_t i = 0; i < sizeof(mk_presets) / sizeof(mk_presets[0]); i++)
		if (strcmp(mk_presets[i].name, name) == 0)
			return &mk_presets[i];
	return NULL;
}

static size_t mk_dtype_bytes(st_dtype d)
{
	return d == ST_F32 ? 4 : 2;
}

static const char *mk_torch_dtype(st_dtype d)
{
	return d == ST_F32 ? "float32" : d == ST_F16 ? "float16" : "bfloat16";
}

/* ---------------------------------------------------------------------------------------------------------
 * Weights: which tensors, with which distribution
 * ------------------------------------------------------------------------------------------------------- */

/* Scales. The aim is a random model whose greedy output wanders rather than repeating one token, with clear
 * top-1 margins. Checked with an independent NumPy forward pass (greedy, 4 random prompts): demo, Qwen3 and
 * Llama: no token twice in a row in 4 × 100 (resp. 4 × 40) steps, top-1 margin median ≈ 1 logit, p10 ≈ 0.15,
 * < 0.05 in 4-5% of steps; qwen3-0.6b: 24 distinct tokens in 24 steps; tiny (hidden 64): 3 immediate repeats
 * in 160 steps. Without the measures below, the demo repeated its last token in runs of up to 6. Reasoning:
 * - Logits h·e_j (h the final-normed state, rms ≈ 1) get std MK_LOGIT_STD when the output embedding has std
 *   MK_LOGIT_STD/√hidden: wide enough for clear margins among ~10^5 candidates.
 * - With tied embeddings the current token's logit carries an extra |e|²/rms(x) (x = e + r the residual
 *   stream), which makes a plain random model repeat its input. It fades when the layers' sum r is much
 *   larger than √hidden·std(e) = MK_LOGIT_STD: so the sublayers write large outputs (total rms
 *   ~MK_RESID_RMS). Pre-norm keeps every sublayer's input at rms 1 whatever the stream's size.
 * - Diffuse attention (random q·k scores of std 1 average ~all positions) makes consecutive states alike, so
 *   the token just produced comes back. Sharper attention (scores of std MK_QK_GAIN², from q/k of rms
 *   MK_QK_GAIN: Qwen3's q/k norm weights, Llama's q/k projections) and an attention output half the MLP's
 *   remove that.
 * - q/k/v/gate/up: std 1/√in, so their outputs are ~N(0,1); RMSNorm weights 1 + 0.1·N(0,1). */
#define MK_LOGIT_STD 6.0
#define MK_RESID_RMS 24.0
#define MK_QK_GAIN 2.0
#define MK_ATTN_SHARE 0.5       /* attention sublayer output rms ÷ MLP sublayer output rms */
#define MK_VALUE_MIX_RMS 0.9    /* rms of an attention output element: values have rms 1, sharp attention mixes few */
#define MK_SWIGLU_RMS 0.6       /* rms of silu(g)·u for g, u ~ N(0,1) */
#define MK_NORM_JITTER 0.1

typedef struct mk_tensor {
	char name[96];
	int32_t n_dims;
	int64_t shape[2];
	float mean, std;          /* elements are mean + std·N(0,1) */
	int32_t shard;            /* index of the file it goes into */
} mk_tensor;

typedef struct mk_plan {
	mk_tensor *t;             /* owned */
	int32_t n;
	int32_t n_shards;
	uint64_t n_params;
	uint64_t n_bytes;
} mk_plan;

static void mk_plan_add(mk_plan *p, const char *name, int64_t rows, int64_t cols, double mean, double std)
{
	mk_tensor *t = &p->t[p->n++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->n_dims = cols > 0 ? 2 : 1;
	t->shape[0] = rows;
	t->shape[1] = cols;
	t->mean = (float)mean;
	t->std = (float)std;
	t->shard = 0;
}

/* Lists every tensor of the architecture, in the order Hugging Face writes them, and assigns shards:
 * tensors go in order into the current file until the next would pass shard_size (0: one file); a tensor
 * larger than shard_size gets a file of its own. Returns 0, or -1 when out of memory. Free p->t. */
static int mk_plan_tensors(mk_plan *p, const mk_shape *s, uint64_t shard_size)
{
	memset(p, 0, sizeof(*p));
	p->t = calloc((size_t)(3 + 11 * s->layers), sizeof(*p->t));
	if (!p->t)
		return -1;
	double d = (double)s->hidden, qd = (double)(s->heads * s->head_dim), ff = (double)s->intermediate;
	/* layers · (mlp² + attn²) = MK_RESID_RMS², attn = MK_ATTN_SHARE · mlp */
	double mlp_rms = MK_RESID_RMS / sqrt((double)s->layers * (1 + MK_ATTN_SHARE * MK_ATTN_SHARE));
	double attn_rms = MK_ATTN_SHARE * mlp_rms;
	double emb_std = MK_LOGIT_STD / sqrt(d);
	bool qwen = s->arch == MODEL_ARCH_QWEN3;
	double qk_std = (qwen ? 1 : MK_QK_GAIN) / sqrt(d);       /* Qwen3 gets its gain from q/k norm instead */
	char name[96];
	mk_plan_add(p, "model.embed_tokens.weight", s->vocab, s->hidden, 0, emb_std);
	for (int64_t l = 0; l < s->layers; l++) {
#define MK_LAYER(suffix, rows, cols, mean, std)                                                     \
	do {                                                                                        \
		snprintf(name, sizeof(name), "model.layers.%" PRId64 ".%s", l, suffix);             \
		mk_plan_add(p, name, rows, cols, mean, std);                                        \
	} while (0)
		MK_LAYER("input_layernorm.weight", s->hidden, 0, 1, MK_NORM_JITTER);
		MK_LAYER("self_attn.q_proj.weight", s->heads * s->head_dim, s->hidden, 0, qk_std);
		MK_LAYER("self_attn.k_proj.weight", s->kv_heads * s->head_dim, s->hidden, 0, qk_std);
		MK_LAYER("self_attn.v_proj.weight", s->kv_heads * s->head_dim, s->hidden, 0, 1 / sqrt(d));
		MK_LAYER("self_attn.o_proj.weight", s->hidden, s->heads * s->head_dim, 0,
		         attn_rms / (MK_VALUE_MIX_RMS * sqrt(qd)));
		if (qwen) {
			MK_LAYER("self_attn.q_norm.weight", s->head_dim, 0, MK_QK_GAIN, MK_QK_GAIN * MK_NORM_JITTER);
			MK_LAYER("self_attn.k_norm.weight", s->head_dim, 0, MK_QK_GAIN, MK_QK_GAIN * MK_NORM_JITTER);
		}
		MK_LAYER("post_attention_layernorm.weight", s->hidden, 0, 1, MK_NORM_JITTER);
		MK_LAYER("mlp.gate_proj.weight", s->intermediate, s->hidden, 0, 1 / sqrt(d));
		MK_LAYER("mlp.up_proj.weight", s->intermediate, s->hidden, 0, 1 / sqrt(d));
		MK_LAYER("mlp.down_proj.weight", s->hidden, s->intermediate, 0, mlp_rms / (MK_SWIGLU_RMS * sqrt(ff)));
#undef MK_LAYER
	}
	mk_plan_add(p, "model.norm.weight", s->hidden, 0, 1, MK_NORM_JITTER);
	if (!s->tied)
		mk_plan_add(p, "lm_head.weight", s->vocab, s->hidden, 0, emb_std);

	uint64_t in_shard = 0;
	int32_t shard = 0;
	for (int32_t i = 0; i < p->n; i++) {
		mk_tensor *t = &p->t[i];
		uint64_t n = (uint64_t)t->shape[0] * (uint64_t)(t->n_dims == 2 ? t->shape[1] : 1);
		uint64_t bytes = n * mk_dtype_bytes(s->dtype);
		if (shard_size > 0 && in_shard > 0 && in_shard + bytes > shard_size) {
			shard++;
			in_shard = 0;
		}
		t->shard = shard;
		in_shard += bytes;
		p->n_params += n;
		p->n_bytes += bytes;
	}
	p->n_shards = shard + 1;
	return 0;
}

/* Counter-based random numbers: element i of a tensor is a pure function of (seed, tensor name, i), so a tensor
 * is identical whatever order, chunking, sharding or threading writes it. splitmix64's finaliser mixes a
 * Weyl sequence; Box–Muller turns pair i/2 into two normals, of which element i takes the cos or the sin one.
 * log, sin and cos are our own short polynomials rather than libm's: ~4x faster (the generator is the cost of
 * writing a model) and, with only correctly rounded float operations (C11 mode: no FMA contraction), the
 * same bytes on every machine and libm, vectorised or not. Their error (~1e-7) is far below bf16's. */
static inline uint64_t mk_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t mk_tensor_key(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return mk_mix64(mk_mix64(seed + 0x9e3779b97f4a7c15ull) ^ h);
}

/* ln x for a normal float x > 0: x = 2^e·m with m in [√½, √2), ln m = 2·atanh(t), t = (m−1)/(m+1), |t| ≤ 0.172,
 * by its series to t⁹ (error < 1e-8). */
static inline float mk_logf(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof(u));
	u += 0x3f800000u - 0x3f3504f3u;          /* move the exponent's boundary to √½ */
	int32_t e = (int32_t)(u >> 23) - 127;
	u = (u & 0x007fffffu) + 0x3f3504f3u;
	float m;
	memcpy(&m, &u, sizeof(m));
	float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
	float p = 2.0f * t * (1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9)))));
	return (float)e * 0.693147180559945f + p;
}

/* √x for x ≥ 0 without libm: the classic initial guess, then three Newton steps for 1/√x (relative error
 * ~1e-7; x = 0 gives 0). Unlike sqrtf, which must set errno for negative x, it vectorises at -O2. */
static inline float mk_sqrtf(float x)
{
	uint32_t i;
	memcpy(&i, &x, sizeof(i));
	i = 0x5f3759dfu - (i >> 1);
	float y;
	memcpy(&y, &i, sizeof(y));
	float hx = 0.5f * x;
	y = y * (1.5f - hx * y * y);
	y = y * (1.5f - hx * y * y);
	y = y * (1.5f - hx * y * y);
	return x * y;
}

#define MK_PAIRS_PER_BLOCK 128

/* z[0 … 2·MK_PAIRS_PER_BLOCK) = mean + std × the normals of pairs j0, j0+1, …. Each pair: h = mix(key + (j+1)·φ);
 * u1 = (top 24 bits + ½)/2^24 in (0, 1] (float rounding may reach 1: r = 0), angle = 2π·(next 24 bits)/2^24; r = √(−2 ln u1); (r cos, r sin).
 * The angle's top 2 bits pick the quadrant, so sin/cos only ever see θ in [0, π/2), where Taylor to θ¹¹/θ¹²
 * is within 6e-8. Separate loops over fixed-size arrays, with no libm calls and selects instead of branches,
 * are what GCC's -O2 vectoriser accepts: 4x faster than the scalar loop on SSE2. */
static void mk_gauss_block(uint64_t key, uint64_t j0, float mean, float std, float *z)
{
	uint32_t ua[MK_PAIRS_PER_BLOCK], ub[MK_PAIRS_PER_BLOCK];
	float r[MK_PAIRS_PER_BLOCK], c[MK_PAIRS_PER_BLOCK], s[MK_PAIRS_PER_BLOCK];
	for (int k = 0; k < MK_PAIRS_PER_BLOCK; k++) {
		uint64_t h = mk_mix64(key + (j0 + (uint64_t)k + 1) * 0x9e3779b97f4a7c15ull);
		ua[k] = (uint32_t)(h >> 40);
		ub[k] = (uint32_t)(h >> 8) & 0xffffffu;
	}
	for (int k = 0; k < MK_PAIRS_PER_BLOCK; k++)
		r[k] = mk_sqrtf(-2.0f * mk_logf(((float)(int32_t)ua[k] + 0.5f) * (1.0f / 16777216.0f)));
	for (int k = 0; k < MK_PAIRS_PER_BLOCK; k++) {
		int32_t q = (int32_t)(ub[k] >> 22);
		float th = (float)(int32_t)(ub[k] & 0x3fffffu) * (1.57079632679489662f / 4194304.0f), t2 = th * th;
		float sn = th * (1 - t2 * (1.0f / 6) * (1 - t2 * (1.0f / 20) * (1 - t2 * (1.0f / 42) *
		           (1 - t2 * (1.0f / 72) * (1 - t2 * (1.0f / 110))))));
		float cs = 1 - t2 * 0.5f * (1 - t2 * (1.0f / 12) * (1 - t2 * (1.0f / 30) * (1 - t2 * (1.0f / 56) *
		           (1 - t2 * (1.0f / 90) * (1 - t2 * (1.0f / 132))))));
		/* Rotate by q quarter turns: odd q swaps sin and cos; cos flips sign for q = 1, 2 and sin for
		 * q = 2, 3. Done on the bits, which keeps it exact and branch-free. */
		uint32_t bs, bc, swap = 0u - (uint32_t)(q & 1);
		memcpy(&bs, &sn, sizeof(bs));
		memcpy(&bc, &cs, sizeof(bc));
		uint32_t oc = ((bs & swap) | (bc & ~swap)) ^ ((uint32_t)((q + 1) & 2) << 30);
		uint32_t os = ((bc & swap) | (bs & ~swap)) ^ ((uint32_t)(q & 2) << 30);
		memcpy(&c[k], &oc, sizeof(oc));
		memcpy(&s[k], &os, sizeof(os));
	}
	for (int k = 0; k < MK_PAIRS_PER_BLOCK; k++) {
		z[2 * k] = mean + std * (r[k] * c[k]);
		z[2 * k + 1] = mean + std * (r[k] * s[k]);
	}
}

typedef struct mk_fill_ctx {
	uint64_t key;
	float mean, std;
	st_dtype dtype;
	int threads;
} mk_fill_ctx;

typedef struct mk_fill_job {
	const mk_fill_ctx *c;
	void *out;
	uint64_t first, n;
} mk_fill_job;

/* Elements [first, first + n) into out[0 … n), in the tensor's dtype. Whole blocks of pairs are generated
 * (the few beyond n are dropped), which keeps mk_gauss_block's loops fixed-length. */
static void mk_fill_range(const mk_fill_ctx *c, void *out, uint64_t first, uint64_t n)
{
	float z[2 * MK_PAIRS_PER_BLOCK];
	size_t esize = mk_dtype_bytes(c->dtype);
	uint64_t end = first + n;
	for (uint64_t i = first; i < end;) {
		uint64_t j0 = i >> 1;                       /* pairs j0 … j0+block−1 cover i … stop−1 */
		uint64_t stop = 2 * (j0 + MK_PAIRS_PER_BLOCK);
		stop = stop < end ? stop : end;
		mk_gauss_block(c->key, j0, c->mean, c->std, z);
		st_convert_f32((char *)out + (i - first) * esize, c->dtype, z + (i - 2 * j0), (size_t)(stop - i));
		i = stop;
	}
}

static void *mk_fill_thread(void *arg)
{
	mk_fill_job *j = arg;
	mk_fill_range(j->c, j->out, j->first, j->n);
	return NULL;
}

/* st_fill_fn: splits the chunk across threads. Drawing the numbers (~3.5 ns per element per core) is most of the
 * cost of writing a model; the writes only copy into the page cache. */
static int mk_fill(void *ctx, void *out, int64_t first, int64_t n, char *err, size_t err_len)
{
	const mk_fill_ctx *c = ctx;
	int t = c->threads;
	if (t > 1 && n < 65536)
		t = 1;
	if (t <= 1) {
		mk_fill_range(c, out, (uint64_t)first, (uint64_t)n);
		return 0;
	}
	pthread_t th[MK_MAX_THREADS];
	bool joined[MK_MAX_THREADS];
	mk_fill_job jobs[MK_MAX_THREADS];
	uint64_t per = ((uint64_t)n + (uint64_t)t - 1) / (uint64_t)t;
	per = (per + 1) & ~(uint64_t)1;          /* even slices: from an even first, no pair is drawn twice */
	int n_jobs = 0;
	for (uint64_t lo = 0; lo < (uint64_t)n && n_jobs < t; lo += per, n_jobs++) {
		uint64_t cnt = (uint64_t)n - lo < per ? (uint64_t)n - lo : per;
		jobs[n_jobs] = (mk_fill_job){c, (char *)out + lo * mk_dtype_bytes(c->dtype), (uint64_t)first + lo, cnt};
	}
	for (int k = 1; k < n_jobs; k++) {        /* slice 0 runs on this thread */
		joined[k] = pthread_create(&th[k], NULL, mk_fill_thread, &jobs[k]) == 0;
		if (!joined[k])
			mk_fill_range(c, jobs[k].out, jobs[k].first, jobs[k].n);
	}
	mk_fill_range(c, jobs[0].out, jobs[0].first, jobs[0].n);
	for (int k = 1; k < n_jobs; k++)
		if (joined[k])
			pthread_join(th[k], NULL);
	(void)err;
	(void)err_len;
	return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------------------------- */

/* Writes data to path through path.tmp + fsync + rename. Returns 0, or -1 with err. */
static int mk_write_file(const char *path, const void *data, size_t len, char *err, size_t err_len)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		snprintf(err, err_len, "%s: path too long", path);
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, err_len, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	const char *p = data;
	size_t left = len;
	while (left > 0) {
		ssize_t k = write(fd, p, left);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			snprintf(err, err_len, "%s: write: %s", tmp, strerror(errno));
			close(fd);
			unlink(tmp);
			return -1;
		}
		p += k;
		left -= (size_t)k;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		snprintf(err, err_len, "%s: %s", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path) != 0) {
		snprintf(err, err_len, "%s: rename: %s", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* Writes a JSON value as Hugging Face does (indent 2, sorted keys, trailing newline). */
static int mk_write_json(const char *path, const json_t *j, char *err, size_t err_len)
{
	char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
	if (!text) {
		snprintf(err, err_len, "%s: out of memory", path);
		return -1;
	}
	size_t n = strlen(text);
	char *withnl = malloc(n + 2);
	if (!withnl) {
		free(text);
		snprintf(err, err_len, "%s: out of memory", path);
		return -1;
	}
	memcpy(withnl, text, n);
	withnl[n] = '\n';
	int rc = mk_write_file(path, withnl, n + 1, err, err_len);
	free(withnl);
	free(text);
	return rc;
}

/* Copies src over dst as mk_write_file writes: into dst.tmp, then renamed into place. */
static int mk_copy_file(const char *src, const char *dst, char *err, size_t err_len)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", dst) >= (int)sizeof(tmp)) {
		snprintf(err, err_len, "%s: path too long", dst);
		return -1;
	}
	unlink(tmp);   /* a leftover of a killed run */
	if (aah_copy_file(src, tmp, err, err_len) != 0) {
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, dst) != 0) {
		snprintf(err, err_len, "%s: rename: %s", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* mkdir -p. Returns 0 or -1 with errno. */
static int mk_mkdir_p(const char *dir)
{
	char path[4096];
	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(path, 0755) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		return -1;
	struct stat st;
	if (stat(path, &st) != 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * Tokenizer: vocabulary size and special ids (through models/tokenizer.h), and the copy
 * ------------------------------------------------------------------------------------------------------- */

typedef struct mk_tokenizer_info {
	int64_t vocab;            /* highest id + 1 */
	int64_t bos, eos;         /* -1 when not found */
} mk_tokenizer_info;

/* The id of the special token spelled text (the whole text encodes to that one special token), or -1. */
static int64_t mk_special_id(const tokenizer *t, const char *text)
{
	int32_t ids[2];
	int64_t n = tokenizer_encode(t, text, strlen(text), false, ids, 2, NULL, 0);
	return n == 1 && tokenizer_is_special(t, ids[0]) ? ids[0] : -1;
}

/* Reads dir's tokenizer as aahd will (models/tokenizer.h: tokenizer.json, else tokenizer.model, with
 * tokenizer_config.json), so a model is never written beside a tokenizer that aahd cannot load: the vocabulary size
 * (highest id + 1) and the BOS/EOS ids that config.json records. The tokenizer's own EOS, else <|endoftext|>,
 * <|end_of_text|> or </s>. BOS: the tokenizer's own, else <|endoftext|> (Qwen's configs name it while their
 * tokenizers add no BOS), <|begin_of_text|> or <s>, else EOS. Returns 0, or -1 with err. */
static int mk_tokenizer_read(const char *dir, mk_tokenizer_info *ti, char *err, size_t err_len)
{
	tokenizer *t = tokenizer_load(dir, err, err_len);
	if (!t)
		return -1;
	static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
	static const char *const bos_names[] = {"<|endoftext|>", "<|begin_of_text|>", "<s>"};
	ti->vocab = tokenizer_vocab_size(t);
	ti->eos = tokenizer_eos(t);
	for (size_t i = 0; ti->eos < 0 && i < sizeof eos_names / sizeof eos_names[0]; i++)
		ti->eos = mk_special_id(t, eos_names[i]);
	ti->bos = tokenizer_bos(t);
	for (size_t i = 0; ti->bos < 0 && i < sizeof bos_names / sizeof bos_names[0]; i++)
		ti->bos = mk_special_id(t, bos_names[i]);
	if (ti->bos < 0)
		ti->bos = ti->eos;
	tokenizer_free(t);
	return 0;
}

/* Copies tokenizer.json, tokenizer_config.json and tokenizer.model (those present) from src_dir to out_dir. */
static int mk_copy_tokenizer(const char *src_dir, const char *out_dir, char *err, size_t err_len)
{
	static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char src[4096], dst[4096];
		snprintf(src, sizeof(src), "%s/%s", src_dir, files[i]);
		snprintf(dst, sizeof(dst), "%s/%s", out_dir, files[i]);
		if (!aah_is_file(src))
			continue;
		if (mk_copy_file(src, dst, err, err_len) != 0)
			return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * config.json
 * ------------------------------------------------------------------------------------------------------- */

static json_t *mk_json_id(int64_t id)
{
	return id >= 0 ? json_integer(id) : json_null();
}

/* A float that Python would print as an integer stays one (rope_theta 1000000, as Qwen's config has it). */
static json_t *mk_json_number(double v)
{
	if (v == floor(v) && fabs(v) < 9e15)
		return json_integer((json_int_t)v);
	return json_real(v);
}

/* Writes out_dir/config.json with every field a real Hugging Face Qwen3 / Llama config carries. */
static int mk_write_config(const mk_shape *s, const char *out_dir, char *err, size_t err_len)
{
	bool qwen = s->arch == MODEL_ARCH_QWEN3;
	json_t *c = json_object();
	json_t *archs = json_array();
	json_array_append_new(archs, json_string(qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM"));
	json_object_set_new(c, "architectures", archs);
	json_object_set_new(c, "attention_bias", json_false());
	json_object_set_new(c, "attention_dropout", json_real(0.0));
	json_object_set_new(c, "bos_token_id", mk_json_id(s->bos));
	json_object_set_new(c, "eos_token_id", mk_json_id(s->eos));
	json_object_set_new(c, "head_dim", json_integer(s->head_dim));
	json_object_set_new(c, "hidden_act", json_string("silu"));
	json_object_set_new(c, "hidden_size", json_integer(s->hidden));
	json_object_set_new(c, "initializer_range", json_real(0.02));
	json_object_set_new(c, "intermediate_size", json_integer(s->intermediate));
	json_object_set_new(c, "max_position_embeddings", json_integer(s->max_pos));
	json_object_set_new(c, "model_type", json_string(qwen ? "qwen3" : "llama"));
	json_object_set_new(c, "num_attention_heads", json_integer(s->heads));
	json_object_set_new(c, "num_hidden_layers", json_integer(s->layers));
	json_object_set_new(c, "num_key_value_heads", json_integer(s->kv_heads));
	json_object_set_new(c, "rms_norm_eps", json_real(s->eps));
	json_object_set_new(c, "rope_scaling", json_null());
	json_object_set_new(c, "rope_theta", mk_json_number(s->rope_theta));
	json_object_set_new(c, "tie_word_embeddings", json_boolean(s->tied));
	json_object_set_new(c, "torch_dtype", json_string(mk_torch_dtype(s->dtype)));
	json_object_set_new(c, "transformers_version", json_string("4.51.0"));
	json_object_set_new(c, "use_cache", json_true());
	json_object_set_new(c, "vocab_size", json_integer(s->vocab));
	if (qwen) {
		json_object_set_new(c, "max_window_layers", json_integer(s->layers));
		json_object_set_new(c, "sliding_window", json_null());
		json_object_set_new(c, "use_sliding_window", json_false());
	} else {
		json_object_set_new(c, "mlp_bias", json_false());
		json_object_set_new(c, "pretraining_tp", json_integer(1));
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/config.json", out_dir);
	int rc = mk_write_json(path, c, err, err_len);
	json_decref(c);
	return rc;
}

/* ---------------------------------------------------------------------------------------------------------
 * Weights
 * ------------------------------------------------------------------------------------------------------- */

static void mk_shard_name(char *buf, size_t n, int32_t shard, int32_t n_shards)
{
	if (n_shards == 1)
		snprintf(buf, n, "model.safetensors");
	else
		snprintf(buf, n, "model-%05d-of-%05d.safetensors", (int)shard + 1, (int)n_shards);
}

/* Removes weight files of another layout left by an earlier run (a stale index would make loaders look for
 * shards; a stale model.safetensors beside an index is ambiguous). */
static void mk_remove_stale_weights(const char *out_dir, int32_t n_shards)
{
	DIR *d = opendir(out_dir);
	if (!d)
		return;
	struct dirent *e;
	char keep[64];
	mk_shard_name(keep, sizeof(keep), 0, n_shards);
	while ((e = readdir(d))) {
		bool stale = false;
		if (fnmatch("model-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].safetensors", e->d_name, 0) == 0)
			stale = n_shards == 1 || strcmp(e->d_name + 15, keep + 15) != 0;   /* another "-of-N" */
		else if (strcmp(e->d_name, "model.safetensors") == 0)
			stale = n_shards > 1;
		else if (strcmp(e->d_name, "model.safetensors.index.json") == 0)
			stale = n_shards == 1;
		if (stale) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", out_dir, e->d_name);
			unlink(path);
		}
	}
	closedir(d);
}

/* Writes the planned tensors (one file, or shards plus model.safetensors.index.json) with weights drawn from
 * seed. Each file is streamed chunk by chunk, so memory stays a few MiB whatever the model's size. */
static int mk_write_weights(const mk_plan *p, const mk_shape *s, uint64_t seed, int threads, const char *out_dir,
                            char *err, size_t err_len)
{
	mk_fill_ctx *ctx = calloc((size_t)p->n, sizeof(*ctx));
	json_t *weight_map = json_object();
	int rc = -1;
	if (!ctx || !weight_map) {
		snprintf(err, err_len, "out of memory");
		goto done;
	}
	mk_remove_stale_weights(out_dir, p->n_shards);
	for (int32_t i = 0; i < p->n; i++)
		ctx[i] = (mk_fill_ctx){mk_tensor_key(seed, p->t[i].name), p->t[i].mean, p->t[i].std, s->dtype, threads};
	for (int32_t sh = 0; sh < p->n_shards; sh++) {
		char file[64], path[4096];
		mk_shard_name(file, sizeof(file), sh, p->n_shards);
		snprintf(path, sizeof(path), "%s/%s", out_dir, file);
		st_writer *w = st_writer_open(path, err, err_len);
		if (!w || st_writer_set_metadata(w, "format", "pt") != 0) {
			st_writer_discard(w);
			goto done;
		}
		for (int32_t i = 0; i < p->n; i++) {
			const mk_tensor *t = &p->t[i];
			if (t->shard != sh)
				continue;
			if (st_writer_add_fill(w, t->name, s->dtype, t->n_dims, t->shape, mk_fill, &ctx[i]) != 0) {
				st_writer_discard(w);
				goto done;
			}
			json_object_set_new(weight_map, t->name, json_string(file));
		}
		if (st_writer_close(w) != 0)
			goto done;
	}
	if (p->n_shards > 1) {
		json_t *index = json_object(), *meta = json_object();
		json_object_set_new(meta, "total_size", json_integer((json_int_t)p->n_bytes));
		json_object_set_new(index, "metadata", meta);
		json_object_set(index, "weight_map", weight_map);
		char path[4096];
		snprintf(path, sizeof(path), "%s/model.safetensors.index.json", out_dir);
		int r = mk_write_json(path, index, err, err_len);
		json_decref(index);
		if (r != 0)
			goto done;
	}
	rc = 0;
done:
	json_decref(weight_map);
	free(ctx);
	return rc;
}

/* ---------------------------------------------------------------------------------------------------------
 * Command line
 * ------------------------------------------------------------------------------------------------------- */

typedef struct mk_options {
	const char *out_dir;
	const char *tokenizer_dir;
	const char *preset;
	uint64_t seed;
	uint64_t shard_size;      /* 0: one file */
	/* Overrides; -1 / NAN / unset when not given. */
	int arch;
	int64_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, max_pos;
	int tied;
	int dtype;
	double rope_theta, eps;
	/* aah.json */
	int aah;
	aah_write_params aah_p;
	int32_t aah_layer_windows[1024];
	int32_t n_aah_layer_windows;
} mk_options;

static void mk_usage(FILE *f)
{
	fprintf(f,
	        "usage: aah-mkmodel --out DIR [options]\n"
	        "Writes a random-weight model in the Hugging Face layout: config.json, model.safetensors (or shards\n"
	        "with model.safetensors.index.json) and, with --tokenizer, the tokenizer files.\n"
	        "\n"
	        "  --out DIR            output directory (created if missing; required)\n"
	        "  --arch qwen3|llama   architecture (default qwen3; llama has no q/k norm)\n"
	        "  --preset NAME        shape preset (default demo):\n"
	        "      demo        hidden 256, 4 layers, 8 heads, 4 KV heads, head_dim 32, intermediate 768,\n"
	        "                  max_pos 4096, rope_theta 1e6, tied; vocab from --tokenizer, else 151936\n"
	        "                  (42.0 M parameters, 84 MB in BF16, with the Qwen3 tokenizer)\n"
	        "      tiny        hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 16, intermediate 128,\n"
	        "                  max_pos 4096, tied; vocab from --tokenizer, else 512 (for tests)\n"
	        "      qwen3-0.6b  hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128, intermediate 3072,\n"
	        "                  vocab 151936, max_pos 40960, rope_theta 1e6, tied (1.2 GB in BF16)\n"
	        "      qwen3-4b    hidden 2560, 36 layers, 32 heads, 8 KV heads, head_dim 128, intermediate 9728,\n"
	        "                  vocab 151936, max_pos 32768, rope_theta 1e6, tied (8.0 GB in BF16)\n"
	        "  --tokenizer DIR      copy DIR/tokenizer.json, tokenizer_config.json and tokenizer.model (those\n"
	        "                       present); the vocabulary defaults to the tokenizer's size (highest id + 1 over\n"
	        "                       model.vocab and added_tokens, or tokenizer.model's piece count) rounded up to\n"
	        "                       a multiple of 8, except for the qwen3-* presets, which keep 151936; BOS/EOS ids\n"
	        "                       come from tokenizer_config.json\n"
	        "  --hidden N --layers N --heads N --kv-heads N --head-dim N --intermediate N --vocab N --max-pos N\n"
	        "                       override the preset's sizes (heads divisible by kv-heads; head-dim even)\n"
	        "  --rope-theta X       RoPE base (default 1e6)\n"
	        "  --eps X              RMSNorm epsilon (default 1e-6 for qwen3, 1e-5 for llama)\n"
	        "  --tied 0|1           tie lm_head to the input embedding (presets: 1)\n"
	        "  --dtype bf16|f16|f32 weight type (default bf16)\n"
	        "  --seed N             weights are a pure function of (seed, tensor name, index) (default 0)\n"
	        "  --shard-size BYTES   split the weights into files of at most BYTES (suffix K, M, G = 2^10, 2^20,\n"
	        "                       2^30) when the model is larger; a bigger single tensor gets its own file\n"
	        "  --aah                write aah.json with the principal regimes of the paper's table 3: grouping_off\n"
	        "                       (one group per layer), full_adaptive (adaptive, capacity 2 x window),\n"
	        "                       shallow_freeze and deep_reuse (static); each regime's windows are drawn by\n"
	        "                       --seed so its ACR approaches its table-6 value (0.5793, 0.2484, 0.3400, 0.3616)\n"
	        "  --aah-acr X          target ACR for every regime instead (e.g. 0.3)\n"
	        "  --aah-context T      aah.json context_length (default 4096)\n"
	        "  --aah-windows LIST   candidate windows (default 512,1024,2048,4096)\n"
	        "  --aah-layer-windows LIST  one window per layer, for every group of that layer (instead of drawing)\n"
	        "  --aah-group-size N   KV heads per group (default 1)\n"
	        "  --aah-default NAME   default_regime (default shallow_freeze)\n"
	        "  --help               this text\n"
	        "Exit status: 0 written, 1 failed while writing, 2 bad usage.\n");
}

static int mk_usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "aah-mkmodel: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'aah-mkmodel --help'.\n");
	return MK_EXIT_USAGE;
}

enum {
	MK_OPT_OUT = 256, MK_OPT_ARCH, MK_OPT_PRESET, MK_OPT_TOKENIZER, MK_OPT_HIDDEN, MK_OPT_LAYERS, MK_OPT_HEADS,
	MK_OPT_KV_HEADS, MK_OPT_HEAD_DIM, MK_OPT_INTERMEDIATE, MK_OPT_VOCAB, MK_OPT_MAX_POS, MK_OPT_ROPE_THETA,
	MK_OPT_TIED, MK_OPT_DTYPE, MK_OPT_SEED, MK_OPT_EPS, MK_OPT_SHARD_SIZE, MK_OPT_HELP,
	MK_OPT_AAH, MK_OPT_AAH_ACR, MK_OPT_AAH_CONTEXT, MK_OPT_AAH_WINDOWS, MK_OPT_AAH_LAYER_WINDOWS,
	MK_OPT_AAH_GROUP_SIZE, MK_OPT_AAH_DEFAULT,
};

/* "512,1024" into out (at most cap values, each in [1, 1<<24]). Returns the count, or -1 (also for more than cap). */
static int mk_parse_list(const char *s, int32_t *out, int cap)
{
	int64_t n = aah_parse_int_list(s, true, 1, 1 << 24, out, cap);
	return n > 0 && n <= cap ? (int)n : -1;
}

/* Parses argv into o. Returns 0, MK_EXIT_USAGE after printing the problem, or -1 for --help (printed). */
static int mk_parse_args(int argc, char **argv, mk_options *o)
{
	static const struct option longs[] = {
		{"out", required_argument, NULL, MK_OPT_OUT},
		{"arch", required_argument, NULL, MK_OPT_ARCH},
		{"preset", required_argument, NULL, MK_OPT_PRESET},
		{"tokenizer", required_argument, NULL, MK_OPT_TOKENIZER},
		{"hidden", required_argument, NULL, MK_OPT_HIDDEN},
		{"layers", required_argument, NULL, MK_OPT_LAYERS},
		{"heads", required_argument, NULL, MK_OPT_HEADS},
		{"kv-heads", required_argument, NULL, MK_OPT_KV_HEADS},
		{"head-dim", required_argument, NULL, MK_OPT_HEAD_DIM},
		{"intermediate", required_argument, NULL, MK_OPT_INTERMEDIATE},
		{"vocab", required_argument, NULL, MK_OPT_VOCAB},
		{"max-pos", required_argument, NULL, MK_OPT_MAX_POS},
		{"rope-theta", required_argument, NULL, MK_OPT_ROPE_THETA},
		{"tied", required_argument, NULL, MK_OPT_TIED},
		{"dtype", required_argument, NULL, MK_OPT_DTYPE},
		{"seed", required_argument, NULL, MK_OPT_SEED},
		{"eps", required_argument, NULL, MK_OPT_EPS},
		{"shard-size", required_argument, NULL, MK_OPT_SHARD_SIZE},
		{"help", no_argument, NULL, MK_OPT_HELP},
		{"aah", no_argument, NULL, MK_OPT_AAH},
		{"aah-acr", required_argument, NULL, MK_OPT_AAH_ACR},
		{"aah-context", required_argument, NULL, MK_OPT_AAH_CONTEXT},
		{"aah-windows", required_argument, NULL, MK_OPT_AAH_WINDOWS},
		{"aah-layer-windows", required_argument, NULL, MK_OPT_AAH_LAYER_WINDOWS},
		{"aah-group-size", required_argument, NULL, MK_OPT_AAH_GROUP_SIZE},
		{"aah-default", required_argument, NULL, MK_OPT_AAH_DEFAULT},
		{NULL, 0, NULL, 0},
	};
	*o = (mk_options){.preset = "demo", .arch = -1, .hidden = -1, .layers = -1, .heads = -1, .kv_heads = -1,
	                  .head_dim = -1, .intermediate = -1, .vocab = -1, .max_pos = -1, .tied = -1, .dtype = -1,
	                  .rope_theta = NAN, .eps = NAN};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
		int64_t *size = NULL;
		const char *what = NULL;
		switch (c) {
		case MK_OPT_OUT: o->out_dir = optarg; break;
		case MK_OPT_TOKENIZER: o->tokenizer_dir = optarg; break;
		case MK_OPT_PRESET:
			if (!mk_find_preset(optarg))
				return mk_usage_error("unknown preset '%s' (demo, tiny, qwen3-0.6b, qwen3-4b)", optarg);
			o->preset = optarg;
			break;
		case MK_OPT_ARCH:
			if (strcmp(optarg, "qwen3") == 0)
				o->arch = MODEL_ARCH_QWEN3;
			else if (strcmp(optarg, "llama") == 0)
				o->arch = MODEL_ARCH_LLAMA;
			else
				return mk_usage_error("unknown --arch '%s' (qwen3 or llama)", optarg);
			break;
		case MK_OPT_HIDDEN: size = &o->hidden; what = "--hidden"; break;
		case MK_OPT_LAYERS: size = &o->layers; what = "--layers"; break;
		case MK_OPT_HEADS: size = &o->heads; what = "--heads"; break;
		case MK_OPT_KV_HEADS: size = &o->kv_heads; what = "--kv-heads"; break;
		case MK_OPT_HEAD_DIM: size = &o->head_dim; what = "--head-dim"; break;
		case MK_OPT_INTERMEDIATE: size = &o->intermediate; what = "--intermediate"; break;
		case MK_OPT_VOCAB: size = &o->vocab; what = "--vocab"; break;
		case MK_OPT_MAX_POS: size = &o->max_pos; what = "--max-pos"; break;
		case MK_OPT_ROPE_THETA:
			if (!aah_parse_f64(optarg, &o->rope_theta) || !(o->rope_theta > 1))
				return mk_usage_error("--rope-theta must be a number > 1, not '%s'", optarg);
			break;
		case MK_OPT_EPS:
			if (!aah_parse_f64(optarg, &o->eps) || !(o->eps > 0 && o->eps < 1))
				return mk_usage_error("--eps must be a number in (0, 1), not '%s'", optarg);
			break;
		case MK_OPT_TIED:
			if (strcmp(optarg, "0") != 0 && strcmp(optarg, "1") != 0)
				return mk_usage_error("--tied takes 0 or 1, not '%s'", optarg);
			o->tied = optarg[0] == '1';
			break;
		case MK_OPT_DTYPE:
			if (strcmp(optarg, "bf16") == 0)
				o->dtype = ST_BF16;
			else if (strcmp(optarg, "f16") == 0)
				o->dtype = ST_F16;
			else if (strcmp(optarg, "f32") == 0)
				o->dtype = ST_F32;
			else
				return mk_usage_error("unknown --dtype '%s' (bf16, f16 or f32)", optarg);
			break;
		case MK_OPT_SEED:
			if (!aah_parse_u64(optarg, 0, &o->seed))
				return mk_usage_error("--seed must be a non-negative integer, not '%s'", optarg);
			break;
		case MK_OPT_SHARD_SIZE:
			if (!aah_parse_size(optarg, &o->shard_size) || o->shard_size == 0)
				return mk_usage_error("--shard-size must be a positive byte count, not '%s'", optarg);
			break;
		case MK_OPT_HELP:
			mk_usage(stdout);
			return -1;
		case MK_OPT_AAH: o->aah = 1; break;
		case MK_OPT_AAH_ACR:
			if (!aah_parse_f64(optarg, &o->aah_p.acr) || !(o->aah_p.acr > 0 && o->aah_p.acr <= 1))
				return mk_usage_error("--aah-acr must be a number in (0, 1], not '%s'", optarg);
			o->aah = 1;
			break;
		case MK_OPT_AAH_CONTEXT: {
			int32_t t;
			if (mk_parse_list(optarg, &t, 1) != 1)
				return mk_usage_error("--aah-context must be a positive integer, not '%s'", optarg);
			o->aah_p.context_length = t;
			o->aah = 1;
			break;
		}
		case MK_OPT_AAH_WINDOWS:
			if ((o->aah_p.n_windows = mk_parse_list(optarg, o->aah_p.windows, 8)) < 0)
				return mk_usage_error("--aah-windows takes up to 8 comma-separated windows, not '%s'", optarg);
			o->aah = 1;
			break;
		case MK_OPT_AAH_LAYER_WINDOWS:
			if ((o->n_aah_layer_windows = mk_parse_list(optarg, o->aah_layer_windows, 1024)) < 0)
				return mk_usage_error("--aah-layer-windows takes comma-separated windows, not '%s'", optarg);
			o->aah = 1;
			break;
		case MK_OPT_AAH_GROUP_SIZE: {
			int32_t g;
			if (mk_parse_list(optarg, &g, 1) != 1)
				return mk_usage_error("--aah-group-size must be a positive integer, not '%s'", optarg);
			o->aah_p.group_size = g;
			o->aah = 1;
			break;
		}
		case MK_OPT_AAH_DEFAULT:
			o->aah_p.default_regime = optarg;
			o->aah = 1;
			break;
		case ':':
			return mk_usage_error("%s needs a value", argv[optind - 1]);
		default:
			return mk_usage_error("unknown option '%s'", argv[optind - 1]);
		}
		if (size && !aah_parse_i64(optarg, 1, INT64_MAX, size)) {
			fprintf(stderr, "aah-mkmodel: %s must be a positive integer, not '%s'\nTry 'aah-mkmodel --help'.\n",
			        what, optarg);
			return MK_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return mk_usage_error("unexpected argument '%s'", argv[optind]);
	if (!o->out_dir)
		return mk_usage_error("%s", "--out DIR is required");
	return 0;
}

/* Resolves preset + overrides + tokenizer into a shape, and checks it. Returns 0 or MK_EXIT_USAGE (printed). */
static int mk_resolve_shape(const mk_options *o, const mk_tokenizer_info *ti, mk_shape *s)
{
	const mk_preset *p = mk_find_preset(o->preset);
	s->arch = o->arch >= 0 ? (model_arch)o->arch : MODEL_ARCH_QWEN3;
	s->hidden = o->hidden > 0 ? o->hidden : p->hidden;
	s->layers = o->layers > 0 ? o->layers : p->layers;
	s->heads = o->heads > 0 ? o->heads : p->heads;
	s->kv_heads = o->kv_heads > 0 ? o->kv_heads : p->kv_heads;
	s->head_dim = o->head_dim > 0 ? o->head_dim : p->head_dim;
	s->intermediate = o->intermediate > 0 ? o->intermediate : p->intermediate;
	s->max_pos = o->max_pos > 0 ? o->max_pos : p->max_pos;
	s->rope_theta = !isnan(o->rope_theta) ? o->rope_theta : p->rope_theta;
	s->eps = !isnan(o->eps) ? o->eps : s->arch == MODEL_ARCH_QWEN3 ? 1e-6 : 1e-5;
	s->tied = o->tied >= 0 ? o->tied != 0 : p->tied;
	s->dtype = o->dtype >= 0 ? (st_dtype)o->dtype : ST_BF16;
	if (o->vocab > 0)
		s->vocab = o->vocab;
	else if (ti && !p->vocab_fixed)
		s->vocab = (ti->vocab + 7) / 8 * 8;
	else
		s->vocab = p->vocab;

	struct { const char *name; int64_t v, max; } bounds[] = {
		{"--hidden", s->hidden, 1 << 16}, {"--layers", s->layers, 1024}, {"--heads", s->heads, 1024},
		{"--kv-heads", s->kv_heads, 1024}, {"--head-dim", s->head_dim, 1024},
		{"--intermediate", s->intermediate, 1 << 20}, {"--vocab", s->vocab, 1 << 24},
		{"--max-pos", s->max_pos, 1 << 24},
	};
	for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
		if (bounds[i].v < 1 || bounds[i].v > bounds[i].max) {
			fprintf(stderr, "aah-mkmodel: %s is %" PRId64 ", must be in 1 … %" PRId64 "\n", bounds[i].name,
			        bounds[i].v, bounds[i].max);
			return MK_EXIT_USAGE;
		}
	}
	if (s->heads % s->kv_heads != 0) {
		fprintf(stderr, "aah-mkmodel: %" PRId64 " query heads are not divisible by %" PRId64 " KV heads\n",
		        s->heads, s->kv_heads);
		return MK_EXIT_USAGE;
	}
	if (s->head_dim % 2 != 0) {
		fprintf(stderr, "aah-mkmodel: head_dim %" PRId64 " is odd (RoPE rotates pairs)\n", s->head_dim);
		return MK_EXIT_USAGE;
	}
	if (ti && s->vocab < ti->vocab) {
		fprintf(stderr, "aah-mkmodel: vocab %" PRId64 " is smaller than the tokenizer's %" PRId64 " tokens\n",
		        s->vocab, ti->vocab);
		return MK_EXIT_USAGE;
	}
	if (ti) {
		s->bos = ti->bos;
		s->eos = ti->eos;
	} else if (s->arch == MODEL_ARCH_QWEN3 && s->vocab > 151645) {
		s->bos = 151643;                /* <|endoftext|>, <|im_end|> */
		s->eos = 151645;
	} else if (s->arch == MODEL_ARCH_LLAMA && s->vocab > 128001) {
		s->bos = 128000;                /* <|begin_of_text|>, <|end_of_text|> */
		s->eos = 128001;
	} else {
		s->bos = s->vocab > 1 ? 1 : -1; /* SentencePiece's <s>, </s> */
		s->eos = s->vocab > 2 ? 2 : -1;
	}
	return 0;
}

static const char *mk_human_bytes(uint64_t b, char *buf, size_t n)
{
	if (b >= 1000000000ull)
		snprintf(buf, n, "%.2f GB", (double)b / 1e9);
	else if (b >= 1000000ull)
		snprintf(buf, n, "%.1f MB", (double)b / 1e6);
	else
		snprintf(buf, n, "%.1f kB", (double)b / 1e3);
	return buf;
}

int main(int argc, char **argv)
{
	mk_options o;
	int r = mk_parse_args(argc, argv, &o);
	if (r != 0)
		return r < 0 ? 0 : r;

	char err[8192] = "";   /* room for two paths and a message */
	mk_tokenizer_info ti;
	if (o.tokenizer_dir && mk_tokenizer_read(o.tokenizer_dir, &ti, err, sizeof(err)) != 0) {
		fprintf(stderr, "aah-mkmodel: --tokenizer: %s\n", err);
		return MK_EXIT_USAGE;
	}
	mk_shape s;
	if ((r = mk_resolve_shape(&o, o.tokenizer_dir ? &ti : NULL, &s)) != 0)
		return r;
	if (mk_mkdir_p(o.out_dir) != 0 || access(o.out_dir, W_OK | X_OK) != 0) {
		fprintf(stderr, "aah-mkmodel: --out %s: %s\n", o.out_dir, strerror(errno));
		return MK_EXIT_USAGE;
	}

	mk_plan plan;
	if (mk_plan_tensors(&plan, &s, o.shard_size) != 0) {
		fprintf(stderr, "aah-mkmodel: out of memory\n");
		return MK_EXIT_FAIL;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu < 1 ? 1 : ncpu > MK_MAX_THREADS ? MK_MAX_THREADS : (int)ncpu;
	double t0 = aah_now_s();
	/* Weights and tokenizer first, config.json last (and an old one removed first): a directory with a config
	 * is a complete model, even after a crash halfway through rewriting one. */
	char old_config[4096];
	snprintf(old_config, sizeof(old_config), "%s/config.json", o.out_dir);
	if (unlink(old_config) != 0 && errno != ENOENT) {
		fprintf(stderr, "aah-mkmodel: %s: %s\n", old_config, strerror(errno));
		free(plan.t);
		return MK_EXIT_FAIL;
	}
	if (o.aah) {
		if (o.n_aah_layer_windows && o.n_aah_layer_windows != s.layers) {
			fprintf(stderr, "aah-mkmodel: --aah-layer-windows gives %d windows for %lld layers\n",
			        o.n_aah_layer_windows, (long long)s.layers);
			free(plan.t);
			return MK_EXIT_USAGE;
		}
		o.aah_p.n_layers = (int32_t)s.layers;
		o.aah_p.n_kv_heads = (int32_t)s.kv_heads;
		o.aah_p.seed = o.seed;
		o.aah_p.layer_windows = o.n_aah_layer_windows ? o.aah_layer_windows : NULL;
	}
	char aah_old[4200];
	snprintf(aah_old, sizeof(aah_old), "%s/aah.json", o.out_dir);
	if (!o.aah && unlink(aah_old) != 0 && errno != ENOENT) {   /* a stale aah.json would not fit the new shape */
		fprintf(stderr, "aah-mkmodel: %s: %s\n", aah_old, strerror(errno));
		free(plan.t);
		return MK_EXIT_FAIL;
	}
	if (mk_write_weights(&plan, &s, o.seed, threads, o.out_dir, err, sizeof(err)) != 0 ||
	    (o.tokenizer_dir && mk_copy_tokenizer(o.tokenizer_dir, o.out_dir, err, sizeof(err)) != 0) ||
	    (o.aah && aah_write_file(o.out_dir, &o.aah_p, err, sizeof(err)) != 0) ||
	    mk_write_config(&s, o.out_dir, err, sizeof(err)) != 0) {
		fprintf(stderr, "aah-mkmodel: %s\n", err);
		free(plan.t);
		return MK_EXIT_FAIL;
	}
	double secs = aah_now_s() - t0;

	char hb[32];
	printf("aah-mkmodel: wrote %s (%s, preset %s, seed %" PRIu64 ")\n", o.out_dir,
	       s.arch == MODEL_ARCH_QWEN3 ? "qwen3" : "llama", o.preset, o.seed);
	printf("  shape: hidden %" PRId64 ", %" PRId64 " layers, %" PRId64 " heads (%" PRId64 " KV), head_dim %" PRId64
	       ", intermediate %" PRId64 ", vocab %" PRId64 ", max_pos %" PRId64 ", rope_theta %.9g, %s\n",
	       s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab, s.max_pos, s.rope_theta,
	       s.tied ? "tied embeddings" : "separate lm_head");
	printf("  %" PRIu64 " parameters (%.1f M) in %d tensors; %s of %s weights in %d file%s; %.2f s\n",
	       plan.n_params, (double)plan.n_params / 1e6, (int)plan.n, mk_human_bytes(plan.n_bytes, hb, sizeof(hb)),
	       mk_torch_dtype(s.dtype), (int)plan.n_shards, plan.n_shards > 1 ? "s" : "", secs);
	if (o.tokenizer_dir)
		printf("  tokenizer from %s (bos %" PRId64 ", eos %" PRId64 ")\n", o.tokenizer_dir, s.bos, s.eos);
	if (o.aah)
		printf("  aah.json: regimes grouping_off, full_adaptive, shallow_freeze, deep_reuse (default %s)\n",
		       o.aah_p.default_regime ? o.aah_p.default_regime : "shallow_freeze");
	free(plan.t);
	return 0;
}
