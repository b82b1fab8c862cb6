/* tools/convert/quantize.c — `aah-convert quantize SRC OUT.gguf --type T`: loads SRC as aahd does, maps each tensor
 * to llama.cpp's name, picks its type by llama.cpp's rules (llama-quant.cpp's llama_tensor_get_type for the types
 * here, no importance matrix), quantizes it row by row with the reference quantizers (kernels/quant_ref.c: the blocks
 * llama-quantize writes), and writes the GGUF with the tokenizer.json / tokenizer_config.json tokenizer as
 * tokenizer.ggml.* keys. */
#include "tools/convert/quantize.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/weight_quant.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant.h"
#include "models/aah_config.h"
#include "models/errf.h"
#include "models/gguf.h"
#include "models/gguf_model.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "tools/convert/gguf_write.h"

#define QZ_EXIT_FAIL 1
#define QZ_EXIT_USAGE 2

/* The --type values: llama.cpp's file type number (general.file_type) and the base type of the 2-D weights. */
static const struct {
	const char *name;
	uint32_t ftype;
	aah_dtype base;
} qz_types[] = {
	{ "q8_0", 7, AAH_DTYPE_Q8_0 },   { "q4_0", 2, AAH_DTYPE_Q4_0 }, { "q4_k_m", 15, AAH_DTYPE_Q4_K },
	{ "q5_k_m", 17, AAH_DTYPE_Q5_K }, { "bf16", 32, AAH_DTYPE_BF16 }, { "f16", 1, AAH_DTYPE_F16 },
	{ "f32", 0, AAH_DTYPE_F32 },
};

void quantize_help(FILE *f)
{
	fputs("usage: aah-convert quantize [options] SRC OUT.gguf --type TYPE\n"
	      "\n"
	      "Writes SRC's weights, configuration and tokenizer as one GGUF v3 file that aahd serves (aahd --model\n"
	      "OUT.gguf) and llama.cpp loads: llama.cpp's tensor names (token_embd, blk.N.attn_q, ...), its metadata keys\n"
	      "and tokenizer.ggml.* keys, the chat template of tokenizer_config.json. OUT appears complete or not at all\n"
	      "(written as OUT.partial-XXXXXX, then renamed; an existing OUT is replaced).\n"
	      "\n"
	      "SRC is a Hugging Face model directory (config.json, model.safetensors, tokenizer.json) or a run directory\n"
	      "of checkpoint-STEP/ folders (the highest step unless --step). Qwen3 and Llama; byte-level BPE tokenizers\n"
	      "whose pre-tokenizer llama.cpp names (qwen2, llama-bpe, gpt-2).\n"
	      "\n"
	      "TYPE (norms stay F32 in every type; the blocks are those llama-quantize writes without --imatrix):\n"
	      "  q8_0     every matrix Q8_0 (8.5 bits a weight)\n"
	      "  q4_0     Q4_0, the output head Q6_K\n"
	      "  q4_k_m   Q4_K; Q6_K for the output head, attn_v and ffn_down of the layers llama.cpp's use_more_bits\n"
	      "           picks (the first and last eighth and every third between)\n"
	      "  q5_k_m   the same mix with Q5_K as the base\n"
	      "  bf16, f16, f32  every matrix in that float type (f32: the source's numbers as they are, what\n"
	      "           llama-quantize takes to write the same blocks as the types above)\n"
	      "A matrix whose rows are not whole 256-value blocks falls back to Q8_0 (llama.cpp would use Q5_0/Q5_1,\n"
	      "which aahd does not read), or F16 when not whole 32-value blocks either.\n"
	      "\n"
	      "options:\n"
	      "  --type TYPE            required, one of the above\n"
	      "  --tokenizer DIR        the tokenizer.json / tokenizer_config.json to use (default: SRC's)\n"
	      "  --step N               of a run directory, checkpoint N\n"
	      "  -q, --quiet            print nothing but errors\n"
	      "  -h, --help             this text\n"
	      "\n"
	      "exit status: 0 written, 1 refused or failed (the message says why), 2 bad usage\n",
	      f);
}

/* ---- the tokenizer ---- */

/* llama.cpp's token types. */
enum { QZ_TOK_NORMAL = 1, QZ_TOK_CONTROL = 3, QZ_TOK_USER_DEFINED = 4, QZ_TOK_UNUSED = 5 };

typedef struct qz_tokens {
	char **text;                 /* (n) owned */
	size_t *len;
	int32_t *type;
	int32_t n;
	char **merges;               /* (n_merges) owned, "a b" */
	size_t *merge_len;
	int64_t n_merges;
	const char *pre;             /* static; NULL for SentencePiece */
	float *scores;               /* (n) SentencePiece only */
	unsigned char *spm;          /* the tokenizer.model bytes (SentencePiece only), owned */
	size_t spm_len;
	bool spm_space_prefix;       /* its normalizer's add_dummy_prefix */
	int32_t bos, eos, pad;       /* -1 when none */
	bool add_bos;
	char *chat_template;         /* owned, NULL when none */
} qz_tokens;

static void qz_tokens_free(qz_tokens *t)
{
	for (int32_t i = 0; t->text && i < t->n; i++)
		free(t->text[i]);
	for (int64_t i = 0; t->merges && i < t->n_merges; i++)
		free(t->merges[i]);
	free(t->text);
	free(t->len);
	free(t->type);
	free(t->merges);
	free(t->merge_len);
	free(t->chat_template);
	free(t->scores);
	free(t->spm);
	memset(t, 0, sizeof *t);
}

static bool qz_affixed(const char *s, size_t n, const char *pre, const char *suf)
{
	size_t a = strlen(pre), b = strlen(suf);
	return n >= a + b && !memcmp(s, pre, a) && !memcmp(s + n - b, suf, b);
}

/* llama.cpp's converter (does_token_look_special) makes an added token CONTROL, whatever tokenizer.json's "special"
 * says, when it looks like one: Qwen3's <|fim_prefix|>, <|repo_name|>, ... are not special there. llama.cpp's loader
 * warns of and overrides such a token otherwise. */
static bool qz_looks_special(const char *s, size_t n)
{
	static const char *const named[] = { "<pad>", "<mask>", "<2mass>", "[@BOS@]" };
	for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
		if (n == strlen(named[i]) && !memcmp(s, named[i], n))
			return true;
	return qz_affixed(s, n, "<|", "|>") || qz_affixed(s, n, "<\xef\xbd\x9c", "\xef\xbd\x9c>") || /* <｜ ｜> */
	       qz_affixed(s, n, "<unused", ">");
}

static bool qz_bytelevel(json_t *p, bool use_regex)
{
	const char *ty = json_string_value(json_object_get(p, "type"));
	json_t *ur = json_object_get(p, "use_regex"), *ap = json_object_get(p, "add_prefix_space");
	return ty && !strcmp(ty, "ByteLevel") && (ur ? json_is_true(ur) : true) == use_regex && !json_is_true(ap);
}

/* llama.cpp's name for tokenizer.json's normalizer + pre-tokenizer; NULL when it has none. */
static const char *qz_pre_name(json_t *root)
{
	json_t *pt = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
	const char *nty = json_string_value(json_object_get(norm, "type"));
	bool nfc = nty && !strcmp(nty, "NFC");
	if (norm && !json_is_null(norm) && !nfc)
		return NULL;
	if (qz_bytelevel(pt, true))
		return nfc ? NULL : "gpt-2";
	const char *ty = json_string_value(json_object_get(pt, "type"));
	json_t *list = json_object_get(pt, "pretokenizers");
	if (!ty || strcmp(ty, "Sequence") || json_array_size(list) != 2 || !qz_bytelevel(json_array_get(list, 1), false))
		return NULL;
	json_t *split = json_array_get(list, 0);
	const char *sty = json_string_value(json_object_get(split, "type"));
	const char *beh = json_string_value(json_object_get(split, "behavior"));
	const char *rx = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
	if (!sty || strcmp(sty, "Split") || !beh || strcmp(beh, "Isolated") || !rx ||
	    json_is_true(json_object_get(split, "invert")))
		return NULL;
	static const char *const names[] = { "qwen2", "llama-bpe" };
	for (size_t i = 0; i < 2; i++) {
		bool want_nfc;
		const char *p = gguf_pre_pattern(names[i], &want_nfc);
		if (p && !strcmp(p, rx) && want_nfc == nfc)
			return names[i];
	}
	return NULL;
}

/* A token named in tokenizer_config.json (a string, or {"content": …}) → its id among t's tokens; -1 when absent
 * or null, -2 when named but not a token. */
static int32_t qz_config_token(const qz_tokens *t, json_t *cfg, const char *key)
{
	json_t *v = json_object_get(cfg, key);
	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!json_is_string(v))
		return -1;
	const char *s = json_string_value(v);
	for (int32_t i = 0; i < t->n; i++)
		if (t->type[i] != QZ_TOK_UNUSED && t->len[i] == strlen(s) && !memcmp(t->text[i], s, t->len[i]))
			return i;
	return -2;
}

/* ---- SentencePiece: the pieces of a tokenizer.model (protobuf ModelProto) ---- */

static bool pb_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		unsigned char b = *(*p)++;
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return true;
	}
	return false;
}

/* Skips or reads one field: its number and wire type into field and wt; a length-delimited payload into val, vlen;
 * a varint or fixed32 into num. false on malformed input. */
static bool pb_field(const unsigned char **p, const unsigned char *end, uint32_t *field, int *wt,
                     const unsigned char **val, uint64_t *vlen, uint64_t *num)
{
	uint64_t key;
	if (!pb_varint(p, end, &key))
		return false;
	*field = (uint32_t)(key >> 3);
	*wt = (int)(key & 7);
	switch (*wt) {
	case 0: return pb_varint(p, end, num);
	case 1: if (end - *p < 8) return false; *p += 8; return true;
	case 2:
		if (!pb_varint(p, end, vlen) || *vlen > (uint64_t)(end - *p)) return false;
		*val = *p;
		*p += *vlen;
		return true;
	case 5:
		if (end - *p < 4) return false;
		*num = (uint64_t)(*p)[0] | (uint64_t)(*p)[1] << 8 | (uint64_t)(*p)[2] << 16 | (uint64_t)(*p)[3] << 24;
		*p += 4;
		return true;
	}
	return false;
}

/* t's tokens, scores and types from the ModelProto's pieces (field 1: piece 1, score 2, type 3) and its
 * normalizer's add_dummy_prefix (field 3.3, default true); ids past the pieces up to t->n are [PAD…] fillers. */
static int qz_spm_pieces(qz_tokens *t, const char *path, char *err, size_t err_len)
{
	const unsigned char *p = t->spm, *end = t->spm + t->spm_len;
	int32_t n = 0;
	t->spm_space_prefix = true;
	while (p < end) {
		uint32_t f;
		int wt;
		const unsigned char *v = NULL;
		uint64_t vl = 0, num = 0;
		if (!pb_field(&p, end, &f, &wt, &v, &vl, &num)) {
			aah_errf(err, err_len, "%s: not a SentencePiece model (malformed protobuf)", path);
			return -1;
		}
		if (f == 3 && wt == 2) {   /* NormalizerSpec */
			const unsigned char *q = v, *qe = v + vl;
			while (q < qe) {
				uint32_t g;
				int gw;
				const unsigned char *gv;
				uint64_t gl, gn = 0;
				if (!pb_field(&q, qe, &g, &gw, &gv, &gl, &gn)) break;
				if (g == 3 && gw == 0) t->spm_space_prefix = gn != 0;
			}
		}
		if (f != 1 || wt != 2)
			continue;
		if (n >= t->n) {
			aah_errf(err, err_len, "%s: more pieces than the model's %d embedding rows", path, (int)t->n);
			return -1;
		}
		const unsigned char *q = v, *qe = v + vl;
		const unsigned char *piece = NULL;
		uint64_t plen = 0;
		float score = 0;
		int32_t type = 1;
		while (q < qe) {
			uint32_t g;
			int gw;
			const unsigned char *gv = NULL;
			uint64_t gl = 0, gn = 0;
			if (!pb_field(&q, qe, &g, &gw, &gv, &gl, &gn)) {
				aah_errf(err, err_len, "%s: piece %d is malformed", path, (int)n);
				return -1;
			}
			if (g == 1 && gw == 2) piece = gv, plen = gl;
			else if (g == 2 && gw == 5) { uint32_t b = (uint32_t)gn; memcpy(&score, &b, 4); }
			else if (g == 3 && gw == 0) type = (int32_t)gn;   /* NORMAL 1 … BYTE 6: llama.cpp's numbering too */
		}
		if (!piece || !(t->text[n] = strndup((const char *)piece, (size_t)plen))) {
			aah_errf(err, err_len, "%s: piece %d has no text", path, (int)n);
			return -1;
		}
		t->len[n] = (size_t)plen;
		t->scores[n] = score;
		t->type[n] = type;
		n++;
	}
	for (int32_t i = n; i < t->n; i++) {
		char pad[32];
		snprintf(pad, sizeof pad, "[PAD%d]", (int)i);
		if (!(t->text[i] = strdup(pad))) {
			aah_errf(err, err_len, "out of memory");
			return -1;
		}
		t->len[i] = strlen(pad);
		t->type[i] = QZ_TOK_UNUSED;
	}
	return 0;
}

/* dir/tokenizer.model into t: its bytes (embedded whole, GGUF_SPM_MODEL_KEY), its pieces, and BOS/EOS/add_bos as
 * aahd's tokenizer reads them (tokenizer_config.json included). */
static int qz_spm_load(qz_tokens *t, const char *dir, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		aah_errf(err, err_len, "%s: cannot open", path);
		return -1;
	}
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	t->spm = malloc(sz > 0 ? (size_t)sz : 1);
	t->spm_len = sz > 0 ? (size_t)sz : 0;
	bool ok = t->spm && fread(t->spm, 1, t->spm_len, f) == t->spm_len;
	fclose(f);
	t->scores = calloc((size_t)t->n, sizeof *t->scores);
	if (!ok || !t->scores) {
		aah_errf(err, err_len, "%s: cannot read", path);
		return -1;
	}
	if (qz_spm_pieces(t, path, err, err_len))
		return -1;
	tokenizer *tk = tokenizer_load(dir, err, err_len);
	if (!tk)
		return -1;
	t->bos = tokenizer_bos(tk);
	t->eos = tokenizer_eos(tk);
	t->add_bos = tokenizer_add_bos(tk);
	tokenizer_free(tk);
	return 0;
}

/* tokenizer_config.json's chat template into t (when it has one). */
static int qz_chat_template(qz_tokens *t, json_t *cfg, char *err, size_t err_len)
{
	json_t *ct = json_object_get(cfg, "chat_template");
	if (json_is_array(ct)) {   /* [{"name": "default", "template": …}, …] */
		size_t i;
		json_t *e, *pick = NULL;
		json_array_foreach(ct, i, e) {
			const char *nm = json_string_value(json_object_get(e, "name"));
			if (!pick || (nm && !strcmp(nm, "default")))
				pick = e;
		}
		ct = json_object_get(pick, "template");
	}
	if (json_is_string(ct) && !(t->chat_template = strndup(json_string_value(ct), json_string_length(ct)))) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	return 0;
}

/* Reads dir/tokenizer.json (and tokenizer_config.json when present) into t for a model of n_vocab embedding rows;
 * without a tokenizer.json, dir/tokenizer.model (SentencePiece). */
static int qz_tokens_load(qz_tokens *t, const char *dir, const model_config *mc, char *err, size_t err_len)
{
	memset(t, 0, sizeof *t);
	t->bos = t->eos = t->pad = -1;
	char path[4200];
	struct stat sb;
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	if (stat(path, &sb) != 0) {
		snprintf(path, sizeof path, "%s/tokenizer.model", dir);
		if (stat(path, &sb) == 0) {
			t->n = mc->vocab_size;
			t->text = calloc((size_t)t->n, sizeof *t->text);
			t->len = calloc((size_t)t->n, sizeof *t->len);
			t->type = calloc((size_t)t->n, sizeof *t->type);
			int rc = !t->text || !t->len || !t->type ? -1 : qz_spm_load(t, dir, path, err, err_len);
			snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
			json_error_t je;
			json_t *c = rc == 0 && stat(path, &sb) == 0 ? json_load_file(path, 0, &je) : NULL;
			if (rc == 0 && c)
				rc = qz_chat_template(t, c, err, err_len);
			json_decref(c);
			if (rc)
				qz_tokens_free(t);
			return rc;
		}
		snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	}
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr), *cfg = NULL;
	if (!root) {
		aah_errf(err, err_len, "%s: %s (a GGUF needs a byte-level BPE tokenizer.json; SentencePiece "
		         "tokenizer.model files are not converted)", path, jerr.text);
		return -1;
	}
	int rc = -1;
	json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges"), *added = json_object_get(root, "added_tokens");
	const char *mty = json_string_value(json_object_get(model, "type"));
	if ((mty && strcmp(mty, "BPE")) || !json_is_object(vocab) || !json_is_array(merges)) {
		aah_errf(err, err_len, "%s: not a BPE model with a vocab and merges", path);
		goto out;
	}
	if (!(t->pre = qz_pre_name(root))) {
		aah_errf(err, err_len, "%s: its normalizer and pre-tokenizer are none that llama.cpp names (qwen2, "
		         "llama-bpe, gpt-2)", path);
		goto out;
	}
	t->n = mc->vocab_size;
	t->text = calloc((size_t)t->n, sizeof *t->text);
	t->len = calloc((size_t)t->n, sizeof *t->len);
	t->type = calloc((size_t)t->n, sizeof *t->type);
	if (!t->text || !t->len || !t->type) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	const char *key;
	json_t *v;
	json_object_foreach(vocab, key, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id >= t->n || t->text[id]) {
			aah_errf(err, err_len, "%s: vocab entry '%.64s' has id %lld, outside the model's %d embedding rows or "
			         "taken twice", path, key, (long long)id, (int)t->n);
			goto out;
		}
		t->text[id] = strdup(key);
		t->len[id] = strlen(key);
		t->type[id] = QZ_TOK_NORMAL;
	}
	size_t ai;
	json_array_foreach(added, ai, v) {
		json_int_t id = json_integer_value(json_object_get(v, "id"));
		json_t *c = json_object_get(v, "content");
		if (!json_is_string(c) || id < 0 || id >= t->n) {
			aah_errf(err, err_len, "%s: added token %zu has no content or an id outside the model's %d rows", path, ai,
			         (int)t->n);
			goto out;
		}
		free(t->text[id]);
		t->text[id] = strndup(json_string_value(c), json_string_length(c));
		t->len[id] = json_string_length(c);
		t->type[id] = json_is_true(json_object_get(v, "special")) || qz_looks_special(t->text[id], t->len[id])
		                      ? QZ_TOK_CONTROL
		                      : QZ_TOK_USER_DEFINED;
	}
	for (int32_t i = 0; i < t->n; i++)
		if (!t->text[i]) {   /* llama.cpp's filler for ids no token has, up to the embedding's rows */
			char pad[32];
			snprintf(pad, sizeof pad, "[PAD%d]", (int)i);
			t->text[i] = strdup(pad);
			t->len[i] = strlen(pad);
			t->type[i] = QZ_TOK_UNUSED;
		}
	for (int32_t i = 0; i < t->n; i++)
		if (!t->text[i]) {
			aah_errf(err, err_len, "out of memory");
			goto out;
		}
	t->n_merges = (int64_t)json_array_size(merges);
	t->merges = calloc((size_t)(t->n_merges ? t->n_merges : 1), sizeof *t->merges);
	t->merge_len = calloc((size_t)(t->n_merges ? t->n_merges : 1), sizeof *t->merge_len);
	if (!t->merges || !t->merge_len) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	for (int64_t i = 0; i < t->n_merges; i++) {
		json_t *m = json_array_get(merges, (size_t)i);
		if (json_is_string(m)) {
			t->merges[i] = strndup(json_string_value(m), json_string_length(m));
		} else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
		           json_is_string(json_array_get(m, 1))) {
			const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
			size_t n = strlen(a) + strlen(b) + 2;
			if ((t->merges[i] = malloc(n)))
				snprintf(t->merges[i], n, "%s %s", a, b);
		} else {
			aah_errf(err, err_len, "%s: merge %lld is neither \"a b\" nor [a, b]", path, (long long)i);
			goto out;
		}
		if (!t->merges[i]) {
			aah_errf(err, err_len, "out of memory");
			goto out;
		}
		t->merge_len[i] = strlen(t->merges[i]);
	}
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	if (stat(path, &sb) == 0) {
		if (!(cfg = json_load_file(path, 0, &jerr)) || !json_is_object(cfg)) {
			aah_errf(err, err_len, "%s: %s", path, cfg ? "not a JSON object" : jerr.text);
			goto out;
		}
		t->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
		static const char *const keys[] = { "bos_token", "eos_token", "pad_token" };
		int32_t *ids[] = { &t->bos, &t->eos, &t->pad };
		for (int k = 0; k < 3; k++) {
			*ids[k] = qz_config_token(t, cfg, keys[k]);
			if (*ids[k] == -2) {
				aah_errf(err, err_len, "%s: %s is not a token of tokenizer.json", path, keys[k]);
				goto out;
			}
		}
		if (qz_chat_template(t, cfg, err, err_len))
			goto out;
	}
	/* config.json's ids where tokenizer_config.json does not name the token (an explicit null there means none) */
	if (t->bos < 0 && !json_object_get(cfg, "bos_token") && mc->bos_token_id >= 0 && mc->bos_token_id < t->n)
		t->bos = mc->bos_token_id;
	if (t->eos < 0 && !json_object_get(cfg, "eos_token") && mc->eos_token_id >= 0 && mc->eos_token_id < t->n)
		t->eos = mc->eos_token_id;
	rc = 0;
out:
	json_decref(root);
	json_decref(cfg);
	if (rc)
		qz_tokens_free(t);
	return rc;
}

/* ---- the tensors ---- */

/* QZ_ROPE_FREQS: llama.cpp's rope_freqs tensor for Llama 3.1's rope scaling, computed from the config (no src). */
typedef enum qz_kind { QZ_NORM, QZ_EMBD, QZ_OUTPUT, QZ_ATTN_V, QZ_FFN_DOWN, QZ_ATTN_QK, QZ_MATRIX, QZ_ROPE_FREQS } qz_kind;

typedef struct qz_tensor {
	const st_tensor *src;        /* NULL for QZ_ROPE_FREQS */
	char name[96];               /* llama.cpp's */
	uint32_t n_dims;
	int64_t ne[2];               /* ggml's order: ne[0] the row length */
	qz_kind kind;
	int32_t layer;
	aah_dtype type;
} qz_tensor;

typedef struct qz_job {
	const model_files *mf;
	qz_tensor *t;
	int32_t n;
	float *row;                  /* (widest row) */
} qz_job;

/* The type of a tensor under --type base: the rules the engine quantizes by as it loads (models/weight_quant.h,
 * llama_tensor_get_type's for these types), so a file written here holds what `--quantize` would serve. */
static aah_dtype qz_pick(aah_dtype base, const qz_tensor *t, int32_t n_layers, bool tied, int64_t ne0)
{
	if (t->kind == QZ_NORM || t->kind == QZ_ROPE_FREQS)
		return AAH_DTYPE_F32;
	const char *name = NULL;
	for (size_t i = 0; i < sizeof qz_types / sizeof qz_types[0]; i++)
		if (qz_types[i].base == base)
			name = qz_types[i].name;
	weight_mix mix;
	if (!name || weight_mix_parse(name, &mix) != 0)
		return base;   /* bf16, f16: every matrix in that type */
	static const weight_role roles[] = {
		[QZ_EMBD] = WEIGHT_EMBED,       [QZ_OUTPUT] = WEIGHT_OUTPUT, [QZ_ATTN_V] = WEIGHT_ATTN_V,
		[QZ_FFN_DOWN] = WEIGHT_FFN_DOWN, [QZ_ATTN_QK] = WEIGHT_ATTN_Q, [QZ_MATRIX] = WEIGHT_ATTN_O,
	};
	const weight_role role = t->kind == QZ_EMBD && tied ? WEIGHT_OUTPUT : roles[t->kind];
	return weight_mix_type(&mix, role, t->layer, n_layers, ne0, AAH_DTYPE_F16);
}

/* One source row as floats. */
static void qz_row_f32(const st_tensor *t, int64_t r, float *out)
{
	int64_t n = t->shape[t->n_dims - 1];
	if (t->dtype == ST_F32) {
		memcpy(out, (const float *)t->data + r * n, (size_t)n * sizeof(float));
		return;
	}
	const uint16_t *h = (const uint16_t *)t->data + r * n;
	for (int64_t i = 0; i < n; i++)
		out[i] = t->dtype == ST_BF16 ? cpu_bf16_to_f32(h[i]) : cpu_f16_to_f32(h[i]);
}

static int qz_fill(void *ctx, int32_t index, void *dst, size_t nbytes, char *err, size_t err_len)
{
	qz_job *j = ctx;
	const qz_tensor *t = &j->t[index];
	const st_tensor *s = t->src;
	const model_config *c = &j->mf->config;
	int64_t n = t->ne[0], rows = t->ne[1];
	size_t rb = aah_dtype_row_bytes(t->type, n);
	if (rb * (size_t)rows != nbytes) {
		aah_errf(err, err_len, "tensor '%s': %zu bytes declared, %zu computed", t->name, nbytes, rb * (size_t)rows);
		return -1;
	}
	if (t->kind == QZ_ROPE_FREQS) {   /* as convert_hf_to_gguf.py's LlamaModel computes them */
		model_config_llama3_factors(c, j->row);
		memcpy(dst, j->row, nbytes);
		return 0;
	}
	for (int64_t r = 0; r < rows; r++) {
		int64_t from = r;
		if (t->kind == QZ_ATTN_QK && c->arch == MODEL_ARCH_LLAMA) {
			/* llama.cpp's converter interleaves each head's rows for its RoPE: GGUF row 2j + i of a head is
			 * Hugging Face row i·d/2 + j (convert_hf_to_gguf.py's LlamaModel.permute) */
			int64_t d = c->head_dim, h = r / d, g = r % d;
			from = h * d + (g % 2) * (d / 2) + g / 2;
		}
		qz_row_f32(s, from, j->row);
		aah_quantize_row_ref(t->type, (unsigned char *)dst + (size_t)r * rb, j->row, n);
	}
	return 0;
}

/* llama-quantize's order (llama_model_loader's weight_name_comparer): the tensors outside the blocks first, then
 * block by block, by name within each. So its output from our f32 file (or bf16, of a bf16 model) is our file of
 * that type, byte for byte (`make check-llamacpp`). */
static int qz_order(const void *a, const void *b)
{
	const qz_tensor *x = a, *y = b;
	return x->layer != y->layer ? (x->layer > y->layer) - (x->layer < y->layer) : strcmp(x->name, y->name);
}

/* The plan: every tensor model_files bound, under llama.cpp's name, in llama-quantize's order. */
static int qz_plan(const model_files *mf, aah_dtype base, qz_tensor **out, int32_t *n_out)
{
	const model_config *c = &mf->config;
	bool tied = mf->w.lm_head == mf->w.embed;
	int32_t cap = 4 + 11 * c->n_layers, n = 0;
	qz_tensor *t = calloc((size_t)cap, sizeof *t);
	if (!t)
		return -1;
#define QZ_ADD(src_, kind_, layer_, ...)                                     \
	do {                                                                     \
		t[n].src = (src_);                                                   \
		t[n].kind = (kind_);                                                 \
		t[n].layer = (layer_);                                               \
		snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);                  \
		n++;                                                                 \
	} while (0)
	if (c->rope_scaling == MODEL_ROPE_LLAMA3)
		QZ_ADD(NULL, QZ_ROPE_FREQS, -1, "rope_freqs.weight");
	QZ_ADD(mf->w.embed, QZ_EMBD, -1, "token_embd.weight");
	for (int32_t i = 0; i < c->n_layers; i++) {
		const model_layer_weights *l = &mf->w.layers[i];
		QZ_ADD(l->attn_norm, QZ_NORM, i, "blk.%d.attn_norm.weight", (int)i);
		QZ_ADD(l->wq, QZ_ATTN_QK, i, "blk.%d.attn_q.weight", (int)i);
		QZ_ADD(l->wk, QZ_ATTN_QK, i, "blk.%d.attn_k.weight", (int)i);
		QZ_ADD(l->wv, QZ_ATTN_V, i, "blk.%d.attn_v.weight", (int)i);
		QZ_ADD(l->wo, QZ_MATRIX, i, "blk.%d.attn_output.weight", (int)i);
		if (l->q_norm) QZ_ADD(l->q_norm, QZ_NORM, i, "blk.%d.attn_q_norm.weight", (int)i);
		if (l->k_norm) QZ_ADD(l->k_norm, QZ_NORM, i, "blk.%d.attn_k_norm.weight", (int)i);
		QZ_ADD(l->ffn_norm, QZ_NORM, i, "blk.%d.ffn_norm.weight", (int)i);
		QZ_ADD(l->w_gate, QZ_MATRIX, i, "blk.%d.ffn_gate.weight", (int)i);
		QZ_ADD(l->w_up, QZ_MATRIX, i, "blk.%d.ffn_up.weight", (int)i);
		QZ_ADD(l->w_down, QZ_FFN_DOWN, i, "blk.%d.ffn_down.weight", (int)i);
	}
	QZ_ADD(mf->w.norm, QZ_NORM, -1, "output_norm.weight");
	if (!tied)
		QZ_ADD(mf->w.lm_head, QZ_OUTPUT, -1, "output.weight");
#undef QZ_ADD
	for (int32_t i = 0; i < n; i++) {
		const st_tensor *s = t[i].src;
		t[i].n_dims = s ? (uint32_t)s->n_dims : 1;
		t[i].ne[0] = s ? s->shape[s->n_dims - 1] : c->head_dim / 2;
		t[i].ne[1] = s && s->n_dims == 2 ? s->shape[0] : 1;
		t[i].type = qz_pick(base, &t[i], c->n_layers, tied, t[i].ne[0]);
	}
	qsort(t, (size_t)n, sizeof *t, qz_order);
	*out = t;
	*n_out = n;
	return 0;
}

/* ---- the metadata ---- */

static int qz_metadata(gguf_writer *w, const model_files *mf, const qz_tokens *tk, uint32_t ftype, const char *name)
{
	const model_config *c = &mf->config;
	const char *a = c->arch == MODEL_ARCH_QWEN3 ? "qwen3" : "llama";
	char k[96];
	int rc = gguf_writer_str(w, "general.architecture", a, strlen(a)) ||
	         gguf_writer_str(w, "general.name", name, strlen(name));
#define QZ_U32(suffix, v) (snprintf(k, sizeof k, "%s." suffix, a), gguf_writer_u32(w, k, (uint32_t)(v)))
#define QZ_F32(suffix, v) (snprintf(k, sizeof k, "%s." suffix, a), gguf_writer_f32(w, k, (float)(v)))
	rc = rc || QZ_U32("vocab_size", c->vocab_size) || QZ_U32("context_length", c->max_position_embeddings) ||
	     QZ_U32("embedding_length", c->hidden_size) || QZ_U32("block_count", c->n_layers) ||
	     QZ_U32("feed_forward_length", c->intermediate_size) || QZ_U32("attention.head_count", c->n_heads) ||
	     QZ_U32("attention.head_count_kv", c->n_kv_heads) || QZ_U32("attention.key_length", c->head_dim) ||
	     QZ_U32("attention.value_length", c->head_dim) || QZ_U32("rope.dimension_count", c->head_dim) ||
	     QZ_F32("rope.freq_base", c->rope_theta) || QZ_F32("attention.layer_norm_rms_epsilon", c->rms_norm_eps);
	if (c->rope_scaling == MODEL_ROPE_LINEAR || c->rope_scaling == MODEL_ROPE_YARN) {
		const char *type = c->rope_scaling == MODEL_ROPE_LINEAR ? "linear" : "yarn";
		rc = rc || (snprintf(k, sizeof k, "%s.rope.scaling.type", a), gguf_writer_str(w, k, type, strlen(type))) ||
		     QZ_F32("rope.scaling.factor", c->rope_factor);
	}
	if (c->rope_scaling == MODEL_ROPE_YARN) {   /* llama.cpp's keys; its attention factor is yarn_attn_factor times
	                                              * the default one (models/gguf_model.c gm_yarn) */
		const double af = c->rope_attn_factor / model_config_yarn_mscale(c->rope_factor);
		rc = rc || QZ_U32("rope.scaling.original_context_length", c->rope_original_max_pos);
		if (c->rope_beta_fast != 32.0f || c->rope_beta_slow != 1.0f)
			rc = rc || QZ_F32("rope.scaling.yarn_beta_fast", c->rope_beta_fast) ||
			     QZ_F32("rope.scaling.yarn_beta_slow", c->rope_beta_slow);
		if (fabs(af - 1) > 1e-7)
			rc = rc || QZ_F32("rope.scaling.yarn_attn_factor", af);
	}
#undef QZ_U32
#undef QZ_F32
	if (tk->spm)   /* llama.cpp's SentencePiece keys, and the model itself for aahd (models/gguf.h) */
		rc = rc || gguf_writer_str(w, "tokenizer.ggml.model", "llama", 5) ||
		     gguf_writer_str(w, "tokenizer.ggml.pre", "default", 7) ||
		     gguf_writer_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tk->text, tk->len,
		                           (uint64_t)tk->n) ||
		     gguf_writer_f32_array(w, "tokenizer.ggml.scores", tk->scores, (uint64_t)tk->n) ||
		     gguf_writer_i32_array(w, "tokenizer.ggml.token_type", tk->type, (uint64_t)tk->n) ||
		     gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", tk->spm_space_prefix) ||
		     gguf_writer_u8_array(w, GGUF_SPM_MODEL_KEY, tk->spm, tk->spm_len);
	else
		rc = rc || gguf_writer_str(w, "tokenizer.ggml.model", "gpt2", 4) ||
		     gguf_writer_str(w, "tokenizer.ggml.pre", tk->pre, strlen(tk->pre)) ||
		     gguf_writer_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tk->text, tk->len,
		                           (uint64_t)tk->n) ||
		     gguf_writer_i32_array(w, "tokenizer.ggml.token_type", tk->type, (uint64_t)tk->n) ||
		     gguf_writer_str_array(w, "tokenizer.ggml.merges", (const char *const *)tk->merges, tk->merge_len,
		                           (uint64_t)tk->n_merges);
	if (tk->bos >= 0) rc = rc || gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)tk->bos);
	if (tk->eos >= 0) rc = rc || gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)tk->eos);
	if (tk->pad >= 0) rc = rc || gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)tk->pad);
	rc = rc || gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", tk->add_bos);
	if (tk->chat_template)
		rc = rc || gguf_writer_str(w, "tokenizer.chat_template", tk->chat_template, strlen(tk->chat_template));
	/* Last, in this order, as llama-quantize sets them: so llama-quantize turning our f32 file into TYPE writes the
	 * very bytes of our TYPE file. */
	rc = rc || gguf_writer_u32(w, "general.quantization_version", 2) || gguf_writer_u32(w, "general.file_type", ftype);
	return rc ? -1 : 0;
}

/* ---- the command ---- */

static int qz_run(const char *src, const char *out, aah_dtype base, uint32_t ftype, const char *tok_dir, int64_t step,
                  bool quiet, char *err, size_t err_len)
{
	char dir[4096], probe[4096];
	if (gguf_model_path(src, probe, sizeof probe, err, err_len) != 0) {
		aah_errf(err, err_len, "%s: is a GGUF model already (re-quantizing a GGUF is not supported: quantize the "
		         "Hugging Face model or run directory it came from)", src);
		return -1;
	}
	if (aah_resolve_model_dir(src, step, dir, sizeof dir, err, err_len))
		return -1;
	model_files mf;
	if (model_files_load(&mf, dir, err, err_len))
		return -1;
	if (mf.config.rope_scaling == MODEL_ROPE_YARN && !mf.config.rope_truncate) {
		aah_errf(err, err_len, "%s: yarn rope_scaling with 'truncate' false has no GGUF form (llama.cpp always "
		         "rounds the ramp's ends to whole dimensions)", dir);
		model_files_free(&mf);
		return -1;
	}
	int rc = -1;
	qz_tokens tk;
	memset(&tk, 0, sizeof tk);
	qz_job job = { &mf, NULL, 0, NULL };
	gguf_writer *w = NULL;
	if (qz_tokens_load(&tk, tok_dir ? tok_dir : dir, &mf.config, err, err_len) ||
	    qz_plan(&mf, base, &job.t, &job.n))
		goto out;
	int64_t widest = 0;
	for (int32_t i = 0; i < job.n; i++)
		if (job.t[i].ne[0] > widest)
			widest = job.t[i].ne[0];
	w = gguf_writer_init();
	job.row = malloc((size_t)widest * sizeof(float));
	if (!w || !job.row) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	const char *slash = strrchr(dir, '/');
	if (qz_metadata(w, &mf, &tk, ftype, slash && slash[1] ? slash + 1 : dir)) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	uint64_t bytes = 0;
	for (int32_t i = 0; i < job.n; i++) {
		const int64_t *ne = job.t[i].ne;
		int gt = gguf_aah_to_ggml(job.t[i].type);
		if (gguf_writer_tensor(w, job.t[i].name, job.t[i].n_dims, ne, (uint32_t)gt)) {
			aah_errf(err, err_len, "tensor '%s': cannot be declared as %s", job.t[i].name, aah_dtype_name(job.t[i].type));
			goto out;
		}
		bytes += aah_dtype_row_bytes(job.t[i].type, ne[0]) * (uint64_t)ne[1];
	}
	if (gguf_writer_write(w, out, qz_fill, &job, err, err_len))
		goto out;
	if (!quiet) {
		int counts[AAH_DTYPE_Q8_K + 1] = { 0 };
		for (int32_t i = 0; i < job.n; i++)
			counts[job.t[i].type]++;
		printf("wrote %s: %d tensors, %.1f MiB of weights (", out, (int)job.n, (double)bytes / (1 << 20));
		const char *sep = "";
		for (int ty = 0; ty <= AAH_DTYPE_Q8_K; ty++)
			if (counts[ty]) {
				printf("%s%d %s", sep, counts[ty], aah_dtype_name((aah_dtype)ty));
				sep = ", ";
			}
		printf(")\n");
	}
	rc = 0;
out:
	gguf_writer_free(w);
	free(job.row);
	free(job.t);
	qz_tokens_free(&tk);
	model_files_free(&mf);
	return rc;
}

int quantize_main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "type", required_argument, NULL, 'T' }, { "tokenizer", required_argument, NULL, 't' },
		{ "step", required_argument, NULL, 's' }, { "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },       { NULL, 0, NULL, 0 },
	};
	const char *type = NULL, *tok_dir = NULL;
	int64_t step = -1;
	bool quiet = false;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":qh", longs, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'T': type = optarg; break;
		case 't': tok_dir = optarg; break;
		case 's':
			step = strtoll(optarg, &end, 10);
			if (!*optarg || *end || step < 0) {
				fprintf(stderr, "aah-convert quantize: --step must be a step number, not '%s'\n", optarg);
				return QZ_EXIT_USAGE;
			}
			break;
		case 'q': quiet = true; break;
		case 'h': quantize_help(stdout); return 0;
		case ':':
			fprintf(stderr, "aah-convert quantize: %s needs a value\n", argv[optind - 1]);
			return QZ_EXIT_USAGE;
		default:
			fprintf(stderr, "aah-convert quantize: unknown option '%s' (see aah-convert quantize --help)\n",
			        argv[optind - 1]);
			return QZ_EXIT_USAGE;
		}
	}
	if (argc - optind != 2 || !type) {
		fprintf(stderr, "usage: aah-convert quantize [options] SRC OUT.gguf --type "
		        "q8_0|q4_0|q4_k_m|q5_k_m|bf16|f16|f32   (aah-convert quantize --help)\n");
		return QZ_EXIT_USAGE;
	}
	size_t ti = 0, nt = sizeof qz_types / sizeof qz_types[0];
	while (ti < nt && strcmp(qz_types[ti].name, type))
		ti++;
	if (ti == nt) {
		fprintf(stderr, "aah-convert quantize: --type must be q8_0, q4_0, q4_k_m, q5_k_m, bf16 or f16, not '%s'\n",
		        type);
		return QZ_EXIT_USAGE;
	}
	char err[2048];
	if (qz_run(argv[optind], argv[optind + 1], qz_types[ti].base, qz_types[ti].ftype, tok_dir, step, quiet, err,
	           sizeof err)) {
		fprintf(stderr, "aah-convert quantize: %s\n", err);
		return QZ_EXIT_FAIL;
	}
	return 0;
}
