/* tools/convert/tensor_names.h — maps the tensor names of a PyTorch state dict (Hugging Face layout, or nanoGPT style) onto
 * the Hugging Face names aahd loads, checked against the model's config: shapes, a fused c_attn split, tied heads. */
#ifndef AAH_TENSOR_NAMES_H
#define AAH_TENSOR_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/model_config.h"
#include "tools/convert/torch_checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of the output: rows [row0, row0 + rows) of source tensor src's first dimension (all of it unless the
 * source is a fused q/k/v matrix), in row-major order — in their own order, or, when perm_block > 0, permuted
 * within every block of perm_block rows (one head) as tn_output_src_row says. */
typedef struct tn_output {
	char name[128];              /* Hugging Face name, e.g. model.layers.0.self_attn.q_proj.weight */
	int32_t src;                 /* index into the sources */
	int64_t row0, rows;
	int32_t n_dims;
	int64_t shape[2];
	int32_t perm_block;          /* 0: rows in order; else head_dim: interleaved RoPE rows to rotate-half order */
} tn_output;

typedef struct tn_plan {
	tn_output *out;              /* owned, sorted by name */
	int32_t n_out;
	bool tied;                   /* the output has no lm_head.weight: the head is the embedding */
	const char *style;           /* "hugging face" or "nanogpt" */
	int32_t n_dropped;           /* buffers recognised and left out (rotary inv_freq, nanoGPT's causal mask) */
} tn_plan;

/* Builds the plan for n source tensors (names[i], bound tensors[i]) of a model of config c.
 * Names: a common "module." or "_orig_mod." prefix (DDP, torch.compile) is stripped first. Then either all
 * Hugging Face names (model.embed_tokens, model.layers.N.self_attn.q_proj, …, lm_head) or all nanoGPT names:
 *   transformer.wte → model.embed_tokens          transformer.ln_f → model.norm
 *   transformer.h.N.ln_1 → input_layernorm        transformer.h.N.ln_2 → post_attention_layernorm
 *   attn.c_attn → q_proj, k_proj, v_proj (rows: n_heads·head_dim, then n_kv·head_dim twice)
 *   attn.c_proj → o_proj                          attn.q_norm, attn.k_norm → q_norm, k_norm (Qwen3)
 *   mlp.c_fc + mlp.c_fc2 → up_proj + gate_proj (llm.c's Llama 3)   mlp.c_fc1 + mlp.c_fc2 → gate_proj + up_proj
 *   mlp.c_proj → down_proj                        lm_head → lm_head
 * Left out (n_dropped): *.rotary_emb.inv_freq and nanoGPT's 4-D attn.bias (a causal-mask buffer). Refused with the
 * names: anything else (listing them), biases, GPT-2's learned positions (transformer.wpe) and ungated MLP, both
 * styles mixed, a name twice, a dtype that is not F32/F16/BF16 (F64 only when allow_f64), a shape other than the
 * config's, a tensor the config needs that is missing. The head: lm_head absent → tied (the config must say
 * tie_word_embeddings); lm_head the same view of the same storage as the embedding, or equal to it element for
 * element while the config ties them → tied, written once; otherwise written as its own tensor (and a config that
 * ties them is refused). RoPE: aahd rotates dimension i of a head with i + head_dim/2 (rotate-half: NEOX, Hugging
 * Face). rope_interleaved says the checkpoint was trained rotating 2i with 2i+1 (Meta's original layout, llm.c):
 * then the rows of q_proj and k_proj (after a c_attn split too) and the q_norm/k_norm weights (Qwen3) are permuted
 * within every head into rotate-half order (perm_block = head_dim), which computes the same function; an odd
 * head_dim is refused. Returns 0, or -1 with err. Free with tn_plan_free. */
int tn_plan_build(tn_plan *p, const char *const *names, const tc_tensor *tensors, int32_t n, const model_config *c,
                  bool allow_f64, bool rope_interleaved, char *err, size_t err_len);
void tn_plan_free(tn_plan *p);

/* The source row (counted from o->row0) of output row r of o. With perm_block = d (head_dim), row j of each head
 * comes from row 2j (j < d/2) or 2(j − d/2) + 1 (j ≥ d/2) of the same head: the pair (2i, 2i+1) that interleaved
 * RoPE rotates together lands on (i, i + d/2), the pair rotate-half rotates, at the same frequency. It is Hugging
 * Face's permute (convert_llama_weights_to_hf.py): w.view(n_heads, d/2, 2, in).transpose(1, 2).reshape(-1, in).
 * q·k is unchanged because q and k are permuted alike; RMSNorm over a head is, once its weight is permuted too. */
int64_t tn_output_src_row(const tn_output *o, int64_t r);

#ifdef __cplusplus
}
#endif
#endif
