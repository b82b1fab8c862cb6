/* models/tokenizer_internal.h — what the tokenizer's files share (not an interface for other folders):
 * the per-id tables, added-token matching, the id sink, UTF-8 helpers, and the BPE / SentencePiece back ends. */
#ifndef AAH_TOKENIZER_INTERNAL_H
#define AAH_TOKENIZER_INTERNAL_H

#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tok_kind { TOK_KIND_BPE, TOK_KIND_SPM };

enum { TOK_FLAG_PRESENT = 1, TOK_FLAG_SPECIAL = 2, TOK_FLAG_ADDED = 4 };

/* An added token (tokenizer.json "added_tokens", or a SentencePiece control piece): matched in the text
 * before pre-tokenization. content is owned by the tokenizer. */
typedef struct tok_added {
	char *content;
	uint32_t len;
	int32_t id;
	bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* The added tokens of one pass (raw text, or normalized text), sorted by (first byte, length descending) so the
 * first hit at a position is the longest: Hugging Face's leftmost-longest match. */
typedef struct tok_matcher {
	const tok_added **tok;   /* (n) */
	int32_t n;
	int32_t first[257];      /* tokens starting with byte b are tok[first[b] .. first[b+1]-1] */
} tok_matcher;

/* Where encoded ids go: ids beyond cap are counted, not written, so the caller learns the size it needs. */
typedef struct tok_sink {
	int32_t *ids;
	int64_t cap;
	int64_t n;
} tok_sink;

static inline void tok_sink_push(tok_sink *s, int32_t id)
{
	if (s->n < s->cap) s->ids[s->n] = id;
	s->n++;
}

typedef struct tok_bpe tok_bpe;   /* tokenizer_bpe.c */
typedef struct tok_spm tok_spm;   /* tokenizer_spm.cc */

struct tokenizer {
	enum tok_kind kind;
	int32_t n_vocab;            /* highest id + 1 */
	char *text;                 /* id's spelling: text + text_off[id], NUL-terminated */
	uint32_t *text_off;         /* (n_vocab + 1) */
	unsigned char *bytes;       /* id's decoded bytes: bytes[bytes_off[id] .. bytes_off[id+1]) */
	uint32_t *bytes_off;        /* (n_vocab + 1) */
	uint8_t *flags;             /* (n_vocab) TOK_FLAG_* */
	tok_added *added;           /* (n_added) */
	int32_t n_added;
	tok_matcher match_raw;      /* added tokens with normalized=false: found in the raw text */
	tok_matcher match_norm;     /* normalized=true: found in each normalized segment */
	int32_t bos, eos;
	bool add_bos;
	bool spm_strip_space;       /* SentencePiece adds a dummy "▁" prefix: decode drops the first space */
	tok_bpe *bpe;
	tok_spm *spm;
};

/* Per-call state of one encode, so concurrent encodes share nothing mutable. */
typedef struct tok_scratch {
	char *err;
	size_t err_len;
	void *bpe;                  /* tokenizer_bpe.c's buffers, freed by tok_bpe_scratch_free */
} tok_scratch;

typedef int (*tok_text_fn)(const tokenizer *t, tok_scratch *sc, const char *s, size_t n, tok_sink *sink);

/* tokenizer.c */
/* 0 when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF), else the 1-based
 * offset of the first bad byte. */
size_t tok_utf8_check(const unsigned char *s, size_t n);
/* Decodes the valid UTF-8 character at s (n > 0 bytes left) into *cp; returns its length. */
int tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
int tok_utf8_put(uint32_t cp, char *out);
bool tok_is_space(uint32_t cp);   /* Unicode White_Space, as Rust's char::is_whitespace and Oniguruma's \s */
/* Builds the per-id tables from each id's spelling (text[id], len[id]; NULL for a gap). to_bytes writes the
 * decoded bytes of a spelling (at most len + 8 bytes) into out and returns their count. */
int tok_tables_build(tokenizer *t, int32_t n, const char *const *text, const uint32_t *len,
                     size_t (*to_bytes)(void *ctx, int32_t id, const char *s, uint32_t n, unsigned char *out),
                     void *ctx, char *err, size_t err_len);
/* Sorts t->added into the two matchers; call once all added tokens are in place. */
int tok_matchers_build(tokenizer *t, char *err, size_t err_len);
/* Splits s at the added tokens of m: pushes each token's id, hands the text between to fn. */
int tok_split_added(const tokenizer *t, const tok_matcher *m, tok_scratch *sc, const char *s, size_t n,
                    tok_sink *sink, tok_text_fn fn);

/* tokenizer_bpe.c: parses a parsed tokenizer.json (a jansson json_t *) into t; 0 or -1 with err. */
int tok_bpe_load(tokenizer *t, void *json_root, char *err, size_t err_len);
void tok_bpe_free(tok_bpe *b);
/* Encodes one segment of raw text that holds no added token of the raw pass. */
int tok_bpe_encode_text(const tokenizer *t, tok_scratch *sc, const char *s, size_t n, tok_sink *sink);
void tok_bpe_scratch_free(tok_scratch *sc);

/* tokenizer_gguf.c: the tokenizer.ggml.* keys of a GGUF file (path, or its bytes) into t, as tok_bpe_load does for
 * tokenizer.json (BOS, EOS and add_bos_token included); 0 or -1 with err. */
int tok_gguf_load(tokenizer *t, const char *path, char *err, size_t err_len);
int tok_gguf_load_buffer(tokenizer *t, const void *buf, size_t len, char *err, size_t err_len);
/* tokenizer.c: a SentencePiece model already opened (p, owned by t from here on) into t, as for tokenizer.model. */
int tok_spm_load_opened(tokenizer *t, tok_spm *p, char *err, size_t err_len);

/* tokenizer_spm.cc: the extern "C" shim over sentencepiece::SentencePieceProcessor. */
tok_spm *tok_spm_open(const char *path, char *err, size_t err_len);
/* The same from a serialized ModelProto (a tokenizer.model file's bytes). */
tok_spm *tok_spm_open_bytes(const void *buf, size_t len, char *err, size_t err_len);
void tok_spm_close(tok_spm *p);
int32_t tok_spm_size(const tok_spm *p);
/* The piece's spelling, valid while p lives. */
const char *tok_spm_piece(const tok_spm *p, int32_t id, size_t *len);
/* bit 0 control, bit 1 unknown, bit 2 byte, bit 3 unused */
int tok_spm_kind(const tok_spm *p, int32_t id);
int32_t tok_spm_bos(const tok_spm *p);
int32_t tok_spm_eos(const tok_spm *p);
/* True when the model prefixes text with "▁" (its normalizer's add_dummy_prefix). */
bool tok_spm_dummy_prefix(const tok_spm *p);
/* Encodes s into ids (at most cap written); returns the id count, or -1 with err. */
int64_t tok_spm_encode(const tok_spm *p, const char *s, size_t n, int32_t *ids, int64_t cap, char *err,
                       size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
