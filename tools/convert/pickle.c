/* tools/convert/pickle.c — the restricted unpickler (see pickle.h): a stack machine over the opcodes torch.save emits, whose
 * only "calls" are four known constructors interpreted here as data. Containers freeze once nested, so no cycle. */
#include "tools/convert/pickle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/utf8.h"

const pkl_limits pkl_default_limits = {
	.max_bytes = 256u << 20,
	.max_values = 1 << 21,
	.max_stack = 1 << 20,
	.max_marks = 256,
	.max_depth = 64,
};

/* ---- opcodes: every one of pickle protocols 0-5, so that a refusal can name it ---- */

static const struct { uint8_t code; const char *name; } op_names[] = {
	{ '(', "MARK" }, { '.', "STOP" }, { '0', "POP" }, { '1', "POP_MARK" }, { '2', "DUP" }, { 'F', "FLOAT" },
	{ 'I', "INT" }, { 'J', "BININT" }, { 'K', "BININT1" }, { 'L', "LONG" }, { 'M', "BININT2" }, { 'N', "NONE" },
	{ 'P', "PERSID" }, { 'Q', "BINPERSID" }, { 'R', "REDUCE" }, { 'S', "STRING" }, { 'T', "BINSTRING" },
	{ 'U', "SHORT_BINSTRING" }, { 'V', "UNICODE" }, { 'X', "BINUNICODE" }, { 'a', "APPEND" }, { 'b', "BUILD" },
	{ 'c', "GLOBAL" }, { 'd', "DICT" }, { '}', "EMPTY_DICT" }, { 'e', "APPENDS" }, { 'g', "GET" },
	{ 'h', "BINGET" }, { 'i', "INST" }, { 'j', "LONG_BINGET" }, { 'l', "LIST" }, { ']', "EMPTY_LIST" },
	{ 'o', "OBJ" }, { 'p', "PUT" }, { 'q', "BINPUT" }, { 'r', "LONG_BINPUT" }, { 's', "SETITEM" },
	{ 't', "TUPLE" }, { ')', "EMPTY_TUPLE" }, { 'u', "SETITEMS" }, { 'G', "BINFLOAT" }, { 0x80, "PROTO" },
	{ 0x81, "NEWOBJ" }, { 0x82, "EXT1" }, { 0x83, "EXT2" }, { 0x84, "EXT4" }, { 0x85, "TUPLE1" },
	{ 0x86, "TUPLE2" }, { 0x87, "TUPLE3" }, { 0x88, "NEWTRUE" }, { 0x89, "NEWFALSE" }, { 0x8a, "LONG1" },
	{ 0x8b, "LONG4" }, { 'B', "BINBYTES" }, { 'C', "SHORT_BINBYTES" }, { 0x8c, "SHORT_BINUNICODE" },
	{ 0x8d, "BINUNICODE8" }, { 0x8e, "BINBYTES8" }, { 0x8f, "EMPTY_SET" }, { 0x90, "ADDITEMS" },
	{ 0x91, "FROZENSET" }, { 0x92, "NEWOBJ_EX" }, { 0x93, "STACK_GLOBAL" }, { 0x94, "MEMOIZE" },
	{ 0x95, "FRAME" }, { 0x96, "BYTEARRAY8" }, { 0x97, "NEXT_BUFFER" }, { 0x98, "READONLY_BUFFER" },
};

static const char *op_name(uint8_t c)
{
	for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
		if (op_names[i].code == c)
			return op_names[i].name;
	return NULL;
}

/* ---- the allowed globals ---- */

static const struct {
	const char *module, *name, *full;
	pkl_global_kind kind;
	pkl_dtype dtype;
} allowed[] = {
	{ "torch._utils", "_rebuild_tensor_v2", "torch._utils._rebuild_tensor_v2", PKL_G_REBUILD_TENSOR_V2, 0 },
	{ "torch._utils", "_rebuild_parameter", "torch._utils._rebuild_parameter", PKL_G_REBUILD_PARAMETER, 0 },
	{ "collections", "OrderedDict", "collections.OrderedDict", PKL_G_ORDERED_DICT, 0 },
	{ "torch", "Size", "torch.Size", PKL_G_TORCH_SIZE, 0 },
	{ "torch", "FloatStorage", "torch.FloatStorage", PKL_G_STORAGE_TYPE, PKL_DT_F32 },
	{ "torch", "HalfStorage", "torch.HalfStorage", PKL_G_STORAGE_TYPE, PKL_DT_F16 },
	{ "torch", "BFloat16Storage", "torch.BFloat16Storage", PKL_G_STORAGE_TYPE, PKL_DT_BF16 },
	{ "torch", "DoubleStorage", "torch.DoubleStorage", PKL_G_STORAGE_TYPE, PKL_DT_F64 },
	{ "torch", "LongStorage", "torch.LongStorage", PKL_G_STORAGE_TYPE, PKL_DT_I64 },
	{ "torch", "IntStorage", "torch.IntStorage", PKL_G_STORAGE_TYPE, PKL_DT_I32 },
	{ "torch", "ShortStorage", "torch.ShortStorage", PKL_G_STORAGE_TYPE, PKL_DT_I16 },
	{ "torch", "CharStorage", "torch.CharStorage", PKL_G_STORAGE_TYPE, PKL_DT_I8 },
	{ "torch", "ByteStorage", "torch.ByteStorage", PKL_G_STORAGE_TYPE, PKL_DT_U8 },
	{ "torch", "BoolStorage", "torch.BoolStorage", PKL_G_STORAGE_TYPE, PKL_DT_BOOL },
	{ "torch", "ComplexFloatStorage", "torch.ComplexFloatStorage", PKL_G_STORAGE_TYPE, PKL_DT_C64 },
	{ "torch", "ComplexDoubleStorage", "torch.ComplexDoubleStorage", PKL_G_STORAGE_TYPE, PKL_DT_C128 },
};

static const struct { const char *name; size_t size; } dtypes[] = {
	[PKL_DT_F32] = { "float32", 4 }, [PKL_DT_F16] = { "float16", 2 }, [PKL_DT_BF16] = { "bfloat16", 2 },
	[PKL_DT_F64] = { "float64", 8 }, [PKL_DT_I64] = { "int64", 8 }, [PKL_DT_I32] = { "int32", 4 },
	[PKL_DT_I16] = { "int16", 2 }, [PKL_DT_I8] = { "int8", 1 }, [PKL_DT_U8] = { "uint8", 1 },
	[PKL_DT_BOOL] = { "bool", 1 }, [PKL_DT_C64] = { "complex64", 8 }, [PKL_DT_C128] = { "complex128", 16 },
};

const char *pkl_dtype_name(pkl_dtype d)
{
	return (unsigned)d < sizeof dtypes / sizeof dtypes[0] ? dtypes[d].name : "?";
}

size_t pkl_dtype_size(pkl_dtype d)
{
	return (unsigned)d < sizeof dtypes / sizeof dtypes[0] ? dtypes[d].size : 0;
}

const char *pkl_type_name(const pkl_value *v)
{
	if (!v)
		return "nothing";
	switch (v->type) {
	case PKL_NONE: return "None";
	case PKL_BOOL: return "bool";
	case PKL_INT: return "int";
	case PKL_BIGINT: return "int (beyond 64 bits)";
	case PKL_FLOAT: return "float";
	case PKL_STR: return "str";
	case PKL_BYTES: return "bytes";
	case PKL_TUPLE: return "tuple";
	case PKL_LIST: return "list";
	case PKL_DICT: return v->ordered ? "OrderedDict" : "dict";
	case PKL_GLOBAL: return v->u.global.name;
	case PKL_STORAGE: return "storage";
	case PKL_TENSOR: return "tensor";
	}
	return "?";
}

/* ---- the machine ---- */

typedef struct pk {
	const uint8_t *d;
	size_t n, at, op_at;
	uint8_t op;
	pkl_doc *doc;
	const pkl_limits *lim;
	pkl_value **stack;
	size_t sn, scap;
	size_t *marks;
	size_t mn, mcap;
	pkl_value **memo;
	size_t memo_n, memo_cap;
	char *err;
	size_t err_len;
	bool failed;
} pk;

static void pk_fail(pk *p, const char *fmt, ...)
{
	if (p->failed)
		return;
	p->failed = true;
	if (!p->err || !p->err_len)
		return;
	const char *name = op_name(p->op);
	int k = name ? snprintf(p->err, p->err_len, "byte %zu (%s): ", p->op_at, name)
	             : snprintf(p->err, p->err_len, "byte %zu (opcode 0x%02x): ", p->op_at, p->op);
	if (k < 0 || (size_t)k >= p->err_len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err + k, p->err_len - (size_t)k, fmt, ap);
	va_end(ap);
}

/* Grows *v (of element size sz) to hold at least need elements. */
static int grow(pk *p, void **v, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 8;
	while (c < need)
		c *= 2;
	void *nv = realloc(*v, c * sz);
	if (!nv) {
		pk_fail(p, "out of memory");
		return -1;
	}
	*v = nv;
	*cap = c;
	return 0;
}

static pkl_value *pk_new(pk *p, pkl_type t)
{
	pkl_doc *doc = p->doc;
	if ((int64_t)doc->n_all >= p->lim->max_values) {
		pk_fail(p, "more than %lld values: refused", (long long)p->lim->max_values);
		return NULL;
	}
	if (grow(p, (void **)&doc->all, &doc->cap_all, doc->n_all + 1, sizeof *doc->all))
		return NULL;
	pkl_value *v = calloc(1, sizeof *v);
	if (!v) {
		pk_fail(p, "out of memory");
		return NULL;
	}
	v->type = t;
	doc->all[doc->n_all++] = v;
	return v;
}

static int pk_push(pk *p, pkl_value *v)
{
	if (!v)
		return -1;
	if ((int64_t)p->sn >= p->lim->max_stack) {
		pk_fail(p, "more than %lld values on the stack", (long long)p->lim->max_stack);
		return -1;
	}
	if (grow(p, (void **)&p->stack, &p->scap, p->sn + 1, sizeof *p->stack))
		return -1;
	p->stack[p->sn++] = v;
	return 0;
}

/* The stack's floor: values below the innermost MARK cannot be popped. */
static size_t pk_base(const pk *p)
{
	return p->mn ? p->marks[p->mn - 1] : 0;
}

static pkl_value *pk_pop(pk *p)
{
	if (p->sn <= pk_base(p)) {
		pk_fail(p, "stack underflow");
		return NULL;
	}
	return p->stack[--p->sn];
}

static pkl_value *pk_top(pk *p)
{
	if (p->sn <= pk_base(p)) {
		pk_fail(p, "stack underflow");
		return NULL;
	}
	return p->stack[p->sn - 1];
}

/* Pops the innermost MARK; *from = where its values start. */
static int pk_pop_mark(pk *p, size_t *from)
{
	if (!p->mn) {
		pk_fail(p, "no MARK to close");
		return -1;
	}
	*from = p->marks[--p->mn];
	return 0;
}

static int pk_depth(pk *p, pkl_value *c, const pkl_value *item)
{
	if (item->depth + 1 > c->depth)
		c->depth = item->depth + 1;
	if (c->depth > p->lim->max_depth) {
		pk_fail(p, "containers nested deeper than %d levels", (int)p->lim->max_depth);
		return -1;
	}
	return 0;
}

/* Puts item into container c (a list, dict or a tuple being built). */
static int pk_add(pk *p, pkl_value *c, pkl_value *item)
{
	if (c->frozen) {
		pk_fail(p, "a %s changed after it was put inside another value (how a pickle builds a cycle): refused",
		        pkl_type_name(c));
		return -1;
	}
	if (item == c) {
		pk_fail(p, "a %s put inside itself: refused", pkl_type_name(c));
		return -1;
	}
	if (grow(p, (void **)&c->u.seq.v, &c->u.seq.cap, c->u.seq.n + 1, sizeof *c->u.seq.v))
		return -1;
	item->frozen = true;
	c->u.seq.v[c->u.seq.n++] = item;
	return pk_depth(p, c, item);
}

/* A tuple's flag is set as it is built (its items never change), so this is O(1). */
static bool hashable(const pkl_value *v)
{
	return !(v->type == PKL_LIST || v->type == PKL_DICT || v->type == PKL_STORAGE || v->unhashable);
}

static int pk_setitem(pk *p, pkl_value *d, pkl_value *k, pkl_value *v)
{
	if (d->type != PKL_DICT) {
		pk_fail(p, "setting an item of a %s (only a dict has items)", pkl_type_name(d));
		return -1;
	}
	if (!hashable(k)) {
		pk_fail(p, "a %s as a dict key (unhashable)", pkl_type_name(k));
		return -1;
	}
	return pk_add(p, d, k) || pk_add(p, d, v) ? -1 : 0;
}

static pkl_value *pk_tuple(pk *p, size_t from)
{
	pkl_value *t = pk_new(p, PKL_TUPLE);
	if (!t)
		return NULL;
	for (size_t i = from; i < p->sn; i++) {
		if (pk_add(p, t, p->stack[i]))
			return NULL;
		t->unhashable |= !hashable(p->stack[i]);
	}
	p->sn = from;
	return t;
}

/* ---- reading the stream ---- */

static int pk_need(pk *p, uint64_t k)
{
	if (k > p->n - p->at) {
		pk_fail(p, "needs %llu more bytes, the stream has %zu left (truncated)", (unsigned long long)k,
		        p->n - p->at);
		return -1;
	}
	return 0;
}

static uint64_t pk_uint(pk *p, int bytes)
{
	uint64_t x = 0;
	for (int i = bytes - 1; i >= 0; i--)
		x = x << 8 | p->d[p->at + (size_t)i];
	p->at += (size_t)bytes;
	return x;
}

static pkl_value *pk_bytes_value(pk *p, pkl_type t, uint64_t len)
{
	if (pk_need(p, len))
		return NULL;
	const uint8_t *s = p->d + p->at;
	if (t == PKL_STR && aah_utf8_check(s, (size_t)len) != 0) {
		pk_fail(p, "a string that is not valid UTF-8");
		return NULL;
	}
	pkl_value *v = pk_new(p, t);
	if (!v)
		return NULL;
	v->u.str.s = malloc((size_t)len + 1);
	if (!v->u.str.s) {
		pk_fail(p, "out of memory");
		return NULL;
	}
	memcpy(v->u.str.s, s, (size_t)len);
	v->u.str.s[len] = 0;
	v->u.str.len = (size_t)len;
	p->at += (size_t)len;
	return v;
}

static pkl_value *pk_int_value(pk *p, int64_t x)
{
	pkl_value *v = pk_new(p, PKL_INT);
	if (v)
		v->u.i = x;
	return v;
}

/* LONG1: n little-endian two's-complement bytes. */
static pkl_value *pk_long1(pk *p)
{
	if (pk_need(p, 1))
		return NULL;
	size_t k = p->d[p->at++];
	if (pk_need(p, k))
		return NULL;
	const uint8_t *b = p->d + p->at;
	if (k <= 8) {
		uint64_t x = 0;
		for (size_t i = k; i-- > 0;)
			x = x << 8 | b[i];
		if (k > 0 && k < 8 && (b[k - 1] & 0x80))
			x |= ~(uint64_t)0 << (8 * k);   /* sign-extend */
		p->at += k;
		int64_t s;
		memcpy(&s, &x, sizeof s);
		return pk_int_value(p, s);
	}
	return pk_bytes_value(p, PKL_BIGINT, k);
}

/* GLOBAL and STACK_GLOBAL: module and name must be one of `allowed`. */
static pkl_value *pk_global(pk *p, const char *module, const char *name)
{
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
		if (!strcmp(allowed[i].module, module) && !strcmp(allowed[i].name, name)) {
			pkl_value *v = pk_new(p, PKL_GLOBAL);
			if (!v)
				return NULL;
			v->u.global.kind = allowed[i].kind;
			v->u.global.dtype = allowed[i].dtype;
			v->u.global.name = allowed[i].full;
			return v;
		}
	pk_fail(p, "global '%s.%s' is not allowed: a checkpoint names only torch._utils._rebuild_tensor_v2, "
	        "torch._utils._rebuild_parameter, collections.OrderedDict, torch.Size and torch.*Storage types; "
	        "nothing was executed", module, name);
	return NULL;
}

/* A GLOBAL line: printable ASCII up to '\n', at most 255 bytes; copied into buf. */
static int pk_line(pk *p, char *buf, size_t cap)
{
	size_t i = 0;
	for (;;) {
		if (pk_need(p, 1))
			return -1;
		uint8_t c = p->d[p->at++];
		if (c == '\n')
			break;
		if (c < 0x20 || c > 0x7e || i + 1 >= cap) {
			pk_fail(p, "a malformed global name");
			return -1;
		}
		buf[i++] = (char)c;
	}
	buf[i] = 0;
	return 0;
}

/* Names for messages: a string's text when it is one, else its type. */
static const char *pk_describe(const pkl_value *v)
{
	return v->type == PKL_STR ? v->u.str.s : pkl_type_name(v);
}

static bool is_empty_dict(const pkl_value *v)
{
	return v->type == PKL_DICT && v->u.seq.n == 0;
}

/* ints ≥ 0 of a tuple into out (n ≤ PKL_MAX_DIMS). */
static int pk_dims(pk *p, const pkl_value *t, int64_t *out, int32_t *n, const char *what)
{
	if (t->type != PKL_TUPLE || t->u.seq.n > PKL_MAX_DIMS) {
		pk_fail(p, "tensor %s must be a tuple of at most %d ints, not a %s", what, PKL_MAX_DIMS, pkl_type_name(t));
		return -1;
	}
	for (size_t i = 0; i < t->u.seq.n; i++) {
		const pkl_value *x = t->u.seq.v[i];
		if (x->type != PKL_INT || x->u.i < 0 || x->u.i > (INT64_C(1) << 48)) {
			pk_fail(p, "tensor %s holds a %s that is not an int in [0, 2^48]", what, pkl_type_name(x));
			return -1;
		}
		out[i] = x->u.i;
	}
	*n = (int32_t)t->u.seq.n;
	return 0;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
static pkl_value *pk_rebuild_tensor(pk *p, const pkl_value *args)
{
	size_t n = args->u.seq.n;
	pkl_value *const *a = args->u.seq.v;
	if (n != 6 && n != 7) {
		pk_fail(p, "_rebuild_tensor_v2 with %zu arguments (torch gives 6 or 7)", n);
		return NULL;
	}
	if (a[0]->type != PKL_STORAGE || a[1]->type != PKL_INT || a[1]->u.i < 0 || a[4]->type != PKL_BOOL) {
		pk_fail(p, "_rebuild_tensor_v2 arguments must be (storage, offset ≥ 0, size, stride, bool, hooks)");
		return NULL;
	}
	if (!is_empty_dict(a[5])) {
		pk_fail(p, "_rebuild_tensor_v2 with backward hooks (a %s): refused", pkl_type_name(a[5]));
		return NULL;
	}
	if (n == 7 && !is_empty_dict(a[6])) {
		pk_fail(p, "_rebuild_tensor_v2 with tensor metadata (a %s of %zu entries, e.g. conjugate or negative "
		        "bits): not supported", pkl_type_name(a[6]), pkl_len(a[6]));
		return NULL;
	}
	pkl_tensor *t = calloc(1, sizeof *t);
	pkl_value *v = t ? pk_new(p, PKL_TENSOR) : NULL;
	if (!v) {
		free(t);
		if (!p->failed)
			pk_fail(p, "out of memory");
		return NULL;
	}
	v->u.tensor = t;
	v->depth = 1;
	int32_t ns;
	t->storage = a[0];
	t->offset = a[1]->u.i;
	if (pk_dims(p, a[2], t->shape, &t->n_dims, "size") || pk_dims(p, a[3], t->stride, &ns, "stride"))
		return NULL;
	if (ns != t->n_dims) {
		pk_fail(p, "tensor size has %d dimensions, its stride %d", (int)t->n_dims, (int)ns);
		return NULL;
	}
	/* numel = Π shape; the last element it reaches = offset + Σ (shape_i − 1)·stride_i; both checked for overflow */
	int64_t numel = 1, last = t->offset;
	bool ovf = false;
	for (int32_t i = 0; i < t->n_dims; i++) {
		int64_t step;
		ovf |= __builtin_mul_overflow(numel, t->shape[i], &numel);
		if (t->shape[i] > 0) {
			ovf |= __builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &step);
			ovf |= __builtin_add_overflow(last, step, &last);
		}
	}
	int64_t have = a[0]->u.storage.numel;
	if (ovf || numel > (INT64_C(1) << 48)) {
		pk_fail(p, "a tensor of more than 2^48 elements");
		return NULL;
	}
	t->numel = numel;
	if (numel > 0 ? last >= have : t->offset > have) {
		pk_fail(p, "a tensor view reaches element %lld of storage '%s', which holds %lld elements (the storage is "
		        "shorter than its tensor)", (long long)(numel > 0 ? last : t->offset), a[0]->u.storage.key,
		        (long long)have);
		return NULL;
	}
	return v;
}

static pkl_value *pk_reduce(pk *p, const pkl_value *fn, const pkl_value *args)
{
	if (fn->type != PKL_GLOBAL) {
		pk_fail(p, "REDUCE on a %s, which is not a callable", pkl_type_name(fn));
		return NULL;
	}
	if (args->type != PKL_TUPLE) {
		pk_fail(p, "REDUCE of %s with a %s for arguments", fn->u.global.name, pkl_type_name(args));
		return NULL;
	}
	size_t n = args->u.seq.n;
	pkl_value *const *a = args->u.seq.v;
	switch (fn->u.global.kind) {
	case PKL_G_ORDERED_DICT: {
		if (n != 0) {
			pk_fail(p, "collections.OrderedDict called with %zu arguments (torch gives none)", n);
			return NULL;
		}
		pkl_value *d = pk_new(p, PKL_DICT);
		if (d)
			d->ordered = true;
		return d;
	}
	case PKL_G_REBUILD_TENSOR_V2:
		return pk_rebuild_tensor(p, args);
	case PKL_G_REBUILD_PARAMETER:
		/* _rebuild_parameter(data, requires_grad, backward_hooks): the tensor itself */
		if (n != 3 || a[0]->type != PKL_TENSOR || a[1]->type != PKL_BOOL || !is_empty_dict(a[2])) {
			pk_fail(p, "_rebuild_parameter arguments must be (tensor, bool, empty hooks)");
			return NULL;
		}
		return a[0];
	case PKL_G_TORCH_SIZE:
		if (n != 1 || a[0]->type != PKL_TUPLE) {
			pk_fail(p, "torch.Size must be called with one tuple");
			return NULL;
		}
		for (size_t i = 0; i < a[0]->u.seq.n; i++)
			if (a[0]->u.seq.v[i]->type != PKL_INT) {
				pk_fail(p, "torch.Size of a %s", pkl_type_name(a[0]->u.seq.v[i]));
				return NULL;
			}
		return a[0];
	case PKL_G_STORAGE_TYPE:
		break;
	}
	pk_fail(p, "REDUCE on %s, which is not a callable here", fn->u.global.name);
	return NULL;
}

/* BINPERSID: torch's ('storage', storage_type, key, location, numel). */
static pkl_value *pk_persid(pk *p, const pkl_value *pid)
{
	pkl_value *const *a = pid->u.seq.v;
	if (pid->type != PKL_TUPLE || pid->u.seq.n != 5 || a[0]->type != PKL_STR || strcmp(a[0]->u.str.s, "storage")) {
		pk_fail(p, "a persistent id that is not ('storage', type, key, location, numel) but a %s",
		        pid->type == PKL_TUPLE && pid->u.seq.n ? pk_describe(a[0]) : pkl_type_name(pid));
		return NULL;
	}
	if (a[1]->type != PKL_GLOBAL || a[1]->u.global.kind != PKL_G_STORAGE_TYPE) {
		pk_fail(p, "a storage whose type is %s, not a torch storage type", pkl_type_name(a[1]));
		return NULL;
	}
	const pkl_value *key = a[2];
	bool digits = key->type == PKL_STR && key->u.str.len > 0 && key->u.str.len <= 20;
	for (size_t i = 0; digits && i < key->u.str.len; i++)
		digits = key->u.str.s[i] >= '0' && key->u.str.s[i] <= '9';
	if (!digits) {
		pk_fail(p, "a storage key that is not a decimal number (torch names storages data/0, data/1, …)");
		return NULL;
	}
	if (a[3]->type != PKL_STR || a[4]->type != PKL_INT || a[4]->u.i < 0 || a[4]->u.i > (INT64_C(1) << 48)) {
		pk_fail(p, "a storage with a %s location and a %s element count", pkl_type_name(a[3]),
		        pkl_type_name(a[4]));
		return NULL;
	}
	pkl_value *v = pk_new(p, PKL_STORAGE);
	if (!v)
		return NULL;
	v->depth = 1;
	v->u.storage.dtype = a[1]->u.global.dtype;
	v->u.storage.numel = a[4]->u.i;
	v->u.storage.key = strdup(key->u.str.s);
	v->u.storage.location = strdup(a[3]->u.str.s);
	if (!v->u.storage.key || !v->u.storage.location) {
		pk_fail(p, "out of memory");
		return NULL;
	}
	return v;
}

static int pk_memo_put(pk *p, uint64_t idx)
{
	pkl_value *v = pk_top(p);
	if (!v)
		return -1;
	if (idx > p->memo_n) {
		pk_fail(p, "memo index %llu skips ahead of the %zu stored so far", (unsigned long long)idx, p->memo_n);
		return -1;
	}
	if (idx == p->memo_n) {
		if (grow(p, (void **)&p->memo, &p->memo_cap, p->memo_n + 1, sizeof *p->memo))
			return -1;
		p->memo_n++;
	}
	p->memo[idx] = v;
	return 0;
}

static int pk_memo_get(pk *p, uint64_t idx)
{
	if (idx >= p->memo_n) {
		pk_fail(p, "memo index %llu was never stored", (unsigned long long)idx);
		return -1;
	}
	return pk_push(p, p->memo[idx]);
}

/* One opcode. Returns 1 at STOP, 0 to go on, -1 on error. */
static int pk_step(pk *p)
{
	p->op_at = p->at;
	if (pk_need(p, 1))
		return -1;
	p->op = p->d[p->at++];
	pkl_value *v, *w, *x;
	size_t from;
	switch (p->op) {
	case 0x80: /* PROTO */
		if (p->op_at != 0) {
			pk_fail(p, "PROTO after the start");
			return -1;
		}
		if (pk_need(p, 1))
			return -1;
		if (p->d[p->at] < 2 || p->d[p->at] > 4) {
			pk_fail(p, "pickle protocol %u is not supported (torch.save writes 2; 2 to 4 are read)", p->d[p->at]);
			return -1;
		}
		p->at++;
		return 0;
	case 0x95: /* FRAME: a length prefix, transparent */
		if (pk_need(p, 8))
			return -1;
		if (pk_uint(p, 8) > p->n - p->at) {
			pk_fail(p, "a frame longer than the stream (truncated)");
			return -1;
		}
		return 0;
	case '.': /* STOP */
		if (p->mn || p->sn != 1) {
			pk_fail(p, "STOP with %zu values and %zu open MARKs on the stack (a pickle ends with one value)", p->sn,
			        p->mn);
			return -1;
		}
		if (p->at != p->n) {
			pk_fail(p, "%zu bytes after STOP", p->n - p->at);
			return -1;
		}
		p->doc->root = p->stack[0];
		return 1;
	case '(': /* MARK */
		if ((int64_t)p->mn >= p->lim->max_marks) {
			pk_fail(p, "more than %lld open MARKs", (long long)p->lim->max_marks);
			return -1;
		}
		if (grow(p, (void **)&p->marks, &p->mcap, p->mn + 1, sizeof *p->marks))
			return -1;
		p->marks[p->mn++] = p->sn;
		return 0;
	case '}': return pk_push(p, pk_new(p, PKL_DICT));
	case ']': return pk_push(p, pk_new(p, PKL_LIST));
	case ')': return pk_push(p, pk_new(p, PKL_TUPLE));
	case 'N': return pk_push(p, pk_new(p, PKL_NONE));
	case 0x88: /* NEWTRUE */
	case 0x89: /* NEWFALSE */
		if (!(v = pk_new(p, PKL_BOOL)))
			return -1;
		v->u.b = p->op == 0x88;
		return pk_push(p, v);
	case 't': /* TUPLE */
		if (pk_pop_mark(p, &from))
			return -1;
		return pk_push(p, pk_tuple(p, from));
	case 0x85: /* TUPLE1 */
	case 0x86: /* TUPLE2 */
	case 0x87: /* TUPLE3 */ {
		size_t k = (size_t)(p->op - 0x84);
		if (p->sn < pk_base(p) + k) {
			pk_fail(p, "stack underflow");
			return -1;
		}
		return pk_push(p, pk_tuple(p, p->sn - k));
	}
	case 'a': /* APPEND */
		if (!(v = pk_pop(p)) || !(w = pk_top(p)))
			return -1;
		if (w->type != PKL_LIST) {
			pk_fail(p, "appending to a %s", pkl_type_name(w));
			return -1;
		}
		return pk_add(p, w, v);
	case 'e': /* APPENDS */
		if (pk_pop_mark(p, &from))
			return -1;
		if (from <= pk_base(p) || p->stack[from - 1]->type != PKL_LIST) {
			pk_fail(p, "appending to a %s", from > pk_base(p) ? pkl_type_name(p->stack[from - 1]) : "nothing");
			return -1;
		}
		for (size_t i = from; i < p->sn; i++)
			if (pk_add(p, p->stack[from - 1], p->stack[i]))
				return -1;
		p->sn = from;
		return 0;
	case 's': /* SETITEM */
		if (!(v = pk_pop(p)) || !(w = pk_pop(p)) || !(x = pk_top(p)))
			return -1;
		return pk_setitem(p, x, w, v);
	case 'u': /* SETITEMS */
		if (pk_pop_mark(p, &from))
			return -1;
		if (from <= pk_base(p) || (p->sn - from) % 2) {
			pk_fail(p, "SETITEMS without a dict below its MARK, or with an odd number of values");
			return -1;
		}
		for (size_t i = from; i < p->sn; i += 2)
			if (pk_setitem(p, p->stack[from - 1], p->stack[i], p->stack[i + 1]))
				return -1;
		p->sn = from;
		return 0;
	case 'X': /* BINUNICODE */
		if (pk_need(p, 4))
			return -1;
		return pk_push(p, pk_bytes_value(p, PKL_STR, pk_uint(p, 4)));
	case 0x8c: /* SHORT_BINUNICODE */
		if (pk_need(p, 1))
			return -1;
		return pk_push(p, pk_bytes_value(p, PKL_STR, pk_uint(p, 1)));
	case 0x8d: /* BINUNICODE8 */
		if (pk_need(p, 8))
			return -1;
		return pk_push(p, pk_bytes_value(p, PKL_STR, pk_uint(p, 8)));
	case 'B': /* BINBYTES */
		if (pk_need(p, 4))
			return -1;
		return pk_push(p, pk_bytes_value(p, PKL_BYTES, pk_uint(p, 4)));
	case 'C': /* SHORT_BINBYTES */
		if (pk_need(p, 1))
			return -1;
		return pk_push(p, pk_bytes_value(p, PKL_BYTES, pk_uint(p, 1)));
	case 0x8e: /* BINBYTES8 */
		if (pk_need(p, 8))
			return -1;
		return pk_push(p, pk_bytes_value(p, PKL_BYTES, pk_uint(p, 8)));
	case 'J': /* BININT: 4 bytes, signed */
		if (pk_need(p, 4))
			return -1;
		return pk_push(p, pk_int_value(p, (int32_t)(uint32_t)pk_uint(p, 4)));
	case 'K': /* BININT1 */
		if (pk_need(p, 1))
			return -1;
		return pk_push(p, pk_int_value(p, (int64_t)pk_uint(p, 1)));
	case 'M': /* BININT2 */
		if (pk_need(p, 2))
			return -1;
		return pk_push(p, pk_int_value(p, (int64_t)pk_uint(p, 2)));
	case 0x8a: /* LONG1 */
		return pk_push(p, pk_long1(p));
	case 'G': /* BINFLOAT: big-endian IEEE double */ {
		if (pk_need(p, 8))
			return -1;
		uint64_t bits = 0;
		for (int i = 0; i < 8; i++)
			bits = bits << 8 | p->d[p->at++];
		if (!(v = pk_new(p, PKL_FLOAT)))
			return -1;
		memcpy(&v->u.f, &bits, sizeof v->u.f);
		return pk_push(p, v);
	}
	case 'q': /* BINPUT */
		if (pk_need(p, 1))
			return -1;
		return pk_memo_put(p, pk_uint(p, 1));
	case 'r': /* LONG_BINPUT */
		if (pk_need(p, 4))
			return -1;
		return pk_memo_put(p, pk_uint(p, 4));
	case 0x94: /* MEMOIZE */
		return pk_memo_put(p, p->memo_n);
	case 'h': /* BINGET */
		if (pk_need(p, 1))
			return -1;
		return pk_memo_get(p, pk_uint(p, 1));
	case 'j': /* LONG_BINGET */
		if (pk_need(p, 4))
			return -1;
		return pk_memo_get(p, pk_uint(p, 4));
	case 'c': /* GLOBAL: "module\nname\n" */ {
		char module[256], name[256];
		if (pk_line(p, module, sizeof module) || pk_line(p, name, sizeof name))
			return -1;
		return pk_push(p, pk_global(p, module, name));
	}
	case 0x93: /* STACK_GLOBAL: module and name from the stack */
		if (!(w = pk_pop(p)) || !(v = pk_pop(p)))
			return -1;
		if (v->type != PKL_STR || w->type != PKL_STR) {
			pk_fail(p, "STACK_GLOBAL of a %s and a %s", pkl_type_name(v), pkl_type_name(w));
			return -1;
		}
		return pk_push(p, pk_global(p, v->u.str.s, w->u.str.s));
	case 'R': /* REDUCE */
		if (!(w = pk_pop(p)) || !(v = pk_pop(p)))
			return -1;
		w->frozen = true;
		return pk_push(p, pk_reduce(p, v, w));
	case 'b': /* BUILD: only the attribute state (_metadata) of an OrderedDict, which is dropped */
		if (!(w = pk_pop(p)) || !(v = pk_top(p)))
			return -1;
		if (v->type != PKL_DICT || !v->ordered || v->built || v->frozen || w->type != PKL_DICT) {
			pk_fail(p, "BUILD on a %s with a %s: refused (only an OrderedDict's attribute dict is accepted)",
			        pkl_type_name(v), pkl_type_name(w));
			return -1;
		}
		w->frozen = true;
		v->built = true;
		return 0;
	case 'Q': /* BINPERSID */
		if (!(v = pk_pop(p)))
			return -1;
		v->frozen = true;
		return pk_push(p, pk_persid(p, v));
	default:
		if (op_name(p->op))
			pk_fail(p, "opcode not allowed: a checkpoint does not need it; nothing was executed");
		else
			pk_fail(p, "not a pickle opcode");
		return -1;
	}
}

int pkl_load(pkl_doc *doc, const uint8_t *data, size_t len, const pkl_limits *lim, char *err, size_t err_len)
{
	memset(doc, 0, sizeof *doc);
	pk p = { .d = data, .n = len, .doc = doc, .lim = lim ? lim : &pkl_default_limits, .err = err,
	         .err_len = err_len };
	if (err && err_len)
		err[0] = 0;
	if ((uint64_t)len > p.lim->max_bytes) {
		if (err && err_len)
			snprintf(err, err_len, "a pickle of %zu bytes (more than %llu)", len,
			         (unsigned long long)p.lim->max_bytes);
		return -1;
	}
	if (len == 0 || data[0] != 0x80) {
		if (err && err_len)
			snprintf(err, err_len, "does not start with PROTO: not a protocol 2-4 pickle");
		return -1;
	}
	int rc;
	while ((rc = pk_step(&p)) == 0)
		;
	if (rc < 0 && !p.failed)
		pk_fail(&p, "failed");
	free(p.stack);
	free(p.marks);
	free(p.memo);
	if (rc < 0) {
		doc->root = NULL;
		return -1;
	}
	return 0;
}

void pkl_free(pkl_doc *doc)
{
	if (!doc)
		return;
	for (size_t i = 0; i < doc->n_all; i++) {
		pkl_value *v = doc->all[i];
		switch (v->type) {
		case PKL_STR:
		case PKL_BYTES:
		case PKL_BIGINT:
			free(v->u.str.s);
			break;
		case PKL_TUPLE:
		case PKL_LIST:
		case PKL_DICT:
			free(v->u.seq.v);
			break;
		case PKL_STORAGE:
			free(v->u.storage.key);
			free(v->u.storage.location);
			break;
		case PKL_TENSOR:
			free(v->u.tensor);
			break;
		default:
			break;
		}
		free(v);
	}
	free(doc->all);
	memset(doc, 0, sizeof *doc);
}

const pkl_value *pkl_dict_get(const pkl_value *d, const char *key)
{
	if (!d || d->type != PKL_DICT)
		return NULL;
	size_t klen = strlen(key);
	for (size_t i = d->u.seq.n / 2; i-- > 0;) {
		const pkl_value *k = d->u.seq.v[2 * i];
		if (k->type == PKL_STR && k->u.str.len == klen && !memcmp(k->u.str.s, key, klen))
			return d->u.seq.v[2 * i + 1];
	}
	return NULL;
}

size_t pkl_len(const pkl_value *v)
{
	if (!v)
		return 0;
	if (v->type == PKL_TUPLE || v->type == PKL_LIST)
		return v->u.seq.n;
	if (v->type == PKL_DICT)
		return v->u.seq.n / 2;
	return 0;
}
