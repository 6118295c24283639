package main

// Values: reading values files, Helm's deep merge of user-supplied values, its coalescing with
// the chart's defaults, and the --set / --set-string / --set-file syntax (Helm's strvals).

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// readValues parses a values document the way Helm's chartutil.ReadValues does: YAML converted
// to JSON and decoded into a map, so every number is a float64.
func readValues(data []byte) (map[string]interface{}, error) {
	vals := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		return nil, err
	}
	if vals == nil {
		vals = map[string]interface{}{}
	}
	return vals, nil
}

// mergeMaps is Helm's merge of user-supplied values (-f files, --set...): maps merge key by
// key, recursively; anything else in b replaces what a holds.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]interface{}); ok {
			if bv, ok := out[k]; ok {
				if bvm, ok := bv.(map[string]interface{}); ok {
					out[k] = mergeMaps(bvm, vm)
					continue
				}
			}
		}
		out[k] = v
	}
	return out
}

// coalesce merges the chart's default values under the user's, as Helm's CoalesceValues does:
// the user's value wins, maps coalesce recursively, and a user-supplied null deletes the key.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	out := copyMap(user)
	for k, dv := range defaults {
		uv, present := out[k]
		switch {
		case !present:
			out[k] = copyValue(dv)
		case uv == nil:
			delete(out, k)
		default:
			um, uok := uv.(map[string]interface{})
			dm, dok := dv.(map[string]interface{})
			if uok && dok {
				out[k] = coalesce(um, dm)
			} else if uok != dok && dv != nil {
				warn("values: %s is a %s in the chart's values.yaml but a %s in the overrides; the override wins",
					k, kindOf(dv), kindOf(uv))
			}
		}
	}
	return out
}

func kindOf(v interface{}) string {
	switch v.(type) {
	case map[string]interface{}:
		return "table"
	case []interface{}:
		return "list"
	default:
		return "scalar"
	}
}

func copyMap(m map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		return copyMap(t)
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = copyValue(e)
		}
		return out
	default:
		return v
	}
}

// setMode is how a --set* flag turns its right-hand side into a value.
type setMode int

const (
	setTyped  setMode = iota // --set: true/false/null/integers are typed, the rest are strings
	setString                // --set-string: always a string
	setFile                  // --set-file: the right-hand side is a path; the value is its content
)

// parseSet applies one --set, --set-string or --set-file argument (`a.b=v,c[0]=w`) to dest.
func parseSet(arg string, mode setMode, dest map[string]interface{}) error {
	p := &strvals{src: []rune(arg), mode: mode}
	for !p.done() {
		key, err := p.key()
		if err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
		val, err := p.value()
		if err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
		if err := setPath(dest, key, val); err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
	}
	return nil
}

type strvals struct {
	src  []rune
	pos  int
	mode setMode
}

func (p *strvals) done() bool { return p.pos >= len(p.src) }

// keySegment is one step of a key path: a map key, or a list index.
type keySegment struct {
	name  string
	index int
	list  bool
}

// key reads `a.b\.c[0].d` up to the `=`; a backslash escapes the next character.
func (p *strvals) key() ([]keySegment, error) {
	var segs []keySegment
	var cur strings.Builder
	flush := func() error {
		if cur.Len() == 0 {
			return fmt.Errorf("empty key segment")
		}
		segs = append(segs, keySegment{name: cur.String()})
		cur.Reset()
		return nil
	}
	for !p.done() {
		c := p.src[p.pos]
		p.pos++
		switch c {
		case '\\':
			if p.done() {
				return nil, fmt.Errorf("a key ends with a backslash")
			}
			cur.WriteRune(p.src[p.pos])
			p.pos++
		case '.':
			if cur.Len() == 0 && len(segs) > 0 && segs[len(segs)-1].list {
				continue // `a[0].b`
			}
			if err := flush(); err != nil {
				return nil, err
			}
		case '[':
			if cur.Len() > 0 {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			end := p.pos
			for end < len(p.src) && p.src[end] != ']' {
				end++
			}
			if end >= len(p.src) {
				return nil, fmt.Errorf("an unclosed [ in the key")
			}
			i, err := strconv.Atoi(string(p.src[p.pos:end]))
			if err != nil || i < 0 {
				return nil, fmt.Errorf("list index %q is not a non-negative integer", string(p.src[p.pos:end]))
			}
			segs = append(segs, keySegment{index: i, list: true})
			p.pos = end + 1
		case '=':
			if cur.Len() > 0 {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			if len(segs) == 0 {
				return nil, fmt.Errorf("no key before =")
			}
			return segs, nil
		case ',':
			return nil, fmt.Errorf("key %q has no value", cur.String())
		default:
			cur.WriteRune(c)
		}
	}
	return nil, fmt.Errorf("key %q has no value (no =)", cur.String())
}

// value reads the right-hand side up to an unescaped `,`; `{a,b}` is a list with --set and
// --set-string.
func (p *strvals) value() (interface{}, error) {
	if p.mode != setFile && !p.done() && p.src[p.pos] == '{' {
		p.pos++
		var list []interface{}
		for {
			s, end := p.scalar(",}")
			list = append(list, p.typed(s))
			if end == '}' {
				break
			}
			if end == 0 {
				return nil, fmt.Errorf("an unclosed { in the value")
			}
		}
		if !p.done() {
			if p.src[p.pos] != ',' {
				return nil, fmt.Errorf("unexpected %q after a list", p.src[p.pos])
			}
			p.pos++
		}
		if len(list) == 1 && list[0] == "" {
			list = []interface{}{}
		}
		return list, nil
	}
	s, _ := p.scalar(",")
	if p.mode == setFile {
		data, err := os.ReadFile(s)
		if err != nil {
			return nil, fmt.Errorf("--set-file: %w", err)
		}
		return string(data), nil
	}
	return p.typed(s), nil
}

// scalar reads up to one of the stop runes (consumed, and returned; 0 at the end).
func (p *strvals) scalar(stops string) (string, rune) {
	var b strings.Builder
	for !p.done() {
		c := p.src[p.pos]
		p.pos++
		if c == '\\' && !p.done() {
			b.WriteRune(p.src[p.pos])
			p.pos++
			continue
		}
		if strings.ContainsRune(stops, c) {
			return b.String(), c
		}
		b.WriteRune(c)
	}
	return b.String(), 0
}

// typed is Helm's typedVal: --set turns true/false/null and integers (not starting with 0) into
// typed values; --set-string keeps strings.
func (p *strvals) typed(s string) interface{} {
	if p.mode != setTyped {
		return s
	}
	switch {
	case strings.EqualFold(s, "true"):
		return true
	case strings.EqualFold(s, "false"):
		return false
	case strings.EqualFold(s, "null"):
		return nil
	case s == "0":
		return int64(0)
	}
	if len(s) > 0 && s[0] != '0' {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
	}
	return s
}

// setPath sets dest[path...] = val, creating maps and lists on the way.
func setPath(dest map[string]interface{}, path []keySegment, val interface{}) error {
	var set func(cur interface{}, segs []keySegment) (interface{}, error)
	set = func(cur interface{}, segs []keySegment) (interface{}, error) {
		if len(segs) == 0 {
			return val, nil
		}
		s := segs[0]
		if s.list {
			list, _ := cur.([]interface{})
			if s.index > 65536 {
				return nil, fmt.Errorf("list index %d is too large", s.index)
			}
			for len(list) <= s.index {
				list = append(list, nil)
			}
			v, err := set(list[s.index], segs[1:])
			if err != nil {
				return nil, err
			}
			list[s.index] = v
			return list, nil
		}
		m, ok := cur.(map[string]interface{})
		if !ok {
			m = map[string]interface{}{}
		}
		v, err := set(m[s.name], segs[1:])
		if err != nil {
			return nil, err
		}
		m[s.name] = v
		return m, nil
	}
	if path[0].list {
		return fmt.Errorf("a key cannot start with a list index")
	}
	v, err := set(dest[path[0].name], path[1:])
	if err != nil {
		return err
	}
	dest[path[0].name] = v
	return nil
}
