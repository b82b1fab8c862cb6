/* tools/convert/calibrate.c — `aah-convert calibrate` (calibrate.h): the command line, the calibration and held-out
 * texts, the order of the work (validate everything, measure, assign, check the new aah.json in the engine and score
 * it, then publish), and what it writes: aah.json, the side file aah-calib.json and the report on stdout. */
#include "tools/convert/calibrate.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/parse_num.h"
#include "engine/engine.h"
#include "models/aah_config.h"
#include "tools/convert/aah_write.h"
#include "models/gguf_model.h"
#include "models/model.h"
#include "models/model_config.h"
#include "tools/convert/sha256.h"
#include "models/tokenizer.h"
#include "tools/convert/calib_assign.h"
#include "tools/convert/calib_measure.h"

#define CALIBRATE_VERSION "aah-convert 0.1 (calibrate 1)"
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define MAX_TEXTS 64
#define MAX_TEXT_BYTES ((int64_t)1 << 30)

typedef struct calib_text {
	const char *path;
	char sha256[65];
	int64_t bytes;
	int64_t n_tokens;
	int32_t *ids;                  /* owned */
} calib_text;

typedef struct calib_opts {
	const char *model_arg;
	const char *texts[MAX_TEXTS];
	int32_t n_texts;
	int64_t tokens;                /* 0: 16 contexts */
	int32_t context;               /* 0: min(4096, the model's) */
	double coverage;
	int32_t windows[AAH_MAX_WINDOWS], n_windows;
	const char *out, *calib_out;
	const char *eval_text;
	int64_t eval_tokens;           /* 0: 8 contexts */
	bool no_eval;
	bool default_text, default_eval;   /* the texts are the defaults (runs/text/…): errors say so */
	const char *default_regime;
	calib_engine_opts eng;
} calib_opts;

void calibrate_help(FILE *f)
{
	fputs("usage: aah-convert calibrate MODEL_DIR [options]\n"
	      "\n"
	      "AAH-converts a pretrained model: runs calibration text through it under full attention, measures per layer\n"
	      "and query head where the attention falls by key distance (in bands cut at the candidate windows) and its\n"
	      "entropy, groups the KV heads by those features and gives each group a window, then writes aah.json\n"
	      "(version 1) with the principal regimes of the paper's table 3 (full_attention stays built in):\n"
	      "  grouping_off    every KV head its own group; static\n"
	      "  shallow_freeze  per layer the KV heads split once [2] by their features, frozen; static\n"
	      "  full_adaptive   per layer a [2,2,2,2] hierarchy of feature splits; the adaptive policy (control every 5\n"
	      "                  steps, feature EMA 0.9, resolution EMA 0.15) within capacities calibration saw\n"
	      "  deep_reuse      one [2,2,2,2] grouping computed from layer 0 and reused in every layer; static\n"
	      "A group's window is the smallest candidate keeping --coverage of its heads' attention mass; sibling groups\n"
	      "are scored together (the wide joint scorer: docs/calibrate.md). Then it scores held-out text under every regime\n"
	      "and prints per regime the ACR the assignment implies at the context length, the KV bytes ratio and the\n"
	      "held-out loss against full attention. Nothing is written unless all of it succeeds; aah.json appears\n"
	      "whole (temporary file and rename). Progress goes to stderr, the report to stdout.\n"
	      "\n"
	      "options:\n"
	      "  --text FILE        calibration text, UTF-8 (repeatable; default runs/text/valid.txt); the files' tokens\n"
	      "                     are joined and cut into chunks of the context length\n"
	      "  --tokens N         calibration tokens to use, in whole chunks (default 16 contexts; at least one)\n"
	      "  --context T        chunk length and T of ACR (default min(4096, max_position_embeddings))\n"
	      "  --coverage C       share of a group's attention mass its window keeps, in [0.5, 1] (default 0.95)\n"
	      "  --windows LIST     candidate windows, ascending, at most 8, none above T (default T/8,T/4,T/2,T:\n"
	      "                     512,1024,2048,4096 at 4096)\n"
	      "  --out FILE         the aah.json to write (default MODEL_DIR/aah.json; an existing one is replaced)\n"
	      "  --calib-out FILE   the side file: provenance, per-head features, the trees, the report (default\n"
	      "                     aah-calib.json beside --out)\n"
	      "  --eval-text FILE   held-out text for the loss, not used for calibration (default runs/text/test.txt)\n"
	      "  --eval-tokens N    held-out tokens to predict per regime (default 8 contexts)\n"
	      "  --no-eval          skip the held-out loss\n"
	      "  --default-regime R default_regime of aah.json (default shallow_freeze)\n"
	      "  --backend B        cpu, cuda or auto (default auto: CUDA when a device is present)\n"
	      "  --threads N        CPU threads (default: every core)\n"
	      "  --time-plain       also prefill every chunk unmeasured and print both times (what measuring costs)\n"
	      "  --quiet            no progress lines\n",
	      f);
}

/* ---- temporary files: removed on any failure, also on SIGINT / SIGTERM ---- */

static char tmp_files[2][4200];
static volatile sig_atomic_t n_tmp_files;

static void on_signal(int sig)
{
	for (sig_atomic_t i = 0; i < n_tmp_files; i++)
		unlink(tmp_files[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void tmp_forget_all(void)
{
	for (sig_atomic_t i = 0; i < n_tmp_files; i++)
		unlink(tmp_files[i]);
	n_tmp_files = 0;
}

/* ---- options ---- */

/* 1 to AAH_MAX_WINDOWS ascending windows in [1, 2^24], comma-separated. Returns 0, or -1. */
static int parse_windows(const char *s, int32_t *w, int32_t *n)
{
	int64_t k = aah_parse_int_list(s, true, 1, 1 << 24, w, AAH_MAX_WINDOWS);
	if (k < 1 || k > AAH_MAX_WINDOWS)
		return -1;
	for (int64_t i = 1; i < k; i++)
		if (w[i] <= w[i - 1])
			return -1;
	*n = (int32_t)k;
	return 0;
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "aah-convert calibrate: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, " (see aah-convert calibrate --help)\n");
	return EXIT_USAGE;
}

/* Returns -1 when the options are good, else the exit status (0 after --help). */
static int parse_opts(calib_opts *o, int argc, char **argv)
{
	enum { O_TEXT = 300, O_TOKENS, O_CONTEXT, O_COVERAGE, O_WINDOWS, O_OUT, O_CALIB, O_EVAL, O_EVAL_TOKENS, O_NO_EVAL,
	       O_DEFAULT, O_BACKEND, O_THREADS, O_TIME_PLAIN, O_QUIET, O_HELP };
	static const struct option longs[] = {
		{ "text", required_argument, NULL, O_TEXT },         { "tokens", required_argument, NULL, O_TOKENS },
		{ "context", required_argument, NULL, O_CONTEXT },   { "coverage", required_argument, NULL, O_COVERAGE },
		{ "windows", required_argument, NULL, O_WINDOWS },   { "out", required_argument, NULL, O_OUT },
		{ "calib-out", required_argument, NULL, O_CALIB },   { "eval-text", required_argument, NULL, O_EVAL },
		{ "eval-tokens", required_argument, NULL, O_EVAL_TOKENS }, { "no-eval", no_argument, NULL, O_NO_EVAL },
		{ "default-regime", required_argument, NULL, O_DEFAULT }, { "backend", required_argument, NULL, O_BACKEND },
		{ "threads", required_argument, NULL, O_THREADS },   { "time-plain", no_argument, NULL, O_TIME_PLAIN },
		{ "quiet", no_argument, NULL, O_QUIET },             { "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	memset(o, 0, sizeof *o);
	o->coverage = 0.95;
	o->eval_text = "runs/text/test.txt";
	o->default_eval = true;
	o->eng.backend = "auto";
	optind = 1;
	opterr = 0;
	int c;
	int64_t v;
	while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
		switch (c) {
		case O_TEXT:
			if (o->n_texts == MAX_TEXTS)
				return usage_error("at most %s --text files", "64");
			o->texts[o->n_texts++] = optarg;
			break;
		case O_TOKENS:
			if (!aah_parse_i64(optarg, 1, INT64_MAX / 2, &o->tokens))
				return usage_error("--tokens must be a positive token count, not '%s'", optarg);
			break;
		case O_CONTEXT:
			if (!aah_parse_i64(optarg, 1, 1 << 24, &v))
				return usage_error("--context must be a positive length, not '%s'", optarg);
			o->context = (int32_t)v;
			break;
		case O_COVERAGE:
			if (!aah_parse_f64(optarg, &o->coverage) || !(o->coverage >= 0.5 && o->coverage <= 1))
				return usage_error("--coverage must be a number in [0.5, 1], not '%s'", optarg);
			break;
		case O_WINDOWS:
			if (parse_windows(optarg, o->windows, &o->n_windows))
				return usage_error("--windows takes 1 to 8 ascending positive windows, comma-separated, not '%s'",
				                   optarg);
			break;
		case O_OUT: o->out = optarg; break;
		case O_CALIB: o->calib_out = optarg; break;
		case O_EVAL: o->eval_text = optarg, o->default_eval = false; break;
		case O_EVAL_TOKENS:
			if (!aah_parse_i64(optarg, 1, INT64_MAX / 2, &o->eval_tokens))
				return usage_error("--eval-tokens must be a positive token count, not '%s'", optarg);
			break;
		case O_NO_EVAL: o->no_eval = true; break;
		case O_DEFAULT: o->default_regime = optarg; break;
		case O_BACKEND:
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
				return usage_error("--backend must be cpu, cuda or auto, not '%s'", optarg);
			o->eng.backend = optarg;
			break;
		case O_THREADS:
			if (!aah_parse_i64(optarg, 1, 1024, &v))
				return usage_error("--threads must be 1 to 1024, not '%s'", optarg);
			o->eng.threads = (int32_t)v;
			break;
		case O_TIME_PLAIN: o->eng.time_plain = true; break;
		case O_QUIET: o->eng.quiet = true; break;
		case 'h':
		case O_HELP: calibrate_help(stdout); return 0;
		case ':': return usage_error("%s needs a value", argv[optind - 1]);
		default: return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return usage_error("%s", argc - optind ? "one MODEL_DIR, nothing more" : "MODEL_DIR is missing");
	o->model_arg = argv[optind];
	if (o->n_texts == 0) {
		o->texts[o->n_texts++] = "runs/text/valid.txt";
		o->default_text = true;
	}
	if (o->default_regime) {
		bool known = !strcmp(o->default_regime, AAH_FULL_ATTENTION);
		for (int k = 0; k < CALIB_N_KINDS; k++)
			known |= !strcmp(o->default_regime, calib_kind_name((calib_kind)k));
		if (!known)
			return usage_error("--default-regime must be full_attention or one of the four regimes written, not '%s'",
			                   o->default_regime);
	}
	return -1;
}

/* ---- texts ---- */

/* Reads, checks and tokenizes one text file (BOS first when the tokenizer adds one, as for a prompt). */
static int text_load(calib_text *t, const char *path, const tokenizer *tok, char *err, size_t err_len)
{
	memset(t, 0, sizeof *t);
	t->path = path;
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;
	for (;;) {
		if (n == cap) {
			if ((int64_t)cap >= MAX_TEXT_BYTES) {
				snprintf(err, err_len, "%s: larger than 1 GiB", path);
				goto done;
			}
			char *g = realloc(buf, cap = cap ? cap * 2 : 1 << 16);
			if (!g) {
				snprintf(err, err_len, "%s: out of memory", path);
				goto done;
			}
			buf = g;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		snprintf(err, err_len, "%s: read error", path);
		goto done;
	}
	if (n == 0) {
		snprintf(err, err_len, "%s: the file is empty", path);
		goto done;
	}
	t->bytes = (int64_t)n;
	sha256_hex(buf, n, t->sha256);
	char terr[512];
	int64_t cap_ids = (int64_t)n + 16;
	t->ids = malloc((size_t)cap_ids * sizeof *t->ids);
	int64_t got = t->ids ? tokenizer_encode(tok, buf, n, true, t->ids, cap_ids, terr, sizeof terr) : -1;
	if (got > cap_ids) {   /* more tokens than bytes: cannot happen with byte-level vocabularies, but be exact */
		int32_t *g = realloc(t->ids, (size_t)got * sizeof *t->ids);
		if (g) {
			t->ids = g;
			got = tokenizer_encode(tok, buf, n, true, t->ids, got, terr, sizeof terr);
		} else {
			got = -1;
			snprintf(terr, sizeof terr, "out of memory");
		}
	}
	if (got < 0) {
		snprintf(err, err_len, "%s: %s", path, t->ids ? terr : "out of memory");
		goto done;
	}
	t->n_tokens = got;
	rc = 0;
done:
	free(buf);
	fclose(f);
	if (rc != 0) {
		free(t->ids);
		t->ids = NULL;
	}
	return rc;
}

/* ---- outputs ---- */

/* Fails unless a new file can be made beside path (and path is not a folder), so that a bad --out stops the run
 * before the measurement rather than after it. */
static int probe_writable(const char *path, const char *flag, char *err, size_t err_len)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(err, err_len, "%s %s: is a folder; name the file to write", flag, path);
		return -1;
	}
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		snprintf(err, err_len, "%s %s: cannot write there (%s)", flag, path, strerror(errno));
		return -1;
	}
	close(fd);
	unlink(tmp);
	return 0;
}

static void dir_of(const char *path, char *out, size_t n)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(out, n, ".");
	else if (slash == path)
		snprintf(out, n, "/");
	else
		snprintf(out, n, "%.*s", (int)(slash - path), path);
}

static const char *base_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static json_t *texts_json(const calib_text *t, int32_t n)
{
	json_t *a = json_array();
	for (int32_t i = 0; i < n; i++) {
		json_t *x = json_object();
		json_object_set_new(x, "file", json_string(t[i].path));
		json_object_set_new(x, "sha256", json_string(t[i].sha256));
		json_object_set_new(x, "bytes", json_integer(t[i].bytes));
		json_object_set_new(x, "tokens", json_integer(t[i].n_tokens));
		json_array_append_new(a, x);
	}
	return a;
}

static json_t *reals_json(const double *x, int64_t n)
{
	json_t *a = json_array();
	for (int64_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(x[i]));
	return a;
}

/* Everything the run knows, for aah-calib.json. */
typedef struct calib_run {
	const calib_opts *o;
	const char *model_dir;
	const model_config *mc;
	int32_t T;
	calib_params cp;
	const calib_text *texts;
	int32_t n_texts;
	int64_t n_chunks;
	const calib_text *eval;
	const calib_measured *ms;
	const calib_meas *m;
	const aah_config *a;
	const calib_info *info;
	const calib_eval_row *rows;   /* full_attention, then the regimes in a's order; NULL without --eval */
	int32_t n_rows;
} calib_run;

static json_t *side_json(const calib_run *r)
{
	const model_config *mc = r->mc;
	const int32_t L = mc->n_layers, H = mc->n_heads, nkv = mc->n_kv_heads, nb = r->ms->n_bands, q = H / nkv;
	json_t *root = json_object(), *model = json_object(), *cw = json_array(), *edges = json_array();
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "tool_version", json_string(CALIBRATE_VERSION));
	json_object_set_new(model, "dir", json_string(r->model_dir));
	json_object_set_new(model, "layers", json_integer(L));
	json_object_set_new(model, "query_heads", json_integer(H));
	json_object_set_new(model, "kv_heads", json_integer(nkv));
	json_object_set_new(model, "head_dim", json_integer(mc->head_dim));
	json_object_set_new(model, "max_position_embeddings", json_integer(mc->max_position_embeddings));
	json_object_set_new(root, "model", model);
	json_object_set_new(root, "context_length", json_integer(r->T));
	for (int32_t i = 0; i < r->cp.n_windows; i++)
		json_array_append_new(cw, json_integer(r->cp.windows[i]));
	json_object_set_new(root, "candidate_windows", cw);
	json_object_set_new(root, "coverage", json_real(r->cp.coverage));
	json_object_set_new(root, "text", texts_json(r->texts, r->n_texts));
	json_object_set_new(root, "tokens", json_integer(r->n_chunks * r->T));
	json_object_set_new(root, "chunks", json_integer(r->n_chunks));
	for (int32_t b = 0; b + 1 < nb; b++)
		json_array_append_new(edges, json_integer(r->ms->band_edges[b]));
	json_object_set_new(root, "band_edges", edges);
	json_object_set_new(root, "bands_note",
	                    json_string("band b holds key distances band_edges[b-1] <= d < band_edges[b] (the first from 0, "
	                                "the last up to the context); masses are shares of the head's attention"));
	json_t *timing = json_object();
	json_object_set_new(timing, "measured_seconds", json_real(r->ms->seconds));
	json_object_set_new(timing, "measured_tokens_per_second", json_real(r->n_chunks * r->T / r->ms->seconds));
	if (r->o->eng.time_plain) {
		json_object_set_new(timing, "plain_seconds", json_real(r->ms->plain_seconds));
		json_object_set_new(timing, "plain_tokens_per_second", json_real(r->n_chunks * r->T / r->ms->plain_seconds));
	}
	json_object_set_new(root, "timing", timing);

	/* per layer: every query head's band shares and mean entropy; every KV head's features */
	json_t *layers = json_array();
	double *f = malloc((size_t)nb * sizeof *f), *share = malloc((size_t)nb * sizeof *share);
	for (int32_t l = 0; f && share && l < L; l++) {
		json_t *jl = json_object(), *qh = json_array(), *kh = json_array();
		for (int32_t h = 0; h < H; h++) {
			const double *x = r->ms->q_mass + ((int64_t)l * H + h) * nb;
			double all = 0;
			for (int32_t b = 0; b < nb; b++)
				all += x[b];
			for (int32_t b = 0; b < nb; b++)
				share[b] = all > 0 ? x[b] / all : 0;
			json_t *jh = json_object();
			json_object_set_new(jh, "band_mass", reals_json(share, nb));
			json_object_set_new(jh, "entropy", json_real(r->ms->q_entropy[(int64_t)l * H + h] / (double)r->ms->rows));
			json_array_append_new(qh, jh);
		}
		for (int32_t k = 0; k < nkv; k++) {
			const double *x = r->m->mass + ((int64_t)l * nkv + k) * nb;
			calib_features(r->m, l, k, f);
			json_t *jk = json_object(), *kept = json_object(), *qs = json_array();
			for (int32_t i = 0; i < q; i++)
				json_array_append_new(qs, json_integer(k * q + i));
			json_object_set_new(jk, "query_heads", qs);
			json_object_set_new(jk, "features", reals_json(f, nb));
			json_object_set_new(jk, "reach", json_real(calib_reach(r->m, f)));
			json_object_set_new(jk, "entropy_normalized", json_real(f[nb - 1]));
			for (int32_t i = 0; i < r->cp.n_windows; i++) {
				char key[16];
				snprintf(key, sizeof key, "%d", r->cp.windows[i]);
				json_object_set_new(kept, key, json_real(calib_kept(r->m, x, r->cp.windows[i])));
			}
			json_object_set_new(jk, "kept", kept);
			json_object_set_new(jk, "window_alone", json_integer(calib_window_alone(r->m, &r->cp, x)));
			json_array_append_new(kh, jk);
		}
		json_object_set_new(jl, "query_heads", qh);
		json_object_set_new(jl, "kv_heads", kh);
		json_array_append_new(layers, jl);
	}
	free(f);
	free(share);
	json_object_set_new(root, "layers", layers);

	json_t *regimes = json_object();
	if (r->rows) {
		json_t *fa = json_object(), *ev = json_object();
		json_object_set_new(ev, "loss", json_real(r->rows[0].nll / (double)r->rows[0].n_predicted));
		json_object_set_new(ev, "predicted_tokens", json_integer(r->rows[0].n_predicted));
		json_object_set_new(fa, "eval", ev);
		json_object_set_new(fa, "acr", json_real(1));
		json_object_set_new(fa, "kv_ratio", json_real(1));
		json_object_set_new(regimes, AAH_FULL_ATTENTION, fa);
	}
	for (int32_t k = 0; k < r->a->n_regimes; k++) {
		const aah_regime *g = &r->a->regimes[k];
		json_t *jr = json_object(), *jl = json_array();
		json_object_set_new(jr, "acr", json_real(calib_regime_acr(g, L, nkv, q, r->T, 0)));
		json_object_set_new(jr, "acr_capacity", json_real(calib_regime_acr(g, L, nkv, q, r->T, 1)));
		json_object_set_new(jr, "kv_ratio", json_real(calib_regime_kv_ratio(g, L, nkv, r->T)));
		for (int32_t l = 0; l < L; l++) {
			json_t *groups = json_array();
			for (int32_t gi = 0; gi < g->layers[l].n_groups; gi++) {
				const aah_group *G = &g->layers[l].groups[gi];
				const calib_group_info *in = &r->info->group[k][(int64_t)l * nkv + gi];
				json_t *jg = aah_group_to_json(G);
				json_object_set_new(jg, "window_alone", json_integer(in->window_alone));
				json_object_set_new(jg, "kept", json_real(in->kept));
				json_object_set_new(jg, "path", json_string(in->path));
				json_object_set_new(jg, "sibling", in->sibling >= 0 ? json_integer(in->sibling) : json_null());
				json_array_append_new(groups, jg);
			}
			json_array_append_new(jl, groups);
		}
		json_object_set_new(jr, "layers", jl);
		if (r->rows) {
			const calib_eval_row *row = &r->rows[1 + k];
			json_t *ev = json_object();
			json_object_set_new(ev, "loss", json_real(row->nll / (double)row->n_predicted));
			json_object_set_new(ev, "loss_delta", json_real(row->nll / (double)row->n_predicted -
			                                                r->rows[0].nll / (double)r->rows[0].n_predicted));
			json_object_set_new(ev, "predicted_tokens", json_integer(row->n_predicted));
			json_object_set_new(ev, "acr_engine", json_real(row->acr_engine));
			json_object_set_new(ev, "attention_work_ratio", json_real(row->work_ratio));
			json_object_set_new(ev, "kv_memory_ratio_engine", json_real(row->kv_ratio_engine));
			json_object_set_new(jr, "eval", ev);
		}
		json_object_set_new(regimes, g->name, jr);
	}
	json_object_set_new(root, "regimes", regimes);
	if (r->eval) {
		json_t *ev = json_object();
		json_object_set_new(ev, "file", json_string(r->eval->path));
		json_object_set_new(ev, "sha256", json_string(r->eval->sha256));
		json_object_set_new(ev, "tokens", json_integer(r->eval->n_tokens));
		json_object_set_new(root, "eval_text", ev);
	}
	return root;
}

static json_t *provenance_json(const calib_run *r, const char *calib_path)
{
	json_t *p = json_object();
	json_object_set_new(p, "source", json_string("aah-convert calibrate: windows from measured attention"));
	json_object_set_new(p, "tool_version", json_string(CALIBRATE_VERSION));
	json_object_set_new(p, "model", json_string(r->model_dir));
	json_object_set_new(p, "text", texts_json(r->texts, r->n_texts));
	json_object_set_new(p, "tokens", json_integer(r->n_chunks * r->T));
	json_object_set_new(p, "chunks", json_integer(r->n_chunks));
	json_object_set_new(p, "coverage", json_real(r->cp.coverage));
	json_object_set_new(p, "calibration", json_string(base_of(calib_path)));
	return p;
}

static void report(const calib_run *r)
{
	const int32_t L = r->mc->n_layers, nkv = r->mc->n_kv_heads, q = r->mc->n_heads / nkv;
	const double toks = (double)r->n_chunks * r->T;
	printf("aah-convert calibrate: %s: %d layers, %d query / %d KV heads; T = %d, candidates", r->model_dir, L,
	       r->mc->n_heads, nkv, r->T);
	for (int32_t i = 0; i < r->cp.n_windows; i++)
		printf("%s%d", i ? "/" : " ", r->cp.windows[i]);
	printf(", coverage %.3g\n", r->cp.coverage);
	printf("calibration: %.0f tokens (%lld chunks of %d) from", toks, (long long)r->n_chunks, r->T);
	for (int32_t i = 0; i < r->n_texts; i++)
		printf(" %s", r->texts[i].path);
	printf("\nmeasured prefill: %.2f s, %.1f tokens/s", r->ms->seconds, toks / r->ms->seconds);
	if (r->o->eng.time_plain)
		printf("; the same chunks unmeasured: %.2f s, %.1f tokens/s (measured / unmeasured time %.3fx)",
		       r->ms->plain_seconds, toks / r->ms->plain_seconds, r->ms->seconds / r->ms->plain_seconds);
	printf("\n");
	if (r->rows)
		printf("held-out: %lld tokens predicted of %s\n", (long long)r->rows[0].n_predicted, r->eval->path);
	printf("%-15s %-8s %6s %8s %8s %8s %9s %9s\n", "regime", "policy", "groups", "ACR", "ACR cap", "KV ratio",
	       "loss", "vs full");
	double full = r->rows ? r->rows[0].nll / (double)r->rows[0].n_predicted : NAN;
	if (r->rows)
		printf("%-15s %-8s %6d %8.4f %8.4f %8.4f %9.4f %+9.4f\n", AAH_FULL_ATTENTION, "static", L, 1.0, 1.0, 1.0,
		       full, 0.0);
	for (int32_t k = 0; k < r->a->n_regimes; k++) {
		const aah_regime *g = &r->a->regimes[k];
		int32_t groups = 0;
		for (int32_t l = 0; l < L; l++)
			groups += g->layers[l].n_groups;
		printf("%-15s %-8s %6d %8.4f %8.4f %8.4f", g->name, g->policy.kind == AAH_POLICY_ADAPTIVE ? "adaptive" : "static",
		       groups, calib_regime_acr(g, L, nkv, q, r->T, 0), calib_regime_acr(g, L, nkv, q, r->T, 1),
		       calib_regime_kv_ratio(g, L, nkv, r->T));
		if (r->rows) {
			double loss = r->rows[1 + k].nll / (double)r->rows[1 + k].n_predicted;
			printf(" %9.4f %+9.4f", loss, loss - full);
		}
		printf("\n");
	}
	printf("ACR: what the windows imply at T (aahd's counters give exactly this for a prompt under a static regime); "
	       "ACR cap: at the capacities, the most an adaptive policy may select; KV ratio: KV bytes of a T-token "
	       "sequence over full attention's\n");
}

/* ---- the run ---- */

/* Band edges: the powers of two below T (a distance profile for the features) and every candidate below T. */
static int32_t band_edges(int32_t T, const calib_params *cp, int32_t *edges)
{
	int32_t n = 0;
	for (int64_t e = 1; e < T && n < ENGINE_MEASURE_MAX_BANDS - 1 - AAH_MAX_WINDOWS; e *= 2)
		edges[n++] = (int32_t)e;
	for (int32_t i = 0; i < cp->n_windows; i++)
		if (cp->windows[i] < T) {
			int32_t j = n;
			bool have = false;
			for (int32_t k = 0; k < n; k++)
				have |= edges[k] == cp->windows[i];
			if (have)
				continue;
			while (j > 0 && edges[j - 1] > cp->windows[i]) {
				edges[j] = edges[j - 1];
				j--;
			}
			edges[j] = cp->windows[i];
			n++;
		}
	return n;
}

int calibrate_main(int argc, char **argv)
{
	calib_opts o;
	int prc = parse_opts(&o, argc, argv);
	if (prc >= 0)
		return prc;
	char err[10240], model_dir[4096];
	int rc = EXIT_FAIL;
	tokenizer *tok = NULL;
	calib_text texts[MAX_TEXTS] = { 0 }, eval = { 0 };
	int32_t *ids = NULL;
	calib_measured ms = { 0 };
	double *kv_mass = NULL, *kv_entropy = NULL;
	aah_config a = { 0 };
	calib_info info = { 0 };
	json_t *doc = NULL, *side = NULL;
	calib_eval_row rows[1 + CALIB_N_KINDS];
	model_config mc;
	char out_path[4200], calib_path[4200];

	/* a GGUF model's configuration is its metadata, and its aah.json goes beside the file */
	char gguf_at[4096], aah_dir[4096];
	int is_gguf = gguf_model_path(o.model_arg, gguf_at, sizeof gguf_at, err, sizeof err);
	if (is_gguf < 0 || aah_resolve_model_dir(o.model_arg, -1, model_dir, sizeof model_dir, err, sizeof err) != 0)
		goto fail;
	if (is_gguf) {
		model_files gm;
		if (model_files_load(&gm, model_dir, err, sizeof err) != 0)
			goto fail;
		mc = gm.config;
		snprintf(aah_dir, sizeof aah_dir, "%s", gm.dir);
		model_files_free(&gm);
	} else if (model_config_load(&mc, model_dir, err, sizeof err) != 0) {
		goto fail;
	} else {
		snprintf(aah_dir, sizeof aah_dir, "%s", model_dir);
	}
	/* the context and the candidate windows */
	int32_t T = o.context ? o.context : mc.max_position_embeddings < 4096 ? mc.max_position_embeddings : 4096;
	if (T > mc.max_position_embeddings) {
		snprintf(err, sizeof err, "--context %d exceeds the model's context (max_position_embeddings %d)", T,
		         mc.max_position_embeddings);
		goto fail;
	}
	calib_params cp = { .context_length = T, .coverage = o.coverage, .default_regime = o.default_regime };
	if (o.n_windows) {
		cp.n_windows = o.n_windows;
		memcpy(cp.windows, o.windows, sizeof o.windows);
	} else if (T >= 8) {
		const int32_t def[4] = { T / 8, T / 4, T / 2, T };
		cp.n_windows = 4;
		memcpy(cp.windows, def, sizeof def);
	}
	if (cp.n_windows == 0 || cp.windows[0] >= T) {
		snprintf(err, sizeof err,
		         "no head fits the candidate windows: none is below the context length %d, so every head would keep "
		         "its whole context and there is nothing to convert (give --windows below it)",
		         T);
		goto fail;
	}
	if (cp.windows[cp.n_windows - 1] > T) {
		snprintf(err, sizeof err, "candidate window %d exceeds the context length %d (aah.json's windows lie within it)",
		         cp.windows[cp.n_windows - 1], T);
		goto fail;
	}
	/* the texts */
	if (!(tok = tokenizer_load(model_dir, err, sizeof err)))
		goto fail;
	int64_t have = 0;
	for (int32_t i = 0; i < o.n_texts; i++) {
		if (text_load(&texts[i], o.texts[i], tok, err, sizeof err) != 0) {
			if (o.default_text)
				snprintf(err + strlen(err), sizeof err - strlen(err), " (the default calibration text; --text FILE)");
			goto fail;
		}
		have += texts[i].n_tokens;
	}
	int64_t want = o.tokens ? o.tokens : (int64_t)16 * T;
	if (want < T) {
		snprintf(err, sizeof err, "--tokens %lld is less than one chunk of the context length %d", (long long)want, T);
		goto fail;
	}
	if (have < T) {
		snprintf(err, sizeof err,
		         "the calibration text gives %lld tokens, fewer than one context of %d: distances beyond it could not "
		         "be measured (give more text, or a shorter --context)", (long long)have, T);
		goto fail;
	}
	int64_t n_chunks = (want < have ? want : have) / T;
	if (!o.no_eval) {
		if (text_load(&eval, o.eval_text, tok, err, sizeof err) != 0) {
			if (o.default_eval)
				snprintf(err + strlen(err), sizeof err - strlen(err),
				         " (the default held-out text; --eval-text FILE, or --no-eval)");
			goto fail;
		}
		for (int32_t i = 0; i < o.n_texts; i++)
			if (!strcmp(texts[i].sha256, eval.sha256)) {
				snprintf(err, sizeof err, "the held-out text %s is the calibration text %s: the loss must come from "
				         "text not used for calibration (--eval-text FILE, or --no-eval)", eval.path, texts[i].path);
				goto fail;
			}
		if (eval.n_tokens < 2) {
			snprintf(err, sizeof err, "%s: fewer than 2 tokens, nothing to predict", eval.path);
			goto fail;
		}
	}
	/* the outputs: checked before the long part */
	if (o.out)
		snprintf(out_path, sizeof out_path, "%s", o.out);
	else
		snprintf(out_path, sizeof out_path, "%s/aah.json", aah_dir);
	if (o.calib_out) {
		snprintf(calib_path, sizeof calib_path, "%s", o.calib_out);
	} else {
		char d[4096];
		dir_of(out_path, d, sizeof d);
		snprintf(calib_path, sizeof calib_path, "%s/aah-calib.json", d);
	}
	if (!strcmp(out_path, calib_path)) {
		snprintf(err, sizeof err, "--out and --calib-out name the same file %s", out_path);
		goto fail;
	}
	if (probe_writable(out_path, "--out", err, sizeof err) != 0 ||
	    probe_writable(calib_path, "--calib-out", err, sizeof err) != 0)
		goto fail;

	/* measure */
	ids = malloc((size_t)(n_chunks * T) * sizeof *ids);
	if (!ids) {
		snprintf(err, sizeof err, "out of memory");
		goto fail;
	}
	for (int64_t i = 0, at = 0; i < o.n_texts && at < n_chunks * T; i++) {
		int64_t n = texts[i].n_tokens < n_chunks * T - at ? texts[i].n_tokens : n_chunks * T - at;
		memcpy(ids + at, texts[i].ids, (size_t)n * sizeof *ids);
		at += n;
	}
	int32_t edges[ENGINE_MEASURE_MAX_BANDS];
	const int32_t n_edges = band_edges(T, &cp, edges), nb = n_edges + 1;
	int32_t band_hi[ENGINE_MEASURE_MAX_BANDS];
	memcpy(band_hi, edges, (size_t)n_edges * sizeof *edges);
	band_hi[n_edges] = T;
	const int32_t L = mc.n_layers, H = mc.n_heads, nkv = mc.n_kv_heads, q = H / nkv;
	ms.n_bands = nb;
	ms.band_edges = edges;
	ms.q_mass = calloc((size_t)L * H * nb, sizeof *ms.q_mass);
	ms.q_entropy = calloc((size_t)L * H, sizeof *ms.q_entropy);
	ms.chunk_kv_mass = calloc((size_t)(n_chunks * L * nkv * nb), sizeof *ms.chunk_kv_mass);
	kv_mass = calloc((size_t)L * nkv * nb, sizeof *kv_mass);
	kv_entropy = calloc((size_t)L * nkv, sizeof *kv_entropy);
	if (!ms.q_mass || !ms.q_entropy || !ms.chunk_kv_mass || !kv_mass || !kv_entropy) {
		snprintf(err, sizeof err, "out of memory");
		goto fail;
	}
	o.eng.context_length = T;
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (calib_measure_run(model_dir, &o.eng, ids, n_chunks, &ms, err, sizeof err) != 0)
		goto fail;
	for (int64_t c = 0; c < n_chunks; c++)
		for (int64_t i = 0; i < (int64_t)L * nkv * nb; i++)
			kv_mass[i] += ms.chunk_kv_mass[c * L * nkv * nb + i];
	for (int64_t i = 0; i < (int64_t)L * H; i++)
		kv_entropy[i / q] += ms.q_entropy[i];

	/* assign */
	calib_meas m = { .n_layers = L, .n_kv = nkv, .q_per_kv = q, .n_bands = nb, .band_hi = band_hi,
		             .mass = kv_mass, .entropy = kv_entropy, .uniform_entropy = (double)n_chunks * lgamma(T + 1.0),
		             .n_chunks = (int32_t)n_chunks, .chunk_mass = ms.chunk_kv_mass };
	if (calib_assign(&a, &info, &m, &cp, err, sizeof err) != 0)
		goto fail;
	calib_run run = { .o = &o, .model_dir = model_dir, .mc = &mc, .T = T, .cp = cp, .texts = texts,
		              .n_texts = o.n_texts, .n_chunks = n_chunks, .eval = o.no_eval ? NULL : &eval, .ms = &ms,
		              .m = &m, .a = &a, .info = &info };
	doc = aah_config_to_json(&a, provenance_json(&run, calib_path));
	if (!doc) {
		snprintf(err, sizeof err, "out of memory");
		goto fail;
	}
	if (aah_json_write_tmp(doc, out_path, tmp_files[0], sizeof tmp_files[0], err, sizeof err) != 0)
		goto fail;
	n_tmp_files = 1;

	/* check the file as aahd reads it, and score it */
	if (o.no_eval) {
		aah_config back;
		int lrc = aah_config_load_file(&back, tmp_files[0], &mc, err, sizeof err);
		aah_config_free(&back);
		if (lrc != 0)
			goto fail;
	} else {
		rows[0] = (calib_eval_row){ .regime = AAH_FULL_ATTENTION };
		for (int32_t k = 0; k < a.n_regimes; k++)
			rows[1 + k] = (calib_eval_row){ .regime = a.regimes[k].name };
		int64_t max_pred = o.eval_tokens ? o.eval_tokens : (int64_t)8 * T;
		if (calib_eval_run(model_dir, tmp_files[0], &o.eng, eval.ids, eval.n_tokens, max_pred, rows, 1 + a.n_regimes,
		                   err, sizeof err) != 0)
			goto fail;
		run.rows = rows;
		run.n_rows = 1 + a.n_regimes;
	}

	/* publish: the side file, then aah.json (its presence says the run finished) */
	side = side_json(&run);
	if (!side) {
		snprintf(err, sizeof err, "out of memory");
		goto fail;
	}
	if (aah_json_write_tmp(side, calib_path, tmp_files[1], sizeof tmp_files[1], err, sizeof err) != 0)
		goto fail;
	n_tmp_files = 2;
	if (rename(tmp_files[1], calib_path) != 0 || rename(tmp_files[0], out_path) != 0) {
		snprintf(err, sizeof err, "cannot rename into place: %s", strerror(errno));
		unlink(calib_path);
		goto fail;
	}
	n_tmp_files = 0;
	report(&run);
	printf("wrote %s and %s\n", out_path, calib_path);
	rc = 0;
	goto done;
fail:
	tmp_forget_all();
	fprintf(stderr, "aah-convert calibrate: %s\n", err);
done:
	json_decref(doc);
	json_decref(side);
	aah_config_free(&a);
	calib_info_free(&info);
	free(ms.q_mass);
	free(ms.q_entropy);
	free(ms.chunk_kv_mass);
	free(kv_mass);
	free(kv_entropy);
	free(ids);
	for (int32_t i = 0; i < MAX_TEXTS; i++)
		free(texts[i].ids);
	free(eval.ids);
	tokenizer_free(tok);
	return rc;
}
