package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// responseMetadata is a response's dynamic_metadata when
// Options.ResponseMetadata is set, in the shape envoyproxy/ratelimit gives
// it with RESPONSE_DYNAMIC_METADATA=true: "domain"; "descriptors", one
// {"entries": ["key=value", ...], "hitsAddend": n} per descriptor
// (hitsAddend when the descriptor sets it); the request's "hitsAddend" when
// not 0; and "metadata", the metadata of the descriptors whose limit passed
// them (status OK: not a quota without room, not replaced, not unlimited),
// merged in request order: a field two give is the first one's, except
// that two mappings are merged field by field. Envoy's rate limit filter
// puts it in the request's dynamic metadata (namespace
// envoy.filters.http.ratelimit), for routing and access logs.
func responseMetadata(req *rlsv3.RateLimitRequest, items []item, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	descs := make([]*structpb.Value, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs[i] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	out := &structpb.Struct{Fields: map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}}
	if h := req.GetHitsAddend(); h != 0 {
		out.Fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range items {
		l := items[i].limit()
		if l == nil || l.Unlimited || l.Metadata == nil || i >= len(statuses) || statuses[i].GetCode() != rlsv3.RateLimitResponse_OK {
			continue
		}
		mergeStruct(merged, l.Metadata)
	}
	if len(merged.Fields) > 0 {
		out.Fields["metadata"] = structpb.NewStructValue(merged)
	}
	return out
}

// shadowMetadata is the outcome of every shadow limit (the shadow_limits
// extension) of the request's decided descriptors, for the response's
// dynamic_metadata field "shadowLimits": one {"descriptor": index in the
// request, "limit": name, "allowed": whether it admits (false: a
// would-deny), "charged": whether it was charged, "remaining"} per shadow
// limit, in request order (a descriptor given twice is reported at its
// first); nil when there is none. It is sent whether or not
// Options.ResponseMetadata is set: a configuration without shadow_limits
// (every portable one) never has any.
func shadowMetadata(items []item) *structpb.Value {
	var out []*structpb.Value
	for i := range items {
		it := &items[i]
		l := it.limit()
		if l == nil || it.same >= 0 || !it.decided || it.each == nil {
			continue
		}
		for j, sl := range l.ShadowLimits {
			r := &it.each[1+j]
			out = append(out, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"descriptor": structpb.NewNumberValue(float64(i)),
				"limit":      structpb.NewStringValue(sl.Name),
				"allowed":    structpb.NewBoolValue(r.Allowed),
				"charged":    structpb.NewBoolValue(it.taken && r.Allowed),
				"remaining":  structpb.NewNumberValue(float64(r.Remaining)),
			}}))
		}
	}
	if out == nil {
		return nil
	}
	return structpb.NewListValue(&structpb.ListValue{Values: out})
}

// mergeStruct adds src's fields to dst: a field dst lacks is copied (never
// shared: the configuration's Struct stays as loaded); two mappings are
// merged; any other field dst has is kept.
func mergeStruct(dst, src *structpb.Struct) {
	if dst.Fields == nil {
		dst.Fields = map[string]*structpb.Value{}
	}
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(have.GetStructValue(), v.GetStructValue())
		}
	}
}
