/* tools/convert/checkpoint_import.h — turns PyTorch checkpoints (torch.save files, Hugging Face pytorch_model.bin and its
 * shards, training run directories) into the Hugging Face folders aahd loads, with aah.json from the AAH state. */
#ifndef AAH_CHECKPOINT_IMPORT_H
#define AAH_CHECKPOINT_IMPORT_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The RoPE pairing the checkpoint was trained with. aahd computes rotate-half; interleaved q/k rows are permuted. */
typedef enum ckpt_rope {
	CKPT_ROPE_NEOX = 0,          /* dimension i with i + head_dim/2 (rotate-half, NEOX, Hugging Face): as it is */
	CKPT_ROPE_INTERLEAVED,       /* 2i with 2i+1 (Meta's original layout, llm.c's train_llama3.py) */
} ckpt_rope;

typedef struct ckpt_import_opts {
	const char *config_path;     /* a config.json to use; NULL: the one beside the checkpoint, else its "config" */
	const char *tokenizer_dir;   /* where the tokenizer files are; NULL: beside the checkpoint */
	int32_t dtype;               /* -1: every tensor keeps its dtype; else an st_dtype (ST_F32, …) for all */
	int64_t step;                /* ≥ 0: of a run directory, import only checkpoint STEP; -1: all */
	FILE *log;                   /* one line per checkpoint written, and notes; NULL: quiet */
	ckpt_rope rope;              /* CKPT_ROPE_INTERLEAVED: q/k rows and q/k norms permuted per head (tn_plan_build) */
} ckpt_import_opts;

#define CKPT_IMPORT_OPTS_INIT { NULL, NULL, -1, -1, NULL, CKPT_ROPE_NEOX }

/* Imports src into out, which must not exist. src is one of:
 *   a torch.save file (any name)                                   → out is one Hugging Face folder
 *   pytorch_model.bin.index.json, or a folder holding it or pytorch_model.bin  → one folder (shards merged)
 *   a run directory: folders checkpoint-STEP/ holding pytorch_model.bin[.index.json] (Hugging Face Trainer), or
 *     files checkpoint-STEP.pt / step_STEP.pt (.pth too) beside one config.json → out/checkpoint-STEP/ per step
 * Each folder gets config.json, model.safetensors (tensors sorted by name; each keeps its F32/F16/BF16 dtype unless
 * o->dtype says otherwise), the tokenizer files found beside the source, and aah.json (version 1) when the
 * checkpoint carries an AAH state ("aah"), with provenance: step, seed, source file, its sha256, branch usage, and
 * the RoPE pairing the source was read with ("rope": "neox" or "interleaved").
 * The state dict is the top-level dict of tensors, or the one under "model", "state_dict" or "module"; every other
 * key (optimizer, lr_scheduler, train, …) is left unread, storages included. Every output folder is loaded back
 * as aahd loads it (model_files_load, aah_config_load) before anything is renamed into place: out appears whole
 * or not at all (work happens in out.partial-XXXXXX, removed on failure). Returns 0, or -1 with err. */
int ckpt_import(const char *src, const char *out, const ckpt_import_opts *o, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
