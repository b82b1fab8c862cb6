/* tests/interop/llamacpp_logits.c — llama.cpp's side of `make check-llamacpp` (tests/interop/llamacpp.sh): opens a
 * GGUF with llama.cpp's own loader and prints what llama.cpp makes of it, for the script to set beside aahd's.
 *
 * llama.cpp's warnings and errors go to stderr, for the script to require none.
 *
 *   llamacpp_logits MODEL.gguf tokenize TEXTFILE [bos]   the ids llama.cpp's tokenizer gives TEXTFILE (special tokens
 *                                                        parsed; BOS added by the file's rule when "bos"), one a line
 *   llamacpp_logits MODEL.gguf logits ID,ID,... OUT.f32  the logits at every position of that prompt, row-major
 *                                                        float32; K and V cached in f32 (llama.cpp's default f16
 *                                                        cache would round them), 2 threads
 *
 * Built against a llama.cpp tree's llama.h by the script, never by `make`: llama.cpp is not a dependency of aahd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void log_quiet(enum ggml_log_level level, const char *text, void *user)
{
	(void)user;
	if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int tokenize(const struct llama_vocab *vocab, const char *path, int add_bos)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return 1;
	}
	size_t cap = 1 << 20, n = 0;
	char *text = malloc(cap);
	for (size_t got; text && (got = fread(text + n, 1, cap - n, f)) > 0;)
		if ((n += got) == cap) {
			char *more = realloc(text, cap *= 2);
			if (!more)
				free(text);
			text = more;
		}
	fclose(f);
	int32_t room = (int32_t)n + 8;
	llama_token *ids = text ? malloc((size_t)room * sizeof *ids) : NULL;
	int32_t k = ids ? llama_tokenize(vocab, text, (int32_t)n, ids, room, add_bos, true) : -1;
	if (k < 0) {
		fprintf(stderr, "%s: %s (%d)\n", path, text ? "llama_tokenize failed" : "out of memory", k);
		free(ids);
		free(text);
		return 1;
	}
	for (int32_t i = 0; i < k; i++)
		printf("%d\n", ids[i]);
	free(ids);
	free(text);
	return 0;
}

static int logits(struct llama_model *model, int32_t n_vocab, const char *list, const char *out)
{
	int32_t n = 1;
	for (const char *s = list; *s; s++)
		n += *s == ',';
	llama_token *ids = malloc((size_t)n * sizeof *ids);
	int32_t t = 0;
	for (char *s = (char *)list; *s && t < n;) {
		ids[t++] = (llama_token)strtol(s, &s, 10);
		if (*s == ',')
			s++;
	}
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)(t < 64 ? 64 : t);
	cp.n_threads = cp.n_threads_batch = 2;
	cp.type_k = cp.type_v = GGML_TYPE_F32;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "llama_init_from_model failed\n");
		return 1;
	}
	struct llama_batch b = llama_batch_init(t, 0, 1);
	for (int32_t i = 0; i < t; i++) {
		b.token[i] = ids[i];
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = 1;
	}
	b.n_tokens = t;
	int rc = llama_decode(ctx, b);
	FILE *f = rc ? NULL : fopen(out, "wb");
	for (int32_t i = 0; f && i < t; i++)
		fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, f);
	if (!f || fclose(f)) {
		fprintf(stderr, "%s\n", rc ? "llama_decode failed" : out);
		rc = 1;
	}
	llama_batch_free(b);
	llama_free(ctx);
	free(ids);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 4 || (strcmp(argv[2], "tokenize") && strcmp(argv[2], "logits")) ||
	    (!strcmp(argv[2], "logits") && argc != 5)) {
		fputs("usage: llamacpp_logits MODEL.gguf tokenize TEXTFILE [bos] | logits ID,ID,... OUT.f32\n", stderr);
		return 2;
	}
	llama_log_set(log_quiet, NULL);
	llama_backend_init();
	struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
	if (!model) {
		fprintf(stderr, "%s: llama.cpp could not load it\n", argv[1]);
		return 1;
	}
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	int rc = !strcmp(argv[2], "tokenize")
	             ? tokenize(vocab, argv[3], argc > 4 && !strcmp(argv[4], "bos"))
	             : logits(model, llama_vocab_n_tokens(vocab), argv[3], argv[4]);
	llama_model_free(model);
	llama_backend_free();
	return rc;
}
