// Package argtext says in plain words why a tool's arguments do not meet
// its input schema: which argument, and the rule it breaks. The schema
// validator (jsonschema-go) names the same fault in its own terms
// ("validating /properties/timeout_seconds: exclusiveMinimum: -1/1 is less
// than or equal to 0.000000"), which the model that wrote the call, or the
// person reading it, has to decode. Callers validate first and ask for
// words only when validation failed:
//
//	if err := resolved.Validate(args); err != nil {
//		if plain := argtext.Explain(args, resolved.Schema()); plain != nil {
//			err = plain // "timeout_seconds must be greater than 0, not -1"
//		}
//	}
//
// It knows the keywords tools' schemas use most (type, enum, const,
// minimum and maximum, lengths, required, properties, additional
// properties, items); a fault in what it does not know (anyOf, $ref,
// pattern, ...) gets nil, and the caller keeps the validator's message.
package argtext

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// Explain says what is wrong with args, a tool's arguments decoded from
// JSON, for the input schema s; nil when it finds nothing wrong.
func Explain(args any, s *jsonschema.Schema) error {
	obj, ok := args.(map[string]any)
	if !ok {
		return fmt.Errorf("the arguments must be an object of named arguments, not %s", Describe(args))
	}
	names := slices.Sorted(maps.Keys(obj))
	if s.Properties != nil && isFalse(s.AdditionalProperties) && s.PatternProperties == nil {
		for _, name := range names {
			if _, known := s.Properties[name]; !known {
				return fmt.Errorf("there is no argument %q%s; the arguments are %s", name, DidYouMean(name, s), strings.Join(slices.Sorted(maps.Keys(s.Properties)), ", "))
			}
		}
	}
	if err := Missing(obj, s); err != nil {
		return err
	}
	for _, name := range names {
		if ps, ok := s.Properties[name]; ok {
			if err := Value(name, obj[name], ps); err != nil {
				return err
			}
		}
	}
	return nil
}

// Missing names the first required argument of s that obj lacks, with
// what it holds when the schema says so briefly; nil when none is.
func Missing(obj map[string]any, s *jsonschema.Schema) error {
	for _, name := range s.Required {
		if _, given := obj[name]; given {
			continue
		}
		if ps := s.Properties[name]; ps != nil && ps.Description != "" && len(ps.Description) <= 80 {
			return fmt.Errorf("%s is missing (%s)", name, ps.Description)
		}
		return fmt.Errorf("%s is missing", name)
	}
	return nil
}

// Value checks v, found at path (an argument's name, "entities[0].name"),
// against s.
func Value(path string, v any, s *jsonschema.Schema) error {
	if s == nil {
		return nil
	}
	if types := typesOf(s); len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return hasType(v, t) }) {
		return fmt.Errorf("%s must be %s, not %s", path, typeWords(types), Describe(v))
	}
	if s.Const != nil && !equal(v, *s.Const) {
		return fmt.Errorf("%s must be %s, not %s", path, literal(*s.Const), Describe(v))
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return equal(v, e) }) {
		var words []string
		for _, e := range s.Enum {
			words = append(words, literal(e))
		}
		return fmt.Errorf("%s must be one of %s, not %s", path, strings.Join(words, ", "), Describe(v))
	}
	switch x := v.(type) {
	case float64:
		return number(path, x, s)
	case string:
		n := utf8.RuneCountInString(x)
		if m := s.MinLength; m != nil && n < *m {
			if *m == 1 {
				return fmt.Errorf("%s must not be empty", path)
			}
			return fmt.Errorf("%s must be at least %d characters long, not %d", path, *m, n)
		}
		if m := s.MaxLength; m != nil && n > *m {
			return fmt.Errorf("%s must be at most %d characters long, not %d", path, *m, n)
		}
	case []any:
		if m := s.MinItems; m != nil && len(x) < *m {
			return fmt.Errorf("%s must hold at least %d items, not %d", path, *m, len(x))
		}
		if m := s.MaxItems; m != nil && len(x) > *m {
			return fmt.Errorf("%s must hold at most %d items, not %d", path, *m, len(x))
		}
		for i, item := range x {
			if err := Value(fmt.Sprintf("%s[%d]", path, i), item, s.Items); err != nil {
				return err
			}
		}
	case map[string]any:
		return object(path, x, s)
	}
	return nil
}

func number(path string, f float64, s *jsonschema.Schema) error {
	switch {
	case s.ExclusiveMinimum != nil && f <= *s.ExclusiveMinimum:
		return fmt.Errorf("%s must be greater than %s, not %s", path, num(*s.ExclusiveMinimum), num(f))
	case s.Minimum != nil && f < *s.Minimum:
		return fmt.Errorf("%s must be at least %s, not %s", path, num(*s.Minimum), num(f))
	case s.ExclusiveMaximum != nil && f >= *s.ExclusiveMaximum:
		return fmt.Errorf("%s must be less than %s, not %s", path, num(*s.ExclusiveMaximum), num(f))
	case s.Maximum != nil && f > *s.Maximum:
		return fmt.Errorf("%s must be at most %s, not %s", path, num(*s.Maximum), num(f))
	}
	return nil
}

// object checks a nested object: its required members, members it does
// not allow, and each member's value.
func object(path string, obj map[string]any, s *jsonschema.Schema) error {
	for _, name := range s.Required {
		if _, given := obj[name]; !given {
			return fmt.Errorf("%s lacks its %q", path, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		if ps, ok := s.Properties[name]; ok {
			if err := Value(path+"."+name, obj[name], ps); err != nil {
				return err
			}
			continue
		}
		if s.PatternProperties != nil {
			continue // which this package does not match
		}
		if isFalse(s.AdditionalProperties) {
			return fmt.Errorf("%s may not hold %q", path, name)
		}
		if err := Value(fmt.Sprintf("%s[%q]", path, name), obj[name], s.AdditionalProperties); err != nil {
			return err
		}
	}
	return nil
}

// DidYouMean names the property of s that name misspells in case or
// separators (Python_Code, timeout-seconds, timeoutSeconds), if one does:
// " (did you mean timeout_seconds?)".
func DidYouMean(name string, s *jsonschema.Schema) string {
	fold := func(x string) string { return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(x)) }
	for _, p := range slices.Sorted(maps.Keys(s.Properties)) {
		if fold(p) == fold(name) {
			return " (did you mean " + p + "?)"
		}
	}
	return ""
}

// isFalse reports whether s is the schema that allows nothing: false, or
// {"not": {}}.
func isFalse(s *jsonschema.Schema) bool {
	return s != nil && s.Not != nil && reflect.DeepEqual(*s.Not, jsonschema.Schema{}) && reflect.DeepEqual(*s, jsonschema.Schema{Not: s.Not})
}

func typesOf(s *jsonschema.Schema) []string {
	if s.Type != "" {
		return []string{s.Type}
	}
	return s.Types
}

// hasType reports whether v, decoded from JSON, is of the JSON Schema type t.
func hasType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case float64:
		return t == "number" || t == "integer" && x == float64(int64(x))
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

func typeWords(types []string) string {
	words := make([]string, len(types))
	for i, t := range types {
		switch t {
		case "object", "array", "integer":
			words[i] = "an " + t
		case "boolean":
			words[i] = "true or false"
		case "null":
			words[i] = "null"
		default:
			words[i] = "a " + t
		}
	}
	return strings.Join(words, " or ")
}

// Describe names a JSON value's type, with the value when it is short:
// `a string ("2")`, `a number (-1)`, `an array`, `null`.
func Describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return "a number (" + num(x) + ")"
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

// literal is a schema's constant as JSON writes it, when it is short.
func literal(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return num(x)
	case int:
		return strconv.Itoa(x)
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

// equal compares a decoded JSON value with a schema's constant, which
// may be spelled in Go (an int for a JSON number).
func equal(v, c any) bool {
	if i, ok := c.(int); ok {
		c = float64(i)
	}
	return reflect.DeepEqual(v, c)
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
