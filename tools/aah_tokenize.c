/* tools/aah_tokenize.c — build/aah-tokenize: encodes text to ids, decodes ids to text, and measures tokenizer
 * throughput (--bench) on long English and CJK texts generated here, deterministically. */
#include "models/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/parse_num.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: aah-tokenize [--tokenizer DIR] [--add-special] [--pieces] TEXT|-\n"
	        "       aah-tokenize [--tokenizer DIR] [--skip-special] --decode ID,ID,...\n"
	        "       aah-tokenize [--tokenizer DIR] --bench\n"
	        "  --tokenizer DIR  folder with tokenizer.json or tokenizer.model (default $AAH_CACHE/qwen3-tokenizer,\n"
	        "                   AAH_CACHE defaulting to .cache)\n"
	        "  --add-special    add BOS when the tokenizer config asks for it\n"
	        "  --pieces         print one line per token: id and its spelling\n"
	        "  --decode LIST    print the text of comma- or space-separated ids\n"
	        "  --skip-special   with --decode, drop special tokens\n"
	        "  --bench          print encode throughput in MB/s on >= 1 MB of English and of CJK text\n"
	        "  TEXT             the text to encode; - reads standard input\n");
}

/* Reads all of f; returns a malloc'd buffer (caller frees) or NULL. */
static char *read_all(FILE *f, size_t *n)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		len += fread(buf + len, 1, cap - len, f);
		if (len < cap) break;
		char *nb = realloc(buf, cap *= 2);
		if (!nb) free(buf);
		buf = nb;
	}
	*n = len;
	return buf;
}

/* ---- bench texts ---- */

typedef struct text_buf {
	char *s;
	size_t n, cap;
} text_buf;

static void tb_add(text_buf *b, const char *s)
{
	size_t l = strlen(s);
	if (b->n + l + 1 > b->cap) {
		b->cap = (b->n + l + 1) * 2;
		char *ns = realloc(b->s, b->cap);
		if (!ns) {
			fprintf(stderr, "aah-tokenize: out of memory\n");
			exit(1);
		}
		b->s = ns;
	}
	memcpy(b->s + b->n, s, l + 1);
	b->n += l;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t pick(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}
#define PICK(a) a[pick(sizeof a / sizeof a[0])]

/* Sentences from word lists, with numbers, contractions, quotes and paragraph breaks now and then. */
static char *bench_english(size_t min_bytes, size_t *n)
{
	static const char *const subj[] = {"The engineer", "A small model", "Our server", "The old river", "Every student",
	                                   "The committee", "My neighbour", "The compiler", "This library", "The scheduler",
	                                   "A careful reader", "The night train", "Her grandmother", "The kernel"};
	static const char *const verb[] = {"reads", "measures", "builds", "carries", "ignores", "explains", "rewrites",
	                                   "follows", "questions", "remembers", "schedules", "compresses", "returns"};
	static const char *const adj[] = {"quiet", "enormous", "careful", "broken", "ancient", "efficient", "strange",
	                                  "bright", "tired", "reliable", "hidden", "unexpected", "wooden", "digital"};
	static const char *const obj[] = {"books", "requests", "mountains", "tokens", "letters", "windows", "questions",
	                                  "bridges", "measurements", "stories", "caches", "gardens", "benchmarks"};
	static const char *const tail[] = {"before dawn", "without a sound", "in the afternoon", "for three hours",
	                                   "across the valley", "under pressure", "with great care", "every Tuesday",
	                                   "near the window", "at the end of the day", "despite the rain"};
	static const char *const join[] = {", and then ", "; however, ", ", although ", " because ", ", while "};
	static const char *const quip[] = {"It's what we'll do.", "They've said so.", "Isn't it?", "I'd rather not.",
	                                   "\"Well,\" she said, \"that's that.\"", "(Nobody asked.)", "You're right."};
	text_buf b = {0};
	char num[64];
	while (b.n < min_bytes) {
		int sentences = 3 + (int)pick(5);
		for (int k = 0; k < sentences; k++) {
			tb_add(&b, PICK(subj));
			tb_add(&b, " ");
			tb_add(&b, PICK(verb));
			tb_add(&b, " ");
			if (pick(4) == 0) {
				snprintf(num, sizeof num, "%u ", 2 + pick(9998));
				tb_add(&b, num);
			}
			tb_add(&b, PICK(adj));
			tb_add(&b, " ");
			tb_add(&b, PICK(obj));
			tb_add(&b, " ");
			tb_add(&b, PICK(tail));
			if (pick(3) == 0) {
				tb_add(&b, PICK(join));
				tb_add(&b, "the ");
				tb_add(&b, PICK(obj));
				tb_add(&b, " ");
				tb_add(&b, PICK(verb) + 0);
				tb_add(&b, " ");
				tb_add(&b, PICK(tail));
			}
			tb_add(&b, ". ");
			if (pick(6) == 0) {
				tb_add(&b, PICK(quip));
				tb_add(&b, " ");
			}
		}
		tb_add(&b, "\n\n");
	}
	*n = b.n;
	return b.s;
}

/* Chinese clauses joined by full-width punctuation, with a Japanese or Korean line and digits now and then. */
static char *bench_cjk(size_t min_bytes, size_t *n)
{
	static const char *const phrase[] = {"我们今天", "在图书馆里", "安静地读书", "河流从山上流下来", "天气很好",
	                                     "学生们认真学习", "这个模型", "服务器正在运行", "计算注意力的窗口", "老师说",
	                                     "城市的夜晚", "灯光很亮", "他们讨论了很久", "经济发展", "科学研究",
	                                     "人工智能", "语言模型的推理", "每个人都知道", "春天来了", "花开得很美"};
	static const char *const punct[] = {"，", "，", "、", "；"};
	static const char *const other[] = {"日本語のテキストも少し入ります。", "한국어 문장도 조금 있습니다.",
	                                    "（注：数据来自二〇二五年）", "「你好」她说。"};
	text_buf b = {0};
	char num[32];
	while (b.n < min_bytes) {
		int clauses = 2 + (int)pick(5);
		for (int k = 0; k < clauses; k++) {
			tb_add(&b, PICK(phrase));
			if (pick(8) == 0) {
				snprintf(num, sizeof num, "%u", pick(100000));
				tb_add(&b, num);
			}
			tb_add(&b, k + 1 < clauses ? PICK(punct) : (pick(5) ? "。" : "！"));
		}
		if (pick(7) == 0) tb_add(&b, PICK(other));
		if (pick(5) == 0) tb_add(&b, "\n");
	}
	*n = b.n;
	return b.s;
}

static int bench_one(const tokenizer *t, const char *name, const char *text, size_t n)
{
	int64_t cap = (int64_t)n + 16;
	int32_t *ids = malloc((size_t)cap * sizeof *ids);
	if (!ids) return -1;
	char err[256] = "";
	double best = 1e30;
	int64_t got = 0;
	for (int rep = 0; rep < 3; rep++) {   /* best of three: the figure is the tokenizer's, not the machine's mood */
		double t0 = aah_now_s();
		got = tokenizer_encode(t, text, n, false, ids, cap, err, sizeof err);
		double dt = aah_now_s() - t0;
		if (got < 0) {
			fprintf(stderr, "aah-tokenize: %s\n", err);
			free(ids);
			return -1;
		}
		if (dt < best) best = dt;
	}
	printf("tokenizer %s: %.1f MB/s (%zu bytes, %lld tokens)\n", name, (double)n / 1e6 / best, n, (long long)got);
	free(ids);
	return 0;
}

static int run_bench(const tokenizer *t)
{
	size_t ne, nc;
	char *en = bench_english(1u << 20, &ne), *cjk = bench_cjk(1u << 20, &nc);
	int rc = (en && cjk) ? bench_one(t, "english", en, ne) | bench_one(t, "cjk", cjk, nc) : -1;
	free(en);
	free(cjk);
	return rc;
}

/* ---- encode / decode ---- */

static int run_encode(const tokenizer *t, const char *text, size_t n, bool add_special, bool pieces)
{
	char err[256] = "";
	int64_t cap = (int64_t)n + 8;
	int32_t *ids = malloc((size_t)cap * sizeof *ids);
	if (!ids) return -1;
	int64_t got = tokenizer_encode(t, text, n, add_special, ids, cap, err, sizeof err);
	if (got < 0) {
		fprintf(stderr, "aah-tokenize: %s\n", err);
		free(ids);
		return -1;
	}
	for (int64_t i = 0; i < got; i++) {
		if (pieces)
			printf("%d\t%s\n", ids[i], tokenizer_token_text(t, ids[i]));
		else
			printf(i ? ",%d" : "%d", ids[i]);
	}
	if (!pieces) printf("\n");
	free(ids);
	return 0;
}

static int run_decode(const tokenizer *t, const char *list, bool skip_special)
{
	/* ids separated by commas, blanks or brackets: "1,2,3" and "[1, 2, 3]" alike */
	int64_t n = aah_parse_int_list(list, false, 0, INT32_MAX, NULL, 0);
	if (n < 0) {
		fprintf(stderr, "aah-tokenize: bad id list \"%.40s\" (ids 0 to 2^31-1, separated by commas)\n", list);
		return -1;
	}
	int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
	if (!ids) return -1;
	aah_parse_int_list(list, false, 0, INT32_MAX, ids, n);
	int64_t len = tokenizer_decode(t, ids, (int64_t)n, skip_special, NULL, 0);
	char *out = len >= 0 ? malloc((size_t)len + 1) : NULL;
	if (len < 0 || !out) {
		fprintf(stderr, "aah-tokenize: an id is out of range (vocabulary size %d)\n", tokenizer_vocab_size(t));
		free(ids);
		return -1;
	}
	tokenizer_decode(t, ids, (int64_t)n, skip_special, out, len + 1);
	fwrite(out, 1, (size_t)len, stdout);
	printf("\n");
	free(out);
	free(ids);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *decode = NULL, *text = NULL;
	bool add_special = false, pieces = false, skip_special = false, bench = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) dir = argv[++i];
		else if (strcmp(argv[i], "--decode") == 0 && i + 1 < argc) decode = argv[++i];
		else if (strcmp(argv[i], "--add-special") == 0) add_special = true;
		else if (strcmp(argv[i], "--pieces") == 0) pieces = true;
		else if (strcmp(argv[i], "--skip-special") == 0) skip_special = true;
		else if (strcmp(argv[i], "--bench") == 0) bench = true;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (!text && (argv[i][0] != '-' || strcmp(argv[i], "-") == 0)) text = argv[i];
		else {
			usage(stderr);
			return 2;
		}
	}
	if (!bench && !decode && !text) {
		usage(stderr);
		return 2;
	}
	char def[4096];
	if (!dir) {
		const char *cache = getenv("AAH_CACHE");
		snprintf(def, sizeof def, "%s/qwen3-tokenizer", cache && *cache ? cache : ".cache");
		dir = def;
	}
	char err[512] = "";
	tokenizer *t = tokenizer_load(dir, err, sizeof err);
	if (!t) {
		fprintf(stderr, "aah-tokenize: %s\n", err);
		return 1;
	}
	int rc;
	if (bench) {
		rc = run_bench(t);
	} else if (decode) {
		rc = run_decode(t, decode, skip_special);
	} else if (strcmp(text, "-") == 0) {
		size_t n;
		char *in = read_all(stdin, &n);
		rc = in ? run_encode(t, in, n, add_special, pieces) : -1;
		free(in);
	} else {
		rc = run_encode(t, text, strlen(text), add_special, pieces);
	}
	tokenizer_free(t);
	return rc ? 1 : 0;
}
