package supervisor

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Rich results (docs/contract.md section 9): what a call shows, the files it writes
// under /output/ (their bytes wait on disk: spool.go) and the files it is
// given; host folders mounted into every worker are mounts.go's. The
// supervisor carries mime types and bytes; what a client makes of them is
// the front end's business.

// Display is one thing a call showed, in its richest representation.
type Display struct {
	MIMEType string
	Data     []byte
}

// OutputFile is a file a call wrote under /output/. Its bytes wait on
// disk (Config.SpoolDir), never whole in pyrun's memory; whoever gets the
// Result moves them where it keeps them (Spooled.MoveTo), reads them or
// removes them. Spooled files nobody took are removed once unreachable.
type OutputFile struct {
	Path     string // relative to /output/, with forward slashes
	MIMEType string // guessed from the name; application/octet-stream if unknown
	Size     int64
	Data     *Spooled
}

// InputFile is a file written into a call's working directory before its
// code runs.
type InputFile struct {
	Path string // relative, inside the working directory (CheckInputPath)
	Data []byte
}

// ErrBadPath marks an input file path that would leave the working directory.
var ErrBadPath = errors.New("not a relative path inside the working directory")

// nameMax is Linux's NAME_MAX, the longest name in a path, in bytes. The
// workers' file systems refuse longer ones (pyodide-host/guards.ts): their
// folder walks cut such names short, and the files outlived the clean-up.
const nameMax = 255

// CheckInputPath checks the path of an input file: relative, no "..", no
// empty or "." component, no name over 255 bytes, no NUL. The worker checks
// again.
func CheckInputPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("an empty path is %w", ErrBadPath)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`):
		return fmt.Errorf("%q is absolute, %w", p, ErrBadPath)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q holds a NUL byte, %w", p, ErrBadPath)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("%q climbs out with '..', %w", p, ErrBadPath)
		}
		if part == "" || part == "." {
			return fmt.Errorf("%q has an empty or '.' part, %w", p, ErrBadPath)
		}
		if len(part) > nameMax {
			return fmt.Errorf("%.80q... has a name longer than %d bytes, %w", p, nameMax, ErrBadPath)
		}
	}
	return nil
}

// richRequest is the part of a run request for rich results.
type richRequest struct {
	InputFiles      []inputFileLine `json:"input_files,omitempty"`
	KeepOutput      bool            `json:"keep_output,omitempty"`
	MaxDisplays     int             `json:"max_displays,omitempty"`
	MaxDisplayBytes int             `json:"max_display_bytes,omitempty"`
	MaxFiles        int             `json:"max_files,omitempty"`
	MaxFileBytes    int             `json:"max_file_bytes,omitempty"`
}

type inputFileLine struct {
	Path string `json:"path"`
	Data []byte `json:"data"` // base64 in JSON
}

func newRichRequest(job Job, cfg Config) richRequest {
	r := richRequest{
		KeepOutput:      job.InSession.KeepOutput,
		MaxDisplays:     cfg.MaxDisplays,
		MaxDisplayBytes: cfg.MaxDisplayBytes,
		MaxFiles:        cfg.MaxFiles,
		MaxFileBytes:    cfg.MaxFileBytes,
	}
	for _, f := range job.Files {
		r.InputFiles = append(r.InputFiles, inputFileLine(f))
	}
	return r
}

// richEvent holds the fields of display and file events, and the result's
// counts of what the worker's caps held back.
type richEvent struct {
	MIMEType        string `json:"mime_type"`
	Data            []byte `json:"data"` // base64 in JSON
	Path            string `json:"path"`
	More            bool   `json:"more"` // the next event of the same kind continues this one
	DisplaysDropped int    `json:"displays_dropped"`
	FilesDropped    int    `json:"files_dropped"`
}

// checkRichEvent checks a display or file event from an untrusted worker.
func checkRichEvent(ev event) error {
	if ev.MIMEType == "" || len(ev.MIMEType) > 255 || strings.ContainsAny(ev.MIMEType, " \r\n\"") {
		return fmt.Errorf("%s event with a bad mime type %q", ev.Type, clip([]byte(ev.MIMEType), 64))
	}
	if ev.Type == "file" {
		if err := CheckInputPath(ev.Path); err != nil || len(ev.Path) > 4096 {
			return fmt.Errorf("file event with a bad path %q", clip([]byte(ev.Path), 200))
		}
	}
	return nil
}

// richResults collects a call's displays and files within the pool's
// caps: a worker is untrusted, so its own caps are checked again. An item
// larger than one event's worth comes as events marked More, which must
// follow each other. A file's parts go to a spool file as they come.
type richResults struct {
	displays                []Display
	files                   []OutputFile
	displayBytes, fileBytes int
	dropDisplays, dropFiles int
	pending                 *richItem // an item whose last part has not come
	// spoolErr is why a file could not be kept on disk, if one could not.
	spoolErr error
}

type richItem struct {
	typ, mime, path string
	data            []byte   // a display's bytes
	spool           *os.File // a file's bytes, on disk
	size            int
	drop            bool // over a cap: the rest of its parts are read and dropped
}

func (r *richResults) add(ev event, cfg Config) error {
	p := r.pending
	if p == nil {
		p = &richItem{typ: ev.Type, mime: ev.MIMEType, path: ev.Path}
		r.pending = p
	} else if ev.Type != p.typ || ev.MIMEType != p.mime || ev.Path != p.path {
		r.abandon()
		return fmt.Errorf("%w: a %s event in the middle of a %s split over events", errGarbage, ev.Type, p.typ)
	}
	if !p.drop {
		p.size += len(ev.Data)
		switch {
		case p.typ == "display" && r.displayBytes+p.size > cfg.MaxDisplayBytes,
			p.typ == "file" && r.fileBytes+p.size > cfg.MaxFileBytes:
			p.discard()
		case p.typ == "display":
			p.data = append(p.data, ev.Data...)
		default:
			if err := p.write(ev.Data, cfg.SpoolDir); err != nil {
				r.spoolErr = err
				p.discard()
			}
		}
	}
	if ev.More {
		return nil
	}
	r.pending = nil
	switch {
	case p.typ == "display" && (p.drop || len(r.displays) >= cfg.MaxDisplays):
		r.dropDisplays++
	case p.typ == "display":
		r.displayBytes += len(p.data)
		r.displays = append(r.displays, Display{MIMEType: p.mime, Data: p.data})
	case p.drop || len(r.files) >= cfg.MaxFiles ||
		slices.ContainsFunc(r.files, func(f OutputFile) bool { return f.Path == p.path }):
		p.discard()
		r.dropFiles++
	default:
		f, err := p.keep(cfg.SpoolDir)
		if err != nil {
			r.spoolErr = err
			r.dropFiles++
			return nil
		}
		r.fileBytes += p.size
		r.files = append(r.files, f)
	}
	return nil
}

// write adds a part of a file to its spool file.
func (p *richItem) write(b []byte, dir string) error {
	if p.spool == nil {
		if dir == "" {
			dir = os.TempDir()
		}
		f, err := os.CreateTemp(dir, "output-*")
		if err != nil {
			return fmt.Errorf("spool an /output/ file: %w", err)
		}
		p.spool = f
	}
	if _, err := p.spool.Write(b); err != nil {
		return fmt.Errorf("spool an /output/ file: %w", err)
	}
	return nil
}

// keep closes a whole file's spool file and hands it over as an OutputFile.
func (p *richItem) keep(dir string) (OutputFile, error) {
	if p.spool == nil { // an empty file
		if err := p.write(nil, dir); err != nil {
			return OutputFile{}, err
		}
	}
	name := p.spool.Name()
	if err := p.spool.Close(); err != nil {
		_ = os.Remove(name)
		return OutputFile{}, fmt.Errorf("spool an /output/ file: %w", err)
	}
	p.spool = nil
	return OutputFile{Path: p.path, MIMEType: p.mime, Size: int64(p.size), Data: newSpooled(name, int64(p.size))}, nil
}

// discard drops what was kept of an item: it is over a cap, or broken.
func (p *richItem) discard() {
	p.drop, p.data = true, nil
	if p.spool != nil {
		name := p.spool.Name()
		_ = p.spool.Close()
		_ = os.Remove(name)
		p.spool = nil
	}
}

// abandon drops an item whose last part never came.
func (r *richResults) abandon() {
	if p := r.pending; p != nil {
		r.pending = nil
		p.discard()
		if p.typ == "display" {
			r.dropDisplays++
		} else {
			r.dropFiles++
		}
	}
}

// dropped adds the counts the worker's result reports, and an item whose
// last part never came.
func (r *richResults) dropped(ev event) {
	r.dropDisplays += max(ev.DisplaysDropped, 0)
	r.dropFiles += max(ev.FilesDropped, 0)
	r.abandon()
}

func (r *richResults) fill(res *Result) {
	r.abandon() // the call ended without its result: the worker died
	res.Displays, res.Files = r.displays, r.files
	res.DisplaysDropped, res.FilesDropped = r.dropDisplays, r.dropFiles
}
