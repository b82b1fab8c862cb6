/* models/tokenizer_table.h — what the tokenizer's front (tokenizer.c) and its BPE back end (tokenizer_bpe.c) share,
 * not an interface for other folders: the tokenizer object, its per-id tables, added-token matching and the id sink.
 * Arrows run one way: tokenizer.c → tokenizer_bpe.c → tokenizer_table.c, and tokenizer.c → tokenizer_spm.cc. */
#ifndef AAH_TOKENIZER_TABLE_H
#define AAH_TOKENIZER_TABLE_H

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
typedef struct tok_spm tok_spm;   /* tokenizer_spm.cc (tokenizer_spm.h) */

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

/* tokenizer_table.c */
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

#ifdef __cplusplus
}
#endif
#endif
