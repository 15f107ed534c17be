package main

// How pyrun reads its config file (--config): a JSON object whose keys are
// the flags' names in snake_case, each value set as its flag would be.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// applyConfigFile sets every flag the file names, except those in skip.
// Keys that start with "//" are comments.
func applyConfigFile(fs *flag.FlagSet, path string, skip map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for key, raw := range keys {
		if strings.HasPrefix(key, "//") {
			continue // a comment
		}
		name := strings.ReplaceAll(key, "_", "-")
		if alias, ok := configAliases[key]; ok {
			name = alias
		}
		if name == "config" || fs.Lookup(name) == nil || configKey(name) != key {
			return fmt.Errorf("config %s: unknown key %q", path, key)
		}
		if skip[name] {
			continue
		}
		val, err := configValue(raw)
		if err != nil {
			return fmt.Errorf("config %s: key %q: %w", path, key, err)
		}
		if err := fs.Set(name, val); err != nil {
			return fmt.Errorf("config %s: key %q: %w", path, key, err)
		}
	}
	return nil
}

// configAliases are config keys that are not their flag's name in
// snake_case: a list reads better in the plural.
var configAliases = map[string]string{"mounts": "mount"}

// configKey is the config file's key for a flag.
func configKey(flagName string) string {
	for key, name := range configAliases {
		if name == flagName {
			return key
		}
	}
	return strings.ReplaceAll(flagName, "-", "_")
}

// configValue turns a JSON value into the flag syntax: strings as they are,
// numbers and booleans as written, lists of strings joined by commas.
func configValue(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return string(raw), nil
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			s, ok := x.(string)
			if !ok || strings.Contains(s, ",") {
				return "", errors.New("a list must hold strings without commas")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return string(raw), nil // JSON-valued settings (mcp_servers) take it as it is
	case nil:
		return "", errors.New("null is not a value; leave the key out for the default")
	}
	return "", fmt.Errorf("unsupported value %s", raw)
}
