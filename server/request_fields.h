/* server/request_fields.h — every field a client may send to /v1/completions and /v1/chat/completions, and what the
 * server does with it: implemented (the endpoint's parser reads it), accepted as a documented no-op, or refused with a
 * 400 that names it. An unknown field is a 400 too, as OpenAI's own API answers: a request is never answered 200
 * having ignored part of it. docs/http.md has the same table. */
#ifndef AAH_SERVER_REQUEST_FIELDS_H
#define AAH_SERVER_REQUEST_FIELDS_H

#include <jansson.h>
#include <stddef.h>

#define REQUEST_COMPLETIONS 1u
#define REQUEST_CHAT 2u

typedef enum request_field_state {
	REQUEST_FIELD_IMPLEMENTED,   /* read and honoured by the endpoint's parser */
	REQUEST_FIELD_NOOP,          /* accepted and without effect here, documented (e.g. `user`) */
	REQUEST_FIELD_REFUSED,       /* a 400 naming it, unless its value is the one that changes nothing */
} request_field_state;

typedef struct request_field {
	const char *name;
	unsigned endpoints;          /* REQUEST_COMPLETIONS | REQUEST_CHAT */
	request_field_state state;
	const char *why;             /* refused: why, in the error message; no-op: what it would do elsewhere */
} request_field;

/* The table, for docs and tests: n entries. */
const request_field *request_fields(size_t *n);

/* Checks every field of body (an object) for endpoint (REQUEST_COMPLETIONS or REQUEST_CHAT): unknown names and refused
 * fields with a value that would change the output are refused. Returns 0, or -1 with a message in err and the field
 * in *param (pointing into body or the table). */
int request_fields_check(const json_t *body, unsigned endpoint, char *err, size_t err_len, const char **param);

#endif
