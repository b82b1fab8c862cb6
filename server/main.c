/* server/main.c — the aahd program: configuration from defaults, then --config FILE, then flags (one flag per
 * configuration key); serves HTTP, or with --prompt / --prompt-ids runs one prompt from the command line. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "server/prompt_cli.h"
#include "server/server.h"

enum {
	O_KEY = 1000,          /* O_KEY + i: configuration key i */
	O_CONFIG = 900, O_PROMPT, O_IDS, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_SEED, O_QUIET, O_VERSION, O_PRINT,
};

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: aahd [--config FILE] [--model DIR] [options]     serve the HTTP API (docs/architecture.md)\n"
	        "       aahd --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [sampling options]\n"
	        "                                                        run one prompt and print the tokens\n"
	        "\n"
	        "Every configuration key (conf/aahd.conf) is also a flag; flags override the file:\n"
	        "  %-32s %s\n",
	        "-c, --config FILE", "read the configuration from FILE first");
	aahd_config_print_help(f);
	fprintf(f,
	        "\n"
	        "Prompt mode (no HTTP):\n"
	        "  --prompt TEXT                    prompt text (tokenized with the model's tokenizer)\n"
	        "  --prompt-ids LIST                prompt as comma-separated token ids\n"
	        "  -n N                             tokens to generate (default 16; --max-tokens also sets it)\n"
	        "  --temperature X                  0 = greedy (default 0)\n"
	        "  --top-k N                        0 = off (default 0)\n"
	        "  --top-p X                        1 = off (default 1)\n"
	        "  --min-p X                        0 = off (default 0)\n"
	        "  --seed N                         sampling seed (default 0)\n"
	        "  --quiet                          print only the generated ids\n"
	        "\n"
	        "  -h, --help                       this text\n"
	        "  --version                        the version\n"
	        "  --print-config                   print the configuration in effect (a config file) and exit\n"
	        "\n"
	        "Environment: AAHD_API_KEY overrides api_key.\n");
}

static int parse_long(const char *name, const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "aahd: %s: '%s' is not an integer in [%ld, %ld]\n", name, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_float(const char *name, const char *s, double lo, double hi, float *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi)) {
		fprintf(stderr, "aahd: %s: '%s' is not a number in [%g, %g]\n", name, s, lo, hi);
		return -1;
	}
	*out = (float)v;
	return 0;
}

/* --config FILE, -c FILE or --config=FILE, found before the other flags so that they override it. */
static const char *config_path(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if ((!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) && i + 1 < argc)
			return argv[i + 1];
		if (!strncmp(argv[i], "--config=", 9))
			return argv[i] + 9;
		if (!strcmp(argv[i], "--"))
			break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	aahd_config cfg;
	aahd_config_init(&cfg);
	char err[1024];
	int rc = 2;

	/* the option table: the configuration keys (flag = key with dashes), then the program's own */
	const int n_keys = aahd_config_count();
	struct option *opts = calloc((size_t)n_keys + 16, sizeof *opts);
	char (*names)[64] = calloc((size_t)n_keys, sizeof *names);
	if (!opts || !names) {
		fprintf(stderr, "aahd: out of memory\n");
		return 1;
	}
	int k = 0;
	for (int i = 0; i < n_keys; i++) {
		snprintf(names[i], sizeof names[i], "%s", aahd_config_name(i));
		for (char *p = names[i]; *p; p++)
			if (*p == '_')
				*p = '-';
		opts[k++] = (struct option){ names[i], required_argument, 0, O_KEY + i };
	}
	const struct option own[] = {
		{ "config", required_argument, 0, O_CONFIG }, { "prompt", required_argument, 0, O_PROMPT },
		{ "prompt-ids", required_argument, 0, O_IDS }, { "temperature", required_argument, 0, O_TEMP },
		{ "top-k", required_argument, 0, O_TOPK }, { "top-p", required_argument, 0, O_TOPP },
		{ "min-p", required_argument, 0, O_MINP }, { "seed", required_argument, 0, O_SEED },
		{ "quiet", no_argument, 0, O_QUIET }, { "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, O_VERSION }, { "print-config", no_argument, 0, O_PRINT },
	};
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		opts[k++] = own[i];

	const char *conf = config_path(argc, argv);
	if (conf && aahd_config_load(&cfg, conf, err, sizeof err) != 0) {
		fprintf(stderr, "aahd: %s\n", err);
		goto out;
	}

	prompt_cli_args a = { 0 };
	a.n_predict = -1;
	a.sampling.top_p = 1;
	int c;
	long v;
	bool max_tokens_flag = false, print = false;
	while ((c = getopt_long(argc, argv, "c:n:h", opts, NULL)) != -1) {
		if (c >= O_KEY && c < O_KEY + n_keys) {
			const char *key = aahd_config_name(c - O_KEY);
			if (aahd_config_set(&cfg, key, optarg, err, sizeof err) != 0) {
				fprintf(stderr, "aahd: %s\n", err);
				goto out;
			}
			max_tokens_flag |= !strcmp(key, "max_tokens");
			continue;
		}
		switch (c) {
		case 'c':
		case O_CONFIG: break;   /* read first */
		case O_PROMPT: a.prompt_text = optarg; break;
		case O_IDS: a.prompt_ids = optarg; break;
		case 'n':
			if (parse_long("-n", optarg, 0, 1 << 20, &v))
				goto out;
			a.n_predict = (int32_t)v;
			break;
		case O_TEMP: if (parse_float("--temperature", optarg, 0, 100, &a.sampling.temperature)) goto out; break;
		case O_TOPK:
			if (parse_long("--top-k", optarg, 0, 1 << 24, &v))
				goto out;
			a.sampling.top_k = (int32_t)v;
			break;
		case O_TOPP: if (parse_float("--top-p", optarg, 0, 1, &a.sampling.top_p)) goto out; break;
		case O_MINP: if (parse_float("--min-p", optarg, 0, 1, &a.sampling.min_p)) goto out; break;
		case O_SEED:
			if (parse_long("--seed", optarg, 0, LONG_MAX, &v))
				goto out;
			a.sampling.seed = (uint64_t)v;
			break;
		case O_QUIET: a.quiet = 1; break;
		case 'h':
			usage(stdout);
			rc = 0;
			goto out;
		case O_PRINT: print = true; break;
		case O_VERSION:
			printf("aahd 0.1\n");
			rc = 0;
			goto out;
		default:
			fprintf(stderr, "aahd: see aahd --help\n");
			goto out;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "aahd: unexpected argument '%s'\n", argv[optind]);
		goto out;
	}
	if (print) {   /* before the check: the defaults name no model */
		aahd_config_print(&cfg, stdout);
		rc = 0;
		goto out;
	}
	if (a.prompt_text && a.prompt_ids) {
		fprintf(stderr, "aahd: give one of --prompt and --prompt-ids\n");
		goto out;
	}
	if (aahd_config_check(&cfg, err, sizeof err) != 0) {
		fprintf(stderr, "aahd: %s\n", err);
		goto out;
	}
	aahd_config_export_cpu_switches(&cfg);   /* before any engine, and so its CPU backend, is created */
	if (a.prompt_text || a.prompt_ids) {
		a.model_dir = cfg.model;
		if (a.n_predict < 0)
			a.n_predict = max_tokens_flag ? (int32_t)cfg.max_tokens : 16;
		a.engine.n_threads = (int32_t)cfg.threads;
		a.engine.ctx_len = (int32_t)cfg.ctx_len;
		aah_dtype_from_name(cfg.kv_dtype, &a.engine.kv_dtype);   /* the configuration checked the name */
		a.engine.kv_budget_bytes = cfg.kv_budget_bytes;
		a.engine.checkpoint_step = cfg.checkpoint_step;
		a.engine.aah_path = *cfg.aah ? cfg.aah : NULL;
		a.engine.backend = cfg.backend;
		a.regime = *cfg.regime ? cfg.regime : NULL;
		rc = prompt_cli_run(&a);
	} else {
		rc = server_run(&cfg);
	}
out:
	aahd_config_free(&cfg);
	free(opts);
	free(names);
	return rc;
}
