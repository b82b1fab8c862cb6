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
	const gguf_kv *tokens = gguf_find_kv(g, "tokenizer.ggml.tokens");
	const gguf_kv *types = gguf_find_kv(g, "tokenizer.ggml.token_type");
	const gguf_kv *merges = gguf_find_kv(g, "tokenizer.ggml.merges");
	if (!tokens || tokens->type != GGUF_TYPE_ARRAY || tokens->arr_type != GGUF_TYPE_STRING || tokens->n == 0 ||
	    tokens->n > (1u << 22)) {
		aah_errf(err, err_len, "key 'tokenizer.ggml.tokens' must be a non-empty array of at most 2^22 strings");
		return NULL;
	}
	if (types && (types->type != GGUF_TYPE_ARRAY || types->n != tokens->n ||
	              (types->arr_type != GGUF_TYPE_INT32 && types->arr_type != GGUF_TYPE_UINT32))) {
		aah_errf(err, err_len, "key 'tokenizer.ggml.token_type' must be an array of %llu int32",
		         (unsigned long long)tokens->n);
		return NULL;
	}
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

/* A SentencePiece ('llama') tokenizer: GGUF keeps only its pieces, scores and types, not the normalizer that decides
 * the ids, so only the model itself will do — aah-convert quantize embeds the tokenizer.model bytes under
 * GGUF_SPM_MODEL_KEY (llama.cpp ignores the key). Opened by sentencepiece as tokenizer.model is. */
static int tg_spm(tokenizer *t, const gguf_file *g, char *err, size_t err_len)
{
	const gguf_kv *m = gguf_find_kv(g, GGUF_SPM_MODEL_KEY);
	if (!m || m->type != GGUF_TYPE_ARRAY || (m->arr_type != GGUF_TYPE_UINT8 && m->arr_type != GGUF_TYPE_INT8)) {
		aah_errf(err, err_len, "a SentencePiece ('llama') tokenizer needs its model under '%s' (aah-convert quantize "
		         "writes it; files without it are not supported)", GGUF_SPM_MODEL_KEY);
		return -1;
	}
	tok_spm *p = tok_spm_open_bytes(m->data, (size_t)m->n, err, err_len);
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
