package httpfront

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/pyrun/pyrun/mcp/idscan"
)

// refuseBody answers a POST refused before its body was decoded: over
// Streamable HTTP a JSON-RPC error with the request's own id, which an
// idscan.Scanner reads as the body goes by (never kept whole); over
// HTTP+SSE, whose answers go out on the event stream, and for a message
// without an id, 503 with Retry-After. The body is read to its end (at most
// the largest body), so that the client, still sending, gets the answer.
func (h *Handler) refuseBody(w http.ResponseWriter, r *http.Request, transport string, err error) {
	var sc idscan.Scanner
	_, _ = io.Copy(&sc, http.MaxBytesReader(w, r.Body, h.b.MaxBody))
	id, hasID := sc.ID()
	_, hasMethod := sc.Method()
	h.log.Info("request refused before it was decoded", "client", clientKey(r), "transport", transport,
		"bytes", r.ContentLength, "id", id.Raw(), "error", err.Error())
	w.Header().Set("Retry-After", "5")
	w.Header().Set("Content-Type", "application/json")
	resp := struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", nil, &jsonrpc.Error{Code: codeBusy, Message: err.Error()}}
	if transport == "streamable" && hasID && hasMethod {
		resp.ID = id.Raw()
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// codeBusy is the JSON-RPC error code of a request refused for a limit
// on what pyrun holds (a server error, in JSON-RPC's range for them).
const codeBusy = -32000

// refuseSession answers a new session refused by a cap: 503 with
// Retry-After and a JSON-RPC error a client can show.
func refuseSession(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", "30")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":%q}}`+"\n", err.Error())
}
