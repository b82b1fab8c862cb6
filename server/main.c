/* server/main.c — the aahd program: parses the command line and runs a prompt from it.
 * (The HTTP daemon of DESIGN.md is built on this entry point by its own issue.) */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/prompt_cli.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: aahd --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
	        "\n"
	        "  --model DIR          model directory (Hugging Face layout: config.json, *.safetensors, tokenizer.json)\n"
	        "  --prompt TEXT        prompt text (tokenised with the model's tokenizer)\n"
	        "  --prompt-ids LIST    prompt as comma-separated token ids\n"
	        "  -n, --max-tokens N   tokens to generate (default 16)\n"
	        "  --temperature X      0 = greedy (default 0)\n"
	        "  --top-k N            0 = off (default 0)\n"
	        "  --top-p X            1 = off (default 1)\n"
	        "  --min-p X            0 = off (default 0)\n"
	        "  --seed N             sampling seed (default 0)\n"
	        "  --threads N          CPU threads, 0 = all cores (default 0)\n"
	        "  --ctx-len N          context length, 0 = min(model's, 4096) (default 0)\n"
	        "  --kv-dtype T         KV cache element type: f32, f16, bf16 (default f32)\n"
	        "  --regime NAME        AAH regime (default: aah.json's default_regime, else full_attention)\n"
	        "  --checkpoint-step N  in a run directory, load checkpoint-N (default: the highest)\n"
	        "  --quiet              print only the generated ids\n"
	        "  -h, --help           this text\n");
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

int main(int argc, char **argv)
{
	prompt_cli_args a = { 0 };
	a.n_predict = 16;
	a.sampling.top_p = 1;
	a.engine.kv_dtype = AAH_DTYPE_F32;
	enum { O_MODEL = 256, O_PROMPT, O_IDS, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_SEED, O_THREADS, O_CTX, O_KVT, O_QUIET, O_REGIME, O_STEP };
	static const struct option opts[] = {
		{ "model", required_argument, 0, O_MODEL }, { "prompt", required_argument, 0, O_PROMPT },
		{ "prompt-ids", required_argument, 0, O_IDS }, { "max-tokens", required_argument, 0, 'n' },
		{ "temperature", required_argument, 0, O_TEMP }, { "top-k", required_argument, 0, O_TOPK },
		{ "top-p", required_argument, 0, O_TOPP }, { "min-p", required_argument, 0, O_MINP },
		{ "seed", required_argument, 0, O_SEED }, { "threads", required_argument, 0, O_THREADS },
		{ "ctx-len", required_argument, 0, O_CTX }, { "kv-dtype", required_argument, 0, O_KVT },
		{ "quiet", no_argument, 0, O_QUIET }, { "regime", required_argument, 0, O_REGIME },
		{ "checkpoint-step", required_argument, 0, O_STEP }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;
	long v;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case O_MODEL: a.model_dir = optarg; break;
		case O_PROMPT: a.prompt_text = optarg; break;
		case O_IDS: a.prompt_ids = optarg; break;
		case 'n':
			if (parse_long("--max-tokens", optarg, 0, 1 << 20, &v)) return 2;
			a.n_predict = (int32_t)v;
			break;
		case O_TEMP: if (parse_float("--temperature", optarg, 0, 100, &a.sampling.temperature)) return 2; break;
		case O_TOPK:
			if (parse_long("--top-k", optarg, 0, 1 << 24, &v)) return 2;
			a.sampling.top_k = (int32_t)v;
			break;
		case O_TOPP: if (parse_float("--top-p", optarg, 0, 1, &a.sampling.top_p)) return 2; break;
		case O_MINP: if (parse_float("--min-p", optarg, 0, 1, &a.sampling.min_p)) return 2; break;
		case O_SEED:
			if (parse_long("--seed", optarg, 0, LONG_MAX, &v)) return 2;
			a.sampling.seed = (uint64_t)v;
			break;
		case O_THREADS:
			if (parse_long("--threads", optarg, 0, 256, &v)) return 2;
			a.engine.n_threads = (int32_t)v;
			break;
		case O_CTX:
			if (parse_long("--ctx-len", optarg, 0, 1 << 24, &v)) return 2;
			a.engine.ctx_len = (int32_t)v;
			break;
		case O_KVT:
			if (!strcmp(optarg, "f32")) a.engine.kv_dtype = AAH_DTYPE_F32;
			else if (!strcmp(optarg, "f16")) a.engine.kv_dtype = AAH_DTYPE_F16;
			else if (!strcmp(optarg, "bf16")) a.engine.kv_dtype = AAH_DTYPE_BF16;
			else {
				fprintf(stderr, "aahd: --kv-dtype: '%s' is not f32, f16 or bf16\n", optarg);
				return 2;
			}
			break;
		case O_QUIET: a.quiet = 1; break;
		case O_REGIME: a.regime = optarg; break;
		case O_STEP:
			if (parse_long("--checkpoint-step", optarg, 0, LONG_MAX, &v)) return 2;
			a.engine.checkpoint_step = v;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "aahd: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!a.model_dir || (!a.prompt_text == !a.prompt_ids)) {
		fprintf(stderr, "aahd: give --model DIR and one of --prompt or --prompt-ids (the HTTP server is not built yet)\n");
		usage(stderr);
		return 2;
	}
	return prompt_cli_run(&a);
}
