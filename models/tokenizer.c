/* models/tokenizer.c — the tokenizer's front: loading (tokenizer.json or tokenizer.model, plus tokenizer_config.json),
 * encode dispatch (added tokens split out by tokenizer_table.c, the rest to a back end), decoding and the streaming
 * UTF-8-safe decoder. */
#include "models/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "models/errf.h"
#include "models/gguf_model.h"
#include "models/tokenizer_bpe.h"
#include "models/tokenizer_gguf.h"
#include "models/tokenizer_spm.h"
#include "models/tokenizer_table.h"
#include "models/utf8.h"


/* ---- SentencePiece glue ---- */

static size_t spm_to_bytes(void *ctx, int32_t id, const char *s, uint32_t n, unsigned char *out)
{
	const tok_spm *p = ctx;
	int kind = tok_spm_kind(p, id);
	if (kind & 2) {   /* unknown: sentencepiece decodes it as " ⁇ " */
		memcpy(out, " \xE2\x81\x87 ", 5);
		return 5;
	}
	if ((kind & 4) && n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x') {   /* byte piece <0xAB> */
		out[0] = (unsigned char)strtol(s + 3, NULL, 16);
		return 1;
	}
	size_t o = 0;
	for (uint32_t i = 0; i < n;) {   /* "▁" (U+2581) stands for a space */
		if (!(kind & 1) && i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
			out[o++] = ' ';
			i += 3;
		} else
			out[o++] = (unsigned char)s[i++];
	}
	return o;
}

static int spm_text(const tokenizer *t, tok_scratch *sc, const char *s, size_t n, tok_sink *sink)
{
	int64_t room = sink->cap > sink->n ? sink->cap - sink->n : 0;
	int64_t got = tok_spm_encode(t->spm, s, n, room ? sink->ids + sink->n : NULL, room, sc->err, sc->err_len);
	if (got < 0) return -1;
	sink->n += got;
	return 0;
}

static int spm_load(tokenizer *t, const char *path, char *err, size_t err_len)
{
	tok_spm *p = tok_spm_open(path, err, err_len);
	return p ? tok_spm_load_opened(t, p, err, err_len) : -1;
}

int tok_spm_load_opened(tokenizer *t, tok_spm *p, char *err, size_t err_len)
{
	t->kind = TOK_KIND_SPM;
	t->spm = p;
	int32_t n = tok_spm_size(t->spm);
	const char **text = calloc((size_t)n + 1, sizeof *text);
	uint32_t *len = calloc((size_t)n + 1, sizeof *len);
	int rc = -1;
	if (!text || !len) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	int32_t n_control = 0;
	for (int32_t i = 0; i < n; i++) {
		size_t l;
		text[i] = tok_spm_piece(t->spm, i, &l);
		len[i] = (uint32_t)l;
		if ((tok_spm_kind(t->spm, i) & 1) && l) n_control++;
	}
	if (tok_tables_build(t, n, text, len, spm_to_bytes, t->spm, err, err_len)) goto out;
	/* Control pieces (<s>, </s>, …) written in the text are read as those tokens, as llama.cpp does;
	 * sentencepiece itself would spell them out piece by piece. */
	t->added = calloc((size_t)n_control + 1, sizeof *t->added);
	if (!t->added) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	for (int32_t i = 0; i < n; i++) {
		if (!(tok_spm_kind(t->spm, i) & 1) || !len[i]) continue;
		tok_added *a = &t->added[t->n_added++];
		a->content = strndup(text[i], len[i]);
		if (!a->content) {
			aah_errf(err, err_len, "out of memory");
			goto out;
		}
		a->len = len[i];
		a->id = i;
		a->special = true;
		t->flags[i] |= TOK_FLAG_SPECIAL | TOK_FLAG_ADDED;
	}
	if (tok_matchers_build(t, err, err_len)) goto out;
	t->bos = tok_spm_bos(t->spm);
	t->eos = tok_spm_eos(t->spm);
	t->add_bos = t->bos >= 0;   /* sentencepiece models (Llama 2 style) start with BOS unless the config says not */
	t->spm_strip_space = tok_spm_dummy_prefix(t->spm);
	rc = 0;
out:
	free(text);
	free(len);
	return rc;
}

/* ---- tokenizer_config.json ---- */

static int32_t token_id_of(const tokenizer *t, const char *s)
{
	for (int32_t i = 0; i < t->n_added; i++)
		if (strcmp(t->added[i].content, s) == 0) return t->added[i].id;
	for (int32_t i = 0; i < t->n_vocab; i++)
		if ((t->flags[i] & TOK_FLAG_PRESENT) && strcmp(t->text + t->text_off[i], s) == 0) return i;
	return -1;
}

/* bos_token / eos_token: a string, an {"content": …} object, or null (no such token). */
static int config_token(const tokenizer *t, json_t *cfg, const char *key, int32_t *id, char *err, size_t err_len)
{
	json_t *v = json_object_get(cfg, key);
	if (!v) return 0;
	if (json_is_null(v)) {
		*id = -1;
		return 0;
	}
	if (json_is_object(v)) v = json_object_get(v, "content");
	if (!json_is_string(v)) {
		aah_errf(err, err_len, "tokenizer_config.json: %s is neither a string nor null", key);
		return -1;
	}
	int32_t found = token_id_of(t, json_string_value(v));
	if (found < 0) {
		aah_errf(err, err_len, "tokenizer_config.json: %s \"%s\" is not in the vocabulary", key,
		         json_string_value(v));
		return -1;
	}
	*id = found;
	return 0;
}

static int config_load(tokenizer *t, const char *path, char *err, size_t err_len)
{
	json_error_t jerr;
	json_t *cfg = json_load_file(path, 0, &jerr);
	if (!cfg) {
		aah_errf(err, err_len, "%s:%d: %s", path, jerr.line, jerr.text);
		return -1;
	}
	int rc = -1;
	if (!json_is_object(cfg)) {
		aah_errf(err, err_len, "%s: not a JSON object", path);
		goto out;
	}
	if (config_token(t, cfg, "bos_token", &t->bos, err, err_len) ||
	    config_token(t, cfg, "eos_token", &t->eos, err, err_len))
		goto out;
	json_t *ab = json_object_get(cfg, "add_bos_token");
	if (json_is_boolean(ab)) t->add_bos = json_is_true(ab);
	if (t->bos < 0) t->add_bos = false;
	rc = 0;
out:
	json_decref(cfg);
	return rc;
}

/* ---- load / free ---- */

static void tokenizer_clear(tokenizer *t)
{
	if (t->bpe) tok_bpe_free(t->bpe);
	if (t->spm) tok_spm_close(t->spm);
	for (int32_t i = 0; i < t->n_added; i++) free(t->added[i].content);
	free(t->added);
	free(t->match_raw.tok);
	free(t->match_norm.tok);
	free(t->text);
	free(t->text_off);
	free(t->bytes);
	free(t->bytes_off);
	free(t->flags);
	memset(t, 0, sizeof *t);
	t->bos = t->eos = -1;
}

static int json_tokenizer_load(tokenizer *t, const char *path, char *err, size_t err_len)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr);
	if (!root) {
		aah_errf(err, err_len, "%s:%d: %s", path, jerr.line, jerr.text);
		return -1;
	}
	char msg[512] = "";
	int rc = tok_bpe_load(t, root, msg, sizeof msg);
	if (rc) aah_errf(err, err_len, "%s: %s", path, msg);
	json_decref(root);
	return rc;
}

tokenizer *tokenizer_load(const char *dir, char *err, size_t err_len)
{
	if (!dir) {
		aah_errf(err, err_len, "no tokenizer directory given");
		return NULL;
	}
	size_t dl = strlen(dir);
	char *path = malloc(dl + 32);
	tokenizer *t = calloc(1, sizeof *t);
	if (!path || !t) {
		free(path);
		free(t);
		aah_errf(err, err_len, "out of memory");
		return NULL;
	}
	tokenizer_clear(t);
	int rc = -1;
	char gguf[4096];
	int g = gguf_model_path(dir, gguf, sizeof gguf, err, err_len);
	if (g != 0) {   /* a GGUF model carries its tokenizer inside */
		free(path);
		if (g == 1 && tok_gguf_load(t, gguf, err, err_len) == 0) return t;
		tokenizer_free(t);
		return NULL;
	}
	snprintf(path, dl + 32, "%s/tokenizer.json", dir);
	bool have_json = aah_is_file(path);
	char *model_path = malloc(dl + 32);
	if (model_path) snprintf(model_path, dl + 32, "%s/tokenizer.model", dir);
	bool have_model = model_path && aah_is_file(model_path);
	if (have_json) {
		rc = json_tokenizer_load(t, path, err, err_len);
		/* A tokenizer.json we cannot run (e.g. a Metaspace one) still leaves the SentencePiece model. */
		if (rc && have_model) {
			tokenizer_clear(t);
			rc = spm_load(t, model_path, err, err_len);
		}
	} else if (have_model) {
		rc = spm_load(t, model_path, err, err_len);
	} else {
		aah_errf(err, err_len, "%s: neither tokenizer.json nor tokenizer.model", dir);
	}
	if (rc == 0) {
		snprintf(path, dl + 32, "%s/tokenizer_config.json", dir);
		if (aah_is_file(path)) rc = config_load(t, path, err, err_len);
	}
	if (rc == 0 && t->eos < 0) {   /* no config: GPT-2 style files still name their end of text */
		t->eos = token_id_of(t, "<|endoftext|>");
	}
	free(path);
	free(model_path);
	if (rc) {
		tokenizer_free(t);
		return NULL;
	}
	return t;
}

void tokenizer_free(tokenizer *t)
{
	if (!t) return;
	tokenizer_clear(t);
	free(t);
}

/* ---- encode ---- */

int64_t tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t *ids,
                         int64_t cap, char *err, size_t err_len)
{
	if (!t || (!text && len) || cap < 0 || (!ids && cap > 0)) {
		aah_errf(err, err_len, "bad arguments");
		return -1;
	}
	size_t bad = aah_utf8_check((const unsigned char *)text, len);
	if (bad) {
		aah_errf(err, err_len, "text is not valid UTF-8 (byte %zu)", bad - 1);
		return -1;
	}
	tok_sink sink = {ids, cap, 0};
	if (add_special && t->add_bos && t->bos >= 0) tok_sink_push(&sink, t->bos);
	tok_scratch sc = {err, err_len, NULL};
	int rc = tok_split_added(t, &t->match_raw, &sc, text, len, &sink,
	                         t->kind == TOK_KIND_BPE ? tok_bpe_encode_text : spm_text);
	tok_bpe_scratch_free(&sc);
	return rc ? -1 : sink.n;
}

/* ---- decode ---- */

int64_t tokenizer_token_bytes(const tokenizer *t, int32_t id, char *out, int64_t cap)
{
	if (!t || id < 0 || id >= t->n_vocab) return -1;
	int64_t n = t->bytes_off[id + 1] - t->bytes_off[id];
	if (out && cap > 0) memcpy(out, t->bytes + t->bytes_off[id], (size_t)(n < cap ? n : cap));
	return n;
}

/* Output that counts past its capacity, so callers learn the size they need. */
typedef struct tok_out {
	char *buf;
	int64_t cap;
	int64_t n;
} tok_out;

static void out_put(tok_out *o, const void *p, size_t n)
{
	if (o->n < o->cap) {
		int64_t room = o->cap - o->n;
		memcpy(o->buf + o->n, p, (size_t)((int64_t)n < room ? (int64_t)n : room));
	}
	o->n += (int64_t)n;
}

static void out_fffd(tok_out *o) { out_put(o, "\xEF\xBF\xBD", 3); }

/* Feeds bytes through a UTF-8 repairer: complete characters go out, an incomplete one waits in pend
 * (at most 3 bytes), and every maximal invalid subpart becomes one U+FFFD — the substitution that Rust's
 * from_utf8_lossy (Hugging Face's decode) and the WHATWG decoder make. */
static void utf8_feed(unsigned char *pend, int32_t *npend, const unsigned char *in, size_t n, tok_out *o)
{
	int32_t k = *npend;
	for (size_t i = 0; i < n; i++) {
		unsigned char b = in[i];
		if (k > 0) {
			unsigned char lo = 0x80, hi = 0xBF;
			if (k == 1) aah_utf8_second_range(pend[0], &lo, &hi);
			if (b >= lo && b <= hi) {
				pend[k++] = b;
				if (k == aah_utf8_seq_len(pend[0])) {
					out_put(o, pend, (size_t)k);
					k = 0;
				}
				continue;
			}
			out_fffd(o);   /* the held prefix is a maximal invalid subpart; b starts afresh */
			k = 0;
		}
		int len = aah_utf8_seq_len(b);
		if (len == 1) out_put(o, &b, 1);
		else if (len == 0) out_fffd(o);
		else pend[k++] = b;
	}
	*npend = k;
}

int64_t tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, char *out,
                         int64_t cap)
{
	if (!t || n < 0 || (!ids && n > 0) || cap < 0 || (!out && cap > 0)) return -1;
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= t->n_vocab) return -1;
	tok_out o = {out, cap, 0};
	unsigned char pend[8];
	int32_t np = 0;
	bool leading = t->spm_strip_space;
	for (int64_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		if (skip_special && (t->flags[id] & TOK_FLAG_SPECIAL)) continue;
		const unsigned char *b = t->bytes + t->bytes_off[id];
		size_t bn = t->bytes_off[id + 1] - t->bytes_off[id];
		/* sentencepiece drops the space of its dummy prefix: the first piece's, after any control tokens */
		if (leading && !(t->flags[id] & TOK_FLAG_SPECIAL)) {
			if (bn && b[0] == ' ') b++, bn--;
			leading = false;
		}
		utf8_feed(pend, &np, b, bn, &o);
	}
	if (np) out_fffd(&o);
	if (o.n < cap) out[o.n] = '\0';
	return o.n;
}

/* ---- small getters ---- */

int32_t tokenizer_vocab_size(const tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t tokenizer_bos(const tokenizer *t) { return t ? t->bos : -1; }
int32_t tokenizer_eos(const tokenizer *t) { return t ? t->eos : -1; }
bool tokenizer_add_bos(const tokenizer *t) { return t && t->add_bos && t->bos >= 0; }

const char *tokenizer_token_text(const tokenizer *t, int32_t id)
{
	if (!t || id < 0 || id >= t->n_vocab) return NULL;
	return t->text + t->text_off[id];
}

bool tokenizer_is_special(const tokenizer *t, int32_t id)
{
	return t && id >= 0 && id < t->n_vocab && (t->flags[id] & TOK_FLAG_SPECIAL);
}

/* ---- streaming ---- */

void tokenizer_stream_init(tokenizer_stream *s, const tokenizer *t, bool skip_special)
{
	memset(s, 0, sizeof *s);
	s->t = t;
	s->skip_special = skip_special;
}

int64_t tokenizer_stream_push(tokenizer_stream *s, int32_t id, char *out, int64_t cap)
{
	const tokenizer *t = s->t;
	if (!t || id < 0 || id >= t->n_vocab || cap < 0 || (!out && cap > 0)) return -1;
	if (s->skip_special && (t->flags[id] & TOK_FLAG_SPECIAL)) return 0;
	tok_out o = {out, cap, 0};
	unsigned char pend[8];
	int32_t np = s->n_pending;
	memcpy(pend, s->pending, sizeof pend);
	utf8_feed(pend, &np, t->bytes + t->bytes_off[id], t->bytes_off[id + 1] - t->bytes_off[id], &o);
	if (o.n > cap) return -1;   /* nothing consumed: the caller may retry with more room */
	memcpy(s->pending, pend, sizeof pend);
	s->n_pending = np;
	return o.n;
}

int64_t tokenizer_stream_flush(tokenizer_stream *s, char *out, int64_t cap)
{
	if (!s->n_pending) return 0;
	if (cap < 3 || !out) return -1;
	memcpy(out, "\xEF\xBF\xBD", 3);
	s->n_pending = 0;
	return 3;
}
