/* tools/convert/calib_assign.h — what aah-convert calibrate decides from what it measured: per-head features, the
 * feature-derived grouping of KV heads, windows by coverage (a group alone, or two siblings jointly), and the regimes
 * of the paper's table 3 as an aah_config. Pure functions over arrays — no engine, no files — so tests feed them any
 * measurement. The rules are written out at each function and in docs/calibrate.md. */
#ifndef AAH_CALIB_ASSIGN_H
#define AAH_CALIB_ASSIGN_H

#include <stddef.h>
#include <stdint.h>

#include "models/aah_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CALIB_MAX_LEVELS 8

/* What calibration measured, summed over every measured query row of the calibration chunks (each chunk a full
 * context of T tokens, rows at positions 0 … T−1). Distances d = p − t fall into bands: band b holds
 * band_hi[b−1] ≤ d < band_hi[b] (band_hi[−1] = 0); band_hi is ascending and its last entry is T, so every candidate
 * window below T must be one of the band edges (a window W keeps the bands with band_hi ≤ W). */
typedef struct calib_meas {
	int32_t n_layers, n_kv, q_per_kv;
	int32_t n_bands;
	const int32_t *band_hi;       /* (n_bands) */
	const double *mass;           /* (n_layers, n_kv, n_bands) attention mass, summed over the KV head's query heads */
	const double *entropy;        /* (n_layers, n_kv) entropies in nats, summed the same way; NULL: not measured */
	double uniform_entropy;       /* Σ over one query head's rows of ln(p + 1): its entropy sum under uniform attention */
	int32_t n_chunks;             /* chunk_mass holds each chunk alone (the adaptive regime's capacities); 0: none */
	const double *chunk_mass;     /* (n_chunks, n_layers, n_kv, n_bands) */
} calib_meas;

typedef struct calib_params {
	int32_t context_length;                /* T */
	int32_t windows[AAH_MAX_WINDOWS];      /* candidates, ascending, each ≤ T */
	int32_t n_windows;
	double coverage;                       /* in [0.5, 1] */
	const char *default_regime;            /* NULL: shallow_freeze */
} calib_params;

/* The principal regimes this tool writes (full_attention is built into aahd). */
typedef enum calib_kind {
	CALIB_GROUPING_OFF = 0,
	CALIB_SHALLOW_FREEZE = 1,
	CALIB_FULL_ADAPTIVE = 2,
	CALIB_DEEP_REUSE = 3,
	CALIB_N_KINDS = 4,
} calib_kind;

const char *calib_kind_name(calib_kind k);

/* Share of mass (n_bands) at distances below W: Σ_{band_hi[b] ≤ W} mass[b] / Σ mass (0 when there is no mass). */
double calib_kept(const calib_meas *m, const double *mass, int32_t w);

/* A group alone: the smallest candidate that keeps `coverage` of its mass (within 1e-12), else the largest. */
int32_t calib_window_alone(const calib_meas *m, const calib_params *p, const double *mass);

/* The "wide joint" scorer: the windows of two sibling groups a and b (masses ma, mb; na, nb query heads each), chosen
 * together over the whole grid of candidate pairs (k² pairs, not only each group's own threshold: it may widen one
 * group to narrow the other). It optimises the pair's share of ACR, na·W_a + nb·W_b, subject to
 *   (1) the pair keeps `coverage` of its pooled mass: (kept_a·M_a + kept_b·M_b) / (M_a + M_b) ≥ coverage;
 *   (2) each group alone keeps at least 2·coverage − 1 (0.90 at 0.95): at most twice the pair's miss, so no group is
 *       sacrificed to its sibling;
 * ties going to the larger pooled share kept, then to the smaller W_a. Both groups choosing alone
 * (calib_window_alone) meets (1) and (2) whenever each reaches coverage, so the joint cost is never above theirs;
 * when no pair qualifies, each group gets its own window alone. */
void calib_windows_joint(const calib_meas *m, const calib_params *p, const double *ma, int32_t na, const double *mb,
                         int32_t nb, int32_t *wa, int32_t *wb);

/* Per-KV-head features (n_bands values): f[b] = the share of the head's mass at distances below band_hi[b] for
 * b < n_bands − 1 (its distance distribution, cumulative), and f[n_bands − 1] = its mean attention entropy over that of
 * uniform attention over the visible keys (0: one key; 1: uniform). Entropy 0 when not measured. */
void calib_features(const calib_meas *m, int32_t layer, int32_t kv, double *f);
/* How far a head reaches, from its features: the mean over the distance edges of the share beyond them, in [0, 1]. */
double calib_reach(const calib_meas *m, const double *f);

/* A binary tree of KV heads. Heads are ordered by reach (then index) once at the root; every node holds a contiguous
 * run order[first, first + n) and a split cuts a run in two where the summed squared distance of each side's
 * feature vectors to its mean is least (one head at least on each side; the cut nearer the middle on a tie). Every
 * node of two heads or more splits, level by level, for `levels` levels. */
typedef struct calib_node {
	int32_t first, n;
	int32_t child[2];             /* -1: a leaf */
	int32_t parent;               /* -1: the root */
} calib_node;

typedef struct calib_tree {
	int32_t n_heads;
	int32_t *order;               /* (n_heads) KV head indices */
	calib_node *nodes;            /* (2 n_heads − 1 at most) node 0 is the root */
	int32_t n_nodes;
	int32_t *leaves;              /* (n_heads) node indices of the leaves, left to right */
	int32_t n_leaves;
} calib_tree;

/* feat: (n_heads, n_feat) row h the features of head h; reach: (n_heads). Returns 0, or -1 when out of memory. Free
 * with calib_tree_free. */
int calib_tree_build(calib_tree *t, const double *feat, const double *reach, int32_t n_heads, int32_t n_feat,
                     int32_t levels);
void calib_tree_free(calib_tree *t);
/* The sibling leaf of leaf node i (the other child of its parent when that is a leaf), or -1. */
int32_t calib_tree_sibling_leaf(const calib_tree *t, int32_t node);
/* Writes leaf node i's path from the root ("" root, "0" left, "01" left then right …) into out (≥ CALIB_MAX_LEVELS
 * + 1 bytes). */
void calib_tree_path(const calib_tree *t, int32_t node, char *out);

/* What the assignment decided besides aah.json, per regime, layer and group (for aah-calib.json). */
typedef struct calib_group_info {
	char path[CALIB_MAX_LEVELS + 1];   /* the group's place in its tree ("" for grouping_off) */
	int32_t sibling;                   /* the group scored jointly with it, or -1 */
	int32_t window_alone;              /* what it would get alone */
	double kept;                       /* share of its calibration mass its window keeps */
} calib_group_info;

typedef struct calib_info {
	int32_t n_layers;
	calib_group_info *group[CALIB_N_KINDS];   /* (n_layers, n_kv) [kind][l · n_kv + g] for group g of layer l */
} calib_info;

/* Assigns the four regimes and fills *a (an aah_config that aah_config_to_json writes and aah_config_free frees):
 *  grouping_off   every KV head its own group; window alone; static.
 *  shallow_freeze per layer one feature split [2] of that layer's heads (frozen); joint windows; static.
 *  full_adaptive  per layer a [2,2,2,2] tree of feature splits; joint windows as the start; the adaptive policy
 *                 (control_interval 5, feature_ema 0.9, resolution_ema 0.15, the calibration's coverage); capacity =
 *                 the largest window any single calibration chunk needs alone (at least the start).
 *  deep_reuse     one [2,2,2,2] tree built from layer 0's features ("cached level-0") and reused in every layer;
 *                 each layer's windows from its own mass, jointly; static.
 * Static regimes' capacity equals their window. info (may be NULL) receives the per-group details; free it with
 * calib_info_free. Returns 0, or -1 with a message. */
int calib_assign(aah_config *a, calib_info *info, const calib_meas *m, const calib_params *p, char *err,
                 size_t err_len);
void calib_info_free(calib_info *info);

/* The ACR a regime implies at context T: Σ over layers and groups of the group's query heads · min(W, T), over
 * (layers · query heads · T), with W the window (capacity_based: the capacity, the most an adaptive policy may
 * select). What aahd's counters give for a prompt under a static regime, by docs/architecture.md's accounting. */
double calib_regime_acr(const aah_regime *r, int32_t n_layers, int32_t n_kv, int32_t q_per_kv, int32_t T,
                        int capacity_based);
/* KV bytes a sequence of T positions holds under the regime over what full attention holds: Σ n_kv_g ·
 * min(T, capacity) over n_layers · n_kv · T (docs/architecture.md's bytes, without the page rounding). */
double calib_regime_kv_ratio(const aah_regime *r, int32_t n_layers, int32_t n_kv, int32_t T);

#ifdef __cplusplus
}
#endif
#endif
