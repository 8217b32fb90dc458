package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// The decision API reads its bodies with github.com/go-json-experiment/json
// (encoding/json/v2 as a module; in the standard library it is still behind
// GOEXPERIMENT=jsonv2), never encoding/json: encoding/json matches a name
// to a field case-insensitively, with Unicode folding, the last one given
// winning, so {"key":"other","Key":"victim"} decided "victim" ("RULE",
// "ITEMS", "\u212aey" with a Kelvin sign: the same), and a proxy in front
// reading the first spelling would check one key while this service
// decided another. The v2 decoder reads exactly one spelling of each
// field, the documented one, by construction: names match exactly, a name
// given twice in one object (however it is escaped) is a syntax error,
// and so is invalid UTF-8; RejectUnknownMembers refuses every other name.
// A refused name that is another spelling of a field is answered naming
// the spelling wanted (ruleconfig.Spelling).

// readJSON decodes the body into v, strictly: one JSON value, no unknown
// fields, every field in its one documented spelling and given once
// (decodeStrict), at most maxBody bytes. It answers the error itself and
// returns false on failure. (The method is checked before: apiEndpoints.)
func (s *Service) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.apiError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
		} else {
			s.apiError(w, http.StatusBadRequest, "invalid_json", "reading the body: "+err.Error())
		}
		return false
	}
	if code, msg := decodeStrict(data, v); code != "" {
		s.apiError(w, http.StatusBadRequest, code, msg)
		return false
	}
	return true
}

// refusedFields are fields a request may carry only to be refused with a
// message of their own (resolve): they are no field to suggest.
var refusedFields = map[string]bool{"delta": true}

// decodeStrict decodes data, one JSON value, into v (a pointer to a
// struct) strictly. On failure it returns the API's error code and a
// message naming the field by its path ("items[1].cost").
func decodeStrict(data []byte, v any) (code, msg string) {
	if len(bytes.TrimSpace(data)) == 0 {
		return "invalid_json", "empty body: want a JSON object"
	}
	err := json.Unmarshal(data, v, json.RejectUnknownMembers(true))
	if err == nil {
		return "", ""
	}
	var ae *actualError
	var se *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &ae):
		return "invalid_cost", ae.Error()
	case errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName):
		path := jsonPath(se.JSONPointer)
		for tok := range se.JSONPointer.Tokens() {
			if tok == "limits" {
				// Inline limits' own problems are invalid_limits.
				return "invalid_limits", path + ": given twice in one object"
			}
		}
		return "invalid_json", path + ": given twice in one object (give each field once, as documented)"
	case errors.As(err, &se):
		return "invalid_json", "malformed JSON: " + strings.TrimPrefix(se.Error(), "jsontext: ")
	case errors.As(err, &sem) && errors.Is(sem.Err, json.ErrUnknownName):
		name, where := sem.JSONPointer.LastToken(), ""
		if parent := sem.JSONPointer.Parent(); parent != "" {
			where = " in " + jsonPath(parent)
		}
		known := knownFields(reflect.TypeOf(v), sem.JSONPointer.Parent())
		if want := ruleconfig.Spelling(name, known); want != "" {
			return "unknown_field", fmt.Sprintf("unknown field %+q%s: names are case-sensitive; want %q", ruleconfig.Clip(name, 64), where, want)
		}
		return "unknown_field", fmt.Sprintf("unknown field %+q%s (want %s)", ruleconfig.Clip(name, 64), where, strings.Join(known, ", "))
	case errors.As(err, &sem):
		path, got := jsonPath(sem.JSONPointer), jsonKindName(sem)
		switch sem.JSONPointer.LastToken() {
		case "cost":
			return "invalid_cost", fmt.Sprintf("%s: want an integer between 0 and %d, got %s", path, core.MaxCost, got)
		case "estimate":
			return "invalid_cost", fmt.Sprintf("%s: want an integer between 1 and %d, got %s", path, core.MaxCost, got)
		case "delta":
			return "invalid_cost", path + ": " + deltaRefused
		}
		if path == "" {
			return "invalid_json", "want a JSON object, got " + got
		}
		return "invalid_json", fmt.Sprintf("field %q: want %s, got %s", path, jsonTypeName(sem.GoType), got)
	}
	return "invalid_json", "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

// jsonPath writes a JSON pointer as the API's messages name a field:
// "/items/1/cost" as "items[1].cost".
func jsonPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 32); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// knownFields lists the JSON names of the struct at p within a value of
// type t (following pointers, struct fields and list elements), in
// declaration order, refusedFields left out.
func knownFields(t reflect.Type, p jsontext.Pointer) []string {
	for tok := range p.Tokens() {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Slice, reflect.Array:
			t = t.Elem()
		case reflect.Struct:
			f, ok := fieldByName(t, tok)
			if !ok {
				return nil
			}
			t = f.Type
		default:
			return nil
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" && !refusedFields[name] {
			names = append(names, name)
		}
	}
	return names
}

// fieldByName finds t's field whose JSON name is name.
func fieldByName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); jsonName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// jsonName is f's name in JSON, "" for none.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// jsonTypeName says what a Go type is in JSON's words, so that no Go type
// name reaches an API error.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "something else"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}

// jsonKindName names what a semantic error found ("a string", "a number
// out of range or not an integer" where an integer was wanted).
func jsonKindName(e *json.SemanticError) string {
	switch e.JSONKind {
	case '0':
		if jsonTypeName(e.GoType) == "an integer" {
			return "a number out of range or not an integer"
		}
		return "a number"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "a list"
	}
	return "something else"
}
