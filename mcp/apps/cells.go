package apps

import "sync"

// CellsMetaKey is the key, in a session call's result _meta, of the
// session's earlier cells, for the view: _meta is the part of a result a
// host hands the view and not the model.
const CellsMetaKey = "pyrun/cells"

// DefaultCellBytes bounds the code Cells keeps, all sessions together.
const DefaultCellBytes = 4 << 20

// cellOverhead is what a kept cell counts beyond its strings: its struct
// and its place in the queue.
const cellOverhead = 64

// Cell is one call of a session, as the view lists it.
type Cell struct {
	N      int    `json:"n"` // its place in the session, from 1
	Tool   string `json:"tool"`
	Code   string `json:"code"`
	Status string `json:"status"`
	seq    uint64
}

func (c Cell) bytes() int64 { return int64(len(c.Tool)+len(c.Code)+len(c.Status)) + cellOverhead }

// sessionCells are one session's kept cells, in order, and how many it
// has had.
type sessionCells struct {
	n     int
	cells []Cell
}

// queued is a kept cell's place in the order they came.
type queued struct {
	session string
	seq     uint64
}

// Cells keeps the code of the calls of Python, R and JavaScript sessions
// whose client speaks MCP Apps, so that the view of a session's call can
// list the calls before it. Only code, tool and status are kept, at most
// max bytes of them across all sessions: past it the oldest cells, of
// whichever session, go first. A session's cells go when it is ended by a
// call; those of a session that expires wait to be pushed out. Its methods
// are safe for concurrent use.
type Cells struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	seq   uint64
	m     map[string]*sessionCells
	// order is the kept cells oldest first, and entries of cells since
	// dropped with their session (skipped, and swept when they outnumber
	// the kept ones).
	order []queued
	kept  int
}

// NewCells keeps at most maxBytes of cells; 0 or less: none.
func NewCells(maxBytes int64) *Cells {
	return &Cells{max: maxBytes, m: map[string]*sessionCells{}}
}

// SetMax changes the bound, dropping the oldest cells past it.
func (c *Cells) SetMax(maxBytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max = maxBytes
	c.trimLocked()
}

// Add notes a call of session and returns the session's kept cells before
// it, oldest first, and the call's own place in the session.
func (c *Cells) Add(session string, cell Cell) (earlier []Cell, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.m[session]
	if sc == nil {
		sc = &sessionCells{}
	}
	earlier = append([]Cell(nil), sc.cells...)
	sc.n++
	cell.N = sc.n
	if c.max <= 0 || cell.bytes() > c.max {
		if len(sc.cells) > 0 {
			c.m[session] = sc // its number goes on
		}
		return earlier, cell.N
	}
	c.seq++
	cell.seq = c.seq
	sc.cells = append(sc.cells, cell)
	c.m[session] = sc
	c.order = append(c.order, queued{session, cell.seq})
	c.kept++
	c.bytes += cell.bytes()
	c.trimLocked()
	return earlier, cell.N
}

// End drops session's cells.
func (c *Cells) End(session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.m[session]
	if sc == nil {
		return
	}
	for _, cell := range sc.cells {
		c.bytes -= cell.bytes()
		c.kept--
	}
	delete(c.m, session)
	if len(c.order) > 2*c.kept+64 {
		live := c.order[:0]
		for _, q := range c.order {
			if sc := c.m[q.session]; sc != nil && len(sc.cells) > 0 && q.seq >= sc.cells[0].seq {
				live = append(live, q)
			}
		}
		clear(c.order[len(live):])
		c.order = live
	}
}

// Bytes is what the kept cells count, for tests.
func (c *Cells) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// trimLocked drops the oldest cells while they count more than max.
func (c *Cells) trimLocked() {
	for c.bytes > max(c.max, 0) && len(c.order) > 0 {
		q := c.order[0]
		c.order[0] = queued{}
		c.order = c.order[1:]
		sc := c.m[q.session]
		if sc == nil || len(sc.cells) == 0 || sc.cells[0].seq != q.seq {
			continue // its session ended
		}
		c.bytes -= sc.cells[0].bytes()
		c.kept--
		sc.cells[0] = Cell{}
		sc.cells = sc.cells[1:]
		if len(sc.cells) == 0 {
			delete(c.m, q.session)
		}
	}
}
