package mcp

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/pyrun/pyrun/mcp/argtext"
)

// explainArgs says in plain words what is wrong with a call's arguments,
// args decoded from JSON, for lt's tool: which argument, and the rule it
// breaks ("timeout_seconds must be greater than 0, not -1"), read from the
// tool's input schema (package argtext), where the validator says
// "exclusiveMinimum: -1/1 is less than or equal to 0.000000". An unknown
// argument is named with the tool and the arguments it takes. nil when it
// finds nothing wrong: the caller falls back on the validator's message.
func explainArgs(args any, lt *languageTool) error {
	root := lt.resolved.Schema()
	obj, ok := args.(map[string]any)
	if !ok {
		return invalid("the arguments must be an object of named arguments, such as {%q: \"...\"}, not %s",
			lt.lang.CodeArg, argtext.Describe(args))
	}
	names := slices.Sorted(maps.Keys(obj))
	for _, name := range names {
		if _, known := root.Properties[name]; !known {
			return invalid("%s has no argument %q%s; it takes %s", lt.lang.Tool, name,
				argtext.DidYouMean(name, root), strings.Join(argNames(root, lt.lang.CodeArg), ", "))
		}
	}
	if err := argtext.Missing(obj, root); err != nil {
		return invalid("%v", err)
	}
	for _, name := range names {
		if err := argtext.Value(name, obj[name], root.Properties[name]); err != nil {
			return invalid("%v", err)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return errors.New("invalid arguments: " + fmt.Sprintf(format, args...))
}

// argNames are the tool's arguments, its code first.
func argNames(root *jsonschema.Schema, codeArg string) []string {
	names := []string{codeArg}
	for _, n := range slices.Sorted(maps.Keys(root.Properties)) {
		if n != codeArg {
			names = append(names, n)
		}
	}
	return names
}
