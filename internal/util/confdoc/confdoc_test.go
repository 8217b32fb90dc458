package confdoc

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/ruleconfig"
)

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		want string
	}{
		{reflect.TypeFor[ruleconfig.String](), "string"},
		{reflect.TypeFor[ruleconfig.Int](), "integer"},
		{reflect.TypeFor[ruleconfig.Bool](), "boolean"},
		{reflect.TypeFor[ruleconfig.Strings](), "list of strings"},
		{reflect.TypeFor[ruleconfig.List[ruleconfig.Limit]](), "list of objects"},
		{reflect.TypeFor[ruleconfig.Limit](), "object"},
	} {
		got, _ := describe(c.typ)
		require.Equal(t, c.want, got, c.typ.String())
	}
}

// TestPage: an override's page lists its own fields, those of the limit
// fields it embeds, and its list of limits with theirs, each with the
// comment in the source.
func TestPage(t *testing.T) {
	page, err := Page("../../..", "", reflect.TypeFor[ruleconfig.Override](), "<!-- h -->\n\n", "T", "Intro.")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(page, "<!-- h -->\n\n# T\n\nIntro.\n\n| field | type | meaning |\n|---|---|---|\n| `key` | string | The one key"), page)
	for _, row := range []string{"| `key_prefix` | string |", "| `strategy` | string |", "| `limits` | list of objects |", "| `limits[].name` | string | The limit's name"} {
		require.Contains(t, page, "\n"+row)
	}
	_, err = Page("../../..", "", reflect.TypeFor[struct{ X ruleconfig.Int }](), "", "T", "")
	require.NoError(t, err, "a field without a json name is no configuration field")
}
