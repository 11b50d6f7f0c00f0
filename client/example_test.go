package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/warmpool/warmpool/client"
)

// A gateway routes each user session to its pod and answers the user with what the
// server said when it could not.
func Example() {
	c, err := client.New("http://warmpool.agents.svc", client.WithToken(os.Getenv("WARMPOOL_AUTH_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/agent/{session}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		b, err := c.Route(ctx, "my-agent", r.PathValue("session"))
		if err == nil {
			http.Redirect(w, r, b.PodSSEURL, http.StatusTemporaryRedirect) // or proxy the stream
			return
		}
		switch e, _ := errors.AsType[*client.Error](err); client.CodeOf(err) {
		case client.CodeNoPodAvailable, client.CodeQueueFull, client.CodeQuotaExceeded:
			// Still full after the client's own retries: the user may come back later.
			w.Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter.Seconds())))
			http.Error(w, "busy, try again", http.StatusServiceUnavailable)
		case client.CodeValidation:
			http.Error(w, e.Message, http.StatusBadRequest)
		default:
			http.Error(w, "agent unavailable", http.StatusBadGateway)
		}
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", nil))
}

// Hold a pod for an API call, keep the hold alive while working, release it.
func ExampleClient_Acquire() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, err := c.Acquire(ctx, "batch", client.WithSessionConfig(client.SessionConfig{Env: map[string]string{"JOB": "42"}}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("working on", h.PodSSEURL, "until", h.HoldUntil)
	if _, err := c.TouchHold(ctx, "batch", h.PodID, h.HoldID); err != nil {
		log.Fatal(err)
	}
	if _, _, err := c.Release(ctx, "batch", h.PodID, h.HoldID); err != nil {
		log.Fatal(err)
	}
}

// Keep a session alive while its user is connected; route it again once it expired.
func ExampleClient_Touch() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	alive, err := c.Touch(ctx, "my-agent", "s1")
	switch {
	case err != nil:
		log.Fatal(err)
	case !alive:
		if _, err := c.Route(ctx, "my-agent", "s1"); err != nil {
			log.Fatal(err)
		}
	}
}

// A code is the sentinel of its errors, and CodeOf gives it to a switch.
func ExampleCodeOf() {
	err := fmt.Errorf("route s1: %w", &client.Error{Status: 503, Code: client.CodeQueueFull, Message: "queue full", RetryAfter: time.Second})
	fmt.Println(errors.Is(err, client.CodeQueueFull), errors.Is(err, client.CodeNoPodAvailable))
	switch client.CodeOf(err) {
	case client.CodeQueueFull, client.CodeNoPodAvailable:
		fmt.Println("full:", err)
	case client.CodeScopeNotFound:
		fmt.Println("no such scope")
	}
	// Output:
	// true false
	// full: route s1: warmpool: 503 QUEUE_FULL: queue full
}
