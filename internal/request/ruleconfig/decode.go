// Package ruleconfig holds the rule shape shared by rl-wasm-host's
// configuration file (internal/frontend/service) and the proxy-wasm filter's plugin
// configuration (proxywasm): typed structs for rules and limits, their
// JSON decoding, and their validation with per-field messages. The typed
// decoding serves other formats too (internal/frontend/rls reads
// envoyproxy/ratelimit's files through it with structs of its own).
//
// Decoding is typed but forgiving, so that one pass reports every mistake:
// a field's value of the wrong kind is kept as a description of what was
// given (Value.Got), an object's keys that no field takes are kept by name
// (Fields.Unknown), and the checks (Checker, Rule.Check, CheckLimits) turn
// them into Problems naming the rule and the field's path, such as
// rules[1] "pay": limits[0].window. A key given twice in one object, at any
// depth, is refused, as is anything after the top-level value: by Decode
// for a document, by the checks (Fields.Repeated) for an object decoded
// alone, such as a Limit through its UnmarshalJSON. Names are matched
// exactly, never folded as encoding/json folds them: "Limit" or "LIMIT"
// is no "limit" but an unknown field, reported with the spelling wanted
// (Spelling).
//
// The package imports only the standard library and core, so a wasip1
// build (the filter) can use it; YAML is the service's business: it turns
// YAML into JSON before decoding.
package ruleconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Fields is embedded in every object of a configuration: what decoding
// found of the object itself.
type Fields struct {
	// Set reports that the object was given.
	Set bool `json:"-"`
	// Got describes what was given instead of an object ("the string
	// \"x\""); "" if an object was.
	Got string `json:"-"`
	// Unknown lists the object's keys that no field takes, in order.
	Unknown []string `json:"-"`
	// Repeated lists the keys given more than once, in order; the first
	// value given is kept. (Decode refuses a document with one; a Limit
	// decoded alone, through its UnmarshalJSON, keeps them here for the
	// checks to report.)
	Repeated []string `json:"-"`
	// known lists the keys fields take, in declaration order, for
	// messages.
	known []string
}

func (f *Fields) fields() *Fields { return f }

// Object is a struct embedding Fields: a configuration object Decode can
// fill.
type Object interface{ fields() *Fields }

// Value is a scalar field: a string, an integer or a boolean.
type Value[T string | int64 | bool] struct {
	// V is the value given (zero if none or if of the wrong kind).
	V T
	// Set reports that the field was given, of whatever kind.
	Set bool
	// Got describes what was given instead of a T ("the number 10"); ""
	// when the field is absent or of the right kind.
	Got string
}

// String, Int and Bool are the scalar fields. An Int accepts only a JSON
// number written as an integer ("10", "-3"): "10.0" and "1e3" are
// refused, as are YAML floats (AppendJSON writes them with a fraction or
// an exponent), so every front end reads integers alike, strictly (as
// envoyproxy/ratelimit does its counts).
type (
	String = Value[string]
	Int    = Value[int64]
	Bool   = Value[bool]
)

// OK reports whether the field was given, of the right kind.
func (v Value[T]) OK() bool { return v.Set && v.Got == "" }

// UnmarshalJSON decodes b, or records what it is if it is not a T; it never
// fails.
func (v *Value[T]) UnmarshalJSON(b []byte) error {
	*v = Value[T]{Set: true}
	switch p := any(&v.V).(type) {
	case *string:
		if len(b) > 0 && b[0] == '"' && json.Unmarshal(b, p) == nil {
			return nil
		}
	case *bool:
		switch string(b) {
		case "true":
			*p = true
			return nil
		case "false":
			return nil
		}
	case *int64:
		if n, err := strconv.ParseInt(string(b), 10, 64); err == nil && b[0] != '+' {
			*p = n
			return nil
		}
	}
	v.Got = Describe(b)
	return nil
}

// List is a list field whose elements are T: a Value or an Object.
type List[T any] struct {
	Items []T
	// Set reports that the field was given, of whatever kind.
	Set bool
	// Got describes what was given instead of a list; "" if a list was.
	Got string
}

// UnmarshalJSON decodes b's elements, or records what b is if it is not a
// list; it never fails.
func (l *List[T]) UnmarshalJSON(b []byte) error {
	*l = List[T]{Set: true}
	if len(b) == 0 || b[0] != '[' {
		l.Got = Describe(b)
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return err
	}
	l.Items = []T{}
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		var e T
		decodeValue(raw, reflect.ValueOf(&e).Elem())
		l.Items = append(l.Items, e)
	}
	return nil
}

// Strings is a list of strings that may also be given as one string
// ("methods": "GET").
type Strings struct{ List[String] }

// UnmarshalJSON decodes a string as a list of one.
func (s *Strings) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var v String
		_ = v.UnmarshalJSON(b)
		s.List = List[String]{Items: []String{v}, Set: true}
		return nil
	}
	return s.List.UnmarshalJSON(b)
}

// Decode decodes a JSON document into v, a pointer to an Object; a
// document that is a list is read as {"rules": list}. The problems it
// returns are the document's: not JSON, a key given twice, data after the
// value. What is wrong with the fields is in v, for the checks to report.
func Decode(data []byte, v Object) []Problem {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return []Problem{{Message: "JSON: empty configuration: want an object with \"rules\" (or a list of rules)"}}
		}
		return []Problem{{Message: "JSON: " + jsonErr(data, err)}}
	}
	if _, err := dec.Token(); err != io.EOF {
		return []Problem{{Message: "JSON: data after the top-level value"}}
	}
	if msg := DuplicateKey(data); msg != "" {
		return []Problem{{Message: "JSON: " + msg}}
	}
	rv := reflect.ValueOf(v).Elem()
	if raw[0] == '[' {
		if fv, ok := field(rv, "rules"); ok {
			v.fields().Set = true
			v.fields().known = knownKeys(rv.Type(), nil)
			decodeValue(raw, fv)
			return nil
		}
	}
	decodeValue(raw, rv)
	return nil
}

// decodeValue decodes raw into fv: through its UnmarshalJSON (the Value
// and List types, which never fail), or field by field if it is an
// Object.
func decodeValue(raw json.RawMessage, fv reflect.Value) {
	if u, ok := fv.Addr().Interface().(json.Unmarshaler); ok {
		_ = u.UnmarshalJSON(raw)
		return
	}
	if o, ok := fv.Addr().Interface().(Object); ok {
		decodeObject(raw, fv, o.fields())
		return
	}
	panic(fmt.Sprintf("ruleconfig: field type %s is neither a Value, a List nor an Object", fv.Type()))
}

// decodeObject decodes an object into the struct rv, whose Fields is f.
func decodeObject(raw json.RawMessage, rv reflect.Value, f *Fields) {
	f.Set = true
	f.known = knownKeys(rv.Type(), nil)
	if raw[0] != '{' {
		f.Got = Describe(raw)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	_, _ = dec.Token() // '{'; raw is valid JSON
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return
		}
		if seen[key] {
			f.Repeated = append(f.Repeated, key)
			continue
		}
		seen[key] = true
		if fv, ok := field(rv, key); ok {
			decodeValue(v, fv)
		} else {
			f.Unknown = append(f.Unknown, key)
		}
	}
}

// field finds the field of struct rv tagged key, in rv or in a struct it
// embeds.
func field(rv reflect.Value, key string) (reflect.Value, bool) {
	t := rv.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		switch {
		case name == "-" || !sf.IsExported():
		case name == "" && sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			if fv, ok := field(rv.Field(i), key); ok {
				return fv, true
			}
		case name == key:
			return rv.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// knownKeys appends the keys t's fields take to keys.
func knownKeys(t reflect.Type, keys []string) []string {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		switch {
		case name == "-" || !sf.IsExported():
		case name == "" && sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			keys = knownKeys(sf.Type, keys)
		case name != "":
			keys = append(keys, name)
		}
	}
	return keys
}

// Describe says what a JSON value is, for messages: "the string \"x\"",
// "the number 10", "the boolean true", "nothing (null)", "a list", "an
// object". Strings and numbers are clipped to 32 bytes.
func Describe(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		var s string
		if json.Unmarshal(b, &s) == nil {
			return fmt.Sprintf("the string %q", Clip(s, 32))
		}
		return "a string"
	case 't', 'f':
		return "the boolean " + string(b)
	case 'n':
		return "nothing (null)"
	case '[':
		return "a list"
	case '{':
		return "an object"
	}
	return "the number " + Clip(string(b), 32)
}

// Clip shortens s to n bytes and "..." for a message.
func Clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// jsonErr adds a line number to a JSON syntax error.
func jsonErr(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("line %d: %v", lineAt(data, se.Offset), err)
	}
	return err.Error()
}

func lineAt(data []byte, off int64) int {
	return 1 + bytes.Count(data[:min(int(off), len(data))], []byte("\n"))
}

// DuplicateKey finds a key given twice in one JSON object, at any depth
// (which encoding/json would silently resolve to the last, and another
// parser in front of us perhaps to the first), and describes it, or "".
// data is valid JSON.
func DuplicateKey(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj  bool
		seen map[string]bool
		key  bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				if top.seen[k] {
					return fmt.Sprintf("line %d: key %q given twice in one object", lineAt(data, dec.InputOffset()), Clip(k, 64))
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, &frame{obj: tok == json.Delim('{'), seen: map[string]bool{}, key: tok == json.Delim('{')})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return ""
		}
		if top := stack[len(stack)-1]; top.obj {
			top.key = true // a value ended: a key comes next
		}
	}
}

// AppendJSON appends doc, a tree of the values a YAML decoder (yaml.v3)
// gives an any, to b as JSON, so that YAML is decoded and checked as JSON
// is. A float is written with a fraction or exponent ("30.0"), so that it
// stays apart from an integer; a number JSON cannot hold (.inf, .nan)
// becomes a string, and a key that is not a string its text. Two keys of
// one mapping with the same text (1 and "1") are an error: JSON would keep
// one of them.
func AppendJSON(b []byte, doc any) ([]byte, error) {
	switch v := doc.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case uint64:
		return strconv.AppendUint(b, v, 10), nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return strconv.AppendQuote(b, strconv.FormatFloat(v, 'g', -1, 64)), nil
		}
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return append(b, s...), nil
	case string:
		s, _ := json.Marshal(v)
		return append(b, s...), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = AppendJSON(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b = append(b, ',')
			}
			b, _ = AppendJSON(b, k)
			b = append(b, ':')
			var err error
			if b, err = AppendJSON(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case map[any]any:
		m := make(map[string]any, len(v))
		given := make(map[string]any, len(v))
		for k, e := range v {
			s := fmt.Sprint(k)
			if k2, dup := given[s]; dup {
				x, y := yamlKey(k), yamlKey(k2)
				if x > y {
					x, y = y, x
				}
				return nil, fmt.Errorf("key %q given twice in one mapping (as %s and %s): quote keys so they differ", Clip(s, 64), x, y)
			}
			given[s], m[s] = k, e
		}
		return AppendJSON(b, m)
	}
	return AppendJSON(b, fmt.Sprint(doc))
}

// yamlKey writes a mapping's key for a message: a string quoted, a float
// with its fraction ("1.0"), anything else as its text.
func yamlKey(k any) string {
	switch k := k.(type) {
	case string:
		return strconv.Quote(Clip(k, 64))
	case float64:
		b, _ := AppendJSON(nil, k)
		return string(b)
	}
	return Clip(fmt.Sprint(k), 64)
}
