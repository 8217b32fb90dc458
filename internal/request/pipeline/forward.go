package pipeline

// What a proxying front end forwards. The proxy and the filter forward a
// request that an upstream serves as the request that was matched:
//
//   - its path in the canonical form it was matched on (Prepare's
//     canonical path, the query as sent);
//   - without any field DropsField names: path-override fields
//     (PathOverrideFields) and the matched rule's response_cost_header, in
//     any spelling of '-' and '_' (SameField).

// PathOverrideFields are request header fields some upstreams serve
// instead of the request's path: IIS URL Rewrite, Symfony and Zend read
// X-Original-URL and X-Rewrite-URL. A request matched as /public with
// X-Original-URL: /admin would be served as /admin, around /admin's rule,
// so front ends drop them (IsPathOverride).
func PathOverrideFields() []string { return []string{"X-Original-URL", "X-Rewrite-URL"} }

// IsPathOverride reports whether a request header field name is one of
// PathOverrideFields in any spelling (SameField: case ignored, '-' and '_'
// alike, as PHP reads X_Original_URL as HTTP_X_ORIGINAL_URL).
func IsPathOverride(name string) bool {
	for _, f := range PathOverrideFields() {
		if SameField(name, f) {
			return true
		}
	}
	return false
}

// DropsField reports whether a front end drops the request header field
// name before forwarding a request that the rule whose
// response_cost_header is responseCost matched ("" for none, or no rule):
// a path-override field (IsPathOverride), or the rule's response cost
// field, in any spelling (SameField). That field is the upstream's
// message to the rate limiter about the request's actual cost; a client's
// own, forwarded, reaches an upstream that may echo request fields, or
// read one spelling for another (CGI's HTTP_X_COST_ACTUAL), and so
// report the client's cost as its own: a refund of the client's choosing.
func DropsField(name, responseCost string) bool {
	return IsPathOverride(name) || responseCost != "" && SameField(name, responseCost)
}
