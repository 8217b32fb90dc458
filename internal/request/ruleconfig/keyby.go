package ruleconfig

import (
	"fmt"
	"strings"
)

// KeyKind is where a rule's key comes from.
type KeyKind uint8

// The key sources. KeyKinds lists them; it is the one list parsers,
// messages and tests read.
const (
	// KeyIP keys by the client's address (its network: see the front
	// end's prefix lengths).
	KeyIP KeyKind = iota + 1
	// KeyAPIKey keys by an API key read from exactly one header field
	// (KeyBy.Name): "authorization" (the default) takes the token of
	// "Authorization: Bearer <key>"; any other field its whole value.
	// The key is kept as a digest, never as the secret.
	KeyAPIKey
	// KeyHeader keys by the value of one header field (KeyBy.Name).
	KeyHeader
	// KeyQuery keys by the value of one query parameter (KeyBy.Name).
	KeyQuery
	// KeyPath keys by the request's path in its matched form (the filter
	// only: Options.PathKey).
	KeyPath
	// KeyGlobal is one key for every request.
	KeyGlobal
)

// keyKinds are the kinds' names in key_by, in KeyKind order; a kind that
// takes a name is written "<kind>:<name>".
var keyKinds = [...]struct {
	kind KeyKind
	name string
	arg  string // "" when the kind takes no name; else what the name is
	opt  bool   // the name may be left out (api_key: Authorization)
	hint string // what a request without the key must do (Hint); %s: the name
}{
	{KeyIP, "ip", "", false, "the client address could not be read"},
	{KeyAPIKey, "api_key", "header", true, "send the %s header (the API key)"},
	{KeyHeader, "header", "name", false, "send the %s header"},
	{KeyQuery, "query", "name", false, "send the %s query parameter"},
	{KeyPath, "path", "", false, "send a path"},
	{KeyGlobal, "global", "", false, "global"},
}

// KeyKinds lists every key source, in order.
func KeyKinds() []KeyKind {
	out := make([]KeyKind, len(keyKinds))
	for i, k := range keyKinds {
		out[i] = k.kind
	}
	return out
}

// String is the kind's name in key_by ("ip", "api_key", ...).
func (k KeyKind) String() string {
	if k >= 1 && int(k) <= len(keyKinds) {
		return keyKinds[k-1].name
	}
	return fmt.Sprintf("KeyKind(%d)", uint8(k))
}

// KeyBy is a validated key source: a kind and, for the kinds that read one,
// the one header field or query parameter it reads (header names
// as written: front ends compare them ignoring case). Nothing else of a request is ever read for its key: a rule that
// keys by a header never falls back to another one, so a client cannot
// choose which of two places counts (a decoy in one, the real credential in
// the other).
type KeyBy struct {
	Kind KeyKind
	// Name is the header field (as written; BearerHeader for api_key
	// without one) or query parameter; "" for ip, path and global.
	Name string
}

// DefaultKeyBy is the key source of a rule that gives no key_by.
var DefaultKeyBy = KeyBy{Kind: KeyIP}

// BearerHeader is the field api_key reads unless it names another.
const BearerHeader = "authorization"

// String writes k as key_by is written: "ip", "api_key" (Authorization),
// "api_key:x-api-key", "header:x-user", "query:tenant".
func (k KeyBy) String() string {
	switch {
	case k.Kind == KeyAPIKey && k.Name == BearerHeader:
		return "api_key"
	case k.Name != "":
		return k.Kind.String() + ":" + k.Name
	}
	return k.Kind.String()
}

// Hint says what a request must carry for k, for a 400's message.
func (k KeyBy) Hint() string {
	switch {
	case k.Kind == KeyAPIKey && k.Name == BearerHeader:
		return "send \"Authorization: Bearer <key>\""
	case k.Kind < 1 || int(k.Kind) > len(keyKinds):
		return k.String()
	case keyKinds[k.Kind-1].arg != "":
		return fmt.Sprintf(keyKinds[k.Kind-1].hint, k.Name)
	}
	return keyKinds[k.Kind-1].hint
}

// keyByWant lists the accepted forms of key_by, for messages.
func keyByWant(path bool) string {
	var forms []string
	for _, k := range keyKinds {
		if k.kind == KeyPath && !path {
			continue
		}
		switch {
		case k.opt:
			forms = append(forms, k.name, k.name+":<"+k.arg+">")
		case k.arg != "":
			forms = append(forms, k.name+":<"+k.arg+">")
		default:
			forms = append(forms, k.name)
		}
	}
	return strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

// MaxFieldSeparators bounds the '-' and '_' in the name of a key's header
// field: front ends read the field in every spelling that differs only in
// them (pipeline.FieldSpellings, 2^n names), since CGI-style upstreams
// read X-API-Key and X_API_Key as one.
const MaxFieldSeparators = 8

// ParseKeyBy parses a rule's key_by; path allows key_by: path.
func ParseKeyBy(s string, path bool) (KeyBy, error) {
	kind, name, hasName := strings.Cut(s, ":")
	if n := strings.Count(name, "-") + strings.Count(name, "_"); hasName && kind != KeyQuery.String() && n > MaxFieldSeparators {
		return KeyBy{}, fmt.Errorf("%q: the header name has %d '-' or '_', more than %d (each is read both ways: X_API_Key is X-API-Key to CGI-style upstreams)",
			Clip(s, 64), n, MaxFieldSeparators)
	}
	for _, k := range keyKinds {
		if k.name != kind || k.kind == KeyPath && !path {
			continue
		}
		switch {
		case k.arg == "" && !hasName:
			return KeyBy{Kind: k.kind}, nil
		case k.arg == "":
		case !hasName && k.opt:
			return KeyBy{Kind: k.kind, Name: BearerHeader}, nil
		case k.kind == KeyQuery && hasName && name != "" && !strings.ContainsAny(name, " &=#?%+\t"):
			return KeyBy{Kind: k.kind, Name: name}, nil
		case k.kind == KeyAPIKey && strings.EqualFold(name, BearerHeader):
			return KeyBy{Kind: k.kind, Name: BearerHeader}, nil
		case k.kind != KeyQuery && hasName && IsToken(name):
			return KeyBy{Kind: k.kind, Name: name}, nil
		}
	}
	return KeyBy{}, fmt.Errorf("%q: want %s", Clip(s, 64), keyByWant(path))
}

// CheckKeyBy accepts a rule's key_by; "path" only if path.
func CheckKeyBy(s string, path bool) error {
	_, err := ParseKeyBy(s, path)
	return err
}
