/* models/weight_quant.h — quantizing a model's float weights as they are loaded (engine_params.quantize): the same
 * blocks `llama-quantize` writes without an importance matrix (aah_quantize_row_ref), in llama.cpp's per-tensor mixes,
 * so a safetensors model or run directory can be served and benchmarked in a GGUF type without writing a file. */
#ifndef AAH_WEIGHT_QUANT_H
#define AAH_WEIGHT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* What a weight matrix is, for the mix rules. */
typedef enum weight_role {
	WEIGHT_EMBED,        /* token embedding, untied */
	WEIGHT_OUTPUT,       /* the output head, or the embedding when it is tied (it is then both) */
	WEIGHT_ATTN_Q,
	WEIGHT_ATTN_K,
	WEIGHT_ATTN_V,
	WEIGHT_ATTN_O,
	WEIGHT_FFN_GATE,
	WEIGHT_FFN_UP,
	WEIGHT_FFN_DOWN,
} weight_role;

/* A mix: the base type of every matrix and, for the _M mixes and the low-bit types, the upgrades. */
typedef struct weight_mix {
	aah_dtype base;
	int32_t medium;      /* 1: llama.cpp's _M rules (attn_v and ffn_down of some layers in Q6_K) */
	int32_t head_q6_k;   /* 1: the output head (or the tied embedding) in Q6_K, as llama.cpp does below Q8_0 */
} weight_mix;

/* Parses "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q4_k", "q5_k" or "q6_k". Returns 0, or -1 for any other name. */
int weight_mix_parse(const char *name, weight_mix *out);

/* The type mix gives the matrix (role, layer of n_layers, cols in_features): the base type, upgraded as llama.cpp's
 * llama_tensor_get_type upgrades it, or Q8_0 when cols is not whole blocks of the chosen type (and the weight's own
 * type, `own`, when it is not whole blocks of 32 either). */
aah_dtype weight_mix_type(const weight_mix *mix, weight_role role, int32_t layer, int32_t n_layers, int64_t cols,
                          aah_dtype own);

/* dst (rows × aah_dtype_row_bytes(t, cols) bytes) = the rows of src (rows × cols of float type st) quantized to the
 * block type t, the rows split over n_threads threads (each row's blocks depend on that row alone). Returns 0, or -1
 * when threads cannot be started (dst is then incomplete). */
int weight_quantize_rows(void *dst, aah_dtype t, const void *src, aah_dtype st, int64_t rows, int64_t cols,
                         int32_t n_threads);

#endif
