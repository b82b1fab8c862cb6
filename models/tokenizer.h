/* models/tokenizer.h — text ↔ token ids: Hugging Face tokenizer.json byte-level BPE (Qwen3, Llama 3, GPT-2)
 * and SentencePiece tokenizer.model; plus an incremental decoder for streaming. */
#ifndef AAH_TOKENIZER_H
#define AAH_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tokenizer tokenizer;

/* Loads dir/tokenizer.json (else dir/tokenizer.model) and dir/tokenizer_config.json when present.
 * Returns NULL with a message in err. Free with tokenizer_free. Thread-safe for concurrent encode/decode. */
tokenizer *tokenizer_load(const char *dir, char *err, size_t err_len);
void tokenizer_free(tokenizer *t);

/* Encodes UTF-8 text (invalid UTF-8 is an error: returns -1 with err). Special-token text such as
 * <|im_start|> becomes that token. add_special adds BOS when the tokenizer config asks for it.
 * Returns the number of ids, which may exceed cap (then only cap are written; call again with more room),
 * or -1 on error. */
int64_t tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t *ids,
                         int64_t cap, char *err, size_t err_len);

/* The bytes of one token (after byte-level / SentencePiece decoding), which may be part of a UTF-8 character.
 * Returns the byte count (may exceed cap), or -1 for an id out of range. */
int64_t tokenizer_token_bytes(const tokenizer *t, int32_t id, char *out, int64_t cap);

/* Decodes ids to text; incomplete or invalid UTF-8 becomes U+FFFD. Returns the byte length
 * (may exceed cap), or -1 for an id out of range. skip_special drops special tokens. */
int64_t tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, char *out,
                         int64_t cap);

int32_t tokenizer_vocab_size(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);    /* -1 when none */
int32_t tokenizer_eos(const tokenizer *t);    /* -1 when none */
bool tokenizer_add_bos(const tokenizer *t);
/* The token's text as the vocabulary spells it (e.g. "<|endoftext|>"); NULL when out of range. */
const char *tokenizer_token_text(const tokenizer *t, int32_t id);
bool tokenizer_is_special(const tokenizer *t, int32_t id);

/* Streaming decoder: feed one token at a time; emits only complete UTF-8 characters, holding the rest.
 * Invalid sequences become U+FFFD. No allocation after init. */
typedef struct tokenizer_stream {
	const tokenizer *t;
	unsigned char pending[8];
	int32_t n_pending;
	bool skip_special;
} tokenizer_stream;

void tokenizer_stream_init(tokenizer_stream *s, const tokenizer *t, bool skip_special);
/* Appends the text completed by token id to out (up to cap bytes; a token emits at most 64 + 8 bytes… see
 * tokenizer_token_bytes for long tokens). Returns bytes written or -1 for a bad id / too small cap. */
int64_t tokenizer_stream_push(tokenizer_stream *s, int32_t id, char *out, int64_t cap);
/* Emits whatever is held (as U+FFFD for an incomplete character). Returns bytes written. */
int64_t tokenizer_stream_flush(tokenizer_stream *s, char *out, int64_t cap);

#ifdef __cplusplus
}
#endif
#endif
