/* tests/fuzz/fuzz_aah_config.c — libFuzzer target for the aah.json parser: any bytes in, a validated config or an
 * error out, for a fixed model shape; an accepted config is then turned into regimes and a window selection run. */
#include <stddef.h>
#include <stdint.h>

#include "engine/aah_policy.h"
#include "models/aah_config.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/aah_config";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	model_config mc = { .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16 };
	aah_config a;
	char err[256];
	if (aah_config_parse(&a, (const char *)data, size, &mc, err, sizeof err) == 0) {
		aah_regimes rs;
		if (aah_regimes_init(&rs, &a, 2, 2, 2, 4096) == 0) {
			aah_seq_state s;
			if (aah_seq_state_init(&s, &rs) == 0) {
				float mass[2 * 2 * AAH_MAX_WINDOWS];
				for (int i = 0; i < 2 * 2 * AAH_MAX_WINDOWS; i++)
					mass[i] = (float)(i % 3);
				for (int32_t r = 0; r < rs.n; r++) {
					aah_seq_state_reset(&s, &rs, r);
					aah_seq_count(&s, &rs, 3, false);
					aah_seq_control(&s, &rs, mass);
					(void)aah_seq_acr(&s, &rs);
				}
				aah_seq_state_free(&s);
			}
			aah_regimes_free(&rs);
		}
	}
	aah_config_free(&a);
	return 0;
}
