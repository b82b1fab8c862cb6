/* models/model.h — a loaded model on disk: config, and every weight the architecture needs, checked
 * for presence, dtype and shape, pointing into the memory-mapped safetensors. */
#ifndef AAH_MODEL_H
#define AAH_MODEL_H

#include "model_config.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct model_layer_weights {
	const st_tensor *attn_norm;  /* (hidden) input_layernorm */
	const st_tensor *wq;         /* (n_heads * head_dim, hidden) */
	const st_tensor *wk;         /* (n_kv * head_dim, hidden) */
	const st_tensor *wv;         /* (n_kv * head_dim, hidden) */
	const st_tensor *wo;         /* (hidden, n_heads * head_dim) */
	const st_tensor *q_norm;     /* (head_dim), Qwen3 only, else NULL */
	const st_tensor *k_norm;     /* (head_dim), Qwen3 only, else NULL */
	const st_tensor *ffn_norm;   /* (hidden) post_attention_layernorm */
	const st_tensor *w_gate;     /* (intermediate, hidden) */
	const st_tensor *w_up;       /* (intermediate, hidden) */
	const st_tensor *w_down;     /* (hidden, intermediate) */
} model_layer_weights;

typedef struct model_weights {
	const st_tensor *embed;      /* (vocab, hidden) model.embed_tokens.weight */
	model_layer_weights *layers; /* n_layers, owned */
	const st_tensor *norm;       /* (hidden) model.norm.weight */
	const st_tensor *lm_head;    /* (vocab, hidden); == embed when tied */
} model_weights;

typedef struct model_files {
	char *dir;                   /* owned; for a GGUF model the file's directory (aah.json is looked for there) */
	char *gguf_path;             /* owned; the GGUF file, or NULL for safetensors */
	char *chat_template;         /* owned; GGUF tokenizer.chat_template, NULL when absent (and for safetensors) */
	model_config config;
	st_set st;
	model_weights w;
} model_files;

/* Loads dir/config.json and the safetensors — or, when dir is a .gguf file or a directory holding one and no
 * config.json, that GGUF file (models/gguf_model.h) — and binds every tensor the architecture needs.
 * A tensor missing, of the wrong shape or of an unsupported dtype is an error naming the file and tensor.
 * Returns 0, or -1 with the message in err. Free with model_files_free. */
int model_files_load(model_files *m, const char *dir, char *err, size_t err_len);
void model_files_free(model_files *m);

#ifdef __cplusplus
}
#endif
#endif
