/* models/weights.h — a model's weights placed in a backend: each tensor of model_files imported through the backend's
 * weight_import (packed for the CPU, copied to a device), in its own type or quantized as it loads (weight_quant.h),
 * with Q, K and V (and gate and up) fused into one matrix where the backend asks and the layout allows. A matrix's
 * mapped file pages are dropped once the backend holds its copy. */
#ifndef AAH_MODELS_WEIGHTS_H
#define AAH_MODELS_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "models/model.h"
#include "models/weight_quant.h"

typedef struct model_layer_tensors {
	aah_tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
	/* Fused projections (model_import_params.fuse): wqkv = [wq; wk; wv] (qd + 2·kvd, hidden) and
	 * w_gate_up = [w_gate; w_up] (2·intermediate, hidden), imported instead of their parts, whose tensors stay empty.
	 * The concatenated host copy is freed once imported: every backend copies a matrix (the CPU packs it). */
	aah_tensor wqkv, w_gate_up;
} model_layer_tensors;

typedef struct model_tensors {
	aah_tensor embed, norm, lm_head;  /* lm_head is embed (the same data) when the model ties them */
	model_layer_tensors *layers;      /* n_layers */
	int32_t n_layers;
} model_tensors;

typedef struct model_import_params {
	const weight_mix *mix;            /* load-time quantization, or NULL: every tensor in its own type */
	int32_t n_threads;                /* for quantizing; ≤ 0: the processors online */
	bool fuse;                        /* fuse Q/K/V and gate/up where they share a type and in_features */
} model_import_params;

/* Imports mf's weights into be. Returns 0, or -1 with err naming the tensor (t is then partly filled: release it). */
int model_tensors_import(model_tensors *t, const model_files *mf, aah_backend *be, const model_import_params *p,
                         char *err, size_t err_len);
/* Releases every imported tensor (a tied head once) and the layer table; t is zeroed. */
void model_tensors_release(model_tensors *t, aah_backend *be);
/* Whether any layer holds a fused projection. */
bool model_tensors_fused(const model_tensors *t);
/* Bytes of weights read per token: every matrix but the embedding (one row of it is gathered). */
int64_t model_tensors_bytes_per_token(const model_tensors *t);

#endif
