/* tools/eval/groups.c — group tasks and the harness's group aggregation (see groups.h). The MMLU subject → category
 * table is the harness's (lm_eval/tasks/mmlu/_generate_configs.py SUBJECTS; each subject's YAML tags it
 * mmlu_<category>_tasks); MMLU-Pro's subtask names are "mmlu_pro_" + category with spaces as underscores. */
#include "tools/eval/groups.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/eval/pytext.h"
#include "tools/eval/score.h"
#include "tools/eval/util.h"

const char *const eval_mmlu_groups[] = {"mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities", NULL};

static const char *const MMLU_SUBJECTS[][2] = {
	{"abstract_algebra", "stem"}, {"anatomy", "stem"}, {"astronomy", "stem"}, {"business_ethics", "other"},
	{"clinical_knowledge", "other"}, {"college_biology", "stem"}, {"college_chemistry", "stem"},
	{"college_computer_science", "stem"}, {"college_mathematics", "stem"}, {"college_medicine", "other"},
	{"college_physics", "stem"}, {"computer_security", "stem"}, {"conceptual_physics", "stem"},
	{"econometrics", "social_sciences"}, {"electrical_engineering", "stem"}, {"elementary_mathematics", "stem"},
	{"formal_logic", "humanities"}, {"global_facts", "other"}, {"high_school_biology", "stem"},
	{"high_school_chemistry", "stem"}, {"high_school_computer_science", "stem"},
	{"high_school_european_history", "humanities"}, {"high_school_geography", "social_sciences"},
	{"high_school_government_and_politics", "social_sciences"}, {"high_school_macroeconomics", "social_sciences"},
	{"high_school_mathematics", "stem"}, {"high_school_microeconomics", "social_sciences"},
	{"high_school_physics", "stem"}, {"high_school_psychology", "social_sciences"}, {"high_school_statistics", "stem"},
	{"high_school_us_history", "humanities"}, {"high_school_world_history", "humanities"}, {"human_aging", "other"},
	{"human_sexuality", "social_sciences"}, {"international_law", "humanities"}, {"jurisprudence", "humanities"},
	{"logical_fallacies", "humanities"}, {"machine_learning", "stem"}, {"management", "other"},
	{"marketing", "other"}, {"medical_genetics", "other"}, {"miscellaneous", "other"},
	{"moral_disputes", "humanities"}, {"moral_scenarios", "humanities"}, {"nutrition", "other"},
	{"philosophy", "humanities"}, {"prehistory", "humanities"}, {"professional_accounting", "other"},
	{"professional_law", "humanities"}, {"professional_medicine", "other"},
	{"professional_psychology", "social_sciences"}, {"public_relations", "social_sciences"},
	{"security_studies", "social_sciences"}, {"sociology", "social_sciences"}, {"us_foreign_policy", "social_sciences"},
	{"virology", "other"}, {"world_religions", "humanities"},
};

double eval_pooled_stderr(const double *se, const int64_t *n, int32_t k)
{
	double num = 0;
	int64_t total = 0;
	for (int32_t i = 0; i < k; i++) {
		if (isnan(se[i]))
			return NAN;
		num += (double)(n[i] - 1) * se[i] * se[i] * (double)n[i];
		total += n[i];
	}
	if (total - k <= 0)
		return NAN;
	return sqrt(num / (double)(total - k) / (double)total);
}

/* The item field that names the subtask, and the subtask's alias from its value (new string); NULL: one task. */
static const char *subtask_field(const eval_task *t)
{
	if (!strcmp(t->name, "mmlu"))
		return "subject";
	if (!strcmp(t->name, "mmlu_pro"))
		return "category";
	return NULL;
}

/* The subtask's alias from the field's value: MMLU's subject as it is, MMLU-Pro's category with spaces as
 * underscores ("computer science" → "computer_science"). New string. */
static char *subtask_alias(const char *value)
{
	return py_replace(value ? value : "", " ", "_");
}

static const char *mmlu_group(const char *subject)
{
	static const char *const names[] = {"stem", "other", "social_sciences", "humanities"};
	for (size_t i = 0; i < sizeof MMLU_SUBJECTS / sizeof *MMLU_SUBJECTS; i++)
		if (!strcmp(MMLU_SUBJECTS[i][0], subject))
			for (int g = 0; g < 4; g++)
				if (!strcmp(MMLU_SUBJECTS[i][1], names[g]))
					return eval_mmlu_groups[g];
	return NULL;   /* a subject the harness does not have: counted in mmlu only */
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int eval_subtasks_of(const eval_task_run *run, eval_subtasks *out)
{
	memset(out, 0, sizeof *out);
	const char *field = subtask_field(run->task);
	if (!field)
		return 1;
	bool mmlu = !strcmp(run->task->name, "mmlu");
	/* the distinct values among the selected items, sorted; then each item's index among them */
	int64_t n = run->n_items;
	char **alias = xcalloc((size_t)(n ? n : 1), sizeof *alias);
	int32_t k = 0;
	for (int64_t i = 0; i < n; i++) {
		char *a = subtask_alias(json_string_value(json_object_get(run->items[i].doc, field)));
		bool seen = false;
		for (int32_t j = 0; j < k && !seen; j++)
			seen = !strcmp(alias[j], a);
		if (seen)
			free(a);
		else
			alias[k++] = a;
	}
	qsort(alias, (size_t)k, sizeof *alias, by_name);
	out->n = k;
	out->alias = alias;
	out->name = xcalloc((size_t)(k ? k : 1), sizeof *out->name);
	out->group = xcalloc((size_t)(k ? k : 1), sizeof *out->group);
	out->size = xcalloc((size_t)(k ? k : 1), sizeof *out->size);
	out->in_file = xcalloc((size_t)(k ? k : 1), sizeof *out->in_file);
	out->of_item = xcalloc((size_t)(n ? n : 1), sizeof *out->of_item);
	for (int32_t j = 0; j < k; j++) {
		out->name[j] = xasprintf("%s_%s", run->task->name, alias[j]);
		out->group[j] = mmlu ? mmlu_group(alias[j]) : NULL;
	}
	for (int64_t i = 0; i < n; i++) {
		char *a = subtask_alias(json_string_value(json_object_get(run->items[i].doc, field)));
		for (int32_t j = 0; j < k; j++)
			if (!strcmp(alias[j], a)) {
				out->of_item[i] = j;
				out->size[j]++;
			}
		free(a);
	}
	for (int64_t i = 0; i < run->docs.n; i++) {
		char *a = subtask_alias(json_string_value(json_object_get(run->docs.doc[i], field)));
		for (int32_t j = 0; j < k; j++)
			if (!strcmp(alias[j], a))
				out->in_file[j]++;
		free(a);
	}
	return 0;
}

void eval_subtasks_free(eval_subtasks *s)
{
	for (int32_t j = 0; j < s->n; j++) {
		free(s->name[j]);
		free(s->alias[j]);
	}
	free(s->name);
	free(s->alias);
	free(s->group);
	free(s->size);
	free(s->in_file);
	free(s->of_item);
	memset(s, 0, sizeof *s);
}

void eval_group_stat(const eval_subtasks *s, const double *x, int64_t n_items, const char *group, int32_t sub,
                     double *mean, double *se, int64_t *size)
{
	double *ses = xcalloc((size_t)(s->n ? s->n : 1), sizeof *ses);
	int64_t *ns = xcalloc((size_t)(s->n ? s->n : 1), sizeof *ns);
	double *vals = xcalloc((size_t)(n_items ? n_items : 1), sizeof *vals);
	int32_t k = 0;
	double sum = 0;
	int64_t total = 0;
	for (int32_t j = 0; j < s->n; j++) {
		if (sub >= 0 ? j != sub : group && (!s->group[j] || strcmp(s->group[j], group)))
			continue;
		int64_t m = 0;
		for (int64_t i = 0; i < n_items; i++)
			if (s->of_item[i] == j)
				vals[m++] = x[i];
		double mu = eval_mean(vals, m);
		/* aggregate_subtask_metrics, weight_by_size: sum(metric_i * size_i) / sum(size_i) */
		sum += mu * (double)m;
		total += m;
		ses[k] = eval_stderr(vals, m);   /* the subtask's own stderr: "N/A" (NAN) with one item */
		ns[k++] = m;
	}
	*mean = total > 0 ? sum / (double)total : NAN;
	*se = sub >= 0 ? (k ? ses[0] : NAN) : eval_pooled_stderr(ses, ns, k);
	*size = total;
	free(ses);
	free(ns);
	free(vals);
}
