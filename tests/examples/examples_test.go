// Package examples holds the Envoy, Istio and rate limit service examples
// of the tree (examples/) to what Envoy, Istio and the filter accept, and
// the documentation to those files: each Envoy configuration is decoded
// into go-control-plane's types (the bootstrap, every typed_config
// unpacked), validated with their ValidateAll and checked to define every
// cluster it names; Istio's WasmPlugin is checked against its fields; the
// rate limit service's configurations are loaded by internal/frontend/rls (and the
// filter's, by the filter's own parser in proxywasm's tests);
// and every such block in the Markdown files is the example file it names,
// byte for byte, or a fragment that decodes.
package examples

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// The extensions the examples name in typed_config, registered for
	// protojson and anypb.
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/rlcore/rl/internal/frontend/rls"
)

const root = "../.."

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	require.NoError(t, err)
	return b
}

// yamlToJSON turns YAML into the JSON protojson reads.
func yamlToJSON(t *testing.T, name string, y []byte) []byte {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(y, &v), "%s: YAML", name)
	j, err := json.Marshal(v)
	require.NoError(t, err, "%s", name)
	return j
}

type validator interface{ ValidateAll() error }

// envoyConfig is what the tests learn of a decoded Envoy configuration.
type envoyConfig struct {
	clusters   map[string]bool
	references []string // cluster names the configuration refers to, "where: name"
	plugins    [][]byte // the proxy-wasm filters' plugin configurations
	domains    []string // the rate limit filters' domains
	actions    []string // descriptor keys of the routes' rate limit actions
	// the rate_limit_quota filters' bucket settings
	quotaBuckets []*rlqsfilterv3.RateLimitQuotaBucketSettings
}

// inspect validates m and every message packed in an Any below it, and
// collects what envoyConfig holds.
func inspect(t *testing.T, name string, m proto.Message, ec *envoyConfig) {
	t.Helper()
	if v, ok := m.(validator); ok {
		require.NoError(t, v.ValidateAll(), "%s: %s", name, m.ProtoReflect().Descriptor().FullName())
	}
	walk(t, name, m.ProtoReflect(), ec)
}

func walk(t *testing.T, name string, m protoreflect.Message, ec *envoyConfig) {
	t.Helper()
	full := m.Descriptor().FullName()
	if full == "google.protobuf.Any" {
		a := m.Interface().(*anypb.Any)
		inner, err := a.UnmarshalNew()
		require.NoError(t, err, "%s: typed_config %s (its package must be imported here)", name, a.TypeUrl)
		inspect(t, name, inner, ec)
		return
	}
	switch x := m.Interface().(type) {
	case *rlqsfilterv3.RateLimitQuotaBucketSettings:
		ec.quotaBuckets = append(ec.quotaBuckets, x)
	case *wasmv3.PluginConfig:
		var sv wrapperspb.StringValue
		require.NoError(t, x.GetConfiguration().UnmarshalTo(&sv), "%s: the filter's configuration is a StringValue", name)
		ec.plugins = append(ec.plugins, []byte(sv.Value))
	}
	if strings.HasSuffix(string(full), "filters.http.ratelimit.v3.RateLimit") {
		ec.domains = append(ec.domains, m.Get(m.Descriptor().Fields().ByName("domain")).String())
	}
	if full == "envoy.config.route.v3.RateLimit.Action.RequestHeaders" {
		ec.actions = append(ec.actions, m.Get(m.Descriptor().Fields().ByName("descriptor_key")).String())
	}
	if full == "envoy.config.route.v3.RateLimit.Action.RemoteAddress" {
		ec.actions = append(ec.actions, "remote_address")
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && (fd.Name() == "cluster" || fd.Name() == "cluster_name") &&
			full != "envoy.config.endpoint.v3.ClusterLoadAssignment":
			ec.references = append(ec.references, string(full)+"."+string(fd.Name())+": "+v.String())
		case full == "envoy.config.route.v3.WeightedCluster.ClusterWeight" && fd.Name() == "name":
			ec.references = append(ec.references, string(full)+".name: "+v.String())
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(t, name, l.Get(i).Message(), ec)
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					walk(t, name, mv.Message(), ec)
				}
				return true
			})
		case fd.Kind() == protoreflect.MessageKind:
			walk(t, name, v.Message(), ec)
		}
		return true
	})
}

// loadBootstrap decodes an Envoy configuration file as Envoy reads it (a
// bootstrap v3 in YAML) and checks it.
func loadBootstrap(t *testing.T, path string) envoyConfig {
	t.Helper()
	var b bootstrapv3.Bootstrap
	require.NoError(t, protojson.Unmarshal(yamlToJSON(t, path, read(t, path)), &b), "%s: not an Envoy bootstrap v3", path)
	ec := envoyConfig{clusters: map[string]bool{}}
	for _, c := range b.GetStaticResources().GetClusters() {
		require.False(t, ec.clusters[c.Name], "%s: cluster %q defined twice", path, c.Name)
		ec.clusters[c.Name] = true
		if la := c.GetLoadAssignment(); la != nil {
			require.Equal(t, c.Name, la.ClusterName, "%s: cluster %q's load_assignment names another", path, c.Name)
		}
	}
	inspect(t, path, &b, &ec)
	return ec
}

// pluginClusters returns the clusters a filter configuration's global
// rules call out to.
func pluginClusters(t *testing.T, name string, cfg []byte) []string {
	t.Helper()
	var c struct {
		Rules []struct {
			Global *struct {
				Cluster string `json:"cluster"`
			} `json:"global"`
		} `json:"rules"`
	}
	require.NoError(t, json.Unmarshal(cfg, &c), "%s: the filter's configuration", name)
	var out []string
	for _, r := range c.Rules {
		if r.Global != nil {
			out = append(out, r.Global.Cluster)
		}
	}
	return out
}

func TestEnvoyWasmFilter(t *testing.T) {
	const path = "examples/envoy/wasm-filter.yaml"
	ec := loadBootstrap(t, path)
	require.Len(t, ec.plugins, 1)
	for _, cl := range pluginClusters(t, path, ec.plugins[0]) {
		ec.references = append(ec.references, "rules[].global.cluster: "+cl)
	}
	checkReferences(t, path, ec)
	// proxywasm TestExampleConfigurations loads its plugin configuration.
}

// The RLQS example: the filter's server is a defined cluster, and an Envoy
// without a live assignment denies (the condition of docs/rlqs.md's bound).
func TestEnvoyRLQS(t *testing.T) {
	const path = "examples/envoy/rlqs.yaml"
	ec := loadBootstrap(t, path)
	checkReferences(t, path, ec)
	require.Len(t, ec.quotaBuckets, 1, "%s: one bucket settings action", path)
	bs := ec.quotaBuckets[0]
	require.Equal(t, "DENY_ALL", bs.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String(), "%s: no_assignment_behavior", path)
	require.Equal(t, "DENY_ALL", bs.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String(), "%s: expired_assignment_behavior", path)
}

func TestEnvoyRateLimitService(t *testing.T) {
	const path = "examples/envoy/rate-limit-service.yaml"
	ec := loadBootstrap(t, path)
	checkReferences(t, path, ec)

	// The domain the filter sends is configured in examples/ratelimit (the
	// -rls-config directory the README and docs/envoy.md run), and every descriptor key its
	// routes send is one of that domain's.
	cfg, err := rls.LoadConfig(filepath.Join(root, "examples/ratelimit"))
	require.NoError(t, err, "examples/ratelimit: the -rls-config of the run lines in README.md and docs/envoy.md")
	require.Len(t, ec.domains, 1)
	files, err := filepath.Glob(filepath.Join(root, "examples/ratelimit/*.yaml"))
	require.NoError(t, err)
	var keys []string
	for _, f := range files {
		var d struct {
			Domain      string
			Descriptors []struct{ Key string }
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, &d))
		if d.Domain == ec.domains[0] {
			for _, x := range d.Descriptors {
				keys = append(keys, x.Key)
			}
		}
	}
	require.NotEmpty(t, keys, "no file of examples/ratelimit configures the domain %q the filter sends", ec.domains[0])
	require.NotEmpty(t, ec.actions)
	for _, a := range ec.actions {
		require.Contains(t, keys, a, "%s: a route sends the descriptor key %q, which domain %q does not configure", path, a, ec.domains[0])
	}
	_ = cfg
}

func checkReferences(t *testing.T, path string, ec envoyConfig) {
	t.Helper()
	require.NotEmpty(t, ec.references, "%s: names no cluster", path)
	for _, r := range ec.references {
		_, cl, _ := strings.Cut(r, ": ")
		require.True(t, ec.clusters[cl], "%s: %s, a cluster it does not define (defined: %v)", path, r, slices.Sorted(func(yield func(string) bool) {
			for k := range ec.clusters {
				if !yield(k) {
					return
				}
			}
		}))
	}
}

// wasmPlugin is Istio's WasmPlugin (extensions.istio.io/v1alpha1) as far as
// the example uses it; decoding refuses any other field.
type wasmPlugin struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		URL             string         `yaml:"url"`
		ImagePullPolicy string         `yaml:"imagePullPolicy"`
		Type            string         `yaml:"type"`
		Phase           string         `yaml:"phase"`
		FailStrategy    string         `yaml:"failStrategy"`
		PluginConfig    map[string]any `yaml:"pluginConfig"`
	} `yaml:"spec"`
}

func TestIstioWasmPlugin(t *testing.T) {
	const path = "examples/istio/wasm-plugin.yaml"
	var p wasmPlugin
	dec := yaml.NewDecoder(strings.NewReader(string(read(t, path))))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&p), "%s: a field Istio's WasmPlugin does not have", path)
	require.Equal(t, "extensions.istio.io/v1alpha1", p.APIVersion)
	require.Equal(t, "WasmPlugin", p.Kind)
	require.NotEmpty(t, p.Metadata.Name)
	require.NotEmpty(t, p.Spec.Selector.MatchLabels)
	// Istio's enums (istio.io/api extensions/v1alpha1/wasm.proto).
	require.Contains(t, []string{"", "IfNotPresent", "Always"}, p.Spec.ImagePullPolicy)
	require.Contains(t, []string{"", "HTTP", "NETWORK"}, p.Spec.Type)
	require.Contains(t, []string{"", "AUTHN", "AUTHZ", "STATS"}, p.Spec.Phase)
	require.Contains(t, []string{"", "FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD"}, p.Spec.FailStrategy)

	// The image is the one deploy/build-image.sh builds for the latest
	// release in CHANGELOG.md.
	m := regexp.MustCompile(`(?m)^registry=\$\{RL_REGISTRY:-([^}]+)\}$`).FindSubmatch(read(t, "deploy/build-image.sh"))
	require.NotNil(t, m, "build-image.sh's default registry")
	rel := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(read(t, "CHANGELOG.md"))
	require.NotNil(t, rel, "CHANGELOG.md has no release")
	require.Equal(t, fmt.Sprintf("oci://%s/rl-filter:v%s", m[1], rel[1]), p.Spec.URL)

	// pluginConfig reaches the filter as JSON.
	cfg, err := json.Marshal(p.Spec.PluginConfig)
	require.NoError(t, err)
	require.Empty(t, pluginClusters(t, path, cfg), "a global rule in Istio names a cluster as Istio does: outbound|port||host")
	// proxywasm TestExampleConfigurations loads it.
}

func TestRateLimitConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "examples/ratelimit/*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = rls.ParseDomain(filepath.Base(f), b)
		require.NoError(t, err)
	}
}

var (
	fence  = regexp.MustCompile("(?s)```yaml\n(.*?)```\n")
	marker = regexp.MustCompile(`<!-- (the file|a fragment of) (examples/[a-z0-9/._-]+\.yaml) -->\n$`)
)

// Every Envoy, Istio or rate limit service configuration in the Markdown
// files is marked as a copy of an example file, and is that file byte for
// byte, or as a fragment of one, and decodes as what it is.
func TestDocsShowTheExamples(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	require.NoError(t, err)
	shown := map[string]bool{}
	for _, md := range strings.Fields(string(out)) {
		if strings.Contains(md, "/testdata/") {
			continue // third-party files, as they are
		}
		text := string(read(t, md))
		for _, loc := range fence.FindAllStringSubmatchIndex(text, -1) {
			block := text[loc[2]:loc[3]]
			envoy := strings.Contains(block, "type.googleapis.com/envoy.") || strings.Contains(block, "static_resources:")
			istio := strings.Contains(block, ".istio.io/")
			rlsCfg := strings.HasPrefix(block, "domain:")
			m := marker.FindStringSubmatch(text[:loc[0]])
			where := fmt.Sprintf("%s, the yaml block at byte %d", md, loc[0])
			if !envoy && !istio {
				if rlsCfg && m == nil {
					_, err := rls.ParseDomain(where, []byte(block))
					require.NoError(t, err, "%s: a rate limit service configuration that does not load", where)
				}
				if m == nil {
					continue
				}
			}
			require.NotNil(t, m, "%s: an Envoy or Istio configuration not marked as an example file's copy (<!-- the file examples/....yaml -->) or fragment", where)
			shown[m[2]] = true
			switch m[1] {
			case "the file":
				require.Equal(t, string(read(t, m[2])), block, "%s: differs from %s, which the tests check", where, m[2])
			case "a fragment of":
				fragment(t, where, m[2], block)
			}
		}
	}
	examples, err := exec.Command("git", "-C", root, "ls-files", "examples/").Output()
	require.NoError(t, err)
	for _, f := range strings.Fields(string(examples)) {
		if strings.HasSuffix(f, ".yaml") && !strings.HasPrefix(f, "examples/ratelimit/") {
			require.True(t, shown[f], "%s is shown in no Markdown file", f)
		}
	}
}

// fragment checks a block that shows part of an example: a list of HTTP
// filters, decoded and validated, whose clusters the example defines.
func fragment(t *testing.T, where, example string, block string) {
	t.Helper()
	var list []json.RawMessage
	require.NoError(t, json.Unmarshal(yamlToJSON(t, where, []byte(block)), &list), "%s: a fragment is a list of HTTP filters", where)
	ec := loadBootstrap(t, example)
	frag := envoyConfig{clusters: ec.clusters}
	for _, raw := range list {
		var f hcmv3.HttpFilter
		require.NoError(t, protojson.Unmarshal(raw, &f), "%s: not an HTTP filter", where)
		inspect(t, where, &f, &frag)
	}
	checkReferences(t, where, frag)
}
