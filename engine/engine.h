/* engine/engine.h — the model forward pass over a batch of sequences, with a paged KV cache, on one backend.
 * One thread owns an engine (the engine thread: docs/architecture.md); nothing here is thread-safe. */
#ifndef AAH_ENGINE_H
#define AAH_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "models/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct engine_params {
	int32_t n_threads;          /* CPU threads; 0 = online cores */
	int32_t max_seqs;           /* sequences open at once; 0 = 8 */
	int32_t ctx_len;            /* positions per sequence; 0 = min(max_position_embeddings, 4096) */
	int32_t max_batch_tokens;   /* tokens per forward chunk (scratch rows); 0 = 512 */
	aah_dtype kv_dtype;         /* KV element type; the CPU reference uses f32 */
	int64_t kv_budget_bytes;    /* page pool size; 0 = room for max_seqs full contexts */
	int64_t checkpoint_step;    /* in a run directory: load checkpoint-<step>; 0 = the highest */
	const char *backend;        /* "cpu" (also NULL), "cuda", or "auto": CUDA when a device is present, else the CPU */
	int32_t fuse_projections;   /* one product for q, k, v and one for gate, up (weights concatenated at load): 1 on,
	                             * -1 off, 0 the backend's choice (CUDA on, CPU off) unless the environment says
	                             * AAH_FUSE=1 or AAH_FUSE=0 (the tests run the CPU fused that way) */
	const char *aah_path;       /* the regimes: NULL = the model directory's aah.json (full attention alone when there is
	                             * none); "" = none, full attention alone whatever the directory holds; else this file,
	                             * which must exist (aah-convert calibrate measures with "" and checks its new file) */
	int32_t prefix_cache;       /* 1: keep prompts' KV pages for engine_prefix_restore (docs/prefix_cache.md); 0: off */
	int64_t prefix_cache_bytes; /* the most the prefix cache holds; 0 = the whole page pool (it always yields to
	                             * sequences: an idle cached page is evicted before anything waits for one) */
	const char *quantize;       /* NULL or "": the weights in the types the files hold; else a weight type ("q8_0",
	                             * "q4_0", "q4_k_m", "q5_k_m", "q4_k", "q5_k", "q6_k"): every float matrix quantized as
	                             * it is loaded, in llama.cpp's mix for that type (models/weight_quant.h) */
	int32_t rollback;           /* positions engine_seq_truncate may take back, 0 … ENGINE_MAX_ROLLBACK (speculative
	                             * decoding's verify passes); 0: none. It costs no memory: a ring keeps what a window
	                             * needs however the positions come and go (engine.c says why) */
} engine_params;

#define ENGINE_MAX_ROLLBACK 16

typedef struct engine engine;

/* Loads the model in dir and prepares the backend. Returns 0 and *out, or -1 with a message in err.
 * Free with engine_free. */
int engine_init(engine **out, const char *model_dir, const engine_params *p, char *err, size_t err_len);
void engine_free(engine *e);

/* Any thread. */
const model_config *engine_config(const engine *e);
/* The chat template the model file carries (a GGUF's tokenizer.chat_template), or NULL; owned by the engine. */
const char *engine_chat_template(const engine *e);
int32_t engine_ctx_len(const engine *e);
/* Any thread: the KV page pool, in pages, and one page's bytes. */
int64_t engine_kv_pool_pages(const engine *e);
int64_t engine_kv_page_bytes(const engine *e);
/* Engine thread: pages of the pool taken now (by sequences or the prefix cache). */
int64_t engine_kv_pages_used(const engine *e);
/* Engine thread: pages the open sequences hold now (a page they share counted once; the prefix cache's own not). */
int64_t engine_kv_pages_in_sequences(const engine *e);
aah_backend *engine_backend(engine *e);
/* Any thread: human-readable backend description, e.g. "cpu (avx512; VNNI packed products, bf16 exact)". */
const char *engine_backend_desc(const engine *e);
/* Any thread: whether some layer runs its q, k, v (or gate, up) projections as one product (engine_params). */
bool engine_projections_fused(const engine *e);

/* Any thread: the regimes this model offers (full_attention always; the others come from aah.json). */
int32_t engine_regime_count(const engine *e);
const char *engine_regime_name(const engine *e, int32_t i);
const char *engine_default_regime(const engine *e);

/* Any thread: how regime i lays out the heads (views into the engine's immutable data, valid until engine_free). A
 * group is a set of KV heads of one layer sharing a window (their query heads follow them under GQA). */
typedef struct engine_regime_layout {
	const char *name;
	bool full;                      /* full attention (ACR 1 by definition) */
	bool adaptive;                  /* the policy re-selects windows while decoding; else they are the file's */
	int32_t n_layers, n_kv_heads;
	int32_t n_groups;               /* over all layers */
	const int32_t *group_layer;     /* (n_groups) */
	const int32_t *group_kv_heads;  /* (n_groups) KV heads in the group */
	const int32_t *group_window;    /* (n_groups) the file's window (an adaptive policy's start), ≤ the context */
	const int32_t *group_capacity;  /* (n_groups) the most it may select; sizes its cache */
	const int32_t *head_group;      /* (n_layers, n_kv_heads) → its group */
	int32_t context_length;         /* T of ACR */
	int32_t n_usage_windows;        /* the windows its branch usage may count (aah_regime_usage_windows) */
	int32_t usage_windows[16];
} engine_regime_layout;
/* Returns 0, or -1 when there is no regime i. */
int engine_regime_layout_get(const engine *e, int32_t i, engine_regime_layout *out);

/* Any thread: KV pages a sequence under `regime` (NULL: the default) holds at most at `len` positions (one that took
 * positions back: at the most it wrote); -1: no such regime. */
int64_t engine_regime_kv_pages(const engine *e, const char *regime, int64_t len);
/* Any thread: engine_params.rollback. */
int32_t engine_rollback_max(const engine *e);

/* Opens a sequence (an empty KV cache slot) that attends under `regime` (NULL: the default).
 * Returns its id, or -1 with a message: every slot taken, or no such regime. */
int32_t engine_seq_open(engine *e, const char *regime, char *err, size_t err_len);
/* Opens a sequence that is a copy of the open sequence src: its regime, positions, window selection and policy state,
 * stats so far, and src's KV pages, shared copy-on-write (a write to a shared page copies it first, backend to
 * backend, so the fork takes no page now and each first write takes one). Both then go on independently, each exactly
 * as src alone would: n choices of one prompt share its prefill this way. Returns the new id, or -1 with a message:
 * src not open, or every slot taken (then nothing changes). */
int32_t engine_seq_fork(engine *e, int32_t src, char *err, size_t err_len);
/* Closes it and returns its pages to the pool (those no other sequence or the prefix cache holds). */
void engine_seq_close(engine *e, int32_t seq);
/* Positions the sequence holds so far. */
int32_t engine_seq_len(const engine *e, int32_t seq);
/* Bytes of KV pages the sequence holds now. */
int64_t engine_seq_kv_bytes(const engine *e, int32_t seq);

/* What one sequence has cost, for the response's `aah` object and /metrics (docs/architecture.md). */
typedef struct engine_seq_stats {
	const char *regime;
	int64_t n_positions;            /* tokens processed */
	uint64_t attn_products;         /* query·key products done (counted by the backend) */
	uint64_t attn_products_full;    /* what full causal attention does for the same tokens */
	int64_t kv_bytes;               /* held now */
	int64_t kv_bytes_peak;          /* the most held at once */
	int64_t kv_bytes_full_peak;     /* what full attention would hold for the same tokens (at the current length) */
	double branch_usage_weighted;   /* Σ_W usage[W]·W over this sequence's selections */
	double branch_usage_total;      /* Σ_W usage[W] */
	int32_t n_usage;                /* branch usage by window: usage[i] query-head selections of usage_window[i] */
	int32_t usage_window[9];
	double usage[9];
	int32_t context_length;         /* T of ACR: aah.json's context_length, else the engine's */
	double acr;                     /* Σ_W f_W·W / T; 1 for full attention by definition */
} engine_seq_stats;

/* Fills *out for an open sequence; returns 0, or -1 when seq is not open. */
int engine_seq_stats_get(const engine *e, int32_t seq, engine_seq_stats *out);

/* Decode steps seq may take before its next probe (an adaptive regime's control step, engine/aah_policy.h): a
 * generated item (engine_item.generated) of at most this many tokens contains no probe. 0: the next decode step is a
 * probe (feed it alone); INT32_MAX: the regime never probes; -1: seq is not open. */
int32_t engine_seq_steps_to_probe(const engine *e, int32_t seq);

/* seq was just opened (it holds no positions): from now on engine_seq_truncate may take its positions back (a fork
 * inherits that). It costs nothing; it says that the caller means to, so that a truncation of any other sequence is
 * refused as the mistake it would be. Returns 0, or -1 with a message: not open, not empty, or the engine was made
 * without rollback. */
int engine_seq_allow_rollback(engine *e, int32_t seq, char *err, size_t err_len);

/* Takes back seq's positions from len on: it then stands exactly as if the tokens past len had never been fed — its
 * length, its KV (a windowed head's ring still holds its whole window), its stats
 * (positions, attention products, branch usage, hence ACR) and the adaptive policy's step count. What it does not
 * take back: the pages it holds (a rolled-back position's page stays in its ring, to be written again) and so
 * kv_bytes_peak, and the engine's own work counter (engine_attention_work: the products were done). Only a sequence
 * that allows it (engine_seq_allow_rollback), at most engine_params.rollback positions, and only positions written
 * since its last prompt chunk (an item of two tokens or more that is not `generated`) or probe: decode steps and
 * generated items, under the windows it has now. Returns 0, or -1 with a message, changing nothing. */
int engine_seq_truncate(engine *e, int32_t seq, int32_t len, char *err, size_t err_len);

/* Attention measurement, for calibration (aah-convert calibrate): while a sequence has one, every engine_forward that
 * feeds it adds, for each layer and query head, each of its query rows' attention probability mass by key distance
 * d = p − t into bands — band b holds band_edges[b-1] ≤ d < band_edges[b], the last one also anything beyond — and
 * each row's attention entropy −Σ_t p_t ln p_t (nats). The attention is the sequence's own: open it under
 * full_attention to see every distance (a static regime's windows cut the bands they do not reach). The backend carries
 * the sums in its softmax: on the CPU a measured 2048-token prefill ran at 0.95-0.97x the unmeasured one
 * (aah-bench --measure); on a device each measured layer waits for its results.
 * The caller owns the struct and its arrays; the engine only adds into them, until the sequence closes or the
 * measurement is cleared. A forked sequence starts without one. */
typedef struct engine_measure {
	int32_t n_bands;               /* 1 … ENGINE_MEASURE_MAX_BANDS */
	const int32_t *band_edges;     /* (n_bands − 1) strictly ascending distances ≥ 1; copied by engine_seq_measure */
	double *band_mass;             /* (n_layers, n_heads, n_bands) += probability mass, or NULL */
	double *entropy;               /* (n_layers, n_heads) += entropy in nats, or NULL */
	int64_t rows;                  /* += query rows measured (each layer and head saw this many) */
} engine_measure;

#define ENGINE_MEASURE_MAX_BANDS 64

/* Sets (m) or clears (NULL) the measurement of an open sequence. Returns 0, or -1 with a message: not open, bad bands
 * (count, edges not ascending), nothing to measure (both arrays NULL), or an adaptive regime (its probe steps use the
 * backend's band measurement for themselves: measure under full_attention or a static regime). */
int engine_seq_measure(engine *e, int32_t seq, engine_measure *m, char *err, size_t err_len);

typedef struct engine_item {
	int32_t seq;
	const int32_t *tokens;      /* n_tokens ≥ 1 ids appended to the sequence */
	int32_t n_tokens;
	bool all_logits;            /* logits after every token, else only after the last */
	bool cache;                 /* prompt positions the prefix cache will take (engine_prefix_insert after the step):
	                             * the pages a windowed ring drops before the item ends are spilled, not lost */
	bool generated;             /* generated tokens checked at once (speculative decoding's verify pass): each counts
	                             * as a decode step of the adaptive policy, as if fed one by one, so the item must end
	                             * before the sequence's next probe (at most engine_seq_steps_to_probe tokens, else
	                             * engine_forward refuses it); with all_logits, row i is what a decode step feeding
	                             * token i alone would give, bit for bit on the CPU */
} engine_item;

/* An item of one token at a position > 0 is a generated token to the adaptive policy (engine/aah_policy.h): it counts
 * toward the control interval and may be a probe. A caller feeding a prompt in chunks keeps every chunk after the
 * first at two tokens or more (the scheduler does), or a sequence's windows would depend on how its prompt was split.
 *
 * Runs the forward pass for every item (different sequences), appending their tokens, and writes logits
 * (host memory) in item order: n_tokens rows for an all_logits item, else 1; each row vocab_size floats.
 * logits NULL: the rows stay in the engine's backend memory instead (the same rows, in the same order),
 * where engine_logits_top reduces them and engine_logits_row reads one back — a decode step on a device then brings
 * back a short list per row instead of vocab_size floats; they are valid until the next engine_forward, and at most
 * engine_logits_rows_max rows are kept (more is an error).
 * Validates everything first (open sequence, ids in range, context length, free pages): on error nothing
 * changes, it returns -1 and says why in err. */
int engine_forward(engine *e, const engine_item *items, int32_t n_items, float *logits, char *err, size_t err_len);
/* Any thread: the logits rows an engine_forward without host logits keeps at most (≈ 64 MiB of them, at most
 * max_batch_tokens). */
int32_t engine_logits_rows_max(const engine *e);
/* Any thread: whether the backend reduces logits rows where they are (engine_logits_top works). */
bool engine_logits_top_available(const engine *e);
/* The backend's logits_top (kernels/backend.h) over kept rows [row0, row0 + n_rows) of the last engine_forward
 * without host logits, their first n_cols columns: stats[r] (max, the softmax sum at temperature[r], the log-softmax
 * normaliser lse) and top_ids / top_logits[r·n_top …) the n_top largest logits, largest first, lower id first among
 * equals. All arrays host memory, written by the caller's sizes (n_rows; n_rows·n_top). Waits for the result.
 * Returns 0, or -1 (nothing written): rows not kept, n_cols not in [1, vocab_size], n_top not in
 * [1, min(n_cols, AAH_LOGITS_TOP_MAX)], no logits_top in the backend, or a backend error. */
int engine_logits_top(engine *e, aah_logits_stats *stats, int32_t *top_ids, float *top_logits, int32_t row0,
                      int32_t n_rows, int32_t n_cols, const float *temperature, int32_t n_top);
/* Copies kept row `row` (vocab_size floats) to host: the whole row, when its candidates do not decide. Returns 0,
 * or -1: no such kept row, or a backend error. */
int engine_logits_row(engine *e, int32_t row, float *host);
/* ids[r] = sampler_argmax(rows[r], n_cols) for r < n_rows, rows in host memory (engine_forward's logits): spread over
 * the backend's workers where its memory is the host's (the CPU), else one after another here. The greedy tokens of
 * a step at once, instead of one row at a time on the caller's thread while the workers wait. */
void engine_argmax_rows(engine *e, int32_t *ids, const float *const *rows, int32_t n_rows, int32_t n_cols);

/* ---- the prefix cache (engine_params.prefix_cache; docs/prefix_cache.md) ----
 * A prompt whose first 16·k tokens the engine computed before under the same regime and tenant starts after them:
 * their KV pages are shared (copy-on-write), not recomputed, and everything the sequence then computes is bit for bit
 * what it computes without the cache. Prompt log-probabilities of the cached tokens come from the cache as well.
 * tenant: the namespace a prompt's blocks live in (a cache salt, an API key's name; NULL or "": the shared one);
 * prompts of different tenants never share a block. */

/* Prompt log-probabilities, in the caller's arrays: row t of logprob (n) and top_ids / top_logprobs (n, n_top) is token
 * t of the prompt given the tokens before it. */
typedef struct engine_prefix_lp {
	int32_t n_top;
	float *logprob;
	int32_t *top_ids;
	float *top_logprobs;
} engine_prefix_lp;

/* seq was just opened (no positions) and its prompt is tokens (n). Restores the longest cached prefix that leaves at
 * least two prompt tokens to feed: the pages of positions [0, P) for a boundary P = 16·k, every full-attention head's
 * all of them, every windowed head's last ceil(capacity / 16) pages at least; the sequence then holds P − 1 positions
 * (the last of them is fed again, so that its logits row — the log-probability of token P — is computed as without
 * the cache). With lp (a request that wants prompt log-probabilities), only a prefix whose rows the cache has with at
 * least lp->n_top alternatives, and rows 1 … P − 1 are written. Returns the positions restored (0: a miss, or the
 * cache is off). Counts a query, and a hit when it returns more than 0. */
int32_t engine_prefix_restore(engine *e, int32_t seq, const char *tenant, const int32_t *tokens, int32_t n,
                              const engine_prefix_lp *lp);
/* What engine_prefix_restore would restore now for this prompt, changing nothing (no counters either). */
int32_t engine_prefix_peek(const engine *e, const char *regime, const char *tenant, const int32_t *tokens, int32_t n,
                           int32_t lp_top);
/* seq's positions [0, len) are tokens of its prompt, and it has generated nothing yet: the cache takes the pages of
 * its whole 16-token blocks (those its rings still hold), with the prompt's log-probabilities when lp (rows 0 … len −
 * 1 computed), and the pages the last step spilled for it (engine_item.cache). Called after every prompt chunk, so
 * that a windowed head's ring copies the pages the cache holds rather than overwrite them. Then evicts down to the
 * byte cap. Out of memory: it keeps less. */
void engine_prefix_insert(engine *e, int32_t seq, const char *tenant, const int32_t *tokens,
                          const engine_prefix_lp *lp);

typedef struct engine_prefix_stats {
	bool enabled;
	uint64_t queries, hits, hit_tokens;   /* engine_prefix_restore calls, those that restored, positions restored */
	uint64_t evictions;                   /* blocks evicted (for room or for the byte cap) */
	int64_t bytes;                        /* pages the cache holds × page bytes (some shared with running sequences) */
	int64_t blocks;
	int64_t max_bytes;                    /* its cap */
} engine_prefix_stats;
void engine_prefix_stats_get(const engine *e, engine_prefix_stats *out);
/* Empties the cache (every block evicted). */
void engine_prefix_clear(engine *e);

/* Any thread: the type layer `layer`'s matrix `which` is multiplied in, as the backend holds it — 0 q, 1 k, 2 v, 3 o,
 * 4 gate, 5 up, 6 down (a fused q/k/v or gate/up product: the fused matrix's), 7 the output head (any layer) — so that
 * a caller can say which instruction runs each product (aah-bench). -1 (as aah_dtype) for which out of range. */
aah_dtype engine_matrix_type(const engine *e, int32_t layer, int32_t which);

/* Weight bytes one decode step reads: every layer's matrices and norms, the final norm and the output head. */
int64_t engine_weight_bytes_per_token(const engine *e);

/* Attention query·key products done since init (the work counter of the backend). */
uint64_t engine_attention_work(const engine *e);

#ifdef __cplusplus
}
#endif
#endif
