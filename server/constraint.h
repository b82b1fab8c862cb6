/* server/constraint.h — a request's output constraint, from whichever surface the client used: OpenAI's
 * response_format (json_object, json_schema), vLLM's structured_outputs {json, regex, choice, grammar, json_object}
 * and its older guided_json / guided_regex / guided_choice / guided_grammar, llama-server's grammar and json_schema.
 * Each becomes GBNF text (engine/grammar/: JSON Schema, regex and choice converters), which the handler compiles
 * against the model's vocabulary through the grammar cache. No tokenizer here: fuzzed with the request parsers. */
#ifndef AAH_SERVER_CONSTRAINT_H
#define AAH_SERVER_CONSTRAINT_H

#include <jansson.h>
#include <stddef.h>

typedef struct constraint {
	char *gbnf;                /* malloc'd GBNF text; NULL: the output is free */
	size_t gbnf_len;
	const char *field;         /* the request field it came from: the `param` of a 400 about it */
	const char *kind;          /* "json_schema", "json_object", "regex", "choice" or "grammar" (metrics) */
} constraint;

/* Reads the constraint fields of a request body. Returns 0 (out->gbnf NULL when there is none), or -1 with a
 * message in err and the field in *param: a malformed value, two constraints at once, a schema keyword or regex
 * construct that is not enforced. Free with constraint_free (also after a failure). */
int constraint_parse(const json_t *body, constraint *out, char *err, size_t err_len, const char **param);
void constraint_free(constraint *c);

#endif
