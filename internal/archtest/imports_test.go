// Package archtest keeps the dependency direction of docs/design.md, "Dependency rules": lower layers never import higher
// ones. It parses the import clauses of every non-test Go file in the root module and fails on a
// forbidden edge, direct or transitive.
package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/meridian-mq/meridian"

// rule forbids packages under from (module-relative prefix) to depend on anything under the listed
// prefixes. A prefix ending in "/" matches a subtree; "net" and "net/http" name standard packages and
// are checked as direct imports only (sockets and HTTP stay out of the core). stdlibOnly allows the
// standard library and nothing else, of the module or not.
type rule struct {
	from       string
	forbidden  []string
	noStdlib   []string
	stdlibOnly bool
}

// sharedValues is the leaf of value types every layer passes to the others: any package may
// depend on it, whatever its rule forbids, and it depends on the standard library only.
const sharedValues = "internal/mtypes"

var internalAll = []string{"internal/", "adminapi", "brokertest", "cmd/"}

var rules = []rule{
	{from: sharedValues, forbidden: []string{"internal/", "adminapi", "brokertest", "cmd/"}, stdlibOnly: true},
	{from: "internal/wire", forbidden: without(internalAll, "internal/wire")},
	{from: "internal/naming", forbidden: internalAll},
	{from: "internal/crc32c", forbidden: internalAll},                                    // a leaf any layer may use (storage, replication)
	{from: "internal/handover", forbidden: internalAll},                                  // the wire format of a bundle hand-over between brokers; node speaks it
	{from: "internal/console", forbidden: internalAll},                                   // the page and its history; node adapts the data to it
	{from: "internal/poll", forbidden: internalAll},                                      // tests' one way to wait for a condition
	{from: "internal/freeport", forbidden: internalAll},                                  // tests' loopback ports for the servers they start
	{from: "internal/transcript", forbidden: internalAll},                                // tests' runner of state-machine transcripts
	{from: "internal/failover", forbidden: []string{"internal/", "brokertest", "cmd/"}},  // the failover checklist over the public admin API (meridianctl and the console)
	{from: "internal/buildinfo", forbidden: []string{"internal/", "brokertest", "cmd/"}}, // a leaf over the public types (adminapi)
	{from: "internal/config", forbidden: internalAll},                                    // settings and their sources; node and cmd read them
	{from: "internal/tlsreload", forbidden: internalAll},                                 // TLS identities from files; node, client and cmd use it
	// authentication: credentials to identities; server and node use it, it uses only the settings
	{from: "internal/auth", forbidden: []string{"internal/wire", "internal/naming", "internal/crc32c", "internal/metadata", "internal/storage",
		"internal/catalog", "internal/broker", "internal/client", "internal/replication", "internal/server", "internal/admin",
		"internal/node", "internal/schema", "internal/tlsreload", "internal/console", "internal/buildinfo", "adminapi", "cmd/", "brokertest"}},
	{from: "internal/metadata", forbidden: without(internalAll, "internal/metadata")},
	{from: "internal/cluster", forbidden: without(internalAll, "internal/metadata")}, // bundles, ownership and lookup decisions over the metadata store
	{from: "internal/storage", forbidden: without(internalAll, "internal/storage")},
	{from: "adminapi", forbidden: without(internalAll, "adminapi")},
	{from: "internal/client", forbidden: without(internalAll, "internal/client", "internal/wire", "internal/naming")},
	{from: "internal/catalog", forbidden: []string{"internal/broker", "internal/server", "internal/admin", "internal/node", "internal/replication", "internal/storage", "cmd/", "brokertest"}},
	{from: "internal/broker", forbidden: []string{"internal/server", "internal/admin", "internal/node", "internal/metadata", "internal/catalog", "internal/replication", "internal/client", "cmd/", "brokertest"},
		noStdlib: []string{"net", "net/http"}},
	{from: "internal/replication", forbidden: []string{"internal/broker", "internal/server", "internal/admin", "internal/node", "internal/storage", "cmd/", "brokertest"}},
	{from: "internal/server", forbidden: []string{"internal/admin", "internal/node", "cmd/", "brokertest"}},
	{from: "internal/admin", forbidden: []string{"internal/broker", "internal/server", "internal/node", "internal/storage", "cmd/", "brokertest"}},
	{from: "cmd/meridianctl", forbidden: []string{"internal/broker", "internal/server", "internal/node", "internal/storage", "internal/metadata", "internal/catalog", "internal/replication", "brokertest"}},
}

func without(list []string, keep ...string) []string {
	var out []string
	for _, p := range list {
		if p == "internal/" {
			continue // replaced by the explicit internal packages below
		}
		out = append(out, p)
	}
	for _, p := range []string{"internal/wire", "internal/naming", "internal/metadata", "internal/storage", "internal/catalog",
		"internal/broker", "internal/client", "internal/replication", "internal/server", "internal/admin", "internal/node", "adminapi"} {
		if !contains(keep, p) {
			out = append(out, p)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// under reports whether module-relative package path p is prefix or inside it.
func under(p, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(p, prefix)
	}
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]map[string]bool{} // module-relative package -> imports (module-relative, or std path)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tests" || name == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == module {
				p = "."
			} else if strings.HasPrefix(p, module+"/") {
				p = strings.TrimPrefix(p, module+"/")
			}
			imports[pkg][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}

	for _, v := range violations(imports, rules) {
		t.Error(v)
	}
}

// violations lists the edges of the import graph (module-relative package -> imports) that rules
// forbid.
func violations(imports map[string]map[string]bool, rules []rule) []string {
	var pkgs []string
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			if !under(p, r.from) {
				continue
			}
			for _, std := range r.noStdlib {
				if imports[p][std] {
					out = append(out, fmt.Sprintf("%s imports %q: %s must stay free of sockets and HTTP", p, std, r.from))
				}
			}
			if r.stdlibOnly {
				for imp := range imports[p] {
					if _, local := imports[imp]; local || !isStdlib(imp) {
						out = append(out, fmt.Sprintf("%s imports %q: %s imports the standard library only", p, imp, r.from))
					}
				}
			}
			for dep, via := range closure(imports, p) {
				if under(dep, sharedValues) {
					continue // everyone may use the shared values (its own rule keeps it a leaf)
				}
				for _, bad := range r.forbidden {
					if under(dep, bad) && !under(dep, r.from) {
						out = append(out, fmt.Sprintf("%s depends on %s (via %s): forbidden by docs/design.md (Dependency rules)", p, dep, via))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// isStdlib reports whether import path p names a standard package (no dot in its first element).
func isStdlib(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

// closure returns every module package p depends on, each with the package that imports it first.
func closure(imports map[string]map[string]bool, p string) map[string]string {
	seen := map[string]string{}
	queue := []string{p}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for dep := range imports[cur] {
			if _, local := imports[dep]; !local {
				continue // standard library or a third-party module
			}
			if _, ok := seen[dep]; ok || dep == p {
				continue
			}
			seen[dep] = cur
			queue = append(queue, dep)
		}
	}
	return seen
}

// The shared-values leaf may be imported by every package, the strictest leaves too, and imports
// nothing but the standard library itself; the other rules still hold around it.
func TestSharedValuesRule(t *testing.T) {
	graph := func(edges ...string) map[string]map[string]bool {
		g := map[string]map[string]bool{}
		for _, e := range edges {
			from, to, _ := strings.Cut(e, " -> ")
			if g[from] == nil {
				g[from] = map[string]bool{}
			}
			if to != "" {
				g[from][to] = true
				if !isStdlib(to) || strings.HasPrefix(to, "internal/") || to == "adminapi" {
					if g[to] == nil {
						g[to] = map[string]bool{}
					}
				}
			}
		}
		return g
	}
	ok := graph("internal/naming -> internal/mtypes", "internal/storage -> internal/mtypes", "internal/replication -> internal/mtypes",
		"internal/broker -> internal/mtypes", "internal/wire -> internal/mtypes", "internal/mtypes -> strconv", "internal/mtypes -> fmt")
	if v := violations(ok, rules); len(v) > 0 {
		t.Fatalf("allowed graph refused: %v", v)
	}
	for _, bad := range [][]string{
		{"internal/mtypes -> internal/naming"},
		{"internal/mtypes -> adminapi"},
		{"internal/mtypes -> google.golang.org/protobuf/proto"},
		{"internal/replication -> internal/mtypes", "internal/mtypes -> internal/storage"}, // no way around a rule through the leaf
	} {
		if v := violations(graph(bad...), rules); len(v) == 0 {
			t.Errorf("%v accepted", bad)
		}
	}
}
