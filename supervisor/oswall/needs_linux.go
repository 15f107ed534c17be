package oswall

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// ProgramNeeds are the files a dynamically linked program needs to start:
// exec, the program and its dynamic loader (both resolved, as Landlock
// sees the files themselves); read, the folders of the shared libraries it
// links (the C library loads more from there at run time: NSS modules,
// libgcc_s for unwinding) and the loader's cache. A static program needs
// itself alone; a script (#!) its interpreter's too.
func ProgramNeeds(program string) (exec, read []string, err error) {
	return programNeeds(program, 0)
}

func programNeeds(program string, depth int) (exec, read []string, err error) {
	real, err := filepath.EvalSymlinks(program)
	if err != nil {
		return nil, nil, err
	}
	exec = []string{real}
	if interp, ok, err := scriptInterpreter(real); err != nil {
		return nil, nil, err
	} else if ok {
		if depth > 2 { // the kernel allows a few levels; pyrun needs one
			return nil, nil, fmt.Errorf("%s: too many levels of interpreters", program)
		}
		ie, ir, err := programNeeds(interp, depth+1)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: its interpreter: %w", program, err)
		}
		return append(exec, ie...), ir, nil
	}
	f, err := elf.Open(real)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, nil, fmt.Errorf("%s: read its loader's name: %w", program, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return exec, nil, nil
	}
	loader, err := filepath.EvalSymlinks(interp)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: its loader: %w", program, err)
	}
	exec = append(exec, loader)
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: its libraries: %w", program, err)
	}
	var dirs []string
	for _, d := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(d)
		for _, p := range paths {
			for _, dir := range filepath.SplitList(p) {
				dirs = append(dirs, strings.ReplaceAll(dir, "$ORIGIN", filepath.Dir(real)))
			}
		}
	}
	dirs = append(dirs, libraryDirs()...)
	dirs = append(dirs, filepath.Dir(loader))
	read = []string{"/etc/ld.so.cache"}
	for _, lib := range libs {
		found := false
		for _, d := range dirs {
			p, err := filepath.EvalSymlinks(filepath.Join(d, lib))
			if err != nil {
				continue
			}
			if dir := filepath.Dir(p); !slices.Contains(read, dir) {
				read = append(read, dir)
			}
			found = true
			break
		}
		if !found {
			return nil, nil, fmt.Errorf("%s: cannot find its library %s in %s", program, lib, strings.Join(dirs, ", "))
		}
	}
	return exec, read, nil
}

// scriptInterpreter is the interpreter a script names on its #! line.
func scriptInterpreter(path string) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return "", false, nil
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", false, fmt.Errorf("%s: an empty #! line", path)
	}
	return fields[0], true, nil
}

// libraryDirs are the folders the dynamic loader searches by default, the
// Debian-style multiarch ones first.
func libraryDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	var dirs []string
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	out := dirs[:0]
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}
