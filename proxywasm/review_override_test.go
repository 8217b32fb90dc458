package main

import "testing"

// Review: the proxy drops X-Original-URL and X-Rewrite-URL before
// forwarding (internal/service/rules.go pathOverrideFields: IIS URL
// Rewrite, Symfony and Zend serve the path they name), so the upstream
// serves the path that was matched. The filter matches the :path and lets
// both fields through to the upstream: "/public" with X-Original-URL:
// /admin is matched (unlimited) as /public and served as /admin. The list
// lives in the service, not in internal/pipeline.
func TestReviewFilterPathOverrides(t *testing.T) {
	host := emulate(t, `{"rules":[{"name":"admin","endpoint":"/admin","strategy":"fixed","limit":1,"window":"1m","key_by":"global"}]}`)
	for _, f := range []string{"x-original-url", "x-rewrite-url"} {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, get("/public", [2]string{f, "/admin"}), true)
		if local := host.GetSentLocalResponse(id); local == nil {
			if v := headerValue(host.GetCurrentRequestHeaders(id), f); v != "" {
				t.Errorf("%s: %q forwarded to the upstream beside :path /public (the proxy drops it)", f, v)
			}
		}
	}
}
