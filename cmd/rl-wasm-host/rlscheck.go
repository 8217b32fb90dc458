package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/rlcore/rl/internal/frontend/rls"
)

// checkRLSConfig is -rls-check-config: it loads path as -rls-config does
// (a file, or a directory of them) and says whether envoyproxy/ratelimit
// loads it too, by exit status: 0 valid and portable; 1 valid, but using
// rl's extensions, each listed, which envoyproxy/ratelimit refuses; 2 not
// loadable here, each mistake listed.
func checkRLSConfig(path string, stdout, stderr io.Writer) int {
	cfg, err := rls.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ext := cfg.Portability()
	if len(ext) == 0 {
		fmt.Fprintf(stdout, "%s: valid (%s); portable: uses no rl extension, so envoyproxy/ratelimit loads it too\n", path, domains(len(cfg.Domains)))
		return 0
	}
	fmt.Fprintf(stdout, "%s: valid (%s); not portable: envoyproxy/ratelimit refuses rl's extensions (%s), used %d time(s):\n",
		path, domains(len(cfg.Domains)), strings.Join(rls.ExtensionFields(), ", "), len(ext))
	for _, e := range ext {
		fmt.Fprintln(stdout, "  "+e)
	}
	return 1
}

func domains(n int) string {
	if n == 1 {
		return "1 domain"
	}
	return fmt.Sprintf("%d domains", n)
}
