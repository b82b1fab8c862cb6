/* models/gguf_model.h — a GGUF file as a model_files: its metadata as the model_config, its tensors under the Hugging
 * Face names the engine binds (llama.cpp's token_embd, blk.N.attn_q, … renamed), its blocks used in place. */
#ifndef AAH_GGUF_MODEL_H
#define AAH_GGUF_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "models/gguf.h"
#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether path names a GGUF model: a regular file ending in ".gguf", or a directory with no config.json holding
 * exactly one ".gguf" file. Returns 1 with that file's path in out, 0 when it is not a GGUF model (out untouched),
 * -1 with a message in err when a directory holds several (which one is meant is not ours to guess). */
int gguf_model_path(const char *path, char *out, size_t out_len, char *err, size_t err_len);

/* Maps the GGUF file and fills m->config, m->st (one file, tensors renamed and sorted), m->chat_template and m->dir
 * (the file's directory: aah.json is looked for beside the file). Architectures qwen3 and llama; llama's attn_q and
 * attn_k rows, which llama.cpp's converter interleaves for its RoPE, are put back into rotate-half order in a copy
 * the set owns (every other tensor stays in the mapping). Returns 0, or -1 with a message naming the file and the
 * key or tensor. The caller (model_files_load) binds the weights and frees with model_files_free. */
int gguf_model_open(model_files *m, const char *file, char *err, size_t err_len);

/* c from the metadata of the parsed GGUF g (file names it in messages), as gguf_model_open reads it: llama.cpp's
 * architecture, shape, norm and RoPE keys (YaRN's included) as a config.json, checked by model_config_parse. Returns
 * 0, or -1 with a message naming the file and the key. */
int gguf_model_config(model_config *c, const gguf_file *g, const char *file, char *err, size_t err_len);

/* The llama.cpp name of a Hugging Face tensor name (for messages about a GGUF file), written into out and returned;
 * the name itself when it has none. */
const char *gguf_model_tensor_name(const char *hf, char *out, size_t out_len);

/* The Split regex of llama.cpp's pre-tokenizer name ("qwen2", "llama-bpe"), the pattern those tokenizers'
 * tokenizer.json carry, and whether an NFC normalizer comes before it; NULL for another name. (models/tokenizer_gguf.c) */
const char *gguf_pre_pattern(const char *pre, bool *nfc);

#ifdef __cplusplus
}
#endif
#endif
