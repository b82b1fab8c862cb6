/* tests/interop/aah_logits.c — aahd's side of `make check-llamacpp` (tests/interop/llamacpp.sh): the engine's logits
 * at every position of a prompt, as tests/interop/llamacpp_logits.c writes llama.cpp's.
 *
 *   aah_logits MODEL ID,ID,... OUT.f32    row-major float32, positions x vocabulary; CPU backend, 2 threads, f32 KV */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"

int main(int argc, char **argv)
{
	if (argc != 4) {
		fputs("usage: aah_logits MODEL ID,ID,... OUT.f32\n", stderr);
		return 2;
	}
	int32_t n = 1;
	for (const char *s = argv[2]; *s; s++)
		n += *s == ',';
	int32_t *ids = malloc((size_t)n * sizeof *ids), t = 0;
	for (char *s = argv[2]; ids && *s && t < n;) {
		ids[t++] = (int32_t)strtol(s, &s, 10);
		if (*s == ',')
			s++;
	}
	engine *e;
	char err[512];
	engine_params p = { .n_threads = 2, .max_seqs = 1, .max_batch_tokens = t, .ctx_len = t < 64 ? 64 : t,
		            .backend = "cpu", .kv_dtype = AAH_DTYPE_F32 };
	if (!ids || engine_init(&e, argv[1], &p, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", argv[1], ids ? err : "out of memory");
		return 1;
	}
	size_t vocab = (size_t)engine_config(e)->vocab_size;
	float *logits = malloc((size_t)t * vocab * sizeof *logits);
	int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
	engine_item it = { seq, ids, t, true, false, false };
	int rc = !logits || seq < 0 || engine_forward(e, &it, 1, logits, err, sizeof err);
	FILE *f = rc ? NULL : fopen(argv[3], "wb");
	if (!f || fwrite(logits, sizeof *logits, (size_t)t * vocab, f) != (size_t)t * vocab || fclose(f)) {
		fprintf(stderr, "%s: %s\n", argv[1], rc ? err : argv[3]);
		rc = 1;
	}
	engine_free(e);
	free(logits);
	free(ids);
	return rc;
}
