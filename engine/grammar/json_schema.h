/* engine/grammar/json_schema.h — a JSON Schema written as a GBNF grammar (engine/grammar/grammar.h) whose language
 * is exactly the JSON texts that validate. The subset: OpenAI's strict mode and what llama.cpp's converter accepts;
 * every other keyword is refused with an error naming it and where it is, never ignored (docs/structured-output.md
 * lists both). */
#ifndef AAH_ENGINE_GRAMMAR_JSON_SCHEMA_H
#define AAH_ENGINE_GRAMMAR_JSON_SCHEMA_H

#include <stddef.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The GBNF grammar (root rule `root`) of the schema: malloc'd, NUL-terminated. NULL with a message in err when the
 * schema uses a keyword or value it does not enforce (the message names the keyword and its JSON pointer, e.g.
 * "JSON Schema keyword 'patternProperties' at /properties/tags is not supported"), is itself invalid, or the
 * grammar would be too large. */
char *json_schema_to_gbnf(const json_t *schema, char *err, size_t err_len);
/* The grammar of any JSON object (OpenAI's response_format json_object): a NUL-terminated constant. */
const char *json_object_gbnf(void);

#ifdef __cplusplus
}
#endif
#endif
