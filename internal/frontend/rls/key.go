package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// descriptorKey is the store key of a request's descriptor: its entries
// "key=value" joined by "|", every byte outside printable ASCII and every
// '%', '=' and '|' percent-encoded, so the encoding is injective (two
// descriptors share a key only when their entries are equal) and the key is
// printable ASCII, which every store (PostgreSQL's text too) holds. An entry
// whose value shares a count with every value matching a wildcard
// (shared[i], share_threshold) is written "key==wildcard" instead: a value
// never starts with a raw '=', so the shared count is apart from every
// single value's, the wildcard written literally included. A key longer
// than max bytes is replaced by "sha256:" and the hex SHA-256 of the
// encoding. The domain is the limiter's base key, so it is not included.
func descriptorKey(entries []*entry, shared []string, max int) string {
	value := func(i int) (string, bool) {
		if i < len(shared) && shared[i] != "" {
			return shared[i], true
		}
		return entries[i].GetValue(), false
	}
	n := 0
	plain := true
	for i, e := range entries {
		v, _ := value(i)
		n += len(e.GetKey()) + len(v) + 3
		if plain && (!safe(e.GetKey()) || !safe(v)) {
			plain = false
		}
	}
	var b strings.Builder
	if plain {
		b.Grow(n)
	} else {
		b.Grow(n * 2)
	}
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		escape(&b, e.GetKey(), plain)
		b.WriteByte('=')
		v, wild := value(i)
		if wild {
			b.WriteByte('=')
		}
		escape(&b, v, plain)
	}
	k := b.String()
	if len(k) > max {
		sum := sha256.Sum256([]byte(k))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return k
}

// safe reports whether s needs no escaping.
func safe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '%' || c == '=' || c == '|' {
			return false
		}
	}
	return true
}

func escape(b *strings.Builder, s string, plain bool) {
	if plain {
		b.WriteString(s)
		return
	}
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '%' || c == '=' || c == '|' {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}
