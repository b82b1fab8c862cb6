/* engine/aah_policy.h — the AAH regimes an engine offers (full_attention plus aah.json's), each sequence's window
 * selection under its regime's policy, and the branch-usage counters that ACR is computed from.
 *
 * The adaptive controller, as this server reads the paper (table 2: control every 5 steps, feature EMA 0.9,
 * resolution EMA 0.15) — the paper gives the constants, not the rule, so this rule is ours:
 *  - A *probe* runs on the first decode step and then every control_interval-th: each group attends over its whole
 *    capacity, and the backend reports the attention mass by key distance, in bands cut at the candidate windows
 *    (distance < 512, < 1024, …), summed over the group's query heads.
 *  - Feature: per group, the band masses normalised to 1, smoothed as f ← ema·f + (1 − ema)·new (feature_ema 0.9;
 *    the first probe sets f directly).
 *  - Target: the smallest candidate window W ≤ capacity whose cumulative mass Σ_{bands within W} f ≥ coverage
 *    (aah.json's policy "coverage", 0.95 when absent).
 *  - Resolution: r ← r + resolution_ema·(log2 W_target − r) (resolution_ema 0.15), starting at log2 of the file's
 *    window; the selected window is the smallest candidate ≥ 2^r (within 1e-4, so an EMA that has all but
 *    converged selects its target), never above capacity.
 *  - Between probes the selection holds. Prefill always uses the current selection (the file's at first). */
#ifndef AAH_AAH_POLICY_H
#define AAH_AAH_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "models/aah_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AAH_MAX_USAGE (AAH_MAX_WINDOWS + 1)   /* candidates, plus full attention's whole context */

typedef struct aah_regime_rt {
	const char *name;
	bool full;                   /* full attention: ACR 1 by definition */
	aah_policy policy;
	float coverage;
	int32_t n_groups;            /* over all layers */
	int32_t *group_layer;        /* (n_groups) */
	int32_t *group_heads;        /* (n_groups) KV heads in the group */
	int32_t *group_window0;      /* (n_groups) the file's window */
	int32_t *group_capacity;     /* (n_groups) */
	int32_t *head_group;         /* (n_layers, n_kv) → group index */
	int32_t *head_capacity;      /* (n_layers, n_kv) */
} aah_regime_rt;

typedef struct aah_regimes {
	aah_regime_rt *r;
	int32_t n;
	int32_t default_index;
	int32_t n_layers, n_kv, q_per_kv;
	int32_t context_length;      /* T */
	int32_t windows[AAH_MAX_WINDOWS], n_windows;   /* candidates (empty without aah.json) */
	int32_t max_groups;
} aah_regimes;

/* Builds the regimes from a (may be NULL: full attention only). ctx_len is the engine's context: full attention's
 * window and capacity. Returns 0, or -1 when out of memory. Free with aah_regimes_free. */
int aah_regimes_init(aah_regimes *rs, const aah_config *a, int32_t n_layers, int32_t n_kv, int32_t q_per_kv,
                     int32_t ctx_len);
void aah_regimes_free(aah_regimes *rs);
int32_t aah_regimes_find(const aah_regimes *rs, const char *name);   /* -1 when absent */

/* One sequence's selection state and usage counters. */
typedef struct aah_seq_state {
	int32_t regime;
	int64_t decode_steps;
	float *feature;              /* (max_groups, n_windows) smoothed band masses */
	double *resolution;          /* (max_groups) log2 window */
	bool *have_feature;          /* (max_groups) */
	int32_t *group_window;       /* (max_groups) current selection */
	int32_t *head_window;        /* (n_layers, n_kv) current selection, as the attention op reads it */
	int32_t usage_window[AAH_MAX_USAGE];
	double usage[AAH_MAX_USAGE]; /* query-head selections per window */
	int32_t n_usage;
} aah_seq_state;

/* Allocates state for max_groups; returns 0 or -1. */
int aah_seq_state_init(aah_seq_state *s, const aah_regimes *rs);
void aah_seq_state_free(aah_seq_state *s);
/* Starts a sequence under regime index r. */
void aah_seq_state_reset(aah_seq_state *s, const aah_regimes *rs, int32_t r);
/* dst = src (both made by aah_seq_state_init for rs): a forked sequence goes on selecting as its source would. */
void aah_seq_state_copy(aah_seq_state *dst, const aah_seq_state *src, const aah_regimes *rs);

/* True when the next decode step of this sequence should be a probe. */
bool aah_seq_probe_due(const aah_seq_state *s, const aah_regimes *rs);
/* Decode steps before the next probe (aah_seq_probe_due's rule): 0 when the next step is one; INT32_MAX when the
 * regime never probes (not adaptive, or no candidate windows). */
int32_t aah_seq_steps_to_probe(const aah_seq_state *s, const aah_regimes *rs);
/* Records n query tokens attended with the windows in head_window (or, probe, with every group's capacity). */
void aah_seq_count(aah_seq_state *s, const aah_regimes *rs, int64_t n_tokens, bool probe);
/* Takes back what aah_seq_count(s, rs, n_tokens, false) added with the windows in head_window now (the caller knows
 * they have not moved since), and the usage entries from index n_usage0 on that are then back at 0: those the taken
 * back tokens created, so that the counters are as if they had never been counted. */
void aah_seq_uncount(aah_seq_state *s, const aah_regimes *rs, int64_t n_tokens, int32_t n_usage0);
/* After a probe: band_mass is (n_layers, n_kv, n_windows) as the backend reported it; updates the features and
 * re-selects every group's window. */
void aah_seq_control(aah_seq_state *s, const aah_regimes *rs, const float *band_mass);
/* The windows a sequence of regime ri may add usage to, ascending, at most max of them; returns the count. Full
 * attention: T alone; a static regime: its groups' windows; an adaptive one also every candidate up to each group's
 * capacity, and the capacities (a probe counts there; a selection is clamped to it). /metrics shows these series
 * from the start, at 0, so that a rate() over them never misses a window's first increase. */
int32_t aah_regime_usage_windows(const aah_regimes *rs, int32_t ri, int32_t *out, int32_t max);
/* Inference ACR of this sequence: Σ_W f_W·W / T (1 for full attention). */
double aah_seq_acr(const aah_seq_state *s, const aah_regimes *rs);

#ifdef __cplusplus
}
#endif
#endif
