/* tools/aah_convert.c — aah-convert: turns models into what aahd serves, one subcommand per job: `import` (PyTorch
 * checkpoints, tools/convert/checkpoint_import.c), `quantize` (GGUF files, tools/convert/quantize.c) and `calibrate`
 * (a pretrained model's regimes from measured attention, tools/convert/calibrate.c). This file is the command line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/convert/checkpoint_import.h"
#include "base/parse_num.h"
#include "models/safetensors.h"
#include "tools/convert/calibrate.h"
#include "tools/convert/quantize.h"

#define CONVERT_EXIT_FAIL 1
#define CONVERT_EXIT_USAGE 2

/* A subcommand: run gets argv with argv[0] = its name; help prints its full usage. Add a row to add one. */
typedef struct convert_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
	void (*help)(FILE *f);
} convert_cmd;

/* ---- import ---- */

static void import_help(FILE *f)
{
	fputs("usage: aah-convert import [options] SRC OUT\n"
	      "\n"
	      "Imports PyTorch checkpoints into the Hugging Face layout aahd loads. OUT must not exist; it appears\n"
	      "complete or not at all (the work happens in OUT.partial-XXXXXX, removed on failure).\n"
	      "\n"
	      "SRC is one of:\n"
	      "  FILE                   a torch.save file (zip format, torch >= 1.6): a state dict, or a dict holding one\n"
	      "                         under 'model', 'state_dict' or 'module' (beside step, seed, config, optimizer,\n"
	      "                         aah, ...: all but the state dict, the AAH state and step/seed are left unread)\n"
	      "  pytorch_model.bin.index.json, or a folder holding it or pytorch_model.bin\n"
	      "                         a Hugging Face PyTorch model (shards are merged into one model.safetensors)\n"
	      "  RUN                    a run directory: checkpoint-STEP/ folders holding pytorch_model.bin (Hugging Face\n"
	      "                         Trainer), or checkpoint-STEP.pt / step_STEP.pt files beside one config.json;\n"
	      "                         OUT becomes a run directory of checkpoint-STEP/ folders (aahd serves the\n"
	      "                         highest step unless --checkpoint-step)\n"
	      "\n"
	      "Each output folder holds config.json, model.safetensors, the tokenizer files found beside the source,\n"
	      "and aah.json (version 1) when the checkpoint has an AAH state, with provenance (step, seed, source file,\n"
	      "its sha256, branch usage, --rope). Tensor names: Hugging Face (model.layers.N.self_attn.q_proj, ...) or\n"
	      "nanoGPT (transformer.h.N.attn.c_attn split into q, k, v; see docs/import.md); anything else is refused by name.\n"
	      "\n"
	      "options:\n"
	      "  --config FILE          the config.json to use (default: beside the checkpoint, else in SRC, else the\n"
	      "                         checkpoint's own 'config' dict)\n"
	      "  --tokenizer DIR        copy the tokenizer files from DIR (default: beside the checkpoint, else SRC)\n"
	      "  --dtype keep|f32|bf16|f16\n"
	      "                         the tensors' type in model.safetensors (default keep: F32, F16 and BF16 stay\n"
	      "                         as they are; bf16/f16 round to nearest even; f32 widens exactly)\n"
	      "  --rope neox|interleaved\n"
	      "                         the RoPE pairing the checkpoint was trained with (default neox: dimension i\n"
	      "                         with i + head_dim/2, rotate-half, Hugging Face, what aahd computes);\n"
	      "                         interleaved: 2i with 2i+1 (Meta's original layout, llm.c's train_llama3.py):\n"
	      "                         the rows of q_proj and k_proj and the q_norm/k_norm weights are permuted\n"
	      "                         within every head into rotate-half order (Hugging Face's permute)\n"
	      "  --step N               of a run directory, import only checkpoint N\n"
	      "  -q, --quiet            print nothing but errors\n"
	      "  -h, --help             this text\n"
	      "\n"
	      "exit status: 0 imported, 1 refused or failed (the message says why), 2 bad usage\n",
	      f);
}

static int parse_dtype(const char *s, int32_t *out)
{
	if (!strcmp(s, "keep")) *out = -1;
	else if (!strcmp(s, "f32")) *out = ST_F32;
	else if (!strcmp(s, "bf16")) *out = ST_BF16;
	else if (!strcmp(s, "f16")) *out = ST_F16;
	else return -1;
	return 0;
}

static int import_run(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "config", required_argument, NULL, 'c' }, { "tokenizer", required_argument, NULL, 't' },
		{ "dtype", required_argument, NULL, 'd' },  { "step", required_argument, NULL, 's' },
		{ "rope", required_argument, NULL, 'r' },   { "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	ckpt_import_opts o = CKPT_IMPORT_OPTS_INIT;
	o.log = stdout;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":qh", longs, NULL)) != -1) {
		switch (c) {
		case 'c': o.config_path = optarg; break;
		case 't': o.tokenizer_dir = optarg; break;
		case 'd':
			if (parse_dtype(optarg, &o.dtype)) {
				fprintf(stderr, "aah-convert import: --dtype must be keep, f32, bf16 or f16, not '%s'\n", optarg);
				return CONVERT_EXIT_USAGE;
			}
			break;
		case 'r':
			if (!strcmp(optarg, "neox"))
				o.rope = CKPT_ROPE_NEOX;
			else if (!strcmp(optarg, "interleaved"))
				o.rope = CKPT_ROPE_INTERLEAVED;
			else {
				fprintf(stderr, "aah-convert import: --rope must be neox (rotate-half pairs i, i + head_dim/2: "
				        "the default) or interleaved (pairs 2i, 2i+1), not '%s'\n", optarg);
				return CONVERT_EXIT_USAGE;
			}
			break;
		case 's':
			if (!aah_parse_i64(optarg, 0, INT64_MAX, &o.step)) {
				fprintf(stderr, "aah-convert import: --step must be a step number, not '%s'\n", optarg);
				return CONVERT_EXIT_USAGE;
			}
			break;
		case 'q': o.log = NULL; break;
		case 'h': import_help(stdout); return 0;
		case ':':
			fprintf(stderr, "aah-convert import: %s needs a value\n", argv[optind - 1]);
			return CONVERT_EXIT_USAGE;
		default:
			fprintf(stderr, "aah-convert import: unknown option '%s' (see aah-convert import --help)\n",
			        argv[optind - 1]);
			return CONVERT_EXIT_USAGE;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: aah-convert import [options] SRC OUT   (aah-convert import --help)\n");
		return CONVERT_EXIT_USAGE;
	}
	char err[2048];
	if (ckpt_import(argv[optind], argv[optind + 1], &o, err, sizeof err)) {
		fprintf(stderr, "aah-convert import: %s\n", err);
		return CONVERT_EXIT_FAIL;
	}
	return 0;
}

/* ---- dispatch ---- */

static const convert_cmd cmds[] = {
	{ "import", "PyTorch checkpoints (torch.save files, pytorch_model.bin, run directories) -> Hugging Face folders",
	  import_run, import_help },
	{ "calibrate", "a pretrained model -> aah.json with the regimes of table 3, from attention measured on text",
	  calibrate_main, calibrate_help },
	{ "quantize", "a Hugging Face model or run directory -> one GGUF file (q8_0, q4_0, q4_k_m, q5_k_m, bf16, f16)",
	  quantize_main, quantize_help },
};
#define N_CMDS (sizeof cmds / sizeof cmds[0])

static const convert_cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < N_CMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

static void main_help(FILE *f)
{
	fputs("usage: aah-convert COMMAND [options] ...\n"
	      "       aah-convert COMMAND --help   (or aah-convert help COMMAND)\n\ncommands:\n", f);
	for (size_t i = 0; i < N_CMDS; i++)
		fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		main_help(stderr);
		return CONVERT_EXIT_USAGE;
	}
	const char *a = argv[1];
	if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
		main_help(stdout);
		return 0;
	}
	if (!strcmp(a, "help")) {
		if (argc == 2) {
			main_help(stdout);
			return 0;
		}
		const convert_cmd *c = find_cmd(argv[2]);
		if (c) {
			c->help(stdout);
			return 0;
		}
		a = argv[2];
	} else {
		const convert_cmd *c = find_cmd(a);
		if (c)
			return c->run(argc - 1, argv + 1);
	}
	fprintf(stderr, "aah-convert: unknown command '%s'; commands:", a);
	for (size_t i = 0; i < N_CMDS; i++)
		fprintf(stderr, " %s", cmds[i].name);
	fprintf(stderr, " (aah-convert --help)\n");
	return CONVERT_EXIT_USAGE;
}
