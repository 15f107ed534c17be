package supervisor

// hostRequests is one kind of request a worker makes of the host while a
// call runs: the packages it needs (packageNeeds), the tool calls its code
// makes (toolCalls). Each request runs on a goroutine of its own, so that
// the call's deadline and cancellation stay in force while it does, and
// its answer comes back to the goroutine running the call, which alone
// writes to the worker. The worker waits for an answer to each request,
// also when the call ends first, or its next read would take the next
// call's line for one: finish sees to that before the worker takes
// another call. Implementations are owned by the goroutine running the
// call.
type hostRequests interface {
	// start takes the worker's event asking for something: it starts the
	// request, or writes at once the answer that it cannot be had. A fault:
	// asking was itself a breach of the protocol, or the worker did not
	// take the answer.
	start(ev event) *fault
	// answers yields the answer of each request started, once.
	answers() <-chan hostAnswer
	// took is given an answer taken from answers, and whether the call is
	// being stopped; it writes the answer to the worker, or keeps it from
	// the worker until finish.
	took(ans hostAnswer, stopping bool) *fault
	// stop cuts short the requests running: the call is being stopped.
	stop()
	// finish ends the requests still running, waits for them, and settles
	// with the worker what they still owe it. retire says why the worker
	// must serve no other call, so far; finish returns it, or a reason that
	// overrides it.
	finish(retire retirement) retirement
}

// finishRequests finishes each of requests in turn; retire is why the
// worker must serve no other call (callEnd.retire).
func finishRequests(retire *retirement, requests ...hostRequests) {
	for _, h := range requests {
		*retire = h.finish(*retire)
	}
}

// hostAnswer is the answer to a request of the host, for the worker.
type hostAnswer struct {
	req request
	// retire: the worker must serve no other call after this one (it has
	// loaded a package in another version than the call needs).
	retire retirement
}

// fault is how a worker failed its call, and the retirement it earns.
type fault struct {
	err    error
	retire retirement
}
