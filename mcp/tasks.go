package mcp

// MCP tasks (docs/mcp.md, docs/contract.md section 17; the 2025-11-25 revision's tasks, SEP-1686,
// and the 2026-07-28 tasks extension, SEP-2663): a run tool's call that
// answers at once with a task handle, its result fetched later by polling.
//
// The go-sdk (v1.8.0) implements neither: it answers tasks/get and the
// other methods with "method not found" before any middleware sees them
// (checkRequest in its shared.go looks the method up in a fixed table), has
// no Task types, drops the `task` member of tools/call, and has no hook on
// what it writes. So pyrun serves tasks where it owns a request before the
// SDK reads it: the line filter of stdio and of the local socket
// (tasklines.go), which also owns the lines the SDK writes and adds the
// 2025-11-25 `tasks` capability to initialize's result and
// `execution.taskSupport` to the run tools in tools/list; and /mcp's
// 2026-07-28 requests, one per POST (taskhttp.go). A task's call runs
// through the same code as the SDK's tool handler (runCall). The
// 2026-07-28 extension is advertised through the SDK's own capabilities
// (server/discover). 2025-11-25's tasks over HTTP would need initialize's
// and tools/list's answers changed inside the SDK's event streams: not
// offered there.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/pyrun/pyrun/internal/bytesize"
)

// TaskOptions bound tasks.
type TaskOptions struct {
	// TTL is how long a task's result is kept after the task ends.
	TTL time.Duration
	// ClientMax is the tasks one client may hold, running or kept.
	ClientMax int
	// After is how long a 2026-07-28 call of a client that takes tasks
	// runs before pyrun answers with a task instead of its result (0: a
	// task at once).
	After time.Duration
	// ClientBytes bounds the bytes of results one client's ended tasks
	// keep (their JSON) for TTL: past it, that client's oldest kept
	// results are dropped, so that kept results, which wait outside every
	// other per-client bound, cannot grow pyrun's heap without end.
	ClientBytes int64
}

// DefaultTaskOptions are the tasks' bounds by default.
func DefaultTaskOptions() TaskOptions {
	return TaskOptions{TTL: DefaultTaskTTL, ClientMax: DefaultClientTasks, After: DefaultTaskAfter, ClientBytes: DefaultClientTaskBytes}
}

// Validate checks bounds a user set, naming each setting as pyrun's flags
// and config keys do (docs/configuration.md, MCP tasks).
func (o TaskOptions) Validate() error {
	switch {
	case o.TTL < time.Second || o.TTL > 24*time.Hour:
		return fmt.Errorf("task-ttl must be between 1s and 24h, not %s", o.TTL)
	case o.ClientMax < 1 || o.ClientMax > 4096:
		return fmt.Errorf("client-max-tasks must be between 1 and 4096, not %d", o.ClientMax)
	case o.ClientBytes < 64<<10:
		return fmt.Errorf("client-task-bytes must be at least 64KiB, not %s", bytesize.Format(o.ClientBytes))
	case o.After < 0 || o.After > time.Hour:
		return fmt.Errorf("task-after must be between 0 and 1h, not %s", o.After)
	}
	return nil
}

// Defaults of TaskOptions.
const (
	DefaultTaskTTL               = 15 * time.Minute
	DefaultClientTasks           = 32
	DefaultTaskAfter             = time.Second
	DefaultClientTaskBytes int64 = 32 << 20
	taskPollInterval             = 250 * time.Millisecond
	tasksExtension               = "io.modelcontextprotocol/tasks"
	relatedTaskMeta              = "io.modelcontextprotocol/related-task"
	protocolVersionMeta          = "io.modelcontextprotocol/protocolVersion"
	clientCapabilityMeta         = "io.modelcontextprotocol/clientCapabilities"
)

// Task statuses.
const (
	taskWorking   = "working"
	taskCompleted = "completed"
	taskFailed    = "failed"
	taskCancelled = "cancelled"
)

// errTooManyTasks refuses a task past TaskOptions.ClientMax.
var errTooManyTasks = errors.New("too many tasks: this client holds as many as client_max_tasks allows; fetch or cancel some, or call without a task")

// task is one task-augmented call.
type task struct {
	id, client string
	created    time.Time
	cancel     context.CancelFunc
	done       chan struct{} // closed when the call has ended

	// guarded by the store's mu
	status  string
	message string
	updated time.Time
	ended   time.Time
	ttl     time.Duration
	result  *sdk.CallToolResult // the call's result, once it ended; nil once dropped
	size    int64               // result's bytes, counted in the store's kept, once kept
	dropped bool                // result dropped past ClientBytes
	inline  bool                // a 2026-07-28 call still waiting to answer with the result itself: not kept yet
}

// taskStore holds the tasks of every client of one Server.
type taskStore struct {
	mu      sync.Mutex
	opts    TaskOptions
	byID    map[string]*task
	counts  map[string]int   // tasks held, per client
	kept    map[string]int64 // bytes of kept results, per client
	created atomic.Uint64
	refused atomic.Uint64
	dropped atomic.Uint64
}

func newTaskStore(o TaskOptions) *taskStore {
	return &taskStore{opts: o.withDefaults(), byID: map[string]*task{}, counts: map[string]int{}, kept: map[string]int64{}}
}

func (o TaskOptions) withDefaults() TaskOptions {
	if o.TTL <= 0 {
		o.TTL = DefaultTaskTTL
	}
	if o.ClientMax <= 0 {
		o.ClientMax = DefaultClientTasks
	}
	if o.ClientBytes <= 0 {
		o.ClientBytes = DefaultClientTaskBytes
	}
	return o
}

func (ts *taskStore) setOptions(o TaskOptions) {
	ts.mu.Lock()
	ts.opts = o.withDefaults()
	ts.mu.Unlock()
}

// sweepLocked forgets the tasks whose results have been kept their time.
func (ts *taskStore) sweepLocked(now time.Time) {
	for id, t := range ts.byID {
		if !t.ended.IsZero() && now.After(t.ended.Add(t.ttl)) {
			ts.removeLocked(id, t)
		}
	}
}

// removeLocked forgets t, and the bytes its result held.
func (ts *taskStore) removeLocked(id string, t *task) {
	delete(ts.byID, id)
	if ts.counts[t.client]--; ts.counts[t.client] <= 0 {
		delete(ts.counts, t.client)
	}
	ts.unkeepLocked(t)
}

func (ts *taskStore) unkeepLocked(t *task) {
	if t.size == 0 {
		return
	}
	if ts.kept[t.client] -= t.size; ts.kept[t.client] <= 0 {
		delete(ts.kept, t.client)
	}
	t.size = 0
}

// keepLocked counts ended t's result against its client's ClientBytes and
// drops that client's oldest kept results (t's own last) while past it.
func (ts *taskStore) keepLocked(t *task) {
	if t.result == nil || t.size > 0 {
		return
	}
	b, err := json.Marshal(t.result)
	t.size = int64(len(b)) + 1 // never 0: counted
	if err != nil {
		t.size = 1
	}
	ts.kept[t.client] += t.size
	for ts.kept[t.client] > ts.opts.ClientBytes {
		oldest := t
		for _, o := range ts.byID {
			if o.client == t.client && o.size > 0 && o.ended.Before(oldest.ended) {
				oldest = o
			}
		}
		ts.dropLocked(oldest)
		if oldest == t {
			return
		}
	}
}

func (ts *taskStore) dropLocked(t *task) {
	t.dropped, t.result = true, nil
	t.status = taskFailed
	t.message = fmt.Sprintf("its result (%s) was dropped: this client's kept task results passed client_task_bytes (%s); fetch results sooner, or raise --client-task-bytes",
		byteCount(t.size), byteCount(ts.opts.ClientBytes))
	ts.unkeepLocked(t)
	ts.dropped.Add(1)
}

// byteCount writes n as the flags do: KiB or MiB when whole enough.
func byteCount(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// start runs call as a task of client. requestedTTL (0: none asked for)
// shortens how long its result is kept, never lengthens it.
// inline: the caller will wait to answer with the result itself (see
// task.inline), and calls settle when it stops waiting.
func (ts *taskStore) start(client string, requestedTTL time.Duration, inline bool, call func(ctx context.Context) *sdk.CallToolResult) (*task, error) {
	now := time.Now()
	ts.mu.Lock()
	ts.sweepLocked(now)
	if ts.counts[client] >= ts.opts.ClientMax {
		ts.mu.Unlock()
		ts.refused.Add(1)
		return nil, errTooManyTasks
	}
	ttl := ts.opts.TTL
	if requestedTTL > 0 && requestedTTL < ttl {
		ttl = requestedTTL
	}
	// Tasks outlive the request that made them, and the connection: a task
	// ends with its call (bounded by the call's own timeout) or tasks/cancel.
	ctx, cancel := context.WithCancel(context.Background())
	t := &task{id: newTaskID(), client: client, created: now, updated: now, cancel: cancel,
		done: make(chan struct{}), status: taskWorking, ttl: ttl, inline: inline}
	ts.byID[t.id] = t
	ts.counts[client]++
	ts.mu.Unlock()
	ts.created.Add(1)
	go func() {
		defer close(t.done)
		defer cancel()
		res := call(ctx)
		ts.mu.Lock()
		defer ts.mu.Unlock()
		t.result = res
		t.ended, t.updated = time.Now(), time.Now()
		if t.status == taskCancelled {
			return // stays cancelled, whatever the call did after
		}
		t.status = taskCompleted
		if res.IsError {
			t.status = taskFailed
			t.message = "the call's result is an error (isError); tasks/result has it"
		}
		if !t.inline {
			ts.keepLocked(t)
		}
	}()
	return t, nil
}

// settle is called by the caller of an inline start that answers with a
// task after all (its wait ended before the call): from now on, t's
// result is kept as any task's.
func (ts *taskStore) settle(t *task) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t.inline = false
	if !t.ended.IsZero() {
		ts.keepLocked(t)
	}
}

// get is client's task id, or nil.
func (ts *taskStore) get(client, id string) *task {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.sweepLocked(time.Now())
	t := ts.byID[id]
	if t == nil || t.client != client {
		return nil // another client's task is not there for this one
	}
	return t
}

// cancel marks t cancelled and stops its call; false when t had ended.
func (ts *taskStore) cancelTask(t *task) bool {
	ts.mu.Lock()
	if !t.ended.IsZero() || t.status == taskCancelled {
		ts.mu.Unlock()
		return false
	}
	t.status, t.message, t.updated = taskCancelled, "cancelled by the client", time.Now()
	ts.mu.Unlock()
	t.cancel()
	return true
}

// list is client's tasks, oldest first.
func (ts *taskStore) list(client string) []*task {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.sweepLocked(time.Now())
	var out []*task
	for _, t := range ts.byID {
		if t.client == client {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// snapshot is t's state now, as a task object of revision rev.
func (ts *taskStore) snapshot(t *task, rev string) map[string]any {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	// The result is kept ttl after the call ends: while it runs, that is
	// at least ttl from now.
	keep := time.Since(t.created) + t.ttl
	if !t.ended.IsZero() {
		keep = t.ended.Sub(t.created) + t.ttl
	}
	m := map[string]any{
		"taskId":        t.id,
		"status":        t.status,
		"createdAt":     t.created.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": t.updated.UTC().Format(time.RFC3339Nano),
	}
	if t.message != "" {
		m["statusMessage"] = t.message
	}
	if rev == revision20260728 {
		m["ttlMs"], m["pollIntervalMs"] = keep.Milliseconds(), taskPollInterval.Milliseconds()
		if t.status == taskCompleted || (t.status == taskFailed && t.result != nil) {
			// 2026-07-28: a tool result with isError is a completed task.
			m["status"], m["result"] = taskCompleted, t.result
			delete(m, "statusMessage")
		}
	} else {
		m["ttl"], m["pollInterval"] = keep.Milliseconds(), taskPollInterval.Milliseconds()
	}
	return m
}

func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return hex.EncodeToString(b[:])
}

// CountTasks adds the tasks' figures: held now, created and refused.
func (m *Metrics) CountTasks(s *Server) {
	_ = m.reg.Register(&taskCollector{ts: s.tasks})
}

type taskCollector struct{ ts *taskStore }

var (
	tasksHeldDesc    = prometheus.NewDesc("pyrun_tasks", "MCP tasks held: running, or their results kept for task_ttl.", nil, nil)
	tasksCreatedDesc = prometheus.NewDesc("pyrun_tasks_created_total", "MCP tasks created (task-augmented run tool calls).", nil, nil)
	tasksRefusedDesc = prometheus.NewDesc("pyrun_tasks_refused_total", "Task-augmented calls refused because their client held client_max_tasks tasks.", nil, nil)
	tasksBytesDesc   = prometheus.NewDesc("pyrun_task_result_bytes", "Bytes of ended tasks' results kept for task_ttl, all clients.", nil, nil)
	tasksDropDesc    = prometheus.NewDesc("pyrun_task_results_dropped_total", "Kept task results dropped because their client's kept results passed client_task_bytes.", nil, nil)
)

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksHeldDesc
	ch <- tasksCreatedDesc
	ch <- tasksRefusedDesc
	ch <- tasksBytesDesc
	ch <- tasksDropDesc
}

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	c.ts.mu.Lock()
	held := len(c.ts.byID)
	var kept int64
	for _, n := range c.ts.kept {
		kept += n
	}
	c.ts.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(tasksBytesDesc, prometheus.GaugeValue, float64(kept))
	ch <- prometheus.MustNewConstMetric(tasksDropDesc, prometheus.CounterValue, float64(c.ts.dropped.Load()))
	ch <- prometheus.MustNewConstMetric(tasksHeldDesc, prometheus.GaugeValue, float64(held))
	ch <- prometheus.MustNewConstMetric(tasksCreatedDesc, prometheus.CounterValue, float64(c.ts.created.Load()))
	ch <- prometheus.MustNewConstMetric(tasksRefusedDesc, prometheus.CounterValue, float64(c.ts.refused.Load()))
}

// rpcError is a JSON-RPC error answer.
func rpcError(code int64, format string, args ...any) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
