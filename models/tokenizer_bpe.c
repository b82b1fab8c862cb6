/* models/tokenizer_bpe.c — Hugging Face tokenizer.json byte-level BPE (Qwen3, Llama 3, GPT-2): the normalizer
 * (utf8proc), the Split / ByteLevel pre-tokenizers (PCRE2), and merges by rank with a heap over a symbol list. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/tokenizer_bpe.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "models/errf.h"
#include "models/utf8.h"

/* How a Split step turns its matches into pieces (Hugging Face's SplitDelimiterBehavior). */
enum bpe_behavior {
	BPE_ISOLATED,
	BPE_REMOVED,
	BPE_MERGED_PREV,
	BPE_MERGED_NEXT,
	BPE_CONTIGUOUS,
};

/* One step of the pre-tokenizer, applied to every piece the steps before it produced. A ByteLevel
 * pre-tokenizer becomes a PREFIX step (add_prefix_space) and a SPLIT step with GPT-2's pattern (use_regex). */
typedef struct bpe_step {
	enum { BPE_STEP_SPLIT, BPE_STEP_PREFIX } kind;
	pcre2_code *re;
	enum bpe_behavior behavior;
	bool invert;
} bpe_step;

/* (left id, right id) → (rank, merged id): open addressing, key UINT64_MAX marks a free slot. */
typedef struct bpe_pair {
	uint64_t key;
	uint32_t rank;
	int32_t id;
} bpe_pair;

#define BPE_MAX_STEPS 16
#define BPE_MAX_NORM 4

struct tok_bpe {
	bpe_step steps[BPE_MAX_STEPS];
	int n_steps;
	int norm[BPE_MAX_NORM];     /* utf8proc_map options, applied in order */
	int n_norm;
	bool ignore_merges;         /* a pre-token that is itself in the vocabulary is emitted whole */
	int32_t unk;                /* -1 when none: a byte without a token is then dropped, as Hugging Face does */
	int32_t byte_id[256];       /* the token of each single byte, -1 when the vocabulary lacks it */
	bpe_pair *pairs;            /* (pair_mask + 1) */
	uint64_t pair_mask;
	int32_t *vocab;             /* (vocab_mask + 1) ids keyed by their decoded bytes; -1 free */
	uint64_t vocab_mask;
	const tokenizer *t;         /* for the bytes behind vocab's ids */
};

/* GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex. */
static const char gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Unicode White_Space, which \s means in Oniguruma (Hugging Face's regex engine) and in llama.cpp; PCRE2's \s
 * leaves out U+0085, so patterns are rewritten to this class. */
static const char space_items[] =
	"\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

static uint64_t hash_bytes(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a, then a finaliser so the low bits mix */
	for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ull;
	return h ^ (h >> 32);
}

static uint64_t hash_pair(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	key *= 0xc4ceb9fe1a85ec53ull;
	return key ^ (key >> 33);
}

static uint64_t table_size(uint64_t n)
{
	uint64_t s = 16;
	while (s < 2 * n) s <<= 1;
	return s;
}

static const bpe_pair *pair_find(const tok_bpe *b, int32_t l, int32_t r)
{
	uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	for (uint64_t i = hash_pair(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
		const bpe_pair *p = &b->pairs[i];
		if (p->key == key) return p;
		if (p->key == UINT64_MAX) return NULL;
	}
}

static int32_t vocab_find(const tok_bpe *b, const void *s, size_t n)
{
	const tokenizer *t = b->t;
	for (uint64_t i = hash_bytes(s, n) & b->vocab_mask;; i = (i + 1) & b->vocab_mask) {
		int32_t id = b->vocab[i];
		if (id < 0) return -1;
		uint32_t o = t->bytes_off[id], len = t->bytes_off[id + 1] - o;
		if (len == n && memcmp(t->bytes + o, s, n) == 0) return id;
	}
}

/* ---- load-time string → id map over the vocabulary's spellings (pointers into the parsed JSON) ---- */

typedef struct str_slot {
	const char *s;
	uint32_t len;
	int32_t id;
} str_slot;

typedef struct str_map {
	str_slot *slot;
	uint64_t mask;
} str_map;

static void str_map_put(str_map *m, const char *s, uint32_t len, int32_t id)
{
	for (uint64_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
		str_slot *e = &m->slot[i];
		if (!e->s) {
			*e = (str_slot){s, len, id};
			return;
		}
		if (e->len == len && memcmp(e->s, s, len) == 0) return;   /* first spelling wins */
	}
}

static int32_t str_map_get(const str_map *m, const char *s, size_t len)
{
	for (uint64_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
		const str_slot *e = &m->slot[i];
		if (!e->s) return -1;
		if (e->len == len && memcmp(e->s, s, len) == 0) return e->id;
	}
}

/* ---- byte-level alphabet ---- */

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 map to U+0100.. in order. */
static void bytelevel_tables(uint32_t byte_cp[256], int16_t cp_byte[324])
{
	int extra = 0;
	for (int i = 0; i < 324; i++) cp_byte[i] = -1;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
		byte_cp[b] = printable ? (uint32_t)b : 256u + (uint32_t)extra++;
		cp_byte[byte_cp[b]] = (int16_t)b;
	}
}

/* Hugging Face's ByteLevel decoder: a spelling made only of alphabet characters becomes their bytes;
 * any other spelling (an added token with a plain space, say) stays as its own UTF-8. */
static size_t bytelevel_decode(void *ctx, int32_t id, const char *s, uint32_t n, unsigned char *out)
{
	const int16_t *cp_byte = ctx;
	size_t o = 0;
	for (uint32_t i = 0; i < n;) {
		uint32_t cp;
		i += (uint32_t)aah_utf8_next((const unsigned char *)s + i, n - i, &cp);
		if (cp >= 324 || cp_byte[cp] < 0) {
			memcpy(out, s, n);
			return n;
		}
		out[o++] = (unsigned char)cp_byte[cp];
	}
	return o;
}

/* True when every character of the spelling is in the alphabet: only such tokens can come out of merges. */
static bool bytelevel_spelling(const char *s, uint32_t n, const int16_t *cp_byte)
{
	for (uint32_t i = 0; i < n;) {
		uint32_t cp;
		i += (uint32_t)aah_utf8_next((const unsigned char *)s + i, n - i, &cp);
		if (cp >= 324 || cp_byte[cp] < 0) return false;
	}
	return true;
}

/* ---- JSON → model ---- */

static bool json_flag(json_t *o, const char *key, bool dflt)
{
	json_t *v = json_object_get(o, key);
	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* Rewrites \s and \S outside classes, and \s inside them, to Unicode White_Space (see space_items).
 * Returns a malloc'd pattern (caller frees) or NULL when out of memory. */
static char *regex_rewrite_space(const char *p, size_t n)
{
	size_t cap = n * (sizeof space_items + 4) + 1;
	char *o = malloc(cap), *w = o;
	if (!o) return NULL;
	bool in_class = false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '\\' && i + 1 < n) {
			char d = p[++i];
			if (d == 's') {
				w += sprintf(w, in_class ? "%s" : "[%s]", space_items);
			} else if (d == 'S' && !in_class) {
				w += sprintf(w, "[^%s]", space_items);
			} else {
				*w++ = c;
				*w++ = d;
			}
			continue;
		}
		if (!in_class && c == '[') {
			in_class = true;
			*w++ = c;
			if (i + 1 < n && p[i + 1] == '^') *w++ = p[++i];
			if (i + 1 < n && p[i + 1] == ']') *w++ = p[++i];   /* a leading ] is literal */
			continue;
		}
		if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {   /* [:alpha:] */
			const char *end = strstr(p + i, ":]");
			size_t stop = end && (size_t)(end - p) < n ? (size_t)(end - p) + 2 : i + 1;
			while (i < stop) *w++ = p[i++];
			i--;
			continue;
		}
		if (in_class && c == ']') in_class = false;
		*w++ = c;
	}
	*w = '\0';
	return o;
}

static pcre2_code *regex_compile(const char *pattern, size_t n, bool literal, char *err, size_t err_len)
{
	char *rewritten = literal ? NULL : regex_rewrite_space(pattern, n);
	if (!literal && !rewritten) {
		aah_errf(err, err_len, "out of memory");
		return NULL;
	}
	int code;
	PCRE2_SIZE at;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : rewritten), literal ? n : PCRE2_ZERO_TERMINATED,
	                               PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &code, &at, NULL);
	free(rewritten);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(code, msg, sizeof msg);
		aah_errf(err, err_len, "split pattern /%.*s/: %s", (int)(n < 200 ? n : 200), pattern, (char *)msg);
		return NULL;
	}
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* without JIT (unsupported CPU) matching is slower, not wrong */
	return re;
}

static int step_add(tok_bpe *b, bpe_step s, char *err, size_t err_len)
{
	if (b->n_steps == BPE_MAX_STEPS) {
		pcre2_code_free(s.re);
		aah_errf(err, err_len, "pre_tokenizer: more than %d steps", BPE_MAX_STEPS);
		return -1;
	}
	b->steps[b->n_steps++] = s;
	return 0;
}

static int pretok_parse(tok_bpe *b, json_t *p, bool *bytelevel, char *err, size_t err_len)
{
	if (!p || json_is_null(p)) return 0;
	const char *type = json_string_value(json_object_get(p, "type"));
	if (!type) {
		aah_errf(err, err_len, "pre_tokenizer without a type");
		return -1;
	}
	if (strcmp(type, "Sequence") == 0) {
		json_t *list = json_object_get(p, "pretokenizers"), *item;
		size_t i;
		json_array_foreach(list, i, item)
			if (pretok_parse(b, item, bytelevel, err, err_len)) return -1;
		return 0;
	}
	if (strcmp(type, "ByteLevel") == 0) {
		*bytelevel = true;
		if (json_flag(p, "add_prefix_space", false) &&
		    step_add(b, (bpe_step){.kind = BPE_STEP_PREFIX}, err, err_len))
			return -1;
		if (json_flag(p, "use_regex", true)) {
			pcre2_code *re = regex_compile(gpt2_pattern, strlen(gpt2_pattern), false, err, err_len);
			if (!re || step_add(b, (bpe_step){BPE_STEP_SPLIT, re, BPE_ISOLATED, false}, err, err_len)) return -1;
		}
		return 0;
	}
	if (strcmp(type, "Split") == 0) {
		json_t *pat = json_object_get(p, "pattern");
		json_t *rx = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
		json_t *src = json_is_string(rx) ? rx : str;
		if (!json_is_string(src)) {
			aah_errf(err, err_len, "Split pre_tokenizer without a Regex or String pattern");
			return -1;
		}
		static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
		                                    "Contiguous"};
		static const enum bpe_behavior kinds[] = {BPE_ISOLATED, BPE_REMOVED, BPE_MERGED_PREV, BPE_MERGED_NEXT,
		                                          BPE_CONTIGUOUS};
		const char *beh = json_string_value(json_object_get(p, "behavior"));
		int k = -1;
		for (int i = 0; i < 5 && beh; i++)
			if (strcmp(beh, names[i]) == 0) k = i;
		if (k < 0) {
			aah_errf(err, err_len, "Split pre_tokenizer: unsupported behavior %s", beh ? beh : "(none)");
			return -1;
		}
		pcre2_code *re = regex_compile(json_string_value(src), json_string_length(src), src == str, err, err_len);
		if (!re) return -1;
		return step_add(b, (bpe_step){BPE_STEP_SPLIT, re, kinds[k], json_flag(p, "invert", false)}, err, err_len);
	}
	aah_errf(err, err_len, "unsupported pre_tokenizer type %s", type);
	return -1;
}

static int normalizer_parse(tok_bpe *b, json_t *n, char *err, size_t err_len)
{
	if (!n || json_is_null(n)) return 0;
	const char *type = json_string_value(json_object_get(n, "type"));
	if (type && strcmp(type, "Sequence") == 0) {
		json_t *list = json_object_get(n, "normalizers"), *item;
		size_t i;
		json_array_foreach(list, i, item)
			if (normalizer_parse(b, item, err, err_len)) return -1;
		return 0;
	}
	int opt = -1;
	if (type && strcmp(type, "NFC") == 0) opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
	else if (type && strcmp(type, "NFKC") == 0) opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
	else if (type && strcmp(type, "NFD") == 0) opt = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
	else if (type && strcmp(type, "NFKD") == 0) opt = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
	if (opt < 0 || b->n_norm == BPE_MAX_NORM) {
		aah_errf(err, err_len, "unsupported normalizer %s", type ? type : "(no type)");
		return -1;
	}
	b->norm[b->n_norm++] = opt;
	return 0;
}

/* A merge as "a b" or ["a", "b"]; returns 0 and the two halves, or -1. */
static int merge_halves(json_t *m, const char **a, size_t *al, const char **bb, size_t *bl)
{
	if (json_is_string(m)) {
		const char *s = json_string_value(m);
		size_t n = json_string_length(m);
		const char *sp = memchr(s, ' ', n);
		if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) return -1;
		*a = s;
		*al = (size_t)(sp - s);
		*bb = sp + 1;
		*bl = n - *al - 1;
		return 0;
	}
	if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
	    json_is_string(json_array_get(m, 1))) {
		*a = json_string_value(json_array_get(m, 0));
		*al = json_string_length(json_array_get(m, 0));
		*bb = json_string_value(json_array_get(m, 1));
		*bl = json_string_length(json_array_get(m, 1));
		return 0;
	}
	return -1;
}

static int merges_load(tok_bpe *b, json_t *merges, const str_map *spell, char *err, size_t err_len)
{
	size_t n = json_array_size(merges);
	b->pair_mask = table_size(n) - 1;
	b->pairs = malloc((b->pair_mask + 1) * sizeof *b->pairs);
	if (!b->pairs) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	for (uint64_t i = 0; i <= b->pair_mask; i++) b->pairs[i].key = UINT64_MAX;
	char *buf = NULL;
	size_t buf_cap = 0;
	for (size_t r = 0; r < n; r++) {
		const char *a, *c;
		size_t al, cl;
		if (merge_halves(json_array_get(merges, r), &a, &al, &c, &cl)) {
			aah_errf(err, err_len, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", r);
			free(buf);
			return -1;
		}
		if (al + cl > buf_cap) {
			buf_cap = 2 * (al + cl) + 64;
			char *nb = realloc(buf, buf_cap);
			if (!nb) {
				free(buf);
				aah_errf(err, err_len, "out of memory");
				return -1;
			}
			buf = nb;
		}
		memcpy(buf, a, al);
		memcpy(buf + al, c, cl);
		int32_t ia = str_map_get(spell, a, al), ic = str_map_get(spell, c, cl), im = str_map_get(spell, buf, al + cl);
		if (ia < 0 || ic < 0 || im < 0) {   /* Hugging Face refuses such a file too */
			aah_errf(err, err_len, "merge %zu (%.*s %.*s) names a token not in the vocabulary", r, (int)al, a,
			         (int)cl, c);
			free(buf);
			return -1;
		}
		uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ic;
		for (uint64_t i = hash_pair(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
			if (b->pairs[i].key == key) break;   /* a repeated merge keeps its first rank */
			if (b->pairs[i].key == UINT64_MAX) {
				b->pairs[i] = (bpe_pair){key, (uint32_t)r, im};
				break;
			}
		}
	}
	free(buf);
	return 0;
}

static int added_load(tokenizer *t, json_t *list, char *err, size_t err_len)
{
	size_t n = json_array_size(list), i;
	json_t *a;
	t->added = calloc(n + 1, sizeof *t->added);
	if (!t->added) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	json_array_foreach(list, i, a) {
		json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
		if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX ||
		    !json_is_string(content)) {
			aah_errf(err, err_len, "added_tokens[%zu] lacks an id or a content", i);
			return -1;
		}
		tok_added *d = &t->added[t->n_added++];
		d->content = strndup(json_string_value(content), json_string_length(content));
		if (!d->content) {
			aah_errf(err, err_len, "out of memory");
			return -1;
		}
		d->len = (uint32_t)json_string_length(content);
		d->id = (int32_t)json_integer_value(id);
		d->special = json_flag(a, "special", false);
		d->lstrip = json_flag(a, "lstrip", false);
		d->rstrip = json_flag(a, "rstrip", false);
		d->single_word = json_flag(a, "single_word", false);
		d->normalized = json_flag(a, "normalized", !d->special);
	}
	return 0;
}

/* Applies the normalizers to s; returns a malloc'd string (caller frees) or NULL with *n = 0 on failure. */
static char *normalize(const tok_bpe *b, const char *s, size_t *n)
{
	char *cur = NULL;
	for (int k = 0; k < b->n_norm; k++) {
		utf8proc_uint8_t *dst = NULL;
		utf8proc_ssize_t got = utf8proc_map((const utf8proc_uint8_t *)(cur ? cur : s), (utf8proc_ssize_t)*n, &dst,
		                                    (utf8proc_option_t)b->norm[k]);
		free(cur);
		if (got < 0) {
			free(dst);
			*n = 0;
			return NULL;
		}
		cur = (char *)dst;
		*n = (size_t)got;
	}
	return cur;
}

/* Normalized added tokens are looked for in normalized text, so their own spelling is normalized too. */
static int added_normalize(tokenizer *t, char *err, size_t err_len)
{
	for (int32_t i = 0; i < t->n_added; i++) {
		tok_added *a = &t->added[i];
		if (!a->normalized || !t->bpe->n_norm || !a->len) continue;
		size_t n = a->len;
		char *s = normalize(t->bpe, a->content, &n);
		if (!s) {
			aah_errf(err, err_len, "added token %d: cannot normalize", a->id);
			return -1;
		}
		free(a->content);
		a->content = s;
		a->len = (uint32_t)n;
	}
	return 0;
}

/* Llama 3's files add BOS through the post-processor (a TemplateProcessing whose "single" template starts with a
 * special token) rather than through add_bos_token; tokenizer_config.json, read later, may still override. */
static void bos_from_post_processor(tokenizer *t, json_t *pp)
{
	const char *type = json_string_value(json_object_get(pp, "type"));
	if (type && strcmp(type, "Sequence") == 0) {
		json_t *item;
		size_t i;
		json_array_foreach(json_object_get(pp, "processors"), i, item) bos_from_post_processor(t, item);
		return;
	}
	if (!type || strcmp(type, "TemplateProcessing") != 0) return;
	json_t *first = json_array_get(json_object_get(pp, "single"), 0);
	const char *name = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
	json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name ? name : ""), "ids");
	json_t *id = json_array_get(ids, 0);
	if (json_array_size(ids) == 1 && json_is_integer(id) && json_integer_value(id) >= 0 &&
	    json_integer_value(id) < t->n_vocab) {
		t->bos = (int32_t)json_integer_value(id);
		t->add_bos = true;
	}
}

int tok_bpe_load(tokenizer *t, void *json_root, char *err, size_t err_len)
{
	json_t *root = json_root;
	json_t *model = json_object_get(root, "model");
	json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
	const char *type = json_string_value(json_object_get(model, "type"));
	if (!json_is_object(model) || (type && strcmp(type, "BPE") != 0) || !json_is_object(vocab) ||
	    !json_is_array(merges)) {
		aah_errf(err, err_len, "model is not BPE with a vocab and merges (type %s)", type ? type : "none");
		return -1;
	}
	const char *cs = json_string_value(json_object_get(model, "continuing_subword_prefix"));
	const char *ws = json_string_value(json_object_get(model, "end_of_word_suffix"));
	if ((cs && *cs) || (ws && *ws)) {
		aah_errf(err, err_len, "BPE continuing_subword_prefix / end_of_word_suffix are not supported");
		return -1;
	}
	t->kind = TOK_KIND_BPE;
	tok_bpe *b = t->bpe = calloc(1, sizeof *b);
	if (!b) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	b->t = t;
	b->ignore_merges = json_flag(model, "ignore_merges", false);
	bool bytelevel = false;
	if (normalizer_parse(b, json_object_get(root, "normalizer"), err, err_len) ||
	    pretok_parse(b, json_object_get(root, "pre_tokenizer"), &bytelevel, err, err_len))
		return -1;
	json_t *dec = json_object_get(root, "decoder");
	const char *dtype = json_string_value(json_object_get(dec, "type"));
	if (!bytelevel || (dtype && strcmp(dtype, "ByteLevel") != 0)) {
		aah_errf(err, err_len, "only byte-level BPE is supported (pre_tokenizer ByteLevel, decoder %s)",
		         dtype ? dtype : "none");
		return -1;
	}
	json_t *added = json_object_get(root, "added_tokens");
	if (added && !json_is_array(added)) {
		aah_errf(err, err_len, "added_tokens is not an array");
		return -1;
	}
	if (added_load(t, added, err, err_len)) return -1;

	/* every id's spelling: the vocab's, then the added tokens' (which win) */
	int64_t max_id = -1;
	const char *key;
	json_t *v;
	json_object_foreach(vocab, key, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX - 1) {
			aah_errf(err, err_len, "vocab entry \"%.64s\" has no valid id", key);
			return -1;
		}
		if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
	}
	for (int32_t i = 0; i < t->n_added; i++)
		if (t->added[i].id > max_id) max_id = t->added[i].id;
	int32_t n = (int32_t)(max_id + 1);
	const char **text = calloc((size_t)n + 1, sizeof *text);
	uint32_t *len = calloc((size_t)n + 1, sizeof *len);
	str_map spell = {NULL, table_size(json_object_size(vocab)) - 1};
	spell.slot = calloc(spell.mask + 1, sizeof *spell.slot);
	int rc = -1;
	if (!text || !len || !spell.slot) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	json_object_foreach(vocab, key, v) {
		int32_t id = (int32_t)json_integer_value(v);
		text[id] = key;
		len[id] = (uint32_t)strlen(key);
		str_map_put(&spell, key, len[id], id);
	}
	for (int32_t i = 0; i < t->n_added; i++) {
		text[t->added[i].id] = t->added[i].content;
		len[t->added[i].id] = t->added[i].len;
	}
	uint32_t byte_cp[256];
	int16_t cp_byte[324];
	bytelevel_tables(byte_cp, cp_byte);
	if (tok_tables_build(t, n, text, len, bytelevel_decode, cp_byte, err, err_len)) goto out;
	for (int32_t i = 0; i < t->n_added; i++)
		t->flags[t->added[i].id] |= TOK_FLAG_ADDED | (t->added[i].special ? TOK_FLAG_SPECIAL : 0);

	/* decoded bytes → id, for the model's own tokens made of alphabet characters only */
	b->vocab_mask = table_size((uint64_t)n) - 1;
	b->vocab = malloc((b->vocab_mask + 1) * sizeof *b->vocab);
	if (!b->vocab) {
		aah_errf(err, err_len, "out of memory");
		goto out;
	}
	memset(b->vocab, 0xFF, (b->vocab_mask + 1) * sizeof *b->vocab);
	json_object_foreach(vocab, key, v) {
		int32_t id = (int32_t)json_integer_value(v);
		uint32_t o = t->bytes_off[id], bl = t->bytes_off[id + 1] - o;
		if ((t->flags[id] & TOK_FLAG_ADDED) || !bytelevel_spelling(key, len[id], cp_byte)) continue;
		if (vocab_find(b, t->bytes + o, bl) >= 0) continue;
		for (uint64_t i = hash_bytes(t->bytes + o, bl) & b->vocab_mask;; i = (i + 1) & b->vocab_mask)
			if (b->vocab[i] < 0) {
				b->vocab[i] = id;
				break;
			}
	}
	for (int c = 0; c < 256; c++) {
		unsigned char byte = (unsigned char)c;
		b->byte_id[c] = vocab_find(b, &byte, 1);
	}
	b->unk = -1;
	const char *unk = json_string_value(json_object_get(model, "unk_token"));
	if (unk) b->unk = str_map_get(&spell, unk, strlen(unk));
	if (merges_load(b, merges, &spell, err, err_len) || added_normalize(t, err, err_len) ||
	    tok_matchers_build(t, err, err_len))
		goto out;
	bos_from_post_processor(t, json_object_get(root, "post_processor"));
	rc = 0;
out:
	free(text);
	free(len);
	free(spell.slot);
	return rc;
}

void tok_bpe_free(tok_bpe *b)
{
	if (!b) return;
	for (int i = 0; i < b->n_steps; i++) pcre2_code_free(b->steps[i].re);
	free(b->pairs);
	free(b->vocab);
	free(b);
}

/* ---- encode ---- */

typedef struct heap_item {
	uint32_t rank;
	uint32_t pos;    /* left symbol's index: ties go to the leftmost pair, as in Hugging Face */
	int32_t id;
} heap_item;

/* Per-encode buffers; they grow and are reused for every pre-token of one call. */
typedef struct bpe_scratch {
	pcre2_match_data *md[BPE_MAX_STEPS];
	int32_t *sym, *prev, *next;    /* (cap) symbol ids and the doubly linked list of live symbols */
	heap_item *heap;               /* (3 * cap): n - 1 initial pairs plus at most 2 per merge */
	size_t cap;
	char *prefix[BPE_MAX_STEPS];   /* " " + piece for an add_prefix_space step; one per step, since the
	                                  steps after it still read the piece while later steps run */
	size_t prefix_cap[BPE_MAX_STEPS];
} bpe_scratch;

void tok_bpe_scratch_free(tok_scratch *sc)
{
	bpe_scratch *s = sc->bpe;
	if (!s) return;
	for (int i = 0; i < BPE_MAX_STEPS; i++) pcre2_match_data_free(s->md[i]);
	free(s->sym);
	free(s->prev);
	free(s->next);
	free(s->heap);
	for (int i = 0; i < BPE_MAX_STEPS; i++) free(s->prefix[i]);
	free(s);
	sc->bpe = NULL;
}

static bool heap_less(const heap_item *a, const heap_item *b)
{
	return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(heap_item *h, size_t *n, heap_item x)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!heap_less(&x, &h[p])) break;
		h[i] = h[p];
		i = p;
	}
	h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n)
{
	heap_item top = h[0], x = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n) break;
		if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
		if (!heap_less(&h[c], &x)) break;
		h[i] = h[c];
		i = c;
	}
	if (*n) h[i] = x;
	return top;
}

static int scratch_reserve(bpe_scratch *s, size_t n)
{
	if (n <= s->cap) return 0;
	size_t cap = n < 64 ? 64 : n + n / 2;
	int32_t *sym = realloc(s->sym, cap * sizeof *sym);
	if (sym) s->sym = sym;
	int32_t *prev = realloc(s->prev, cap * sizeof *prev);
	if (prev) s->prev = prev;
	int32_t *next = realloc(s->next, cap * sizeof *next);
	if (next) s->next = next;
	heap_item *heap = realloc(s->heap, 3 * cap * sizeof *heap);
	if (heap) s->heap = heap;
	if (!sym || !prev || !next || !heap) return -1;
	s->cap = cap;
	return 0;
}

static void pair_push(const tok_bpe *b, bpe_scratch *s, size_t *hn, int32_t l)
{
	if (l < 0) return;
	int32_t r = s->next[l];
	if (r < 0) return;
	const bpe_pair *p = pair_find(b, s->sym[l], s->sym[r]);
	if (p) heap_push(s->heap, hn, (heap_item){p->rank, (uint32_t)l, p->id});
}

/* One pre-token's bytes → ids: start from one symbol per byte, then keep merging the pair of lowest rank
 * (leftmost on ties). A min-heap of candidate pairs makes that O(n log n) rather than a rescan per merge;
 * stale candidates (a side already merged away) are recognised when popped and dropped. */
static int bpe_word(const tokenizer *t, tok_scratch *sc, const unsigned char *w, size_t n, tok_sink *sink)
{
	const tok_bpe *b = t->bpe;
	bpe_scratch *s = sc->bpe;
	if (b->ignore_merges) {
		int32_t id = vocab_find(b, w, n);
		if (id >= 0) {
			tok_sink_push(sink, id);
			return 0;
		}
	}
	if (n == 1) {
		int32_t id = b->byte_id[w[0]] >= 0 ? b->byte_id[w[0]] : b->unk;
		if (id >= 0) tok_sink_push(sink, id);
		return 0;
	}
	if (scratch_reserve(s, n)) {
		aah_errf(sc->err, sc->err_len, "out of memory");
		return -1;
	}
	int32_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = b->byte_id[w[i]] >= 0 ? b->byte_id[w[i]] : b->unk;
		if (id < 0) continue;
		s->sym[m] = id;
		s->prev[m] = m - 1;
		s->next[m] = m + 1;
		m++;
	}
	if (m == 0) return 0;
	s->next[m - 1] = -1;
	size_t hn = 0;
	for (int32_t i = 0; i + 1 < m; i++) pair_push(b, s, &hn, i);
	while (hn) {
		heap_item top = heap_pop(s->heap, &hn);
		int32_t l = (int32_t)top.pos, r = s->next[l];
		if (s->sym[l] < 0 || r < 0) continue;
		const bpe_pair *p = pair_find(b, s->sym[l], s->sym[r]);
		if (!p || p->id != top.id) continue;   /* stale: the pair changed since it was queued */
		s->sym[l] = top.id;
		s->sym[r] = -1;
		s->next[l] = s->next[r];
		if (s->next[r] >= 0) s->prev[s->next[r]] = l;
		pair_push(b, s, &hn, s->prev[l]);
		pair_push(b, s, &hn, l);
	}
	for (int32_t i = 0; i >= 0; i = s->next[i]) tok_sink_push(sink, s->sym[i]);
	return 0;
}

static int pretok(const tokenizer *t, tok_scratch *sc, int step, const char *s, size_t n, tok_sink *sink);

/* Pieces of a Split step as Hugging Face's SplitDelimiterBehavior makes them from the alternating stream of
 * gaps and matches; a held piece waits until the next segment tells whether it grows. */
typedef struct split_state {
	const tokenizer *t;
	tok_scratch *sc;
	tok_sink *sink;
	int step;
	const char *s;
	enum bpe_behavior behavior;
	bool held, prev_match;
	size_t hs, he;
} split_state;

static int split_emit(split_state *st, size_t a, size_t e)
{
	return pretok(st->t, st->sc, st->step + 1, st->s + a, e - a, st->sink);
}

static int split_segment(split_state *st, size_t a, size_t e, bool match)
{
	int rc = 0;
	switch (st->behavior) {
	case BPE_ISOLATED:
		return split_emit(st, a, e);
	case BPE_REMOVED:
		return match ? 0 : split_emit(st, a, e);
	case BPE_CONTIGUOUS:   /* runs of matches (or of gaps) make one piece */
		if (st->held && match == st->prev_match) {
			st->he = e;
		} else {
			if (st->held) rc = split_emit(st, st->hs, st->he);
			st->held = true, st->hs = a, st->he = e;
		}
		break;
	case BPE_MERGED_PREV:   /* a match joins the piece before it, unless that piece ended with a match */
		if (match && !st->prev_match && st->held) {
			st->he = e;
		} else {
			if (st->held) rc = split_emit(st, st->hs, st->he);
			st->held = true, st->hs = a, st->he = e;
		}
		break;
	case BPE_MERGED_NEXT:   /* a match joins the gap after it */
		if (st->held) {   /* the held piece is a match */
			if (!match) {
				st->held = false;
				return split_emit(st, st->hs, e);
			}
			rc = split_emit(st, st->hs, st->he);
			st->hs = a, st->he = e;
		} else if (match) {
			st->held = true, st->hs = a, st->he = e;
		} else {
			rc = split_emit(st, a, e);
		}
		break;
	}
	st->prev_match = match;
	return rc;
}

static int split_step(const tokenizer *t, tok_scratch *sc, int step, const char *s, size_t n, tok_sink *sink)
{
	const bpe_step *bs = &t->bpe->steps[step];
	bpe_scratch *scr = sc->bpe;
	if (!scr->md[step] && !(scr->md[step] = pcre2_match_data_create_from_pattern(bs->re, NULL))) {
		aah_errf(sc->err, sc->err_len, "out of memory");
		return -1;
	}
	pcre2_match_data *md = scr->md[step];
	split_state st = {t, sc, sink, step, s, bs->behavior, false, false, 0, 0};
	size_t pos = 0, prev = 0;
	while (pos < n) {
		/* the text was checked once up front; re-checking the whole subject each call would be quadratic */
		int rc = pcre2_match(bs->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   /* very long runs: the interpreter keeps its frames on the heap */
			rc = pcre2_match(bs->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH) break;
		if (rc < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(rc, msg, sizeof msg);
			aah_errf(sc->err, sc->err_len, "pre-tokenizer regex: %s", (char *)msg);
			return -1;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		size_t ms = ov[0], me = ov[1];
		if (me <= ms || ms < prev) {   /* an empty match splits nothing: step over one character */
			uint32_t cp;
			pos += (size_t)aah_utf8_next((const unsigned char *)s + pos, n - pos, &cp);
			continue;
		}
		if (ms > prev && split_segment(&st, prev, ms, bs->invert)) return -1;
		if (split_segment(&st, ms, me, !bs->invert)) return -1;
		prev = pos = me;
	}
	if (prev < n && split_segment(&st, prev, n, bs->invert)) return -1;
	if (st.held && split_emit(&st, st.hs, st.he)) return -1;
	return 0;
}

static int pretok(const tokenizer *t, tok_scratch *sc, int step, const char *s, size_t n, tok_sink *sink)
{
	if (n == 0) return 0;
	const tok_bpe *b = t->bpe;
	if (step == b->n_steps) return bpe_word(t, sc, (const unsigned char *)s, n, sink);
	if (b->steps[step].kind == BPE_STEP_SPLIT) return split_step(t, sc, step, s, n, sink);
	if (s[0] == ' ') return pretok(t, sc, step + 1, s, n, sink);   /* PREFIX: add_prefix_space */
	bpe_scratch *scr = sc->bpe;
	if (n + 1 > scr->prefix_cap[step]) {
		char *p = realloc(scr->prefix[step], n + 1);
		if (!p) {
			aah_errf(sc->err, sc->err_len, "out of memory");
			return -1;
		}
		scr->prefix[step] = p;
		scr->prefix_cap[step] = n + 1;
	}
	char *buf = scr->prefix[step];
	buf[0] = ' ';
	memcpy(buf + 1, s, n);
	return pretok(t, sc, step + 1, buf, n + 1, sink);
}

static int pretok_text(const tokenizer *t, tok_scratch *sc, const char *s, size_t n, tok_sink *sink)
{
	return pretok(t, sc, 0, s, n, sink);
}

int tok_bpe_encode_text(const tokenizer *t, tok_scratch *sc, const char *s, size_t n, tok_sink *sink)
{
	if (!sc->bpe && !(sc->bpe = calloc(1, sizeof(bpe_scratch)))) {
		aah_errf(sc->err, sc->err_len, "out of memory");
		return -1;
	}
	char *norm = NULL;
	if (t->bpe->n_norm) {
		bool ascii = true;   /* the normal forms leave ASCII as it is */
		for (size_t i = 0; i < n && ascii; i++) ascii = (unsigned char)s[i] < 0x80;
		if (!ascii) {
			norm = normalize(t->bpe, s, &n);
			if (!norm) {
				aah_errf(sc->err, sc->err_len, "normalization failed");
				return -1;
			}
			s = norm;
		}
	}
	int rc = t->match_norm.n ? tok_split_added(t, &t->match_norm, sc, s, n, sink, pretok_text)
	                         : pretok_text(t, sc, s, n, sink);
	free(norm);
	return rc;
}
