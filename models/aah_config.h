/* models/aah_config.h — aah.json (version 1, docs/architecture.md): the candidate windows, and for each regime its
 * policy and, per layer, the groups of KV heads with their window and capacity. Validated against the model's shape. */
#ifndef AAH_AAH_CONFIG_H
#define AAH_AAH_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AAH_MAX_WINDOWS 8
#define AAH_FULL_ATTENTION "full_attention"

typedef enum aah_policy_kind { AAH_POLICY_STATIC = 0, AAH_POLICY_ADAPTIVE = 1 } aah_policy_kind;

typedef struct aah_policy {
	aah_policy_kind kind;
	int32_t control_interval;    /* decode steps between re-selections (adaptive) */
	float feature_ema;           /* weight of the old feature value */
	float resolution_ema;        /* weight of the new resolution target */
	float coverage;              /* share of the attention mass the target window must hold (ours; default 0.95) */
} aah_policy;

typedef struct aah_group {
	int32_t *kv_heads;           /* owned; the KV heads of this group (query heads follow them under GQA) */
	int32_t n_kv_heads;
	int32_t window;              /* the file's window: the static selection, the adaptive start */
	int32_t capacity;            /* the most the policy may select; sizes the cache */
} aah_group;

typedef struct aah_layer {
	aah_group *groups;           /* owned */
	int32_t n_groups;
} aah_layer;

typedef struct aah_regime {
	char *name;                  /* owned */
	aah_policy policy;
	char grouping[32], scorer[32];   /* descriptive (table 3): recorded, not interpreted */
	int32_t hierarchy[8], n_hierarchy;
	aah_layer *layers;           /* owned, n_layers of the model */
} aah_regime;

typedef struct aah_config {
	int32_t context_length;      /* T of ACR = Σ_W f_W·W / T */
	int32_t windows[AAH_MAX_WINDOWS];   /* candidate windows, ascending */
	int32_t n_windows;
	aah_regime *regimes;         /* owned */
	int32_t n_regimes;
	char *default_regime;        /* owned */
	int64_t provenance_step;     /* -1 when absent */
	int32_t n_layers;            /* the model's, for freeing */
} aah_config;

/* Parses aah.json text for a model of shape mc. Every error names the regime, layer and group and what is wrong:
 * unknown default regime, a window not among the candidates, a KV head in two groups or in none, capacity below
 * window or above context_length, a head index beyond the model's, a layer count that differs from the model's.
 * A regime named full_attention in the file is refused (it is built in). Returns 0, or -1 with err. Free with
 * aah_config_free (also safe after a failed parse). */
int aah_config_parse(aah_config *a, const char *json, size_t len, const model_config *mc, char *err, size_t err_len);
/* Reads dir/aah.json. Returns 1 when the file does not exist (the model runs as full attention), 0 when loaded,
 * -1 on error. */
int aah_config_load(aah_config *a, const char *dir, const model_config *mc, char *err, size_t err_len);
/* The same for an aah.json at any path (1 with a message in err when it does not exist). */
int aah_config_load_file(aah_config *a, const char *path, const model_config *mc, char *err, size_t err_len);
void aah_config_free(aah_config *a);

/* The regime named name, or NULL. */
const aah_regime *aah_config_regime(const aah_config *a, const char *name);

/* Resolves a model path: a model directory (config.json present) is itself; a run directory holding
 * checkpoint-STEP/ folders gives checkpoint-<step> when step ≥ 0, else the highest step (the paper's table 2 rule).
 * Writes the path into out. Returns 0, or -1 with a message. */
int aah_resolve_model_dir(const char *dir, int64_t step, char *out, size_t out_len, char *err, size_t err_len);
/* The step of a file or folder name "PREFIXdigits[SUFFIX]" (one of the n_suffixes suffixes, or none when n_suffixes
 * is 0): digits without sign or leading zeros (unless "0"), at most 2^53; -1 for any other name. The one rule by which
 * aahd and aah-convert import read checkpoint names, so that both see the same steps. */
int64_t aah_parse_step(const char *name, const char *prefix, const char *const *suffixes, int n_suffixes);

#ifdef __cplusplus
}
#endif
#endif
