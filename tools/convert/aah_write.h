/* tools/convert/aah_write.h — writes aah.json (version 1, docs/architecture.md): any set of regimes held in an
 * aah_config (the parser's own structs, so what is written is what aah_config_parse reads back), and, for generated
 * models, the principal AAH regimes of the paper's table 3 with windows drawn by seed so that each regime's ACR
 * approaches a target. */
#ifndef AAH_AAH_WRITE_H
#define AAH_AAH_WRITE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "models/aah_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The aah.json document of a: version, context_length, candidate_windows, regimes (grouping, hierarchy, scorer,
 * policy — an adaptive one with its constants and coverage — and per layer the groups' kv_heads, window, capacity),
 * default_regime, and provenance (stolen: the caller's reference passes to the document; NULL: none). The caller
 * frees the result with json_decref; NULL when out of memory. */
json_t *aah_config_to_json(const aah_config *a, json_t *provenance);
/* One group as aah.json spells it: {"kv_heads": […], "window", "capacity"}, for the caller to add to (the calibration
 * report adds its own fields). The caller owns the result (json_decref); NULL when out of memory. */
json_t *aah_group_to_json(const aah_group *g);

/* Writes root as JSON to path through path.tmp-XXXXXX in the same directory, flushed and renamed onto path, so that
 * path is either the old file or the whole new one, never a part. Returns 0, or -1 with a message (nothing left
 * behind). */
int aah_json_write_atomic(const json_t *root, const char *path, char *err, size_t err_len);
/* Its first half: writes root, complete and flushed, to a new file path.tmp-XXXXXX whose name goes to tmp (tmp_len ≥
 * strlen(path) + 12); the caller renames it onto path or unlinks it. Returns 0, or -1 with a message (nothing left). */
int aah_json_write_tmp(const json_t *root, const char *path, char *tmp, size_t tmp_len, char *err, size_t err_len);

typedef struct aah_write_params {
	int32_t n_layers, n_kv_heads;     /* the model's */
	int32_t context_length;           /* T; 0 = 4096 */
	int32_t windows[8];               /* candidates, ascending; n_windows 0 = 512, 1024, 2048, 4096 */
	int32_t n_windows;
	const int32_t *layer_windows;     /* optional (n_layers): every group of layer l gets this window, in every regime */
	int32_t group_size;               /* KV heads per group; 0 = 1 */
	double acr;                       /* > 0: the target ACR of every regime instead of table 6's */
	uint64_t seed;
	const char *default_regime;       /* NULL = shallow_freeze */
} aah_write_params;

/* Writes dir/aah.json with random windows (aah_json_write_atomic). Regimes: grouping_off (one group per layer,
 * static), full_adaptive (adaptive, capacity 2 × window), shallow_freeze (static), deep_reuse (static). Returns 0, or
 * -1 with a message. */
int aah_write_file(const char *dir, const aah_write_params *p, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
