/* server/completion_stream.h — the `stream: true` shape of /v1/completions: Server-Sent Events, one
 * `data: {…}` chunk per piece of safe text of a choice, a last chunk per choice with its finish_reason and aah
 * object, an optional usage chunk, then `data: [DONE]`. */
#ifndef AAH_SERVER_COMPLETION_STREAM_H
#define AAH_SERVER_COMPLETION_STREAM_H

#include "server/completion_job.h"
#include "server/http.h"

/* Queues the streaming response; the stream owns j from now on (released when the request completes, and
 * cancelled first when the client went away). */
enum MHD_Result completion_stream_start(http_request *req, cmpl_job *j);

/* What the events of a stream look like, for an endpoint of another shape (chat's chat.completion.chunk deltas);
 * the waiting, the safe-text rule and the order of events stay the stream's. Each function returns a whole event
 * object, NULL when out of memory (the stream then ends with an error). */
typedef struct cmpl_stream_shape {
	/* optional: choice c's first event, before any of its text (chat: the role; it also starts c's split) */
	json_t *(*head)(const cmpl_job *j, cmpl_choice *c);
	/* c's text [text, text + len) (a range of c->text.text, starting at c->sent) with the log-probabilities of its generated tokens [from, to); finish is NULL
	 * except in c's last event, where it is the finish_reason. A piece that has nothing to show yet (chat: a tag's
	 * first bytes, held until decided) sets *held and returns NULL: its text counts as sent, and its tokens'
	 * log-probabilities go with the next event. The last event is never held. */
	json_t *(*piece)(const cmpl_job *j, cmpl_choice *c, const char *text, size_t len, int32_t from, int32_t to,
	                 const char *finish, bool *held);
	/* the event of stream_options.include_usage, after every choice's last */
	json_t *(*usage)(const cmpl_job *j);
} cmpl_stream_shape;

/* completion_stream_start with the events of shape (which must outlive the stream: a static table). */
enum MHD_Result completion_stream_start_shaped(http_request *req, cmpl_job *j, const cmpl_stream_shape *shape);

#endif
