package pipeline

import "slices"

// alsoLimits lists, for a method a rule may list, the request methods it
// limits besides itself: GET limits HEAD, which Go's ServeMux and most
// frameworks serve with the GET handler. It is the one list of such
// methods: MatchMethod and Limits read it.
var alsoLimits = map[string][]string{"GET": {"HEAD"}}

// Limits returns the request methods a rule listing method m limits (m in
// upper case, as ruleconfig gives it): m, then those alsoLimits adds.
func Limits(m string) []string { return append([]string{m}, alsoLimits[m]...) }

// MatchMethod reports whether a request's method m matches a rule's
// methods (upper case, as ruleconfig gives them; none matches every
// method): whether one of them Limits it. Methods are compared ignoring
// ASCII case, so "get" is limited as GET: an upstream that serves it as
// GET cannot be reached around the rule; a rule listing HEAD matches HEAD
// too.
func MatchMethod(methods []string, m string) bool {
	if len(methods) == 0 {
		return true
	}
	m = upperASCII(m)
	for _, x := range methods {
		if x == m || slices.Contains(alsoLimits[x], m) {
			return true
		}
	}
	return false
}

// upperASCII upper-cases ASCII letters only.
func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'a' <= c && c <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'a' <= c && c <= 'z' {
					b[j] = c - 'a' + 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
