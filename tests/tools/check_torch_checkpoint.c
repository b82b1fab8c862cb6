/* tests/tools/check_torch_checkpoint.c — Check suite for the parts of `aah-convert import` that read untrusted bytes:
 * tools/convert/: zip_reader, pickle (the restricted unpickler), torch_checkpoint, and sha256. Every archive and
 * pickle here is assembled byte by byte, so the suite needs no torch. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/convert/pickle.h"
#include "tools/convert/sha256.h"
#include "tools/convert/torch_checkpoint.h"
#include "tools/convert/zip_reader.h"

/* ---- a growable byte buffer ---- */

typedef struct buf {
	uint8_t *p;
	size_t n, cap;
} buf;

static void put(buf *b, const void *data, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void put8(buf *b, uint8_t x) { put(b, &x, 1); }
static void put16(buf *b, uint16_t x) { uint8_t v[2] = { (uint8_t)x, (uint8_t)(x >> 8) }; put(b, v, 2); }
static void put32(buf *b, uint32_t x) { put16(b, (uint16_t)x); put16(b, (uint16_t)(x >> 16)); }
static void put64(buf *b, uint64_t x) { put32(b, (uint32_t)x); put32(b, (uint32_t)(x >> 32)); }
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* ---- a zip writer, as torch's miniz writes archives (and ways to break them) ---- */

typedef struct zfile {
	const char *name;
	const void *data;
	size_t size;
	uint16_t method, flags;
	bool descriptor;             /* torch's way: crc and sizes zero in the local header, a descriptor after */
	bool zip64;                  /* sizes and offset through the zip64 extra field */
	int64_t force_size;          /* >= 0: the size the central directory claims */
	int64_t force_offset;        /* >= 0: the local header offset it claims */
	bool bad_crc;
} zfile;

static void zip_build(buf *z, const zfile *f, int n, bool zip64_end, const char *comment)
{
	uint64_t *off = calloc((size_t)n, sizeof *off);
	for (int i = 0; i < n; i++) {
		off[i] = z->n;
		uint32_t crc = zip_crc32(0, f[i].data, f[i].size);
		put32(z, 0x04034b50);
		put16(z, 20);
		put16(z, (uint16_t)(f[i].flags | (f[i].descriptor ? 0x08 : 0)));
		put16(z, f[i].method);
		put32(z, 0);
		put32(z, f[i].descriptor ? 0 : crc);
		put32(z, f[i].descriptor ? 0 : (uint32_t)f[i].size);
		put32(z, f[i].descriptor ? 0 : (uint32_t)f[i].size);
		put16(z, (uint16_t)strlen(f[i].name));
		put16(z, 4 + 3);            /* a padding extra field, as torch aligns data */
		puts_(z, f[i].name);
		put16(z, 0x4246);
		put16(z, 3);
		puts_(z, "ZZZ");
		put(z, f[i].data, f[i].size);
		if (f[i].descriptor) {
			put32(z, 0x08074b50);
			put32(z, crc);
			put32(z, (uint32_t)f[i].size);
			put32(z, (uint32_t)f[i].size);
		}
	}
	uint64_t cd = z->n;
	for (int i = 0; i < n; i++) {
		uint32_t crc = zip_crc32(0, f[i].data, f[i].size) ^ (f[i].bad_crc ? 1u : 0u);
		uint64_t size = f[i].force_size >= 0 ? (uint64_t)f[i].force_size : f[i].size;
		uint64_t o = f[i].force_offset >= 0 ? (uint64_t)f[i].force_offset : off[i];
		put32(z, 0x02014b50);
		put16(z, 45);
		put16(z, 45);
		put16(z, (uint16_t)(f[i].flags | (f[i].descriptor ? 0x08 : 0)));
		put16(z, f[i].method);
		put32(z, 0);
		put32(z, crc);
		put32(z, f[i].zip64 ? 0xffffffffu : (uint32_t)size);
		put32(z, f[i].zip64 ? 0xffffffffu : (uint32_t)size);
		put16(z, (uint16_t)strlen(f[i].name));
		put16(z, f[i].zip64 ? 28 : 0);
		put16(z, 0);
		put16(z, 0);
		put16(z, 0);
		put32(z, 0);
		put32(z, f[i].zip64 ? 0xffffffffu : (uint32_t)o);
		puts_(z, f[i].name);
		if (f[i].zip64) {
			put16(z, 1);
			put16(z, 24);
			put64(z, size);
			put64(z, size);
			put64(z, o);
		}
	}
	uint64_t cd_size = z->n - cd;
	if (zip64_end) {
		uint64_t at = z->n;
		put32(z, 0x06064b50);
		put64(z, 44);
		put16(z, 45);
		put16(z, 45);
		put32(z, 0);
		put32(z, 0);
		put64(z, (uint64_t)n);
		put64(z, (uint64_t)n);
		put64(z, cd_size);
		put64(z, cd);
		put32(z, 0x07064b50);
		put32(z, 0);
		put64(z, at);
		put32(z, 1);
	}
	put32(z, 0x06054b50);
	put16(z, 0);
	put16(z, 0);
	put16(z, zip64_end ? 0xffff : (uint16_t)n);
	put16(z, zip64_end ? 0xffff : (uint16_t)n);
	put32(z, zip64_end ? 0xffffffffu : (uint32_t)cd_size);
	put32(z, zip64_end ? 0xffffffffu : (uint32_t)cd);
	put16(z, (uint16_t)(comment ? strlen(comment) : 0));
	if (comment)
		puts_(z, comment);
	free(off);
}

static zfile zf(const char *name, const void *data, size_t size)
{
	zfile f = { .name = name, .data = data, .size = size, .force_size = -1, .force_offset = -1 };
	return f;
}

static char zerr[1024];

static int zip_try(const buf *z)
{
	zip_archive a;
	int rc = zip_open_mem(&a, z->p, z->n, "t.zip", zerr, sizeof zerr);
	zip_close(&a);
	return rc;
}

/* ---- zip tests ---- */

START_TEST(test_zip_reads_torch_layout)
{
	static const char pkl[] = "\x80\x02}.", d0[] = "0123456789abcdef";
	for (int variant = 0; variant < 4; variant++) {
		zfile f[3] = { zf("arch/data.pkl", pkl, 4), zf("arch/data/0", d0, 16), zf("arch/version", "3\n", 2) };
		for (int i = 0; i < 3; i++) {
			f[i].descriptor = variant & 1;
			f[i].zip64 = variant & 2;
		}
		buf z = { 0 };
		zip_build(&z, f, 3, variant >= 2, NULL);
		zip_archive a;
		ck_assert_msg(zip_open_mem(&a, z.p, z.n, "t.zip", zerr, sizeof zerr) == 0, "variant %d: %s", variant, zerr);
		ck_assert_int_eq(a.n_entries, 3);
		const zip_entry *e = zip_find(&a, "arch/data/0");
		ck_assert_ptr_nonnull(e);
		ck_assert_uint_eq(e->size, 16);
		ck_assert(!memcmp(zip_entry_data(&a, e), d0, 16));
		for (int i = 0; i < 3; i++)
			ck_assert_int_eq(zip_entry_check(&a, &a.entries[i], zerr, sizeof zerr), 0);
		ck_assert_ptr_null(zip_find(&a, "arch/data/1"));
		zip_close(&a);
		free(z.p);
	}
	/* a comment at the end is fine */
	zfile f = zf("a/data.pkl", pkl, 4);
	buf z = { 0 };
	zip_build(&z, &f, 1, false, "made by hand");
	ck_assert_int_eq(zip_try(&z), 0);
	free(z.p);
}
END_TEST

START_TEST(test_zip_every_truncation_refused)
{
	static const char d0[] = "0123456789abcdef0123456789abcdef";
	zfile f[2] = { zf("arch/data.pkl", "\x80\x02N.", 4), zf("arch/data/0", d0, 32) };
	f[0].descriptor = f[1].descriptor = true;
	buf z = { 0 };
	zip_build(&z, f, 2, true, NULL);
	for (size_t n = 0; n < z.n; n++) {
		buf t = { .p = z.p, .n = n };
		ck_assert_msg(zip_try(&t) == -1, "a %zu-byte prefix of %zu was accepted", n, z.n);
	}
	buf t = { .p = z.p, .n = z.n };
	ck_assert_int_eq(zip_try(&t), 0);
	/* trailing bytes that are not the end record's comment */
	buf g = { 0 };
	put(&g, z.p, z.n);
	puts_(&g, "garbage");
	ck_assert_int_eq(zip_try(&g), -1);
	free(g.p);
	free(z.p);
}
END_TEST

START_TEST(test_zip_unsafe_names_refused)
{
	static const char *const bad[] = { "../x", "a/../b", "a/..", "/etc/passwd", "a\\b", "a//b", "./a", "a/./b",
		                           ("a\x01" "b"), "a\x7f", "" };
	static const char *const why[] = { "'..'", "'..'", "'..'", "absolute", "backslash", "empty", "'.'", "'.'",
		                           "control", "control", "empty" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		zfile f[2] = { zf("a/data.pkl", "x", 1), zf(bad[i], "y", 1) };
		buf z = { 0 };
		zip_build(&z, f, 2, false, NULL);
		ck_assert_msg(zip_try(&z) == -1, "name '%s' accepted", bad[i]);
		ck_assert_msg(strstr(zerr, why[i]), "name '%s': %s", bad[i], zerr);
		free(z.p);
	}
	/* folders (a trailing slash) are fine */
	zfile f[2] = { zf("a/", "", 0), zf("a/b", "y", 1) };
	buf z = { 0 };
	zip_build(&z, f, 2, false, NULL);
	ck_assert_msg(zip_try(&z) == 0, "%s", zerr);
	free(z.p);
}
END_TEST

START_TEST(test_zip_forgeries_refused)
{
	static const char d[] = "0123456789abcdef";
	struct { const char *what, *why; } cases[] = {
		{ "duplicate", "two entries are named" }, { "deflate", "compressed (method 8)" },
		{ "encrypted", "encrypted" }, { "huge", "run past" }, { "overlap", "overlap" },
		{ "offset", "no local header" }, { "name", "disagrees" },
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		zfile f[2] = { zf("a/data.pkl", d, 16), zf("a/data/0", d, 16) };
		const char *w = cases[c].what;
		if (!strcmp(w, "duplicate"))
			f[1].name = "a/data.pkl";
		else if (!strcmp(w, "deflate"))
			f[1].method = 8;
		else if (!strcmp(w, "encrypted"))
			f[1].flags = 1;
		else if (!strcmp(w, "huge")) {
			f[1].force_size = (int64_t)0xfffffff0;   /* declared 4 GB: a zip bomb's header */
			f[1].descriptor = true;
		} else if (!strcmp(w, "overlap")) {
			f[0].force_size = 40;
			f[0].descriptor = true;
		} else if (!strcmp(w, "offset"))
			f[1].force_offset = 3;
		else if (!strcmp(w, "name"))
			f[1].force_offset = 0;   /* the first entry's local header, which names a/data.pkl */
		buf z = { 0 };
		zip_build(&z, f, 2, false, NULL);
		ck_assert_msg(zip_try(&z) == -1, "%s accepted", w);
		ck_assert_msg(strstr(zerr, cases[c].why), "%s: %s", w, zerr);
		free(z.p);
	}
	/* a zip64 size beyond the file */
	zfile f = zf("a/data/0", d, 16);
	f.zip64 = true;
	f.force_size = INT64_C(1) << 40;
	buf z = { 0 };
	zip_build(&z, &f, 1, true, NULL);
	ck_assert_int_eq(zip_try(&z), -1);
	ck_assert_msg(strstr(zerr, "run past") || strstr(zerr, "disagrees"), "%s", zerr);
	free(z.p);
	/* a CRC that does not match is found when the entry is checked */
	zfile g = zf("a/data/0", d, 16);
	g.bad_crc = true;
	g.descriptor = true;
	buf y = { 0 };
	zip_build(&y, &g, 1, false, NULL);
	zip_archive a;
	ck_assert_int_eq(zip_open_mem(&a, y.p, y.n, "t.zip", zerr, sizeof zerr), 0);
	ck_assert_int_eq(zip_entry_check(&a, &a.entries[0], zerr, sizeof zerr), -1);
	ck_assert(strstr(zerr, "CRC-32"));
	zip_close(&a);
	free(y.p);
}
END_TEST

START_TEST(test_crc32_known_values)
{
	ck_assert_uint_eq(zip_crc32(0, "", 0), 0);
	ck_assert_uint_eq(zip_crc32(0, "123456789", 9), 0xcbf43926u);   /* the CRC-32 check value */
	/* pieces give the same as the whole, at every split */
	static const char s[] = "The quick brown fox jumps over the lazy dog, again and again and again.";
	uint32_t whole = zip_crc32(0, s, sizeof s - 1);
	ck_assert_uint_eq(zip_crc32(0, "The quick brown fox jumps over the lazy dog", 43), 0x414fa339u);
	for (size_t k = 0; k < sizeof s; k++)
		ck_assert_uint_eq(zip_crc32(zip_crc32(0, s, k), s + k, sizeof s - 1 - k), whole);
}
END_TEST

/* ---- a pickle assembler ---- */

static void p_op(buf *b, uint8_t op) { put8(b, op); }
static void p_str(buf *b, const char *s) { put8(b, 'X'); put32(b, (uint32_t)strlen(s)); puts_(b, s); }
static void p_global(buf *b, const char *m, const char *n)
{
	put8(b, 'c');
	puts_(b, m);
	put8(b, '\n');
	puts_(b, n);
	put8(b, '\n');
}
static void p_int(buf *b, int32_t v) { put8(b, 'J'); put32(b, (uint32_t)v); }
static void p_ints(buf *b, const int *v, int n)
{
	p_op(b, '(');
	for (int i = 0; i < n; i++)
		p_int(b, v[i]);
	p_op(b, 't');
}
/* _rebuild_tensor_v2 of a storage (type global, key, numel) viewed with offset, shape, stride */
static void p_tensor(buf *b, const char *type, const char *key, int numel, int offset, const int *shape,
                     const int *stride, int nd)
{
	p_global(b, "torch._utils", "_rebuild_tensor_v2");
	p_op(b, '(');
	p_op(b, '(');
	p_str(b, "storage");
	p_global(b, "torch", type);
	p_str(b, key);
	p_str(b, "cpu");
	p_int(b, numel);
	p_op(b, 't');
	p_op(b, 'Q');
	p_int(b, offset);
	p_ints(b, shape, nd);
	p_ints(b, stride, nd);
	p_op(b, 0x89);
	p_global(b, "collections", "OrderedDict");
	p_op(b, ')');
	p_op(b, 'R');
	p_op(b, 't');
	p_op(b, 'R');
}

static char perr[1024];

static int pkl_try(const buf *b, pkl_doc *doc)
{
	int rc = pkl_load(doc, b->p, b->n, NULL, perr, sizeof perr);
	return rc;
}

/* "\x80\x02" + body + "." parsed; the document is freed unless keep. */
static int pkl_body(const char *body, size_t n)
{
	buf b = { 0 };
	put(&b, "\x80\x02", 2);
	put(&b, body, n);
	put8(&b, '.');
	pkl_doc d;
	int rc = pkl_try(&b, &d);
	pkl_free(&d);
	free(b.p);
	return rc;
}
#define PKL_BODY(s) pkl_body(s, sizeof(s) - 1)

/* ---- pickle tests ---- */

START_TEST(test_pickle_values)
{
	buf b = { 0 };
	put(&b, "\x80\x04\x95", 3);      /* protocol 4 with a frame */
	put64(&b, 0);                     /* (frame lengths are not checked against contents, only the stream) */
	p_op(&b, '}');
	p_op(&b, 0x94);                   /* MEMOIZE */
	p_op(&b, '(');
	put(&b, "\x8c\x01i", 3); put(&b, "J\xfb\xff\xff\xff", 5);                 /* i: BININT -5 */
	put(&b, "\x8c\x01k", 3); put(&b, "K\xc8", 2);                             /* k: 200 */
	put(&b, "\x8c\x01m", 3); put(&b, "M\x60\xea", 3);                         /* m: 60000 */
	put(&b, "\x8c\x01n", 3); put(&b, "\x8a\x01\xfe", 3);                      /* n: LONG1 -2 */
	put(&b, "\x8c\x01p", 3); put(&b, "\x8a\x05\x00\x00\x00\x00\x01", 7);      /* p: 2^32 */
	put(&b, "\x8c\x01q", 3); put(&b, "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01", 11); /* 2^64: big */
	put(&b, "\x8c\x01" "f", 3); put(&b, "G\x40\x04\x00\x00\x00\x00\x00\x00", 9); /* f: 2.5 */
	put(&b, "\x8c\x01t", 3); put(&b, "K\x01K\x02K\x03\x87", 7);               /* t: (1, 2, 3) */
	put(&b, "\x8c\x01l", 3); put(&b, "]\x94(K\x01K\x02" "e\x88" "a", 10);         /* l: [1, 2, True] */
	put(&b, "\x8c\x01u", 3); put(&b, "\x8d\x02\x00\x00\x00\x00\x00\x00\x00\xc3\xa9", 11); /* u: "é" */
	put(&b, "\x8c\x01" "b", 3); put(&b, "C\x02\x00\x01", 4);                  /* b: bytes */
	put(&b, "\x8c\x01z", 3); put(&b, "N", 1);                                 /* z: None */
	put(&b, "\x8c\x01s", 3);                                                  /* s: torch.Size((4, 2)) */
	put(&b, "\x8c\x05torch\x8c\x04Size\x93K\x04K\x02\x86\x85R", 21);
	p_op(&b, 'u');
	p_op(&b, '.');
	pkl_doc d;
	ck_assert_msg(pkl_try(&b, &d) == 0, "%s", perr);
	const pkl_value *r = d.root;
	ck_assert_int_eq(r->type, PKL_DICT);
	ck_assert_int_eq(pkl_dict_get(r, "i")->u.i, -5);
	ck_assert_int_eq(pkl_dict_get(r, "k")->u.i, 200);
	ck_assert_int_eq(pkl_dict_get(r, "m")->u.i, 60000);
	ck_assert_int_eq(pkl_dict_get(r, "n")->u.i, -2);
	ck_assert_int_eq(pkl_dict_get(r, "p")->u.i, INT64_C(1) << 32);
	ck_assert_int_eq(pkl_dict_get(r, "q")->type, PKL_BIGINT);
	ck_assert(pkl_dict_get(r, "f")->u.f == 2.5);
	ck_assert_int_eq(pkl_len(pkl_dict_get(r, "t")), 3);
	ck_assert_int_eq(pkl_dict_get(r, "t")->u.seq.v[2]->u.i, 3);
	const pkl_value *l = pkl_dict_get(r, "l");
	ck_assert_int_eq(l->type, PKL_LIST);
	ck_assert_int_eq(pkl_len(l), 3);
	ck_assert(l->u.seq.v[2]->type == PKL_BOOL && l->u.seq.v[2]->u.b);
	ck_assert_str_eq(pkl_dict_get(r, "u")->u.str.s, "\xc3\xa9");
	ck_assert_int_eq(pkl_dict_get(r, "b")->type, PKL_BYTES);
	ck_assert_int_eq(pkl_dict_get(r, "z")->type, PKL_NONE);
	const pkl_value *s = pkl_dict_get(r, "s");
	ck_assert(s->type == PKL_TUPLE && pkl_len(s) == 2 && s->u.seq.v[0]->u.i == 4);
	ck_assert_ptr_null(pkl_dict_get(r, "missing"));
	pkl_free(&d);
	free(b.p);
}
END_TEST

START_TEST(test_pickle_torch_state_dict)
{
	/* what torch.save(module.state_dict()) writes: an OrderedDict, tensors, BUILD of _metadata; memo reuse */
	buf b = { 0 };
	put(&b, "\x80\x02", 2);
	p_global(&b, "collections", "OrderedDict");
	put(&b, "q\x00)Rq\x01", 6);
	p_str(&b, "w");
	int shape[2] = { 2, 3 }, stride[2] = { 1, 2 };
	p_tensor(&b, "FloatStorage", "0", 6, 0, shape, stride, 2);
	put(&b, "q\x02s", 3);
	p_str(&b, "w2");
	put(&b, "h\x02s", 3);                          /* the same tensor again (a shared weight) */
	p_str(&b, "p");
	p_global(&b, "torch._utils", "_rebuild_parameter");
	p_op(&b, '(');
	int s1[1] = { 4 }, st1[1] = { 0 };
	p_tensor(&b, "BFloat16Storage", "1", 1, 0, s1, st1, 1);   /* a broadcast: stride 0 */
	put(&b, "\x88h\x00)Rt", 6);
	put(&b, "Rs", 2);
	put(&b, "}", 1);
	p_str(&b, "_metadata");
	put(&b, "h\x00)Rs", 5);
	put(&b, "b.", 2);
	pkl_doc d;
	ck_assert_msg(pkl_try(&b, &d) == 0, "%s", perr);
	const pkl_value *r = d.root;
	ck_assert(r->type == PKL_DICT && r->ordered && pkl_len(r) == 3);
	const pkl_value *w = pkl_dict_get(r, "w");
	ck_assert_int_eq(w->type, PKL_TENSOR);
	ck_assert_ptr_eq(w, pkl_dict_get(r, "w2"));
	ck_assert_int_eq(w->u.tensor->n_dims, 2);
	ck_assert_int_eq(w->u.tensor->stride[1], 2);
	ck_assert_int_eq(w->u.tensor->numel, 6);
	ck_assert_str_eq(w->u.tensor->storage->u.storage.key, "0");
	const pkl_value *p = pkl_dict_get(r, "p");
	ck_assert(p->type == PKL_TENSOR && p->u.tensor->storage->u.storage.dtype == PKL_DT_BF16);
	pkl_free(&d);
	free(b.p);
}
END_TEST

START_TEST(test_pickle_every_other_opcode_refused)
{
	static const uint8_t allowed[] = { 0x80, 0x95, '.', '(', '}', ']', ')', 'N', 0x88, 0x89, 't', 0x85, 0x86, 0x87,
		                           'a', 'e', 's', 'u', 'X', 0x8c, 0x8d, 'B', 'C', 0x8e, 'J', 'K', 'M', 0x8a,
		                           'G', 'q', 'r', 0x94, 'h', 'j', 'c', 0x93, 'R', 'b', 'Q' };
	for (int op = 0; op < 256; op++) {
		if (memchr(allowed, op, sizeof allowed))
			continue;
		/* something to work on below it, then the opcode with plenty of operand bytes */
		char body[24] = "N(NN";
		body[4] = (char)op;
		memcpy(body + 5, "os\nsystem\n\0\0\0\0\0\0\0\0", 18);
		ck_assert_msg(pkl_body(body, sizeof body) == -1, "opcode 0x%02x accepted", op);
		ck_assert_msg(strstr(perr, "opcode not allowed") || strstr(perr, "not a pickle opcode"),
		              "opcode 0x%02x: %s", op, perr);
	}
	/* the refusal names the opcode */
	ck_assert_int_eq(PKL_BODY("(X\x01\x00\x00\x00xios\nsystem\n"), -1);
	ck_assert_msg(strstr(perr, "(INST)"), "%s", perr);
	ck_assert_int_eq(PKL_BODY("c" "collections\nOrderedDict\n)\x81"), -1);
	ck_assert_msg(strstr(perr, "(NEWOBJ)"), "%s", perr);
	ck_assert_int_eq(PKL_BODY("c" "collections\nOrderedDict\n)}\x92"), -1);
	ck_assert_msg(strstr(perr, "(NEWOBJ_EX)"), "%s", perr);
	ck_assert_int_eq(PKL_BODY("c" "os\nsystem\n(o"), -1);
	ck_assert_msg(strstr(perr, "os.system"), "%s", perr);
}
END_TEST

START_TEST(test_pickle_globals_refused)
{
	static const char *const bad[][2] = {
		{ "os", "system" }, { "builtins", "eval" }, { "builtins", "exec" }, { "subprocess", "Popen" },
		{ "subprocess", "check_output" }, { "posix", "system" }, { "__builtin__", "eval" }, { "torch", "load" },
		{ "torch._utils", "_rebuild_tensor" }, { "torch.nn.modules.linear", "Linear" }, { "numpy", "ndarray" },
		{ "torch", "storage" }, { "collections", "defaultdict" }, { "torch._utils", "_rebuild_parameter_with_state" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char full[128];
		snprintf(full, sizeof full, "'%s.%s'", bad[i][0], bad[i][1]);
		/* GLOBAL */
		buf b = { 0 };
		put(&b, "\x80\x02", 2);
		p_global(&b, bad[i][0], bad[i][1]);
		p_str(&b, "echo pwned");
		put(&b, "\x85R.", 3);
		pkl_doc d;
		ck_assert_int_eq(pkl_try(&b, &d), -1);
		pkl_free(&d);
		ck_assert_msg(strstr(perr, full) && strstr(perr, "not allowed"), "%s: %s", full, perr);
		/* STACK_GLOBAL */
		b.n = 0;
		put(&b, "\x80\x04", 2);
		p_str(&b, bad[i][0]);
		p_str(&b, bad[i][1]);
		put(&b, "\x93)R.", 4);
		ck_assert_int_eq(pkl_try(&b, &d), -1);
		pkl_free(&d);
		ck_assert_msg(strstr(perr, full), "%s: %s", full, perr);
		free(b.p);
	}
	/* REDUCE on what is no callable; BUILD on what is no OrderedDict */
	ck_assert_int_eq(PKL_BODY("ctorch\nFloatStorage\n)R"), -1);
	ck_assert(strstr(perr, "REDUCE on torch.FloatStorage"));
	ck_assert_int_eq(PKL_BODY("X\x01\x00\x00\x00x)R"), -1);
	ck_assert(strstr(perr, "REDUCE on a str"));
	ck_assert_int_eq(PKL_BODY("ccollections\nOrderedDict\nK\x01\x85R"), -1);
	ck_assert(strstr(perr, "OrderedDict called with 1"));
	ck_assert_int_eq(PKL_BODY("}}b"), -1);
	ck_assert(strstr(perr, "BUILD on a dict"));
	ck_assert_int_eq(PKL_BODY("]}b"), -1);
	ck_assert(strstr(perr, "BUILD on a list"));
	ck_assert_int_eq(PKL_BODY("ccollections\nOrderedDict\n)R}b}b"), -1);   /* twice */
	ck_assert(strstr(perr, "BUILD on a OrderedDict"));
	ck_assert_int_eq(PKL_BODY("ccollections\nOrderedDict\n)R]b"), -1);
	ck_assert(strstr(perr, "with a list"));
}
END_TEST

START_TEST(test_pickle_structure_refused)
{
	struct { const char *body; size_t n; const char *why; } cases[] = {
#define C(s, w) { s, sizeof(s) - 1, w }
		C("]q\x00h\x00" "a", "inside itself"),
		C("]q\x00]q\x01h\x00" "aa", "changed after"),          /* L1 ∈ L0 after L0 ∈ L1: a cycle */
		C("}q\x00(X\x01\x00\x00\x00kh\x00u", "inside itself"),
		C("]q\x00(h\x00" "e", "inside itself"),
		C("]]K\x01" "a" "\x85h\x00", "never stored"),
		C("Nq\x02", "skips ahead"),
		C("h\x00", "never stored"),
		C("a", "stack underflow"),
		C("(a", "stack underflow"),
		C("Nt", "no MARK"),
		C("N(N", "STOP with"),
		C("NN", "STOP with"),
		C("(Nu", "SETITEMS"),
		C("}(NNNu", "odd"),
		C("}]K\x01s", "unhashable"),
		C("}(]\x85K\x02u", "unhashable"),
		C("K\x01" "a", "stack underflow"),
		C("NK\x01" "a", "appending to a None"),
		C("K\x01K\x02K\x03s", "setting an item of a int"),
		C("X\x02\x00\x00\x00\xc3(", "UTF-8"),
		C("X\x03\x00\x00\x00\xed\xa0\x80", "UTF-8"),             /* a surrogate */
		C("X\x02\x00\x00\x00\xc0\x80", "UTF-8"),                 /* overlong */
		C("X\xff\xff\xff\x7f", "truncated"),
		C("\x8d\xff\xff\xff\xff\xff\xff\xff\xff", "truncated"),
		C("\x95\xff\x00\x00\x00\x00\x00\x00\x00", "frame longer"),
		C("\x80\x02N", "PROTO after the start"),
		C("c" "os", "truncated"),
		C("c" "os\x01\nsystem\n", "malformed global"),
		C("X\x01\x00\x00\x00" "aN\x93", "STACK_GLOBAL of a str and a None"),
#undef C
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ck_assert_msg(pkl_body(cases[i].body, cases[i].n) == -1, "case %zu accepted", i);
		ck_assert_msg(strstr(perr, cases[i].why), "case %zu: '%s' does not say '%s'", i, perr, cases[i].why);
	}
	/* a protocol beyond 4, bytes after STOP, no PROTO */
	pkl_doc d;
	buf b = { 0 };
	put(&b, "\x80\x05N.", 4);
	ck_assert_int_eq(pkl_try(&b, &d), -1);
	pkl_free(&d);
	ck_assert(strstr(perr, "protocol 5"));
	b.n = 0;
	put(&b, "\x80\x02N.N", 5);
	ck_assert_int_eq(pkl_try(&b, &d), -1);
	pkl_free(&d);
	ck_assert(strstr(perr, "1 bytes after STOP"));
	b.n = 0;
	put(&b, "N.", 2);
	ck_assert_int_eq(pkl_try(&b, &d), -1);
	ck_assert(strstr(perr, "PROTO"));
	free(b.p);
	pkl_free(&d);
}
END_TEST

START_TEST(test_pickle_limits)
{
	/* nesting */
	buf b = { 0 };
	put(&b, "\x80\x02", 2);
	for (int i = 0; i < 70; i++)
		put8(&b, ']');
	for (int i = 0; i < 69; i++)
		put8(&b, 'a');
	put8(&b, '.');
	pkl_doc d;
	ck_assert_int_eq(pkl_try(&b, &d), -1);
	ck_assert(strstr(perr, "nested deeper than 64"));
	pkl_free(&d);
	/* 64 levels are fine */
	b.n = 2;
	for (int i = 0; i < 64; i++)
		put8(&b, ']');
	for (int i = 0; i < 63; i++)
		put8(&b, 'a');
	put8(&b, '.');
	ck_assert_msg(pkl_try(&b, &d) == 0, "%s", perr);
	pkl_free(&d);
	/* tuples nest too */
	b.n = 2;
	put8(&b, 'N');
	for (int i = 0; i < 70; i++)
		put8(&b, 0x85);
	put8(&b, '.');
	ck_assert_int_eq(pkl_try(&b, &d), -1);
	ck_assert(strstr(perr, "nested deeper"));
	pkl_free(&d);
	/* smaller limits: values, stack, marks, bytes */
	pkl_limits lim = pkl_default_limits;
	lim.max_values = 10;
	b.n = 2;
	for (int i = 0; i < 11; i++)
		put8(&b, 'N');
	put8(&b, '.');
	ck_assert_int_eq(pkl_load(&d, b.p, b.n, &lim, perr, sizeof perr), -1);
	ck_assert(strstr(perr, "more than 10 values"));
	pkl_free(&d);
	lim = pkl_default_limits;
	lim.max_stack = 5;
	ck_assert_int_eq(pkl_load(&d, b.p, b.n, &lim, perr, sizeof perr), -1);
	ck_assert(strstr(perr, "on the stack"));
	pkl_free(&d);
	lim = pkl_default_limits;
	lim.max_marks = 3;
	b.n = 2;
	put(&b, "((((", 4);
	ck_assert_int_eq(pkl_load(&d, b.p, b.n, &lim, perr, sizeof perr), -1);
	ck_assert(strstr(perr, "open MARKs"));
	pkl_free(&d);
	lim = pkl_default_limits;
	lim.max_bytes = 3;
	ck_assert_int_eq(pkl_load(&d, b.p, b.n, &lim, perr, sizeof perr), -1);
	ck_assert(strstr(perr, "more than 3"));
	pkl_free(&d);
	/* a wide flat list of a million items is fine and fast */
	b.n = 2;
	put(&b, "](", 2);
	for (int i = 0; i < 1000000; i++)
		put8(&b, 'N');
	put(&b, "e.", 2);
	ck_assert_msg(pkl_try(&b, &d) == 0, "%s", perr);
	ck_assert_int_eq(pkl_len(d.root), 1000000);
	pkl_free(&d);
	free(b.p);
}
END_TEST

START_TEST(test_pickle_tensor_arguments)
{
	int sh[2] = { 2, 3 }, st[2] = { 3, 1 };
	struct { const char *type; int numel, offset; int shape[2], stride[2]; int nd; const char *why; } cases[] = {
		{ "FloatStorage", 5, 0, { 2, 3 }, { 3, 1 }, 2, "shorter than its tensor" },
		{ "FloatStorage", 6, 1, { 2, 3 }, { 3, 1 }, 2, "shorter than its tensor" },
		{ "FloatStorage", 6, 0, { 2, 3 }, { 4, 1 }, 2, "shorter than its tensor" },
		{ "FloatStorage", 6, 7, { 0, 3 }, { 3, 1 }, 2, "shorter than its tensor" },
		{ "FloatStorage", 6, 0, { -1, 3 }, { 3, 1 }, 2, "not an int in [0, 2^48]" },
		{ "FloatStorage", 6, 0, { 2, 3 }, { 3, -1 }, 2, "not an int in [0, 2^48]" },
		{ "FloatStorage", 6, -1, { 2, 3 }, { 3, 1 }, 2, "offset" },
		{ "FloatStorage", -6, 0, { 2, 3 }, { 3, 1 }, 2, "element count" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		buf b = { 0 };
		put(&b, "\x80\x02", 2);
		p_tensor(&b, cases[i].type, "0", cases[i].numel, cases[i].offset, cases[i].shape, cases[i].stride,
		         cases[i].nd);
		put8(&b, '.');
		pkl_doc d;
		ck_assert_msg(pkl_try(&b, &d) == -1, "case %zu accepted", i);
		ck_assert_msg(strstr(perr, cases[i].why), "case %zu: %s", i, perr);
		pkl_free(&d);
		free(b.p);
	}
	/* the empty tensor and the 0-d scalar are fine; the view that just fits too */
	int z[1] = { 0 }, one[1] = { 1 };
	buf b = { 0 };
	put(&b, "\x80\x02(", 3);
	p_tensor(&b, "HalfStorage", "0", 0, 0, z, one, 1);
	p_tensor(&b, "FloatStorage", "1", 1, 0, NULL, NULL, 0);
	p_tensor(&b, "FloatStorage", "2", 7, 1, sh, st, 2);
	put(&b, "t.", 2);
	pkl_doc d;
	ck_assert_msg(pkl_try(&b, &d) == 0, "%s", perr);
	ck_assert_int_eq(d.root->u.seq.v[0]->u.tensor->numel, 0);
	ck_assert_int_eq(d.root->u.seq.v[1]->u.tensor->numel, 1);
	ck_assert_int_eq(d.root->u.seq.v[1]->u.tensor->n_dims, 0);
	pkl_free(&d);
	free(b.p);
	/* hooks, metadata, argument counts, persistent ids */
	struct { const char *body; size_t n; const char *why; } more[] = {
#define C(s, w) { s, sizeof(s) - 1, w }
		C("ctorch._utils\n_rebuild_tensor_v2\n(K\x01t" "R", "with 1 arguments"),
		C("ctorch._utils\n_rebuild_parameter\n(K\x01t" "R", "_rebuild_parameter arguments"),
		C("ctorch\nSize\n(K\x01K\x02tR", "torch.Size must be called with one tuple"),
		C("ctorch\nSize\n(N\x85tR", "torch.Size of a None"),
		C("(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x01tQ",
		  NULL),
		C("(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x02\x00\x00\x00" "/0X\x03\x00\x00\x00" "cpuK\x01tQ",
		  "decimal"),
		C("(X\x07\x00\x00\x00storageX\x01\x00\x00\x00xX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x01tQ",
		  "not a torch storage type"),
		C("(X\x06\x00\x00\x00socketK\x01tQ", "persistent id that is not"),
		C("NQ", "persistent id that is not"),
#undef C
	};
	for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
		int rc = pkl_body(more[i].body, more[i].n);
		if (!more[i].why) {
			ck_assert_msg(rc == 0, "case %zu: %s", i, perr);
			continue;
		}
		ck_assert_msg(rc == -1, "case %zu accepted", i);
		ck_assert_msg(strstr(perr, more[i].why), "case %zu: %s", i, perr);
	}
	/* hooks and metadata must be empty */
	for (int k = 0; k < 2; k++) {
		b = (buf){ 0 };
		put(&b, "\x80\x02", 2);
		p_global(&b, "torch._utils", "_rebuild_tensor_v2");
		put(&b, "((", 2);
		p_str(&b, "storage");
		p_global(&b, "torch", "FloatStorage");
		p_str(&b, "0");
		p_str(&b, "cpu");
		put(&b, "K\x04tQK\x00K\x04\x85K\x01\x85\x89", 13);
		if (k == 0) {   /* hooks {1: 1} */
			put(&b, "}K\x01K\x01s", 6);
		} else {        /* hooks {}, metadata {"neg": True} */
			put(&b, "}}", 2);
			p_str(&b, "neg");
			put(&b, "\x88s", 2);
		}
		put(&b, "tR.", 3);
		ck_assert_int_eq(pkl_try(&b, &d), -1);
		ck_assert_msg(strstr(perr, k == 0 ? "backward hooks" : "tensor metadata"), "%s", perr);
		pkl_free(&d);
		free(b.p);
	}
}
END_TEST

START_TEST(test_pickle_every_truncation_refused)
{
	buf b = { 0 };
	put(&b, "\x80\x02}(", 4);
	p_str(&b, "model");
	p_global(&b, "collections", "OrderedDict");
	put(&b, ")R(", 3);
	int sh[2] = { 2, 2 }, st[2] = { 2, 1 };
	p_str(&b, "w");
	p_tensor(&b, "FloatStorage", "0", 4, 0, sh, st, 2);
	put(&b, "uX\x04\x00\x00\x00stepM\xe8\x03u.", 15);
	pkl_doc d;
	ck_assert_msg(pkl_try(&b, &d) == 0, "%s", perr);
	pkl_free(&d);
	for (size_t n = 0; n < b.n; n++) {
		ck_assert_msg(pkl_load(&d, b.p, n, NULL, perr, sizeof perr) == -1, "prefix %zu accepted", n);
		pkl_free(&d);
	}
	free(b.p);
}
END_TEST

/* ---- torch_checkpoint ---- */

static void tc_archive(buf *z, const buf *pkl, const char *prefix, const void *const *data, const size_t *sizes,
                       int n_data, const char *extra_name, const char *extra)
{
	char names[8][64];
	zfile f[10];
	int k = 0;
	snprintf(names[0], sizeof names[0], "%s/data.pkl", prefix);
	f[k++] = zf(names[0], pkl->p, pkl->n);
	for (int i = 0; i < n_data; i++) {
		snprintf(names[i + 1], sizeof names[i + 1], "%s/data/%d", prefix, i);
		f[k] = zf(names[i + 1], data[i], sizes[i]);
		f[k++].descriptor = true;
	}
	if (extra_name)
		f[k++] = zf(extra_name, extra, strlen(extra));
	zip_build(z, f, k, true, NULL);
}

START_TEST(test_tc_views_read_in_row_major_order)
{
	/* storage 0: 12 floats 0..11; the views: a 3×4 matrix, its transpose (strides 1, 4), a 2×2 window at offset 5
	 * (strides 4, 1), a broadcast of element 7 (stride 0); storage 1: bf16; storage 2: f16 */
	float s0[12];
	for (int i = 0; i < 12; i++)
		s0[i] = (float)i;
	uint16_t s1[3] = { 0x3f80, 0xc000, 0x7f80 };      /* 1, -2, inf */
	uint16_t s2[3] = { 0x3c00, 0x0001, 0xfc00 };      /* 1, the smallest subnormal, -inf */
	buf pkl = { 0 };
	put(&pkl, "\x80\x02}(", 4);
	struct { const char *name, *type, *key; int numel, off, nd, shape[2], stride[2]; } v[] = {
		{ "m", "FloatStorage", "0", 12, 0, 2, { 3, 4 }, { 4, 1 } },
		{ "t", "FloatStorage", "0", 12, 0, 2, { 4, 3 }, { 1, 4 } },
		{ "w", "FloatStorage", "0", 12, 5, 2, { 2, 2 }, { 4, 1 } },
		{ "b", "FloatStorage", "0", 12, 7, 2, { 2, 3 }, { 0, 0 } },
		{ "h", "BFloat16Storage", "1", 3, 0, 1, { 3 }, { 1 } },
		{ "f", "HalfStorage", "2", 3, 0, 1, { 3 }, { 1 } },
	};
	for (size_t i = 0; i < 6; i++) {
		p_str(&pkl, v[i].name);
		p_tensor(&pkl, v[i].type, v[i].key, v[i].numel, v[i].off, v[i].shape, v[i].stride, v[i].nd);
	}
	put(&pkl, "u.", 2);
	const void *data[3] = { s0, s1, s2 };
	size_t sizes[3] = { sizeof s0, sizeof s1, sizeof s2 };
	buf z = { 0 };
	tc_archive(&z, &pkl, "ckpt", data, sizes, 3, "ckpt/byteorder", "little");
	tc_file f;
	char err[1024];
	ck_assert_msg(tc_open_mem(&f, z.p, z.n, "t.pt", err, sizeof err) == 0, "%s", err);
	ck_assert_str_eq(f.prefix, "ckpt/");
	tc_tensor t;
	float out[12];
	ck_assert_msg(tc_tensor_bind(&f, pkl_dict_get(f.doc.root, "m"), &t, err, sizeof err) == 0, "%s", err);
	ck_assert(t.contiguous);
	tc_tensor_read(&t, ST_F32, out, 0, 12);
	for (int i = 0; i < 12; i++)
		ck_assert(out[i] == (float)i);
	ck_assert_int_eq(tc_tensor_bind(&f, pkl_dict_get(f.doc.root, "t"), &t, err, sizeof err), 0);
	ck_assert(!t.contiguous);
	tc_tensor_read(&t, ST_F32, out, 0, 12);
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 3; c++)
			ck_assert(out[r * 3 + c] == (float)(c * 4 + r));
	/* a range starting mid-row */
	tc_tensor_read(&t, ST_F32, out, 5, 4);
	ck_assert(out[0] == 9 && out[1] == 2 && out[2] == 6 && out[3] == 10);
	ck_assert_int_eq(tc_tensor_bind(&f, pkl_dict_get(f.doc.root, "w"), &t, err, sizeof err), 0);
	tc_tensor_read(&t, ST_F32, out, 0, 4);
	ck_assert(out[0] == 5 && out[1] == 6 && out[2] == 9 && out[3] == 10);
	tc_tensor_read(&t, ST_F32, out, 1, 2);
	ck_assert(out[0] == 6 && out[1] == 9);
	ck_assert_int_eq(tc_tensor_bind(&f, pkl_dict_get(f.doc.root, "b"), &t, err, sizeof err), 0);
	tc_tensor_read(&t, ST_F32, out, 0, 6);
	for (int i = 0; i < 6; i++)
		ck_assert(out[i] == 7);
	/* as bf16: 7 = 0x40e0 */
	uint16_t h[6];
	tc_tensor_read(&t, ST_BF16, h, 0, 6);
	ck_assert_uint_eq(h[5], 0x40e0);
	ck_assert_int_eq(tc_tensor_bind(&f, pkl_dict_get(f.doc.root, "h"), &t, err, sizeof err), 0);
	tc_tensor_read(&t, ST_F32, out, 0, 3);
	ck_assert(out[0] == 1 && out[1] == -2 && isinf(out[2]));
	tc_tensor_read(&t, ST_BF16, h, 0, 3);
	ck_assert(h[0] == 0x3f80 && h[1] == 0xc000 && h[2] == 0x7f80);
	ck_assert_int_eq(tc_tensor_bind(&f, pkl_dict_get(f.doc.root, "f"), &t, err, sizeof err), 0);
	tc_tensor_read(&t, ST_F32, out, 0, 3);
	ck_assert(out[0] == 1 && out[1] == ldexpf(1, -24) && isinf(out[2]) && out[2] < 0);
	tc_close(&f);
	free(z.p);
	free(pkl.p);
}
END_TEST

START_TEST(test_tc_torch2_layout)
{
	/* what torch 2.x adds (read from its torch/serialization.py and _tensor.py; no torch 2 on this machine): a
	 * byteorder record, .data/ records, and _rebuild_tensor_v2's seventh argument, the (empty) tensor metadata */
	float s0[4] = { 1, 2, 3, 4 };
	buf pkl = { 0 };
	put(&pkl, "\x80\x02}", 3);
	p_str(&pkl, "w");
	p_global(&pkl, "torch._utils", "_rebuild_tensor_v2");
	put(&pkl, "((", 2);
	p_str(&pkl, "storage");
	p_global(&pkl, "torch", "FloatStorage");
	p_str(&pkl, "0");
	p_str(&pkl, "cpu");
	put(&pkl, "K\x04tQK\x00K\x04\x85K\x01\x85\x89", 13);
	p_global(&pkl, "collections", "OrderedDict");
	put(&pkl, ")R}tRs.", 7);
	zfile f[6] = { zf("archive/data.pkl", pkl.p, pkl.n), zf("archive/byteorder", "little", 6),
		       zf("archive/data/0", s0, sizeof s0), zf("archive/.data/version", "3\n", 2),
		       zf("archive/.data/serialization_id", "1234567890123456789012345678901234567890", 40),
		       zf("archive/version", "3\n", 2) };
	buf z = { 0 };
	zip_build(&z, f, 6, true, NULL);
	tc_file t;
	char err[512];
	ck_assert_msg(tc_open_mem(&t, z.p, z.n, "t.pt", err, sizeof err) == 0, "%s", err);
	tc_tensor x;
	ck_assert_msg(tc_tensor_bind(&t, pkl_dict_get(t.doc.root, "w"), &x, err, sizeof err) == 0, "%s", err);
	float out[4];
	tc_tensor_read(&x, ST_F32, out, 0, 4);
	ck_assert(out[0] == 1 && out[3] == 4);
	tc_close(&t);
	free(z.p);
	free(pkl.p);
}
END_TEST

START_TEST(test_tc_f16_widening_is_exact)
{
	/* every binary16 value, widened by the reader, against the definition (sign, exponent, fraction) */
	uint16_t *all = malloc(65536 * 2);
	for (int i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	buf pkl = { 0 };
	put(&pkl, "\x80\x02", 2);
	int shape[1] = { 65536 }, stride[1] = { 1 };
	p_tensor(&pkl, "HalfStorage", "0", 65536, 0, shape, stride, 1);
	put8(&pkl, '.');
	const void *data[1] = { all };
	size_t sizes[1] = { 65536 * 2 };
	buf z = { 0 };
	tc_archive(&z, &pkl, "a", data, sizes, 1, NULL, NULL);
	tc_file f;
	char err[512];
	ck_assert_msg(tc_open_mem(&f, z.p, z.n, "t.pt", err, sizeof err) == 0, "%s", err);
	tc_tensor t;
	ck_assert_int_eq(tc_tensor_bind(&f, f.doc.root, &t, err, sizeof err), 0);
	float *out = malloc(65536 * 4);
	tc_tensor_read(&t, ST_F32, out, 0, 65536);
	uint16_t *back = malloc(65536 * 2);
	tc_tensor_read(&t, ST_F16, back, 0, 65536);
	int bad = -1;   /* the first wrong value (Check's asserts are too slow for 65536 of them) */
	for (int i = 0; i < 65536 && bad < 0; i++) {
		int e = (i >> 10) & 31, m = i & 1023;
		double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
		if (i & 0x8000)
			want = -want;
		bool ok = isnan(want) ? isnan(out[i]) : (double)out[i] == want;
		if (!ok || back[i] != (uint16_t)i)   /* same type: copied */
			bad = i;
	}
	ck_assert_msg(bad < 0, "binary16 0x%04x widened to %g", bad, bad < 0 ? 0 : out[bad]);
	free(out);
	free(back);
	tc_close(&f);
	free(z.p);
	free(pkl.p);
	free(all);
}
END_TEST

START_TEST(test_tc_refusals)
{
	float s0[4] = { 1, 2, 3, 4 };
	int shape[1] = { 4 }, stride[1] = { 1 }, two[1] = { 2 };
	char err[1024];
	tc_file f;
	tc_tensor t;
	/* the storage record holds fewer bytes than its element count says; one storage as two dtypes; no record */
	buf pkl = { 0 };
	put(&pkl, "\x80\x02(", 3);
	p_tensor(&pkl, "FloatStorage", "0", 4, 0, shape, stride, 1);
	p_tensor(&pkl, "FloatStorage", "1", 4, 0, shape, stride, 1);
	p_tensor(&pkl, "HalfStorage", "1", 8, 0, two, stride, 1);
	p_tensor(&pkl, "FloatStorage", "7", 4, 0, shape, stride, 1);
	put(&pkl, "t.", 2);
	const void *data[2] = { s0, s0 };
	size_t sizes[2] = { 12, 16 };
	buf z = { 0 };
	tc_archive(&z, &pkl, "a", data, sizes, 2, NULL, NULL);
	ck_assert_msg(tc_open_mem(&f, z.p, z.n, "t.pt", err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(tc_tensor_bind(&f, f.doc.root->u.seq.v[0], &t, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "holds 12 bytes"), "%s", err);
	ck_assert_int_eq(tc_tensor_bind(&f, f.doc.root->u.seq.v[1], &t, err, sizeof err), 0);
	ck_assert_int_eq(tc_tensor_bind(&f, f.doc.root->u.seq.v[2], &t, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "both as float32 and as float16"), "%s", err);
	ck_assert_int_eq(tc_tensor_bind(&f, f.doc.root->u.seq.v[3], &t, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "'a/data/7' is missing"), "%s", err);
	ck_assert_int_eq(tc_tensor_bind(&f, f.doc.root, &t, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "a tuple where a tensor"), "%s", err);
	tc_close(&f);
	free(z.p);
	/* big-endian, a TorchScript archive, a record outside the folder, no data.pkl, a corrupt data.pkl */
	struct { const char *name, *content, *why; } cases[] = {
		{ "a/byteorder", "big", "byte order" }, { "a/constants.pkl", "x", "TorchScript" },
		{ "b/data/0", "x", "outside the archive's folder" }, { "a/code/x.py", "x", "TorchScript" },
	};
	for (size_t i = 0; i < 4; i++) {
		buf y = { 0 };
		tc_archive(&y, &pkl, "a", data, sizes, 2, cases[i].name, cases[i].content);
		ck_assert_int_eq(tc_open_mem(&f, y.p, y.n, "t.pt", err, sizeof err), -1);
		ck_assert_msg(strstr(err, cases[i].why), "%s: %s", cases[i].name, err);
		tc_close(&f);
		free(y.p);
	}
	zfile only = zf("a/data/0", "x", 1);
	buf y = { 0 };
	zip_build(&y, &only, 1, false, NULL);
	ck_assert_int_eq(tc_open_mem(&f, y.p, y.n, "t.pt", err, sizeof err), -1);
	ck_assert_msg(strstr(err, "without NAME/data.pkl"), "%s", err);
	tc_close(&f);
	free(y.p);
	zfile bad = zf("a/data.pkl", pkl.p, pkl.n);
	bad.bad_crc = true;
	bad.descriptor = true;
	y = (buf){ 0 };
	zip_build(&y, &bad, 1, false, NULL);
	ck_assert_int_eq(tc_open_mem(&f, y.p, y.n, "t.pt", err, sizeof err), -1);
	ck_assert_msg(strstr(err, "CRC-32"), "%s", err);
	tc_close(&f);
	free(y.p);
	/* the unpickler's refusal is named with the record */
	buf evil = { 0 };
	put(&evil, "\x80\x02", 2);
	p_global(&evil, "os", "system");
	put8(&evil, '.');
	zfile e = zf("a/data.pkl", evil.p, evil.n);
	y = (buf){ 0 };
	zip_build(&y, &e, 1, false, NULL);
	ck_assert_int_eq(tc_open_mem(&f, y.p, y.n, "t.pt", err, sizeof err), -1);
	ck_assert_msg(strstr(err, "t.pt: a/data.pkl: byte 2 (GLOBAL): global 'os.system'"), "%s", err);
	tc_close(&f);
	free(y.p);
	free(evil.p);
	free(pkl.p);
	/* files that are no zip: the legacy formats say what they are */
	char path[] = "/tmp/aah-check-tc-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	static const uint8_t legacy[] = { 0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50,
		                          0x19, 0x2e };   /* how a legacy save starts: its magic number */
	ck_assert_int_eq(write(fd, legacy, sizeof legacy), (ssize_t)sizeof legacy);
	close(fd);
	ck_assert_int_eq(tc_open(&f, path, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "legacy torch.save format"), "%s", err);
	tc_close(&f);
	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_eq(write(fd, "hello", 5), 5);
	close(fd);
	ck_assert_int_eq(tc_open(&f, path, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "not a torch.save archive"), "%s", err);
	tc_close(&f);
	unlink(path);
	ck_assert_int_eq(tc_open(&f, "/nonexistent/x.pt", err, sizeof err), -1);
	ck_assert_msg(strstr(err, "No such file"), "%s", err);
	tc_close(&f);
}
END_TEST

/* ---- sha256 ---- */

START_TEST(test_sha256_vectors)
{
	char hex[65];
	sha256_hex("", 0, hex);
	ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sha256_hex("abc", 3, hex);
	ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	sha256_hex(m, strlen(m), hex);
	ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	/* a million 'a' */
	char *a = malloc(1000000);
	memset(a, 'a', 1000000);
	sha256_hex(a, 1000000, hex);
	ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* the file form agrees with sha256sum */
	char path[] = "/tmp/aah-check-sha-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, a, 100000), 100000);
	close(fd);
	char err[256], cmd[256], line[128] = "";
	ck_assert_int_eq(sha256_file_hex(path, hex, err, sizeof err), 0);
	snprintf(cmd, sizeof cmd, "sha256sum %s", path);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
	pclose(p);
	ck_assert(!strncmp(line, hex, 64));
	unlink(path);
	ck_assert_int_eq(sha256_file_hex("/nonexistent", hex, err, sizeof err), -1);
	free(a);
}
END_TEST

static Suite *tc_suite(void)
{
	Suite *s = suite_create("torch_checkpoint");
	TCase *z = tcase_create("zip");
	tcase_add_test(z, test_zip_reads_torch_layout);
	tcase_add_test(z, test_zip_every_truncation_refused);
	tcase_add_test(z, test_zip_unsafe_names_refused);
	tcase_add_test(z, test_zip_forgeries_refused);
	tcase_add_test(z, test_crc32_known_values);
	suite_add_tcase(s, z);
	TCase *p = tcase_create("pickle");
	tcase_set_timeout(p, 60);
	tcase_add_test(p, test_pickle_values);
	tcase_add_test(p, test_pickle_torch_state_dict);
	tcase_add_test(p, test_pickle_every_other_opcode_refused);
	tcase_add_test(p, test_pickle_globals_refused);
	tcase_add_test(p, test_pickle_structure_refused);
	tcase_add_test(p, test_pickle_limits);
	tcase_add_test(p, test_pickle_tensor_arguments);
	tcase_add_test(p, test_pickle_every_truncation_refused);
	suite_add_tcase(s, p);
	TCase *t = tcase_create("checkpoint");
	tcase_add_test(t, test_tc_views_read_in_row_major_order);
	tcase_add_test(t, test_tc_torch2_layout);
	tcase_add_test(t, test_tc_f16_widening_is_exact);
	tcase_add_test(t, test_tc_refusals);
	tcase_add_test(t, test_sha256_vectors);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tc_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
