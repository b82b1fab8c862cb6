/* server/tool_calls.h — a chat completion's generated text turned into OpenAI tool calls, as it streams: content that
 * is safe to show, each call's id and name once known, its arguments piece by piece, and at the end the whole list.
 * Pure (no server state): fed text, it appends events; the final result is the same however the text was split.
 *
 * Formats (the model family writes them; vLLM's parsers of the same names decide the same way):
 *   hermes       Qwen3, Qwen2.5, Hermes: `<tool_call>\n{"name": "f", "arguments": {…}}\n</tool_call>`, any number,
 *                text before, between and after them is content.
 *   llama3_json  Llama 3.1/3.2/3.3: `{"name": "f", "parameters": {…}}` (or "arguments"), optionally after
 *                `<|python_tag|>`, several separated by `;`. The message holds calls only when it starts (after
 *                whitespace) with `{` or `<|python_tag|>`; otherwise all of it is content. An object without a
 *                string "name" makes the message content, as vLLM's parser does.
 *   mistral      `[TOOL_CALLS]` then a JSON array `[{"name": "f", "arguments": {…}}, …]` (Mistral 7B v0.3, Nemo,
 *                Small 3), a single object, or the v11+ form `[TOOL_CALLS]f{…}` / `[TOOL_CALLS]f[ARGS]{…}`
 *                (`[CALL_ID]id` before `[ARGS]` is skipped), one `[TOOL_CALLS]` per call. Names of that form are
 *                [A-Za-z0-9_.-]. Text before `[TOOL_CALLS]` is content.
 * In every format a call object may hold its keys in any order; "parameters" is read as "arguments"; other keys
 * (Mistral's "id") are skipped; a call without arguments gets "{}".
 *
 * Choices (docs: this header is the reference):
 *   arguments  the bytes the model wrote for the value, not re-serialised, so a stream's fragments are final
 *              the moment they are sent and concatenate to the final string byte for byte. Invalid JSON stays as
 *              written (OpenAI's behaviour in auto mode) with arguments_valid false, for the server to count.
 *   markers    `<tool_call>` and the like are held back at a chunk's end until decided; inside a JSON string they
 *              are text. Text that starts like a call but turns out not to be one before its name is known (no
 *              `{`, no string "name") is released as content, as vLLM returns an unparsable call as content.
 *   cut short  (max_tokens, a stop string, EOS inside a call) a call whose name was known has been streamed
 *              already and stays in the list with complete false (arguments_valid false unless what was written
 *              parses); one whose name was not known yet is content. vLLM's streaming path keeps the partial
 *              call too; its non-streaming path turns the whole message into content, which would make the two
 *              answers differ, so here they are one.
 *   whitespace right before a call (Qwen writes "text\n<tool_call>"), after the last call, and between calls is
 *              not content; between text before a call and text after it, it is ("A\n<tool_call>…</tool_call>\nB"
 *              gives "A\nB"). A message without calls keeps all its whitespace.
 *   ids        "call_" + 24 letters and digits (OpenAI's shape); Mistral's templates want 9 letters and digits. Drawn
 *              from the seed given to tool_parser_new, so tests are reproducible.
 * A name is not checked against the request's tools here: the server may. */
#ifndef AAH_SERVER_TOOL_CALLS_H
#define AAH_SERVER_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tool_format {
	TOOL_FORMAT_NONE = 0,
	TOOL_FORMAT_HERMES,
	TOOL_FORMAT_LLAMA3_JSON,
	TOOL_FORMAT_MISTRAL,
} tool_format;

/* The parser a chat template's source calls for: `[TOOL_CALLS]` → mistral, `<tool_call>` → hermes,
 * `<|python_tag|>` or Llama 3's ipython role → llama3_json; TOOL_FORMAT_NONE otherwise (or NULL). */
tool_format tool_format_from_template(const char *template_text);
/* "hermes", "llama3_json", "mistral" (a --tool-call-parser value); TOOL_FORMAT_NONE for any other or NULL. */
tool_format tool_format_from_name(const char *name);
const char *tool_format_name(tool_format fmt);   /* the inverse; "none" */

typedef enum tool_event_kind {
	TOOL_EVENT_CONTENT,      /* text: more content */
	TOOL_EVENT_CALL_BEGIN,   /* index, id, text: the function's name */
	TOOL_EVENT_ARGUMENTS,    /* index, text: the next bytes of that call's arguments */
} tool_event_kind;

typedef struct tool_event {
	tool_event_kind kind;
	int32_t index;    /* the call's place in the list, from 0 (CALL_BEGIN, ARGUMENTS) */
	char *text;       /* NUL-terminated, owned by the tool_events */
	size_t len;       /* its bytes (len counts a NUL byte of the text inside) */
	char id[40];      /* CALL_BEGIN */
} tool_event;

/* What one push or finish produced, in order; consecutive content, or arguments of one call, come merged. The
 * caller owns it: tool_events_init once, tool_events_clear between pushes (frees the texts, keeps the array),
 * tool_events_free at the end. */
typedef struct tool_events {
	tool_event *ev;
	int32_t n, cap;
} tool_events;

void tool_events_init(tool_events *out);
void tool_events_clear(tool_events *out);
void tool_events_free(tool_events *out);

typedef struct tool_call {
	char id[40];
	char *name;             /* NUL-terminated */
	char *arguments;        /* JSON text as the model wrote it ("{}" when it gave none), NUL-terminated */
	size_t arguments_len;   /* its bytes (the model may have written a NUL byte inside) */
	bool arguments_valid;   /* arguments parse as one JSON object */
	bool complete;          /* the call's text ended as its format says (false: cut short or malformed) */
} tool_call;

typedef struct tool_parser tool_parser;

/* A parser for one message of one choice; seed draws the call ids. NULL when out of memory or fmt is NONE. Freed
 * by tool_parser_free. */
tool_parser *tool_parser_new(tool_format fmt, uint64_t seed);
void tool_parser_free(tool_parser *p);
/* Feeds the next n bytes of generated text (any split, even inside a UTF-8 character or a marker), appending to
 * out what they decide. Returns 0, or -1 when out of memory (the parser is then unusable). */
int tool_parser_push(tool_parser *p, const char *text, size_t n, tool_events *out);
/* The text has ended: flushes what was held back and closes a call cut short (see "cut short" above). Returns 0
 * or -1 as tool_parser_push; push after finish is an error (-1). */
int tool_parser_finish(tool_parser *p, tool_events *out);

/* The result after tool_parser_finish (before it: what has been decided so far). Pointers are the parser's, valid
 * until tool_parser_free. */
const char *tool_parser_content(const tool_parser *p, size_t *len);   /* the content around the calls */
int32_t tool_parser_n_calls(const tool_parser *p);
const tool_call *tool_parser_call(const tool_parser *p, int32_t i);

/* A GBNF grammar (engine/grammar/grammar.h) whose language is exactly the tool calls of fmt, nothing before them:
 * one call, or one or more when parallel, each to a function of tools (an OpenAI tools array: {"type": "function",
 * "function": {"name", "parameters"}}) or only to only_name when it is not NULL (tool_choice naming a function),
 * with arguments that match that function's "parameters" schema (engine/grammar/json_schema.h; absent: any JSON
 * object). The spelling is the one each family writes: hermes `<tool_call>\n{"name": "f", "arguments": A}\n
 * </tool_call>` joined by "\n"; llama3_json `{"name": "f", "parameters": A}` joined by "; "; mistral
 * `[TOOL_CALLS][{"name": "f", "arguments": A}, …]`. Returns malloc'd NUL-terminated text (the caller frees it), or
 * NULL with a message in err (a schema the converter refuses, names the function; no such function; no tools). */
char *tool_calls_gbnf(tool_format fmt, const json_t *tools, const char *only_name, bool parallel, char *err,
                      size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
