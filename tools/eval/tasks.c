/* tools/eval/tasks.c — the task table (see tasks.h): for each benchmark the template, choices, target, stop
 * sequences, filters and metric of lm-evaluation-harness's YAML and utils.py, quoted in
 * ../shared/benchmarks/README.md (harness commit 4e7e0d47). Python and Jinja expressions are given beside the code
 * that renders them. */
#include "tools/eval/tasks.h"

#include <stdlib.h>
#include <string.h>

#include "tools/eval/pytext.h"
#include "tools/eval/util.h"

#define S(doc, path) eval_doc_str(doc, path)

static const char *const LETTERS[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"};

static int32_t letter_choices(char ***out, int32_t n)
{
	*out = xmalloc((size_t)n * sizeof **out);
	for (int32_t i = 0; i < n; i++)
		(*out)[i] = xstrdup(LETTERS[i]);
	return n;
}

static int32_t string_array(const json_t *a, char ***out)
{
	int32_t n = (int32_t)json_array_size(a);
	*out = xmalloc((size_t)(n ? n : 1) * sizeof **out);
	for (int32_t i = 0; i < n; i++)
		(*out)[i] = xstrdup(json_string_value(json_array_get(a, i)));
	return n;
}

static int32_t letter_index(const char *s, int32_t n)
{
	for (int32_t i = 0; i < n; i++)
		if (!strcmp(s, LETTERS[i]))
			return i;
	return -1;
}

static int fail(char *field, size_t fl, char *msg, size_t ml, const char *f, const char *m)
{
	snprintf(field, fl, "%s", f);
	snprintf(msg, ml, "%s", m);
	return -1;
}

/* ---- MMLU (cais/mmlu): question, subject, choices[4], answer 0-3 ---- */

static const eval_field mmlu_layout[] = {
	{"question", EVAL_FIELD_STRING, 0, 0, false},
	{"subject", EVAL_FIELD_STRING, 0, 0, false},
	{"choices", EVAL_FIELD_STRING_ARRAY, 4, 4, false},
	{"answer", EVAL_FIELD_INT, 0, 0, false},
	{NULL, 0, 0, 0, false},
};

static int mmlu_check(const json_t *doc, char *f, size_t fl, char *m, size_t ml)
{
	json_int_t a = json_integer_value(json_object_get(doc, "answer"));
	return a >= 0 && a < 4 ? 0 : fail(f, fl, m, ml, "answer", "expected 0, 1, 2 or 3 (the index of the choice)");
}

/* "The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}.\n\n" */
static char *mmlu_description(const json_t *doc, int32_t k)
{
	char *subject = py_replace(S(doc, "subject"), "_", " ");
	char *d = xasprintf("The following are multiple choice questions (with answers) about %s.\n\n", subject);
	free(subject);
	return d;
}

/* "{{question.strip()}}\nA. {{choices[0]}}\nB. {{choices[1]}}\nC. {{choices[2]}}\nD. {{choices[3]}}\nAnswer:" */
static char *mmlu_text(const json_t *doc, int32_t k)
{
	const json_t *c = json_object_get(doc, "choices");
	char *q = py_strip(S(doc, "question"));
	char *t = xasprintf("%s\nA. %s\nB. %s\nC. %s\nD. %s\nAnswer:", q, json_string_value(json_array_get(c, 0)),
	                    json_string_value(json_array_get(c, 1)), json_string_value(json_array_get(c, 2)),
	                    json_string_value(json_array_get(c, 3)));
	free(q);
	return t;
}

static int32_t abcd_choices(const json_t *doc, char ***out)
{
	return letter_choices(out, 4);
}

static int32_t mmlu_gold(const json_t *doc)
{
	return (int32_t)json_integer_value(json_object_get(doc, "answer"));
}

/* ---- C-Eval (ceval/ceval-exam): id, question, A, B, C, D, answer (letter), explanation; optional subject ---- */

static const eval_field ceval_layout[] = {
	{"question", EVAL_FIELD_STRING, 0, 0, false},
	{"A", EVAL_FIELD_STRING, 0, 0, false},
	{"B", EVAL_FIELD_STRING, 0, 0, false},
	{"C", EVAL_FIELD_STRING, 0, 0, false},
	{"D", EVAL_FIELD_STRING, 0, 0, false},
	{"answer", EVAL_FIELD_STRING, 0, 0, false},
	{"id", EVAL_FIELD_ANY, 0, 0, true},
	{"explanation", EVAL_FIELD_STRING, 0, 0, true},
	{"subject", EVAL_FIELD_STRING, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

static int ceval_check(const json_t *doc, char *f, size_t fl, char *m, size_t ml)
{
	return letter_index(S(doc, "answer"), 4) >= 0 ? 0 : fail(f, fl, m, ml, "answer", "expected \"A\", \"B\", \"C\" or \"D\"");
}

/* The harness's per-subject task descriptions (lm_eval/tasks/ceval/_generate_configs.py SUBJECTS). */
static const char *const CEVAL_SUBJECTS[][2] = {
	{"computer_network", "计算机网络"}, {"operating_system", "操作系统"}, {"computer_architecture", "计算机组成"},
	{"college_programming", "大学编程"}, {"college_physics", "大学物理"}, {"college_chemistry", "大学化学"},
	{"advanced_mathematics", "高等数学"}, {"probability_and_statistics", "概率统计"},
	{"discrete_mathematics", "离散数学"}, {"electrical_engineer", "注册电气工程师"},
	{"metrology_engineer", "注册计量师"}, {"high_school_mathematics", "高中数学"},
	{"high_school_physics", "高中物理"}, {"high_school_chemistry", "高中化学"}, {"high_school_biology", "高中生物"},
	{"middle_school_mathematics", "初中数学"}, {"middle_school_biology", "初中生物"},
	{"middle_school_physics", "初中物理"}, {"middle_school_chemistry", "初中化学"},
	{"veterinary_medicine", "兽医学"}, {"college_economics", "大学经济学"},
	{"business_administration", "工商管理"}, {"marxism", "马克思主义基本原理"},
	{"mao_zedong_thought", "毛泽东思想和中国特色社会主义理论体系概论"}, {"education_science", "教育学"},
	{"teacher_qualification", "教师资格"}, {"high_school_politics", "高中政治"},
	{"high_school_geography", "高中地理"}, {"middle_school_politics", "初中政治"},
	{"middle_school_geography", "初中地理"}, {"modern_chinese_history", "近代史纲要"},
	{"ideological_and_moral_cultivation", "思想道德修养与法律基础"}, {"logic", "逻辑学"}, {"law", "法学"},
	{"chinese_language_and_literature", "中国语言文学"}, {"art_studies", "艺术学"},
	{"professional_tour_guide", "导游资格"}, {"legal_professional", "法律职业资格"},
	{"high_school_chinese", "高中语文"}, {"high_school_history", "高中历史"},
	{"middle_school_history", "初中历史"}, {"civil_servant", "公务员"}, {"sports_science", "体育学"},
	{"plant_protection", "植物保护"}, {"basic_medicine", "基础医学"}, {"clinical_medicine", "临床医学"},
	{"urban_and_rural_planner", "注册城乡规划师"}, {"accountant", "注册会计师"},
	{"fire_engineer", "注册消防工程师"}, {"environmental_impact_assessment_engineer", "环境影响评价工程师"},
	{"tax_accountant", "税务师"}, {"physician", "医师资格"},
};

/* HF rows carry no subject (it is the dataset config); a file that gives one ("computer_network", or the Chinese
 * name) gets the subject's description, as the harness's ceval-valid_<subject> task does. */
static char *ceval_description(const json_t *doc, int32_t k)
{
	const char *subject = json_string_value(json_object_get(doc, "subject"));
	if (!subject || !*subject)
		return NULL;
	const char *zh = subject;
	for (size_t i = 0; i < sizeof CEVAL_SUBJECTS / sizeof *CEVAL_SUBJECTS; i++)
		if (!strcmp(CEVAL_SUBJECTS[i][0], subject))
			zh = CEVAL_SUBJECTS[i][1];
	return xasprintf("以下是中国关于%s的单项选择题，请选出其中的正确答案。\n\n", zh);
}

/* "{{question.strip()}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\n答案：" */
static char *ceval_text(const json_t *doc, int32_t k)
{
	char *q = py_strip(S(doc, "question"));
	char *t = xasprintf("%s\nA. %s\nB. %s\nC. %s\nD. %s\n答案：", q, S(doc, "A"), S(doc, "B"), S(doc, "C"), S(doc, "D"));
	free(q);
	return t;
}

static int32_t ceval_gold(const json_t *doc)
{
	return letter_index(S(doc, "answer"), 4);   /* ['A', 'B', 'C', 'D'].index(answer) */
}

/* ---- ARC (allenai/ai2_arc): id, question, choices {text, label}, answerKey ---- */

static const eval_field arc_layout[] = {
	{"question", EVAL_FIELD_STRING, 0, 0, false},
	{"choices", EVAL_FIELD_OBJECT, 0, 0, false},
	{"choices.text", EVAL_FIELD_STRING_ARRAY, 1, 0, false},
	{"choices.label", EVAL_FIELD_STRING_ARRAY, 1, 0, false},
	{"answerKey", EVAL_FIELD_STRING, 0, 0, false},
	{"id", EVAL_FIELD_STRING, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

static int32_t arc_gold(const json_t *doc)
{
	const json_t *labels = eval_doc_get(doc, "choices.label");
	const char *key = S(doc, "answerKey");
	for (size_t i = 0; i < json_array_size(labels); i++)
		if (!strcmp(json_string_value(json_array_get(labels, i)), key))
			return (int32_t)i;   /* choices.label.index(answerKey) */
	return -1;
}

static int arc_check(const json_t *doc, char *f, size_t fl, char *m, size_t ml)
{
	if (json_array_size(eval_doc_get(doc, "choices.label")) != json_array_size(eval_doc_get(doc, "choices.text")))
		return fail(f, fl, m, ml, "choices.label", "expected as many labels as choices.text has texts");
	return arc_gold(doc) >= 0 ? 0 : fail(f, fl, m, ml, "answerKey", "not one of choices.label");
}

static char *arc_text(const json_t *doc, int32_t k)
{
	return xasprintf("Question: %s\nAnswer:", S(doc, "question"));   /* "Question: {{question}}\nAnswer:" */
}

static int32_t arc_choices(const json_t *doc, char ***out)
{
	return string_array(eval_doc_get(doc, "choices.text"), out);   /* "{{choices.text}}" */
}

/* ---- HellaSwag (rowanz/hellaswag; HF Rowan/hellaswag): activity_label, ctx_a, ctx_b, endings[4], label ---- */

static const eval_field hellaswag_layout[] = {
	{"activity_label", EVAL_FIELD_STRING, 0, 0, false},
	{"ctx_a", EVAL_FIELD_STRING, 0, 0, false},
	{"ctx_b", EVAL_FIELD_STRING, 0, 0, false},
	{"endings", EVAL_FIELD_STRING_ARRAY, 2, 0, false},
	{"label", EVAL_FIELD_INT_OR_DIGITS, 0, 0, false},
	{"ctx", EVAL_FIELD_STRING, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

static int64_t int_or_digits(const json_t *v)
{
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : strtoll(json_string_value(v), NULL, 10);
}

static int hellaswag_check(const json_t *doc, char *f, size_t fl, char *m, size_t ml)
{
	int64_t label = int_or_digits(json_object_get(doc, "label"));
	return label >= 0 && label < (int64_t)json_array_size(json_object_get(doc, "endings"))
	               ? 0
	               : fail(f, fl, m, ml, "label", "expected the index of one of the endings");
}

/* utils.preprocess: strip; " [title]" → ". "; re.sub("\\[.*?\\]", ""); "  " → " " */
static char *hellaswag_preprocess(const char *text)
{
	char err[128];
	char *a = py_strip(text);
	char *b = py_replace(a, " [title]", ". ");
	py_regex *re = py_regex_compile("\\[.*?\\]", err, sizeof err);
	char *c = py_regex_sub(re, b, "");
	py_regex_free(re);
	char *d = py_replace(c, "  ", " ");
	free(a);
	free(b);
	free(c);
	return d;
}

/* utils.process_docs: query = preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize()),
 * choices = [preprocess(e) for e in endings], gold = int(label) */
static void hellaswag_process(json_t *doc, py_random *rng, int32_t k)
{
	char *cap = py_capitalize(S(doc, "ctx_b"));
	char *raw = xasprintf("%s: %s %s", S(doc, "activity_label"), S(doc, "ctx_a"), cap);
	char *query = hellaswag_preprocess(raw);
	json_object_set_new(doc, "query", json_string(query));
	free(cap);
	free(raw);
	free(query);
	json_t *choices = json_array();
	const json_t *endings = json_object_get(doc, "endings");
	for (size_t i = 0; i < json_array_size(endings); i++) {
		char *e = hellaswag_preprocess(json_string_value(json_array_get(endings, i)));
		json_array_append_new(choices, json_string(e));
		free(e);
	}
	json_object_set_new(doc, "choices", choices);
	json_object_set_new(doc, "gold", json_integer(int_or_digits(json_object_get(doc, "label"))));
}

static char *hellaswag_text(const json_t *doc, int32_t k)
{
	return xstrdup(S(doc, "query"));   /* "{{query}}" */
}

static int32_t hellaswag_choices(const json_t *doc, char ***out)
{
	return string_array(json_object_get(doc, "choices"), out);
}

static int32_t hellaswag_gold(const json_t *doc)
{
	return (int32_t)json_integer_value(json_object_get(doc, "gold"));
}

/* ---- GPQA (Idavidrein/gpqa CSV columns): Question, Correct Answer, Incorrect Answer 1..3 ---- */

static const eval_field gpqa_layout[] = {
	{"Question", EVAL_FIELD_STRING, 0, 0, false},
	{"Correct Answer", EVAL_FIELD_STRING, 0, 0, false},
	{"Incorrect Answer 1", EVAL_FIELD_STRING_OR_NULL, 0, 0, false},
	{"Incorrect Answer 2", EVAL_FIELD_STRING_OR_NULL, 0, 0, false},
	{"Incorrect Answer 3", EVAL_FIELD_STRING_OR_NULL, 0, 0, false},
	{NULL, 0, 0, 0, false},
};

/* zeroshot/utils.py and n_shot/utils.py preprocess alike: None → " "; strip; " [title]" → ". "; "  " → " " */
static char *gpqa_preprocess(const json_t *v)
{
	if (!json_is_string(v))
		return xstrdup(" ");
	char *a = py_strip(json_string_value(v));
	char *b = py_replace(a, " [title]", ". ");
	char *c = py_replace(b, "  ", " ");
	free(a);
	free(b);
	return c;
}

/* process_docs: choices = [inc1, inc2, inc3, correct] preprocessed, random.shuffle(choices) (zeroshot: the module's
 * generator seeded 0; n_shot: random.Random(42)), answer = "(" + "ABCD"[choices.index(correct)] + ")" */
static void gpqa_process(json_t *doc, py_random *rng, int32_t k)
{
	char *c[4] = {gpqa_preprocess(json_object_get(doc, "Incorrect Answer 1")),
	              gpqa_preprocess(json_object_get(doc, "Incorrect Answer 2")),
	              gpqa_preprocess(json_object_get(doc, "Incorrect Answer 3")),
	              gpqa_preprocess(json_object_get(doc, "Correct Answer"))};
	int32_t perm[4] = {0, 1, 2, 3};
	py_random_shuffle(rng, perm, 4);
	int32_t answer = 0;
	for (int32_t i = 3; i >= 0; i--)
		if (!strcmp(c[perm[i]], c[3]))
			answer = i;   /* the first equal string, as list.index */
	for (int32_t i = 0; i < 4; i++) {
		char key[16];
		snprintf(key, sizeof key, "choice%d", i + 1);
		json_object_set_new(doc, key, json_string(c[perm[i]]));
	}
	char ans[8];
	snprintf(ans, sizeof ans, "(%c)", 'A' + answer);
	json_object_set_new(doc, "answer", json_string(ans));
	for (int32_t i = 0; i < 4; i++)
		free(c[i]);
}

/* zeroshot has none; n_shot: "Here are some example questions from experts. Answer the final question yourself,
 * following the format of the previous questions exactly.\n" */
static char *gpqa_description(const json_t *doc, int32_t k)
{
	return k == 0 ? NULL
	              : xstrdup("Here are some example questions from experts. Answer the final question yourself, "
	                        "following the format of the previous questions exactly.\n");
}

/* zeroshot: "What is the correct answer to this question:{{Question}}\nChoices:\n(A) {{choice1}}\n…\nAnswer:"
 * n_shot:   "Question: {{Question}}\nChoices:\n(A) {{choice1}}\n…\nAnswer:" */
static char *gpqa_text(const json_t *doc, int32_t k)
{
	return xasprintf("%s%s\nChoices:\n(A) %s\n(B) %s\n(C) %s\n(D) %s\nAnswer:",
	                 k == 0 ? "What is the correct answer to this question:" : "Question: ", S(doc, "Question"),
	                 S(doc, "choice1"), S(doc, "choice2"), S(doc, "choice3"), S(doc, "choice4"));
}

static int32_t gpqa_choices(const json_t *doc, char ***out)
{
	*out = xmalloc(4 * sizeof **out);
	for (int32_t i = 0; i < 4; i++)
		(*out)[i] = xasprintf("(%c)", 'A' + i);
	return 4;
}

static int32_t gpqa_gold(const json_t *doc)
{
	const char *a = S(doc, "answer");
	return strlen(a) == 3 ? a[1] - 'A' : -1;
}

static char *gpqa_fewshot_target(const json_t *doc)
{
	return xstrdup(S(doc, "answer"));   /* doc_to_target: answer, a string: used as it is */
}

/* ---- MMLU-Pro (TIGER-Lab/MMLU-Pro): question, options[], answer, answer_index, cot_content, category ---- */

static const eval_field mmlu_pro_layout[] = {
	{"question", EVAL_FIELD_STRING, 0, 0, false},
	{"options", EVAL_FIELD_STRING_ARRAY, 1, 0, false},
	{"answer", EVAL_FIELD_STRING, 0, 0, false},
	{"cot_content", EVAL_FIELD_STRING_OR_NULL, 0, 0, false},
	{"category", EVAL_FIELD_STRING, 0, 0, false},
	{"answer_index", EVAL_FIELD_INT, 0, 0, true},
	{"question_id", EVAL_FIELD_ANY, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

static int mmlu_pro_check(const json_t *doc, char *f, size_t fl, char *m, size_t ml)
{
	int32_t n = (int32_t)json_array_size(json_object_get(doc, "options"));
	return letter_index(S(doc, "answer"), n < 10 ? n : 10) >= 0
	               ? 0
	               : fail(f, fl, m, ml, "answer", "expected the letter (A-J) of one of the options");
}

static char *mmlu_pro_description(const json_t *doc, int32_t k)
{
	return xasprintf("The following are multiple choice questions (with answers) about %s. Think step by step and "
	                 "then finish your answer with \"the answer is (X)\" where X is the correct letter choice.\n",
	                 S(doc, "category"));
}

/* utils.format_cot_example(example, including_answer=False): "Question:\n" + question + "\nOptions:\n" +
 * "{letter}. {opt.strip()}\n" for the first 10 options + "Answer: Let's think step by step." */
static char *mmlu_pro_text(const json_t *doc, int32_t k)
{
	strbuf b = {0};
	sb_addf(&b, "Question:\n%s\nOptions:\n", S(doc, "question"));
	const json_t *opts = json_object_get(doc, "options");
	for (size_t i = 0; i < json_array_size(opts) && i < 10; i++) {
		char *o = py_strip(json_string_value(json_array_get(opts, i)));
		sb_addf(&b, "%s. %s\n", LETTERS[i], o);
		free(o);
	}
	sb_adds(&b, "Answer: Let's think step by step.");
	return sb_take(&b);
}

/* utils.format_cot_target: cot_content.replace("A: Let's think step by step. ", "") */
static char *mmlu_pro_fewshot_target(const json_t *doc)
{
	return py_replace(S(doc, "cot_content"), "A: Let's think step by step. ", "");
}

static json_t *answer_target(const json_t *doc)
{
	return json_string(S(doc, "answer"));   /* doc_to_target: answer */
}

/* ---- GSM8K (openai/gsm8k): question, answer ("… #### N") ---- */

static const eval_field gsm8k_layout[] = {
	{"question", EVAL_FIELD_STRING, 0, 0, false},
	{"answer", EVAL_FIELD_STRING, 0, 0, false},
	{NULL, 0, 0, 0, false},
};

static char *question_answer_text(const json_t *doc, int32_t k)
{
	return xasprintf("Question: %s\nAnswer:", S(doc, "question"));   /* "Question: {{question}}\nAnswer:" */
}

static char *answer_fewshot_target(const json_t *doc)
{
	return xstrdup(S(doc, "answer"));   /* "{{answer}}" */
}

/* ---- TriviaQA (mandarjoshi/trivia_qa rc.nocontext): question, answer {aliases[], value, …} ---- */

static const eval_field triviaqa_layout[] = {
	{"question", EVAL_FIELD_STRING, 0, 0, false},
	{"answer", EVAL_FIELD_OBJECT, 0, 0, false},
	{"answer.aliases", EVAL_FIELD_STRING_ARRAY, 1, 0, false},
	{"question_id", EVAL_FIELD_STRING, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

static char *triviaqa_text(const json_t *doc, int32_t k)
{
	return xasprintf("Question: %s?\nAnswer:", S(doc, "question"));   /* "Question: {{question}}?\nAnswer:" */
}

static char *triviaqa_fewshot_target(const json_t *doc)
{
	return xstrdup(json_string_value(json_array_get(eval_doc_get(doc, "answer.aliases"), 0)));   /* str(target[0]) */
}

static json_t *triviaqa_target(const json_t *doc)
{
	return json_deep_copy(eval_doc_get(doc, "answer.aliases"));   /* "{{answer.aliases}}" */
}

/* ---- HumanEval (openai/openai_humaneval): task_id, prompt, entry_point, canonical_solution, test ---- */

static const eval_field humaneval_layout[] = {
	{"task_id", EVAL_FIELD_STRING, 0, 0, false},
	{"prompt", EVAL_FIELD_STRING, 0, 0, false},
	{"entry_point", EVAL_FIELD_STRING, 0, 0, false},
	{"test", EVAL_FIELD_STRING, 0, 0, false},
	{"canonical_solution", EVAL_FIELD_STRING, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

static char *humaneval_text(const json_t *doc, int32_t k)
{
	return xstrdup(S(doc, "prompt"));   /* "{{prompt}}" */
}

static json_t *humaneval_target(const json_t *doc)
{
	char *t = xasprintf("%s\ncheck(%s)", S(doc, "test"), S(doc, "entry_point"));   /* "{{test}}\ncheck({{entry_point}})" */
	json_t *j = json_string(t);
	free(t);
	return j;
}

/* build_predictions: prompt + completion; code_eval runs candidate + "\n" + reference */
static char *humaneval_program(const json_t *doc, const char *completion)
{
	return xasprintf("%s%s\n%s\ncheck(%s)", S(doc, "prompt"), completion, S(doc, "test"), S(doc, "entry_point"));
}

/* ---- MBPP (google-research mbpp, HF config full): text, code, task_id, test_list[3] ---- */

static const eval_field mbpp_layout[] = {
	{"text", EVAL_FIELD_STRING, 0, 0, false},
	{"code", EVAL_FIELD_STRING, 0, 0, false},
	{"task_id", EVAL_FIELD_INT, 0, 0, false},
	{"test_list", EVAL_FIELD_STRING_ARRAY, 3, 0, false},
	{"test_setup_code", EVAL_FIELD_STRING, 0, 0, true},
	{NULL, 0, 0, 0, false},
};

#define TESTS(doc, i) json_string_value(json_array_get(json_object_get(doc, "test_list"), i))

/* "You are an expert Python programmer, and here is your task: {{text}} Your code should pass these tests:\n\n
 *  {{test_list[0]}}\n{{test_list[1]}}\n{{test_list[2]}}\n[BEGIN]\n" */
static char *mbpp_text(const json_t *doc, int32_t k)
{
	return xasprintf("You are an expert Python programmer, and here is your task: %s Your code should pass these "
	                 "tests:\n\n%s\n%s\n%s\n[BEGIN]\n",
	                 S(doc, "text"), TESTS(doc, 0), TESTS(doc, 1), TESTS(doc, 2));
}

static char *mbpp_fewshot_target(const json_t *doc)
{
	return xasprintf("%s\n[DONE]", S(doc, "code"));   /* is_fewshot: "{{code}}\n[DONE]" */
}

static json_t *mbpp_target(const json_t *doc)
{
	char *t = xasprintf("%s\n%s\n%s", TESTS(doc, 0), TESTS(doc, 1), TESTS(doc, 2));
	json_t *j = json_string(t);
	free(t);
	return j;
}

static char *mbpp_program(const json_t *doc, const char *completion)
{
	return xasprintf("%s\n%s\n%s\n%s", completion, TESTS(doc, 0), TESTS(doc, 1), TESTS(doc, 2));
}

/* ---- Perplexity: {"text": …} per document (or a plain text file, one document) ---- */

static const eval_field perplexity_layout[] = {
	{"text", EVAL_FIELD_STRING, 0, 0, false},
	{NULL, 0, 0, 0, false},
};

static char *perplexity_text(const json_t *doc, int32_t k)
{
	return xstrdup(S(doc, "text"));
}

/* ---- the table ---- */

#define MC_DEFAULTS .output = EVAL_MULTIPLE_CHOICE, .scorer = EVAL_SCORE_MC, .target_delimiter = " ", .metric = "acc"

const eval_task eval_tasks[] = {
	{
		.name = "mmlu", .title = "MMLU", .version = "2", .group = EVAL_GROUP_LANGUAGE, MC_DEFAULTS,
		.layout = mmlu_layout, .check = mmlu_check, .description = mmlu_description, .doc_to_text = mmlu_text,
		.doc_to_choices = abcd_choices, .doc_to_gold = mmlu_gold, .num_fewshot = 0,
		.sampler = EVAL_SAMPLER_FIRST_N, .fewshot_key = "subject", .fewshot_split = "dev",
		.fewshot_split_rows = 285, .primary = "acc,none",
	},
	{
		.name = "mmlu_pro", .title = "MMLU-Pro", .version = "3.1", .group = EVAL_GROUP_LANGUAGE,
		.output = EVAL_GENERATE_UNTIL, .layout = mmlu_pro_layout, .check = mmlu_pro_check,
		.description = mmlu_pro_description, .doc_to_text = mmlu_pro_text, .fewshot_target = mmlu_pro_fewshot_target,
		.doc_to_target = answer_target, .target_delimiter = " ", .num_fewshot = 5,
		.sampler = EVAL_SAMPLER_FIRST_N, .fewshot_key = "category", .fewshot_split = "validation",
		.fewshot_split_rows = 70, .until = {"Question:"}, .max_gen_toks = 2048,
		.scorer = EVAL_SCORE_EXACT_MATCH, .filters = {{"custom-extract", "answer is \\(?([ABCDEFGHIJ])\\)?", 0, false}},
		.n_filters = 1, .match = {true, true, {NULL}}, .metric = "exact_match", .primary = "exact_match,custom-extract",
	},
	{
		.name = "gpqa_diamond", .title = "GPQA-Diamond", .version = "2.2", .group = EVAL_GROUP_LANGUAGE, MC_DEFAULTS,
		.layout = gpqa_layout, .process = gpqa_process, .process_seed = {0, 42}, .description = gpqa_description,
		.doc_to_text = gpqa_text, .fewshot_target = gpqa_fewshot_target, .doc_to_choices = gpqa_choices,
		.doc_to_gold = gpqa_gold, .num_fewshot = 0, .sampler = EVAL_SAMPLER_RANDOM, .fewshot_same_split = true,
		.fewshot_split = "Diamond (train, the split evaluated)", .fewshot_split_rows = 198,
		.fewshot_full_split = true, .acc_norm = true, .primary = "acc,none",
	},
	{
		.name = "arc_challenge", .title = "ARC-Challenge", .version = "1.0", .group = EVAL_GROUP_LANGUAGE, MC_DEFAULTS,
		.layout = arc_layout, .check = arc_check, .doc_to_text = arc_text, .doc_to_choices = arc_choices,
		.doc_to_gold = arc_gold, .num_fewshot = 0, .sampler = EVAL_SAMPLER_RANDOM, .fewshot_split = "train",
		.fewshot_split_rows = 1119, .acc_norm = true, .primary = "acc_norm,none",
	},
	{
		.name = "hellaswag", .title = "HellaSwag", .version = "1.0", .group = EVAL_GROUP_LANGUAGE, MC_DEFAULTS,
		.layout = hellaswag_layout, .check = hellaswag_check, .process = hellaswag_process,
		.doc_to_text = hellaswag_text, .doc_to_choices = hellaswag_choices, .doc_to_gold = hellaswag_gold,
		.num_fewshot = 0, .sampler = EVAL_SAMPLER_RANDOM, .fewshot_same_split = true, .fewshot_split = "train",
		.fewshot_split_rows = 39905, .acc_norm = true, .primary = "acc_norm,none",
	},
	{
		.name = "triviaqa", .title = "TriviaQA", .version = "3.0", .group = EVAL_GROUP_LANGUAGE,
		.output = EVAL_GENERATE_UNTIL, .layout = triviaqa_layout, .doc_to_text = triviaqa_text,
		.fewshot_target = triviaqa_fewshot_target, .doc_to_target = triviaqa_target, .target_delimiter = " ",
		.num_fewshot = 0, .sampler = EVAL_SAMPLER_RANDOM, .fewshot_same_split = true,
		.fewshot_split = "rc.nocontext train", .fewshot_split_rows = 138384, .until = {"\n", ".", ","},
		.max_gen_toks = 256, .scorer = EVAL_SCORE_EXACT_MATCH, .filters = {{"remove_whitespace", NULL, 0, true}},
		.n_filters = 1, .match = {true, true, {NULL}}, .metric = "exact_match",
		.primary = "exact_match,remove_whitespace",
	},
	{
		.name = "ceval", .title = "C-Eval", .version = "2.0", .group = EVAL_GROUP_LANGUAGE, MC_DEFAULTS,
		.layout = ceval_layout, .check = ceval_check, .description = ceval_description, .doc_to_text = ceval_text,
		.doc_to_choices = abcd_choices, .doc_to_gold = ceval_gold, .num_fewshot = 0,
		.sampler = EVAL_SAMPLER_FIRST_N, .fewshot_key = "subject", .acc_norm = true, .primary = "acc,none",
	},
	{
		.name = "gsm8k", .title = "GSM8K", .version = "3.0", .group = EVAL_GROUP_MATH_CODE,
		.output = EVAL_GENERATE_UNTIL, .layout = gsm8k_layout, .doc_to_text = question_answer_text,
		.fewshot_target = answer_fewshot_target, .doc_to_target = answer_target, .target_delimiter = " ",
		.num_fewshot = 5, .sampler = EVAL_SAMPLER_RANDOM, .fewshot_split = "train", .fewshot_split_rows = 7473,
		.until = {"Question:", "</s>", "<|im_end|>"},
		.max_gen_toks = 256, .scorer = EVAL_SCORE_EXACT_MATCH,
		.filters = {{"strict-match", "#### (\\-?[0-9\\.\\,]+)", 0, false},
		            {"flexible-extract", "(-?[$0-9.,]{2,})|(-?[0-9]+)", -1, false}},
		.n_filters = 2, .match = {true, false, {",", "\\$", "(?s).*#### ", "\\.$", NULL}}, .metric = "exact_match",
		.primary = "exact_match,strict-match",
	},
	{
		.name = "humaneval", .title = "HumanEval", .version = "1.0", .group = EVAL_GROUP_MATH_CODE,
		.output = EVAL_GENERATE_UNTIL, .layout = humaneval_layout, .doc_to_text = humaneval_text,
		.doc_to_target = humaneval_target, .target_delimiter = " ", .num_fewshot = 0,
		.sampler = EVAL_SAMPLER_RANDOM, .until = {"\nclass", "\ndef", "\n#", "\nif", "\nprint"},
		.max_gen_toks = 1024, .scorer = EVAL_SCORE_PASS_AT_1, .filters = {{"create_test", NULL, 0, false}},
		.n_filters = 1, .metric = "pass@1", .primary = "pass@1,create_test", .program = humaneval_program,
	},
	{
		.name = "mbpp", .title = "MBPP", .version = "1.0", .group = EVAL_GROUP_MATH_CODE,
		.output = EVAL_GENERATE_UNTIL, .layout = mbpp_layout, .doc_to_text = mbpp_text,
		.fewshot_target = mbpp_fewshot_target, .doc_to_target = mbpp_target, .target_delimiter = "",
		.num_fewshot = 3, .sampler = EVAL_SAMPLER_FIXED, .fixed_field = "task_id", .fixed_ids = {2, 3, 4},
		.n_fixed = 3, .until = {"[DONE]"}, .max_gen_toks = 256, .scorer = EVAL_SCORE_PASS_AT_1,
		.filters = {{"none", NULL, 0, false}}, .n_filters = 1, .metric = "pass_at_1", .primary = "pass_at_1,none",
		.program = mbpp_program,
	},
	{
		.name = "perplexity", .title = "Perplexity", .version = "1.0", .group = EVAL_GROUP_PERPLEXITY,
		.output = EVAL_LOGLIKELIHOOD_ROLLING, .layout = perplexity_layout, .doc_to_text = perplexity_text,
		.target_delimiter = " ", .scorer = EVAL_SCORE_PERPLEXITY, .metric = "word_perplexity",
		.primary = "bits_per_byte,none",
	},
};

const int32_t eval_n_tasks = (int32_t)(sizeof eval_tasks / sizeof *eval_tasks);

const eval_task *eval_task_find(const char *name)
{
	for (int32_t i = 0; i < eval_n_tasks; i++)
		if (!strcmp(eval_tasks[i].name, name))
			return &eval_tasks[i];
	return NULL;
}
