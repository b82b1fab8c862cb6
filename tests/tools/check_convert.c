/* tests/tools/check_convert.c — Check suite for `aah-convert import`, through its command line, on checkpoints that real
 * torch.save writes (tests/fixtures/torch_checkpoints.py, run once per suite with Debian's python3-torch). */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "models/aah_config.h"
#include "models/safetensors.h"
#include "tools/convert/sha256.h"
#include "tools/convert/tensor_names.h"
#define TEST_TMPDIR "convert"
#include "tests/test_env.h"

/* Engine logits (f32) against the float64 torch forward of the same weights. */
#define LOGIT_TOL 1e-4

static char fx[256];             /* the fixtures, made by main() */
static bool fx_ok;
static json_t *expect;           /* fx/expect.json */

/* ---- temp dir per test ---- */

/* the temp dir, once the fixtures are known to be there */
static void convert_setup(void)
{
	ck_assert_msg(fx_ok, "the torch fixtures were not generated: is python3-torch installed (deploy/deps.sh)? "
	              "see %s.log", fx);
	tmp_setup();
}

/* A formatted path in one of 64 rotating buffers (long-lived paths are copied by the tests). */
static const char *pathf(const char *fmt, ...)
{
	static char buf[64][1024];
	static int which;
	which = (which + 1) % 64;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf[which], sizeof buf[which], fmt, ap);
	va_end(ap);
	return buf[which];
}

static bool exists(const char *p)
{
	struct stat st;
	return lstat(p, &st) == 0;
}

/* Nothing named "<base>.partial-*" beside base. */
static bool no_partial_left(const char *base)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s", base);
	char *slash = strrchr(dir, '/');
	ck_assert_ptr_nonnull(slash);
	*slash = 0;
	const char *name = slash + 1;
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	bool ok = true;
	size_t n = strlen(name);
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, name, n) && !strncmp(de->d_name + n, ".partial-", 9))
			ok = false;
	closedir(d);
	return ok;
}

/* Runs build/aah-convert with the NULL-terminated arguments (tool_run: the output in log_text). */
static int convert(const char *arg, ...)
{
	const char *argv[32];
	int n = 0;
	static char tool[512];
	snprintf(tool, sizeof tool, "%s/aah-convert", build_dir());
	ck_assert_msg(access(tool, X_OK) == 0, "%s is not built (set AAH_BUILD)", tool);
	argv[n++] = tool;
	va_list ap;
	va_start(ap, arg);
	for (const char *a = arg; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return tool_run(argv);
}

static bool same_file(const char *a, const char *b)
{
	size_t na, nb;
	unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
	bool same = na == nb && !memcmp(x, y, na);
	free(x);
	free(y);
	return same;
}

static json_t *load_json(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	ck_assert_msg(j != NULL, "%s: %s", path, je.text);
	return j;
}

/* Every tensor of dir/model.safetensors against expect.json's variant: the same names, dtypes, shapes, and the
 * sha256 of the bytes (hashlib's, computed in the fixture script from torch's tensors). */
static void check_digests(const char *dir, const char *variant)
{
	json_t *want = json_object_get(json_object_get(expect, "variants"), variant);
	ck_assert_ptr_nonnull(want);
	st_set s;
	char err[512];
	ck_assert_msg(st_open_dir(&s, dir, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(s.n_tensors, (int)json_object_size(want));
	static const char *const names[] = { "F32", "F16", "BF16" };
	for (int32_t i = 0; i < s.n_tensors; i++) {
		const st_tensor *t = &s.tensors[i];
		json_t *w = json_object_get(want, t->name);
		ck_assert_msg(w != NULL, "%s: tensor %s is not expected", dir, t->name);
		ck_assert_str_eq(names[t->dtype], json_string_value(json_object_get(w, "dtype")));
		json_t *shape = json_object_get(w, "shape");
		ck_assert_int_eq(t->n_dims, (int)json_array_size(shape));
		for (int32_t k = 0; k < t->n_dims; k++)
			ck_assert_int_eq(t->shape[k], json_integer_value(json_array_get(shape, (size_t)k)));
		char hex[65];
		sha256_hex(t->data, t->nbytes, hex);
		ck_assert_msg(!strcmp(hex, json_string_value(json_object_get(w, "sha256"))),
		              "%s: tensor %s differs from torch's (%s variant)", dir, t->name, variant);
	}
	st_close(&s);
}

static json_t *config_of(const char *dir)
{
	return load_json(pathf("%s/config.json", dir));
}

/* ---- the same weights, every way ---- */

START_TEST(test_same_bytes_every_layout)
{
	static const char *const srcs[] = { "bare.pt", "wrapped.pt", "lightning.pt", "ddp.pt", "nanogpt.pt",
		                            "nanogpt_lit.pt", "views.pt", "hf", "hf_sharded",
		                            "hf_sharded/pytorch_model.bin.index.json", "hf/pytorch_model.bin",
		                            "corrupt_optimizer.pt" };
	char ref[512];
	snprintf(ref, sizeof ref, "%s/bare", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/bare.pt", fx), ref, NULL), 0);
	check_digests(ref, "f32");
	for (size_t i = 1; i < sizeof srcs / sizeof srcs[0]; i++) {
		const char *out = pathf("%s/out%zu", tmpdir, i);
		/* nanoGPT's own "config" is its training settings: the config.json beside it is what counts */
		int rc = convert("import", pathf("%s/%s", fx, srcs[i]), out, NULL);
		ck_assert_msg(rc == 0, "%s: exit %d: %s", srcs[i], rc, log_text);
		ck_assert_msg(same_file(pathf("%s/model.safetensors", ref), pathf("%s/model.safetensors", out)),
		              "%s imports to other bytes than bare.pt", srcs[i]);
		json_t *c = config_of(out);
		ck_assert(json_is_false(json_object_get(c, "tie_word_embeddings")));
		ck_assert_str_eq(json_string_value(json_object_get(c, "torch_dtype")), "float32");
		json_decref(c);
	}
}
END_TEST

START_TEST(test_dtypes)
{
	static const char *const variants[] = { "bf16", "f16", "mixed" };
	for (size_t i = 0; i < 3; i++) {
		const char *out = pathf("%s/%s", tmpdir, variants[i]);
		ck_assert_int_eq(convert("import", pathf("%s/%s.pt", fx, variants[i]), out, NULL), 0);
		check_digests(out, variants[i]);
	}
	json_t *c = config_of(pathf("%s/bf16", tmpdir));
	ck_assert_str_eq(json_string_value(json_object_get(c, "torch_dtype")), "bfloat16");
	json_decref(c);
	/* mixed dtypes: torch_dtype is left as the config said */
	c = config_of(pathf("%s/mixed", tmpdir));
	ck_assert_str_eq(json_string_value(json_object_get(c, "torch_dtype")), "float32");
	json_decref(c);
	/* --dtype bf16 of the f32 weights rounds exactly as torch's .to(torch.bfloat16) */
	const char *out = pathf("%s/as_bf16", tmpdir);
	ck_assert_int_eq(convert("import", "--dtype", "bf16", pathf("%s/bare.pt", fx), out, NULL), 0);
	check_digests(out, "f32_as_bf16");
	/* and --dtype f32 widens bf16 exactly back: the same bytes as bf16.pt widened */
	out = pathf("%s/bf16_as_f32", tmpdir);
	ck_assert_int_eq(convert("import", "--dtype", "f32", pathf("%s/bf16.pt", fx), out, NULL), 0);
	st_set a, b;
	char err[256];
	ck_assert_int_eq(st_open_dir(&a, out, err, sizeof err), 0);
	ck_assert_int_eq(st_open_dir(&b, pathf("%s/bf16", tmpdir), err, sizeof err), 0);
	for (int32_t i = 0; i < a.n_tensors; i++) {
		ck_assert_int_eq(a.tensors[i].dtype, ST_F32);
		const float *x = a.tensors[i].data;
		const uint16_t *y = b.tensors[i].data;
		size_t wrong = 0;
		for (size_t k = 0; k < a.tensors[i].nbytes / 4; k++) {
			uint32_t bits = (uint32_t)y[k] << 16;
			float want;
			memcpy(&want, &bits, 4);
			wrong += x[k] != want;
		}
		ck_assert_msg(wrong == 0, "%s: %zu values not widened exactly", a.tensors[i].name, wrong);
	}
	st_close(&a);
	st_close(&b);
}
END_TEST

START_TEST(test_tied_heads)
{
	/* lm_head the same storage as the embedding: written once, the config says tied (it said untied) */
	const char *out = pathf("%s/shared", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/tied_shared.pt", fx), out, NULL), 0);
	check_digests(out, "tied");
	json_t *c = config_of(out);
	ck_assert(json_is_true(json_object_get(c, "tie_word_embeddings")));
	json_decref(c);
	/* an equal copy under a config that ties them; no lm_head at all under that config */
	out = pathf("%s/copy", tmpdir);
	ck_assert_int_eq(convert("import", "--config", pathf("%s/config_tied.json", fx), pathf("%s/tied_copy.pt", fx),
	                         out, NULL), 0);
	check_digests(out, "tied");
	out = pathf("%s/absent", tmpdir);
	ck_assert_int_eq(convert("import", "--config", pathf("%s/config_tied.json", fx), pathf("%s/tied_absent.pt", fx),
	                         out, NULL), 0);
	check_digests(out, "tied");
	/* no lm_head under a config that does not tie: refused */
	out = pathf("%s/absent_untied", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/tied_absent.pt", fx), out, NULL), 1);
	ck_assert_msg(strstr(log_text, "lm_head.weight is missing"), "%s", log_text);
	ck_assert(!exists(out));
}
END_TEST

/* ---- the imported model computes what torch computes ---- */

/* The largest |difference| between the engine's logits of dir (regime, checkpoint step) over the prompt and
 * reference.json's ref_key. */
static double logits_gap(const char *dir, const char *regime, const char *ref_key, int64_t step)
{
	json_t *ref = load_json(pathf("%s/reference.json", fx));
	json_t *prompt = json_object_get(ref, "prompt"), *want = json_object_get(ref, ref_key);
	int32_t n = (int32_t)json_array_size(prompt), vocab = (int32_t)json_integer_value(json_object_get(ref, "vocab"));
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
	for (int32_t i = 0; i < n; i++)
		ids[i] = (int32_t)json_integer_value(json_array_get(prompt, (size_t)i));
	ck_assert_int_eq((int)json_array_size(want), n * vocab);
	engine_params p = { .n_threads = 2, .backend = "cpu", .checkpoint_step = step };
	engine *e;
	char err[512];
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	int32_t seq = engine_seq_open(e, regime, err, sizeof err);
	ck_assert_msg(seq >= 0, "%s", err);
	float *logits = malloc(sizeof(float) * (size_t)n * (size_t)vocab);
	engine_item it = { .seq = seq, .tokens = ids, .n_tokens = n, .all_logits = true };
	ck_assert_msg(engine_forward(e, &it, 1, logits, err, sizeof err) == 0, "%s", err);
	double worst = 0;
	for (int32_t i = 0; i < n * vocab; i++) {
		double d = fabs((double)logits[i] - json_number_value(json_array_get(want, (size_t)i)));
		if (d > worst)
			worst = d;
	}
	printf("logits of %s (%s) against the float64 torch forward '%s': max |diff| %.3g over %d positions\n", dir,
	       regime ? regime : "default", ref_key, worst, (int)n);
	free(logits);
	free(ids);
	engine_free(e);
	json_decref(ref);
	return worst;
}

static void check_logits(const char *dir, const char *regime, const char *ref_key, int64_t step)
{
	double worst = logits_gap(dir, regime, ref_key, step);
	ck_assert_msg(worst <= LOGIT_TOL, "%s regime %s: logits differ from torch's '%s' by %g", dir, regime, ref_key,
	              worst);
}

START_TEST(test_logits_match_torch)
{
	char bare[512], nano[512], aah[512];
	snprintf(bare, sizeof bare, "%s/bare", tmpdir);
	snprintf(nano, sizeof nano, "%s/nano", tmpdir);
	snprintf(aah, sizeof aah, "%s/aah", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/bare.pt", fx), bare, NULL), 0);
	ck_assert_int_eq(convert("import", pathf("%s/nanogpt.pt", fx), nano, NULL), 0);
	ck_assert_int_eq(convert("import", pathf("%s/wrapped.pt", fx), aah, NULL), 0);
	check_logits(bare, NULL, "full_attention", 0);
	check_logits(nano, NULL, "full_attention", 0);
	check_logits(aah, "full_attention", "full_attention", 0);
	/* the regime's windows came through aah.json: the engine's windowed attention equals torch's masked one */
	check_logits(aah, "static_mixed", "static_mixed", 0);
	check_logits(aah, NULL, "static_mixed", 0);   /* it is the default regime */
}
END_TEST

/* ---- RoPE pairing: checkpoints trained with interleaved pairs ---- */

static const char *provenance_rope(const char *dir)
{
	static char v[32];
	json_t *a = load_json(pathf("%s/aah.json", dir));
	const char *r = json_string_value(json_object_get(json_object_get(a, "provenance"), "rope"));
	ck_assert_msg(r != NULL, "%s/aah.json: no provenance.rope", dir);
	snprintf(v, sizeof v, "%s", r);
	json_decref(a);
	return v;
}

START_TEST(test_rope_interleaved)
{
	/* a model whose torch forward rotates (2i, 2i+1), saved llm.c-style (nanoGPT names, c_attn fused, AAH state):
	 * imported with --rope interleaved it computes that forward, through the permuted q/k rows and q/k norms, whose
	 * bytes are those of Hugging Face's permute */
	char nano[512], hf[512], plain[512];
	snprintf(nano, sizeof nano, "%s/nano", tmpdir);
	snprintf(hf, sizeof hf, "%s/hf", tmpdir);
	snprintf(plain, sizeof plain, "%s/plain", tmpdir);
	int rc = convert("import", "--rope", "interleaved", pathf("%s/interleaved.pt", fx), nano, NULL);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, log_text);
	ck_assert_msg(strstr(log_text, "q/k rows permuted from interleaved RoPE"), "%s", log_text);
	check_digests(nano, "interleaved");
	check_logits(nano, "full_attention", "interleaved", 0);
	ck_assert_str_eq(provenance_rope(nano), "interleaved");
	/* the same weights under Hugging Face names: the same bytes, the same function */
	ck_assert_int_eq(convert("import", "--rope", "interleaved", pathf("%s/interleaved_hf.pt", fx), hf, NULL), 0);
	check_digests(hf, "interleaved");
	check_logits(hf, NULL, "interleaved", 0);
	/* permuted rows of 2-byte elements: rounded as torch rounds the permuted tensors */
	const char *bf = pathf("%s/bf16", tmpdir);
	ck_assert_int_eq(convert("import", "--rope", "interleaved", "--dtype", "bf16", pathf("%s/interleaved_hf.pt", fx),
	                         bf, NULL), 0);
	check_digests(bf, "interleaved_bf16");
	/* without the option the rows are read as rotate-half: the engine computes that reading of them faithfully,
	 * which is another function, far outside the tolerance */
	ck_assert_int_eq(convert("import", pathf("%s/interleaved.pt", fx), plain, NULL), 0);
	ck_assert(!strstr(log_text, "permuted"));
	double gap = logits_gap(plain, "full_attention", "interleaved", 0);
	ck_assert_msg(gap > 1000 * LOGIT_TOL, "imported without --rope interleaved, the logits are within %g of the "
	              "interleaved forward: the option would not matter", gap);
	check_logits(plain, "full_attention", "interleaved_read_as_neox", 0);
	ck_assert_str_eq(provenance_rope(plain), "neox");
}
END_TEST

START_TEST(test_rope_option)
{
	/* --rope neox is the default: the same bytes as no option */
	const char *a = pathf("%s/default", tmpdir), *b = pathf("%s/neox", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/bare.pt", fx), a, NULL), 0);
	ck_assert_int_eq(convert("import", "--rope", "neox", pathf("%s/bare.pt", fx), b, NULL), 0);
	ck_assert(same_file(pathf("%s/model.safetensors", a), pathf("%s/model.safetensors", b)));
	ck_assert(same_file(pathf("%s/config.json", a), pathf("%s/config.json", b)));
	/* and aah.json says so */
	const char *w = pathf("%s/wrapped", tmpdir);
	ck_assert_int_eq(convert("import", "--rope", "neox", pathf("%s/wrapped.pt", fx), w, NULL), 0);
	ck_assert_str_eq(provenance_rope(w), "neox");
	/* anything else is bad usage, and says what is accepted */
	const char *out = pathf("%s/bogus", tmpdir);
	ck_assert_int_eq(convert("import", "--rope", "bogus", pathf("%s/bare.pt", fx), out, NULL), 2);
	ck_assert_msg(strstr(log_text, "--rope must be neox") && strstr(log_text, "or interleaved") &&
	              strstr(log_text, "not 'bogus'"), "%s", log_text);
	ck_assert(!exists(out) && no_partial_left(out));
	ck_assert_int_eq(convert("import", pathf("%s/bare.pt", fx), out, "--rope", NULL), 2);
	ck_assert_msg(strstr(log_text, "--rope needs a value"), "%s", log_text);
	ck_assert(!exists(out));
	/* an odd head_dim has no pairs to permute: refused (by the config parser, before any tensor is read) */
	out = pathf("%s/odd", tmpdir);
	int rc = convert("import", "--rope", "interleaved", "--config", pathf("%s/config_odd_head_dim.json", fx),
	                 pathf("%s/bare.pt", fx), out, NULL);
	ck_assert_msg(rc == 1, "exit %d: %s", rc, log_text);
	ck_assert_msg(strstr(log_text, "config_odd_head_dim.json: 'head_dim' 7 must be even"), "%s", log_text);
	ck_assert(!exists(out) && no_partial_left(out));
	/* and by the plan itself, for a config that did not come through that parser */
	model_config c = { .vocab_size = 8, .hidden_size = 7, .n_layers = 1, .n_heads = 1, .n_kv_heads = 1,
		           .head_dim = 7, .intermediate_size = 8, .qk_norm = true };
	tn_plan p;
	char err[256];
	ck_assert_int_eq(tn_plan_build(&p, NULL, NULL, 0, &c, false, true, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "--rope interleaved: head_dim 7 is odd"), "%s", err);
}
END_TEST

/* ---- run directories ---- */

START_TEST(test_run_directory_of_pt_files)
{
	char out[512];
	snprintf(out, sizeof out, "%s/run", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/run_pt", fx), out, NULL), 0);
	ck_assert(no_partial_left(out));
	char dir[1024], err[512];
	ck_assert_int_eq(aah_resolve_model_dir(out, -1, dir, sizeof dir, err, sizeof err), 0);
	ck_assert_str_eq(dir, pathf("%s/checkpoint-10000", out));
	json_t *files = json_object_get(expect, "files");
	static const int64_t steps[] = { 1000, 5000, 10000 };
	for (int i = 0; i < 3; i++) {
		const char *ck = pathf("%s/checkpoint-%lld", out, (long long)steps[i]);
		check_digests(ck, "f32");
		ck_assert(exists(pathf("%s/tokenizer.json", ck)) && exists(pathf("%s/tokenizer_config.json", ck)));
		ck_assert(!exists(pathf("%s/loss.tsv", ck)) && !exists(pathf("%s/train.json", ck)));
		json_t *a = load_json(pathf("%s/aah.json", ck)), *prov = json_object_get(a, "provenance");
		ck_assert_int_eq(json_integer_value(json_object_get(a, "version")), 1);
		ck_assert_int_eq(json_integer_value(json_object_get(prov, "step")), steps[i]);
		ck_assert_int_eq(json_integer_value(json_object_get(prov, "seed")), 11);
		const char *src = pathf("checkpoint-%lld.pt", (long long)steps[i]);
		ck_assert_str_eq(json_string_value(json_object_get(prov, "source")), src);
		ck_assert_str_eq(json_string_value(json_object_get(prov, "sha256")),
		                 json_string_value(json_object_get(files, pathf("run_pt/%s", src))));
		json_t *bu = json_object_get(prov, "branch_usage");
		ck_assert(fabs(json_number_value(json_object_get(bu, "8")) - 0.375) < 1e-12);
		ck_assert_ptr_null(json_object_get(json_object_get(a, "regimes"), "full_attention"));
		json_decref(a);
	}
	/* the daemon serves the checkpoint named by --checkpoint-step, and the AAH regime of the file */
	check_logits(out, "static_mixed", "static_mixed", 5000);
	/* (a text prompt: the tokenizer, too, is the chosen checkpoint's) */
	const char *cmd = pathf("%s/aahd --model %s --checkpoint-step 1000 --regime static_mixed --prompt 'The quick "
	                        "brown fox' -n 3 >%s/aahd.log 2>&1", build_dir(), out, tmpdir);
	ck_assert_msg(system(cmd) == 0, "aahd did not serve the imported run: see %s/aahd.log", tmpdir);
	/* and it is the named step it loads: one that is not there is refused */
	cmd = pathf("%s/aahd --model %s --checkpoint-step 7 --prompt-ids 5 -n 1 >%s/aahd.log 2>&1", build_dir(), out, tmpdir);
	ck_assert_int_ne(system(cmd), 0);
	size_t n;
	char *log = (char *)read_all(pathf("%s/aahd.log", tmpdir), &n);
	ck_assert_msg(strstr(log, "no checkpoint-7 folder"), "%s", log);
	free(log);
	/* one step of it */
	const char *one = pathf("%s/one", tmpdir);
	ck_assert_int_eq(convert("import", "--step", "5000", pathf("%s/run_pt", fx), one, NULL), 0);
	ck_assert(exists(pathf("%s/checkpoint-5000/aah.json", one)) && !exists(pathf("%s/checkpoint-1000", one)));
}
END_TEST

START_TEST(test_run_directory_other_layouts)
{
	const char *out = pathf("%s/steps", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/run_step", fx), out, NULL), 0);
	for (int s = 200; s <= 400; s += 200) {
		check_digests(pathf("%s/checkpoint-%d", out, s), "f32");
		ck_assert(!exists(pathf("%s/checkpoint-%d/aah.json", out, s)));   /* "aah": None: full attention */
	}
	out = pathf("%s/trainer", tmpdir);
	ck_assert_int_eq(convert("import", pathf("%s/run_hf", fx), out, NULL), 0);
	for (int s = 100; s <= 300; s += 200) {
		check_digests(pathf("%s/checkpoint-%d", out, s), "f32");
		ck_assert(exists(pathf("%s/checkpoint-%d/tokenizer.json", out, s)));
		ck_assert(!exists(pathf("%s/checkpoint-%d/optimizer.pt", out, s)));
	}
	char dir[1024], err[512];
	ck_assert_int_eq(aah_resolve_model_dir(out, 100, dir, sizeof dir, err, sizeof err), 0);
	ck_assert_str_eq(dir, pathf("%s/checkpoint-100", out));
}
END_TEST

START_TEST(test_failed_run_leaves_nothing)
{
	/* a run whose second checkpoint is corrupt: nothing of OUT appears, not even the first checkpoint */
	char run[512], out[512];
	snprintf(run, sizeof run, "%s/run", tmpdir);
	snprintf(out, sizeof out, "%s/out", tmpdir);
	ck_assert_int_eq(mkdir(run, 0755), 0);
	const char *cmd = pathf("cp %s/run_pt/checkpoint-1000.pt %s/run_pt/config.json %s/ && cp %s/hostile/corrupt_model.pt"
	                        " %s/checkpoint-2000.pt", fx, fx, run, fx, run);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(convert("import", run, out, NULL), 1);
	ck_assert_msg(strstr(log_text, "CRC-32"), "%s", log_text);
	ck_assert(!exists(out) && no_partial_left(out));
	/* a name whose step disagrees with the checkpoint's own */
	ck_assert_int_eq(system(pathf("rm %s/checkpoint-2000.pt && mv %s/checkpoint-1000.pt %s/checkpoint-999.pt", run,
	                              run, run)), 0);
	ck_assert_int_eq(convert("import", run, out, NULL), 1);
	ck_assert_msg(strstr(log_text, "its 'step' is 1000 but its name says 999"), "%s", log_text);
	ck_assert(!exists(out) && no_partial_left(out));
}
END_TEST

/* ---- refused ---- */

START_TEST(test_hostile_files_refused)
{
	json_t *refused = json_object_get(expect, "refused");
	const char *name;
	json_t *why;
	int n = 0;
	json_object_foreach(refused, name, why) {
		const char *out = pathf("%s/%s", tmpdir, name);
		const char *cfg = !strcmp(name, "tied_differs") ? pathf("%s/config_tied.json", fx) : pathf("%s/config.json", fx);
		int rc = convert("import", "--config", cfg, pathf("%s/hostile/%s.pt", fx, name), out, NULL);
		ck_assert_msg(rc == 1, "%s: exit %d (want 1): %s", name, rc, log_text);
		ck_assert_msg(strstr(log_text, json_string_value(why)), "%s: the message does not say '%s': %s", name,
		              json_string_value(why), log_text);
		ck_assert_msg(!strstr(log_text, "->"), "%s: something was written: %s", name, log_text);
		ck_assert_msg(!exists(out) && no_partial_left(out), "%s: output left behind", name);
		n++;
	}
	ck_assert_int_ge(n, 25);
	ck_assert_msg(!exists(json_string_value(json_object_get(expect, "marker"))), "a hostile pickle ran code");
}
END_TEST

START_TEST(test_command_line)
{
	ck_assert_int_eq(convert("--help", NULL), 0);
	ck_assert(strstr(log_text, "import") && strstr(log_text, "usage: aah-convert COMMAND"));
	ck_assert_int_eq(convert("import", "--help", NULL), 0);
	ck_assert(strstr(log_text, "usage: aah-convert import [options] SRC OUT") && strstr(log_text, "--dtype") &&
	          strstr(log_text, "--rope neox|interleaved"));
	ck_assert_int_eq(convert("help", "import", NULL), 0);
	ck_assert(strstr(log_text, "usage: aah-convert import"));
	ck_assert_int_eq(convert(NULL), 2);
	ck_assert_int_eq(convert("calibrat", NULL), 2);
	ck_assert(strstr(log_text, "unknown command 'calibrat'"));
	ck_assert_int_eq(convert("import", pathf("%s/bare.pt", fx), NULL), 2);
	ck_assert_int_eq(convert("import", "--dtype", "f8", "a", "b", NULL), 2);
	ck_assert_int_eq(convert("import", "--step", "-3", "a", "b", NULL), 2);
	ck_assert_int_eq(convert("import", "--frobnicate", "a", "b", NULL), 2);
	ck_assert_int_eq(convert("import", pathf("%s/no-such-file.pt", fx), pathf("%s/x", tmpdir), NULL), 1);
	ck_assert(strstr(log_text, "No such file"));
	/* OUT exists: refused, untouched */
	ck_assert_int_eq(mkdir(pathf("%s/taken", tmpdir), 0755), 0);
	ck_assert_int_eq(convert("import", pathf("%s/bare.pt", fx), pathf("%s/taken", tmpdir), NULL), 1);
	ck_assert(strstr(log_text, "exists already"));
	/* quiet: nothing on stdout */
	ck_assert_int_eq(convert("import", "-q", pathf("%s/bare.pt", fx), pathf("%s/quiet", tmpdir), NULL), 0);
	ck_assert_str_eq(log_text, "");
	/* a folder that is none of the layouts */
	ck_assert_int_eq(mkdir(pathf("%s/empty", tmpdir), 0755), 0);
	ck_assert_int_eq(convert("import", pathf("%s/empty", tmpdir), pathf("%s/y", tmpdir), NULL), 1);
	ck_assert(strstr(log_text, "neither a checkpoint file"));
}
END_TEST

static Suite *convert_suite(void)
{
	Suite *s = suite_create("convert");
	TCase *t = tcase_create("import");
	tcase_set_timeout(t, 300);
	tcase_add_checked_fixture(t, convert_setup, tmp_teardown);
	tcase_add_test(t, test_same_bytes_every_layout);
	tcase_add_test(t, test_dtypes);
	tcase_add_test(t, test_tied_heads);
	tcase_add_test(t, test_logits_match_torch);
	tcase_add_test(t, test_rope_interleaved);
	tcase_add_test(t, test_rope_option);
	tcase_add_test(t, test_run_directory_of_pt_files);
	tcase_add_test(t, test_run_directory_other_layouts);
	tcase_add_test(t, test_failed_run_leaves_nothing);
	tcase_add_test(t, test_hostile_files_refused);
	tcase_add_test(t, test_command_line);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	/* The fixtures, once for the suite: real torch.save output of this machine's torch. */
	snprintf(fx, sizeof fx, "/tmp/aah-convert-fixtures-XXXXXX");
	if (!mkdtemp(fx)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/fixtures/torch_checkpoints.py %s %s/qwen3-small-a >%s.log 2>&1",
	         fx, testdata(), fx);
	fx_ok = system(cmd) == 0;
	if (fx_ok) {
		json_error_t je;
		expect = json_load_file(pathf("%s/expect.json", fx), 0, &je);
		fx_ok = expect != NULL;
	}
	if (!fx_ok)
		fprintf(stderr, "check_convert: the fixture script failed: see %s.log\n", fx);
	SRunner *sr = srunner_create(convert_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	json_decref(expect);
	nftw(fx, tmp_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (fx_ok)
		unlink(pathf("%s.log", fx));
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
