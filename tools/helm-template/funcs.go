package main

// The template functions: sprig's text/template library without env and expandenv (Helm drops
// them to keep rendering hermetic), plus Helm's own: toYaml, fromYaml, fromYamlArray, toJson,
// fromJson, fromJsonArray, include, tpl, required and lookup (empty: there is no cluster).

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

// recursionLimit is how deep `include` may nest the same template, as in Helm.
const recursionLimit = 1000

// Errors of `required` are wrapped so the message can be found again in text/template's error.
const (
	requiredStart = "HELM_ERR_START"
	requiredEnd   = "HELM_ERR_END"
)

func baseFuncs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	extra := template.FuncMap{
		"toYaml":        toYAML,
		"fromYaml":      fromYAML,
		"fromYamlArray": fromYAMLArray,
		"toJson":        toJSON,
		"fromJson":      fromJSON,
		"fromJsonArray": fromJSONArray,
		"required":      required,
		"lookup": func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
			return map[string]interface{}{}, nil
		},
		// Replaced per template set (they close over it); here so parsing knows them.
		"include": func(string, interface{}) string { return "" },
		"tpl":     func(string, interface{}) string { return "" },
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// toYAML is Helm's toYaml: sigs.k8s.io/yaml (JSON field names, sorted keys), no trailing newline,
// and an empty string when the value cannot be marshalled.
func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

// fromYAML parses a YAML map; on error the map holds the message under "Error", as in Helm.
func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

// required fails the render with msg when val is nil or an empty string.
func required(msg string, val interface{}) (interface{}, error) {
	if val == nil {
		return val, fmt.Errorf("%s%s%s", requiredStart, msg, requiredEnd)
	}
	if s, ok := val.(string); ok && s == "" {
		return val, fmt.Errorf("%s%s%s", requiredStart, msg, requiredEnd)
	}
	return val, nil
}

// bindFuncs installs include and tpl on t, closing over it: include executes a named template
// of t's set; tpl parses a string as a template in a copy of t's set and executes it.
func bindFuncs(t *template.Template) {
	depth := map[string]int{}
	t.Funcs(template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			if depth[name] > recursionLimit {
				return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
			}
			depth[name]++
			defer func() { depth[name]-- }()
			var buf strings.Builder
			err := t.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"tpl": func(text string, vals interface{}) (string, error) {
			name := "tpl"
			if m, ok := vals.(map[string]interface{}); ok {
				if tm, ok := m["Template"].(map[string]interface{}); ok {
					if n, ok := tm["Name"].(string); ok {
						name = n
					}
				}
			}
			clone, err := t.Clone()
			if err != nil {
				return "", err
			}
			bindFuncs(clone)
			if _, err := clone.New(name).Parse(text); err != nil {
				return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
			}
			var buf strings.Builder
			if err := clone.ExecuteTemplate(&buf, name, vals); err != nil {
				return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
			}
			return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
		},
	})
}
