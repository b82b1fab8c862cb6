/* models/aah_write.h — writes aah.json for a model shape: the principal AAH regimes of the paper's table 3, with
 * windows drawn by seed so that each regime's ACR approaches a target (by default its table-6 value). */
#ifndef AAH_AAH_WRITE_H
#define AAH_AAH_WRITE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

/* Writes dir/aah.json (through a temporary file and a rename). Regimes: grouping_off (one group per layer, static),
 * full_adaptive (adaptive, capacity 2 × window), shallow_freeze (static), deep_reuse (static). Returns 0, or -1
 * with a message. */
int aah_write_file(const char *dir, const aah_write_params *p, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
