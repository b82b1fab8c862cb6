/* models/tokenizer_gguf.c — the tokenizer of a GGUF file (tokenizer.ggml.*) as the byte-level BPE of tokenizer_bpe.c:
 * the tokens, their types and the merges are rebuilt into the tokenizer.json object that a Hugging Face export of
 * the same tokenizer holds (model.vocab, model.merges, added_tokens, and the normalizer / pre-tokenizer that
 * llama.cpp's `pre` name stands for), so both formats run through one implementation and give the same ids. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytebuf.h"
#include "models/errf.h"
#include "models/gguf.h"
#include "models/gguf_model.h"
#include "models/tokenizer_bpe.h"
#include "models/tokenizer_gguf.h"

/* llama.cpp's token types (llama_token_type / gguf TokenType). */
enum { GT_NORMAL = 1, GT_UNKNOWN = 2, GT_CONTROL = 3, GT_USER_DEFINED = 4, GT_UNUSED = 5, GT_BYTE = 6 };

/* Qwen2/Qwen3's and Llama 3's pre-tokenizer splits (their tokenizer.json Split patterns). */
static const char tg_qwen2_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
	"\\s+(?!\\S)|\\s+";
static const char tg_llama3_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *gguf_pre_pattern(const char *pre, bool *nfc)
{
	*nfc = !strcmp(pre, "qwen2");
	if (*nfc)
		return tg_qwen2_pattern;
	if (!strcmp(pre, "llama-bpe"))
		return tg_llama3_pattern;
	return NULL;
}

static json_t *tg_bytelevel(bool use_regex)
{
	return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0,
	                 "use_regex", use_regex);
}

/* The normalizer and pre-tokenizer of llama.cpp's pre-tokenizer name into root; -1 for a name we cannot run. */
static int tg_pretok(json_t *root, const gguf_str *pre, char *err, size_t err_len)
{
	const char *pattern = NULL;
	bool nfc = false;
	if (!pre || (pre->len == 7 && !memcmp(pre->s, "default", 7)) || (pre->len == 5 && !memcmp(pre->s, "gpt-2", 5))) {
		json_object_set_new(root, "pre_tokenizer", tg_bytelevel(true));
		return 0;
	}
	if (pre->len == 5 && !memcmp(pre->s, "qwen2", 5)) {
		pattern = tg_qwen2_pattern;
		nfc = true;
	} else if ((pre->len == 9 && !memcmp(pre->s, "llama-bpe", 9)) || (pre->len == 6 && !memcmp(pre->s, "llama3", 6))) {
		pattern = tg_llama3_pattern;
	} else {
		aah_errf(err, err_len, "tokenizer.ggml.pre '%.*s' is not supported (default, gpt-2, qwen2, llama-bpe)",
		         (int)(pre->len > 64 ? 64 : pre->len), pre->s);
		return -1;
	}
	json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", pattern, "behavior",
	                          "Isolated", "invert", 0);
	json_object_set_new(root, "pre_tokenizer",
	                    json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split, tg_bytelevel(false)));
	if (nfc)
		json_object_set_new(root, "normalizer", json_pack("{s:s}", "type", "NFC"));
	return 0;
}

/* Reads an optional token id key into *id (left alone when absent); -1 when it is not an id of the vocabulary. */
static int tg_token_id(const gguf_file *g, const char *key, uint64_t n_tokens, int32_t *id, char *err,
                       size_t err_len)
{
	int64_t v;
	int r = gguf_get_int(g, key, &v, err, err_len);
	if (r < 0)
		return -1;
	if (r == 1) {
		if (v < 0 || (uint64_t)v >= n_tokens) {
			aah_errf(err, err_len, "key '%s' is %lld, not a token id (0 to %llu)", key, (long long)v,
			         (unsigned long long)n_tokens - 1);
			return -1;
		}
		*id = (int32_t)v;
	}
	return 0;
}

/* g's tokens (a non-empty array of strings) and token types (NULL when absent, else one int32 per token); -1 with err. */
static int tg_token_arrays(const gguf_file *g, const gguf_kv **tokens, const gguf_kv **types, char *err,
                           size_t err_len)
{
	const gguf_kv *tk = gguf_find_kv(g, "tokenizer.ggml.tokens"), *ty = gguf_find_kv(g, "tokenizer.ggml.token_type");
	if (!tk || tk->type != GGUF_TYPE_ARRAY || tk->arr_type != GGUF_TYPE_STRING || tk->n == 0 || tk->n > (1u << 22)) {
		aah_errf(err, err_len, "key 'tokenizer.ggml.tokens' must be a non-empty array of at most 2^22 strings");
		return -1;
	}
	if (ty && (ty->type != GGUF_TYPE_ARRAY || ty->n != tk->n ||
	           (ty->arr_type != GGUF_TYPE_INT32 && ty->arr_type != GGUF_TYPE_UINT32))) {
		aah_errf(err, err_len, "key 'tokenizer.ggml.token_type' must be an array of %llu int32",
		         (unsigned long long)tk->n);
		return -1;
	}
	*tokens = tk;
	*types = ty;
	return 0;
}

/* Builds the tokenizer.json object of g's BPE tokenizer; NULL with err. */
static json_t *tg_json(const gguf_file *g, char *err, size_t err_len)
{
	gguf_str model, pre;
	int rm = gguf_get_str(g, "tokenizer.ggml.model", &model, err, err_len);
	if (rm <= 0) {
		if (rm == 0) aah_errf(err, err_len, "key 'tokenizer.ggml.model' is missing (the file holds no tokenizer)");
		return NULL;
	}
	if (!(model.len == 4 && !memcmp(model.s, "gpt2", 4))) {
		aah_errf(err, err_len, "tokenizer.ggml.model '%.*s' is not supported (gpt2, byte-level BPE, and llama, "
		         "SentencePiece)",
		         (int)(model.len > 32 ? 32 : model.len), model.s);
		return NULL;
	}
	const gguf_kv *tokens, *types;
	if (tg_token_arrays(g, &tokens, &types, err, err_len))
		return NULL;
	const gguf_kv *merges = gguf_find_kv(g, "tokenizer.ggml.merges");
	if (!merges || merges->type != GGUF_TYPE_ARRAY || merges->arr_type != GGUF_TYPE_STRING) {
		aah_errf(err, err_len, "key 'tokenizer.ggml.merges' must be an array of strings (a gpt2 tokenizer needs it)");
		return NULL;
	}
	int rp = gguf_get_str(g, "tokenizer.ggml.pre", &pre, err, err_len);
	if (rp < 0)
		return NULL;
	json_t *root = json_object(), *vocab = json_object(), *m = json_array(), *added = json_array();
	json_t *jmodel = json_pack("{s:s, s:o, s:o, s:b}", "type", "BPE", "vocab", vocab, "merges", m, "ignore_merges", 0);
	if (!root || !jmodel || !added) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	json_object_set_new(root, "model", jmodel);
	json_object_set_new(root, "added_tokens", added);
	json_object_set_new(root, "decoder", tg_bytelevel(true));
	if (tg_pretok(root, rp == 1 ? &pre : NULL, err, err_len))
		goto fail;
	for (uint64_t i = 0; i < tokens->n; i++) {
		const gguf_str *s = &tokens->strs[i];
		int64_t ty = types ? gguf_arr_int(types, i) : GT_NORMAL;
		if (ty == GT_UNUSED)
			continue;   /* llama.cpp's [PAD…] fillers up to the embedding's row count: no token */
		if (memchr(s->s, 0, (size_t)s->len) || s->len == 0) {
			aah_errf(err, err_len, "token %llu is empty or holds a NUL byte", (unsigned long long)i);
			goto fail;
		}
		json_t *text = json_stringn(s->s, (size_t)s->len);
		if (!text) {
			aah_errf(err, err_len, "token %llu is not valid UTF-8", (unsigned long long)i);
			goto fail;
		}
		if (ty == GT_CONTROL || ty == GT_USER_DEFINED) {
			json_array_append_new(added, json_pack("{s:I, s:o, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i,
			                                       "content", text, "special", ty == GT_CONTROL, "normalized", 0,
			                                       "lstrip", 0, "rstrip", 0, "single_word", 0));
			continue;
		}
		if (ty != GT_NORMAL && ty != GT_UNKNOWN && ty != GT_BYTE) {
			json_decref(text);
			aah_errf(err, err_len, "token %llu has type %lld (not a llama.cpp token type)", (unsigned long long)i,
			         (long long)ty);
			goto fail;
		}
		const char *key = json_string_value(text);
		if (json_object_get(vocab, key)) {
			aah_errf(err, err_len, "token %llu '%.64s' appears twice in tokenizer.ggml.tokens", (unsigned long long)i,
			         key);
			json_decref(text);
			goto fail;
		}
		json_object_set_new(vocab, key, json_integer((json_int_t)i));
		json_decref(text);
	}
	for (uint64_t i = 0; i < merges->n; i++) {
		json_t *s = json_stringn(merges->strs[i].s, (size_t)merges->strs[i].len);
		if (!s) {
			aah_errf(err, err_len, "merge %llu is not valid UTF-8", (unsigned long long)i);
			goto fail;
		}
		json_array_append_new(m, s);
	}
	return root;
fail:
	json_decref(root);
	return NULL;
}

/* ---- a SentencePiece model rebuilt from the GGUF's pieces ---- */

/* A protobuf message grows in an aah_bytebuf (wire format: varint keys and lengths, 32-bit floats little-endian);
 * a failed append is seen once, at the end, in its oom. */
static void pb_varint(aah_bytebuf *b, uint64_t v)
{
	unsigned char t[10];
	size_t n = 0;
	do {
		t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	aah_bytebuf_put(b, t, n);
}

/* int32 -1 is its 64-bit two's complement, as protobuf's */
static void pb_uint(aah_bytebuf *b, uint32_t field, uint64_t v)
{
	pb_varint(b, (uint64_t)field << 3);
	pb_varint(b, v);
}

static void pb_bytes(aah_bytebuf *b, uint32_t field, const void *s, size_t n)
{
	pb_varint(b, (uint64_t)field << 3 | 2);
	pb_varint(b, n);
	aah_bytebuf_put(b, s, n);
}

static void pb_float(aah_bytebuf *b, uint32_t field, float f)
{
	unsigned char t[4];
	uint32_t u;
	memcpy(&u, &f, 4);
	for (int i = 0; i < 4; i++)
		t[i] = (unsigned char)(u >> (8 * i));
	pb_varint(b, (uint64_t)field << 3 | 5);
	aah_bytebuf_put(b, t, 4);
}

/* The ModelProto (sentencepiece_model.proto) that llama.cpp's reading of a 'llama' tokenizer stands for: every
 * token a piece with its score and type (llama.cpp's token types are SentencePiece's), BPE (llama.cpp merges by
 * score, as SentencePiece's BPE does), bytes as fallback when the file has byte tokens, and the normalizer llama.cpp
 * applies — none, spaces as "▁", a "▁" in front unless tokenizer.ggml.add_space_prefix is false — written as
 * sentencepiece reads it. Into *out (malloc'd); -1 with err. */
static int tg_spm_proto(const gguf_file *g, unsigned char **out, size_t *out_len, char *err, size_t err_len)
{
	const gguf_kv *tokens, *types;
	if (tg_token_arrays(g, &tokens, &types, err, err_len))
		return -1;
	const uint64_t n = tokens->n;
	const gguf_kv *scores = gguf_find_kv(g, "tokenizer.ggml.scores");
	if (scores && (scores->type != GGUF_TYPE_ARRAY || scores->n != n || scores->arr_type != GGUF_TYPE_FLOAT32)) {
		aah_errf(err, err_len, "key 'tokenizer.ggml.scores' must be an array of %llu float32", (unsigned long long)n);
		return -1;
	}
	bool space_prefix = true;   /* llama.cpp's default for a 'llama' tokenizer */
	if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &space_prefix, err, err_len) < 0)
		return -1;
	int32_t bos = -1, eos = -1;   /* left -1 when the keys are absent */
	if (tg_token_id(g, "tokenizer.ggml.bos_token_id", n, &bos, err, err_len) ||
	    tg_token_id(g, "tokenizer.ggml.eos_token_id", n, &eos, err, err_len))
		return -1;
	aah_bytebuf b = { 0 }, piece = { 0 };
	int64_t unk = -1;
	bool bytes = false;
	for (uint64_t i = 0; i < n; i++) {
		const gguf_str *s = &tokens->strs[i];
		const int64_t ty = types ? gguf_arr_int(types, i) : GT_NORMAL;
		if (s->len == 0 || memchr(s->s, 0, (size_t)s->len)) {
			aah_errf(err, err_len, "token %llu is empty or holds a NUL byte", (unsigned long long)i);
			goto fail;
		}
		if (ty < GT_NORMAL || ty > GT_BYTE) {
			aah_errf(err, err_len, "token %llu has type %lld (not a llama.cpp token type)", (unsigned long long)i,
			         (long long)ty);
			goto fail;
		}
		if (ty == GT_UNKNOWN) {
			if (unk >= 0) {
				aah_errf(err, err_len, "tokens %lld and %llu both have the unknown type", (long long)unk,
				         (unsigned long long)i);
				goto fail;
			}
			unk = (int64_t)i;
		}
		bytes = bytes || ty == GT_BYTE;
		piece.n = 0;
		pb_bytes(&piece, 1, s->s, (size_t)s->len);
		pb_float(&piece, 2, scores ? (float)gguf_arr_float(scores, i) : 0.0f);
		pb_uint(&piece, 3, (uint64_t)ty);
		if (piece.oom)
			break;
		pb_bytes(&b, 1, piece.p, piece.n);
	}
	if (!b.oom && !piece.oom && unk < 0) {
		aah_errf(err, err_len, "a SentencePiece ('llama') tokenizer needs one token of the unknown type (2) in "
		         "tokenizer.ggml.token_type");
		goto fail;
	}
	aah_bytebuf spec = { 0 };
	pb_uint(&spec, 3, 2);   /* model_type BPE */
	pb_uint(&spec, 35, bytes);   /* byte_fallback */
	pb_uint(&spec, 40, (uint64_t)unk);
	pb_uint(&spec, 41, (uint64_t)(int64_t)bos);
	pb_uint(&spec, 42, (uint64_t)(int64_t)eos);
	pb_uint(&spec, 43, (uint64_t)(int64_t)-1);   /* pad_id: none */
	pb_bytes(&spec, 45, tokens->strs[unk].s, (size_t)tokens->strs[unk].len);
	if (bos >= 0)
		pb_bytes(&spec, 46, tokens->strs[bos].s, (size_t)tokens->strs[bos].len);
	if (eos >= 0)
		pb_bytes(&spec, 47, tokens->strs[eos].s, (size_t)tokens->strs[eos].len);
	pb_bytes(&b, 2, spec.p, spec.n);
	bool spec_oom = spec.oom;
	aah_bytebuf_free(&spec);
	aah_bytebuf norm = { 0 };
	pb_bytes(&norm, 1, "identity", 8);
	pb_uint(&norm, 3, space_prefix);   /* add_dummy_prefix */
	pb_uint(&norm, 4, 0);              /* remove_extra_whitespaces: llama.cpp keeps every space */
	pb_uint(&norm, 5, 1);              /* escape_whitespaces: " " as "▁" */
	pb_bytes(&b, 3, norm.p, norm.n);
	spec_oom = spec_oom || norm.oom;
	aah_bytebuf_free(&norm);
	if (b.oom || piece.oom || spec_oom) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	aah_bytebuf_free(&piece);
	*out = b.p;
	*out_len = b.n;
	return 0;
fail:
	aah_bytebuf_free(&b);
	aah_bytebuf_free(&piece);
	return -1;
}

/* A SentencePiece ('llama') tokenizer. aah-convert quantize embeds the tokenizer.model bytes under GGUF_SPM_MODEL_KEY
 * (llama.cpp ignores the key): that model when present, since its normalizer may be more than llama.cpp's reading;
 * else the model rebuilt from the pieces as llama.cpp reads them (tg_spm_proto). Opened by sentencepiece either way. */
static int tg_spm(tokenizer *t, const gguf_file *g, char *err, size_t err_len)
{
	const gguf_kv *m = gguf_find_kv(g, GGUF_SPM_MODEL_KEY);
	if (m) {
		if (m->type != GGUF_TYPE_ARRAY || (m->arr_type != GGUF_TYPE_UINT8 && m->arr_type != GGUF_TYPE_INT8)) {
			aah_errf(err, err_len, "key '%s' must be an array of bytes (a tokenizer.model)", GGUF_SPM_MODEL_KEY);
			return -1;
		}
		tok_spm *p = tok_spm_open_bytes(m->data, (size_t)m->n, err, err_len);
		return p ? tok_spm_load_opened(t, p, err, err_len) : -1;
	}
	unsigned char *proto;
	size_t len;
	if (tg_spm_proto(g, &proto, &len, err, err_len))
		return -1;
	tok_spm *p = tok_spm_open_bytes(proto, len, err, err_len);
	free(proto);
	return p ? tok_spm_load_opened(t, p, err, err_len) : -1;
}

/* Parses the GGUF at g into t (zeroed by the caller): the BPE tables (or the SentencePiece model), then BOS/EOS and
 * add_bos_token. */
static int tg_load_parsed(tokenizer *t, const gguf_file *g, char *err, size_t err_len)
{
	gguf_str model;
	if (gguf_get_str(g, "tokenizer.ggml.model", &model, err, err_len) == 1 && model.len == 5 &&
	    !memcmp(model.s, "llama", 5)) {
		if (tg_spm(t, g, err, err_len))
			return -1;
	} else {
		json_t *root = tg_json(g, err, err_len);
		if (!root)
			return -1;
		int rc = tok_bpe_load(t, root, err, err_len);
		json_decref(root);
		if (rc)
			return -1;
	}
	/* the file's ids and add_bos_token win over the model's own (as tokenizer_config.json does beside a .model) */
	bool ab = t->add_bos;
	if (tg_token_id(g, "tokenizer.ggml.bos_token_id", (uint64_t)t->n_vocab, &t->bos, err, err_len) ||
	    tg_token_id(g, "tokenizer.ggml.eos_token_id", (uint64_t)t->n_vocab, &t->eos, err, err_len) ||
	    gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &ab, err, err_len) < 0)
		return -1;
	t->add_bos = ab && t->bos >= 0;
	if (t->bos >= 0 && (t->bos >= t->n_vocab || !(t->flags[t->bos] & TOK_FLAG_PRESENT))) {
		aah_errf(err, err_len, "tokenizer.ggml.bos_token_id %d is an unused token", (int)t->bos);
		return -1;
	}
	if (t->eos >= 0 && (t->eos >= t->n_vocab || !(t->flags[t->eos] & TOK_FLAG_PRESENT))) {
		aah_errf(err, err_len, "tokenizer.ggml.eos_token_id %d is an unused token", (int)t->eos);
		return -1;
	}
	return 0;
}

int tok_gguf_load_buffer(tokenizer *t, const void *buf, size_t len, char *err, size_t err_len)
{
	gguf_file g;
	if (gguf_parse(&g, buf, len, err, err_len))
		return -1;
	int rc = tg_load_parsed(t, &g, err, err_len);
	gguf_free(&g);
	return rc;
}

tokenizer *tokenizer_from_gguf(const void *buf, size_t len, char *err, size_t err_len)
{
	tokenizer *t = calloc(1, sizeof *t);
	if (!t) {
		aah_errf(err, err_len, "out of memory");
		return NULL;
	}
	t->bos = t->eos = -1;
	if (tok_gguf_load_buffer(t, buf, len, err, err_len)) {
		tokenizer_free(t);
		return NULL;
	}
	return t;
}

int tok_gguf_load(tokenizer *t, const char *path, char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size == 0) {
		aah_errf(err, err_len, "%s: cannot read the file", path);
		if (fd >= 0) close(fd);
		return -1;
	}
	void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		aah_errf(err, err_len, "%s: mmap failed", path);
		return -1;
	}
	char msg[512] = "";
	int rc = tok_gguf_load_buffer(t, map, (size_t)sb.st_size, msg, sizeof msg);
	munmap(map, (size_t)sb.st_size);
	if (rc)
		aah_errf(err, err_len, "%s: %s", path, msg);
	return rc;
}
