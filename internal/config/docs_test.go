package config

import (
	"os"
	"strings"
	"testing"
)

// TestOperationsDocListsEveryKey: the settings section of docs/operations.md has a table row for
// every setting, starting with its file key and its flag ("| `key` | `--flag` |", "—" for a missing
// one; the flag cell may go on with its argument), and no row for a setting that does not exist.
func TestOperationsDocListsEveryKey(t *testing.T) {
	text := operationsSection(t, "## Settings: flags, configuration file, environment")
	rows := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") && strings.TrimSpace(cells[1]) != "—" {
			continue
		}
		flag := strings.TrimSpace(cells[2])
		if strings.HasPrefix(flag, "`--") { // "`--broker-addr HOST:PORT`" names --broker-addr
			flag = "`" + strings.Fields(strings.Trim(flag, "`"))[0] + "`"
		}
		rows[strings.TrimSpace(cells[1])+" "+flag] = true
	}
	want := map[string]bool{}
	for _, k := range Keys() {
		name, flag := "—", "—"
		if k.Name != "" {
			name = "`" + k.Name + "`"
		}
		if k.Flag != "" {
			flag = "`--" + k.Flag + "`"
		}
		want[name+" "+flag] = true
		if !rows[name+" "+flag] {
			t.Errorf("docs/operations.md has no row starting | %s | %s |", name, flag)
		}
	}
	for row := range rows {
		if !want[row] && !strings.Contains(row, "`--config") {
			t.Errorf("docs/operations.md has a row for %s, which is not a setting", row)
		}
	}
}

// TestOperationsDocListsIgnoredKeys: the section of docs/operations.md on Pulsar keys Meridian
// knows and ignores names every one of them (a family by its prefix and "*").
func TestOperationsDocListsIgnoredKeys(t *testing.T) {
	const section = "## Pulsar keys Meridian knows and ignores"
	text := operationsSection(t, section)
	for key := range ignoredKeys {
		if !strings.Contains(text, "`"+key+"`") {
			t.Errorf("docs/operations.md, %q, does not name `%s`", section, key)
		}
	}
	for _, f := range ignoredFamilies {
		if !strings.Contains(text, "`"+f.prefix+"*`") {
			t.Errorf("docs/operations.md, %q, does not name `%s*`", section, f.prefix)
		}
	}
}

// operationsSection returns the text of a "## " section of docs/operations.md.
func operationsSection(t *testing.T, section string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(doc), "\n"+section+"\n")
	if !ok {
		t.Fatalf("docs/operations.md has no section %q", section)
	}
	text, _, _ = strings.Cut(text, "\n## ")
	return text
}
