/* tests/models/check_tokenizer.c — the tokenizers against independent references: Hugging Face ids (transformers.js) for the
 * real Qwen3 tokenizer, llama.cpp ids for the small test models, sentencepiece's own spm_encode for a model trained
 * here; plus round trips, streaming decode across split characters, invalid input, and concurrency. */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "models/tokenizer.h"
#include "tests/test_env.h"

static const char *cache_dir(void)
{
	const char *d = getenv("AAH_CACHE");
	return d && *d ? d : ".cache";
}

/* ---- shared fixtures: loaded once in the parent, inherited by every forked test ---- */

static tokenizer *qwen3;         /* the real Qwen3 tokenizer from the cache */
static char qwen3_err[512];
static json_t *ref_items;        /* qwen3-tokenizer.ref.json "items" */
static json_t *small_ref[2];     /* qwen3-small-{a,b}.ref.json "prompts" */
static const char *small_names[2] = {"qwen3-small-a", "qwen3-small-b"};

static void qwen3_setup(void)
{
	if (qwen3) return;
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/qwen3-tokenizer", cache_dir());
	qwen3 = tokenizer_load(dir, qwen3_err, sizeof qwen3_err);
}

static const tokenizer *need_qwen3(void)
{
	ck_assert_msg(qwen3, "the Qwen3 tokenizer is not in the cache (%s); run `sh tools/fetch_tokenizer.sh %s` first",
	              qwen3_err, cache_dir());
	return qwen3;
}

/* Encodes into a malloc'd array (caller frees); fails the test on error. */
static int32_t *enc(const tokenizer *t, const char *s, size_t n, bool add_special, int64_t *count)
{
	char err[256] = "";
	int64_t need = tokenizer_encode(t, s, n, add_special, NULL, 0, err, sizeof err);
	ck_assert_msg(need >= 0, "encode failed: %s", err);
	int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
	int64_t got = tokenizer_encode(t, s, n, add_special, ids, need, err, sizeof err);
	ck_assert_int_eq(got, need);
	*count = got;
	return ids;
}

/* Decodes into a malloc'd NUL-terminated string (caller frees). */
static char *dec(const tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, int64_t *len)
{
	int64_t need = tokenizer_decode(t, ids, n, skip_special, NULL, 0);
	ck_assert_int_ge(need, 0);
	char *out = malloc((size_t)need + 1);
	ck_assert_int_eq(tokenizer_decode(t, ids, n, skip_special, out, need + 1), need);
	ck_assert_int_eq(out[need], 0);
	*len = need;
	return out;
}

static char *nfc(const char *s, size_t n, size_t *out_n)
{
	utf8proc_uint8_t *d = NULL;
	utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
	                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
	ck_assert_int_ge(r, 0);
	*out_n = (size_t)r;
	return (char *)d;
}

static bool valid_utf8(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		if (l <= 0) return false;
		i += (size_t)l;
	}
	return true;
}

static void assert_ids(const int32_t *got, int64_t n, const int32_t *want, int64_t wn, const char *name)
{
	char g[2048] = "", w[2048] = "";
	for (int64_t i = 0; i < n && strlen(g) < 2000; i++) snprintf(g + strlen(g), sizeof g - strlen(g), "%d ", got[i]);
	for (int64_t i = 0; i < wn && strlen(w) < 2000; i++) snprintf(w + strlen(w), sizeof w - strlen(w), "%d ", want[i]);
	ck_assert_msg(n == wn && memcmp(got, want, (size_t)n * sizeof *got) == 0, "%s: ids [%s] want [%s]", name, g, w);
}

/* decode(encode(s)) == NFC(s), the property every byte-level BPE keeps. */
static void assert_roundtrip(const tokenizer *t, const char *s, size_t n, const char *name)
{
	int64_t cnt, len;
	int32_t *ids = enc(t, s, n, false, &cnt);
	char *back = dec(t, ids, cnt, false, &len);
	size_t nn;
	char *want = nfc(s, n, &nn);
	ck_assert_msg((size_t)len == nn && memcmp(back, want, nn) == 0, "%s: round trip differs", name);
	free(want);
	free(back);
	free(ids);
}

/* ---- reference ids ---- */

static void check_json_ids(const tokenizer *t, const char *text, size_t n, json_t *want, const char *name)
{
	int64_t cnt;
	int32_t *ids = enc(t, text, n, false, &cnt);
	int64_t wn = (int64_t)json_array_size(want);
	int32_t *w = malloc(((size_t)wn + 1) * sizeof *w);
	for (int64_t i = 0; i < wn; i++) w[i] = (int32_t)json_integer_value(json_array_get(want, (size_t)i));
	assert_ids(ids, cnt, w, wn, name);
	free(w);
	free(ids);
}

START_TEST(test_qwen3_reference_item)
{
	const tokenizer *t = need_qwen3();
	json_t *it = json_array_get(ref_items, (size_t)_i);
	json_t *text = json_object_get(it, "text");
	const char *name = json_string_value(json_object_get(it, "name"));
	check_json_ids(t, json_string_value(text), json_string_length(text), json_object_get(it, "ids"), name);
	assert_roundtrip(t, json_string_value(text), json_string_length(text), name);
}
END_TEST

START_TEST(test_small_model_prompt)
{
	int m = _i / 7, p = _i % 7;
	char dir[1024], err[256] = "";
	snprintf(dir, sizeof dir, "%s/%s", testdata(), small_names[m]);
	tokenizer *t = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(t, "%s", err);
	json_t *pr = json_array_get(small_ref[m], (size_t)p);
	ck_assert_ptr_nonnull(pr);
	json_t *text = json_object_get(pr, "text");
	char name[64];
	snprintf(name, sizeof name, "%s prompt %d", small_names[m], p);
	check_json_ids(t, json_string_value(text), json_string_length(text), json_object_get(pr, "prompt_ids"), name);
	ck_assert_int_eq(tokenizer_eos(t), 2048);   /* <|endoftext|>, the config's eos_token */
	ck_assert_int_eq(tokenizer_bos(t), -1);
	tokenizer_free(t);
}
END_TEST

/* Cases of our own; ids from transformers.js (@lenml/tokenizers 3.7.2) with the same tokenizer.json. */
typedef struct own_case {
	const char *name, *text;
	size_t len;
	int n;
	int32_t ids[64];
} own_case;

static const own_case own_cases[] = {
	{"emoji_mix", "I \xe2\x9d\xa4\xef\xb8\x8f \xf0\x9f\x8d\x95 and \xf0\x9f\x91\xa9\xf0\x9f\x8f\xbd\xe2\x80\x8d\xf0\x9f\x92\xbb! \xf0\x9f\x8e\x89\xf0\x9f\x8e\x89\xf0\x9f\x8e\x89 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbf", 56, 22, {40, 70470, 30543, 11162, 235, 243, 323, 61804, 102, 145375, 378, 235, 145851, 0, 11162, 236, 231, 144841, 144841, 61804, 235, 146530}},
	{"japanese", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82\xe6\x9d\xb1\xe4\xba\xac\xe3\x82\xbf\xe3\x83\xaf\xe3\x83\xbc\xe3\x81\xab\xe8\xa1\x8c\xe3\x81\x8d\xe3\x81\xbe\xe3\x81\x97\xe3\x82\x87\xe3\x81\x86\xef\xbc\x81", 72, 16, {101059, 102819, 15767, 56833, 61803, 70534, 37541, 1773, 102356, 46553, 46207, 125980, 126059, 49734, 132942, 6313}},
	{"chinese_punct", "\xe4\xb8\xad\xe6\x96\x87\xe5\x88\x86\xe8\xaf\x8d\xe6\xb5\x8b\xe8\xaf\x95\xef\xbc\x9a\xe5\x8c\x97\xe4\xba\xac\xe6\xac\xa2\xe8\xbf\x8e\xe4\xbd\xa0\xef\xbc\x81\xef\xbc\x88\xe6\x8b\xac\xe5\x8f\xb7\xef\xbc\x89\xe3\x80\x8a\xe4\xb9\xa6\xe5\x90\x8d\xe3\x80\x8b", 63, 17, {104811, 17177, 99689, 81705, 5122, 68990, 100437, 56568, 6313, 9909, 100139, 17992, 7552, 26940, 90286, 13072, 25067}},
	{"korean_jamo", "\xed\x95\x9c\xea\xb8\x80 \xec\x9e\x90\xeb\xaa\xa8 \xe3\x84\xb1\xe3\x84\xb4\xe3\x84\xb7 \xea\xb0\x80\xeb\x82\x98\xeb\x8b\xa4\xeb\x9d\xbc", 36, 12, {23573, 83291, 64577, 129439, 220, 145017, 145089, 145039, 35509, 60315, 13146, 50340}},
	{"arabic_digits", "\xd8\xa7\xd9\x84\xd8\xb3\xd9\x84\xd8\xa7\xd9\x85 \xd8\xb9\xd9\x84\xd9\x8a\xd9\x83\xd9\x85 \xd9\x88\xd8\xb1\xd8\xad\xd9\x85\xd8\xa9 \xd8\xa7\xd9\x84\xd9\x84\xd9\x87 \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 \xd9\x88 5678", 60, 23, {31382, 124941, 124794, 124613, 37524, 126860, 124325, 128286, 220, 149, 94, 149, 95, 149, 96, 149, 97, 37524, 220, 20, 21, 22, 23}},
	{"combining_compose", "e\xcc\x81 a\xcc\x88 o\xcc\x83 n\xcc\x83o", 16, 7, {963, 12709, 1683, 113, 1683, 109, 78}},
	{"combining_zalgo", "Z\xcd\x91\xcd\xab\xcd\x83\xcd\xaa\xcc\x82" "a\xcc\x80\xcc\x81\xcc\x82\xcc\x83l", 21, 18, {57, 137, 239, 137, 104, 136, 241, 137, 103, 136, 224, 6362, 53839, 136, 224, 136, 225, 75}},
	{"hangul_jamo_nfc", "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 \xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", 19, 2, {126317, 61298}},
	{"combining_lead", "\xcc\x81" "abc \xcc\x88", 8, 5, {53839, 13683, 220, 136, 230}},
	{"digit_runs", "1234567890 0.5 3,141,592 2025-11-30 00000000000000000000", 56, 56, {16, 17, 18, 19, 20, 21, 22, 23, 24, 15, 220, 15, 13, 20, 220, 18, 11, 16, 19, 16, 11, 20, 24, 17, 220, 17, 15, 17, 20, 12, 16, 16, 12, 18, 15, 220, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15}},
	{"contractions", "We'll, you'll, THEY'LL, It'S, don't, I'M, we'RE, he'd, 'll", 58, 27, {1654, 3278, 11, 498, 3278, 11, 62493, 6, 4086, 11, 1084, 13272, 11, 1513, 944, 11, 358, 27603, 11, 582, 94153, 11, 566, 4172, 11, 364, 654}},
	{"whitespace_runs", "a  b   c    d\t\te\n\n\nf   \n  g", 27, 14, {64, 220, 293, 256, 272, 262, 294, 197, 7727, 1406, 69, 5872, 220, 342}},
	{"trailing_spaces", "trailing spaces   ", 18, 4, {376, 14277, 12621, 262}},
	{"space_newline_mix", "   \n\n   x \n \n", 13, 4, {33933, 256, 856, 31906}},
	{"crlf", "a\r\nb\r\n\r\nc\r", 10, 6, {64, 319, 65, 871, 66, 201}},
	{"cr_only", "\r\r\n\n\r", 5, 3, {201, 80823, 201}},
	{"tabs", "\tindented\n\t\tdouble\t tab\t", 24, 9, {197, 484, 15864, 198, 197, 8646, 197, 5651, 197}},
	{"special_inside", "abc<|im_start|>def<|endoftext|><|im_end|>", 41, 5, {13683, 151644, 750, 151643, 151645}},
	{"special_repeat", "<|im_start|><|im_start|> <|im_end|>\n", 36, 5, {151644, 151644, 220, 151645, 198}},
	{"special_broken", "<|im_sta rt|> <|im_end| > <|endoftext", 37, 16, {27, 91, 318, 79951, 16677, 91, 29, 82639, 318, 6213, 91, 861, 82639, 8691, 723, 427}},
	{"think_inline", "x<think></think>y<tool_call>{\"a\":1}</tool_call>", 47, 11, {87, 151667, 151668, 88, 151657, 4913, 64, 788, 16, 92, 151658}},
	{"fim", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", 51, 7, {151659, 750, 282, 4555, 151661, 198, 151660}},
	{"special_spaces", "<|endoftext|> leading space after", 33, 4, {151643, 6388, 3550, 1283}},
	{"code_c", "for (int i=0;i<n;++i){ x+=y[i]*2; }  // done", 44, 22, {1958, 320, 396, 600, 28, 15, 4696, 15724, 36507, 72, 6098, 856, 8496, 88, 989, 8465, 17, 26, 335, 220, 442, 2814}},
	{"greek_cyrillic", "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac \xd0\xa0\xd1\x83\xd1\x81\xd1\x81\xd0\xba\xd0\xb8\xd0\xb9 \xd7\xa2\xd7\x91\xd7\xa8\xd7\x99\xd7\xaa \xe0\xb9\x84\xe0\xb8\x97\xe0\xb8\xa2", 52, 14, {144674, 33486, 33486, 41424, 33269, 29762, 67337, 74134, 140869, 126302, 131917, 123826, 220, 125451}},
	{"math", "\xe2\x88\x91\xe2\x88\xab\xe2\x88\x82\xe2\x88\x9a\xe2\x88\x9e \xe2\x89\xa0 \xe2\x89\xa4 \xe2\x89\xa5 x\xc2\xb2 + y\xc2\xb3 = z\xe2\x81\xb4", 44, 17, {145127, 145706, 145371, 144336, 144677, 94304, 37294, 62147, 856, 29456, 488, 379, 43201, 284, 1147, 52133, 112}},
	{"nul_byte", "a\x00" "b", 3, 3, {64, 188, 65}},
	{"long_word_caps", "SUPERCALIFRAGILISTICEXPIALIDOCIOUS", 34, 14, {75932, 27434, 969, 2773, 49, 1890, 1715, 82556, 3257, 1893, 969, 915, 7612, 42652}},
	{"apostrophe_mixed", "rock'n'roll o'clock 'quoted' \xe2\x80\x99" "curly\xe2\x80\x99", 40, 13, {20521, 43786, 6, 1100, 297, 62410, 364, 63725, 6, 17744, 2352, 398, 527}},
	{"symbols_run", "!!!??? ... --- ___ *** ###", 26, 7, {12069, 33015, 2503, 12448, 7436, 17160, 16600}},
	{"url_email", "mailto:someone@example.org http://a.b/c?d=e#f", 45, 16, {38526, 14495, 635, 603, 35487, 2659, 1758, 1110, 64, 948, 2899, 30, 67, 40391, 2, 69}},
	{"json", "{\"key\": [1, 2.5, null, true], \"s\": \"x\\ny\"}", 42, 23, {4913, 792, 788, 508, 16, 11, 220, 17, 13, 20, 11, 845, 11, 830, 1125, 330, 82, 788, 330, 87, 1699, 88, 9207}},
};
#define N_OWN ((int)(sizeof own_cases / sizeof own_cases[0]))

START_TEST(test_qwen3_own_case)
{
	const tokenizer *t = need_qwen3();
	const own_case *c = &own_cases[_i];
	int64_t cnt;
	int32_t *ids = enc(t, c->text, c->len, false, &cnt);
	assert_ids(ids, cnt, c->ids, c->n, c->name);
	free(ids);
	assert_roundtrip(t, c->text, c->len, c->name);
}
END_TEST

/* ---- round trip on a varied, generated corpus ---- */

static uint64_t rng_state;
static uint32_t rng(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

/* A random valid UTF-8 string drawn from many scripts, whitespace kinds, marks, emoji and special-token text.
 * U+0338 is left out: after "<|…|>" it would compose with the '>' in NFC(s), while the special token is found
 * in the raw text first (as Hugging Face does), so that one case is not a round trip by design. */
static size_t random_text(char *out, size_t max)
{
	static const uint32_t ranges[][2] = {
		{0x20, 0x7E}, {0x20, 0x7E}, {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0xFF}, {0x300, 0x337}, {0x370, 0x3FF},
		{0x400, 0x4FF}, {0x590, 0x5FF}, {0x600, 0x6FF}, {0x900, 0x97F}, {0xE00, 0xE7F}, {0x1100, 0x11FF},
		{0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFE00, 0xFE0F},
		{0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}, {0x85, 0x85}, {0xFEFF, 0xFEFF}, {0x30, 0x39}, {0x200D, 0x200D},
	};
	static const char *const specials[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<|im_", "'ll",
	                                       "\r\n", "   ", "'S"};
	size_t n = 0, want = rng((uint32_t)max / 5);
	while (n < want && n + 16 < max) {
		if (rng(20) == 0) {
			const char *s = specials[rng(sizeof specials / sizeof specials[0])];
			memcpy(out + n, s, strlen(s));
			n += strlen(s);
			continue;
		}
		const uint32_t *r = ranges[rng(sizeof ranges / sizeof ranges[0])];
		uint32_t cp = r[0] + rng(r[1] - r[0] + 1);
		if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x338) continue;
		n += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out + n);
	}
	return n;
}

START_TEST(test_qwen3_roundtrip_random)
{
	const tokenizer *t = need_qwen3();
	char buf[1200], name[32];
	rng_state = 0x9E3779B97F4A7C15ull;
	for (int k = 0; k < 400; k++) {
		size_t n = random_text(buf, sizeof buf);
		snprintf(name, sizeof name, "random text %d", k);
		assert_roundtrip(t, buf, n, name);
	}
}
END_TEST

/* Inputs that stress one pre-token or one regex run: long letter runs go through the heap merge in one piece. */
START_TEST(test_qwen3_long_runs)
{
	const tokenizer *t = need_qwen3();
	static const char *const units[] = {" ", "a", "\xe4\xb8\xad", "7", "\n", "\r\n", "!", "\xf0\x9f\x98\x80", "\t "};
	size_t n = 200000;
	char *s = malloc(n + 8);
	for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
		size_t l = strlen(units[u]), m = 0;
		while (m + l <= n) memcpy(s + m, units[u], l), m += l;
		char name[32];
		snprintf(name, sizeof name, "run of unit %zu", u);
		assert_roundtrip(t, s, m, name);
	}
	free(s);
}
END_TEST

/* ---- streaming ---- */

START_TEST(test_stream_matches_decode)
{
	const tokenizer *t = need_qwen3();
	char buf[1200];
	rng_state = 42;
	for (int k = 0; k < 200 + N_OWN; k++) {
		const char *s = buf;
		size_t n;
		if (k < N_OWN) {
			s = own_cases[k].text;
			n = own_cases[k].len;
		} else {
			n = random_text(buf, sizeof buf);
		}
		int64_t cnt, len;
		int32_t *ids = enc(t, s, n, false, &cnt);
		char *whole = dec(t, ids, cnt, true, &len);
		char *streamed = malloc((size_t)len + 16), chunk[512];
		int64_t at = 0;
		tokenizer_stream st;
		tokenizer_stream_init(&st, t, true);
		for (int64_t i = 0; i < cnt; i++) {
			int64_t w = tokenizer_stream_push(&st, ids[i], chunk, sizeof chunk);
			ck_assert_int_ge(w, 0);
			ck_assert_msg(valid_utf8(chunk, (size_t)w), "stream chunk %lld of text %d is not whole UTF-8",
			              (long long)i, k);
			ck_assert_int_le(at + w, len);
			memcpy(streamed + at, chunk, (size_t)w);
			at += w;
		}
		int64_t w = tokenizer_stream_flush(&st, chunk, sizeof chunk);
		ck_assert_int_eq(w, 0);   /* valid text leaves nothing held */
		ck_assert_int_eq(at, len);
		ck_assert_msg(memcmp(streamed, whole, (size_t)len) == 0, "text %d: streamed output differs from decode", k);
		free(streamed);
		free(whole);
		free(ids);
	}
}
END_TEST

/* The token made of the single byte b (every byte-level vocabulary has one). */
static int32_t byte_token(const tokenizer *t, unsigned char b)
{
	char one[8];
	for (int32_t id = 0; id < tokenizer_vocab_size(t); id++)
		if (tokenizer_token_bytes(t, id, one, sizeof one) == 1 && (unsigned char)one[0] == b) return id;
	ck_abort_msg("no token for byte 0x%02x", b);
	return -1;
}

/* Streams the tokens of the given bytes; returns the concatenated output (static buffer). */
static const char *stream_bytes(const tokenizer *t, const char *bytes, size_t n, bool flush, int64_t *out_len)
{
	static char out[256];
	tokenizer_stream st;
	tokenizer_stream_init(&st, t, false);
	int64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t w = tokenizer_stream_push(&st, byte_token(t, (unsigned char)bytes[i]), out + at, 16);
		ck_assert_int_ge(w, 0);
		at += w;
	}
	if (flush) at += tokenizer_stream_flush(&st, out + at, 16);
	*out_len = at;
	return out;
}

#define FFFD "\xef\xbf\xbd"

START_TEST(test_stream_cut_characters)
{
	const tokenizer *t = need_qwen3();
	static const struct {
		const char *in, *out;
		bool flush;
	} cases[] = {
		{"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80", true},        /* a 4-byte emoji, one byte per token */
		{"\xe4\xb8\xad\xe6\x96", "\xe4\xb8\xad", false},       /* the cut character is held, not emitted */
		{"\xe4\xb8\xad\xe6\x96", "\xe4\xb8\xad" FFFD, true},   /* and becomes U+FFFD at the end */
		{"\xf0\x9f\x41", FFFD "A", true},                       /* a maximal invalid subpart is one U+FFFD */
		{"\x80\x80", FFFD FFFD, true},                          /* lone continuation bytes */
		{"\xc0\x80", FFFD FFFD, true},                          /* overlong */
		{"\xed\xa0\x80", FFFD FFFD FFFD, true},                 /* a surrogate */
		{"\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD, true},        /* past U+10FFFF */
		{"\xff" "a\xc3\xa9", FFFD "a\xc3\xa9", true},
		{"\xc3", "", false},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		int64_t n;
		const char *got = stream_bytes(t, cases[k].in, strlen(cases[k].in), cases[k].flush, &n);
		ck_assert_msg((size_t)n == strlen(cases[k].out) && memcmp(got, cases[k].out, (size_t)n) == 0,
		              "stream case %zu", k);
		/* decode makes the same substitutions (and always ends incomplete characters) */
		if (cases[k].flush) {
			int32_t ids[8];
			size_t m = strlen(cases[k].in);
			for (size_t i = 0; i < m; i++) ids[i] = byte_token(t, (unsigned char)cases[k].in[i]);
			int64_t len;
			char *d = dec(t, ids, (int64_t)m, false, &len);
			ck_assert_msg(len == n && memcmp(d, cases[k].out, (size_t)n) == 0, "decode case %zu", k);
			free(d);
		}
	}
}
END_TEST

START_TEST(test_stream_small_buffer)
{
	const tokenizer *t = need_qwen3();
	int64_t cnt;
	int32_t *ids = enc(t, "Hello world", 11, false, &cnt);
	tokenizer_stream st;
	tokenizer_stream_init(&st, t, false);
	char out[16];
	ck_assert_int_eq(tokenizer_stream_push(&st, ids[0], out, 2), -1);   /* "Hello" needs 5 bytes */
	ck_assert_int_eq(tokenizer_stream_push(&st, ids[0], out, sizeof out), 5);   /* nothing was lost */
	ck_assert_int_eq(tokenizer_stream_push(&st, -1, out, sizeof out), -1);
	ck_assert_int_eq(tokenizer_stream_push(&st, tokenizer_vocab_size(t), out, sizeof out), -1);
	/* skip_special drops special tokens but keeps <think>, which Qwen3 does not mark special */
	tokenizer_stream_init(&st, t, true);
	ck_assert_int_eq(tokenizer_stream_push(&st, 151645, out, sizeof out), 0);
	ck_assert_int_eq(tokenizer_stream_push(&st, 151667, out, sizeof out), 7);
	ck_assert_int_eq(memcmp(out, "<think>", 7), 0);
	free(ids);
}
END_TEST

/* ---- interface details ---- */

START_TEST(test_invalid_utf8_refused)
{
	const tokenizer *t = need_qwen3();
	static const char *const bad[] = {"\xff", "abc\xc0\x80", "\xed\xa0\x80", "\xe4\xbd", "x\xf4\x90\x80\x80",
	                                  "\x80", "ok\xc3", "\xf8\x88\x80\x80\x80", "<|im_end|>\xfe"};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		char err[128] = "";
		int32_t ids[16];
		ck_assert_int_eq(tokenizer_encode(t, bad[k], strlen(bad[k]), false, ids, 16, err, sizeof err), -1);
		ck_assert_msg(strstr(err, "UTF-8"), "case %zu: message '%s'", k, err);
	}
	char err[128] = "";
	int32_t ids[4];
	ck_assert_int_eq(tokenizer_encode(t, "a\0b", 3, false, ids, 4, err, sizeof err), 3);   /* NUL is valid */
	ck_assert_int_eq(tokenizer_encode(t, NULL, 0, false, ids, 4, err, sizeof err), 0);
	ck_assert_int_eq(tokenizer_encode(t, NULL, 5, false, ids, 4, err, sizeof err), -1);
}
END_TEST

START_TEST(test_capacity_and_meta)
{
	const tokenizer *t = need_qwen3();
	const char *s = "<|im_start|>user\nHi<|im_end|>";
	int32_t ids[8] = {0};
	char err[128];
	ck_assert_int_eq(tokenizer_encode(t, s, strlen(s), true, NULL, 0, err, sizeof err), 5);
	ck_assert_int_eq(tokenizer_encode(t, s, strlen(s), true, ids, 2, err, sizeof err), 5);
	ck_assert_int_eq(ids[0], 151644);
	ck_assert_int_eq(ids[1], 872);
	ck_assert_int_eq(ids[2], 0);   /* nothing past cap */

	ck_assert_int_eq(tokenizer_vocab_size(t), 151669);
	ck_assert_int_eq(tokenizer_bos(t), -1);
	ck_assert_int_eq(tokenizer_eos(t), 151645);   /* tokenizer_config.json: <|im_end|> */
	ck_assert(!tokenizer_add_bos(t));
	ck_assert_str_eq(tokenizer_token_text(t, 151644), "<|im_start|>");
	ck_assert_str_eq(tokenizer_token_text(t, 21927), "\xc4\xa0Hello");   /* "ĠHello" */
	ck_assert_ptr_null(tokenizer_token_text(t, -1));
	ck_assert_ptr_null(tokenizer_token_text(t, 151669));
	ck_assert(tokenizer_is_special(t, 151643));
	ck_assert(!tokenizer_is_special(t, 151667));
	ck_assert(!tokenizer_is_special(t, 9707));
	ck_assert(!tokenizer_is_special(t, 999999));
	char b[16];
	ck_assert_int_eq(tokenizer_token_bytes(t, 21927, b, sizeof b), 6);
	ck_assert_int_eq(memcmp(b, " Hello", 6), 0);
	ck_assert_int_eq(tokenizer_token_bytes(t, 21927, b, 2), 6);
	ck_assert_int_eq(tokenizer_token_bytes(t, -3, b, sizeof b), -1);
	ck_assert_int_eq(tokenizer_token_bytes(t, 151669, b, sizeof b), -1);

	int32_t chat[] = {151644, 872, 198, 13048, 151645, 151667};
	char out[64];
	ck_assert_int_eq(tokenizer_decode(t, chat, 6, false, out, sizeof out), 36);
	ck_assert_str_eq(out, "<|im_start|>user\nHi<|im_end|><think>");
	ck_assert_int_eq(tokenizer_decode(t, chat, 6, true, out, sizeof out), 14);
	ck_assert_str_eq(out, "user\nHi<think>");
	ck_assert_int_eq(tokenizer_decode(t, chat, 6, false, out, 5), 36);   /* size reported past cap */
	ck_assert_int_eq(memcmp(out, "<|im_", 5), 0);
	int32_t bad[] = {9707, 151669};
	ck_assert_int_eq(tokenizer_decode(t, bad, 2, false, out, sizeof out), -1);
	bad[1] = -1;
	ck_assert_int_eq(tokenizer_decode(t, bad, 2, false, out, sizeof out), -1);
}
END_TEST

typedef struct thread_job {
	const tokenizer *t;
	int bad;
} thread_job;

static void *encode_many(void *arg)
{
	thread_job *j = arg;
	char err[128];
	int32_t ids[128];
	for (int rep = 0; rep < 20; rep++)
		for (int k = 0; k < N_OWN; k++) {
			int64_t n = tokenizer_encode(j->t, own_cases[k].text, own_cases[k].len, false, ids, 128, err, sizeof err);
			if (n != own_cases[k].n || memcmp(ids, own_cases[k].ids, (size_t)n * sizeof *ids) != 0) j->bad++;
		}
	return NULL;
}

START_TEST(test_concurrent_encode)
{
	const tokenizer *t = need_qwen3();
	pthread_t th[4];
	thread_job jobs[4];
	for (int i = 0; i < 4; i++) {
		jobs[i] = (thread_job){t, 0};
		ck_assert_int_eq(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(jobs[i].bad, 0);
	}
}
END_TEST

/* ---- a synthetic GPT-2 style tokenizer.json: ByteLevel with use_regex and add_prefix_space, "a b" merges,
 * ignore_merges, an lstrip/rstrip normalized added token, BOS from tokenizer_config.json ---- */

static char tmp_root[256];

/* tmp_root is made by main, before the tests fork, so that main can remove it afterwards. */
static const char *tmp_dir(const char *sub)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", tmp_root, sub);
	mkdir(path, 0700);
	return path;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[600];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* GPT-2's byte → character map, written out again here so the test does not lean on the code it tests. */
static void gpt2_char(int b, char *out)
{
	int n = 0;
	for (int c = 0; c < b; c++)
		if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
	bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
	int cp = printable ? b : 256 + n;
	out[utf8proc_encode_char(cp, (utf8proc_uint8_t *)out)] = '\0';
}

static const char *synth_merges[][2] = {{"h", "e"}, {"l", "l"}, {"\xc4\xa0", "w"}, {"he", "ll"}, {"hell", "o"},
                                        {"\xc4\xa0w", "o"}, {"\xc4\xa0wo", "r"}, {"l", "d"}, {"\xc4\xa0wor", "ld"},
                                        {"\xc4\xa0", "hello"}};

/* variant 0: "a b" merges; 1: ["a", "b"] merges; 2: BOS from a TemplateProcessing post-processor (Llama 3 style),
 * the config saying nothing of add_bos_token */
static void write_synth(const char *dir, int variant)
{
	bool pair_merges = variant == 1;
	json_t *vocab = json_object(), *merges = json_array();
	char ch[8];
	for (int b = 0; b < 256; b++) {
		gpt2_char(b, ch);
		json_object_set_new(vocab, ch, json_integer(b));
	}
	int id = 256;
	for (size_t k = 0; k < sizeof synth_merges / sizeof synth_merges[0]; k++) {
		char joined[64];
		snprintf(joined, sizeof joined, "%s%s", synth_merges[k][0], synth_merges[k][1]);
		json_object_set_new(vocab, joined, json_integer(id++));
		if (pair_merges) {
			json_array_append_new(merges, json_pack("[ss]", synth_merges[k][0], synth_merges[k][1]));
		} else {
			snprintf(joined, sizeof joined, "%s %s", synth_merges[k][0], synth_merges[k][1]);
			json_array_append_new(merges, json_string(joined));
		}
	}
	json_object_set_new(vocab, "\xc4\xa0xyz", json_integer(id++));   /* 266, reachable only by ignore_merges */
	json_t *added = json_pack("[{sisssbsbsbsbsb}{sisssbsbsbsbsb}{sisssbsbsbsbsb}]",
	                          "id", 267, "content", "<eos>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
	                          "special", 1,
	                          "id", 268, "content", "[MASK]", "single_word", 0, "lstrip", 1, "rstrip", 1, "normalized", 1,
	                          "special", 0,
	                          "id", 269, "content", "<bos>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
	                          "special", 1);
	json_t *bl = json_pack("{sssbsbsb}", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1);
	json_t *root = json_pack("{sosnsOsOs{sssnsbsoso}}", "added_tokens", added, "normalizer", "pre_tokenizer", bl,
	                         "decoder", bl, "model", "type", "BPE", "unk_token", "ignore_merges", 1, "vocab", vocab,
	                         "merges", merges);
	ck_assert_ptr_nonnull(root);
	if (variant == 2)
		json_object_set_new(root, "post_processor",
		                    json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}", "type",
		                              "TemplateProcessing", "single", "SpecialToken", "id", "<bos>", "type_id", 0,
		                              "Sequence", "id", "A", "type_id", 0, "special_tokens", "<bos>", "id", "<bos>",
		                              "ids", 269, "tokens", "<bos>"));
	char path[600];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	ck_assert_int_eq(json_dump_file(root, path, 0), 0);
	json_decref(root);
	json_decref(bl);
	write_file(dir, "tokenizer_config.json",
	           variant == 2 ? "{\"eos_token\": {\"content\": \"<eos>\"}}"
	                        : "{\"bos_token\": \"<bos>\", \"eos_token\": {\"content\": \"<eos>\"}, \"add_bos_token\": true}");
}

START_TEST(test_synthetic_gpt2_style)
{
	/* ids from transformers.js on the same files */
	static const struct {
		const char *text;
		int n;
		int32_t ids[16];
	} cases[] = {
		{"hello world", 2, {265, 264}},
		{"hello  xyz", 3, {265, 32, 266}},
		{" xyz", 1, {266}},
		{"xyz", 1, {266}},
		{"hello [MASK] world", 3, {265, 268, 264}},
		{"hello<eos>world", 3, {265, 267, 264}},
		{"x  [MASK]  y", 5, {32, 120, 268, 32, 121}},
		{"HELLO 123 it's", 15, {32, 72, 69, 76, 76, 79, 32, 49, 50, 51, 32, 105, 116, 39, 115}},
		{"hello\n\nworld  ", 9, {265, 10, 10, 119, 111, 114, 263, 32, 32}},
		{"w\xc3\xb6rld h\xc3\xa9llo", 11, {258, 195, 182, 114, 263, 32, 104, 195, 169, 257, 111}},
	};
	static const char *const dirs[] = {"synth-strings", "synth-pairs", "synth-template"};
	for (int variant = 0; variant < 3; variant++) {
		const char *dir = tmp_dir(dirs[variant]);
		write_synth(dir, variant);
		char err[256] = "";
		tokenizer *t = tokenizer_load(dir, err, sizeof err);
		ck_assert_msg(t, "%s", err);
		ck_assert_int_eq(tokenizer_vocab_size(t), 270);
		ck_assert_int_eq(tokenizer_bos(t), 269);
		ck_assert_int_eq(tokenizer_eos(t), 267);
		ck_assert(tokenizer_add_bos(t));
		for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
			int64_t cnt;
			int32_t *ids = enc(t, cases[k].text, strlen(cases[k].text), false, &cnt);
			assert_ids(ids, cnt, cases[k].ids, cases[k].n, cases[k].text);
			free(ids);
		}
		int64_t cnt;
		int32_t *ids = enc(t, "hello", 5, true, &cnt);
		ck_assert_int_eq(cnt, 2);
		ck_assert_int_eq(ids[0], 269);
		free(ids);
		tokenizer_free(t);
	}
}
END_TEST

/* Split behaviors on Hugging Face's documented example: "the-final--countdown" split at "-" gives
 * Removed [the][final][countdown], Isolated [the][-][final][-][-][countdown], MergedWithPrevious
 * [the-][final-][-][countdown], MergedWithNext [the][-final][-][-countdown], Contiguous [the][-][final][--][countdown].
 * Merges for "e-", "l-", "-f", "--", "-c" make the piece edges visible: they apply only inside a piece. */
START_TEST(test_split_behaviors)
{
	static const struct {
		const char *behavior, *want;
	} cases[] = {
		{"Removed", "t|h|e|f|i|n|a|l|c|o|u|n|t|d|o|w|n"},
		{"Isolated", "t|h|e|-|f|i|n|a|l|-|-|c|o|u|n|t|d|o|w|n"},
		{"MergedWithPrevious", "t|h|e-|f|i|n|a|l-|-|c|o|u|n|t|d|o|w|n"},
		{"MergedWithNext", "t|h|e|-f|i|n|a|l|-|-c|o|u|n|t|d|o|w|n"},
		{"Contiguous", "t|h|e|-|f|i|n|a|l|--|c|o|u|n|t|d|o|w|n"},
	};
	static const char *merges[][2] = {{"e", "-"}, {"l", "-"}, {"-", "f"}, {"-", "-"}, {"-", "c"}};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		json_t *vocab = json_object(), *ml = json_array();
		char ch[8], joined[16];
		for (int b = 0; b < 256; b++) {
			gpt2_char(b, ch);
			json_object_set_new(vocab, ch, json_integer(b));
		}
		for (int m = 0; m < 5; m++) {
			snprintf(joined, sizeof joined, "%s%s", merges[m][0], merges[m][1]);
			json_object_set_new(vocab, joined, json_integer(256 + m));
			json_array_append_new(ml, json_pack("[ss]", merges[m][0], merges[m][1]));
		}
		json_t *root = json_pack("{s:[], s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b}]}, "
		                         "s:{s:s}, s:{s:s, s:o, s:o}}",
		                         "added_tokens", "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split",
		                         "pattern", "String", "-", "behavior", cases[k].behavior, "invert", 0, "type",
		                         "ByteLevel", "add_prefix_space", 0, "use_regex", 0, "decoder", "type", "ByteLevel",
		                         "model", "type", "BPE", "vocab", vocab, "merges", ml);
		ck_assert_ptr_nonnull(root);
		char sub[64], path[700], err[256] = "";
		snprintf(sub, sizeof sub, "split-%s", cases[k].behavior);
		const char *dir = tmp_dir(sub);
		snprintf(path, sizeof path, "%s/tokenizer.json", dir);
		ck_assert_int_eq(json_dump_file(root, path, 0), 0);
		json_decref(root);
		tokenizer *t = tokenizer_load(dir, err, sizeof err);
		ck_assert_msg(t, "%s", err);
		int64_t cnt;
		int32_t *ids = enc(t, "the-final--countdown", 20, false, &cnt);
		char got[256] = "";
		for (int64_t i = 0; i < cnt; i++)
			snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? "|" : "", tokenizer_token_text(t, ids[i]));
		ck_assert_msg(strcmp(got, cases[k].want) == 0, "%s: %s, want %s", cases[k].behavior, got, cases[k].want);
		free(ids);
		tokenizer_free(t);
	}
}
END_TEST

START_TEST(test_load_errors)
{
	static const struct {
		const char *json, *expect;
	} bad[] = {
		{"{", "tokenizer.json"},
		{"[]", "BPE"},
		{"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "BPE"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "not in the vocabulary"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "merge"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "id"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}", "pre_tokenizer"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
		 "pattern"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Lowercase\"}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "normalizer"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "byte-level"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1}], "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "added_tokens"},
	};
	char err[512];
	ck_assert_ptr_null(tokenizer_load("/nonexistent/dir", err, sizeof err));
	ck_assert(strstr(err, "neither"));
	ck_assert_ptr_null(tokenizer_load(NULL, err, sizeof err));
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		char sub[32];
		snprintf(sub, sizeof sub, "bad-%zu", k);
		const char *dir = tmp_dir(sub);
		write_file(dir, "tokenizer.json", bad[k].json);
		err[0] = '\0';
		ck_assert_ptr_null(tokenizer_load(dir, err, sizeof err));
		ck_assert_msg(strstr(err, bad[k].expect), "case %zu: message '%s' lacks '%s'", k, err, bad[k].expect);
	}
	/* a good tokenizer.json with a tokenizer_config.json naming a missing token */
	const char *dir = tmp_dir("bad-config");
	write_synth(dir, 0);
	write_file(dir, "tokenizer_config.json", "{\"bos_token\": \"<nope>\"}");
	ck_assert_ptr_null(tokenizer_load(dir, err, sizeof err));
	ck_assert(strstr(err, "<nope>"));
}
END_TEST

/* ---- SentencePiece: a model trained here by Debian's spm_train ---- */

static const char *spm_words[] = {"the", "river", "mountain", "snow", "village", "children", "bridge", "stories",
                                  "quiet", "library", "reads", "books", "café", "naïve", "Straße", "über", "garden",
                                  "window", "morning", "evening", "token", "model", "server", "window", "stream"};

/* Writes the training text: sentences from a word list, deterministic. */
static void write_spm_corpus(const char *path)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	rng_state = 7;
	for (int line = 0; line < 3000; line++) {
		int n = 4 + (int)rng(10);
		for (int w = 0; w < n; w++)
			fprintf(f, "%s%s", w ? " " : "", spm_words[rng(sizeof spm_words / sizeof spm_words[0])]);
		fprintf(f, "%s\n", rng(3) ? "." : ", 1234 times!");
	}
	fclose(f);
}

static const char *spm_texts[] = {
	"the river reads books in the morning.",
	"Straße über café, naïve village 1234 times!",
	"unseen words like zebra and quokka",
	"emoji \xf0\x9f\x9a\x80 and \xe4\xb8\xad\xe6\x96\x87 fall back to bytes",
	"a  double  space and trailing",
};

/* ids from sentencepiece's own command-line encoder, one line per text */
static void spm_reference(const char *model, int32_t ref[][256], int *ref_n, int n_texts)
{
	char path[600], cmd[1400];
	snprintf(path, sizeof path, "%s/in.txt", tmp_root);
	FILE *f = fopen(path, "w");
	for (int k = 0; k < n_texts; k++) fprintf(f, "%s\n", spm_texts[k]);
	fclose(f);
	snprintf(cmd, sizeof cmd, "spm_encode --model=%s --output_format=id < %s", model, path);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[8192];
	for (int k = 0; k < n_texts; k++) {
		ck_assert_msg(fgets(line, sizeof line, p), "spm_encode gave fewer lines");
		ref_n[k] = 0;
		for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n")) ref[k][ref_n[k]++] = atoi(tok);
	}
	ck_assert_int_eq(pclose(p), 0);
}

START_TEST(test_sentencepiece_trained)
{
	static const char *types[] = {"unigram", "bpe"};
	ck_assert_msg(system("command -v spm_train >/dev/null 2>&1") == 0,
	              "spm_train is missing (Debian package sentencepiece)");
	const char *type = types[_i];
	const char *dir = tmp_dir(type);
	char corpus[600], cmd[2000], model[600];
	snprintf(corpus, sizeof corpus, "%s/corpus.txt", tmp_root);
	write_spm_corpus(corpus);
	/* identity normalization keeps decode(encode(s)) == s; byte_fallback covers unseen characters */
	snprintf(cmd, sizeof cmd,
	         "spm_train --input=%s --model_prefix=%s/tokenizer --vocab_size=400 --hard_vocab_limit=false "
	         "--model_type=%s --character_coverage=1.0 --byte_fallback=true --normalization_rule_name=identity "
	         "--remove_extra_whitespaces=false >%s/train.log 2>&1",
	         corpus, dir, type, dir);
	ck_assert_msg(system(cmd) == 0, "spm_train failed: see %s/train.log", dir);
	snprintf(model, sizeof model, "%s/tokenizer.model", dir);

	char err[256] = "";
	tokenizer *t = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(t, "%s", err);
	ck_assert_int_gt(tokenizer_vocab_size(t), 259);   /* 3 control pieces, 256 bytes, then the learned ones */
	ck_assert_int_le(tokenizer_vocab_size(t), 400);
	ck_assert_int_eq(tokenizer_bos(t), 1);   /* spm_train's defaults: <unk> 0, <s> 1, </s> 2 */
	ck_assert_int_eq(tokenizer_eos(t), 2);
	ck_assert(tokenizer_add_bos(t));
	ck_assert(tokenizer_is_special(t, 1));
	ck_assert(!tokenizer_is_special(t, 0));
	ck_assert_str_eq(tokenizer_token_text(t, 2), "</s>");

	enum { N = sizeof spm_texts / sizeof spm_texts[0] };
	static int32_t ref[N][256];
	int ref_n[N];
	spm_reference(model, ref, ref_n, N);
	for (int k = 0; k < N; k++) {
		size_t n = strlen(spm_texts[k]);
		int64_t cnt, len;
		int32_t *ids = enc(t, spm_texts[k], n, false, &cnt);
		assert_ids(ids, cnt, ref[k], ref_n[k], spm_texts[k]);
		char *back = dec(t, ids, cnt, false, &len);
		ck_assert_msg((size_t)len == n && memcmp(back, spm_texts[k], n) == 0, "%s: decoded as '%s'", type, back);
		/* streaming keeps the dummy-prefix space (a continuation needs it) and never cuts a character */
		tokenizer_stream st;
		tokenizer_stream_init(&st, t, false);
		char chunk[64], streamed[512];
		int64_t at = 0;
		for (int64_t i = 0; i < cnt; i++) {
			int64_t w = tokenizer_stream_push(&st, ids[i], chunk, sizeof chunk);
			ck_assert_int_ge(w, 0);
			ck_assert(valid_utf8(chunk, (size_t)w));
			memcpy(streamed + at, chunk, (size_t)w);
			at += w;
		}
		ck_assert_int_eq(at, len + 1);
		ck_assert_int_eq(streamed[0], ' ');
		ck_assert_int_eq(memcmp(streamed + 1, back, (size_t)len), 0);
		free(back);
		free(ids);
	}
	/* control-token text is read as the token; add_special puts BOS first */
	int64_t cnt, len;
	int32_t *ids = enc(t, "books</s>snow", 13, true, &cnt);
	ck_assert_int_eq(ids[0], 1);
	bool has_eos = false;
	for (int64_t i = 0; i < cnt; i++) has_eos |= ids[i] == 2;
	ck_assert(has_eos);
	char *back = dec(t, ids, cnt, true, &len);
	/* skip_special drops <s> and </s>; the text after a control token gets its own "▁" prefix, as in llama.cpp */
	ck_assert_str_eq(back, "books snow");
	free(back);
	back = dec(t, ids, cnt, false, &len);
	ck_assert_msg(strstr(back, "<s>") == back && strstr(back, "</s>"), "decoded '%s'", back);
	free(back);
	free(ids);
	char e2[128] = "";
	int32_t one[4];
	ck_assert_int_eq(tokenizer_encode(t, "\xc3(", 2, false, one, 4, e2, sizeof e2), -1);
	tokenizer_free(t);
}
END_TEST

/* ---- suite ---- */

static json_t *load_json(const char *name, const char *field)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", testdata(), name);
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr);
	if (!root) {
		fprintf(stderr, "check_tokenizer: %s: %s\n", path, jerr.text);
		return json_array();
	}
	json_t *f = json_incref(json_object_get(root, field));
	json_decref(root);
	return f ? f : json_array();
}

static Suite *tokenizer_suite(void)
{
	Suite *s = suite_create("tokenizer");
	ref_items = load_json("qwen3-tokenizer.ref.json", "items");
	small_ref[0] = load_json("qwen3-small-a.ref.json", "prompts");
	small_ref[1] = load_json("qwen3-small-b.ref.json", "prompts");

	TCase *tc = tcase_create("qwen3_reference");
	tcase_add_unchecked_fixture(tc, qwen3_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_qwen3_reference_item, 0, (int)json_array_size(ref_items));
	tcase_add_loop_test(tc, test_qwen3_own_case, 0, N_OWN);
	suite_add_tcase(s, tc);

	tc = tcase_create("small_models");
	tcase_add_loop_test(tc, test_small_model_prompt, 0, 14);
	suite_add_tcase(s, tc);

	tc = tcase_create("roundtrip");
	tcase_add_unchecked_fixture(tc, qwen3_setup, NULL);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_qwen3_roundtrip_random);
	tcase_add_test(tc, test_qwen3_long_runs);
	suite_add_tcase(s, tc);

	tc = tcase_create("streaming");
	tcase_add_unchecked_fixture(tc, qwen3_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_stream_matches_decode);
	tcase_add_test(tc, test_stream_cut_characters);
	tcase_add_test(tc, test_stream_small_buffer);
	suite_add_tcase(s, tc);

	tc = tcase_create("interface");
	tcase_add_unchecked_fixture(tc, qwen3_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_invalid_utf8_refused);
	tcase_add_test(tc, test_capacity_and_meta);
	tcase_add_test(tc, test_concurrent_encode);
	tcase_add_test(tc, test_synthetic_gpt2_style);
	tcase_add_test(tc, test_split_behaviors);
	tcase_add_test(tc, test_load_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("sentencepiece");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_sentencepiece_trained, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(tmp_root, sizeof tmp_root, "%s/check_tokenizer.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tmp_root)) {
		perror("check_tokenizer: mkdtemp");
		return 1;
	}
	SRunner *sr = srunner_create(tokenizer_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	tokenizer_free(qwen3);
	json_decref(ref_items);
	json_decref(small_ref[0]);
	json_decref(small_ref[1]);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
	if (system(cmd)) fprintf(stderr, "check_tokenizer: could not remove %s\n", tmp_root);
	return failed ? 1 : 0;
}
