// Package client is the Go client of warmpool's gateway API: route a session to a
// pod (Route), keep it alive (Touch), read it (Get), end it (End), and hold a pod for
// an API caller (Acquire, TouchHold, Release).
//
//	c, err := client.New("http://warmpool.agents.svc", client.WithToken(token))
//	b, err := c.Route(ctx, "my-agent", sessionID)
//	// proxy the user's stream to b.PodSSEURL
//
// # Errors
//
// A call the server refused returns an *Error with the answer's status, the code and
// message of its error envelope, the Retry-After it asked for and its X-Request-Id.
// Each Code is also an error, so errors.Is(err, client.CodeQueueFull) tells one
// code, and CodeOf(err) gives the code to switch on. Any other failure (a transport
// error as net/http returns it, a cancelled context, an answer that is not JSON) is
// an error of its own, whose CodeOf is "".
//
// The codes are the package's own, not the root package's warmpool.Code: the client
// links the standard library alone, so that a gateway pulls in nothing of the server,
// and it knows the codes a server answers beyond the domain's (NOT_FOUND and
// METHOD_NOT_ALLOWED of unknown routes, QUOTA_EXCEEDED of tenants). A test holds the
// list to the codes of the server's OpenAPI document.
//
// # Retries
//
// A call is repeated only when repeating it is safe and may succeed: after an answer
// of NO_POD_AVAILABLE, QUEUE_FULL or STORE_UNAVAILABLE (503) or QUOTA_EXCEEDED (429),
// and after a transport error before any answer (refused connection, reset, timeout).
// No other answer is repeated: a 4xx stays what it is, and DEPLOY_FAILED and
// WAIT_TIMEOUT already took their time on the server. Before attempt n+1 the client
// waits the larger of the server's Retry-After and the backoff base·2^(n-1) (capped at
// the backoff max), plus up to a quarter more at random, so that gateways refused
// together do not all come back at the same instant. It gives up, returning the last
// error, after WithMaxAttempts attempts, or at once when the next wait would end past
// the context's deadline or past the call's WithRetryBudget (counted from its start).
//
// Every mutating call (Route, Acquire, Touch, End, TouchHold, Release) carries an
// Idempotency-Key, made once per call and sent again on each of its retries, or the
// caller's own (WithIdempotencyKey): a repeated route or acquire gets the answer of
// the first one that succeeded instead of taking a second slot (the server keeps no
// refusal, so a retry after one runs again). Touch, End, TouchHold
// and Release change the same state however often they run, so a retry of one whose
// first answer was lost only answers differently: End false, Release HOLD_NOT_FOUND,
// as the first attempt did the work.
//
// Answers are read up to 1 MiB; a larger one is an error. Every call takes its
// context's deadline as the bound of the whole call, retries and waits included.
package client
