package mcp

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// explainArgs says in plain words what is wrong with a call's arguments,
// args decoded from JSON, for lt's tool: which argument, and the rule it
// breaks ("timeout_seconds must be greater than 0, not -1"), read from the
// tool's input schema. The schema validator's own message names the same
// fault in its terms ("validating /properties/timeout_seconds:
// exclusiveMinimum: -1/1 is less than or equal to 0.000000"), which a model
// or a person has to decode. nil when it finds nothing wrong: the caller
// falls back on the validator's message.
func explainArgs(args any, lt *languageTool) error {
	root := lt.resolved.Schema()
	obj, ok := args.(map[string]any)
	if !ok {
		return invalid("the arguments must be an object of named arguments, such as {%q: \"...\"}, not %s",
			lt.lang.CodeArg, jsonValue(args))
	}
	names := slices.Sorted(maps.Keys(obj))
	for _, name := range names {
		if _, known := root.Properties[name]; !known {
			return invalid("%s has no argument %q%s; it takes %s", lt.lang.Tool, name,
				didYouMean(name, root), strings.Join(argNames(root, lt.lang.CodeArg), ", "))
		}
	}
	for _, name := range root.Required {
		if _, given := obj[name]; !given {
			return invalid("%s is missing: it holds the %s", name, root.Properties[name].Description)
		}
	}
	for _, name := range names {
		if err := explainValue(name, obj[name], root.Properties[name]); err != nil {
			return err
		}
	}
	return nil
}

// explainValue checks one argument against the keywords pyrun's input
// schemas use: type, exclusiveMinimum, minimum, minLength, maxLength.
func explainValue(name string, v any, s *jsonschema.Schema) error {
	if s.Type != "" && !hasType(v, s.Type) {
		return invalid("%s must be %s, not %s", name, article(s.Type), jsonValue(v))
	}
	if f, ok := v.(float64); ok {
		if m := s.ExclusiveMinimum; m != nil && f <= *m {
			return invalid("%s must be greater than %s, not %s", name, number(*m), number(f))
		}
		if m := s.Minimum; m != nil && f < *m {
			return invalid("%s must be at least %s, not %s", name, number(*m), number(f))
		}
	}
	if str, ok := v.(string); ok {
		n := utf8.RuneCountInString(str)
		if m := s.MinLength; m != nil && n < *m {
			if *m == 1 {
				return invalid("%s must not be empty", name)
			}
			return invalid("%s must be at least %d characters long, not %d", name, *m, n)
		}
		if m := s.MaxLength; m != nil && n > *m {
			return invalid("%s must be at most %d characters long, not %d", name, *m, n)
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

// didYouMean names the argument that name misspells in case or
// separators (Python_Code, timeout-seconds, timeoutSeconds), if one does.
func didYouMean(name string, root *jsonschema.Schema) string {
	fold := func(s string) string { return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s)) }
	for _, n := range slices.Sorted(maps.Keys(root.Properties)) {
		if fold(n) == fold(name) {
			return " (did you mean " + n + "?)"
		}
	}
	return ""
}

// hasType reports whether v, decoded from JSON, is of the JSON Schema type t.
func hasType(v any, t string) bool {
	switch v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case float64:
		f := v.(float64)
		return t == "number" || t == "integer" && f == float64(int64(f))
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

func article(t string) string {
	switch t {
	case "object", "array", "integer":
		return "an " + t
	case "boolean":
		return "true or false"
	}
	return "a " + t
}

// jsonValue names a JSON value's type, with the value when it is short.
func jsonValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return "a number (" + number(x) + ")"
	case string:
		if len(x) <= 32 {
			return fmt.Sprintf("a string (%q)", x)
		}
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func number(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
