package pipeline

// MatchMethod reports whether a request's method m matches a rule's
// methods (upper case, as ruleconfig gives them; none matches every
// method). Methods are compared ignoring ASCII case, so "get" is limited
// as GET: an upstream that serves it as GET cannot be reached around the
// rule. HEAD is limited as GET (Go's ServeMux and most frameworks serve
// HEAD with the GET handler); a rule listing HEAD matches HEAD too.
func MatchMethod(methods []string, m string) bool {
	if len(methods) == 0 {
		return true
	}
	m = upperASCII(m)
	for _, x := range methods {
		if x == m || m == "HEAD" && x == "GET" {
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
