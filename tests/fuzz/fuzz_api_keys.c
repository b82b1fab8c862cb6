/* tests/fuzz/fuzz_api_keys.c — libFuzzer target for the api_keys file (server/api_keys.h): any bytes in, a set of
 * named keys or an error that names a line out. An accepted set holds unique names and keys of the allowed
 * characters, and each key, sent as a Bearer token, matches its own name and no other. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_keys.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/api_keys";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	api_keys ks;
	char err[256];
	if (api_keys_parse(&ks, (const char *)data, size, err, sizeof err) == 0) {
		for (int i = 0; i < ks.n; i++) {
			size_t nl = strlen(ks.k[i].name), kl = strlen(ks.k[i].key);
			if (nl == 0 || nl > API_KEY_NAME_MAX || kl == 0 || kl > API_KEY_MAX)
				abort();
			for (int j = 0; j < i; j++)
				if (!strcmp(ks.k[i].name, ks.k[j].name) || !strcmp(ks.k[i].key, ks.k[j].key))
					abort();
			char header[API_KEY_MAX + 16];
			snprintf(header, sizeof header, "Bearer %s", ks.k[i].key);
			const char *m = api_keys_match(&ks, header);
			if (!m || strcmp(m, ks.k[i].name) != 0)
				abort();
		}
	} else if (strncmp(err, "line ", 5) != 0) {
		abort();   /* every refusal names its line */
	}
	api_keys_free(&ks);
	return 0;
}
