/* tools/aah_eval.c — aah-eval: compatibility evaluation of a running server over benchmark subsets, per AAH regime:
 * lm-evaluation-harness's prompts and scoring (tools/eval/tasks.c), the measured ACR, work and memory ratios and
 * tokens/s of the evaluation's own requests, tables 9 and 10 (and 6 for perplexity), results.json and samples in
 * the harness's shapes, and a per-item cache so that a stopped run resumes and a finished one re-renders. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/eval/cache.h"
#include "base/fs.h"
#include "base/parse_num.h"
#include "tools/eval/client.h"
#include "tools/eval/prompt.h"
#include "tools/eval/report.h"
#include "tools/eval/runner.h"
#include "tools/eval/server_info.h"
#include "tools/eval/tasks.h"
#include "tools/eval/util.h"

#define EVAL_DEFAULT_MAX_LENGTH 2048   /* lm_eval TemplateAPI's max_length */

static atomic_int stop_flag;   /* 1: a signal asked to stop; 2: the runner hit an error */

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stop_flag, 1);
}

static void usage(FILE *f)
{
	fputs("usage: aah-eval --server URL --data DIR --tasks LIST --regimes LIST --out DIR [options]\n"
	      "       aah-eval --data DIR --tasks LIST --write-prompts FILE [--limit N | --sample N --seed S]\n"
	      "                [--num-fewshot K]\n"
	      "Evaluates the model a running server (aahd, or any OpenAI-completions server for the generation tasks)\n"
	      "serves, in each AAH regime, on benchmark items read as JSONL in the public datasets' layouts\n"
	      "(DIR/TASK.jsonl, few-shot examples in DIR/TASK.fewshot.jsonl; GPQA's in DIR/gpqa_diamond.full.jsonl, the\n"
	      "whole split, when it is there), scored as lm-evaluation-harness does.\n\n"
	      "  --server URL         the server (http://127.0.0.1:8080); several --server: a fleet, items spread over\n"
	      "                       them (they must serve the same model)\n"
	      "  --data DIR           the task files\n"
	      "  --tasks LIST         comma-separated: mmlu, mmlu_pro, gpqa_diamond, arc_challenge, hellaswag, triviaqa,\n"
	      "                       ceval, gsm8k, humaneval, mbpp, perplexity (DIR/perplexity.jsonl {\"text\"} or .txt);\n"
	      "                       all: every one of them whose file is in DIR\n"
	      "  --regimes LIST       aah_regime names, or all (the server's, from /v1/models)\n"
	      "  --out DIR            tables.md, table9.csv, table10.csv, perplexity.csv, tables.json, score_vs_acr.svg,\n"
	      "                       results.json, samples/REGIME/TASK.jsonl, and the cache cache.jsonl\n"
	      "  --limit N            the first N items of each task\n"
	      "  --sample N --seed S  N items of each task drawn with seed S (the same on any machine)\n"
	      "  --num-fewshot K      shots for every task, or per task: mmlu=5,gsm8k=8 (default: the harness's)\n"
	      "  --max-gen-toks N     generation cap for every generation task, or per task (default: the harness's)\n"
	      "  --max-length N       the harness's max_length (default 2048, the harness's for API models; prompts are\n"
	      "                       left-truncated to it as TemplateAPI truncates them); server: the server's context\n"
	      "  --concurrency C      requests in flight (default: the server's max_batch, else 8)\n"
	      "  --add-special        tokenize with the tokenizer's special tokens (the harness's add_bos_token)\n"
	      "  --prefix-token ID    the token before a document's first window (default: BOS, else EOS)\n"
	      "  --cache FILE         the result cache (default OUT/cache.jsonl)\n"
	      "  --timeout S          seconds one request may take (default 600)\n"
	      "  --api-key KEY        Authorization: Bearer KEY (default: $AAHD_API_KEY, else $OPENAI_API_KEY)\n"
	      "  --code-timeout S     code_eval's timeout: wall-clock seconds a HumanEval/MBPP program may run (default 3)\n"
	      "  --sandbox MODE       where those programs run: auto (default: the strongest that works here, named on\n"
	      "                       stderr), bwrap, bwrap-noproc, process, or none (unconfined, code_eval's guard only)\n"
	      "  --write-prompts FILE write each selected item's prompt, continuations, choices and target as JSONL to\n"
	      "                       FILE (- for stdout) and exit, asking no server (--server, --regimes, --out unused)\n"
	      "  --quiet              no tables on stdout\n"
	      "  --help               this text\n"
	      "Exit status: 0 done, 1 an error (what was done stays in the cache), 2 bad usage, 130 interrupted.\n",
	      f);
}

/* A comma-separated list into a NULL-terminated array of new strings. */
static char **split(const char *s, int32_t *n)
{
	char *copy = xstrdup(s);
	char **out = xcalloc(strlen(s) + 2, sizeof *out);
	*n = 0;
	for (char *save, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		if (*t)
			out[(*n)++] = xstrdup(t);
	}
	free(copy);
	return out;
}

static void free_list(char **l, int32_t n)
{
	for (int32_t i = 0; l && i < n; i++)
		free(l[i]);
	free(l);
}

/* "K" or "task=K,task=K": the value for task, or dflt. -2 on a malformed spec (checked once up front). */
static int64_t per_task(const char *spec, const char *task, int64_t dflt)
{
	if (!spec)
		return dflt;
	int64_t v;
	if (aah_parse_i64(spec, 0, INT64_MAX, &v))
		return v;
	int32_t n;
	char **parts = split(spec, &n);
	int64_t out = dflt;
	for (int32_t i = 0; i < n; i++) {
		char *eq = strchr(parts[i], '=');
		if (!eq || !aah_parse_i64(eq + 1, 0, INT64_MAX, &v) || !eval_task_find((*eq = 0, parts[i])))
			out = -2;
		else if (!strcmp(parts[i], task) && out != -2)
			out = v;
	}
	free_list(parts, n);
	return out;
}

typedef struct options {
	char **servers;
	int32_t n_servers;
	const char *data, *tasks, *regimes, *out, *cache, *api_key, *fewshot, *max_gen, *write_prompts;
	eval_sandbox_mode sandbox;
	int64_t limit, sample, seed, max_length, concurrency, prefix_token;
	bool have_seed, add_special, quiet;
	double timeout, code_timeout;
} options;

static int parse_args(options *o, int argc, char **argv)
{
	memset(o, 0, sizeof *o);
	o->limit = o->sample = o->prefix_token = o->max_length = -1;
	o->timeout = 600;
	o->code_timeout = 3;
	o->sandbox = EVAL_SANDBOX_AUTO;
	o->servers = xcalloc((size_t)argc + 1, sizeof *o->servers);
	enum { O_SERVER = 1, O_DATA, O_TASKS, O_REGIMES, O_OUT, O_LIMIT, O_SAMPLE, O_SEED, O_FEWSHOT, O_MAXGEN, O_MAXLEN,
	       O_CONC, O_ADDSPECIAL, O_PREFIX, O_CACHE, O_TIMEOUT, O_KEY, O_CODET, O_SANDBOX, O_PROMPTS, O_QUIET, O_HELP };
	static const struct option longopts[] = {
		{"server", required_argument, NULL, O_SERVER}, {"data", required_argument, NULL, O_DATA},
		{"tasks", required_argument, NULL, O_TASKS}, {"regimes", required_argument, NULL, O_REGIMES},
		{"out", required_argument, NULL, O_OUT}, {"limit", required_argument, NULL, O_LIMIT},
		{"sample", required_argument, NULL, O_SAMPLE}, {"seed", required_argument, NULL, O_SEED},
		{"num-fewshot", required_argument, NULL, O_FEWSHOT}, {"max-gen-toks", required_argument, NULL, O_MAXGEN},
		{"max-length", required_argument, NULL, O_MAXLEN}, {"concurrency", required_argument, NULL, O_CONC},
		{"add-special", no_argument, NULL, O_ADDSPECIAL}, {"prefix-token", required_argument, NULL, O_PREFIX},
		{"cache", required_argument, NULL, O_CACHE}, {"timeout", required_argument, NULL, O_TIMEOUT},
		{"api-key", required_argument, NULL, O_KEY}, {"code-timeout", required_argument, NULL, O_CODET},
		{"sandbox", required_argument, NULL, O_SANDBOX}, {"write-prompts", required_argument, NULL, O_PROMPTS},
		{"quiet", no_argument, NULL, O_QUIET}, {"help", no_argument, NULL, O_HELP}, {NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		bool ok = true;
		switch (c) {
		case O_SERVER: o->servers[o->n_servers++] = optarg; break;
		case O_DATA: o->data = optarg; break;
		case O_TASKS: o->tasks = optarg; break;
		case O_REGIMES: o->regimes = optarg; break;
		case O_OUT: o->out = optarg; break;
		case O_LIMIT: ok = aah_parse_i64(optarg, 1, INT64_MAX, &o->limit); break;
		case O_SAMPLE: ok = aah_parse_i64(optarg, 1, INT64_MAX, &o->sample); break;
		case O_SEED: ok = aah_parse_i64(optarg, 0, INT64_MAX, &o->seed); o->have_seed = true; break;
		case O_FEWSHOT: o->fewshot = optarg; break;
		case O_MAXGEN: o->max_gen = optarg; break;
		case O_MAXLEN:
			if (!strcmp(optarg, "server"))
				o->max_length = -2;   /* the server's context length, from /v1/models */
			else
				ok = aah_parse_i64(optarg, 3, INT64_MAX, &o->max_length);
			break;
		case O_CONC: ok = aah_parse_i64(optarg, 1, INT64_MAX, &o->concurrency) && o->concurrency <= 4096; break;
		case O_ADDSPECIAL: o->add_special = true; break;
		case O_PREFIX: ok = aah_parse_i64(optarg, 0, INT64_MAX, &o->prefix_token); break;
		case O_CACHE: o->cache = optarg; break;
		case O_TIMEOUT: ok = aah_parse_f64(optarg, &o->timeout) && o->timeout > 0; break;
		case O_KEY: o->api_key = optarg; break;
		case O_CODET: ok = aah_parse_f64(optarg, &o->code_timeout) && o->code_timeout > 0 && o->code_timeout <= 3600; break;
		case O_SANDBOX: ok = eval_sandbox_mode_parse(optarg, &o->sandbox) == 0; break;
		case O_PROMPTS: o->write_prompts = optarg; break;
		case O_QUIET: o->quiet = true; break;
		case O_HELP: usage(stdout); exit(0);
		default:
			fprintf(stderr, "aah-eval: unknown or incomplete option %s (--help lists them)\n", argv[optind - 1]);
			return -1;
		}
		if (!ok) {
			fprintf(stderr, "aah-eval: bad value for %s: '%s'\n", argv[optind - 2 >= 0 ? optind - 2 : 0], optarg);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "aah-eval: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	const char *missing = !o->data ? "--data" : !o->tasks ? "--tasks" : o->write_prompts ? NULL
	                      : !o->n_servers ? "--server" : !o->regimes ? "--regimes" : !o->out ? "--out" : NULL;
	if (missing) {
		fprintf(stderr, "aah-eval: %s is required (--help)\n", missing);
		return -1;
	}
	if (o->limit >= 0 && o->sample >= 0) {
		fprintf(stderr, "aah-eval: --limit and --sample exclude each other\n");
		return -1;
	}
	if (o->sample >= 0 && !o->have_seed) {
		fprintf(stderr, "aah-eval: --sample N needs --seed S (so that the selection can be repeated)\n");
		return -1;
	}
	if (per_task(o->fewshot, "", 0) == -2 || per_task(o->max_gen, "", 0) == -2) {
		fprintf(stderr, "aah-eval: --num-fewshot / --max-gen-toks take N or TASK=N,TASK=N with known tasks\n");
		return -1;
	}
	if (!o->api_key)
		o->api_key = getenv("AAHD_API_KEY") ? getenv("AAHD_API_KEY") : getenv("OPENAI_API_KEY");
	return 0;
}

static const char *known_tasks(void)
{
	static char buf[512];
	buf[0] = 0;
	for (int32_t i = 0; i < eval_n_tasks; i++)
		snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", eval_tasks[i].name);
	return buf;
}

/* An item's cached result when it has the shape a result has (a record damaged by hand is run again). */
static json_t *cached(eval_cache *c, const char *key)
{
	json_t *res = json_object_get(eval_cache_item(c, key), "result");
	return json_is_object(res) && json_is_object(json_object_get(res, "metrics")) ? res : NULL;
}

/* Once per task: a few-shot pool that cannot give the harness's examples, said on stderr. */
static void say_pool(const eval_task_run *run)
{
	static bool said[64];
	bool *w = &said[(run->task - eval_tasks) & 63];
	if (!run->pool.partial || *w)
		return;
	*w = true;
	fprintf(stderr, "aah-eval: %s %d-shot: partial few-shot pool: %s holds %s (%s); its results are marked, not "
	        "comparable with published numbers\n", run->task->name, run->k, run->pool.file, run->pool.note,
	        run->pool.detail);
}

/* --write-prompts: every selected item's requests as text, one JSON line each, with no server. */
static int write_prompts(const options *o, const eval_task *const *tasks, int32_t n_tasks)
{
	FILE *f = strcmp(o->write_prompts, "-") ? fopen(o->write_prompts, "w") : stdout;
	if (!f) {
		fprintf(stderr, "aah-eval: cannot write %s: %s\n", o->write_prompts, strerror(errno));
		return 1;
	}
	int rc = 0;
	for (int32_t t = 0; t < n_tasks && rc == 0; t++) {
		char err[4096];
		eval_prepare_opts po = {
			.num_fewshot = (int32_t)per_task(o->fewshot, tasks[t]->name, -1),
			.subset = {o->limit, o->sample, (uint64_t)o->seed},
			.max_gen_toks = (int32_t)per_task(o->max_gen, tasks[t]->name, -1),
			.settings = "",
		};
		eval_task_run run;
		if (eval_task_prepare(&run, tasks[t], o->data, &po, err, sizeof err) != 0) {
			fprintf(stderr, "aah-eval: %s\n", err);
			rc = 1;
			break;
		}
		say_pool(&run);
		json_t *pool = eval_fewshot_pool_json(&run);
		for (int64_t i = 0; i < run.n_items; i++) {
			const eval_item *it = &run.items[i];
			json_t *line = json_pack("{s:s,s:i,s:I,s:I,s:O,s:s}", "task", tasks[t]->name, "k", run.k, "doc_id",
			                         (json_int_t)it->doc_id, "file_index", (json_int_t)it->index, "doc", it->doc,
			                         "context", it->context);
			if (it->n_choices > 0) {
				json_t *cont = json_array(), *choices = json_array();
				for (int32_t c = 0; c < it->n_choices; c++) {
					json_array_append_new(cont, json_string(it->continuation[c]));
					json_array_append_new(choices, json_string(it->choice[c]));
				}
				json_object_set_new(line, "continuations", cont);
				json_object_set_new(line, "choices", choices);
				json_object_set_new(line, "gold", json_integer(it->gold));
			}
			json_object_set(line, "target", it->target ? it->target : json_null());
			if (pool)
				json_object_set(line, "fewshot_pool", pool);
			char *s = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
			json_decref(line);
			if (!s || fprintf(f, "%s\n", s) < 0)
				rc = 1;
			free(s);
		}
		json_decref(pool);
		eval_task_run_free(&run);
	}
	if ((f == stdout ? fflush(f) : fclose(f)) != 0 || rc != 0) {
		if (rc == 0)
			fprintf(stderr, "aah-eval: cannot write %s: %s\n", o->write_prompts, strerror(errno));
		return 1;
	}
	return 0;
}

/* The tasks to run, in the table's order. */
static int resolve_tasks(const options *o, const eval_task **out, int32_t *n)
{
	*n = 0;
	if (!strcmp(o->tasks, "all")) {
		strbuf skipped = {0};
		for (int32_t i = 0; i < eval_n_tasks; i++) {
			const eval_task *t = &eval_tasks[i];
			char *a = xasprintf("%s/%s.jsonl", o->data, t->name);
			char *b = xasprintf("%s/%s.txt", o->data, t->name);
			if (aah_path_exists(a) || (t->output == EVAL_LOGLIKELIHOOD_ROLLING && aah_path_exists(b)))
				out[(*n)++] = t;
			else
				sb_addf(&skipped, "%s%s", skipped.len ? ", " : "", t->name);
			free(a);
			free(b);
		}
		if (skipped.len)
			fprintf(stderr, "aah-eval: --tasks all: no file in %s for %s\n", o->data, skipped.s);
		sb_free(&skipped);
		if (*n == 0) {
			fprintf(stderr, "aah-eval: no task file (TASK.jsonl) in %s\n", o->data);
			return -1;
		}
		return 0;
	}
	int32_t m;
	char **names = split(o->tasks, &m);
	int rc = 0;
	for (int32_t i = 0; i < eval_n_tasks; i++)
		for (int32_t j = 0; j < m; j++)
			if (!strcmp(names[j], eval_tasks[i].name)) {
				out[(*n)++] = &eval_tasks[i];
				break;
			}
	for (int32_t j = 0; j < m; j++)
		if (!eval_task_find(names[j])) {
			fprintf(stderr, "aah-eval: unknown task '%s' (known: %s)\n", names[j], known_tasks());
			rc = -1;
		}
	if (m == 0) {
		fprintf(stderr, "aah-eval: --tasks is empty\n");
		rc = -1;
	}
	free_list(names, m);
	return rc;
}

/* The regimes to run; -1 with a message naming the unknown one and the server's. */
static char **resolve_regimes(const options *o, const eval_server *srv, int32_t *n, char *err, size_t errlen)
{
	char **out;
	if (!strcmp(o->regimes, "all")) {
		*n = srv->n_regimes ? srv->n_regimes : 1;
		out = xcalloc((size_t)*n + 1, sizeof *out);
		for (int32_t i = 0; i < *n; i++)
			out[i] = xstrdup(srv->n_regimes ? srv->regimes[i] : "default");
		return out;
	}
	out = split(o->regimes, n);
	for (int32_t i = 0; i < *n; i++) {
		bool ok = srv->n_regimes ? eval_server_regime(srv, out[i]) >= 0 : !strcmp(out[i], "default");
		if (!ok) {
			strbuf have = {0};
			for (int32_t k = 0; k < srv->n_regimes; k++)
				sb_addf(&have, "%s%s", k ? ", " : "", srv->regimes[k]);
			if (srv->n_regimes)
				snprintf(err, errlen, "unknown regime '%s': %s serves '%s' with the regimes %s", out[i], srv->key,
				         srv->model, have.s);
			else
				snprintf(err, errlen, "unknown regime '%s': %s serves '%s' without AAH regimes (use --regimes "
				         "default)", out[i], srv->key, srv->model);
			sb_free(&have);
			free_list(out, *n);
			*n = 0;
			return NULL;
		}
	}
	if (*n == 0) {
		snprintf(err, errlen, "--regimes is empty");
		free(out);
		*n = 0;
		return NULL;
	}
	return out;
}

/* Everything derived from the server's description: regimes, prepared tasks, units and their cache keys. */
typedef struct plan {
	char **regimes;
	int32_t n_regimes;
	int64_t max_length;
	eval_task_run *runs;
	int32_t n_runs;
	eval_tokens **tokens;   /* [t][i] */
	eval_unit **units;      /* [r] all units of regime r, task-major */
	int64_t n_units;        /* per regime */
	int64_t missing;
} plan;

static void plan_free(plan *p)
{
	for (int32_t t = 0; t < p->n_runs; t++) {
		for (int64_t i = 0; i < p->runs[t].n_items; i++)
			eval_tokens_free(&p->tokens[t][i]);
		free(p->tokens[t]);
		eval_task_run_free(&p->runs[t]);
	}
	for (int32_t r = 0; p->units && r < p->n_regimes; r++)
		free(p->units[r]);
	free(p->units);
	free(p->tokens);
	free(p->runs);
	free_list(p->regimes, p->n_regimes);
	memset(p, 0, sizeof *p);
}

static int make_plan(plan *p, const options *o, const eval_task *const *tasks, int32_t n_tasks, eval_server *srv,
                     eval_cache *cache, char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	if (o->prefix_token >= 0)
		srv->prefix_token = (int32_t)o->prefix_token;
	p->regimes = resolve_regimes(o, srv, &p->n_regimes, err, errlen);
	if (!p->regimes)
		return -1;
	/* the harness's API models (TemplateAPI) default to max_length 2048, whatever the server's context */
	p->max_length = o->max_length > 0 ? o->max_length : o->max_length == -2 ? srv->max_model_len : EVAL_DEFAULT_MAX_LENGTH;
	if (p->max_length < 3) {
		snprintf(err, errlen, "%s does not say its context length (max_model_len in /v1/models): give --max-length N",
		         srv->key);
		return -1;
	}
	static bool said;
	if (srv->max_model_len > 0 && srv->max_model_len < p->max_length && !said) {
		said = true;
		fprintf(stderr, "aah-eval: %s serves a context of %lld tokens, below max_length %lld%s: a longer request is "
		        "refused by the server, as it would be for the harness (--max-length %lld truncates to fit)\n", srv->key,
		        (long long)srv->max_model_len, (long long)p->max_length,
		        o->max_length > 0 ? "" : " (the harness's default)", (long long)srv->max_model_len);
	}
	p->runs = xcalloc((size_t)n_tasks, sizeof *p->runs);
	p->tokens = xcalloc((size_t)n_tasks, sizeof *p->tokens);
	for (int32_t t = 0; t < n_tasks; t++) {
		const eval_task *task = tasks[t];
		char sandbox[128] = "";
		if (task->program)
			snprintf(sandbox, sizeof sandbox, ";code_eval_timeout=%g", o->code_timeout);   /* run as code_eval runs */
		char *settings = xasprintf("max_length=%lld;add_special=%d;prefix=%d;eos=%s%s", (long long)p->max_length,
		                           o->add_special, srv->prefix_token, srv->eos_text ? srv->eos_text : "", sandbox);
		eval_prepare_opts po = {
			.num_fewshot = (int32_t)per_task(o->fewshot, task->name, -1),
			.subset = {o->limit, o->sample, (uint64_t)o->seed},
			.max_gen_toks = (int32_t)per_task(o->max_gen, task->name, -1),
			.settings = settings,
		};
		int rc = eval_task_prepare(&p->runs[t], task, o->data, &po, err, errlen);
		free(settings);
		if (rc != 0)
			return -1;
		p->n_runs++;
		say_pool(&p->runs[t]);
		static bool warned[64];   /* once per task: make_plan runs twice when the server is asked again */
		bool *w = &warned[(task - eval_tasks) & 63];
		if (task->output == EVAL_GENERATE_UNTIL && p->runs[t].max_gen_toks >= p->max_length - 1 && !*w) {
			*w = true;
			/* the harness slices x[-n:] with n <= 0 here: the whole prompt (n = 0), or all but its first -n tokens */
			int64_t n = p->max_length - 1 - p->runs[t].max_gen_toks;
			fprintf(stderr, "aah-eval: %s: max_gen_toks %d leaves max_length %lld - 1 - %d = %lld tokens for the prompt; "
			        "as the harness does (x[-n:] with n = %lld), %s (--max-length or --max-gen-toks %s=N to change "
			        "it)\n", task->name, p->runs[t].max_gen_toks, (long long)p->max_length, p->runs[t].max_gen_toks,
			        (long long)n, (long long)n, n == 0 ? "each prompt goes whole" : "each prompt loses its first -n tokens",
			        task->name);
		}
		p->tokens[t] = xcalloc((size_t)(p->runs[t].n_items ? p->runs[t].n_items : 1), sizeof **p->tokens);
		p->n_units += p->runs[t].n_items;
	}
	p->units = xcalloc((size_t)p->n_regimes, sizeof *p->units);
	for (int32_t r = 0; r < p->n_regimes; r++) {
		p->units[r] = xcalloc((size_t)(p->n_units ? p->n_units : 1), sizeof **p->units);
		int64_t k = 0;
		for (int32_t t = 0; t < p->n_runs; t++)
			for (int64_t i = 0; i < p->runs[t].n_items; i++) {
				eval_unit *u = &p->units[r][k++];
				u->run = &p->runs[t];
				u->item = &p->runs[t].items[i];
				u->tok = &p->tokens[t][i];
				eval_unit_key(srv, p->regimes[r], u->run, u->item, u->key);
				if (!cached(cache, u->key))
					p->missing++;
			}
	}
	return 0;
}

/* The timing key of a regime over this plan's items. */
static void timing_key(const plan *p, const eval_server *srv, int32_t r, char out[33])
{
	strbuf b = {0};
	sb_addf(&b, "timing\x1f%s\x1f%s\x1f%s", srv->key, srv->model, p->regimes[r]);
	for (int64_t k = 0; k < p->n_units; k++)
		sb_adds(&b, p->units[r][k].key);
	eval_hash_hex(b.s, b.len, out);
	sb_free(&b);
}

static bool needs_sandbox(const plan *p, eval_cache *cache)
{
	for (int32_t r = 0; r < p->n_regimes; r++)
		for (int64_t k = 0; k < p->n_units; k++)
			if (p->units[r][k].run->task->program && !cached(cache, p->units[r][k].key))
				return true;
	return false;
}

int main(int argc, char **argv)
{
	options o;
	const eval_task *tasks[64];
	int32_t n_tasks;
	if (parse_args(&o, argc, argv) != 0 || resolve_tasks(&o, tasks, &n_tasks) != 0) {
		free(o.servers);
		return 2;
	}
	if (o.write_prompts) {
		free(o.servers);
		return write_prompts(&o, tasks, n_tasks);
	}
	char err[4096];
	struct stat st;
	eval_cache *cache = NULL;
	if (stat(o.data, &st) != 0 || !S_ISDIR(st.st_mode))
		fprintf(stderr, "aah-eval: --data %s: not a directory\n", o.data);
	else if (mkdir(o.out, 0755) != 0 && errno != EEXIST)
		fprintf(stderr, "aah-eval: cannot create --out %s: %s\n", o.out, strerror(errno));
	else {
		char *cache_path = o.cache ? xstrdup(o.cache) : xasprintf("%s/cache.jsonl", o.out);
		cache = eval_cache_open(cache_path, err, sizeof err);
		free(cache_path);
		if (!cache)
			fprintf(stderr, "aah-eval: %s\n", err);
	}
	if (!cache) {
		free(o.servers);
		return 1;
	}
	if (eval_cache_skipped_lines(cache))
		fprintf(stderr, "aah-eval: %s: %lld unreadable line%s skipped (a run cut short while writing?)\n",
		        eval_cache_path(cache), (long long)eval_cache_skipped_lines(cache),
		        eval_cache_skipped_lines(cache) == 1 ? "" : "s");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	eval_client_stats stats;
	atomic_init(&stats.requests, 0);
	atomic_init(&stats.waits_429, 0);
	atomic_init(&stats.retries, 0);
	eval_client **clients = xcalloc((size_t)o.n_servers, sizeof *clients);
	strbuf key = {0};
	for (int32_t i = 0; i < o.n_servers; i++) {
		clients[i] = eval_client_init(o.servers[i], o.api_key, o.timeout, &stop_flag, &stats);
		if (!clients[i]) {
			fprintf(stderr, "aah-eval: libcurl cannot start a connection\n");
			return 1;
		}
		sb_addf(&key, "%s%s", i ? "," : "", eval_client_url(clients[i]));
	}

	/* What the server is: the cache's record of it when there is one (a finished run re-renders without a
	 * request), else asked now; asked again whenever an item is missing. */
	int exit_code = 0;
	eval_server srv = {0};
	json_t *rec = eval_cache_server(cache, key.s);
	plan p = {0};
	bool have = rec && eval_server_from_record(&srv, rec) == 0;
	if (!have && eval_server_fetch(&srv, clients, o.n_servers, key.s, err, sizeof err) != 0) {
		fprintf(stderr, "aah-eval: %s\n", err);
		exit_code = 1;
		goto done;
	}
	int planned = make_plan(&p, &o, tasks, n_tasks, &srv, cache, err, sizeof err);
	if (planned != 0 && (srv.live || p.regimes)) {
		/* a bad task file or setting: the server has nothing to do with it */
		fprintf(stderr, "aah-eval: %s\n", err);
		exit_code = 1;
		goto done;
	}
	if (!srv.live && (planned != 0 || p.missing > 0)) {
		/* a regime the record does not know, or items to run: ask the server what it serves now */
		eval_server fresh;
		if (eval_server_fetch(&fresh, clients, o.n_servers, key.s, err, sizeof err) != 0) {
			fprintf(stderr, "aah-eval: %s\naah-eval: %lld of %lld results are in the cache %s; they are kept, run the "
			        "same command again once the server answers\n", err, (long long)(p.n_units * p.n_regimes - p.missing),
			        (long long)(p.n_units * p.n_regimes), eval_cache_path(cache));
			exit_code = 1;
			goto done;
		}
		bool same = eval_server_same(&srv, &fresh);
		eval_server_free(&srv);
		srv = fresh;
		if (!same || planned != 0) {
			plan_free(&p);
			if (make_plan(&p, &o, tasks, n_tasks, &srv, cache, err, sizeof err) != 0) {
				fprintf(stderr, "aah-eval: %s\n", err);
				exit_code = 1;
				goto done;
			}
		}
	}
	if (srv.live) {
		json_t *mine = eval_server_record(&srv);
		if (!rec || !json_equal(rec, mine)) {
			if (eval_cache_put(cache, mine, err, sizeof err) != 0) {
				fprintf(stderr, "aah-eval: %s\n", err);
				exit_code = 1;
				goto done;
			}
		} else {
			json_decref(mine);
		}
	}

	eval_runner_opts ro = {
		.urls = (const char *const *)o.servers, .n_urls = o.n_servers, .api_key = o.api_key, .timeout_s = o.timeout,
		.concurrency = (int32_t)(o.concurrency > 0 ? o.concurrency : srv.max_batch > 0 ? srv.max_batch : 8),
		.max_length = p.max_length, .add_special = o.add_special, .stop = &stop_flag, .stats = &stats,
		.tty = isatty(2),
	};
	eval_sandbox_default_limits(&ro.sandbox);
	eval_sandbox_set_timeout(&ro.sandbox, o.code_timeout);
	ro.sandbox.mode = o.sandbox;
	char sandbox_note[2048] = "";
	if (p.missing > 0 && needs_sandbox(&p, cache)) {
		/* once, before any item: the strongest sandbox this place allows, and why a stronger one is not */
		if (eval_sandbox_detect(&ro.sandbox, sandbox_note, sizeof sandbox_note, err, sizeof err) != 0) {
			fprintf(stderr, "aah-eval: the code tasks (humaneval, mbpp) run their tests in a sandbox: %s\n", err);
			exit_code = 1;
			goto done;
		}
		fprintf(stderr, "aah-eval: %s\n", sandbox_note);
	}
	int64_t total = p.n_units * p.n_regimes;
	if (p.missing > 0)
		fprintf(stderr, "aah-eval: %s (%s): %d task%s, %d regime%s, %lld items each; %lld of %lld from the cache, "
		        "%lld to run, %d in flight\n", srv.model, srv.key, p.n_runs, p.n_runs == 1 ? "" : "s", p.n_regimes,
		        p.n_regimes == 1 ? "" : "s", (long long)p.n_units, (long long)(total - p.missing), (long long)total,
		        (long long)p.missing, ro.concurrency);

	for (int32_t r = 0; r < p.n_regimes && exit_code == 0; r++) {
		eval_unit *todo = xcalloc((size_t)(p.n_units ? p.n_units : 1), sizeof *todo);
		int64_t n = 0;
		for (int64_t k = 0; k < p.n_units; k++)
			if (!cached(cache, p.units[r][k].key))
				todo[n++] = p.units[r][k];
		double tokens, seconds;
		int rc = eval_runner_regime(&ro, &srv, cache, p.regimes[r], r, p.n_regimes, todo, n, &tokens, &seconds, err,
		                            sizeof err);
		free(todo);
		if (n > 0 && tokens > 0 && seconds > 0) {
			char tk[33], e2[512];
			timing_key(&p, &srv, r, tk);
			json_t *t = json_pack("{s:s,s:s,s:s,s:f,s:f,s:I}", "type", "timing", "key", tk, "regime", p.regimes[r],
			                      "tokens", tokens, "seconds", seconds, "items", (json_int_t)n);
			if (eval_cache_put(cache, t, e2, sizeof e2) != 0)
				fprintf(stderr, "aah-eval: %s\n", e2);
		}
		if (rc != 0) {
			int64_t done_now = 0;
			for (int32_t q = 0; q < p.n_regimes; q++)
				for (int64_t k = 0; k < p.n_units; k++)
					done_now += cached(cache, p.units[q][k].key) != NULL;
			if (rc < 0)
				fprintf(stderr, "aah-eval: %s\n", err);
			else
				fprintf(stderr, "aah-eval: interrupted\n");
			fprintf(stderr, "aah-eval: %lld of %lld results are in the cache %s; run the same command again to "
			        "resume\n", (long long)done_now, (long long)total, eval_cache_path(cache));
			exit_code = rc < 0 ? 1 : 130;
		}
	}
	if (exit_code != 0)
		goto done;

	/* render from the cache */
	{
		json_t ***results = xcalloc((size_t)(p.n_regimes * p.n_runs), sizeof *results);
		double *tps = xcalloc((size_t)p.n_regimes, sizeof *tps);
		for (int32_t r = 0; r < p.n_regimes; r++) {
			int64_t k = 0;
			for (int32_t t = 0; t < p.n_runs; t++) {
				results[r * p.n_runs + t] = xcalloc((size_t)(p.runs[t].n_items ? p.runs[t].n_items : 1),
				                                    sizeof **results);
				for (int64_t i = 0; i < p.runs[t].n_items; i++)
					results[r * p.n_runs + t][i] = cached(cache, p.units[r][k++].key);
			}
			char tk[33];
			double tokens, seconds;
			timing_key(&p, &srv, r, tk);
			eval_cache_timing(cache, tk, &tokens, &seconds);
			tps[r] = seconds > 0 ? tokens / seconds : NAN;
		}
		json_t *tasks_j = json_array(), *fewshot = json_object(), *maxgen = json_object(), *pools = json_object();
		for (int32_t t = 0; t < p.n_runs; t++) {
			json_array_append_new(tasks_j, json_string(p.runs[t].task->name));
			json_object_set_new(fewshot, p.runs[t].task->name, json_integer(p.runs[t].k));
			json_t *pool = eval_fewshot_pool_json(&p.runs[t]);
			if (pool)
				json_object_set_new(pools, p.runs[t].task->name, pool);
			if (p.runs[t].task->output == EVAL_GENERATE_UNTIL)
				json_object_set_new(maxgen, p.runs[t].task->name, json_integer(p.runs[t].max_gen_toks));
		}
		json_t *config = json_pack("{s:s,s:s,s:o,s:o,s:I,s:b,s:o,s:o}", "model", srv.model, "server", srv.key, "tasks",
		                           tasks_j, "num_fewshot", fewshot, "max_length", (json_int_t)p.max_length,
		                           "add_special", o.add_special, "max_gen_toks", maxgen, "data",
		                           json_string(o.data));
		/* which sandbox ran the code tasks' programs: the modes their results record (a resumed run may hold
		 * several), and this run's detection */
		json_t *modes = json_array();
		for (int32_t r = 0; r < p.n_regimes; r++)
			for (int32_t t = 0; t < p.n_runs; t++)
				for (int64_t i = 0; p.runs[t].task->program && i < p.runs[t].n_items; i++) {
					json_t *m = json_object_get(json_object_get(results[r * p.n_runs + t][i], "sandbox"), "mode");
					bool seen = false;
					for (size_t k = 0; m && k < json_array_size(modes); k++)
						seen |= json_equal(json_array_get(modes, k), m);
					if (json_is_string(m) && !seen)
						json_array_append(modes, m);
				}
		if (json_array_size(modes) || sandbox_note[0])
			json_object_set_new(config, "sandbox", json_pack("{s:o,s:s,s:f}", "modes", modes, "note", sandbox_note,
			                                                 "code_eval_timeout", o.code_timeout));
		else
			json_decref(modes);
		/* where each task's few-shot examples came from; "partial": not the harness's draw */
		json_object_set_new(config, "fewshot_pool", pools);
		if (o.limit >= 0)
			json_object_set_new(config, "limit", json_integer(o.limit));
		if (o.sample >= 0)
			json_object_set_new(config, "sample", json_pack("{s:I,s:I}", "n", (json_int_t)o.sample, "seed",
			                                                (json_int_t)o.seed));
		eval_report rep = {
			.max_length = p.max_length,
			.max_length_from = o.max_length > 0    ? "--max-length"
			                   : o.max_length == -2 ? "the server's context, --max-length server"
			                                        : "the harness's default for API models",
			.srv = &srv, .regimes = (const char *const *)p.regimes, .n_regimes = p.n_regimes, .runs = p.runs,
			.n_runs = p.n_runs, .results = (json_t *const *const *)results, .tokens_per_second = tps,
			.config = config,
		};
		if (eval_report_write(&rep, o.out, err, sizeof err) != 0) {
			fprintf(stderr, "aah-eval: %s\n", err);
			exit_code = 1;
		} else {
			if (!o.quiet) {
				char *md = eval_report_markdown(&rep);
				fputs(md, stdout);
				free(md);
			}
			fprintf(stderr, "aah-eval: %lld results (%lld requests this run, %lld waits on a full queue); wrote %s/"
			        "{tables.md,table9.csv,table10.csv,perplexity.csv,tables.json,score_vs_acr.svg,results.json,"
			        "samples/}\n", (long long)total, (long long)atomic_load(&stats.requests),
			        (long long)atomic_load(&stats.waits_429), o.out);
		}
		json_decref(config);
		for (int32_t i = 0; i < p.n_regimes * p.n_runs; i++)
			free(results[i]);
		free(results);
		free(tps);
	}
done:
	plan_free(&p);
	eval_server_free(&srv);
	for (int32_t i = 0; i < o.n_servers; i++)
		eval_client_free(clients[i]);
	free(clients);
	sb_free(&key);
	eval_cache_close(cache);
	free(o.servers);
	curl_global_cleanup();
	return exit_code;
}
