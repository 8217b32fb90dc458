package service

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quota"
	"github.com/rlcore/rl/internal/request/quotaclient"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// GlobalSpec is a rule's "global" field: the rule's limit is one global
// limit, divided among the replicas by an RLQS server; this replica
// decides locally, in memory, on the token bucket the server assigns it
// (internal/request/quotaclient), and reports its usage, in units of cost,
// every ReportInterval.
type GlobalSpec struct {
	// Server is the RLQS server's host:port (field "rlqs").
	Server string
	// Domain is sent in every report (field "domain"; default
	// DefaultGlobalDomain): the server's rules may match it.
	Domain string
	// Bucket is the bucket_id (field "bucket"), 1 to 32 entries.
	Bucket map[string]string
	// ReportInterval is how often usage is reported (field
	// "report_interval", 100ms to 1m; default 1s). Give the server's
	// report_interval the same value.
	ReportInterval time.Duration
	// ClientIDMetadata, if set, is the gRPC metadata key (field
	// "client_id_metadata") under which each stream names this process
	// (a random identity drawn at its start), so that a server with the
	// same client_id_metadata continues the process's grant when its
	// stream is reopened.
	ClientIDMetadata string
	// Fallback is what this replica admits on its own while it holds no
	// live assignment (none yet, expired, abandoned): a limit of its own
	// (field "fallback"), or, nil, nothing.
	Fallback *core.Limit
}

// DefaultGlobalDomain is the domain a global rule reports in unless it
// names one.
const DefaultGlobalDomain = "rl-wasm-host"

// globalJSON is a rule's "global" as written.
type globalJSON struct {
	ruleconfig.Fields
	// The RLQS server's `host:port`: the rule's limit is one global limit the server divides among the replicas;
	// this one decides in memory on the share assigned to it. Required.
	RLQS ruleconfig.String `json:"rlqs"`
	// The domain sent in every report, which the server's rules may match. Default: `rl-wasm-host`.
	Domain ruleconfig.String `json:"domain"`
	// The bucket_id sent: 1 to 32 entries of strings, which the server's rules match. Required.
	Bucket bucketJSON `json:"bucket"`
	// How often usage is reported, 100ms to 1m; give the server's `report_interval` the same value. Default: `1s`.
	ReportInterval ruleconfig.String `json:"report_interval"`
	// The gRPC metadata key naming this process in each stream, so that a server with the same
	// `client_id_metadata` continues its grant when the stream is reopened. Default: none.
	ClientIDMeta ruleconfig.String `json:"client_id_metadata"`
	// What this replica admits on its own while it holds no live assignment: a limit's fields. Default: nothing.
	Fallback ruleconfig.Limit `json:"fallback"`
}

// bucketJSON is a bucket_id as written: an object of strings, in order.
type bucketJSON struct {
	Set     bool
	Got     string // what was given instead of an object; "" if one was
	Entries []bucketEntry
}

type bucketEntry struct {
	Key   string
	Value ruleconfig.String
}

// UnmarshalJSON keeps the object's entries, or what was given instead; it
// never fails. (A key given twice is refused by the document's decoding.)
func (b *bucketJSON) UnmarshalJSON(data []byte) error {
	*b = bucketJSON{Set: true}
	if len(data) == 0 || data[0] != '{' {
		b.Got = ruleconfig.Describe(data)
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		e := bucketEntry{Key: t.(string)}
		_ = e.Value.UnmarshalJSON(raw)
		b.Entries = append(b.Entries, e)
	}
	return nil
}

// checkGlobal validates the rule's "global" field, and what it asks of the
// rule's other fields, into spec.Global.
func (r *ruleJSON) checkGlobal(c *ruleconfig.Checker, spec *RuleSpec) {
	g := &r.Global
	if !g.Set {
		return
	}
	if !c.Object("global", "a mapping {rlqs, bucket, domain, report_interval, client_id_metadata, fallback}", &g.Fields) {
		return
	}
	out := &GlobalSpec{Domain: DefaultGlobalDomain, ReportInterval: quotaclient.DefaultReportInterval}
	if !g.RLQS.Set {
		c.Fail("global.rlqs", "missing: want the RLQS server's host:port")
	} else if s, ok := c.String("global.rlqs", g.RLQS); ok {
		host, port, err := net.SplitHostPort(s)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "":
			c.Fail("global.rlqs", "%q: want host:port, e.g. 127.0.0.1:8082", ruleconfig.Clip(s, 64))
		case perr != nil || n < 1 || n > 65535:
			c.Fail("global.rlqs", "%q: the port is not in [1, 65535]", ruleconfig.Clip(s, 64))
		}
		out.Server = s
	}
	if s, ok := c.String("global.domain", g.Domain); ok {
		if err := ruleconfig.CheckName(s); err != nil {
			c.Fail("global.domain", "%v", err)
		}
		out.Domain = s
	}
	switch b := &g.Bucket; {
	case !b.Set:
		c.Fail("global.bucket", "missing: want the bucket_id's entries, e.g. {name: %s}", ruleconfig.Clip(spec.Name, 32))
	case !c.Want("global.bucket", "a mapping of strings (the bucket_id)", b.Got):
	case len(b.Entries) == 0 || len(b.Entries) > quotaclient.MaxBucketEntries:
		c.Fail("global.bucket", "%d entries, want 1 to %d", len(b.Entries), quotaclient.MaxBucketEntries)
	default:
		out.Bucket = map[string]string{}
		for _, e := range b.Entries {
			f := ruleconfig.Join("global.bucket", e.Key)
			v, ok := c.String(f, e.Value)
			switch {
			case !ok:
			case e.Key == "" || len(e.Key) > quotaclient.MaxEntryLen:
				c.Fail("global.bucket", "a key of %d bytes, want 1 to %d", len(e.Key), quotaclient.MaxEntryLen)
			case v == "" || len(v) > quotaclient.MaxEntryLen:
				c.Fail(f, "%d bytes, want 1 to %d", len(v), quotaclient.MaxEntryLen)
			}
			out.Bucket[e.Key] = v
		}
	}
	if s, ok := c.String("global.report_interval", g.ReportInterval); ok {
		d, err := ruleconfig.ParseDuration(s)
		switch {
		case err != nil:
			c.Fail("global.report_interval", "%v", err)
		case d < quotaclient.MinReportInterval || d > quotaclient.MaxReportInterval || d%time.Millisecond != 0:
			c.Fail("global.report_interval", "%s is outside [%s, %s] (whole milliseconds)", d, quotaclient.MinReportInterval, quotaclient.MaxReportInterval)
		}
		out.ReportInterval = d
	}
	if s, ok := c.String("global.client_id_metadata", g.ClientIDMeta); ok {
		if !validMetadataKey(s) {
			c.Fail("global.client_id_metadata", "%q: want a gRPC metadata key: 1 to 64 bytes of a-z, 0-9, -, _ and ., not starting with \"grpc-\" nor ending with \"-bin\" (e.g. x-rlqs-client)",
				ruleconfig.Clip(s, 64))
		}
		out.ClientIDMetadata = s
	}
	if g.Fallback.Set {
		if lim, ok := ruleconfig.CheckLimit(c, "global.fallback", &g.Fallback); ok {
			out.Fallback = &lim
		}
		if g.Fallback.Name.Set {
			c.Fail("global.fallback.name", "a fallback has no name: it is the rule's limit, decided on this replica alone")
		}
		if g.Fallback.Shadow.Set {
			c.Fail("global.fallback.shadow", "a fallback cannot be a shadow limit: leave fallback out to deny without an assignment")
		}
	}
	// What a global rule asks of the rule's other fields.
	switch {
	case len(spec.Limits) != 1:
		if len(spec.Limits) > 1 {
			c.Fail("limits", "a global rule has one limit, the global one (%d given)", len(spec.Limits))
		}
	case spec.Limits[0].Shadow:
		c.Fail("shadow", "a global rule's limit is enforced: it cannot be a shadow limit")
	default:
		if _, err := quota.FromCore(spec.Limits[0].Limit); err != nil {
			c.Fail("limit", "the global limit cannot be divided: %v", err)
		}
	}
	if !r.KeyBy.OK() || spec.KeyBy.Kind != ruleconfig.KeyGlobal {
		c.Fail("key_by", "a global rule has one bucket for every request: set key_by: global (one RLQS bucket per key is not supported)")
	}
	if r.Overrides.Set {
		c.Fail("overrides", "a global rule's limit comes from the RLQS server: overrides per key are not supported")
	}
	if r.Shape.Set {
		c.Fail("shape", "a global rule decides on a token bucket: it cannot shape")
	}
	if r.FailOpen.Set {
		c.Fail("fail_open", "a global rule never fails: without a live assignment it applies global.fallback (or denies without one)")
	}
	spec.Global = out
}

// checkGlobals refuses two global rules of one bucket on one server: each
// would spend the whole assignment.
func checkGlobals(c *ruleconfig.Checker, rules []RuleSpec) {
	seen := map[string]string{}
	for _, r := range rules {
		if r.Global == nil {
			continue
		}
		b := quotaclient.BucketSpec{ID: r.Global.Bucket}
		k := r.Global.Server + "\x00" + r.Global.Domain + "\x00" + b.Key()
		if other, dup := seen[k]; dup {
			c.Fail("rules", "rules %q and %q take the same bucket from %s: each would spend the whole assignment; give them different buckets",
				other, r.Name, r.Global.Server)
		}
		seen[k] = r.Name
	}
}

// validMetadataKey reports whether s can name a gRPC metadata entry of
// text: lower case, not reserved by gRPC, not binary.
func validMetadataKey(s string) bool {
	if s == "" || len(s) > 64 || strings.HasPrefix(s, "grpc-") || strings.HasSuffix(s, "-bin") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
