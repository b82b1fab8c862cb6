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

/* A .gguf file, or a directory holding one and no config.json: the tokenizer inside it (tokenizer.ggml.*). Else:
 * loads dir/tokenizer.json (byte-level BPE; when it is a kind we cannot run and dir/tokenizer.model exists, that
 * instead), else dir/tokenizer.model (SentencePiece), and dir/tokenizer_config.json when present (bos_token,
 * eos_token, add_bos_token). Returns NULL with a message in err. Free with tokenizer_free. After loading nothing
 * changes, so concurrent encode/decode from any number of threads is safe. */
tokenizer *tokenizer_load(const char *dir, char *err, size_t err_len);
void tokenizer_free(tokenizer *t);
/* The tokenizer of a GGUF file's bytes (its tokenizer.ggml.* keys; tokenizer_load does this for a .gguf path).
 * NULL with a message in err. Free with tokenizer_free. */
tokenizer *tokenizer_from_gguf(const void *buf, size_t len, char *err, size_t err_len);

/* Encodes UTF-8 text (invalid UTF-8 is an error: returns -1 with err). Special-token text such as
 * <|im_start|> becomes that token (added tokens are found in the raw text, longest first, as Hugging Face does).
 * add_special adds BOS when the tokenizer asks for it (add_bos_token, or a TemplateProcessing post-processor
 * that starts with BOS as in Llama 3; SentencePiece models default to yes). ids may be NULL when cap is 0.
 * Returns the number of ids, which may exceed cap (then only cap are written; call again with more room),
 * or -1 on error. */
int64_t tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t *ids,
                         int64_t cap, char *err, size_t err_len);

/* The bytes of one token (after byte-level / SentencePiece decoding), which may be part of a UTF-8 character.
 * Returns the byte count (may exceed cap), or -1 for an id out of range. */
int64_t tokenizer_token_bytes(const tokenizer *t, int32_t id, char *out, int64_t cap);

/* Decodes ids to text; each maximal invalid UTF-8 subpart, and an incomplete character at the end, becomes
 * U+FFFD (as Hugging Face's decode does). Returns the byte length (may exceed cap; out may be NULL when cap is 0)
 * and writes a terminating NUL when cap > length; -1 for an id out of range. skip_special drops special tokens.
 * SentencePiece: the space of the first piece's dummy "▁" prefix is dropped, as sentencepiece does. */
int64_t tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, char *out,
                         int64_t cap);

int32_t tokenizer_vocab_size(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);    /* -1 when none */
int32_t tokenizer_eos(const tokenizer *t);    /* -1 when none */
bool tokenizer_add_bos(const tokenizer *t);
/* The token's text as the vocabulary spells it (e.g. "<|endoftext|>", "ĠHello"), owned by the tokenizer;
 * "" for an id inside the range that no token has; NULL when out of range. */
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
/* Writes to out the text that token id completes: held bytes plus the token's bytes, cut after the last
 * complete character. A token needs at most 3 × (tokenizer_token_bytes + 3) bytes of room; 1 KiB is ample for
 * real vocabularies. Returns bytes written (0 when all is held, or for a skipped special token), or -1 for a bad
 * id or too small a cap — then nothing was consumed and the call may be repeated with more room. */
int64_t tokenizer_stream_push(tokenizer_stream *s, int32_t id, char *out, int64_t cap);
/* Emits whatever is held (an incomplete character becomes one U+FFFD) and resets the stream. Returns the bytes
 * written: 0 or 3; -1 when something is held and cap < 3. */
int64_t tokenizer_stream_flush(tokenizer_stream *s, char *out, int64_t cap);

#ifdef __cplusplus
}
#endif
#endif
