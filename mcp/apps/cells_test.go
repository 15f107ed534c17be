package apps

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func codes(cells []Cell) string {
	var s []string
	for _, c := range cells {
		s = append(s, c.Code)
	}
	return strings.Join(s, ",")
}

// A session's call gets the session's cells before it, in order, numbered
// from 1; other sessions' cells are not among them.
func TestCellsInOrder(t *testing.T) {
	c := NewCells(DefaultCellBytes)
	for i, code := range []string{"a", "b", "c"} {
		earlier, n := c.Add("s1", Cell{Tool: "run_python_code", Code: code, Status: "success"})
		if n != i+1 || len(earlier) != i {
			t.Fatalf("call %d: number %d, %d earlier cells", i+1, n, len(earlier))
		}
		c.Add("s2", Cell{Code: "other"})
	}
	earlier, n := c.Add("s1", Cell{Code: "d"})
	if codes(earlier) != "a,b,c" || n != 4 || earlier[0].N != 1 || earlier[2].N != 3 || earlier[0].Tool != "run_python_code" {
		t.Errorf("earlier cells %+v, number %d; want a,b,c numbered 1-3, then 4", earlier, n)
	}
}

// The cells of all sessions together stay within the bound: past it the
// oldest go first, whichever session they belong to; a cell larger than
// the bound is not kept (but numbered); 0 keeps none; a lower bound set
// later drops at once.
func TestCellsBounded(t *testing.T) {
	one := Cell{Code: strings.Repeat("x", 36)}.bytes() // 100 bytes
	c := NewCells(3 * one)
	c.Add("s1", Cell{Code: strings.Repeat("1", 36)})
	c.Add("s2", Cell{Code: strings.Repeat("2", 36)})
	c.Add("s1", Cell{Code: strings.Repeat("3", 36)})
	c.Add("s2", Cell{Code: strings.Repeat("4", 36)}) // pushes out s1's first
	if c.Bytes() != 3*one {
		t.Errorf("kept %d bytes, want %d", c.Bytes(), 3*one)
	}
	earlier, n := c.Add("s1", Cell{Code: strings.Repeat("y", 1000)}) // too large to keep
	if len(earlier) != 1 || earlier[0].Code[0] != '3' || n != 3 {
		t.Errorf("s1's earlier cells: %+v, number %d; want only its second, then 3", earlier, n)
	}
	if earlier, n := c.Add("s1", Cell{Code: "z"}); len(earlier) != 1 || n != 4 {
		t.Errorf("after a cell too large to keep: %d earlier, number %d; want 1, 4", len(earlier), n)
	}
	c.SetMax(one)
	if c.Bytes() > one {
		t.Errorf("after SetMax(%d): %d bytes kept", one, c.Bytes())
	}
	none := NewCells(0)
	none.Add("s", Cell{Code: "a"})
	if earlier, _ := none.Add("s", Cell{Code: "b"}); len(earlier) != 0 || none.Bytes() != 0 {
		t.Errorf("a bound of 0 kept %d cells, %d bytes", len(earlier), none.Bytes())
	}
}

// A session ended drops its cells at once; the queue of what to push out
// does not grow with sessions that come and go.
func TestCellsEnd(t *testing.T) {
	c := NewCells(DefaultCellBytes)
	c.Add("s", Cell{Code: "a"})
	c.Add("keep", Cell{Code: "k"})
	c.End("s")
	if earlier, n := c.Add("s", Cell{Code: "b"}); len(earlier) != 0 || n != 1 {
		t.Errorf("after End: %d earlier cells, number %d; want none, 1", len(earlier), n)
	}
	c.End("s")
	for i := range 10000 {
		s := "t" + strings.Repeat("x", i%7)
		c.Add(s, Cell{Code: "a"})
		c.End(s)
	}
	if c.kept != 1 || len(c.order) > 2*c.kept+65 {
		t.Errorf("%d cells kept, %d queued; want 1 and a short queue", c.kept, len(c.order))
	}
	if c.Bytes() != (Cell{Code: "k"}).bytes() {
		t.Errorf("%d bytes kept, want the one cell's", c.Bytes())
	}
}

// A request without params (a nil pointer) is a client without the
// extension, not a panic.
func TestNegotiatedNilParams(t *testing.T) {
	if Negotiated(&sdk.ListToolsRequest{}) {
		t.Error("a request with no session and no params negotiated the extension")
	}
}
