/* tools/convert/pickle.h — a restricted unpickler for the data.pkl of a torch.save archive: it reads exactly the opcodes and
 * globals a checkpoint needs into a tree of plain values, and refuses anything else by name. Nothing is executed. */
#ifndef AAH_PICKLE_H
#define AAH_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PKL_MAX_DIMS 8

typedef enum pkl_type {
	PKL_NONE = 0,
	PKL_BOOL,
	PKL_INT,                     /* fits int64 */
	PKL_BIGINT,                  /* an integer beyond int64 (LONG1 of more than 8 bytes): kept, not interpreted */
	PKL_FLOAT,
	PKL_STR,                     /* valid UTF-8 */
	PKL_BYTES,
	PKL_TUPLE,
	PKL_LIST,
	PKL_DICT,                    /* a dict or an OrderedDict; keys in insertion order, duplicates kept */
	PKL_GLOBAL,                  /* one of the allowed globals (pkl_global_kind), not applied */
	PKL_STORAGE,                 /* a storage reference of a persistent id: ('storage', type, key, location, numel) */
	PKL_TENSOR,                  /* what torch._utils._rebuild_tensor_v2 would build: a view of a storage */
} pkl_type;

/* The globals a checkpoint may name; every other one is refused. */
typedef enum pkl_global_kind {
	PKL_G_REBUILD_TENSOR_V2 = 0, /* torch._utils._rebuild_tensor_v2 */
	PKL_G_REBUILD_PARAMETER,     /* torch._utils._rebuild_parameter */
	PKL_G_ORDERED_DICT,          /* collections.OrderedDict */
	PKL_G_TORCH_SIZE,            /* torch.Size (of a tuple of ints) */
	PKL_G_STORAGE_TYPE,          /* torch.FloatStorage, torch.BFloat16Storage, … (pkl_dtype) */
} pkl_global_kind;

/* Element types of storages. Only F32, F16 and BF16 are model weights here; the others can appear in the parts of a
 * checkpoint that are skipped (optimizer step counters, masks). */
typedef enum pkl_dtype {
	PKL_DT_F32 = 0, PKL_DT_F16, PKL_DT_BF16, PKL_DT_F64, PKL_DT_I64, PKL_DT_I32, PKL_DT_I16, PKL_DT_I8, PKL_DT_U8,
	PKL_DT_BOOL, PKL_DT_C64, PKL_DT_C128,
} pkl_dtype;

typedef struct pkl_value pkl_value;

typedef struct pkl_tensor {
	const pkl_value *storage;    /* PKL_STORAGE */
	int64_t offset;              /* in elements */
	int32_t n_dims;
	int64_t shape[PKL_MAX_DIMS];
	int64_t stride[PKL_MAX_DIMS]; /* in elements */
	int64_t numel;
} pkl_tensor;

struct pkl_value {
	pkl_type type;
	bool frozen;                 /* inside another value: never changed again (this is what rules out cycles) */
	bool ordered;                /* a dict made by collections.OrderedDict() */
	bool built;                  /* BUILD has set its state once */
	bool unhashable;             /* a tuple holding a list, dict or storage (cannot be a dict key) */
	int32_t depth;               /* 0 for scalars; 1 + the deepest element for containers */
	union {
		bool b;
		int64_t i;
		double f;
		struct { char *s; size_t len; } str;          /* PKL_STR, PKL_BYTES, PKL_BIGINT (little-endian bytes);
		                                               * s NUL-terminated (a string may hold NULs inside) */
		struct { pkl_value **v; size_t n, cap; } seq; /* tuple, list: n items; dict: v[2k] key, v[2k+1] value */
		struct { pkl_global_kind kind; pkl_dtype dtype; const char *name; } global;   /* name: "module.name" */
		struct { pkl_dtype dtype; char *key; char *location; int64_t numel; } storage;
		pkl_tensor *tensor;
	} u;
};

typedef struct pkl_limits {
	uint64_t max_bytes;          /* input size */
	int64_t max_values;          /* values made in all */
	int64_t max_stack;           /* values on the stack at once */
	int64_t max_marks;           /* open MARKs at once */
	int32_t max_depth;           /* nesting of containers */
} pkl_limits;

/* 256 MiB, 2^21 values, 2^20 on the stack, 256 marks, depth 64: a checkpoint of a 4B-parameter model with its
 * optimizer state needs a few MB and a few tens of thousands of values. */
extern const pkl_limits pkl_default_limits;

typedef struct pkl_doc {
	pkl_value *root;             /* what STOP returned */
	pkl_value **all;             /* private: every value made, for freeing */
	size_t n_all, cap_all;
} pkl_doc;

/* Reads a pickle of protocol 2 to 4 (torch.save writes 2). Understood: PROTO, FRAME, STOP, MARK, EMPTY_DICT,
 * EMPTY_LIST, EMPTY_TUPLE, TUPLE, TUPLE1-3, APPEND(S), SETITEM(S), BINUNICODE, SHORT_BINUNICODE, BINUNICODE8,
 * BINBYTES, SHORT_BINBYTES, BINBYTES8, BININT, BININT1, BININT2, LONG1, BINFLOAT, NONE, NEWTRUE, NEWFALSE, BINPUT,
 * LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET, GLOBAL, STACK_GLOBAL, REDUCE, BUILD, BINPERSID. Every other opcode,
 * every global outside pkl_global_kind, REDUCE on anything but an allowed callable with the arguments torch
 * gives it, BUILD on anything but an OrderedDict, a container changed after it was put inside another (the only
 * way to build a cycle), nesting beyond the limits, invalid UTF-8, a memo index out of order, bytes after STOP and
 * a truncated stream are refused with err naming the opcode or global and its byte offset. A tensor whose view
 * reaches past its storage's element count is refused too. lim NULL: pkl_default_limits.
 * Returns 0 and doc->root, or -1 with err. *doc is zeroed first; pkl_free frees it in either case. */
int pkl_load(pkl_doc *doc, const uint8_t *data, size_t len, const pkl_limits *lim, char *err, size_t err_len);
void pkl_free(pkl_doc *doc);

/* The value of the last entry of dict d whose key is the string key; NULL when none or d is not a dict. */
const pkl_value *pkl_dict_get(const pkl_value *d, const char *key);
/* Items of a tuple or list, entries of a dict; 0 for anything else. */
size_t pkl_len(const pkl_value *v);

/* "int", "dict", "torch._utils._rebuild_tensor_v2", … for messages. */
const char *pkl_type_name(const pkl_value *v);
/* "float32", "bfloat16", …; bytes per element. */
const char *pkl_dtype_name(pkl_dtype d);
size_t pkl_dtype_size(pkl_dtype d);

#ifdef __cplusplus
}
#endif
#endif
