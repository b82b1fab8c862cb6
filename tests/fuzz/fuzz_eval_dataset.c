/* tests/fuzz/fuzz_eval_dataset.c — libFuzzer target for aah-eval's dataset readers: the first byte picks a task,
 * the rest is read as its JSONL file (layout and cross-field checks); every accepted doc then goes through the
 * task's process_docs and templates (text, few-shot text and target, choices, gold, target, test program), which
 * must hold for any doc the reader lets through. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tools/eval/dataset.h"
#include "tools/eval/pyrandom.h"
#include "tools/eval/tasks.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/eval_dataset";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const eval_task *t = &eval_tasks[data[0] % eval_n_tasks];
	eval_docs docs;
	char err[512];
	if (eval_docs_parse(&docs, "fuzz.jsonl", (const char *)data + 1, size - 1, t->layout, t->check, err, sizeof err) != 0)
		return 0;
	py_random rng;
	py_random_seed(&rng, 0);
	for (int64_t i = 0; i < docs.n; i++) {
		json_t *doc = docs.doc[i];
		for (int32_t k = 0; k < 2; k++) {
			if (t->process)
				t->process(doc, &rng, k);
			free(t->doc_to_text(doc, k));
			if (t->fewshot_text)
				free(t->fewshot_text(doc, k));
			if (t->description)
				free(t->description(doc, k));
		}
		if (t->fewshot_target)
			free(t->fewshot_target(doc));
		if (t->doc_to_choices) {
			char **choices;
			int32_t n = t->doc_to_choices(doc, &choices);
			int32_t gold = t->doc_to_gold(doc);
			if (gold < -1 || gold >= n)
				abort();   /* the checks must keep the gold index among the choices (or say -1) */
			for (int32_t c = 0; c < n; c++)
				free(choices[c]);
			free(choices);
		}
		if (t->doc_to_target)
			json_decref(t->doc_to_target(doc));
		if (t->program)
			free(t->program(doc, "    return 1\n"));
	}
	eval_docs_free(&docs);
	return 0;
}
