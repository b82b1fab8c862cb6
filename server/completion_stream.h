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

#endif
