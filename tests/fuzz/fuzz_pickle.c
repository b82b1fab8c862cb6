/* tests/fuzz/fuzz_pickle.c — libFuzzer target for the restricted unpickler: the input is a data.pkl, parsed with
 * the default limits, then walked (every value visited once, as the importer would) and freed. */
#include <stddef.h>
#include <stdint.h>

#include "tools/convert/pickle.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/pickle";

/* Visits v's values; the unpickler guarantees a tree-shaped DAG of depth ≤ 64, so the budget bounds shared parts. */
static void walk(const pkl_value *v, int64_t *budget)
{
	if (--*budget < 0)
		return;
	if (v->type == PKL_TUPLE || v->type == PKL_LIST || v->type == PKL_DICT)
		for (size_t i = 0; i < v->u.seq.n; i++)
			walk(v->u.seq.v[i], budget);
	else if (v->type == PKL_TENSOR)
		walk(v->u.tensor->storage, budget);
	(void)pkl_type_name(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	pkl_doc doc;
	char err[512];
	if (pkl_load(&doc, data, size, NULL, err, sizeof err) == 0) {
		int64_t budget = 1 << 16;
		walk(doc.root, &budget);
		(void)pkl_dict_get(doc.root, "model");
	}
	pkl_free(&doc);
	return 0;
}
