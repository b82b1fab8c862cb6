/* tests/fuzz/fuzz_credentials.c — libFuzzer target for the Authorization header check: the first line is the key,
 * the rest the header. Any bytes in, a yes or a no out; and the key itself, sent as Bearer or as a Basic password,
 * must always match. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_credentials.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/credentials";

static void base64(const char *in, size_t n, char *out)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
		if (i + 1 < n) v |= (uint32_t)(unsigned char)in[i + 1] << 8;
		if (i + 2 < n) v |= (unsigned char)in[i + 2];
		out[o++] = t[v >> 18 & 63];
		out[o++] = t[v >> 12 & 63];
		out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? t[v & 63] : '=';
	}
	out[o] = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;   /* headers are strings: what follows a NUL is not seen */
	char *nl = strchr(text, '\n');
	const char *key = text, *header = nl ? nl + 1 : "";
	if (nl)
		*nl = 0;
	(void)http_credentials_match(header, key);
	char out[1024];
	(void)http_base64_decode(header, strlen(header), out, sizeof out);
	size_t kn = strlen(key);
	if (kn > 0 && kn < 500 && !strchr(key, ' ')) {
		char *h = malloc(2 * kn + 64), *b = malloc(2 * kn + 16);
		if (h && b) {
			snprintf(h, 2 * kn + 64, "Bearer %s", key);
			if (!http_credentials_match(h, key))
				abort();
			char cred[600];
			snprintf(cred, sizeof cred, "user:%s", key);
			base64(cred, strlen(cred), b);
			snprintf(h, 2 * kn + 64, "Basic %s", b);
			if (!http_credentials_match(h, key))
				abort();
			snprintf(h, 2 * kn + 64, "Bearer %sx", key);
			if (http_credentials_match(h, key))
				abort();
		}
		free(h);
		free(b);
	}
	free(text);
	return 0;
}
